"""The worker pool: many independent cases, each in its own forked worker process.

Guarantees of :func:`run_cases`:

* ``results[i]`` is what ``work(i)`` returned, in case order, whatever order the workers
  finished in and whatever ``jobs`` is: the caller's result does not depend on parallelism;
* with ``jobs <= 1`` (or one case, or no ``fork`` on the platform) every case runs here, in
  order, and an exception from ``work`` propagates (a harness bug, as in any sequential run);
* with ``jobs > 1`` at most ``jobs`` workers run at once; each is forked for one case (it
  inherits ``work`` and everything it closes over, so nothing needs to be picklable but the
  result) and is its own process group, so what it started dies with it. A worker that
  dies (a signal, ``os._exit``), raises, returns something that cannot be pickled, or runs
  past ``case_limit_s`` of wall-clock time gives that case a :class:`CaseFailure` naming
  the cause; the other cases and the run go on;
* each worker's runs keep their data dirs below a scratch folder of its own (the runner's
  data root), which this function removes when the worker ends — also when it was killed;
* when this function leaves early (Ctrl-C, SIGTERM through the CLI's handler), every worker
  still running is killed with its process group and its scratch folder removed before the
  exception goes on.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import tempfile
import time
import warnings
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any, Callable, Generic, TypeVar

T = TypeVar("T")

DEFAULT_CASE_LIMIT_S = 1800.0
"""Wall-clock bound on one case in a worker (the runner bounds each driver call itself; this
only catches a harness that is stuck)."""


def default_jobs() -> int:
    """The number of cores (``--jobs`` default)."""
    return max(1, os.cpu_count() or 1)


def add_jobs_option(parser: Any) -> None:
    """``--jobs N`` (an argparse option; the default is the number of cores)."""
    from harness.cli_options import positive_int

    parser.add_argument(
        "--jobs", type=positive_int, default=default_jobs(), metavar="N",
        help="run cases in N worker processes; results are the same as with 1 (default: "
        f"the number of cores, {default_jobs()})",
    )


def can_fork() -> bool:
    return "fork" in multiprocessing.get_all_start_methods()


@dataclass(frozen=True, slots=True)
class CaseFailure:
    """A case whose worker gave no result."""

    index: int
    cause: str


@dataclass(slots=True)
class _Worker(Generic[T]):
    index: int
    process: Any
    reader: Any
    deadline: float
    scratch: str
    """The worker's data root (its runs' data dirs); removed by the parent when it ends."""


def _child(work: Callable[[int], Any], index: int, writer: Any, scratch: str) -> None:
    os.setpgid(0, 0)  # our own group: a kill of the case takes what it started along
    from harness.runner import DATA_ROOT_ENV

    os.environ[DATA_ROOT_ENV] = scratch  # data dirs the parent removes whatever happens here
    try:
        payload: tuple[str, Any] = ("ok", work(index))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent as the case's cause
        payload = ("raised", f"{type(exc).__name__}: {exc}")
    try:
        writer.send(payload)
    except Exception as exc:  # noqa: BLE001 - e.g. an unpicklable result
        writer.send(("raised", f"the case's result could not be sent back: {exc}"))
    writer.close()


def _death(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"the worker process died of {name} before reporting its result"
    return f"the worker process exited (code {exitcode}) before reporting its result"


def _kill(worker: _Worker[Any]) -> None:
    pid = worker.process.pid
    if pid is None:
        return
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            target()
        except (ProcessLookupError, PermissionError, OSError):
            continue
    worker.process.join(5)


def run_cases(
    work: Callable[[int], T],
    count: int,
    *,
    jobs: int = 1,
    case_limit_s: float = DEFAULT_CASE_LIMIT_S,
    on_start: Callable[[int], None] | None = None,
    on_done: Callable[[int, "T | CaseFailure"], None] | None = None,
) -> list["T | CaseFailure"]:
    """``[work(0), …, work(count - 1)]``, run by up to ``jobs`` workers (see the module doc)."""
    if jobs <= 1 or count <= 1 or not can_fork():
        results: list[T | CaseFailure] = []
        for index in range(count):
            if on_start:
                on_start(index)
            results.append(work(index))
            if on_done:
                on_done(index, results[-1])
        return results
    from harness.runner import default_data_root

    context = multiprocessing.get_context("fork")
    root = default_data_root()
    if root is not None:
        os.makedirs(root, exist_ok=True)
    slots: list[Any] = [None] * count
    running: dict[Any, _Worker[T]] = {}
    pending = iter(range(count))
    exhausted = False

    def start_more() -> None:
        nonlocal exhausted
        while not exhausted and len(running) < jobs:
            index = next(pending, None)
            if index is None:
                exhausted = True
                return
            if on_start:
                on_start(index)
            reader, writer = context.Pipe(duplex=False)
            scratch = tempfile.mkdtemp(prefix="lh-worker-", dir=root)
            process = context.Process(target=_child, args=(work, index, writer, scratch),
                                      daemon=False)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # multi-threaded fork
                process.start()
            writer.close()
            running[reader] = _Worker(index, process, reader, time.monotonic() + case_limit_s,
                                      scratch)

    def finish(worker: _Worker[T], outcome: Any) -> None:
        del running[worker.reader]
        worker.reader.close()
        shutil.rmtree(worker.scratch, ignore_errors=True)
        slots[worker.index] = outcome
        if on_done:
            on_done(worker.index, outcome)

    try:
        start_more()
        while running:
            now = time.monotonic()
            timeout = max(0.0, min(w.deadline for w in running.values()) - now)
            ready = wait(list(running), timeout=timeout)
            for reader in ready:
                worker = running[reader]
                try:
                    kind, value = reader.recv()
                except (EOFError, OSError):
                    worker.process.join(5)
                    finish(worker, CaseFailure(worker.index, _death(worker.process.exitcode)))
                    continue
                worker.process.join(30)
                if worker.process.is_alive():
                    _kill(worker)
                if kind == "ok":
                    finish(worker, value)
                else:
                    finish(worker, CaseFailure(worker.index, f"the worker raised {value}"))
            now = time.monotonic()
            for worker in [w for w in running.values() if w.deadline <= now]:
                _kill(worker)
                finish(worker, CaseFailure(
                    worker.index, f"the worker ran past the case limit of {case_limit_s:g} s "
                    "of wall-clock time and was killed"))
            start_more()
    finally:
        for worker in list(running.values()):
            _kill(worker)
            worker.reader.close()
            shutil.rmtree(worker.scratch, ignore_errors=True)
    return slots
