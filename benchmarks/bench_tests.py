"""The README's test command: wall and CPU time, the 60 s target, the longest tests.

    python benchmarks/bench_tests.py [--serial] [--top N] [--json FILE]

Runs `python -m pytest -q -p no:cacheprovider --durations=N` from the repository root (the
README's `python -m pytest -q`, no cache written, the slowest tests listed) as it runs by
default, over one worker per core (tests/conftest.py); with ``--serial`` also with ``-n 0``
in the same invocation, and prints the ratio of the two. Wall and CPU seconds (children
included, from the kernel's rusage) per run, the ratio of wall to the 60 s target, the
load average before each run (a busy machine inflates wall time, not CPU time), and the
top durations. Per worker (``benchmarks/worker_timeline.py``, loaded with ``-p``): tests
run, seconds busy in them, when its first test started and its last one ended; and the
tail, the gap between the workers' last ends (one worker still running while the other
has nothing left). Writes JSON (default ``benchmarks/results/tests.json``). Exit 1 if a run
fails: a fast red run is no figure.

CPU counts every descendant: on Linux this process is made the *subreaper* of what the run
starts, so a process whose parent exited without waiting for it (a child a forked worker
spawned and left to be killed) is reparented here and waited for, its CPU counted, instead of
going to init uncounted (``adopted`` in the JSON: how many).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_WALL_S = 60.0
TIMELINE_ENV = "LH_BENCH_TIMELINE"  # benchmarks/worker_timeline.py writes there
DURATION_LINE = re.compile(r"^(\d+\.\d+)s (call|setup|teardown)\s+(\S+)$", re.M)


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


def _become_subreaper() -> bool:
    """Orphaned descendants are reparented to this process (Linux), not to init; False where
    that is not available (their CPU then goes uncounted, as before)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _wait_reaping(process: subprocess.Popen) -> int:
    """Wait for ``process``, waiting meanwhile for every adopted orphan that exits (its CPU
    joins RUSAGE_CHILDREN then); the number adopted. Orphans still running when it ends get
    a few seconds more."""
    adopted = 0
    deadline = None
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return adopted
        if info is None:  # children left, none exited
            if deadline is not None and time.monotonic() > deadline:
                return adopted
            time.sleep(0.2)
            continue
        if info.si_pid == process.pid:
            process.wait()
            deadline = time.monotonic() + 5.0
            continue
        os.waitpid(info.si_pid, 0)
        adopted += 1


def _run(extra: list[str], top: int) -> dict:
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
            f"--durations={top}", "-p", "benchmarks.worker_timeline", *extra]
    load_before = os.getloadavg()[0]
    cpu_before = _children_cpu_s()
    with tempfile.TemporaryDirectory() as scratch:
        timeline_file = Path(scratch) / "timeline.json"
        out_file, err_file = Path(scratch) / "stdout", Path(scratch) / "stderr"
        started = time.monotonic()
        with open(out_file, "wb") as out, open(err_file, "wb") as err:
            process = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=err,
                                       env={**os.environ, TIMELINE_ENV: str(timeline_file)})
            adopted = _wait_reaping(process)
        wall_s = time.monotonic() - started
        stdout = out_file.read_text(encoding="utf-8", errors="replace")
        stderr = err_file.read_text(encoding="utf-8", errors="replace")
        timeline = (json.loads(timeline_file.read_text(encoding="utf-8"))
                    if timeline_file.exists() else {"workers": {}, "tail_s": None})
    cpu_s = _children_cpu_s() - cpu_before
    summary = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    durations = [{"seconds": float(s), "phase": phase, "test": test}
                 for s, phase, test in DURATION_LINE.findall(stdout)]
    return {"argv": argv[1:], "exit_code": process.returncode, "wall_s": round(wall_s, 1),
            "cpu_s": round(cpu_s, 1), "adopted": adopted,
            "load_average_before": round(load_before, 2),
            "summary": summary, "top_durations": durations,
            "workers": timeline["workers"], "tail_s": timeline["tail_s"],
            "tail": "" if process.returncode == 0 else (stdout + stderr)[-3000:]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serial", action="store_true",
                        help="also run with -n 0 (one process) and print the ratio")
    parser.add_argument("--top", type=int, default=30, help="how many durations to keep")
    parser.add_argument("--json", "--out", dest="out", metavar="FILE",
                        default=str(ROOT / "benchmarks" / "results" / "tests.json"),
                        help="where to write the JSON result (as in the other benchmarks)")
    args = parser.parse_args()

    subreaper = _become_subreaper()
    runs = {"default": _run([], args.top)}
    if args.serial:
        runs["serial"] = _run(["-n", "0"], args.top)
    failed = False
    for name, run in runs.items():
        print(f"{name}: {run['summary']}")
        print(f"  wall {run['wall_s']:.1f} s ({run['wall_s'] / TARGET_WALL_S:.2f} x the "
              f"{TARGET_WALL_S:.0f} s target), CPU {run['cpu_s']:.1f} s, load average "
              f"before {run['load_average_before']:.2f} on {os.cpu_count()} core(s)")
        print("  CPU of orphaned descendants: " + (
            f"counted ({run['adopted']} adopted)" if subreaper else "not counted"))
        for worker, seen in run["workers"].items():
            print(f"  {worker}: {seen['tests']} tests, {seen['busy_s']:.1f} s busy, first "
                  f"start {seen['first_start_s']:.1f} s, last end {seen['last_end_s']:.1f} s")
        if run["tail_s"] is not None:
            print(f"  tail (one worker still running, the other done): {run['tail_s']:.1f} s")
        if run["exit_code"] != 0:
            failed = True
            print(f"  exit {run['exit_code']}:\n{run['tail']}")
    if args.serial:
        ratio = runs["serial"]["wall_s"] / runs["default"]["wall_s"]
        print(f"serial / default wall: {ratio:.2f}")
    print("longest (default run):")
    for entry in runs["default"]["top_durations"][:args.top]:
        print(f"  {entry['seconds']:7.2f}s {entry['phase']:<8} {entry['test']}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"cores": os.cpu_count(), "target_wall_s": TARGET_WALL_S,
                               "orphans_counted": subreaper, "runs": runs},
                              indent=2, sort_keys=True) + "\n",
                   encoding="utf-8")
    print(f"written: {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
