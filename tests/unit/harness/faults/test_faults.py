"""Fault plans are validated frozen data with canonical hit schedules and readable lines."""

from __future__ import annotations

import dataclasses

import pytest

from harness import contract as c
from harness.contract.errors import ScenarioError
from harness.faults.plan import (
    CATALOGUE,
    Action,
    Fault,
    FaultPlan,
    make_fault,
    parse_hits,
    render,
)
from harness.trace.record import FaultSpec


def test_catalogue_is_every_contract_failpoint_with_a_description():
    assert [info.name for info in CATALOGUE] == list(c.Failpoint)
    assert all(info.description for info in CATALOGUE)


@pytest.mark.parametrize("text, fires, canonical", [
    ("1", {1}, "1"),
    ("3", {3}, "3"),
    ("1,3", {1, 3}, "1,3"),
    ("3, 1", {1, 3}, "1,3"),
    ("2*off->1*crash", {3}, "3"),
    ("2*off->1*on", {3}, "3"),
    ("2*off->crash", {3, 4, 5, 6, 7, 8, 9}, "3+"),
    ("1*on->1*off->on", {1, 3, 4, 5, 6, 7, 8, 9}, "1,3+"),
    ("4+", {4, 5, 6, 7, 8, 9}, "4+"),
])
def test_hit_schedules(text, fires, canonical):
    schedule = parse_hits(text, "crash")
    assert {hit for hit in range(1, 10) if schedule.fires(hit)} == fires
    assert schedule.text() == canonical
    assert parse_hits(canonical).text() == canonical  # the canonical form parses to itself


@pytest.mark.parametrize("text, fragment", [
    ("", "non-empty"),
    ("0", "bad hit '0'"),
    ("x", "bad hit 'x'"),
    ("2*off", "never fires"),
    ("on->1*off", "without a count must come last"),
    ("2*of->1*crash", "bad term '2*of'"),
    ("1*raise", "bad term '1*raise'"),
    ("1+,2+", "only one 'N+'"),
])
def test_bad_hit_expressions_name_the_field_and_the_syntax(text, fragment):
    with pytest.raises(ScenarioError, match="^faults\\[0\\].hits: ") as info:
        parse_hits(text, "crash", "faults[0].hits")
    assert fragment in str(info.value)


