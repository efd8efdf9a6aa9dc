"""Run one scenario against one implementation under one seed and record the Trace.

Guarantees of :func:`run_scenario`:

* a fresh data dir (removed afterwards) and a fresh :class:`~harness.world.SimWorld`; the
  runner opens instance 0, opens every session, then executes the steps in order, recording
  each driver call (``DRIVER_CALL`` then ``DRIVER_RETURN`` / ``DRIVER_RAISED``) and reading
  the durable store after each step (ObservationPoint ``"quiescent"``) and at the end
  (``"final"``); the world asks for probes while the implementation runs;
* a :class:`~harness.contract.SimulatedCrash` ends the instance without closing it (dropped
  and garbage-collected, so an uncommitted SQLite transaction rolls back), then ``CRASH``,
  ``RESTART``, a new instance on the same data dir and world, ``recover()``, ObservationPoint
  ``"after_restart"``, and the next step. An implementation that catches the crash and goes
  on is reported (``CRASH`` with ``swallowed``, and an error);
* every driver call runs in a worker thread under ``time_limit_s`` of wall-clock time; a hang
  becomes ``HANG``, an unexpected exception ``DRIVER_RAISED`` with ``expected: false``; both
  end the run with ``completed=False`` and a non-empty ``error``: nothing the implementation
  does makes this function raise (only harness bugs do);
* a required fault that did not fire on each of its hits, or a ``concurrent_turn`` whose
  hold never engaged, makes the run an error naming it, its failpoint, the hits reached
  and the likely cause (:mod:`harness.criteria.fault_coverage`, judged from the trace's world
  events; also :attr:`ScenarioRun.unfired`) — unless the scenario is written for an
  optional feature the implementation neither declares nor showed in the run: then it is
  excused (:attr:`ScenarioRun.excused`), which the suite reports apart and counts no pass of;
* in a ``concurrent_turn``, an implementation that does not declare ``multi_instance`` may
  refuse to open the second instance (``open`` raises while another instance is live):
  the refusal is recorded (``DRIVER_RAISED`` with ``refused``), instance B is dropped and
  the turn goes on with instance A alone; it is no run error. Likewise one that does not
  declare ``checkpoint_import`` may refuse a fixture (``load_checkpoint`` raises);
* only one thread runs at a time: a ``concurrent_turn`` holds instance A at a failpoint
  while instance B runs the same turn to quiescence, then releases A (a chosen, replayable
  interleaving);
* every value the implementation hands over is checked against the contract's types
  (:mod:`harness.contract.value_checks`): what a driver call returns (``open`` a Runtime,
  ``run_turn`` a TurnResult...), each Observation, ``Implementation.info``; a value off the
  contract is a run error naming the method and the field. World port calls from threads the
  runner did not start, and port arguments off the contract, are refused by the world and
  made run errors here;
* after a hang the runner tries to end the abandoned thread; one that survives taints its
  implementation: each later scenario of it runs in a forked worker process (see "hung
  threads" below), and the hung scenario's error says so;
* determinism: the same seed, scenario and implementation give the same
  :func:`~harness.trace.record.trace_digest`. Nothing wall-clock, no temp path (the data dir is
  replaced by ``<data_dir>``), no memory address enters the trace.

The run itself is composed here of parts split by concept in :mod:`harness.running.driving` (the
state they share, driver-call threads and holds, hung threads, store probes, instances,
the world's hooks, the steps, the recorded trace); this module keeps the entry points, the
data dir's lifetime and the forked worker for tainted implementations.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import logging
import os
import random
import shutil
import tempfile
import time
from dataclasses import dataclass
from typing import Any, ContextManager, Iterator

from harness.contract import Implementation
from harness.running.driving.calls import EXPECTED_ERRORS, DriverCalls
from harness.running.driving.hung_threads import (
    CAN_FORK,
    STOP_GRACE_S,
    TAINTS,
    describe,
    still_running,
    stop_abandoned,
    taint,
)
from harness.running.driving.instances import MAX_RESTARTS_IN_A_ROW, Instances
from harness.running.driving.recorded_trace import DATA_DIR_MARK, recorded_trace
from harness.running.driving.state import CRASH_MODE, RunState
from harness.running.driving.steps import Steps
from harness.running.driving.store_probe import CheckedParts, StoreProbe
from harness.running.driving.world_hooks import RunHooks
from harness.faults.plan import render
from harness.running.process_clock import FrozenProcessClock
from harness.scenarios.loader import Scenario
from harness.trace.record import Trace
from harness.world import SimWorld

log = logging.getLogger(__name__)

# The names below lived here before the run was split by concept (harness.running.driving); other
# modules and tests import them from here.
__all__ = ["CRASH_MODE", "DATA_DIR_MARK", "DATA_ROOT_ENV", "EXPECTED_ERRORS",
           "MAX_RESTARTS_IN_A_ROW", "STOP_GRACE_S", "ScenarioRun", "default_data_root",
           "run_scenario", "warm_up"]
_CheckedParts = CheckedParts


@dataclass(frozen=True, slots=True)
class ScenarioRun:
    trace: Trace
    failpoints_reached: tuple[str, ...]
    error: str
    """"" if the run completed; else what went wrong (hang, IUT raised, ...)."""
    duration_s: float
    """Wall clock, for reports only; never inside the trace."""
    unfired: tuple[str, ...] = ()
    """Required faults and concurrent_turn holds that did not happen (one line each, see
    :mod:`harness.criteria.fault_coverage`); when non-empty they are the run's ``error``."""
    excused: tuple[str, ...] = ()
    """Faults and holds that did not happen on the path of an optional feature the scenario
    is written for and the implementation neither declares nor showed: no error, but the
    scenario's passes do not count (see :mod:`harness.running.driving.recorded_trace`)."""


