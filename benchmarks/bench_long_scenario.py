"""A scenario of N sequential write calls: the harness's time and peak memory against N.

    python benchmarks/bench_long_scenario.py [--n 100 200 400 1000] [--max-s 300] [--out FILE]

One session, one turn, N model responses each asking for one ``write`` call (a distinct key),
then the model's default final answer (at most 1,000 scripted responses fit a scenario's
array, so N is at most 1,000): the conversation, the store and the trace all grow along the session.
Each row runs in a fresh interpreter (so its peak is its own) on the embedded reference,
in-process: the run (``run_scenario``: the implementation, the world, the store probes), then
the judging (every criterion, and the trace digest, as a campaign judges a case). It prints
the seconds of each, the peak resident memory of the process (``ru_maxrss``: harness and
reference together), the trace's size (events, store readings), and the exponent fitted
between successive rows and over all of them (time ~ N^k: 1 is linear, 2 quadratic). A row
that would take longer than ``--max-s`` is stopped and says so. Each row raises the bound on
a run's events (``LIFECYCLE_HARNESS_LIMITS``, unless set) to 40 per call: a write call
records about 25, and the default bound of 10,000 would end the session past N = 400. The target (issue 29): N =
1,000 run and judged in at most 10 s with at most 500 MB. Numbers, not assertions.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_N, TARGET_S, TARGET_MB = 1000, 10.0, 500.0


def scenario_text(n: int) -> str:
    lines = ['id = "bench-long-scenario"', 'stage = "l1"',
             f'title = "{n} sequential write calls in one turn"', "",
             "[[sessions]]", 'id = "s1"', 'rules = [{ effect = "allow", tool = "put_object" }]',
             "", "[[tools]]", 'name = "put_object"', 'kind = "write"', ""]
    for i in range(n):
        lines += ["[[model]]", f'tool_calls = [{{ id = "c{i}", tool = "put_object", '
                               f'args = {{ key = "reports/{i}.csv", body = "row {i}" }} }}]', ""]
    # the final answer is the simulated model's default one (its script ran out): a
    # scenario's arrays hold at most 1,000 items (docs/scenarios.md, "Limits"), so N = 1,000
    # calls leave no room for a scripted answer
    lines += ["[[steps]]", 'do = "turn"', 'text = "store the reports"']
    return "\n".join(lines) + "\n"


def one_row(n: int) -> dict:
    """Run and judge the N-call scenario here (called in a fresh interpreter)."""
    import resource

    import reference_impl
    from harness.campaigns.chaos import judge
    from harness.running.runner import run_scenario
    from harness.running.suite import default_criteria
    from harness.scenarios.loader import loads

    def cpu_s() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    scenario = loads(scenario_text(n))
    implementation, criteria = reference_impl.implementation(), default_criteria()
    started, cpu_started = time.monotonic(), cpu_s()
    run = run_scenario(implementation, scenario, 0, time_limit_s=600.0)
    run_s, run_cpu_s = time.monotonic() - started, cpu_s() - cpu_started
    started, cpu_started = time.monotonic(), cpu_s()
    outcome = judge(run, criteria)
    judge_s, judge_cpu_s = time.monotonic() - started, cpu_s() - cpu_started
    return {
        "n": n, "run_s": round(run_s, 2), "judge_s": round(judge_s, 2),
        "total_s": round(run_s + judge_s, 2), "run_cpu_s": round(run_cpu_s, 2),
        "judge_cpu_s": round(judge_cpu_s, 2), "cpu_s": round(run_cpu_s + judge_cpu_s, 2),
        "peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "events": len(run.trace.events), "readings": len(run.trace.observations),
        "distinct_readings": len({id(p.observation) for p in run.trace.observations}),
        "verdict": outcome.brief(), "digest": outcome.trace_digest,
    }


def exponent(a: dict, b: dict, key: str) -> float:
    return math.log(b[key] / a[key]) / math.log(b["n"] / a["n"]) if a[key] > 0 else float("nan")


def fitted(rows: list[dict], key: str) -> float:
    """Least-squares slope of log(value) over log(N)."""
    points = [(math.log(r["n"]), math.log(r[key])) for r in rows if r[key] > 0]
    if len(points) < 2:
        return float("nan")
    mx = sum(x for x, _ in points) / len(points)
    my = sum(y for _, y in points) / len(points)
    return sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[100, 200, 400, 1000],
                        help="session lengths (at most 1,000: a scenario's arrays hold 1,000 items)")
    parser.add_argument("--max-s", type=float, default=300.0,
                        help="stop a row after this many wall-clock seconds")
    parser.add_argument("--out", default=None, help="also write the rows as JSON here")
    parser.add_argument("--row", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.row is not None:
        print(json.dumps(one_row(args.row)))
        return
    rows: list[dict] = []
    print(f"{'N':>6} {'run s':>7} {'judge s':>8} {'total s':>8} {'CPU s':>7} {'peak MB':>8} "
          f"{'events':>7} {'readings':>8} {'distinct':>8}  verdict")
    for n in sorted(args.n):
        env = dict(os.environ)
        # a write call makes the world record about 25 events: past N = 400 the default
        # bound on a run's events (docs/protocol.md, "Limits") would stop the session
        env.setdefault("LIFECYCLE_HARNESS_LIMITS", f"events_per_scenario={max(10_000, 40 * n)}")
        try:
            child = subprocess.run([sys.executable, __file__, "--row", str(n)], cwd=ROOT, env=env,
                                   capture_output=True, text=True, timeout=args.max_s)
        except subprocess.TimeoutExpired:
            print(f"{n:>6}  stopped after {args.max_s:g} s (larger N not run)")
            break
        if child.returncode != 0:
            print(f"{n:>6}  failed: {child.stderr.strip().splitlines()[-1:]}")
            break
        row = json.loads(child.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(f"{n:>6} {row['run_s']:>7} {row['judge_s']:>8} {row['total_s']:>8} "
              f"{row['cpu_s']:>7} {row['peak_mb']:>8} {row['events']:>7} {row['readings']:>8} "
              f"{row['distinct_readings']:>8}  {row['verdict']}")
    for a, b in zip(rows, rows[1:]):
        print(f"exponent N={a['n']}->{b['n']}: time {exponent(a, b, 'total_s'):.2f} (run "
              f"{exponent(a, b, 'run_s'):.2f}, judge {exponent(a, b, 'judge_s'):.2f}), CPU "
              f"{exponent(a, b, 'cpu_s'):.2f} (run {exponent(a, b, 'run_cpu_s'):.2f}, judge "
              f"{exponent(a, b, 'judge_cpu_s'):.2f}), peak memory {exponent(a, b, 'peak_mb'):.2f}")
    if len(rows) > 1:
        print(f"fitted over every row: time N^{fitted(rows, 'total_s'):.2f}, CPU "
              f"N^{fitted(rows, 'cpu_s'):.2f}, peak memory N^{fitted(rows, 'peak_mb'):.2f}")
    at_target = next((r for r in rows if r["n"] == TARGET_N), None)
    if at_target is not None:
        print(f"target N={TARGET_N}: {at_target['total_s']} s wall, {at_target['cpu_s']} s CPU "
              f"(x{at_target['cpu_s'] / TARGET_S:.2f} of {TARGET_S:g} s), {at_target['peak_mb']} MB "
              f"(x{at_target['peak_mb'] / TARGET_MB:.2f} of {TARGET_MB:g} MB)")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            json.dump(rows, handle, indent=2)
            handle.write("\n")


if __name__ == "__main__":
    main()
