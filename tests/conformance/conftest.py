"""Expensive results built once per test run, whichever pytest-xdist worker asks first.

``run_once(name, build)`` runs ``build()`` (which returns plain JSON data) under an
exclusive file lock in the directory all workers of this run share (the parent of each
worker's base temp dir; the base temp dir itself without workers): the first caller builds
and stores the result, the others wait for it and read it. Scheduling does not matter: with
plain ``--dist load`` the tests reading one result may run on any worker. A build that
raises stores nothing, so the next caller tries again and fails the same way.

``reference_suite_run``: the whole bundled suite on the reference through the command line
(`run --check-determinism`: every scenario twice, digests compared), shared by every test
that only reads it.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest

from harness import cli


@pytest.fixture(scope="session")
def run_once(tmp_path_factory) -> Callable[[str, Callable[[], Any]], Any]:
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # .../pytest-N/popen-gwK -> .../pytest-N, one per run

    def once(name: str, build: Callable[[], Any]) -> Any:
        result = shared / f"{name}.json"
        with open(shared / f"{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            if result.exists():
                return json.loads(result.read_text(encoding="utf-8"))
            value = build()
            result.write_text(json.dumps(value), encoding="utf-8")
            return value

    return once


@dataclass(frozen=True, slots=True)
class SuiteRun:
    code: int
    out: str
    err: str
    report: dict
    report_dir: Path


@pytest.fixture(scope="session")
def reference_suite_run(tmp_path_factory, run_once) -> SuiteRun:
    def build() -> dict:
        report_dir = tmp_path_factory.mktemp("reference-suite")
        out, err = io.StringIO(), io.StringIO()
        # The limit is for hangs, not speed: with every core busy, a slow driver call of
        # the longest scenario must not be judged a hang.
        code = cli.main(["run", "--check-determinism", "--time-limit-s", "120",
                         "--report-dir", str(report_dir)], stdout=out, stderr=err)
        return {"code": code, "out": out.getvalue(), "err": err.getvalue(),
                "report_dir": str(report_dir)}

    run = run_once("reference-suite", build)
    report_dir = Path(run["report_dir"])
    report = json.loads((report_dir / "report.json").read_text(encoding="utf-8"))
    return SuiteRun(run["code"], run["out"], run["err"], report, report_dir)
