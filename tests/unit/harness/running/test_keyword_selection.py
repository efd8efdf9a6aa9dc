"""Which scenarios and criteria a partial run selects, and which criteria it judges."""

from suite_fakes import FakeScenario, criterion

from harness.running.keyword_selection import (
    criterion_keywords,
    judged_criteria,
    named_criteria,
    scenario_keywords,
)
from harness.report.result import ScenarioResult, ScenarioStatus, VerdictRecord

CRITERIA = (criterion("L4.1", "l4"), criterion("L4.10", "l4"), criterion("M2", "m"), criterion("X1", "x"))


def _substring_matcher(word):
    return lambda keywords: any(word.lower() in k.lower() for k in keywords)


def test_a_scenario_item_carries_its_id_stage_tags_and_its_stage_s_criteria():
    scenario = FakeScenario("l4-crash-after", stage="l4", tags=("crash", "recovery"))
    assert scenario_keywords(scenario, CRITERIA) == {
        "l4-crash-after", "l4", "crash", "recovery", "L4.1", "L4.10"}
    assert criterion_keywords(CRITERIA[2]) == {"M2", "m", "lifecycle"}


def test_criteria_named_by_the_expression_or_none():
    assert named_criteria(CRITERIA, None) is None
    assert named_criteria(CRITERIA, _substring_matcher("L4")) == {"L4.1", "L4.10"}
    assert named_criteria(CRITERIA, _substring_matcher("L4.1")) == {"L4.1", "L4.10"}  # pytest's substrings
    assert named_criteria(CRITERIA, _substring_matcher("lifecycle")) == {"L4.1", "L4.10", "M2", "X1"}
    assert named_criteria(CRITERIA, _substring_matcher("crash")) is None


def _result(sid, *verdicts):
    return ScenarioResult(sid, f"{sid}.toml", "l4", 0, ScenarioStatus.PASSED, 0.1, "d", (), (),
                          tuple(VerdictRecord(c, status, exercised) for c, status, exercised in verdicts))


def test_judged_criteria_named_else_all_in_a_full_run_else_what_the_run_bore_on():
    results = [_result("a", ("L4.1", "pass", 2), ("L4.10", "not_exercised", 0), ("M2", "fail", 1),
                       ("X1", "not_applicable", 0))]
    ids = lambda chosen: [c.id for c in chosen]  # noqa: E731
    assert ids(judged_criteria(CRITERIA, frozenset({"X1"}), True, results)) == ["X1"]
    assert ids(judged_criteria(CRITERIA, None, True, results)) == ["L4.1", "L4.10", "M2", "X1"]
    assert ids(judged_criteria(CRITERIA, None, False, results)) == ["L4.1", "M2"]
    assert ids(judged_criteria(CRITERIA, None, False, [])) == []
