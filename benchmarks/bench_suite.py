"""Where a suite run spends its time, measured in one run and printed as ratios.

    python benchmarks/bench_suite.py [--scenarios PATH ...] [--process]

Prints, for the bundled scenarios (or the given ones): scenario runs per second in-process,
the share of time spent judging criteria versus running scenarios, the cost of the durable
store probes (runs with probes vs. the implementation's own work), and with ``--process``
the slowdown of out-of-process runs (real child processes, JSON-RPC over stdio) relative to
in-process ones. Ratios, not absolute numbers, are what compare across machines.
"""

from __future__ import annotations

import argparse
import time

from harness.criteria.catalogue import CRITERIA
from harness.criteria.base import run_check
from harness.implementations import resolve
from harness.runner import run_scenario
from harness.scenarios import DEFAULT_SCENARIO_DIR, discover


def _time_runs(implementation, scenarios, seed=0):
    started = time.perf_counter()
    runs = [run_scenario(implementation, scenario, seed) for scenario in scenarios]
    return time.perf_counter() - started, runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", nargs="+", default=[str(DEFAULT_SCENARIO_DIR)])
    parser.add_argument("--process", action="store_true", help="also time process mode")
    args = parser.parse_args()
    scenarios = discover(args.scenarios)
    reference = resolve("reference")

    _time_runs(reference, scenarios[:3])  # warm imports and caches
    run_s, runs = _time_runs(reference, scenarios)
    started = time.perf_counter()
    for run in runs:
        for criterion in CRITERIA:
            run_check(criterion, run.trace)
    judge_s = time.perf_counter() - started
    events = sum(len(run.trace.events) for run in runs)
    observations = sum(len(run.trace.observations) for run in runs)

    print(f"{len(scenarios)} scenarios, {events} trace events, {observations} store readings")
    print(f"in-process: {len(scenarios) / run_s:.1f} scenario runs/s ({run_s:.2f} s)")
    print(f"judging {len(CRITERIA)} criteria: {judge_s:.2f} s = {judge_s / run_s:.2f} x the run time")
    print(f"store readings per trace event: {observations / max(events, 1):.2f}")
    if args.process:
        process = resolve("process:python -m reference_impl.remote")
        _time_runs(process, scenarios[:1])
        process_s, _ = _time_runs(process, scenarios)
        print(f"process mode: {process_s:.2f} s = {process_s / run_s:.1f} x in-process")


if __name__ == "__main__":
    main()
