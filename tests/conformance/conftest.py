"""Expensive results built once per test run, whichever pytest-xdist worker asks first.

``run_once(name, build)`` runs ``build()`` (which returns plain JSON data) under an
exclusive file lock in the directory all workers of this run share (the parent of each
worker's base temp dir; the base temp dir itself without workers): the first caller builds
and stores the result, the others wait for it and read it. Scheduling does not matter: with
plain ``--dist load`` the tests reading one result may run on any worker. A build that
raises stores nothing, so the next caller tries again and fails the same way.

``reference_suite_run``: the whole bundled suite on the reference through the command line
(`run`), shared by every test that only reads it. ``selftest_run``: `selftest` through the
command line; its report carries the reference's own run of the whole suite (forked workers),
a second run the determinism test compares with the first, digest for digest, instead of
running every scenario a second time (`run --check-determinism`, tested on a few scenarios).

The tests that start a shared result run first: a worker that asks for a result another
worker is building waits for it, idle (20-40 s for the reference suite), and with tests
handed out one at a time (tests/conftest.py) the readers of one result, next to each other
in collection order, would go to both workers at once. So the first test asking for each
result (a fixture built through ``run_once``, per parametrization: one per profile) moves
to the front of the run, in collection order, and its readers stay where they are, so they
reach a worker after the result had a head start. A test that reads the results of every
parametrization (the docs/matrix.md matrix of all the profiles) is a reader, not a starter.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

import pytest

from harness.cli import app as cli

T = TypeVar("T")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items[:] = starters_first(items, [(_shared_results(item), _params(item)) for item in items])


def starters_first(items: Sequence[T], asks: Sequence[tuple[tuple[str, ...], str | None]]
                   ) -> list[T]:
    """``items`` with the starter of each shared result moved to the front; both parts keep
    their order. ``asks[i]``: the shared results ``items[i]`` asks for and its parametrization
    id (None when not parametrized). A result is keyed by its name and the parametrization
    of the item asking; a result some items ask for parametrized is started only by those
    (an unparametrized item asking for it reads what they built)."""
    parametrized = {name for names, params in asks if params is not None for name in names}
    seen: set[tuple[str, str | None]] = set()
    starters: list[T] = []
    others: list[T] = []
    for item, (names, params) in zip(items, asks, strict=True):
        keys = {(name, params) for name in names if params is not None or name not in parametrized}
        (starters if keys - seen else others).append(item)
        seen |= keys
    return starters + others


def _shared_results(item: pytest.Item) -> tuple[str, ...]:
    """The fixtures built through ``run_once`` that ``item`` asks for."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None or "run_once" not in item.fixturenames:
        return ()
    return tuple(name for name in item.fixturenames
                 if name != "run_once" and "run_once" in _closure_of(info, name))


def _closure_of(info, name: str) -> set[str]:
    found, frontier = set(), [name]
    while frontier:
        for definition in info.name2fixturedefs.get(frontier.pop(), ()):
            for argname in definition.argnames:
                if argname not in found:
                    found.add(argname)
                    frontier.append(argname)
    return found


def _params(item: pytest.Item) -> str | None:
    callspec = getattr(item, "callspec", None)
    return None if callspec is None else callspec.id


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
        code = cli.main(["run", "--time-limit-s", "120", "--report-dir", str(report_dir)],
                        stdout=out, stderr=err)
        return {"code": code, "out": out.getvalue(), "err": err.getvalue(),
                "report_dir": str(report_dir)}

    return _suite_run(run_once("reference-suite", build))


@pytest.fixture(scope="session")
def selftest_run(tmp_path_factory, run_once) -> SuiteRun:
    """`selftest` (the reference, then every mutant) with its report: the kill matrix, and
    in ``report["scenarios"]`` the reference's run of the whole suite."""
    def build() -> dict:
        report_dir = tmp_path_factory.mktemp("selftest")
        out, err = io.StringIO(), io.StringIO()
        code = cli.main(["selftest", "--report-dir", str(report_dir)], stdout=out, stderr=err)
        return {"code": code, "out": out.getvalue(), "err": err.getvalue(),
                "report_dir": str(report_dir)}

    return _suite_run(run_once("selftest", build))


def _suite_run(run: dict) -> SuiteRun:
    report_dir = Path(run["report_dir"])
    report = json.loads((report_dir / "report.json").read_text(encoding="utf-8"))
    return SuiteRun(run["code"], run["out"], run["err"], report, report_dir)
