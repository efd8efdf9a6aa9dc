"""Both crash modes agree on the reference.

The l4 crash scenarios run in-process (a ``SimulatedCrash`` unwinds the instance) and as a
process (``process:python -m reference_impl.remote``: the child is SIGKILLed at the
failpoint); every criterion must come out with the same status, every scenario must pass,
and apart from the recorded crash mode the traces must be identical.
"""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

import pytest

import reference_impl
from harness.remote.launcher import ProcessImplementation
from harness.running.runner import run_scenario
from harness.scenarios.loader import discover
from harness.running.suite import run_suite
from harness.trace.record import Kind, trace_to_json

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[2]
CRASH_SCENARIOS = tuple(s for s in discover([ROOT / "scenarios" / "l4"]) if "crash" in s.tags)
SERVER = [sys.executable, "-m", "reference_impl.remote"]
SEED = 11


def _normalized(trace) -> dict:
    data = trace_to_json(trace)
    data["meta"]["crash_mode"] = "*"
    for event in data["events"]:
        if event["kind"] == Kind.CRASH:
            event["data"]["mode"] = "*"
    return data


def _suite(implementation, spec):
    traces = {}

    def runner(impl, scenario, seed, **kwargs):
        run = run_scenario(impl, scenario, seed, **kwargs)
        traces[scenario.id] = run.trace
        return run

    started = time.monotonic()
    result = run_suite(implementation, CRASH_SCENARIOS, SEED, runner=runner, impl_spec=spec)
    return result, traces, time.monotonic() - started


def test_both_crash_modes_agree_on_the_reference():
    assert len(CRASH_SCENARIOS) >= 4
    in_process, in_traces, in_seconds = _suite(reference_impl.implementation(), "reference")
    with ProcessImplementation(SERVER) as implementation:
        as_process, process_traces, process_seconds = _suite(
            implementation, "process:" + shlex.join(SERVER))
    print(f"\nl4 crash scenarios: in-process {in_seconds:.2f}s, process {process_seconds:.2f}s")

    assert {c.id: c.status for c in as_process.criteria} == \
        {c.id: c.status for c in in_process.criteria}
    assert {c.id: c.exercised for c in as_process.criteria} == \
        {c.id: c.exercised for c in in_process.criteria}
    assert all(s.status == "passed" for s in as_process.scenarios), [
        (s.id, s.status, s.error) for s in as_process.scenarios]
    for scenario in CRASH_SCENARIOS:
        ours, theirs = process_traces[scenario.id], in_traces[scenario.id]
        assert ours.meta.crash_mode == "process"
        assert ours.crashes() and all(e.data["mode"] == "process" for e in ours.crashes())
        assert _normalized(ours) == _normalized(theirs), scenario.id
