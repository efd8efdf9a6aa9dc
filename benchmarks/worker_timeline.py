"""pytest plugin for `bench_tests.py`: when each worker of a run was busy, from the controller.

Loaded with ``-p benchmarks.worker_timeline`` (the repository root is the working directory,
so ``benchmarks`` imports as a namespace package); it does nothing unless
``LH_BENCH_TIMELINE`` names a file, and nothing in xdist workers. The controller (or the
only process) takes every test's phase reports as they arrive (their ``start``/``stop``
times and the worker that ran them) and writes, at session end, per worker: tests run,
seconds busy in them, and when its first test started and its last one ended, counted from
the session's start. The gap between the workers' last ends is the run's tail: one worker
still running while the others have nothing left.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

ENV = "LH_BENCH_TIMELINE"


class _Timeline:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.session_start = time.time()
        self.workers: dict[str, dict[str, float]] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        node = getattr(report, "node", None)
        worker = getattr(getattr(node, "gateway", None), "id", None) or "main"
        entry = self.workers.setdefault(worker, {"tests": 0, "busy_s": 0.0,
                                                 "first_start": report.start,
                                                 "last_end": report.stop})
        entry["busy_s"] += report.stop - report.start
        entry["first_start"] = min(entry["first_start"], report.start)
        entry["last_end"] = max(entry["last_end"], report.stop)
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            entry["tests"] += 1

    def pytest_sessionfinish(self) -> None:
        workers = {
            name: {"tests": int(entry["tests"]), "busy_s": round(entry["busy_s"], 1),
                   "first_start_s": round(entry["first_start"] - self.session_start, 1),
                   "last_end_s": round(entry["last_end"] - self.session_start, 1)}
            for name, entry in sorted(self.workers.items())}
        ends = [w["last_end_s"] for w in workers.values()]
        self.out.write_text(json.dumps({
            "workers": workers,
            "tail_s": round(max(ends) - min(ends), 1) if ends else 0.0,
            "session_s": round(time.time() - self.session_start, 1),
        }, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def pytest_configure(config: pytest.Config) -> None:
    out = os.environ.get(ENV)
    if out and not hasattr(config, "workerinput"):
        config.pluginmanager.register(_Timeline(Path(out)), "lh-bench-timeline")
