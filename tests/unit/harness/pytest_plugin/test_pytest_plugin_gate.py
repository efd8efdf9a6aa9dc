"""The plugin's gate and item outcomes as pure functions over scenario judgements (no pytest
run): what a full run, a partial run, a missing result and expectations make of them."""

from __future__ import annotations

import dataclasses

import pytest
from suite_fakes import FakeImplementation, FakeScenario, criterion, fake_runner, render_faults

from harness.pytest_plugin import _Lifecycle, judge_gate, scenario_outcome
from harness.running.suite import judge_scenario

CRITERIA = (criterion("A"), criterion("B", "l1"), criterion("C"))
GOOD = FakeScenario("good", marks=("A:ok", "B:ok", "C:ok"))
BAD = FakeScenario("bad", stage="l1", file="scenarios/l1/bad.toml", marks=("A:ok", "B:bad"))
IDLE = FakeScenario("idle", marks=("A:ok",))
HUNG = FakeScenario("hung", error="hung in run_turn after 20s", marks=("A:ok",))


def _judged(*scenarios):
    return [judge_scenario(FakeImplementation(), s, 0, criteria=CRITERIA, runner=fake_runner(),
                           fault_renderer=render_faults, impl_spec="python:m:f") for s in scenarios]


def _state(scenarios, **changes) -> _Lifecycle:
    state = _Lifecycle(spec="python:m:f", implementation=FakeImplementation(), scenarios=tuple(scenarios),
                       criteria=CRITERIA, seed=0, expectations={}, lenient=False, required=(),
                       report_dir=None, named=None, bundled=True)
    return dataclasses.replace(state, **changes)


def _table(outcome):
    return {c.id: c.status.value for c in outcome.result.criteria}


@pytest.fixture(autouse=True)
def _fake_catalogue_levels(monkeypatch):
    # the conformance headline reads the real catalogue's core; these criteria are fakes
    import harness.report.text as text

    monkeypatch.setattr(text, "level_line", lambda result: "level of the fakes")


def test_a_full_run_judges_every_criterion_and_claims_a_level():
    outcome = judge_gate(_state([GOOD]), _judged(GOOD))
    assert outcome.passed and _table(outcome) == {"A": "passed", "B": "passed", "C": "passed"}
    assert outcome.lines[-2].startswith("lifecycle gate PASSED: 1 scenarios, 3 criteria judged")
    assert outcome.lines[-1] == "lifecycle conformance: level of the fakes"


def test_a_full_run_fails_on_a_criterion_nothing_exercised_or_a_violation():
    idle = judge_gate(_state([IDLE]), _judged(IDLE))
    assert not idle.passed and _table(idle)["B"] == "not_exercised"
    assert any(line.startswith("not exercised (2; ") and "B, C" in line for line in idle.lines)
    bad = judge_gate(_state([GOOD, BAD]), _judged(GOOD, BAD))
    assert not bad.passed and _table(bad)["B"] == "failed"
    assert "    replay: lifecycle-harness replay l1/bad.toml --seed 0 --impl python:m:f" in bad.lines


def test_a_partial_run_judges_what_it_bore_on_and_reports_the_rest_not_selected():
    # two of three bundled scenarios ran: C, never exercised there, is not selected
    outcome = judge_gate(_state([IDLE, BAD, GOOD]), _judged(IDLE, BAD))
    assert _table(outcome) == {"A": "passed", "B": "failed"}
    assert "not selected (1): C" in outcome.lines
    assert outcome.lines[-1].startswith("lifecycle conformance: no level claimed by a partial run")
    named = judge_gate(_state([IDLE, GOOD], named=frozenset({"A"})), _judged(IDLE))
    assert named.passed and _table(named) == {"A": "passed"}
    # scenarios given by path are never a full run
    given = judge_gate(_state([GOOD], bundled=False), _judged(GOOD))
    assert "partial run: 1 of 1 scenarios" in given.lines[-2]


def test_an_item_without_a_result_and_an_errored_scenario_fail_the_gate():
    missing = judge_gate(_state([GOOD, IDLE]), _judged(GOOD), missing=["lifecycle::idle"])
    assert not missing.passed and "lifecycle::idle: no result (the item did not finish)" in missing.lines
    hung = judge_gate(_state([GOOD, HUNG]), _judged(GOOD, HUNG))
    assert not hung.passed and "scenario hung errored: hung in run_turn after 20s" in hung.lines


def test_an_unexpected_pass_is_strict_unless_lenient():
    strict = judge_gate(_state([GOOD], expectations={"A": "known"}), _judged(GOOD))
    assert not strict.passed and _table(strict)["A"] == "unexpected_pass"
    assert any("fails the gate; remove it from the expectations file" in line for line in strict.lines)
    lenient = judge_gate(_state([GOOD], expectations={"A": "known"}, lenient=True), _judged(GOOD))
    assert lenient.passed


TITLES = {"A": "title A", "B": "title B", "C": "title C"}


