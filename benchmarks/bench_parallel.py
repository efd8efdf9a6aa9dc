"""Cases per second with one worker process and with two, and the sweep's crash-point count.

    python benchmarks/bench_parallel.py [--scenarios PATH ...] [--max-hits N] [--json FILE]

Runs the same scenarios through ``run_suite`` with ``jobs=1`` and ``jobs=2`` in one process,
checks that both give the same verdicts and trace digests (a speed-up that changes results
would be worthless), prints cases per second for each and their ratio (the figure to compare
across machines), then plans the crash sweep of the same scenarios (one learning run each,
no case run) and prints how many crash points it holds. Writes the figures as JSON
(default ``benchmarks/results/bench_parallel.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from harness.implementations.specs import resolve
from harness.running.parallel import run_cases
from harness.running.runner import run_scenario
from harness.scenarios.loader import DEFAULT_SCENARIO_DIR, discover
from harness.running.suite import run_suite
from harness.campaigns.sweep import plan_cases


def _stable(result):
    return [(s.id, s.status, s.trace_digest, s.verdicts) for s in result.scenarios]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", nargs="+", default=[str(DEFAULT_SCENARIO_DIR)])
    parser.add_argument("--max-hits", type=int, default=None,
                        help="bound hits per failpoint in the crash-point count")
    parser.add_argument("--json", "--out", dest="out", metavar="FILE",
                        default=os.path.join("benchmarks", "results", "bench_parallel.json"),
                        help="where to write the JSON result (as in the other benchmarks)")
    args = parser.parse_args()
    scenarios = discover(args.scenarios)
    reference = resolve("reference")
    run_suite(reference, scenarios[:2], jobs=1)  # warm imports and caches

    rates = {}
    results = {}
    for jobs in (1, 2):
        started = time.perf_counter()
        results[jobs] = run_suite(reference, scenarios, jobs=jobs)
        took = time.perf_counter() - started
        rates[jobs] = len(scenarios) / took
        print(f"--jobs {jobs}: {len(scenarios)} cases in {took:.2f} s = {rates[jobs]:.2f} cases/s")
    identical = _stable(results[1]) == _stable(results[2])
    ratio = rates[2] / rates[1]
    print(f"--jobs 2 / --jobs 1: {ratio:.2f} x the cases per second on {os.cpu_count()} core(s); "
          f"results identical: {identical}")

    def learn(index: int) -> int:
        run = run_scenario(reference, scenarios[index], 0)
        cases = plan_cases(index, scenarios[index], run.trace, actions=("crash",),
                           max_hits=args.max_hits, failpoints=None)
        return len(cases) - 1  # the baseline is no crash point

    crash_points = sum(run_cases(learn, len(scenarios), jobs=2))
    print(f"crash sweep of these scenarios: {crash_points} crash points"
          + (f" (at most {args.max_hits} hit(s) per failpoint)" if args.max_hits else
             " (every hit)"))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "cases": len(scenarios), "cores": os.cpu_count(),
        "cases_per_s": {"jobs_1": round(rates[1], 3), "jobs_2": round(rates[2], 3)},
        "ratio_jobs2_over_jobs1": round(ratio, 3), "identical_results": identical,
        "sweep_crash_points": crash_points, "sweep_max_hits": args.max_hits,
    }, indent=2, sort_keys=True) + "\n")
    print(f"written: {out}")


if __name__ == "__main__":
    main()
