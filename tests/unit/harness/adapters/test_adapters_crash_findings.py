"""The adapters' stated findings, reproduced in process mode with real SIGKILL crashes.

Skipped with the reason when the adapters extra is not installed. Each case runs one l4
crash scenario through the suite and asserts on the world's ledger (how many times the
tool really ran) and on the criteria the finding is about."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.adapters import find
from harness.implementations.specs import resolve
from harness.running.runner import run_scenario
from harness.scenarios.loader import discover
from harness.running.suite import run_suite
from harness.trace.record import Kind

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[4]
SCENARIOS = {s.id: s for s in discover([ROOT / "scenarios" / "l4"])}
BEFORE_SAVE = "l4-crash-after-tool-returned"
AFTER_SAVE = "l4-crash-after-result-saved"


def _needs(name: str) -> None:
    adapter = find(name)
    if not adapter.installed:
        pytest.skip(f"adapter {name} not installed: {adapter.missing_reason}")


def _run(name: str, scenario_id: str):
    _needs(name)
    spec = f"adapter:{name}"
    traces = []

    def runner(impl, scenario, seed, **kwargs):
        run = run_scenario(impl, scenario, seed, **kwargs)
        traces.append(run.trace)
        return run

    implementation = resolve(spec)
    result = run_suite(implementation, [SCENARIOS[scenario_id]], 0, runner=runner,
                       impl_spec=spec)
    (trace,) = traces
    assert trace.meta.crash_mode == "process"
    assert [e.data["mode"] for e in trace.crashes()] == ["process"]
    # every instance and inspector was forked from one template that imported the library
    # once (harness.adapters.serve): not a new process importing it for seconds each time
    assert implementation.fork_off is None
    inspectors = list(implementation._inspectors.values())
    assert inspectors and all(c.forked for c in inspectors)
    statuses = {c.id: c.status for c in result.criteria}
    return trace, statuses


def _runs_of(trace) -> list[str]:
    return [e.data["execution_id"] for e in trace.of_kind(Kind.TOOL_EXECUTED)]


@pytest.mark.parametrize("name", ["langgraph-sync", "langgraph-async", "dbos"])
def test_a_crash_before_the_result_is_saved_runs_the_tool_twice(name):
    trace, statuses = _run(name, BEFORE_SAVE)
    runs = _runs_of(trace)
    assert len(runs) == 2 and len(set(runs)) == 1, runs
    assert statuses["L1.8"] == "failed"  # the automatic re-run of a call that had executed
    assert statuses["L4.6"] == "failed"  # neither library records a start before the tool runs


@pytest.mark.parametrize("name", ["langgraph-sync", "dbos"])
def test_a_crash_once_the_result_is_saved_does_not_run_the_tool_again(name):
    trace, statuses = _run(name, AFTER_SAVE)
    assert len(_runs_of(trace)) == 1
    assert statuses["L4.1"] == "passed"  # the turn continued from the saved result
    final = trace.final_observation()
    (operation,) = final.operations
    assert operation.outcome == "succeeded" and operation.delivery == "recorded"


def test_langgraph_exit_durability_loses_the_turn_the_world_executed():
    trace, statuses = _run("langgraph-exit", BEFORE_SAVE)
    assert len(_runs_of(trace)) == 1
    assert trace.final_observation().operations == ()  # the store never heard of the call
    assert statuses["X2"] == "failed"


def test_dbos_refuses_a_second_live_instance_and_langgraph_shows_multi_instance():
    # Every scenario runs for the adapters (docs/lifecycle.md, "Conformance levels"): DBOS
    # refuses instance B of a concurrent turn, the documented way out of multi_instance
    # (a second launch would take up A's pending workflow and wait for it: a hang), while
    # LangGraph opens it, so its behaviour shows the feature and L4.10 judges it.
    from harness.criteria import feature_evidence

    scenario = SCENARIOS["l4-concurrent-duplicates"]
    _needs("dbos")
    dbos = run_scenario(resolve("adapter:dbos"), scenario, 0, time_limit_s=60)
    refused = [e for e in dbos.trace.of_kind(Kind.DRIVER_RAISED) if e.data.get("refused")]
    assert [(e.instance, e.data["method"]) for e in refused] == [(1, "open")]
    assert "another DBOS launch is live on this data dir" in refused[0].data["message"]
    assert dbos.error == "" and feature_evidence.shown_features(dbos.trace) == ()
    _needs("langgraph-sync")
    langgraph = run_scenario(resolve("adapter:langgraph-sync"), scenario, 0, time_limit_s=60)
    assert "multi_instance" in feature_evidence.shown_features(langgraph.trace)
    assert not [e for e in langgraph.trace.of_kind(Kind.DRIVER_RAISED) if e.data.get("refused")]