DATA_ROOT_ENV = "LIFECYCLE_HARNESS_DATA_ROOT"


def default_data_root() -> str | None:
    """Where data dirs go when the caller names no folder: ``$LIFECYCLE_HARNESS_DATA_ROOT``,
    else a RAM-backed ``/dev/shm`` when writable (in-process crashes do not lose the page
    cache, so real fsyncs only slow the suite down), else the system temp folder."""
    configured = os.environ.get(DATA_ROOT_ENV)
    if configured:
        return configured
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK):
        return shm
    return None


def run_scenario(implementation: Implementation, scenario: Scenario, seed: int, *,
                 time_limit_s: float = 20.0, data_root: str | None = None) -> ScenarioRun:
    """Run ``scenario`` against ``implementation`` under ``seed`` (see the module doc)."""
    running = still_running(implementation)
    if running and CAN_FORK:
        log.warning("%s runs in a fresh worker process: %s", scenario.id, running)
        return _run_in_worker(implementation, scenario, seed, time_limit_s, data_root)
    run = _run_scenario(implementation, scenario, seed, time_limit_s, data_root)
    if running:  # no fork here: say so in the result rather than pay silently
        return _with_note(run, f"tainted: {running}; this scenario shared the CPU "
                               "with it")
    return run


def _run_scenario(implementation: Implementation, scenario: Scenario, seed: int,
                  time_limit_s: float, data_root: str | None) -> ScenarioRun:
    started = time.monotonic()
    for line in render(scenario.faults):
        log.info("%s: %s", scenario.id, line)
    data_root = default_data_root() if data_root is None else data_root
    if data_root is not None:
        os.makedirs(data_root, exist_ok=True)
    data_dir = tempfile.mkdtemp(prefix="lh-run-", dir=data_root)
    run = _Run(implementation, scenario, seed, float(time_limit_s), data_dir)
    bound_waits = getattr(implementation, "bound_waits", None)  # out-of-process launchers
    if callable(bound_waits):
        bound_waits(float(time_limit_s))
    # Dropping a crashed instance needs a full collection (its unclosed connections must
    # roll back before the restart); freezing what existed before this run keeps that
    # collection proportional to this run, not to every trace the suite already holds.
    gc.freeze()
    strays = ""
    try:
        with _process_clock(implementation, run):
            run.execute()
        trace, reached, unfired, excused = run.result()
    finally:
        run.shutdown()
        strays = _release(implementation, data_dir)
        # An out-of-process implementation's release() killed what its hung call waited on.
        unstoppable = (stop_abandoned(run.state.abandoned)
                       if run.state.crash_mode == CRASH_MODE else [])
        gc.unfreeze()
        # Also after a hang: an abandoned thread that wakes up finds its world dead.
        shutil.rmtree(data_dir, ignore_errors=True)
    if strays:  # processes the implementation left behind fail the run, named by pid
        error = "; ".join(part for part in (trace.error, strays) if part)
        trace = dataclasses.replace(trace, completed=False, error=error)
    result = ScenarioRun(trace, reached, trace.error, time.monotonic() - started, unfired,
                         excused)
    if unstoppable:
        taint(implementation, scenario.id, unstoppable)
        then = ("every later scenario of this implementation runs in a fresh worker process "
                "(the thread does not follow it there)" if CAN_FORK else
                "every later scenario of this implementation says it ran beside it")
        result = _with_note(result, "the hung call could not be stopped: "
                                    f"{describe(unstoppable)} still running; {then}")
    return result


