"""Where a campaign's independent cases run: worker processes here, or a Dask cluster.

A campaign (chaos, sweep, generate) hands its cases to an executor as ``work(i)`` for
``i`` in ``range(count)`` and reads the results in case order; what a campaign computes
from them does not depend on where they ran. Guarantees of every executor's :meth:`run`:

* ``results[i]`` is what ``work(i)`` returned, in case order, or a
  :class:`~harness.running.parallel.CaseFailure` naming why case ``i`` gave no result (its
  worker died, raised, or its result could not come back); the other cases go on;
* each case runs alone in its process (a run freezes the garbage collector and may hold
  the process clock: two runs of one process must not overlap).

:class:`LocalPool` is the worker pool of :mod:`harness.running.parallel` (``--jobs N``).
:class:`DaskCluster` (``--executor dask://HOST:PORT``) sends the cases to the workers of a
running Dask distributed scheduler. ``work`` and what it closes over travel by value
(cloudpickle) except the implementation under test, which travels as its ``--impl`` spec
and is resolved once in each worker process (an implementation holds connections, locks
and processes that do not travel), and the catalogue's criteria, which travel by id. The
payload goes to the cluster once per :meth:`run`, each case is a task naming it and its
index, and a worker process runs one case at a time whatever its thread count. A worker
must import the same harness as the client (same version, the same implementation
importable): the results are then those of ``--jobs`` and of one process, digest for
digest, since every case is deterministic under its seed.
"""

from __future__ import annotations

import hashlib
import io
import threading
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence, TypeVar

from harness.contract.errors import HarnessError, UsageError
from harness.running.parallel import CaseFailure, run_cases

T = TypeVar("T")

DASK_SCHEME = "dask://"


class ExecutorError(HarnessError):
    """A cluster that cannot be reached or used (no Dask installed, no scheduler there)."""


class Executor(Protocol):
    width: int
    """Cases it runs at once (a campaign sizes its rounds of cases by it)."""

    def run(self, work: Callable[[int], T], count: int, *,
            on_done: Callable[[int, Any], None] | None = None) -> list[T | CaseFailure]:
        ...

    def describe(self) -> str:
        ...


@dataclass(slots=True)
class LocalPool:
    """``jobs`` forked worker processes on this machine (one process when ``jobs`` is 1)."""

    jobs: int = 1

    @property
    def width(self) -> int:
        return max(1, self.jobs)

    def run(self, work: Callable[[int], T], count: int, *,
            on_done: Callable[[int, Any], None] | None = None) -> list[T | CaseFailure]:
        return run_cases(work, count, jobs=self.jobs, on_done=on_done, reuse_workers=True)

    def describe(self) -> str:
        return f"{self.jobs} job(s)"


@dataclass(frozen=True, slots=True)
class ImplementationRecipe:
    """How a worker process makes the implementation under test itself."""

    spec: str
    """The ``--impl`` spec (resolved by :func:`harness.implementations.resolve`)."""
    freeze_clock: bool | None = None
    """The ``--freeze-clock`` choice (None: the implementation's default)."""


class DaskCluster:
    """The workers of a Dask distributed scheduler (see the module docstring)."""

    def __init__(self, address: str, implementations: Sequence[tuple[Any, ImplementationRecipe]],
                 *, timeout_s: float = 20.0) -> None:
        self.address = address
        self._implementations = tuple(implementations)
        self._timeout_s = timeout_s
        self._client: Any = None

    def _connect(self) -> Any:
        if self._client is None:
            distributed = require_distributed()
            try:
                self._client = distributed.Client(self.address, timeout=self._timeout_s,
                                                  set_as_default=False)
            except (OSError, TimeoutError) as exc:
                raise ExecutorError(
                    f"--executor {DASK_SCHEME}{self.address}: no Dask scheduler answered there "
                    f"({exc}); start one with `dask scheduler` and workers with `dask worker "
                    f"{self.address} --nthreads 1` (docs/campaigns.md)") from None
            try:  # a scheduler without workers would hold the cases forever
                self._client.wait_for_workers(1, timeout=self._timeout_s)
            except (OSError, TimeoutError) as exc:
                self.close()
                raise ExecutorError(
                    f"--executor {DASK_SCHEME}{self.address}: the scheduler has no worker "
                    f"after {self._timeout_s:g} s ({exc}); start some with `dask worker "
                    f"{self.address} --nthreads 1` (docs/campaigns.md)") from None
        return self._client

    @property
    def width(self) -> int:
        """The worker threads the scheduler knows of now (at least 1)."""
        threads = self._connect().nthreads()
        return max(1, sum(threads.values()))

    def describe(self) -> str:
        return f"Dask at {self.address} ({self.width} worker thread(s))"

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def run(self, work: Callable[[int], T], count: int, *,
            on_done: Callable[[int, Any], None] | None = None) -> list[T | CaseFailure]:
        if count <= 0:
            return []
        client = self._connect()
        payload = _dumps(work, self._implementations)
        key = hashlib.sha256(payload).hexdigest()
        shared = client.scatter(payload, broadcast=True, hash=False)
        futures = [client.submit(_run_case, shared, key, index, pure=False)
                   for index in range(count)]
        results: list[Any] = []
        try:
            for index, future in enumerate(futures):
                try:
                    kind, value = future.result()
                except Exception as exc:  # noqa: BLE001 - a lost worker, a task it killed
                    outcome: Any = CaseFailure(index, f"the Dask task failed: "
                                                      f"{type(exc).__name__}: {exc}")
                else:
                    outcome = value if kind == "ok" else CaseFailure(
                        index, f"the worker raised {value}")
                results.append(outcome)
                if on_done:
                    on_done(index, outcome)
        finally:
            client.cancel([f for f in futures if not f.done()])
            client.cancel([shared])
        return results


