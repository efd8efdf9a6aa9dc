"""Generated cases per second on a Dask cluster of 1 and 2 local workers, against one process.

    python benchmarks/bench_cluster.py [--budget 200] [--seed 0] [--workers 1 2] [--out FILE]
    python benchmarks/bench_cluster.py --scheduler HOST:PORT   # a cluster you started yourself

Each row runs one generation campaign (``run_generation``) on the embedded reference: first in
this process (``--jobs 1``), then with ``--executor`` on a ``distributed.LocalCluster`` of N
worker processes (one thread each) started for the row, or on the scheduler given. It prints
cases, wall seconds, cases per second, the ratio to one process, and whether the cases and
their trace digests are those of one process. A chunk of 100 cases is the unit a worker draws
and runs, so a budget of 100 x workers keeps every worker busy. Numbers, not assertions.
"""

from __future__ import annotations

import argparse
import json
import time

TARGET_CASES_PER_S = 100.0


def _campaign(budget: int, seed: int, executor=None) -> tuple[list, float]:
    import reference_impl
    from harness.campaigns.generate import run_generation

    implementation = reference_impl.implementation()
    on = None if executor is None else executor(implementation)
    started = time.monotonic()
    try:
        result = run_generation(implementation, seed=seed, budget=budget, shrink=False, jobs=1,
                                executor=on, regressions_dir="/tmp/lh-bench-cluster")
    finally:
        if on is not None:
            on.close()
    took = time.monotonic() - started
    return [(c.key, c.outcome.trace_digest) for c in result.cases], took


def _on(address: str):
    from harness.campaigns.executor import DaskCluster, ImplementationRecipe

    return lambda implementation: DaskCluster(
        address, [(implementation, ImplementationRecipe("reference"))])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--scheduler", default=None,
                        help="HOST:PORT of a running scheduler (then --workers is not used)")
    parser.add_argument("--out", default=None, help="also write the rows as JSON here")
    args = parser.parse_args()

    import distributed

    rows = []
    alone, took = _campaign(args.budget, args.seed)
    rows.append({"where": "one process", "cases": len(alone), "wall_s": round(took, 2),
                 "cases_per_s": round(len(alone) / took, 1), "x_one_process": 1.0,
                 "same_as_one_process": True})
    clusters = [("scheduler " + args.scheduler, args.scheduler, None)] if args.scheduler else \
        [(f"{n} local worker(s)", None, n) for n in args.workers]
    for label, address, workers in clusters:
        local = None
        if address is None:
            local = distributed.LocalCluster(n_workers=workers, threads_per_worker=1,
                                             processes=True, dashboard_address=None)
            address = local.scheduler_address.removeprefix("tcp://")
        try:
            there, took = _campaign(args.budget, args.seed, _on(address))
        finally:
            if local is not None:
                local.close()
        rows.append({"where": label, "cases": len(there), "wall_s": round(took, 2),
                     "cases_per_s": round(len(there) / took, 1),
                     "x_one_process": round((len(there) / took) / rows[0]["cases_per_s"], 2),
                     "same_as_one_process": there == alone})
    print(f"{'where':<22} {'cases':>6} {'wall s':>7} {'cases/s':>8} {'x 1 proc':>8} "
          f"{'x target':>8}  same")
    for row in rows:
        print(f"{row['where']:<22} {row['cases']:>6} {row['wall_s']:>7} {row['cases_per_s']:>8} "
              f"{row['x_one_process']:>8} {row['cases_per_s'] / TARGET_CASES_PER_S:>8.2f}  "
              f"{row['same_as_one_process']}")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            json.dump(rows, handle, indent=2)
            handle.write("\n")


if __name__ == "__main__":
    main()
