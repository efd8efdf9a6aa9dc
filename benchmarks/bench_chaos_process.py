"""A process-mode chaos campaign's wall time, CPU time and phases (target: 50 schedules within
a minute on 2 cores).

    python benchmarks/bench_chaos_process.py [--budget 50] [--seed 5] [--jobs 2]

Runs ``lifecycle-harness chaos --impl 'process:python -m reference_impl.remote'`` in a fresh
interpreter and prints one row: wall seconds, CPU seconds of the harness and every process
it started (``RUSAGE_CHILDREN``), CPU per core (``cpu / jobs``: the wall time the campaign
needs on an otherwise idle machine with that many cores, the processes' own waits aside),
the load average around the run (the machine is shared: a high load stretches the wall
time, not the CPU time), and the phases read from the command's progress lines: start
(imports, the load-time handshake), learning the bases' hits on the in-process reference,
then the schedules (with the plain runs of their bases on the implementation). The ratio
printed is against the 60 s target.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 60.0
IMPL = "process:python -m reference_impl.remote"


def run(budget: int, seed: int, jobs: int) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load_before = os.getloadavg()[0]
    marks: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="lh-bench-chaos-") as folder:
        started = time.monotonic()
        process = subprocess.Popen(
            [sys.executable, "-u", "-m", "harness.cli", "chaos", "--impl", IMPL,
             "--seed", str(seed), "--budget", str(budget), "--jobs", str(jobs),
             "--regressions-dir", str(Path(folder) / "reg")],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert process.stdout is not None
        last = ""
        for line in process.stdout:
            now = time.monotonic() - started
            last = line.strip() or last
            if line.startswith("chaos:"):
                marks.setdefault("started", now)
            elif line.startswith("[base "):
                marks["learned"] = now
            elif line.startswith("[") and " -> " in line:
                marks["schedules"] = now
        code = process.wait()
        wall_s = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    learned = marks.get("learned", 0.0)
    return {"exit": code, "last_line": last, "budget": budget, "seed": seed, "jobs": jobs,
            "wall_s": round(wall_s, 2), "cpu_s": round(cpu_s, 2),
            "cpu_per_core_s": round(cpu_s / max(jobs, 1), 2),
            "load_before": round(load_before, 1), "load_after": round(os.getloadavg()[0], 1),
            "start_s": round(marks.get("started", 0.0), 2),
            "learning_s": round(learned - marks.get("started", 0.0), 2),
            "schedules_s": round(marks.get("schedules", wall_s) - learned, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=50)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--json", metavar="FILE", help="also write the row as JSON here")
    args = parser.parse_args()
    row = run(args.budget, args.seed, args.jobs)
    print(f"process-mode chaos, {row['budget']} schedules, seed {row['seed']}, "
          f"{row['jobs']} jobs: exit {row['exit']} ({row['last_line']})")
    print(f"wall {row['wall_s']:.1f} s ({row['wall_s'] / TARGET_S:.2f}x the {TARGET_S:.0f} s "
          f"target; load average {row['load_before']} -> {row['load_after']}); CPU "
          f"{row['cpu_s']:.1f} s = {row['cpu_per_core_s']:.1f} s per core "
          f"({row['cpu_per_core_s'] / TARGET_S:.2f}x the target)")
    print(f"phases: start {row['start_s']:.1f} s, learning the bases on the reference "
          f"{row['learning_s']:.1f} s, schedules (and their bases' plain runs) "
          f"{row['schedules_s']:.1f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(row, indent=1, sort_keys=True) + "\n",
                                   encoding="utf-8")


if __name__ == "__main__":
    main()