def require_distributed() -> Any:
    try:
        import distributed
    except ImportError:
        raise ExecutorError(
            "--executor dask://...: Dask distributed is not installed; install the cluster "
            "extra (pip install 'lifecycle-harness[cluster]')") from None
    return distributed


def parse_executor(text: str | None, *, jobs: int,
                   implementations: Sequence[tuple[Any, ImplementationRecipe]] = ()
                   ) -> Executor:
    """``--executor`` (None: ``--jobs``' local pool) as an executor; a usage error names
    the forms accepted."""
    if text is None or text in ("", "local"):
        return LocalPool(jobs)
    if text.startswith(DASK_SCHEME):
        address = text[len(DASK_SCHEME):]
        if not address or "/" in address:
            raise UsageError(f"--executor {text!r}: give the scheduler's address, "
                             "dask://HOST:PORT (e.g. dask://127.0.0.1:8786)")
        require_distributed()
        return DaskCluster(address, implementations)
    raise UsageError(f"--executor {text!r}: expected 'local' or dask://HOST:PORT")


# --------------------------------------------------------------------------- the payload


def _dumps(work: Callable[[int], Any],
           implementations: Sequence[tuple[Any, ImplementationRecipe]]) -> bytes:
    """``work`` by value, with each implementation replaced by its recipe and each criterion
    of the catalogue by its id (resolved again in the worker)."""
    import cloudpickle

    from harness.running.suite import default_criteria

    substitutes: dict[int, tuple[Any, Any]] = {}
    for implementation, recipe in implementations:
        substitutes[id(implementation)] = (implementation, (_implementation, (recipe,)))
    for criterion in default_criteria():
        substitutes[id(criterion)] = (criterion, (_criterion, (criterion.id,)))

    class Pickler(cloudpickle.Pickler):
        def reducer_override(self, obj: Any) -> Any:
            found = substitutes.get(id(obj))
            if found is not None and found[0] is obj:
                return found[1]
            return super().reducer_override(obj)

    buffer = io.BytesIO()
    Pickler(buffer).dump(work)
    return buffer.getvalue()


_RESOLVED: dict[ImplementationRecipe, Any] = {}
_WORK: dict[str, Any] = {}
_WORK_KEPT = 4
_ONE_CASE_AT_A_TIME = threading.Lock()


def _implementation(recipe: ImplementationRecipe) -> Any:
    """The recipe's implementation, resolved once per worker process."""
    found = _RESOLVED.get(recipe)
    if found is None:
        from harness.implementations import resolve

        found = resolve(recipe.spec)
        if recipe.freeze_clock is not None and hasattr(found, "freeze_process_clock"):
            found.freeze_process_clock = recipe.freeze_clock
        _RESOLVED[recipe] = found
    return found


def _criterion(criterion_id: str) -> Any:
    from harness.running.suite import default_criteria

    for criterion in default_criteria():
        if criterion.id == criterion_id:
            return criterion
    raise ExecutorError(f"criterion {criterion_id} is not in this worker's catalogue: the "
                        "worker runs another version of the harness than the client")


def _run_case(payload: bytes, key: str, index: int) -> tuple[str, Any]:
    """One case in a Dask worker: ("ok", work(index)) or ("raised", why)."""
    import warnings

    with _ONE_CASE_AT_A_TIME, warnings.catch_warnings():
        # The worker's own threads use the random module while a chunk is drawn; Hypothesis
        # warns of a change of global random state it cannot attribute (the harness draws
        # from its seeds alone: the cases are the same, see test_executor).
        warnings.filterwarnings("ignore", message="Do not use the `random` module")
        try:
            work = _WORK.get(key)
            if work is None:
                import pickle

                work = pickle.loads(payload)
                _WORK[key] = work
                while len(_WORK) > _WORK_KEPT:
                    del _WORK[next(iter(_WORK))]
            return "ok", work(index)
        except BaseException as exc:  # noqa: BLE001 - the case's cause, as the local pool says it
            return "raised", f"{type(exc).__name__}: {exc}"
