"""Issue 31's five false failures: an implementation making a choice the docs leave free must
pass the scenarios that failed it (no criterion failing, no scenario error).

Each test runs the reference with one allowed choice made the other way
(``tests/unit/harness/allowed_choices.py``), checks from the trace that the choice was really
made (so a test cannot pass because its variant stopped doing anything), and judges the run
exactly as the suite does. Before the fixes each of them failed: L4.2/L4.4/L4.5 on a
recovery passing the checkpoint failpoints (the precondition demanded the ledger's outcome
of a cut-off call), a scenario error on a deny path without failpoints and on a cancelled
session's call never decided (faults planned on undocumented hits), and L2.1 on a voided
verdict bound to the new permission version (it demanded explicit_deny), and L4.2/L4.4/
L4.5/L4.7 on a refused escalated run's standing result delivered through the checkpoint
failpoints (the precondition demanded not_started for a run that never called the tool).
"""

from __future__ import annotations

from typing import Any

import pytest
from allowed_choices import (
    CANCELLED_CALL_NOT_DECIDED,
    DECISION_POINT_ON_EVERY_DECISION,
    DENY_PATH_WITHOUT_FAILPOINTS,
    RECOVERY_PASSES_CHECKPOINT_FAILPOINTS,
    STANDING_RESULT_DELIVERED_WITH_FAILPOINTS,
    VOID_VERDICT_BOUND_TO_NEW_VERSION,
)

import reference_impl
from harness.mutants.mutant import Mutant, MutantImplementation
from harness.running.runner import run_scenario
from harness.running.suite import judge_scenario
from harness.scenarios.loader import load
from harness.trace.record import Kind, Trace

ROOT = "scenarios/"


def judged(choice: Mutant, path: str) -> tuple[Any, Trace]:
    """The suite's judgement of ``choice`` on the scenario at ``path``, and its trace."""
    traces: list[Trace] = []

    def runner(implementation: Any, scenario: Any, seed: int, **options: Any) -> Any:
        run = run_scenario(implementation, scenario, seed, **options)
        traces.append(run.trace)
        return run

    judgement = judge_scenario(MutantImplementation(reference_impl.implementation(), choice),
                               load(ROOT + path), 0, runner=runner)
    return judgement.result, traces[0]


def assert_passes(result: Any) -> None:
    failing = [f"{v.criterion_id}: {[e.note for e in v.evidence]}" for v in result.verdicts
               if str(v.status) in ("fail", "error")]
    assert (str(result.status), result.error, failing) == ("passed", "", [])
    assert result.faults_unfired == ()


def hits(trace: Trace, name: str, *, after: int = -1) -> list[Any]:
    return [e for e in trace.of_kind(Kind.FAILPOINT)
            if e.data.get("name") == name and e.index > after]


@pytest.mark.parametrize("path", ["l4/crash_after_tool_returned.toml",
                                  "l4/crash_after_start_recorded.toml"])
def test_case_1_a_recovery_passing_the_checkpoint_failpoints_passes(path):
    result, trace = judged(RECOVERY_PASSES_CHECKPOINT_FAILPOINTS, path)
    crash = trace.crashes()[0]
    in_recovery = [h.data["name"] for h in hits(trace, "during_checkpoint_build", after=crash.index)
                   + hits(trace, "after_checkpoint_saved", after=crash.index)]
    assert in_recovery == ["during_checkpoint_build", "after_checkpoint_saved"]  # the choice
    final = trace.observations[-1].observation.operation("c1", "s1")
    assert final.outcome.value == "unknown"
    assert_passes(result)


def test_case_2_a_deny_path_without_failpoints_passes():
    result, trace = judged(DENY_PATH_WITHOUT_FAILPOINTS, "x/reconciliation_only_when_honest.toml")
    denied = [h for h in trace.of_kind(Kind.FAILPOINT)
              if (h.data.get("context") or {}).get("tool_call_id") == "c1"]
    assert {h.data["name"] for h in denied} == {"after_prepare", "after_permission_decision"}
    assert_passes(result)


def test_case_3_a_cancelled_sessions_call_closed_without_a_decision_step_passes():
    result, trace = judged(
        CANCELLED_CALL_NOT_DECIDED,
        "regressions/regression-x-reconciliation-only-when-honest-04cd7f8611.toml")
    assert hits(trace, "after_permission_decision") == []  # the choice
    final = trace.observations[-1].observation.operation("c1", "s1")
    assert (final.outcome.value, final.decided_by.value) == ("not_started", "cancellation")
    assert_passes(result)


