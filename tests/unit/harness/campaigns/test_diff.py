"""Differential runs: a mutant against the reference is named at its defect's first world
event; the reference against itself, and in process against itself as a process, never
diverges; verdicts, skips, worker deaths, the generator's hook, determinism and parallelism."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import reference_impl
from harness.contract.conformance import scenario_requirements
from harness.campaigns.diff import (
    DIFF_FILE, DIFF_MD, DIVERGED, ERROR, SAME, SKIPPED, VERDICTS_DIFFER, headline,
    report_files, run_diff, to_dict,
)
from harness.implementations.specs import resolve
from harness.running.runner import run_scenario
from harness.scenarios.loader import load
from harness.trace.record import Kind

REPO = Path(__file__).resolve().parents[4]
CRASH_AFTER_SAVED = REPO / "scenarios" / "l4" / "crash_after_result_saved.toml"
DANGEROUS_TAIL = REPO / "scenarios" / "l2" / "dangerous_tail.toml"
PROCESS_SPEC = f"process:{sys.executable} -m reference_impl.remote"


def side(spec: str):
    return spec, resolve(spec)


def data_of(line: str) -> dict:
    """The data of an event line rendered in full (``A ended here`` has none)."""
    return json.loads(line[line.index("{"):])


def test_a_mutant_that_runs_a_tool_again_after_a_crash_diverges_at_the_second_ledger_row():
    result = run_diff(side("reference"), side("mutant:reexecute-after-result-saved"),
                      [load(CRASH_AFTER_SAVED)], 0)
    (case,) = result.cases
    assert case.status == DIVERGED
    difference = case.difference
    assert (difference.kind_a, difference.kind_b) == (Kind.UI_PUBLISH, Kind.TOOL_EXECUTED)
    rerun = data_of(difference.event_b)
    assert (rerun["tool_call_id"], rerun["invocation"], rerun["ledger_seq"]) == ("c1", 2, 2)
    # the first run of the same call is in the context both sides share, then the crash
    assert [line.split()[2] for line in difference.before[-2:]] == [Kind.TOOL_EXECUTED,
                                                                    Kind.FAILPOINT]
    assert '"action":"crash"' in difference.before[-1]
    assert difference.fields == (("kind", '"ui_publish"', '"tool_executed"'),)
    assert case.a.status == "passed" and case.a.failing == ()
    assert case.b.status == "failed" and "L4.1" in {f.criterion_id for f in case.b.failing}
    assert case.b.replay.endswith("--impl mutant:reexecute-after-result-saved")
    assert result.differs and result.counts[DIVERGED] == 1


def test_a_mutant_that_truncates_the_classifier_operation_diverges_at_the_classifier_bytes():
    result = run_diff(side("reference"), side("mutant:classifier-reads-first-800-chars"),
                      [load(DANGEROUS_TAIL)], 0)
    (case,) = result.cases
    assert case.status == DIVERGED
    difference = case.difference
    assert difference.kind_a == difference.kind_b == Kind.CLASSIFIER_REQUEST
    a, b = data_of(difference.event_a), data_of(difference.event_b)
    assert len(b["request"]["operation"]) == 800
    assert a["request"]["operation"].startswith(b["request"]["operation"])
    assert len(a["request"]["operation"]) > 800 and a["raw"] != b["raw"]
    paths = [path for path, _, _ in difference.fields]
    assert "raw" in paths and "request.operation" in paths
    # the events before it are the same on both sides: the model's call, nothing reviewed yet
    assert not any(Kind.CLASSIFIER_REQUEST in line for line in difference.before)


def test_the_reference_against_itself_never_diverges_on_the_bundled_suite():
    from harness.scenarios.loader import bundled_suite_dir, discover

    scenarios = tuple(discover([os.fspath(bundled_suite_dir())]))
    reference = ("reference", reference_impl.implementation())
    result = run_diff(reference, reference, scenarios, 0, jobs=2)
    assert len(result.cases) == len(scenarios) > 100
    assert [c.scenario_id for c in result.cases if c.status != SAME] == []
    assert not result.differs and result.same_impl
    assert all(c.a.world_events == c.b.world_events > 0 for c in result.cases)


def test_the_reference_in_process_and_as_a_process_make_the_same_world_events():
    """Process mode is another spelling of every id the reference allocates in process
    only if the normalisation misses something: this would show it."""
    names = ["l4/crash_after_result_saved.toml", "l3/wait_survives_crash_after_prompt.toml",
             "l4/concurrent_duplicates.toml", "m/eof_with_partial_text.toml",
             "l2/dangerous_tail.toml"]
    scenarios = [load(REPO / "scenarios" / name) for name in names]
    result = run_diff(side("reference"), side(PROCESS_SPEC), scenarios, 0)
    assert [(c.scenario_id, c.status) for c in result.cases] == [
        (s.id, SAME) for s in scenarios]
    assert all(c.b.status == "passed" and c.a.world_events == c.b.world_events
               for c in result.cases)
    # crashes were real and the runs did prompt, so the comparison had ids to normalise
    prompts = run_scenario(resolve(PROCESS_SPEC), scenarios[1], 0).trace
    assert any(e.kind == Kind.APPROVAL_PROMPT for e in prompts.events)
    assert any(e.kind == Kind.CRASH and e.data.get("mode") == "process" for e in prompts.events)


def test_equal_world_events_with_other_verdicts_are_verdicts_differ():
    result = run_diff(side("reference"), side("mutant:recovery-report-omits-resumed"),
                      [load(CRASH_AFTER_SAVED)], 0)
    (case,) = result.cases
    assert case.status == VERDICTS_DIFFER and case.difference is None
    assert case.a.world_events == case.b.world_events
    assert [f.criterion_id for f in case.b.failing] == ["L4.8"]
    assert "same world events" in case.note and result.differs


def test_a_scenario_needing_a_feature_one_side_does_not_declare_runs_on_both_sides():
    """Features are judged by behaviour: the escalation scenario runs on a side that declares
    nothing too, and is compared."""
    escalation = load(REPO / "scenarios" / "l2" / "escalation_after_sandbox.toml")
    assert "sandbox_escalation" in {f.value for f in scenario_requirements(escalation)}
    result = run_diff(side("reference"), side("mutant:core-declared-away-800-chars"),
                      [escalation], 0)
    (case,) = result.cases
    assert case.status != SKIPPED and case.a.world_events > 0 and case.b.world_events > 0
    assert result.compared == 1


def test_a_case_whose_worker_dies_is_an_error_and_the_others_go_on():
    scenarios = [load(CRASH_AFTER_SAVED), load(DANGEROUS_TAIL)]

    def dying_runner(implementation, scenario, seed, **kwargs):
        if scenario.id == scenarios[1].id:
            os._exit(7)
        return run_scenario(implementation, scenario, seed, **kwargs)

    reference = ("reference", reference_impl.implementation())
    result = run_diff(reference, reference, scenarios, 0, runner=dying_runner, jobs=2)
    assert [c.status for c in result.cases] == [SAME, ERROR]
    assert "exited (code 7)" in result.cases[1].note
    assert result.cases[1].a.status == "error" and result.differs


def test_a_scenarios_source_is_called_with_the_seed():
    asked = []

    def source(seed):
        asked.append(seed)
        return [load(CRASH_AFTER_SAVED)]

    reference = ("reference", reference_impl.implementation())
    result = run_diff(reference, reference, source, 4, source="a test source")
    assert asked == [4]
    assert [c.status for c in result.cases] == [SAME] and result.seed == 4
    assert result.cases[0].a.replay.endswith("--seed 4 --impl reference")


def test_the_result_is_the_same_for_the_same_seed_and_for_any_number_of_jobs():
    scenarios = [load(CRASH_AFTER_SAVED), load(DANGEROUS_TAIL),
                 load(REPO / "scenarios" / "m" / "transport_error.toml")]
    sides = (side("reference"), side("mutant:reexecute-after-result-saved"))
    one = report_files(run_diff(*sides, scenarios, 0, source="three", jobs=1))
    again = report_files(run_diff(*sides, scenarios, 0, source="three", jobs=1))
    parallel = report_files(run_diff(*sides, scenarios, 0, source="three", jobs=2))
    assert one == again == parallel
    data = json.loads(one[DIFF_FILE])
    assert data["format"] == "lifecycle-harness-diff/1"
    assert [c["status"] for c in data["cases"]] == [DIVERGED, SAME, SAME]
    assert data["counts"] == {"cases": 3, SAME: 2, DIVERGED: 1, VERDICTS_DIFFER: 0,
                              SKIPPED: 0, ERROR: 0}
    assert data["cases"][0]["difference"]["position"] == 4
    assert any(item["field"] == "approval_prompt.wait_id" for item in data["normalised"])
    markdown = one[DIFF_MD].decode()
    assert "| `l4-crash-after-result-saved` | diverged at world event 4 | passed |" in markdown
    assert "DIVERGED l4-crash-after-result-saved at world event 4" in markdown


def test_to_dict_holds_every_field_of_the_result():
    result = run_diff(side("reference"), side("reference"), [load(CRASH_AFTER_SAVED)], 0)
    data = to_dict(result)
    assert {f.name for f in dataclasses.fields(result)} <= set(data)
    assert data["same_impl"] is True and data["differs"] is False
    assert json.loads(json.dumps(data)) == data


def test_another_implementation_s_wording_is_the_same_unless_exact_text():
    """examples/minimal_runtime.py, written from the docs alone, words its reasons its own
    way (``deny rule write_file matches`` where the reference says ``deny rule
    write_file:'/etc/*' matches; change the rules to allow it``): the same world events,
    until the wording is compared too."""
    example = side(f"process:{sys.executable} {REPO / 'examples' / 'minimal_runtime.py'}")
    precedence = [load(REPO / "scenarios" / "l2" / "precedence.toml")]
    loose = run_diff(side("reference"), example, precedence, 0)
    assert [c.status for c in loose.cases] == [SAME]
    exact = run_diff(side("reference"), example, precedence, 0, exact_text=True)
    (case,) = exact.cases
    assert case.status == DIVERGED and case.difference.kind_a == Kind.UI_PUBLISH
    assert [path for path, _, _ in case.difference.fields] == ["projection.reason"]
    assert case.a.status == case.b.status == "passed"
