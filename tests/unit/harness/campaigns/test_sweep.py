"""The crash sweep: cases planned from the baseline's failpoint events, each case's scenario,
replay options, and small real sweeps of the reference (and of a defective mutant)."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path

import pytest

from harness.cli import app as cli
from harness.contract import Failpoint, Thresholds
from harness.contract.errors import UsageError
from harness.faults.plan import Action, make_fault
from harness.scenarios.loader import StepKind, load
from harness.campaigns.sweep import BASELINE, case_scenario, held_points, plan_cases
from harness.trace.record import Kind, Trace, TraceEvent, TraceMeta

REPO = Path(__file__).resolve().parents[4]
CONCURRENT = REPO / "scenarios" / "l4" / "concurrent_duplicates.toml"


def _trace(*items: tuple[int, str, dict]) -> Trace:
    events = tuple(TraceEvent(i, "world", kind, instance, data)
                   for i, (instance, kind, data) in enumerate(items))
    meta = TraceMeta(scenario_id="t", stage="unit", seed=0, implementation="x", features=(),
                     thresholds=Thresholds(), sessions=(), tools=(), faults=())
    return Trace(meta, events, ())


def fp(name: str, instance: int = 0) -> tuple[int, str, dict]:
    return (instance, Kind.FAILPOINT, {"name": name, "action": "none"})


TRACE = _trace(
    fp("after_prepare"), fp("after_tool_returned"), fp("after_prepare"), fp("not_a_failpoint"),
    (0, Kind.DRIVER_CALL, {"method": "concurrent_turn", "args": {"role": "A"}}),
    fp("after_prepare"), fp("after_revalidation"), fp("after_permission_decision", 1),
    fp("after_prepare"), (0, Kind.DRIVER_RETURN, {"method": "concurrent_turn"}),
    fp("after_projection"),
)


def test_cases_come_from_the_failpoint_events_of_the_baseline():
    scenario = load(CONCURRENT)
    assert held_points(TRACE) == {1: ("after_prepare", "after_revalidation")}
    cases = plan_cases(0, scenario, TRACE, actions=("crash", "raise", "hold"), max_hits=2,
                       failpoints=None)
    points = [c.point for c in cases]
    assert points[0] == BASELINE
    # lifecycle order of failpoints, hits 1..min(reached, max_hits), crash before raise
    assert points[1:5] == ["crash:after_prepare:1", "crash:after_prepare:2",
                           "raise:after_prepare:1", "raise:after_prepare:2"]
    assert "crash:after_prepare:3" not in points and not any("not_a_failpoint" in p for p in points)
    step = next(n for n, s in enumerate(scenario.steps, 1) if s.do is StepKind.CONCURRENT_TURN)
    assert points[-2:] == [f"hold:after_prepare@step{step}", f"hold:after_revalidation@step{step}"]
    assert len(set(c.id for c in cases)) == len(cases)
    only = plan_cases(0, scenario, TRACE, actions=("crash",), max_hits=None,
                      failpoints=("after_projection",))
    assert [c.point for c in only] == [BASELINE, "crash:after_projection:1"]


def test_a_hit_the_scenarios_own_fault_uses_is_not_swept():
    scenario = dataclasses.replace(load(CONCURRENT), faults=(
        make_fault("after_prepare", "1", "delay", {"seconds": 1.0}),))
    points = [c.point for c in plan_cases(0, scenario, TRACE, actions=("crash",), max_hits=None,
                                          failpoints=None)]
    assert "crash:after_prepare:1" not in points and "crash:after_prepare:2" in points


def test_the_case_scenario_keeps_the_swept_fault_required_and_ends_with_a_restart():
    scenario = dataclasses.replace(load(CONCURRENT), faults=(
        make_fault("after_prepare", "1", "delay", {"seconds": 1.0}),))
    crashed = case_scenario(scenario, "crash", "after_tool_returned", 2)
    own, swept = crashed.faults
    assert own.optional and not swept.optional
    assert (swept.failpoint, swept.hits, swept.action) == (Failpoint.AFTER_TOOL_RETURNED, "2",
                                                           Action.CRASH)
    assert crashed.steps[-1].do is StepKind.RESTART and len(crashed.steps) == len(scenario.steps) + 1
    raised = case_scenario(scenario, "raise", "after_prepare", 2)
    assert raised.faults[-1].action is Action.RAISE and "sweep" in raised.faults[-1].params["message"]
    with pytest.raises(UsageError, match="after_prepare:1"):
        case_scenario(scenario, "crash", "after_prepare", 1)  # the scenario's own hit
    assert case_scenario(scenario, BASELINE) is scenario


def test_the_hold_case_moves_the_hold_of_one_concurrent_turn():
    scenario = load(CONCURRENT)
    step = next(n for n, s in enumerate(scenario.steps, 1) if s.do is StepKind.CONCURRENT_TURN)
    held = case_scenario(scenario, "hold", "after_start_recorded", step)
    assert held.steps[step - 1].hold_at is Failpoint.AFTER_START_RECORDED
    assert not any(f.action is Action.HOLD for f in held.faults)
    with pytest.raises(UsageError, match="not a concurrent_turn"):
        case_scenario(scenario, "hold", "after_prepare", len(scenario.steps) + 5)


def _main(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


SMALL = ("--scenarios", str(CONCURRENT), "--max-hits", "1", "--failpoints", "after_prepare",
         "after_start_recorded", "after_tool_returned", "after_result_saved")


def test_the_reference_passes_a_small_sweep_and_shards_merge_to_the_same_sweep(tmp_path):
    code, out, err = _main("sweep", *SMALL, "--jobs", "2", "--report-dir", str(tmp_path / "all"))
    assert code == 0, out + err
    data = json.loads((tmp_path / "all" / "sweep.json").read_text())
    counts = data["counts"]
    assert counts["crash_points"] == counts["raise_points"] == 4
    assert counts["hold_points"] >= 1 and counts["executions"] > 0
    assert counts["lost_results"] == counts["double_executions"] == 0
    assert counts["passed"] == counts["cases"] - counts["not_exercised"]
    assert "4 crash points, 0 lost results, 0 double executions" in out
    case = next(c for c in data["cases"] if c["point"] == "crash:after_tool_returned:1")
    assert case["replay"].endswith("--crash-at after_tool_returned:1")
    assert data["matrix"][case["scenario"]]["crash:after_tool_returned:1"] == "passed"
    for name in ("sweep.md", "sweep.html", "durations.json"):
        assert (tmp_path / "all" / name).stat().st_size > 0
    for i in (1, 2):
        code, out, err = _main("sweep", *SMALL, "--jobs", "1", "--shard", f"{i}/2",
                               "--report-dir", str(tmp_path / f"p{i}"))
        assert code == 0, out + err
    code, out, err = _main("merge", str(tmp_path / "p1"), str(tmp_path / "p2"),
                           "--report-dir", str(tmp_path / "merged"))
    assert code == 0, out + err
    assert (tmp_path / "merged" / "sweep.json").read_bytes() == \
        (tmp_path / "all" / "sweep.json").read_bytes()


def test_replay_rebuilds_one_sweep_case():
    code, out, err = _main("replay", str(CONCURRENT), "--crash-at", "after_tool_returned:1")
    assert code == 0, out + err
    assert "after_tool_returned, hit #1 -> crash" in out and "restart" in out
    code, _, err = _main("replay", str(CONCURRENT), "--crash-at", "nowhere:1")
    assert code == 2 and "not a failpoint" in err


def test_a_mutant_that_runs_an_unknown_operation_again_fails_the_sweep(tmp_path):
    code, out, err = _main("sweep", "--impl", "mutant:retry-unknown-after-crash",
                           "--scenarios", str(CONCURRENT), "--max-hits", "1", "--actions",
                           "crash", "--failpoints", "after_tool_returned", "--jobs", "1",
                           "--report-dir", str(tmp_path / "m"))
    assert code == 1, out + err
    data = json.loads((tmp_path / "m" / "sweep.json").read_text())
    bad = [c for c in data["cases"] if c["status"] == "failed"]
    assert bad and "double-execution" in bad[0]["failing"]
    assert data["counts"]["double_executions"] >= 1
    assert "--impl mutant:retry-unknown-after-crash --crash-at after_tool_returned:1" in bad[0]["replay"]