def test_faults_are_frozen_canonical_and_trace_ready():
    fault = make_fault("after_result_saved", "2*off->1*crash", "crash")
    assert fault == Fault(c.Failpoint.AFTER_RESULT_SAVED, "3", Action.CRASH)
    assert fault.fires(3) and not fault.fires(2) and not fault.fires(4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fault.hits = "1"  # type: ignore[misc]
    assert fault.spec() == FaultSpec("after_result_saved", "crash", "3", {})


def test_fail_checkpoint_is_raise_at_checkpoint_build():
    fault = make_fault(None, "1*off->1*fail_checkpoint", "fail_checkpoint")
    assert (fault.failpoint, fault.action, fault.hits) == (
        c.Failpoint.DURING_CHECKPOINT_BUILD, Action.RAISE, "2")
    assert fault.params == {"message": "injected checkpoint build failure"}
    with pytest.raises(ScenarioError, match="only applies at during_checkpoint_build"):
        make_fault("after_prepare", "1", "fail_checkpoint")


def test_action_parameters_are_checked_and_normalized():
    rules = make_fault("during_classifier_review", "1", "change_rules",
                       {"session": "s1", "permission_version": 2,
                        "rules": [{"effect": "deny", "tool": "Bash"}]})
    assert rules.params["rules"] == [{"effect": "deny", "tool": "Bash", "pattern": "*", "field": ""}]
    assert rules.rules() == (c.Rule(c.RuleEffect.DENY, "Bash"),)
    assert make_fault("after_prepare", "1", "delay", {"seconds": 3}).params == {"seconds": 3.0}
    assert make_fault("after_prepare", "1", "raise").params == {"message": "injected fault"}
    cases = [
        (("after_prepare", "1", "delay", {"seconds": -1}), "faults[2].seconds: must be a finite"),
        (("after_prepare", "1", "delay", {"seconds": "soon"}), "faults[2].seconds: expected float"),
        (("after_prepare", "1", "cancel", {}), "faults[2].session: required by action cancel"),
        (("after_prepare", "1", "raise", {"message": "x", "seconds": 1}),
         "faults[2].seconds: not a parameter of action raise (valid: message)"),
        (("after_prepare", "1", "change_rules",
          {"session": "s", "permission_version": 2, "rules": [{"effect": "nope", "tool": "x"}]}),
         "faults[2].rules[0].effect: 'nope' is not a RuleEffect (allow, ask, deny)"),
        (("nowhere", "1", "crash", {}), "faults[2].failpoint: 'nowhere' is not a failpoint (valid: after_prepare,"),
        (("after_prepare", "1", "explode", {}), "faults[2].action: 'explode' is not an action (valid: crash, raise,"),
        ((None, "1", "crash", {}), "faults[2].failpoint: missing (valid: after_prepare"),
    ]
    for args, fragment in cases:
        with pytest.raises(ScenarioError) as info:
            make_fault(*args, where="faults[2]")
        assert fragment in str(info.value), str(info.value)


def test_a_plan_finds_the_fault_for_a_hit_and_rejects_overlaps():
    crash = make_fault("after_prepare", "2", "crash")
    delay = make_fault("after_prepare", "1,3+", "delay", {"seconds": 1})
    plan = FaultPlan((crash, delay))
    assert plan.fault_at("after_prepare", 1) == (1, delay)
    assert plan.fault_at("after_prepare", 2) == (0, crash)
    assert plan.fault_at("after_prepare", 7) == (1, delay)
    assert plan.fault_at("after_prompt", 1) is None
    assert len(plan) == 2 and list(plan) == [crash, delay]
    with pytest.raises(ScenarioError, match=r"faults\[1\].hits: fires on the same hit"):
        FaultPlan((make_fault("after_prepare", "2+", "crash"), make_fault("after_prepare", "5", "raise")))


def test_render_gives_one_readable_line_per_fault():
    plan = FaultPlan((
        make_fault("after_result_saved", "1", "crash"),
        make_fault(None, "1,3", "fail_checkpoint"),
        make_fault("before_model_request", "2*off->delay", "delay", {"seconds": 2.5}),
        make_fault("during_classifier_review", "1", "change_rules",
                   {"session": "s1", "permission_version": 2,
                    "rules": [{"effect": "deny", "tool": "Bash", "pattern": "*rm*", "field": "command"}]}),
        make_fault("after_revalidation", "1", "cancel", {"session": "s1"}),
        make_fault("after_prepare", "1", "hold"),
    ))
    assert render(plan) == (
        "fault 1: after_result_saved, hit #1 -> crash (the instance dies there without closing; "
        "restart + recover(); instance B of a concurrent_turn is dropped instead)",
        "fault 2: during_checkpoint_build, hits 1,3 -> raise InjectedFault('injected checkpoint "
        "build failure')",
        "fault 3: before_model_request, every hit from #3 -> delay 2.5s of virtual time",
        "fault 4: during_classifier_review, hit #1 -> change_rules on session s1 -> "
        "permission_version 2 [deny Bash command~*rm*]",
        "fault 5: after_revalidation, hit #1 -> cancel session s1",
        "fault 6: after_prepare, hit #1 -> hold this instance while a second instance runs the "
        "same turn",
    )
    assert render(()) == ()
    assert render(plan.faults) == render(plan)


def test_optional_is_carried_into_the_spec_and_rendered_and_old_traces_load():
    from harness.contract import from_json
    from harness.faults.plan import from_spec, make_fault, render

    fault = make_fault("after_result_saved", "3", "crash", optional=True)
    assert fault.optional and fault.spec().optional
    assert from_spec(fault.spec()) == fault
    assert render([fault])[0].endswith("[optional]")
    assert not make_fault("after_result_saved", "3", "crash").spec().optional
    # a trace written before the field existed reads as a required fault
    old = from_json(FaultSpec, {"failpoint": "after_result_saved", "action": "crash", "hits": "3",
                                "params": {}})
    assert old.optional is False
