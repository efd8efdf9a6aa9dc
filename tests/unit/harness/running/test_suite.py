"""run_suite: verdict combination, violations with replay commands, coverage, gate."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from suite_fakes import FakeImplementation, FakeScenario, criterion, fake_runner, make_trace, render_faults

from harness.contract import Failpoint, Feature
from harness.criteria.base import Status, Verdict
from harness.contract.errors import ExpectationsError
from harness.report.result import CriterionStatus, ScenarioStatus
from harness.running.suite import combined_status, replay_command, run_suite
from harness.trace.record import trace_digest

S1 = FakeScenario(
    "s1", file="scenarios/l4/one.toml", marks=("A:ok", "E:raise"),
    failpoints=("after_result_saved", "after_prepare"), faults=("crash@after_result_saved",),
)
S2 = FakeScenario("s2", stage="l1", file="scenarios/l1/two.toml", marks=("A:ok", "B:ok", "B:bad"),
                  failpoints=("after_tool_returned",))
CRITERIA = (
    criterion("A"),                                   # exercised in s1 and s2 -> passed
    criterion("B", "l1"),                             # fails in s2 -> failed
    criterion("C"),                                   # never exercised -> not_exercised
    criterion("D", required=(Feature.WEB_PROJECTION,)),  # impl lacks web projection -> n/a
    criterion("E", "m"),                              # checker raises in s1 -> error
)


def _run(scenarios=(S1, S2), criteria=CRITERIA, **kwargs):
    return run_suite(
        FakeImplementation(), scenarios, 7, criteria=criteria, runner=fake_runner(),
        fault_renderer=render_faults, impl_spec="python:my.mod:make", **kwargs,
    )


def test_statuses_combine_per_criterion_without_vacuous_pass():
    result = _run()
    status = {c.id: c.status for c in result.criteria}
    assert status == {
        "A": CriterionStatus.PASSED,
        "B": CriterionStatus.FAILED,
        "C": CriterionStatus.NOT_EXERCISED,
        "D": CriterionStatus.NOT_APPLICABLE,
        "E": CriterionStatus.ERROR,
    }
    by_id = {c.id: c for c in result.criteria}
    assert by_id["A"].exercised == 2 and by_id["A"].scenarios_exercising == ("s1", "s2")
    assert by_id["B"].exercised == 2 and by_id["B"].scenarios_exercising == ("s2",)
    assert by_id["C"].exercised == 0 and by_id["C"].violations == ()
    assert by_id["A"].seed_clause == "「seed clause of A」"
    s = result.summary
    assert (s.criteria, s.passed, s.failed, s.not_exercised, s.not_applicable, s.errors) == (5, 1, 1, 1, 1, 1)
    assert not result.gate_passed


@pytest.mark.parametrize(
    "statuses, expected",
    [
        ([], CriterionStatus.NOT_EXERCISED),
        ([Status.NOT_APPLICABLE, Status.NOT_APPLICABLE], CriterionStatus.NOT_APPLICABLE),
        ([Status.NOT_APPLICABLE, Status.NOT_EXERCISED], CriterionStatus.NOT_EXERCISED),
        ([Status.NOT_EXERCISED, Status.PASS], CriterionStatus.PASSED),
        ([Status.PASS, Status.FAIL, Status.NOT_APPLICABLE], CriterionStatus.FAILED),
        ([Status.FAIL, Status.ERROR], CriterionStatus.ERROR),
    ],
)
def test_combined_status(statuses, expected):
    verdicts = [Verdict("X", st, exercised=1 if st in (Status.PASS, Status.FAIL) else 0) for st in statuses]
    assert combined_status(verdicts) is expected


def test_a_pass_without_any_exercise_is_not_exercised():
    assert combined_status([Verdict("X", Status.PASS, exercised=0)]) is CriterionStatus.NOT_EXERCISED


def test_violation_carries_scenario_seed_evidence_replay_and_excerpt(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a user file outside the bundled suite: absolute path
    result = _run()
    (violation,) = {c.id: c for c in result.criteria}["B"].violations
    assert violation.scenario == "s2" and violation.seed == 7
    (item,) = violation.evidence
    assert item.note == "B violated <here> & there" and item.trace_indexes == (3,)
    assert violation.replay == (f"lifecycle-harness replay {os.path.abspath('scenarios/l1/two.toml')} "
                                "--seed 7 --impl python:my.mod:make")
    marked = [line for line in violation.excerpt if line.startswith(">")]
    assert len(marked) == 1 and '"B:bad"' in marked[0]
    assert 1 < len(violation.excerpt) <= 7
    (error,) = {c.id: c for c in result.criteria}["E"].violations
    assert error.scenario == "s1" and "checker raised RuntimeError" in error.evidence[0].note


def test_scenario_results(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a user file outside the bundled suite: absolute path
    errored = FakeScenario("s3", error="hung in run_turn after 20s", failpoints=("after_prepare",))
    result = _run(scenarios=(S1, S2, errored), criteria=CRITERIA[:3])
    by_id = {s.id: s for s in result.scenarios}
    assert by_id["s1"].status is ScenarioStatus.PASSED
    assert by_id["s2"].status is ScenarioStatus.FAILED
    assert by_id["s3"].status is ScenarioStatus.ERROR and by_id["s3"].error.startswith("hung")
    s1 = by_id["s1"]
    assert s1.trace_digest == trace_digest(make_trace(S1, 7))
    assert s1.faults == ("fault crash@after_result_saved",)
    assert s1.failpoints_reached == ("after_result_saved", "after_prepare")
    assert s1.seed == 7 and s1.duration_s == 0.25 and s1.stage == "l4"
    assert [v.criterion_id for v in s1.verdicts] == ["A", "B", "C"]
    assert s1.verdicts[0].status == "pass" and s1.verdicts[0].exercised == 1
    assert s1.replay == (f"lifecycle-harness replay {os.path.abspath('scenarios/l4/one.toml')} "
                         "--seed 7 --impl python:my.mod:make")


def test_a_scenario_error_fails_the_gate_even_when_every_criterion_passes():
    ok = FakeScenario("ok", marks=("A:ok",))
    assert _run(scenarios=(ok,), criteria=(criterion("A"),)).gate_passed
    hung = FakeScenario("hung", error="hang", marks=("A:ok",))
    result = _run(scenarios=(ok, hung), criteria=(criterion("A"),))
    assert result.criteria[0].status is CriterionStatus.PASSED
    assert not result.gate_passed


def test_coverage_matrix_and_unreached_failpoints():
    result = _run()
    assert result.coverage["A"] == ("after_prepare", "after_result_saved", "after_tool_returned")
    assert result.coverage["B"] == ("after_tool_returned",)
    assert result.coverage["C"] == () and result.coverage["D"] == ()
    reached = {"after_prepare", "after_result_saved", "after_tool_returned"}
    assert result.failpoints_unreached == tuple(fp.value for fp in Failpoint if fp.value not in reached)


def test_no_scenarios_means_nothing_passes():
    result = _run(scenarios=())
    assert {c.status for c in result.criteria} == {CriterionStatus.NOT_EXERCISED}
    assert not result.gate_passed
    assert result.failpoints_unreached == tuple(fp.value for fp in Failpoint)


def test_runner_gets_seed_and_time_limit_and_progress_is_reported():
    calls, events = [], []
    run_suite(
        FakeImplementation(), (S1, S2), 3, criteria=CRITERIA[:3], runner=fake_runner(calls),
        fault_renderer=render_faults, progress=events.append, time_limit_s=1.5,
    )
    assert calls == [("s1", 3, 1.5), ("s2", 3, 1.5)]
    assert [(e.phase, e.index, e.total, e.scenario_id) for e in events] == [
        ("start", 1, 2, "s1"), ("done", 1, 2, "s1"), ("start", 2, 2, "s2"), ("done", 2, 2, "s2"),
    ]
    assert events[0].faults == ("fault crash@after_result_saved",)
    assert events[1].status is ScenarioStatus.PASSED and events[3].status is ScenarioStatus.FAILED


def test_expectations_turn_known_failures_into_expected_fail():
    result = _run(expectations={"B": "issue #12", "A": "thought broken"})
    by_id = {c.id: c for c in result.criteria}
    assert by_id["B"].status is CriterionStatus.EXPECTED_FAIL and by_id["B"].expectation_reason == "issue #12"
    assert by_id["A"].status is CriterionStatus.UNEXPECTED_PASS
    assert result.summary.expected_fail == 1 and result.summary.unexpected_pass == 1
    with pytest.raises(ExpectationsError, match="unknown criterion id.*ZZ.*valid ids: A, B"):
        _run(expectations={"ZZ": "?"})


def test_same_inputs_give_the_same_result_apart_from_wall_clock():
    first, second = _run(), _run()
    strip = lambda r: dataclasses.replace(r, run=dataclasses.replace(r.run, started="", duration_s=0.0))
    assert strip(first) == strip(second)


def test_run_info_and_implementation():
    result = _run(command="lifecycle-harness run")
    assert result.implementation.name == "fake-impl"
    assert result.run.seed == 7 and result.run.command == "lifecycle-harness run"
    assert result.run.started.endswith("+00:00") and result.run.duration_s >= 0


def test_replay_command_quotes_for_the_shell():
    assert replay_command("/x/scen arios/a b.toml", 4, "python:m:f") == (
        "lifecycle-harness replay '/x/scen arios/a b.toml' --seed 4 --impl python:m:f"
    )


def test_an_incomplete_trace_counts_as_a_scenario_error_even_without_an_error_text():
    base = fake_runner()

    def runner(implementation, scenario, seed, **kwargs):
        run = base(implementation, scenario, seed, **kwargs)
        trace = dataclasses.replace(run.trace, completed=False, error="")
        return dataclasses.replace(run, trace=trace, error="")

    result = run_suite(
        FakeImplementation(), (FakeScenario("cut", marks=("A:ok",)),), 1,
        criteria=(criterion("A"),), runner=runner, fault_renderer=render_faults,
    )
    assert result.scenarios[0].status is ScenarioStatus.ERROR
    assert result.scenarios[0].error == "the run did not complete"
    assert not result.gate_passed


def test_an_errored_scenario_counts_for_no_criterion_but_its_failures_show():
    # Only the errored scenario exercises A (a pass) and B (a failure).
    unfired = FakeScenario("unfired", error="planned but not carried out: fault 1: ... did not fire",
                           marks=("A:ok", "B:bad"))
    result = _run(scenarios=(unfired,), criteria=(criterion("A"), criterion("B")))
    a, b = result.criteria
    assert a.status is CriterionStatus.NOT_EXERCISED and a.exercised == 0
    assert a.scenarios_exercising == ()
    assert b.status is CriterionStatus.FAILED and b.violations[0].scenario == "unfired"
    (scenario,) = result.scenarios
    assert scenario.status is ScenarioStatus.ERROR
    verdict_a = scenario.verdicts[0]
    assert verdict_a.status == "not_exercised" and verdict_a.exercised == 0
    assert "not counted: the scenario errored (planned but not carried out" in verdict_a.evidence[0].note
    assert not result.gate_passed


def test_a_pass_elsewhere_still_counts_next_to_an_errored_scenario():
    ok = FakeScenario("ok", marks=("A:ok",))
    hung = FakeScenario("hung", error="hang", marks=("A:ok",))
    (a,) = _run(scenarios=(ok, hung), criteria=(criterion("A"),)).criteria
    assert a.status is CriterionStatus.PASSED and a.exercised == 1 and a.scenarios_exercising == ("ok",)


def test_unfired_faults_of_the_run_reach_the_scenario_result():
    def runner(implementation, scenario, seed, *, time_limit_s=20.0, data_root=None):
        run = fake_runner()(implementation, scenario, seed)
        return SimpleNamespace(trace=run.trace, failpoints_reached=(), error=run.error,
                               duration_s=0.1, unfired=("fault 1: ... did not fire",))

    result = run_suite(FakeImplementation(), (FakeScenario("u", error="planned but not ..."),), 7,
                       criteria=(criterion("A"),), runner=runner, fault_renderer=render_faults)
    assert result.scenarios[0].faults_unfired == ("fault 1: ... did not fire",)


_SCENARIOS = Path(__file__).parents[4] / "scenarios"


def test_warming_up_before_forking_does_the_lazy_imports_and_runs_nothing(tmp_path):
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from harness.scenarios.loader import load\n"
        "from harness.running.suite import default_criteria, warm_up_workers\n"
        "before = 'pyfakefs.fake_pathlib' in sys.modules\n"
        "warm_up_workers(object(), default_criteria())  # not a Scenario: nothing to warm\n"
        "assert 'pyfakefs.fake_pathlib' not in sys.modules\n"
        f"warm_up_workers(load(Path({str(_SCENARIOS / 'l4' / 'crash_after_result_saved.toml')!r})),"
        " default_criteria())\n"
        "assert not before and 'pyfakefs.fake_pathlib' in sys.modules\n"
        "assert not any(m.startswith('reference_impl') for m in sys.modules)  # nothing ran\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr


# --------------------------------------------------------------------------- expected errors

UNFIRED = "planned but not carried out: fault 2: after_result_saved, hit #2 -> crash: did not fire"


def _expected(cause: str, scenario: str = "unfired"):
    from harness.contract.expectations import ExpectedError

    return (ExpectedError(scenario, cause, "the deny path passes no failpoint"),)


def test_a_scenario_error_with_a_listed_cause_is_expected_and_passes_the_gate():
    ok = FakeScenario("ok", marks=("A:ok",))
    unfired = FakeScenario("unfired", error=UNFIRED, marks=("A:ok",))
    result = _run(scenarios=(ok, unfired), criteria=(criterion("A"),),
                  expected_errors=_expected("after_result_saved, hit #2"))
    by_id = {s.id: s for s in result.scenarios}
    assert by_id["unfired"].status is ScenarioStatus.EXPECTED_ERROR
    assert by_id["unfired"].expected_error == (
        "unfired errors with 'after_result_saved, hit #2': the deny path passes no failpoint")
    assert by_id["ok"].status is ScenarioStatus.PASSED and by_id["ok"].expected_error == ""
    assert result.gate_passed
    # it stays an errored scenario for the level, as an expected failure never buys it
    assert result.conformance.scenarios_errored == 1


def test_a_scenario_error_for_another_cause_is_new_and_fails_the_gate():
    unfired = FakeScenario("unfired", error=UNFIRED, marks=("A:ok",))
    result = _run(scenarios=(unfired,), criteria=(criterion("A"),),
                  expected_errors=_expected("hung in run_turn"))
    (scenario,) = result.scenarios
    assert scenario.status is ScenarioStatus.ERROR and scenario.expected_error
    assert not result.gate_passed
    # an entry for another scenario does not excuse it either
    result = _run(scenarios=(unfired,), criteria=(criterion("A"),),
                  expected_errors=_expected("did not fire", scenario="other"))
    assert result.scenarios[0].status is ScenarioStatus.ERROR and not result.gate_passed


@pytest.mark.parametrize("marks", [("A:ok",), ("A:bad",)])
def test_an_expected_error_that_does_not_happen_is_an_unexpected_success(marks):
    fixed = FakeScenario("unfired", marks=marks)
    criteria = (criterion("A"),)
    expected = _expected("did not fire")
    strict = _run(scenarios=(fixed,), criteria=criteria, expected_errors=expected,
                  expectations={"A": "known"} if marks == ("A:bad",) else None)
    (scenario,) = strict.scenarios
    assert scenario.status in (ScenarioStatus.PASSED, ScenarioStatus.FAILED)
    assert scenario.unexpected_success and strict.unexpected_successes == (scenario,)
    assert not strict.gate_passed  # strict, like an unexpected pass
    lenient = _run(scenarios=(fixed,), criteria=criteria, expected_errors=expected,
                   expectations={"A": "known"} if marks == ("A:bad",) else None,
                   expectations_mode="lenient")
    assert lenient.gate_passed and lenient.unexpected_successes
