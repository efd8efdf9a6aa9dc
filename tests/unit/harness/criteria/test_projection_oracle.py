"""The projection oracle on hand-built traces: the world's events decide what the UI must show."""

from __future__ import annotations

from harness.contract import Outcome, Permission, Projection, RecoveryAction, execution_id_for
from harness.criteria import facts as F
from harness.criteria import projection_oracle as O

from tracebuilder import TraceBuilder, call, op_view, rule, session

W = {"path": "/repo/a.txt", "content": "x"}


def _op(b, key=("s1", "c1")):
    return F.operations(b.build())[key]


def _written(**row):
    b = TraceBuilder("s1")
    b.model("s1", [call("c1", "write_file", W)])
    index = b.executed("s1", "c1", "write_file", W, **row) if row is not None else None
    return b, index


# --------------------------------------------------------------------------- world_result


def test_a_call_the_world_never_ran_is_not_started():
    b = TraceBuilder("s1")
    b.model("s1", [call("c1", "write_file", W)])
    result = O.world_result(b.build(), _op(b), b.last + 1)
    assert result.outcome == "not_started" and not result.ran and result.failure_kind is None


def test_the_last_run_decides_succeeded_failed_or_unknown():
    for row, outcome, kind in (({}, "succeeded", None),
                               ({"status": "error", "error_kind": "failed"}, "failed", "failed"),
                               ({"status": "error", "error_kind": "param_error"}, "failed", "param_error"),
                               ({"status": "error", "error_kind": "unknown"}, "unknown", "unknown"),
                               ({"status": "error", "error_kind": "permission_denied",
                                 "escalation_requested": True}, "failed", "permission_denied")):
        b, index = _written(**row)
        result = O.world_result(b.build(), _op(b), b.last + 1)
        assert (result.outcome, result.failure_kind) == (outcome, kind), row
        assert index in result.evidence


def test_a_refused_start_is_not_started_but_a_refused_retry_after_a_run_failed():
    b = TraceBuilder("s1")
    b.model("s1", [call("c1", "write_file", W)])
    b.unavailable("s1", "c1", "write_file", W)
    assert O.world_result(b.build(), _op(b), b.last + 1).outcome == "not_started"
    b.executed("s1", "c1", "write_file", W, status="error", error_kind="transient")
    b.unavailable("s1", "c1", "write_file", W)
    result = O.world_result(b.build(), _op(b), b.last + 1)
    assert (result.outcome, result.failure_kind) == ("failed", "transient")


def test_a_crash_between_start_and_save_makes_it_unknown_but_not_after_the_save():
    b, _ = _written()
    crash = b.crash("after_tool_returned", context={"session_id": "s1", "tool_call_id": "c1"})
    result = O.world_result(b.build(), _op(b), b.last + 1)
    assert result.outcome == "unknown" and result.reconciliation_required and crash in result.evidence
    b2, _ = _written()
    b2.crash("after_result_saved", context={"session_id": "s1", "tool_call_id": "c1"})
    assert O.world_result(b2.build(), _op(b2), b2.last + 1).outcome == "succeeded"


def test_the_moment_matters():
    b, index = _written(status="error", error_kind="transient")
    b.executed("s1", "c1", "write_file", W)
    trace = b.build()
    assert O.world_result(trace, _op(b), index + 1).outcome == "failed"
    assert O.world_result(trace, _op(b), b.last + 1).outcome == "succeeded"


# --------------------------------------------------------------------------- waits


def test_a_prompt_is_pending_until_answered_and_unknowable_after_a_rule_change():
    b = TraceBuilder(session("s1", rules=[("ask", "write_file")]))
    b.model("s1", [call("c1", "write_file", W)])
    wait_id = b.prompt("s1", "c1", "write_file", W)
    assert O.wait_pending(b.build(), _op(b), b.last + 1) is True
    b.update_rules("s1", [rule("deny", "write_file")], 2)
    assert O.wait_pending(b.build(), _op(b), b.last + 1) is None
    b.answer(wait_id, approve=False)
    assert O.wait_pending(b.build(), _op(b), b.last + 1) is False


# --------------------------------------------------------------------------- expected_view