def warm_up(scenario: Scenario) -> None:
    """Build (and drop) the world of ``scenario`` without running anything, so that the
    imports a world does lazily (pyfakefs' pathlib layer) are done in this process: a worker
    forked per case afterwards starts with them instead of paying them again per case."""
    world = SimWorld(rng=random.Random(0), sessions=scenario.sessions, tools=scenario.tools,
                     files=scenario.files, classifier=scenario.classifier, model=scenario.model,
                     behaviours=scenario.tool_behaviours, faults=scenario.faults)
    world.tools.fs  # noqa: B018 - built at its first use; building it does the imports


class _Run:
    """One scenario run, composed of its parts (:mod:`harness.running.driving`): the state they
    share, the driver calls, the store probe, the instances, the world's hooks, the steps."""

    def __init__(self, implementation: Implementation, scenario: Scenario, seed: int,
                 limit: float, data_dir: str) -> None:
        self.state = state = RunState(implementation, scenario, seed, limit, data_dir)
        store = StoreProbe(state)
        self.world = state.world = SimWorld(
            rng=random.Random(seed),
            sessions=scenario.sessions,
            tools=scenario.tools,
            files=scenario.files,
            classifier=scenario.classifier,
            model=scenario.model,
            behaviours=scenario.tool_behaviours,
            faults=scenario.faults,
            hooks=RunHooks(state, store),
            log=state.log,
        )
        calls = DriverCalls(state)
        self.instances = Instances(state, calls, store)
        self.steps = Steps(state, calls, self.instances, store)

    def execute(self) -> None:
        self.steps.execute()

    def result(self) -> tuple[Trace, tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
        """The trace, the failpoints reached, what was planned but did not happen, and what
        of that is excused (a feature the implementation lacks)."""
        return recorded_trace(self.state)

    def shutdown(self) -> None:
        self.instances.shutdown()


def _process_clock(implementation: Implementation, run: "_Run") -> ContextManager[Any]:
    """The process clock frozen to the world's for this run, when the implementation asked
    for it (see :mod:`harness.running.process_clock`); otherwise nothing."""
    if not getattr(implementation, "freeze_process_clock", False):
        return contextlib.nullcontext()
    frozen = FrozenProcessClock(run.world.clock.now())

    @contextlib.contextmanager
    def held() -> Iterator[None]:
        with frozen:
            run.world.clock.follow(frozen.follow)
            yield

    return held()


# A hang's abandoned threads and the taint a survivor leaves: harness.running.driving.hung_threads.


def _with_note(run: ScenarioRun, note: str) -> ScenarioRun:
    """The run with ``note`` added to its error (outside the trace: timing decides it)."""
    error = f"{run.error}; {note}" if run.error else note
    return dataclasses.replace(run, error=error)


def _run_in_worker(implementation: Implementation, scenario: Scenario, seed: int,
                   time_limit_s: float, data_root: str | None) -> ScenarioRun:
    """:func:`_run_scenario` in a forked child; its result comes back pickled."""
    import pickle
    import warnings

    started = time.monotonic()
    read_fd, write_fd = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # "multi-threaded fork": wanted
        pid = os.fork()
    if pid == 0:  # the worker: only this thread exists here
        code = 0
        try:
            os.close(read_fd)
            TAINTS.clear()
            try:
                payload: Any = _run_scenario(implementation, scenario, seed, time_limit_s,
                                             data_root)
            except BaseException as exc:  # noqa: BLE001 - handed to the parent to raise
                payload = exc
            try:
                data = pickle.dumps(payload)
            except Exception as exc:  # noqa: BLE001
                data = pickle.dumps(RuntimeError(f"worker result not picklable: {exc!r}"))
            with os.fdopen(write_fd, "wb") as out:
                out.write(data)
        except BaseException:  # noqa: BLE001 - never return into the parent's stack
            code = 1
        finally:
            os._exit(code)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as source:
        data = source.read()
    os.waitpid(pid, 0)
    if not data:
        raise RuntimeError(f"the worker process for scenario {scenario.id} died without a result")
    payload = pickle.loads(data)
    if isinstance(payload, BaseException):
        raise payload
    run: ScenarioRun = payload
    return dataclasses.replace(run, duration_s=time.monotonic() - started)


def _release(implementation: Any, data_dir: str) -> str:
    """Let an implementation free what it still runs on ``data_dir`` (an out-of-process one
    kills children left behind, e.g. after a hang). Optional: ``release(data_dir)``, which
    may return what it had to kill that the implementation left behind (for the error)."""
    release = getattr(implementation, "release", None)
    if callable(release):
        try:
            found = release(data_dir)
        except Exception:  # noqa: BLE001 - cleanup only; the run's result stands
            log.exception("releasing %s failed", data_dir)
            return ""
        return found if isinstance(found, str) else ""
    return ""

