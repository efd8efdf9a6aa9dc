"""The worker pool: many independent cases in forked worker processes (one per case, or
reused case after case).

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

With ``reuse_workers`` a worker that returned a result is handed the next pending case
instead of exiting (at most ``jobs`` workers, each forked once, while none dies): a fork per
case costs its copy-on-write page faults again each time (about 25 ms of system CPU per
scenario of the bundled suite, a third of a scenario's cost), which a long-lived worker pays
once. The guarantees above hold per case (a dying, hanging or raising case is that case's
failure; its worker ends and a new one takes the pending cases; so does a worker a hung
call left a thread in, see :mod:`harness.running.driving.hung_threads`) except that cases share
their worker's process, as they share this one with ``jobs <= 1``: only for work that leaves
no state behind that changes a later case's result (the self-test keeps a worker per
mutant: what a mutant patches is meant to die with its process).
"""

from __future__ import annotations

import collections
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
    next_case: Any = None
    """With ``reuse_workers``: where the parent sends the worker its next case (or None)."""


def _child(work: Callable[[int], Any], index: int, writer: Any, scratch: str,
           next_case: Any = None, parent: int = 0) -> None:
    os.setpgid(0, 0)  # our own group: a kill of the case takes what it started along
    from harness.running.driving.hung_threads import TAINTS
    from harness.running.runner import DATA_ROOT_ENV

    # A fork keeps only this thread: the threads the parent's taints name are not here, and
    # only a hang in this worker may retire it (as in the runner's own forked worker).
    TAINTS.clear()

    os.environ[DATA_ROOT_ENV] = scratch  # data dirs the parent removes whatever happens here
    while True:
        try:
            payload: tuple[str, Any] = ("ok", work(index))
        except BaseException as exc:  # noqa: BLE001 - reported to the parent as the case's cause
            payload = ("raised", f"{type(exc).__name__}: {exc}")
        # Decided before the result goes: the parent hands on a case only to a worker that
        # said it takes one (a worker that retired after sending would strand that case).
        takes_more = next_case is not None and not _tainted()
        try:
            writer.send((*payload, takes_more))
        except Exception as exc:  # noqa: BLE001 - e.g. an unpicklable result
            writer.send(("raised", f"the case's result could not be sent back: {exc}",
                         takes_more))
        if not takes_more:
            break
        index = _next_case(next_case, parent)
        if index is None:
            break
    from harness.remote.launcher import settle_children

    settle_children()  # nothing of this worker's outlives it (see settle_children)
    writer.close()


def _tainted() -> bool:
    """A thread a hung call left behind still runs here: the worker retires with it rather
    than let it share the CPU with later cases."""
    from harness.running.driving.hung_threads import TAINTS

    return bool(TAINTS)


def _next_case(next_case: Any, parent: int) -> int | None:
    """The parent's next case for this worker; None when it says so or is gone (a later
    worker inherits this pipe's sending end, so its closing alone is no end of file here)."""
    try:
        while not next_case.poll(1.0):
            if os.getppid() != parent:
                return None
        return next_case.recv()
    except (EOFError, OSError):
        return None


def _release(worker: _Worker[Any]) -> None:
    """Tell a reused worker it gets no further case (it then exits)."""
    if worker.next_case is None:
        return
    try:
        worker.next_case.send(None)
    except OSError:
        pass  # it is gone already
    worker.next_case.close()
    worker.next_case = None


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
    reuse_workers: bool = False,
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
    from harness.running.runner import default_data_root

    context = multiprocessing.get_context("fork")
    root = default_data_root()
    if root is not None:
        os.makedirs(root, exist_ok=True)
    slots: list[Any] = [None] * count
    running: dict[Any, _Worker[T]] = {}
    pending = collections.deque(range(count))

    def start_more() -> None:
        while pending and len(running) < jobs:
            index = pending.popleft()
            if on_start:
                on_start(index)
            reader, writer = context.Pipe(duplex=False)
            case_reader, case_writer = context.Pipe(duplex=False) if reuse_workers \
                else (None, None)
            scratch = tempfile.mkdtemp(prefix="lh-worker-", dir=root)
            process = context.Process(target=_child,
                                      args=(work, index, writer, scratch, case_reader,
                                            os.getpid()),
                                      daemon=False)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # multi-threaded fork
                process.start()
            writer.close()
            if case_reader is not None:
                case_reader.close()
            running[reader] = _Worker(index, process, reader, time.monotonic() + case_limit_s,
                                      scratch, case_writer)

    def record(worker: _Worker[T], outcome: Any) -> None:
        slots[worker.index] = outcome
        if on_done:
            on_done(worker.index, outcome)

    def finish(worker: _Worker[T], outcome: Any) -> None:
        del running[worker.reader]
        worker.reader.close()
        _release(worker)
        shutil.rmtree(worker.scratch, ignore_errors=True)
        record(worker, outcome)

    def hand_on(worker: _Worker[T], outcome: Any) -> bool:
        """Record a reused worker's result and send it the next pending case (True), if
        there is one and the worker can still take it."""
        if worker.next_case is None or not pending:
            return False
        index = pending[0]
        try:
            worker.next_case.send(index)
        except OSError:  # it died meanwhile: a new worker takes the case
            return False
        pending.popleft()
        record(worker, outcome)
        if on_start:
            on_start(index)
        worker.index = index
        worker.deadline = time.monotonic() + case_limit_s
        return True

    try:
        start_more()
        while running:
            now = time.monotonic()
            timeout = max(0.0, min(w.deadline for w in running.values()) - now)
            ready = wait(list(running), timeout=timeout)
            for reader in ready:
                worker = running[reader]
                try:
                    kind, value, takes_more = reader.recv()
                except (EOFError, OSError):
                    worker.process.join(5)
                    finish(worker, CaseFailure(worker.index, _death(worker.process.exitcode)))
                    continue
                if kind == "ok" and takes_more and hand_on(worker, value):
                    continue
                _release(worker)
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
            _release(worker)
            shutil.rmtree(worker.scratch, ignore_errors=True)
    return slots