def test_a_hard_constraint_denial_offers_nothing_whatever_the_store_says():
    hard = session("s1", hard_constraints=[("deny", "write_file", "/repo/*", "path")])
    b = TraceBuilder(hard)
    b.model("s1", [call("c1", "write_file", W)])
    store = op_view("s1", "c1", "write_file", W, permission="deny", decided_by="explicit_deny")
    view = O.expected_view(b.build(), _op(b), b.last + 1, store)
    assert (view.status, view.actions, view.decided_by) == ("denied", frozenset(), "hard_constraint")
    assert not view.store_used


def test_a_classifier_denial_takes_its_source_from_the_store_and_offers_a_rule_change():
    b = TraceBuilder(session("s1", mode="auto"))
    b.model("s1", [call("c1", "write_file", W)])
    store = op_view("s1", "c1", "write_file", W, permission="deny", decided_by="classifier")
    view = O.expected_view(b.build(), _op(b), b.last + 1, store)
    assert (view.status, view.actions) == ("denied", frozenset({"change_rules"}))
    assert view.store_used


def test_an_operation_that_ran_needs_no_store_and_an_unknown_one_offers_only_reconcile():
    b, _ = _written(status="error", error_kind="unknown")
    view = O.expected_view(b.build(), _op(b), b.last + 1, None)
    assert (view.status, view.actions, view.permission) == (
        "reconciliation_required", frozenset({"reconcile"}), "allow")


def test_nothing_is_expected_for_an_undecided_call_without_a_record():
    b = TraceBuilder("s1")
    b.model("s1", [call("c1", "write_file", W)])
    assert O.expected_view(b.build(), _op(b), b.last + 1, None) is None


# --------------------------------------------------------------------------- allowed actions


def test_which_actions_each_status_may_offer():
    assert O.action_problems("failed", frozenset({"retry"}), False)
    assert O.action_problems("reconciliation_required", frozenset({"retry", "reconcile"}), False)
    assert O.action_problems("denied", frozenset({"retry"}), False)
    assert O.action_problems("denied", frozenset({"approve"}), False)
    assert O.action_problems("denied", frozenset({"change_rules"}), True)
    assert O.action_problems("bogus", frozenset(), False)
    assert not O.action_problems("not_executed", frozenset({"retry"}), False)
    assert not O.action_problems("denied", frozenset({"change_rules", "edit_args"}), False)
    assert not O.action_problems("awaiting_approval", frozenset({"approve", "reject"}), False)


def test_every_status_of_the_contract_rule_is_in_the_vocabulary():
    from harness.contract import DecisionSource, FailureKind, Outcome as Oc, expected_projection
    for permission in Permission:
        for outcome in Oc:
            for source in DecisionSource:
                for kind in (None, *FailureKind):
                    for reconcile in (False, True):
                        for pending in (False, True):
                            status, actions = expected_projection(permission, outcome, source, kind,
                                                                  reconcile, pending)
                            hard = source is DecisionSource.HARD_CONSTRAINT
                            assert not O.action_problems(status, frozenset(a.value for a in actions), hard)


# --------------------------------------------------------------------------- publications


def _published(outcome, status, actions=(), reason=""):
    return Projection("s1", execution_id_for("s1", "c1"), "c1", Permission.ALLOW, Outcome(outcome), status,
                      reason, tuple(RecoveryAction(a) for a in actions))


def test_a_publication_is_judged_against_the_world_not_the_store():
    b, _ = _written(status="error", error_kind="failed")
    b.publish(_published("succeeded", "succeeded"))
    trace = b.build()
    pub = O.publications(trace)[0]
    expected, problems = O.judge_publication(trace, _op(b), pub, None)
    assert expected.status == "failed"
    assert any("the world says 'failed'" in p for p in problems)


def test_a_failure_shown_without_a_reason_is_a_problem():
    b, _ = _written(status="error", error_kind="failed")
    b.publish(_published("failed", "failed", ("edit_args",)))
    trace = b.build()
    _, problems = O.judge_publication(trace, _op(b), O.publications(trace)[0], None)
    assert problems == ["a failed operation is shown without a reason"]
    b2, _ = _written(status="error", error_kind="failed")
    b2.publish(_published("failed", "failed", ("edit_args",), reason="disk full"))
    trace2 = b2.build()
    assert O.judge_publication(trace2, _op(b2), O.publications(trace2)[0], None)[1] == []