def test_case_4_a_void_verdict_bound_to_the_new_version_passes():
    result, trace = judged(VOID_VERDICT_BOUND_TO_NEW_VERSION, "l2/revoke_during_review.toml")
    final = trace.observations[-1].observation.operation("c1", "s1")
    assert (final.permission.value, final.decided_by.value,
            final.identity.permission_version) == ("deny", "revalidation", 2)
    assert_passes(result)


def test_a_decision_point_after_an_owners_answer_to_a_wait_recovery_showed_passes():
    """The prompt of a wait committed before a crash is shown by recover() (no after_prompt
    hit); the owner's answer is the next decision, so the prompt is the question it answers,
    not a sign that after_permission_decision came late (fixed with the neutrality check,
    whose model lets an answer pass that failpoint)."""
    for variant in ("approve-true.timing-never-shown-before-a-crash",
                    "approve-false.timing-never-shown-before-a-crash"):
        traces: list[Trace] = []

        def runner(implementation: Any, scenario: Any, seed: int, **options: Any) -> Any:
            run = run_scenario(implementation, scenario, seed, **options)
            traces.append(run.trace)
            return run

        scenario = load(ROOT + "l3/answer_neighbours.toml", variant)
        result = judge_scenario(MutantImplementation(reference_impl.implementation(),
                                                     DECISION_POINT_ON_EVERY_DECISION),
                                scenario, 0, runner=runner).result
        assert len(hits(traces[0], "after_permission_decision")) == 2  # the choice
        assert_passes(result)


def test_case_5_a_standing_sandboxed_result_delivered_through_failpoints_passes():
    """The escalated run is refused right after its start record (the rules change at that
    failpoint); the sandboxed attempt's saved result stands and is delivered through the
    checkpoint failpoints. "The result" the preconditions judge there is that standing
    record, not the ``not_started`` of a run that never called the tool (issue 31, case 5:
    L4.2/L4.4/L4.5/L4.7 failed with "the saved outcome is failed although the tool was not
    called in this run")."""
    result, trace = judged(STANDING_RESULT_DELIVERED_WITH_FAILPOINTS,
                           "regressions/regression-generated-5ce3e40625.toml")
    refused_at = hits(trace, "after_start_recorded")[1].index  # the escalated run's start
    assert not [e for e in trace.of_kind(Kind.TOOL_EXECUTED) if e.index > refused_at]
    delivered = [h.data["name"] for h in trace.of_kind(Kind.FAILPOINT) if h.index > refused_at
                 and (h.data.get("context") or {}).get("tool_call_id") == "c1"]
    assert delivered == ["during_diagnostics_write", "during_checkpoint_build",
                         "after_checkpoint_saved", "after_projection"]  # the choice
    final = trace.observations[-1].observation.operation("c1", "s1")
    assert (final.outcome.value, final.execution_started, final.failure_kind.value) == (
        "failed", True, "permission_denied")  # the sandboxed result stands
    assert_passes(result)


@pytest.mark.slow  # the whole bundled suite six times (about three minutes)
@pytest.mark.parametrize("choice", [RECOVERY_PASSES_CHECKPOINT_FAILPOINTS,
                                    DENY_PATH_WITHOUT_FAILPOINTS, CANCELLED_CALL_NOT_DECIDED,
                                    VOID_VERDICT_BOUND_TO_NEW_VERSION,
                                    DECISION_POINT_ON_EVERY_DECISION,
                                    STANDING_RESULT_DELIVERED_WITH_FAILPOINTS], ids=lambda c: c.name)
def test_each_allowed_choice_passes_the_whole_bundled_suite(choice):
    from harness.scenarios import bundled_suite_dir, discover

    implementation = MutantImplementation(reference_impl.implementation(), choice)
    broken = []
    for scenario in discover([bundled_suite_dir()]):
        result = judge_scenario(implementation, scenario, 0).result
        failing = [v.criterion_id for v in result.verdicts if str(v.status) in ("fail", "error")]
        if str(result.status) != "passed" or failing:
            broken.append(f"{scenario.id}: {result.status} {failing} {result.error[:120]}")
    assert broken == []
