"""judge_scenario + combine_judgements: scenarios judged one at a time (in other processes,
through JSON) combine into the RunResult run_suite gives for the same scenarios."""

from __future__ import annotations

import dataclasses
import json

import pytest
from suite_fakes import FakeImplementation, FakeScenario, criterion, fake_runner, render_faults

from harness.contract import Feature, from_json, to_json
from harness.report.result import CriterionStatus, ScenarioStatus
from harness.running.suite import ScenarioJudgement, combine_judgements, judge_scenario, run_suite

S1 = FakeScenario("s1", marks=("A:ok", "E:raise"), failpoints=("after_result_saved",))
S2 = FakeScenario("s2", stage="l1", file="scenarios/l1/two.toml", marks=("A:ok", "B:ok", "B:bad"),
                  failpoints=("after_tool_returned",))
HUNG = FakeScenario("hung", error="hung in run_turn after 20s", marks=("C:ok", "B:bad"))
WEB = dataclasses.replace(S1, id="web", marks=("A:ok", "D:bad"))  # D n/a: web_projection neither declared nor shown
SHOWN = dataclasses.replace(S1, id="shown", marks=("D:ok",), publishes=2)  # shown: D judged
EXCUSED = dataclasses.replace(S1, id="excused", marks=("A:ok", "C:ok", "D:ok"), publishes=1,
                              excused=("fault 1: after_prompt, hit #1 -> crash: did not fire",))
CRITERIA = (criterion("A"), criterion("B", "l1"), criterion("C"),
            criterion("D", required=(Feature.WEB_PROJECTION,)), criterion("E", "m"))
ARGS = dict(criteria=CRITERIA, impl_spec="python:my.mod:make")


def _judged_through_json(scenario) -> ScenarioJudgement:
    judgement = judge_scenario(FakeImplementation(), scenario, 7, runner=fake_runner(),
                               fault_renderer=render_faults, **ARGS)
    return from_json(ScenarioJudgement, json.loads(json.dumps(to_json(judgement))))


def _comparable(result):
    return dataclasses.replace(result, run=dataclasses.replace(result.run, started="", duration_s=0.0))


def test_judged_one_at_a_time_through_json_equals_one_run():
    scenarios = (S1, S2, HUNG, WEB, SHOWN, EXCUSED)
    whole = run_suite(FakeImplementation(), scenarios, 7, runner=fake_runner(),
                      fault_renderer=render_faults, **ARGS)
    parts = combine_judgements(FakeImplementation().info, [_judged_through_json(s) for s in scenarios],
                               7, criteria=CRITERIA, impl_spec="python:my.mod:make")
    assert _comparable(parts) == _comparable(whole)
    statuses = {c.id: c.status for c in parts.criteria}
    assert statuses == {"A": CriterionStatus.PASSED, "B": CriterionStatus.FAILED,
                        "C": CriterionStatus.NOT_EXERCISED, "D": CriterionStatus.PASSED,
                        "E": CriterionStatus.ERROR}
    # the excerpt travelled with the judgement although the trace did not
    b = next(c for c in parts.criteria if c.id == "B")
    assert [v.scenario for v in b.violations] == ["s2", "hung"]
    assert any('"B:bad"' in line for line in b.violations[0].excerpt)
    assert [s.status for s in parts.scenarios] == [ScenarioStatus.FAILED, ScenarioStatus.FAILED,
                                                   ScenarioStatus.ERROR, ScenarioStatus.PASSED,
                                                   ScenarioStatus.PASSED, ScenarioStatus.PASSED]
    # the behaviour that shows a feature travels too; D:bad where it was not shown is n/a
    by_id = {s.id: s for s in parts.scenarios}
    assert by_id["web"].features_shown == () and by_id["shown"].features_shown == ("web_projection",)
    assert {v.criterion_id: v.status for v in by_id["web"].verdicts}["D"] == "not_applicable"
    assert parts.features_shown == ("web_projection",)
    assert parts.conformance.shown_not_declared == ("web_projection",)
    # an excused scenario's passes count for nothing (C only passed there: not exercised)
    excused = {v.criterion_id: v for v in by_id["excused"].verdicts}
    assert by_id["excused"].faults_excused == EXCUSED.excused
    assert excused["C"].status == "not_exercised" and "not counted" in excused["C"].evidence[0].note
    assert excused["D"].status == "not_exercised"


def test_a_subset_of_criteria_judges_only_those():
    judgements = [_judged_through_json(s) for s in (S1, S2)]
    result = combine_judgements(FakeImplementation().info, judgements, 7, criteria=CRITERIA[:1])
    assert [(c.id, c.status) for c in result.criteria] == [("A", CriterionStatus.PASSED)]
    assert result.gate_passed


def test_an_expectation_applies_and_an_unjudged_criterion_is_refused():
    judgements = [_judged_through_json(s) for s in (S1, S2)]
    result = combine_judgements(FakeImplementation().info, judgements, 7, criteria=CRITERIA[:2],
                                expectations={"A": "known", "B": "known"})
    assert [c.status for c in result.criteria] == [CriterionStatus.UNEXPECTED_PASS,
                                                   CriterionStatus.EXPECTED_FAIL]
    with pytest.raises(ValueError, match="s1 was not judged by Z"):
        combine_judgements(FakeImplementation().info, judgements, 7, criteria=(criterion("Z"),))
