"""The harness's peak memory and wall time under flooding implementations, measured in one run.

    python benchmarks/bench_hostile_memory.py [--line-mb 200] [--case NAME ...]

Each case runs ``lifecycle-harness run`` (in a fresh interpreter, so the peak is the case's
own) on one scenario against ``tests/hostile/hostile_server.py`` in a misbehaving mode, with
the default limits (``harness.contract.limits``), and prints one row: case, exit code, wall time, and
the harness process's peak resident memory (``ru_maxrss``; children not included). The
baseline row is the same scenario against the well-behaved reference server (its exit 1
only says that one scenario leaves most criteria not exercised). Numbers, not
assertions: compare them with the ceiling in the README (300 MB).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVER = ROOT / "tests" / "hostile" / "hostile_server.py"
SCENARIO = ROOT / "scenarios" / "l4" / "crash_after_result_saved.toml"
CASES = {
    "baseline": "run",
    "huge line (no newline)": "huge-line",
    "JSON nested 100,000 deep": "deep-json",
    "event flood": "event-flood",
    "events with 1 MB strings": "big-events",
    "request flood (no waiting)": "request-flood",
    "huge inspect answer": "huge-inspect",
    "10 MB inspect answers": "big-inspect",
}


CASE_TIMEOUT_S = 120
"""A case still running after this is reported as such (and killed)."""
ADDRESS_SPACE_BYTES = 4 << 30
"""A case's address space is capped (RLIMIT_AS), so an unbounded case fails with a
MemoryError instead of taking the machine's memory."""


def _one(mode: str, line_mb: int) -> dict:
    """Run the CLI in this interpreter (the child of the benchmark) and report its peak."""
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = ADDRESS_SPACE_BYTES if hard == resource.RLIM_INFINITY else min(hard,
                                                                          ADDRESS_SPACE_BYTES)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))

    from harness.cli.app import main

    os.environ["LH_HOSTILE_BYTES"] = str(line_mb * 1_000_000)
    with tempfile.TemporaryDirectory(prefix="lh-bench-") as folder:
        pids = Path(folder) / "pids.txt"
        pids.touch()
        command = f"{sys.executable} {SERVER} {mode} {pids}"
        started = time.monotonic()
        with open(os.devnull, "w") as quiet:
            code = main(["run", "--impl", f"process:{command}", "--scenarios", str(SCENARIO),
                         "--report-dir", str(Path(folder) / "reports")],
                        stdout=quiet, stderr=quiet)
        wall_s = time.monotonic() - started
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"exit": code, "wall_s": wall_s, "peak_mb": peak_kib / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--line-mb", type=int, default=200,
                        help="size of the huge line in MB (default 200)")
    parser.add_argument("--case", action="append", choices=sorted(CASES.values()),
                        help="only these modes (repeatable)")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(_one(args.one, args.line_mb)))
        return
    modes = args.case or list(CASES.values())
    print(f"{'case':<30} {'exit':>4} {'wall s':>7} {'peak MB':>8}")
    for name, mode in CASES.items():
        if mode not in modes:
            continue
        try:
            done = subprocess.run([sys.executable, __file__, "--one", mode, "--line-mb",
                                   str(args.line_mb)], capture_output=True, text=True, cwd=ROOT,
                                  timeout=CASE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            print(f"{name:<30} still running after {CASE_TIMEOUT_S} s (killed)")
            continue
        try:
            row = json.loads(done.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            print(f"{name:<30} failed: {done.stderr.strip()[-300:]}")
            continue
        print(f"{name:<30} {row['exit']:>4} {row['wall_s']:>7.1f} {row['peak_mb']:>8.0f}")


if __name__ == "__main__":
    main()
