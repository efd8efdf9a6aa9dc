"""Generated cases per second and the harness's peak memory, measured in one run.

    python benchmarks/bench_generate.py [--budget 300] [--seed 0] [--jobs 1 2] [--out FILE]

Each row runs one generation campaign (``harness.campaigns.generate.run_generation``) on the
embedded reference, in-process, in a fresh interpreter (so the peak is the row's own), and
prints: jobs, cases, wall seconds, cases per second, its ratio to the target of 100 cases/s on
2 cores, the time split between drawing workloads (Hypothesis) and running + judging them
(CPU milliseconds per case, both warm, measured on the first chunk in the same
interpreter), and the peak resident memory of the harness process and of its largest worker (``ru_maxrss`` of self and of the
waited children). Numbers, not assertions: the targets are compared in the printout and in
``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_CASES_PER_S = 100.0


def one_row(budget: int, seed: int, jobs: int) -> dict:
    """Run one campaign here and report it (called in a fresh interpreter)."""
    import resource

    import reference_impl
    from harness.campaigns.generate import (
        draw_chunk, implementation_context, run_chunk, run_generation,
    )
    from harness.running.suite import default_criteria, default_runner

    implementation = reference_impl.implementation()
    criteria, runner = default_criteria(), default_runner()
    context = implementation_context(implementation)
    sample = min(budget, 50)
    # The split is in this process's CPU seconds (every thread), both parts warm: the first
    # draw pays Hypothesis' one-time start, and wall seconds on a loaded machine could make
    # the difference below negative.
    draw_chunk(seed, 0, context, sample)
    started = time.process_time()
    draw_chunk(seed, 0, context, sample)
    draw_s = time.process_time() - started
    started = time.process_time()
    run_chunk(implementation, 0, seed=seed, context=context, count=sample, criteria=criteria,
              runner=runner, time_limit_s=20.0)
    chunk_s = time.process_time() - started  # drawing again + running + judging
    started = time.monotonic()
    result = run_generation(implementation, seed=seed, budget=budget, criteria=criteria,
                            runner=runner, jobs=jobs, shrink=False,
                            regressions_dir=str(Path("/tmp") / "lh-bench-generate"))
    wall_s = time.monotonic() - started
    cases = len(result.cases)
    return {
        "jobs": jobs, "cases": cases, "wall_s": round(wall_s, 2),
        "cases_per_s": round(cases / wall_s, 1) if wall_s else 0.0,
        "ratio_to_target": round(cases / wall_s / TARGET_CASES_PER_S, 2) if wall_s else 0.0,
        "draw_ms_per_case": round(1000 * draw_s / sample, 1),
        "run_and_judge_ms_per_case": round(1000 * (chunk_s - draw_s) / sample, 1),
        "failure": result.failure.outcome.brief() if result.failure else None,
        "peak_mb_harness": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "peak_mb_largest_worker": round(
            resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--out", default=None, help="also write the rows as JSON here")
    parser.add_argument("--row", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.row is not None:  # the child: one row, as JSON on stdout
        print(json.dumps(one_row(args.budget, args.seed, args.row)))
        return
    rows = []
    header = (f"{'jobs':>4} {'cases':>6} {'wall s':>7} {'cases/s':>8} {'x target':>8} "
              f"{'draw ms':>8} {'run ms':>7} {'peak MB':>8} {'worker MB':>9}")
    print(f"generation on the reference, seed {args.seed}, budget {args.budget} "
          f"(target {TARGET_CASES_PER_S:g} cases/s on 2 cores)")
    print(header)
    for jobs in args.jobs:
        done = subprocess.run([sys.executable, __file__, "--budget", str(args.budget),
                               "--seed", str(args.seed), "--row", str(jobs)],
                              capture_output=True, text=True, cwd=ROOT, check=False)
        if done.returncode != 0:
            print(f"{jobs:>4} failed: {done.stderr.strip().splitlines()[-1:]}")
            continue
        row = json.loads(done.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(f"{row['jobs']:>4} {row['cases']:>6} {row['wall_s']:>7} {row['cases_per_s']:>8} "
              f"{row['ratio_to_target']:>8} {row['draw_ms_per_case']:>8} "
              f"{row['run_and_judge_ms_per_case']:>7} {row['peak_mb_harness']:>8} "
              f"{row['peak_mb_largest_worker']:>9}"
              + (f"  (stopped at a failure: {row['failure']})" if row["failure"] else ""))
    if args.out:
        Path(args.out).write_text(json.dumps({"seed": args.seed, "budget": args.budget,
                                              "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
