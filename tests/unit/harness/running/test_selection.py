"""harness.running.selection: parsing --criteria/--stage, restrict() to not_selected, scenario_failed."""

from __future__ import annotations

import pytest
from suite_fakes import FakeImplementation, FakeScenario, criterion, fake_runner, render_faults

from harness.contract.errors import UsageError
from harness.report.result import CriterionStatus, ScenarioStatus
from harness.running.selection import parse_criteria, parse_stages, restrict, scenario_failed
from harness.running.suite import run_suite

CRITERIA = (criterion("L4.1", "l4"), criterion("L4.3", "l4"), criterion("L1.1", "l1"))


def test_criteria_are_comma_separated_repeatable_case_insensitive_in_catalogue_order():
    assert parse_criteria(["l4.3, L1.1", "L4.3"], CRITERIA) == ("L4.3", "L1.1")
    assert parse_criteria(None, CRITERIA) == ()
    with pytest.raises(UsageError, match=r"unknown criterion id\(s\) L9; valid ids: L4.1, L4.3, L1.1"):
        parse_criteria(["L4.1,L9"], CRITERIA)


def test_stages_are_checked_against_the_catalogue():
    assert parse_stages(["L1", "l4"], CRITERIA) == ("l4", "l1")
    with pytest.raises(UsageError, match=r"unknown stage\(s\) l7; valid stages: l4, l1"):
        parse_stages(["l7"], CRITERIA)


def _result(*scenarios, expectations=None):
    return run_suite(FakeImplementation(), scenarios, 1, criteria=CRITERIA, runner=fake_runner(),
                     fault_renderer=render_faults, expectations=expectations)


BOTH = FakeScenario("both", marks=("L4.1:ok", "L1.1:bad"))


def test_restrict_marks_the_rest_not_selected_and_rejudges_scenarios():
    full = _result(BOTH)
    assert not full.gate_passed and full.scenarios[0].status is ScenarioStatus.FAILED
    partial = restrict(full, {"L4.1"}, "--criteria L4.1")
    by_id = {c.id: c for c in partial.criteria}
    assert by_id["L4.1"] == {c.id: c for c in full.criteria}["L4.1"]  # selected: untouched
    assert by_id["L1.1"].status is CriterionStatus.NOT_SELECTED and by_id["L1.1"].violations == ()
    # L4.3 was not exercised: not selected is not "not exercised", and not a pass either
    assert by_id["L4.3"].status is CriterionStatus.NOT_SELECTED
    assert partial.summary.not_selected == 2 and partial.summary.passed == 1
    assert partial.summary.not_exercised == 0 and partial.summary.failed == 0
    assert partial.scenarios[0].status is ScenarioStatus.PASSED
    assert partial.gate_passed and partial.run.selection == "--criteria L4.1"
    assert set(partial.coverage) == {"L4.1"}


def test_restrict_keeps_a_selected_failure_and_a_selected_idle_criterion():
    partial = restrict(_result(BOTH), {"L1.1", "L4.3"}, "--stage l1")
    by_id = {c.id: c.status for c in partial.criteria}
    assert by_id == {"L4.1": CriterionStatus.NOT_SELECTED, "L4.3": CriterionStatus.NOT_EXERCISED,
                     "L1.1": CriterionStatus.FAILED}
    assert not partial.gate_passed and partial.scenarios[0].status is ScenarioStatus.FAILED


def test_scenario_failed_sees_only_selected_unexpected_failures_and_errors():
    (scenario,) = _result(BOTH).scenarios
    assert scenario_failed(scenario, None)
    assert scenario_failed(scenario, {"L1.1"})
    assert not scenario_failed(scenario, {"L4.1"})
    assert not scenario_failed(scenario, None, {"L1.1": "known"})
    (hung,) = _result(FakeScenario("hung", error="hang", marks=("L4.1:ok",))).scenarios
    assert scenario_failed(hung, {"L4.1"})


def test_run_suite_stop_after_records_the_rest_not_run():
    calls = []
    bad = FakeScenario("bad", marks=("L4.1:bad",))
    later = FakeScenario("later", marks=("L4.1:ok",))
    result = run_suite(FakeImplementation(), (bad, later), 1, criteria=CRITERIA,
                       runner=fake_runner(calls), fault_renderer=render_faults,
                       stop_after=lambda r: scenario_failed(r, None))
    assert [c[0] for c in calls] == ["bad"]
    assert [s.status for s in result.scenarios] == [ScenarioStatus.FAILED, ScenarioStatus.NOT_RUN]
    not_run = result.scenarios[1]
    assert not_run.verdicts == () and not_run.trace_digest == "" and "replay" in not_run.replay
    # criteria are judged over the scenario that ran only
    assert {c.id: c.exercised for c in result.criteria}["L4.1"] == 1