def test_publications_of_an_operation_by_call_id_or_execution_id():
    b, _ = _written()
    b.publish(_published("succeeded", "succeeded"))
    b.publish(Projection("s1", execution_id_for("s1", "c1"), "", Permission.ALLOW, Outcome.SUCCEEDED,
                         "succeeded", "", ()))
    trace = b.build()
    pubs = O.publications(trace)
    assert len(O.publications_of(pubs, _op(b))) == 2
    assert O.op_of(F.operations(trace), pubs[1]).tool_call_id == "c1"


def test_a_crash_naming_no_operation_is_attributed_to_the_latest_one_of_the_session():
    b = TraceBuilder("s1")
    b.model("s1", [call("c0", "write_file", W)])
    b.executed("s1", "c0", "write_file", W)
    b.model("s1", [call("c1", "write_file", W)])
    b.crash("after_start_recorded", context={})
    trace = b.build()
    ops = F.operations(trace)
    assert O.world_result(trace, ops[("s1", "c1")], b.last + 1).outcome == "unknown"
    assert O.world_result(trace, ops[("s1", "c0")], b.last + 1).outcome == "succeeded"


def test_world_result_remembered_by_attempts_and_crashes_before_equals_the_computed_one():
    """The memo keys on how many attempts and crashes lie before ``before``: over real runs
    with crashes mid-execution, every operation asked at every event gives what the
    computation gives."""
    from pathlib import Path

    from harness.criteria import facts as F
    from harness.criteria import projection_oracle as PO
    from harness.implementations.specs import resolve
    from harness.running.runner import run_scenario
    from harness.scenarios.loader import load

    root = Path(__file__).resolve().parents[4] / "scenarios" / "l4"
    asked = 0
    for name in ("crash_after_start_recorded.toml", "crash_after_tool_returned.toml",
                 "crash_after_failing_tool_returned.toml"):
        trace = run_scenario(resolve("reference"), load(root / name), 0).trace
        assert trace.crashes()  # the hard case: results cut by a crash
        for op in F.operations(trace).values():
            for before in range(len(trace.events) + 1):
                assert PO.world_result(trace, op, before) == PO._world_result(trace, op, before)
                asked += 1
    assert asked > 100


# --------------------------------------------------------------------------- probe_at


def _probe_at_by_scan(trace, event, label):
    """probe_at's definition, read off the trace by a plain scan."""
    bound = next((e.index for e in trace.events if e.kind == event.kind and e.index > event.index),
                 None)
    return next((p for p in trace.observations if p.label == label and p.index >= event.index
                 and (bound is None or p.index < bound)), None)


def test_probe_at_finds_the_reading_of_each_event_as_a_scan_would():
    import dataclasses

    from harness.trace.record import Kind

    b = TraceBuilder("s1")
    shown = Projection("s1", execution_id_for("s1", "c1"), "c1", Permission.ALLOW,
                       Outcome.SUCCEEDED, "succeeded", "", ())
    first = b.publish(shown)
    b.probe("ui_publish")  # read while the UI received the first publication
    b.model("s1")
    second = b.publish(shown)  # no reading of its own: the third's must not be taken
    third = b.publish(shown)
    b.probe("ui_publish")
    b.observe()
    trace = b.build()
    pubs = [e for e in trace.events if e.kind == Kind.UI_PUBLISH]
    assert [e.index for e in pubs] == [first, second, third]
    found = [O.probe_at(trace, e, "probe:ui_publish") for e in pubs]
    assert found == [_probe_at_by_scan(trace, e, "probe:ui_publish") for e in pubs]
    assert found[0] is not None and found[1] is None and found[2] is not None
    assert O.probe_at(trace, pubs[0], "quiescent") is None
    # readings recorded out of index order (a hand-built trace): the scan's answer still
    shuffled = dataclasses.replace(trace, observations=tuple(reversed(trace.observations)))
    for event in pubs:
        assert O.probe_at(shuffled, event, "probe:ui_publish") is _probe_at_by_scan(
            shuffled, event, "probe:ui_publish")