def test_item_outcomes():
    (good, bad, hung) = _judged(GOOD, BAD, HUNG)
    assert scenario_outcome(good, None, {}, TITLES) == ("pass", "")
    kind, text = scenario_outcome(bad, None, {}, TITLES)
    assert kind == "fail" and text.startswith("B title B: failed\n    B violated")
    assert "    | " in text and text.endswith("replay: lifecycle-harness replay l1/bad.toml "
                                              "--seed 0 --impl python:m:f")
    assert scenario_outcome(bad, None, {"B": "known"}, TITLES) == ("xfail", "B expected to fail: known")
    assert scenario_outcome(bad, frozenset({"A"}), {}, TITLES) == ("pass", "")  # B not selected
    kind, text = scenario_outcome(hung, None, {}, TITLES)
    assert kind == "fail" and text.startswith("scenario hung errored: hung in run_turn")


def test_a_scenario_written_for_an_undeclared_feature_is_an_item_like_any_other():
    # nothing is skipped for what an implementation declares: a gated criterion is n/a on
    # it when the behaviour did not show the feature, judged (and may fail) when it did
    from harness.contract import Feature

    gated = criterion("W", required=(Feature.WEB_PROJECTION,))
    quiet = FakeScenario("quiet", marks=("A:ok", "W:bad"))
    shows = FakeScenario("shows", marks=("A:ok", "W:bad"), publishes=1)
    judged = [judge_scenario(FakeImplementation(), s, 0, criteria=(CRITERIA[0], gated),
                             runner=fake_runner(), fault_renderer=render_faults,
                             impl_spec="python:m:f") for s in (quiet, shows)]
    titles = {**TITLES, "W": "title W"}
    assert scenario_outcome(judged[0], None, {}, titles) == ("pass", "")
    kind, text = scenario_outcome(judged[1], None, {}, titles)
    assert kind == "fail" and text.startswith("W title W: failed")


def test_a_demanded_feature_the_implementation_does_not_declare_fails_a_full_run():
    demanded = judge_gate(_state([GOOD], required=("web_projection",)), _judged(GOOD))
    assert not demanded.passed
    assert any(line.startswith("required: web_projection is required but the implementation "
                               "does not declare it") for line in demanded.lines)
    # a partial run judges no level, so demands are not assessed there
    partial = judge_gate(_state([GOOD, IDLE], required=("web_projection",)), _judged(GOOD))
    assert partial.passed and not any(line.startswith("required:") for line in partial.lines)


class _Options:
    """The few options ``_load`` reads, as a pytest config would give them."""

    def __init__(self, **values):
        self.values = {"--lifecycle-require-features": "", "--lifecycle-report-dir": None,
                       "--lifecycle-expectations": None, "--lifecycle-scenarios": None,
                       "--lifecycle-seed": 0, "--lifecycle-lenient-expectations": False,
                       "--lifecycle-no-freeze-clock": False, "keyword": "", **values}

    def getoption(self, name, default=None):
        return self.values.get(name, default)


def test_a_python_implementation_runs_frozen_unless_the_option_says_no():
    from harness.pytest_plugin import _load

    spec = "python:reference_impl:implementation"
    assert _load(_Options(), spec).implementation.freeze_process_clock is True
    off = _load(_Options(**{"--lifecycle-no-freeze-clock": True}), spec)
    assert off.implementation.freeze_process_clock is False


def _expected_hang(scenario: str = "hung", cause: str = "hung in run_turn"):
    from harness.contract.expectations import ExpectedError

    return (ExpectedError(scenario, cause, "no timeout handling yet"),)


def test_an_expected_scenario_error_is_an_xfail_and_passes_the_gate():
    (hung,) = _judged(HUNG)
    kind, text = scenario_outcome(hung, None, {}, TITLES, _expected_hang())
    assert (kind, text) == ("xfail", "expected error: hung errors with 'hung in run_turn': "
                                     "no timeout handling yet")
    kind, text = scenario_outcome(hung, None, {}, TITLES, _expected_hang(cause="did not fire"))
    assert kind == "fail" and "(expected another error: hung errors with 'did not fire'" in text
    outcome = judge_gate(_state([GOOD, HUNG], expected_errors=_expected_hang()),
                         _judged(GOOD, HUNG))
    assert outcome.passed
    assert "scenario hung errored as expected (hung errors with 'hung in run_turn': no timeout " \
           "handling yet)" in outcome.lines


def test_an_expected_error_that_did_not_happen_fails_the_item_and_gate_unless_lenient():
    (good,) = _judged(GOOD)
    expected = _expected_hang(scenario="good")
    kind, text = scenario_outcome(good, None, {}, TITLES, expected)
    assert kind == "fail" and "did not error as the expectations file lists" in text
    assert scenario_outcome(good, None, {}, TITLES, expected, lenient=True) == ("pass", "")
    strict = judge_gate(_state([GOOD], expected_errors=expected), _judged(GOOD))
    assert not strict.passed
    assert any(line.startswith("scenario good did not error as listed") and "fails the gate"
               in line for line in strict.lines)
    lenient = judge_gate(_state([GOOD], expected_errors=expected, lenient=True), _judged(GOOD))
    assert lenient.passed
