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
  and the likely cause (:mod:`harness.fault_coverage`, judged from the trace's world
  events; also :attr:`ScenarioRun.unfired`);
* only one thread runs at a time: a ``concurrent_turn`` holds instance A at a failpoint
  while instance B runs the same turn to quiescence, then releases A (a chosen, replayable
  interleaving);
* every value the implementation hands over is checked against the contract's types
  (:mod:`harness.contract_check`): what a driver call returns (``open`` a Runtime,
  ``run_turn`` a TurnResult...), each Observation, ``Implementation.info``; a value off the
  contract is a run error naming the method and the field. World port calls from threads the
  runner did not start, and port arguments off the contract, are refused by the world and
  made run errors here;
* after a hang the runner tries to end the abandoned thread; one that survives taints its
  implementation: each later scenario of it runs in a forked worker process (see "hung
  threads" below), and the hung scenario's error says so;
* determinism: the same seed, scenario and implementation give the same
  :func:`~harness.trace.trace_digest`. Nothing wall-clock, no temp path (the data dir is
  replaced by ``<data_dir>``), no memory address enters the trace.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import hashlib
import logging
import os
import random
import re
import shutil
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Callable, ContextManager, Iterator

from harness import fault_coverage
from harness import fixture_source
from harness.contract_check import ContractViolation, driver_result_problem, value_problem
from harness.contract import (
    Feature,
    Implementation,
    ImplementationInfo,
    InjectedFault,
    ModelStreamCancelled,
    ModelTransportError,
    Observation,
    Rule,
    SimulatedCrash,
    canonical_json,
    to_json,
)
from harness.checkpoint_fixture import read_fixture
from harness.faults import Action, render
from harness.process_clock import FrozenProcessClock
from harness.scenarios import Scenario, Step, StepKind
from harness.trace import (
    Kind,
    ObservationPoint,
    Source,
    Trace,
    TraceMeta,
    trace_canonical_json,
    trace_from_json,
    trace_to_json,
)
from harness.world import SimWorld
from harness.world.log import EventLog

log = logging.getLogger(__name__)

CRASH_MODE = "in_process"
MAX_RESTARTS_IN_A_ROW = 8
"""Crashes during restart + recovery allowed before the run is given up as an error."""
EXPECTED_ERRORS = (ModelTransportError, ModelStreamCancelled, InjectedFault)
"""World errors an implementation may let out of a driver call (M3; injected faults)."""
DATA_DIR_MARK = "<data_dir>"
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


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
    :mod:`harness.fault_coverage`); when non-empty they are the run's ``error``."""


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
    still_running = _still_running(implementation)
    if still_running and _CAN_FORK:
        log.warning("%s runs in a fresh worker process: %s", scenario.id, still_running)
        return _run_in_worker(implementation, scenario, seed, time_limit_s, data_root)
    run = _run_scenario(implementation, scenario, seed, time_limit_s, data_root)
    if still_running:  # no fork here: say so in the result rather than pay silently
        return _with_note(run, f"tainted: {still_running}; this scenario shared the CPU "
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
        trace, reached, unfired = run.result()
    finally:
        run.shutdown()
        strays = _release(implementation, data_dir)
        # An out-of-process implementation's release() killed what its hung call waited on.
        unstoppable = (_stop_abandoned(run.abandoned) if run.crash_mode == CRASH_MODE
                       else [])
        gc.unfreeze()
        # Also after a hang: an abandoned thread that wakes up finds its world dead.
        shutil.rmtree(data_dir, ignore_errors=True)
    if strays:  # processes the implementation left behind fail the run, named by pid
        error = "; ".join(part for part in (trace.error, strays) if part)
        trace = dataclasses.replace(trace, completed=False, error=error)
    result = ScenarioRun(trace, reached, trace.error, time.monotonic() - started, unfired)
    if unstoppable:
        _taint(implementation, scenario.id, unstoppable)
        then = ("every later scenario of this implementation runs in a fresh worker process "
                "(the thread does not follow it there)" if _CAN_FORK else
                "every later scenario of this implementation says it ran beside it")
        result = _with_note(result, "the hung call could not be stopped: "
                                    f"{_describe(unstoppable)} still running; {then}")
    return result


def warm_up(scenario: Scenario) -> None:
    """Build (and drop) the world of ``scenario`` without running anything, so that the
    imports a world does lazily (pyfakefs' pathlib layer) are done in this process: a worker
    forked per case afterwards starts with them instead of paying them again per case."""
    SimWorld(rng=random.Random(0), sessions=scenario.sessions, tools=scenario.tools,
             files=scenario.files, classifier=scenario.classifier, model=scenario.model,
             behaviours=scenario.tool_behaviours, faults=scenario.faults)


def _process_clock(implementation: Implementation, run: "_Run") -> ContextManager[Any]:
    """The process clock frozen to the world's for this run, when the implementation asked
    for it (see :mod:`harness.process_clock`); otherwise nothing."""
    if not getattr(implementation, "freeze_process_clock", False):
        return contextlib.nullcontext()
    frozen = FrozenProcessClock(run.world.clock.now())

    @contextlib.contextmanager
    def held() -> Iterator[None]:
        with frozen:
            run.world.clock.follow(frozen.follow)
            yield

    return held()


# --------------------------------------------------------------------------- hung threads
# A thread cannot be killed. After a hang the runner raises :class:`_Abandoned` into the
# abandoned call's thread (CPython delivers it at the next bytecode, so a busy loop in Python
# ends; a call blocked in C or one that swallows it does not). A thread that survives
# taints its implementation: the remaining scenarios of that implementation each run in a
# forked worker process, which holds only the forking thread, so they neither share the
# interpreter lock with the spinning thread nor inherit it; the worker exits after its
# scenario, taking whatever it started with it. Where fork is unavailable the later
# results say that they ran beside it.

STOP_GRACE_S = 1.0
"""How long (wall clock) the runner waits for an abandoned thread to end after a hang."""
_STOP_ATTEMPTS = 10
_CAN_FORK = hasattr(os, "fork") and sys.platform != "emscripten"
_TAINTS: dict[int, tuple[Any, list[str], list[threading.Thread]]] = {}
"""id(implementation) -> (the implementation, kept so the id stays its own; the hangs'
descriptions; the abandoned threads still running)."""


class _Abandoned(BaseException):
    """Raised asynchronously into the thread of a driver call the runner gave up on."""


def _stop_abandoned(abandoned: list[tuple[str, "_Call"]]) -> list[tuple[str, threading.Thread]]:
    """Try to end each abandoned call's thread; the ones still running afterwards."""
    import ctypes

    alive = []
    for method, call in abandoned:
        thread = call.thread
        for _ in range(_STOP_ATTEMPTS):
            if call.done or not thread.is_alive() or thread.ident is None:
                break
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident),
                                                       ctypes.py_object(_Abandoned))
            thread.join(STOP_GRACE_S / _STOP_ATTEMPTS)
        if not call.done and thread.is_alive():
            alive.append((method, thread))
    return alive


def _describe(threads: list[tuple[str, threading.Thread]]) -> str:
    return ", ".join(f"{method} (thread {thread.name!r})" for method, thread in threads)


def _taint(implementation: Any, scenario_id: str, threads: list[tuple[str, threading.Thread]]
           ) -> None:
    _, hangs, alive = _TAINTS.setdefault(id(implementation), (implementation, [], []))
    hangs.append(f"{_describe(threads)} from the hang in scenario {scenario_id}")
    alive.extend(thread for _, thread in threads)


def _still_running(implementation: Any) -> str:
    """"" unless threads abandoned in an earlier hang of this implementation still run."""
    entry = _TAINTS.get(id(implementation))
    if entry is None:
        return ""
    _, hangs, alive = entry
    alive[:] = [thread for thread in alive if thread.is_alive()]
    if not alive:
        del _TAINTS[id(implementation)]
        return ""
    return (f"{len(alive)} thread(s) abandoned after a hang still run in the harness "
            f"process ({'; '.join(hangs)})")


def _with_note(run: ScenarioRun, note: str) -> ScenarioRun:
    """The run with ``note`` added to its error (outside the trace: timing decides it)."""
    error = f"{run.error}; {note}" if run.error else note
    return ScenarioRun(run.trace, run.failpoints_reached, error, run.duration_s, run.unfired)


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
            _TAINTS.clear()
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
    return ScenarioRun(run.trace, run.failpoints_reached, run.error,
                       time.monotonic() - started, run.unfired)


# --------------------------------------------------------------------------- threads


class _Call:
    """One driver call running in its own (daemon) thread."""

    def __init__(self, fn: Callable[[], Any], cond: threading.Condition, name: str) -> None:
        self._fn: Callable[[], Any] | None = fn
        self._cond = cond
        self.done = False
        self.value: Any = None
        self.exc: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        try:
            assert self._fn is not None
            self.value = self._fn()
        except BaseException as exc:  # everything the implementation lets out is data
            self.exc = exc
        finally:
            self._fn = None  # drop the closure: a crashed runtime must become garbage
            with self._cond:
                self.done = True
                self._cond.notify_all()

    def take(self) -> tuple[Any, BaseException | None]:
        value, exc = self.value, self.exc
        self.value = self.exc = None
        return value, exc


@dataclass(slots=True)
class _Hold:
    """The state of one concurrent_turn: instance A is held at a failpoint."""

    instance: int
    at: str | None
    held: bool = False
    reported: bool = False
    released: bool = False


@dataclass(frozen=True, slots=True)
class _Outcome:
    kind: str
    """"returned", "raised", "crashed", "hung" or "held"."""
    value: Any = None
    expected: bool = False
    call: _Call | None = None


def _forget(exc: BaseException | None) -> None:
    """Clear the frames an exception keeps alive (they hold the dead runtime)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if exc.__traceback__ is not None:
            traceback.clear_frames(exc.__traceback__)
            exc.__traceback__ = None
        exc = exc.__context__ or exc.__cause__


def _jsonable(value: Any) -> Any:
    try:
        return to_json(value)
    except Exception:
        if isinstance(value, dict):
            return {str(k): _jsonable(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [_jsonable(v) for v in value]
        return repr(value)


class _CheckedParts:
    """The rows (views) of the last observation that passed the contract check, so the next
    one checks only its new rows: an implementation that reads the store incrementally hands
    back the very same view objects for unchanged rows, and most probes change one row.

    :meth:`fit` says True only when every field has its exact contract type and every row is
    one already checked (the same object, held here so its id cannot be reused) or passes
    its own check; anything else (a subclass, a wrong field) is left to the full check,
    which names the problem. A row object mutated after its check is no more checked than
    the earlier observation that already held it."""

    _ROW_TYPES: dict[str, Any] | None = None

    def __init__(self) -> None:
        self._rows: dict[int, Any] = {}

    @classmethod
    def _row_types(cls) -> dict[str, Any]:
        if cls._ROW_TYPES is None:
            import typing

            hints = typing.get_type_hints(Observation)
            cls._ROW_TYPES = {f.name: (typing.get_args(hints[f.name])[0]
                                       if typing.get_origin(hints[f.name]) is tuple
                                       else hints[f.name])
                              for f in dataclasses.fields(Observation)}
        return cls._ROW_TYPES

    def fit(self, observation: Any) -> bool:
        if type(observation) is not Observation:
            return False
        rows: dict[int, Any] = {}
        for name, row_type in self._row_types().items():
            value = getattr(observation, name)
            if row_type is int:
                if type(value) is not int:
                    return False
                continue
            if type(value) is not tuple:
                return False
            for row in value:
                if self._rows.get(id(row)) is not row and value_problem(row_type, row, ""):
                    return False
                rows[id(row)] = row
        self._rows = rows
        return True


# --------------------------------------------------------------------------- the run


class _Run:
    """The state of one scenario run; also the world's hooks (probe, re-entrant calls, hold)."""

    def __init__(self, implementation: Implementation, scenario: Scenario, seed: int,
                 limit: float, data_dir: str) -> None:
        self.impl = implementation
        self.crash_mode = str(getattr(implementation, "crash_mode", CRASH_MODE))
        """"in_process", or "process" for an implementation whose crashes are real kills."""
        self.scenario = scenario
        self.seed = seed
        self.limit = limit
        self.data_dir = data_dir
        self.log = EventLog()
        self.world = SimWorld(
            rng=random.Random(seed),
            sessions=scenario.sessions,
            tools=scenario.tools,
            files=scenario.files,
            classifier=scenario.classifier,
            model=scenario.model,
            behaviours=scenario.tool_behaviours,
            faults=scenario.faults,
            hooks=self,
            log=self.log,
        )
        self.cond = threading.Condition()
        self.observations: list[ObservationPoint] = []
        self.runtimes: dict[int, Any] = {}
        self.primary = -1
        self.next_instance = 0
        self.errors: list[str] = []
        # The permission versions each session has had, as the harness set them: every rule
        # change it makes must name a fresh one (the contract binds each decision to a
        # version, so reusing one would make two rule sets indistinguishable).
        self.versions: dict[str, set[int]] = {
            c.session_id: {c.permission_version} for c in scenario.sessions}
        self.hung = False
        self.finished = False
        self.concurrent: _Hold | None = None
        self.answered: set[str] = set()
        self._obs_lock = threading.Lock()
        self.abandoned: list[tuple[str, _Call]] = []
        self._last_observation: Observation | None = None
        """The latest checked observation (see :meth:`_inspect`)."""
        """Driver calls given up on (hangs): (method, call), for :func:`_stop_abandoned`."""
        self._checked_parts = _CheckedParts()
        """The rows of the latest checked observation (see :class:`_CheckedParts`)."""

    # -- recording -------------------------------------------------------------------------

    def event(self, kind: str, instance: int, data: dict[str, Any]) -> None:
        self.log.append(Source.HARNESS, kind, instance, data)

    def fail(self, message: str) -> None:
        self.errors.append(message)

    def bumps_version(self, session_id: str, version: int, where: str) -> bool:
        """True when a rule change names a version this session never had; otherwise the
        scenario is wrong and the run stops with an error that says how to fix it."""
        used = self.versions.setdefault(session_id, set())
        if version not in used:
            used.add(version)
            return True
        self.fail(f"scenario {self.scenario.id} ({self.scenario.file}): {where} changes the rules "
                  f"of session {session_id!r} to permission_version {version}, which the session "
                  f"already had; every rule change must name a new version (e.g. "
                  f"{max(used) + 1})")
        return False

    @property
    def stopped(self) -> bool:
        return bool(self.errors)

    def _foreign_thread_calls(self) -> None:
        """Fail the run for every world port called from a thread the runner did not start
        (the world refused those calls and recorded nothing of them)."""
        for message in self.world.take_foreign_calls():
            self.fail(message)

    def _info(self) -> ImplementationInfo:
        """``Implementation.info``, checked; a placeholder (and an error) when it is not one."""
        # An in-process implementation's info is a checked snapshot; read_info re-reads the
        # implementation's own (see harness.implementations.InProcessImplementation).
        read_info = getattr(self.impl, "read_info", None)
        try:
            info = read_info() if callable(read_info) else self.impl.info
        except Exception as exc:  # noqa: BLE001 - the implementation's failure is data
            self.fail(f"reading Implementation.info raised {type(exc).__name__}: {exc}")
            return ImplementationInfo(name="<info raised>", version="")
        problem = value_problem(ImplementationInfo, info, "Implementation.info is")
        if problem:
            self.fail(problem)
            return ImplementationInfo(name="<invalid info>", version="")
        return info

    def _inspect(self) -> Observation:
        observation = self.impl.inspect(self.data_dir)
        last = self._last_observation
        if observation is last:  # checked when it was first returned
            return observation
        try:
            unchanged = last is not None and type(observation) is Observation \
                and bool(observation == last)
        except Exception:  # noqa: BLE001 - a hostile value's __eq__; the check says more
            unchanged = False
        if unchanged:
            # The store did not change between probes (most failpoints sit between writes):
            # keep one object, so the trace holds and serializes it once.
            return last  # type: ignore[return-value]
        if not self._checked_parts.fit(observation):
            problem = value_problem(Observation, observation, "inspect returned")
            if problem:
                raise ContractViolation(problem)
        self._last_observation = observation
        return observation

    def _record_observation(self, instance: int, label: str, observation: Observation) -> None:
        with self._obs_lock:
            point = ObservationPoint(self.log.last_index(), label, observation)
            self.observations.append(point)
            number = len(self.observations) - 1
        self.event(Kind.OBSERVED, instance, {"label": label, "observation_index": number})

    def _inspect_failed(self, instance: int, label: str, exc: BaseException) -> None:
        self.event(Kind.DRIVER_RAISED, instance, {
            "method": "inspect", "exception": type(exc).__name__, "message": str(exc),
            "expected": False, "label": label})
        if isinstance(exc, ContractViolation):
            self.fail(f"at {label}, {exc}")
        else:
            self.fail(f"inspect raised {type(exc).__name__} at {label}: {exc}")

    def observe(self, instance: int, label: str) -> None:
        """Read the durable store from the main thread, under the time limit."""
        if self.hung:
            return
        call = _Call(self._inspect, self.cond, "lh-inspect")
        call.thread.start()
        with self.cond:
            self.cond.wait_for(lambda: call.done, timeout=self.limit)
        if not call.done:
            self.abandoned.append(("inspect", call))
            self.event(Kind.HANG, instance, {"method": "inspect", "limit_s": self.limit})
            self.fail(f"inspect did not return within {self.limit:g}s at {label} (hang)")
            self.hung = True
            return
        value, exc = call.take()
        if exc is not None:
            self._inspect_failed(instance, label, exc)
            _forget(exc)
            return
        self._record_observation(instance, label, value)

    # -- world hooks (called from the implementation's thread) ------------------------------

    def probe(self, instance: int, label: str) -> None:
        if self.finished:
            return
        try:
            observation = self._inspect()
        except Exception as exc:
            self._inspect_failed(instance, label, exc)
            return
        self._record_observation(instance, label, observation)

    def _reentrant(self, instance: int, method: str, args: dict[str, Any], failpoint: str,
                   fn: Callable[[Any], Any]) -> None:
        runtime = self.runtimes.get(instance)
        if runtime is None or self.finished:
            return
        self.event(Kind.DRIVER_CALL, instance, {"method": method, "args": args,
                                                "via_failpoint": failpoint})
        try:
            result = fn(runtime)
        except Exception as exc:  # SimulatedCrash passes through: it kills the outer call
            self.event(Kind.DRIVER_RAISED, instance, {
                "method": method, "exception": type(exc).__name__, "message": str(exc),
                "expected": False})
            self.fail(f"{method} (re-entrant, at failpoint {failpoint}) raised "
                      f"{type(exc).__name__}: {exc}")
            return
        self.event(Kind.DRIVER_RETURN, instance, {"method": method, "result": _jsonable(result)})

    def change_rules(self, instance: int, session_id: str, rules: tuple[Rule, ...],
                     permission_version: int, failpoint: str) -> None:
        if not self.bumps_version(session_id, permission_version,
                                  f"the change_rules fault at {failpoint}"):
            return
        args = {"session_id": session_id, "rules": to_json(rules),
                "permission_version": permission_version}
        self._reentrant(instance, "update_rules", args, failpoint,
                        lambda rt: rt.update_rules(session_id, rules, permission_version))

    def cancel(self, instance: int, session_id: str, failpoint: str) -> None:
        self._reentrant(instance, "cancel", {"session_id": session_id}, failpoint,
                        lambda rt: rt.cancel(session_id))

    def hold_requested(self, instance: int, failpoint: str, planned: bool) -> bool:
        hold = self.concurrent
        return (hold is not None and not hold.held and not self.finished
                and instance == hold.instance and (planned or failpoint == hold.at))

    def hold(self, instance: int, failpoint: str) -> None:
        hold = self.concurrent
        if hold is None:
            return
        with self.cond:
            hold.held = True
            self.cond.notify_all()
            self.cond.wait_for(lambda: hold.released)

    # -- driver calls ------------------------------------------------------------------------

    def runtime(self, instance: int) -> Any:
        return self.runtimes[instance]

    def drive(self, instance: int, method: str, args: dict[str, Any], fn: Callable[[], Any],
              *, extra: dict[str, Any] | None = None, allow_hold: bool = False) -> _Outcome:
        self.event(Kind.DRIVER_CALL, instance, {"method": method, "args": args, **(extra or {})})
        self.world.take_raised(instance)
        self.world.take_crash(instance)
        call = _Call(fn, self.cond, f"lh-{method}-{instance}")
        self.world.admit_thread(instance, call.thread)
        call.thread.start()
        return self.finish(instance, method, call, allow_hold=allow_hold)

    def finish(self, instance: int, method: str, call: _Call, *, allow_hold: bool = False
               ) -> _Outcome:
        hold = self.concurrent if allow_hold else None

        def ready() -> bool:
            return call.done or (hold is not None and hold.held and not hold.reported)

        with self.cond:
            self.cond.wait_for(ready, timeout=self.limit)
            if not call.done and hold is not None and hold.held and not hold.reported:
                hold.reported = True
                return _Outcome("held", call=call)
        self._foreign_thread_calls()
        if not call.done:
            self.event(Kind.HANG, instance, {"method": method, "limit_s": self.limit})
            self.fail(f"{method} on instance {instance} did not return within "
                      f"{self.limit:g}s of wall-clock time (hang)")
            self.hung = True
            self.abandoned.append((method, call))
            self.world.kill(instance)
            return _Outcome("hung")
        crash = self.world.take_crash(instance)
        crash_point, fired = crash if crash is not None else (None, None)
        del crash
        raised = self.world.take_raised(instance)
        value, exc = call.take()
        try:
            if isinstance(exc, SimulatedCrash) or crash_point is not None:
                data: dict[str, Any] = {"failpoint": crash_point or "", "mode": self.crash_mode}
                if fired is not None and exc is not fired:
                    # What came out is not the crash the world raised: the implementation
                    # caught it (maybe dying later on a dead-instance call).
                    data["swallowed"] = True
                    self.fail(f"{method}: the implementation caught SimulatedCrash at failpoint "
                              f"{crash_point} and carried on (it must never catch it)")
                self.world.kill(instance)
                self.event(Kind.CRASH, instance, data)
                return _Outcome("crashed")
            if exc is not None:
                expected = isinstance(exc, EXPECTED_ERRORS) and any(
                    exc is error or (type(exc) is type(error) and str(exc) == str(error))
                    for error in raised)
                self.event(Kind.DRIVER_RAISED, instance, {
                    "method": method, "exception": type(exc).__name__, "message": str(exc),
                    "expected": expected})
                if not expected:
                    self.fail(f"{method} on instance {instance} raised "
                              f"{type(exc).__name__}: {exc}")
                return _Outcome("raised", expected=expected)
            result = None if method == "open" else _jsonable(value)
            problem = driver_result_problem(method, value)
            if problem:
                # The call returned, but nothing it returned can be used: as if it raised.
                self.event(Kind.DRIVER_RETURN, instance, {"method": method, "result": result,
                                                          "contract_error": problem})
                self.fail(f"{problem} (instance {instance})")
                return _Outcome("raised")
            self.event(Kind.DRIVER_RETURN, instance, {"method": method, "result": result})
            return _Outcome("returned", value=value)
        finally:
            for error in (exc, fired, *raised):
                _forget(error)
            del exc, fired, raised

    def drop(self, instance: int) -> None:
        """Forget an instance without closing it (what a killed process leaves behind)."""
        self.world.kill(instance)
        runtime = self.runtimes.pop(instance, None)
        del runtime
        gc.collect()

    def open_instance(self, extra: dict[str, Any] | None = None) -> tuple[int, _Outcome]:
        instance = self.next_instance
        self.next_instance += 1
        world = self.world.port(instance)
        outcome = self.drive(instance, "open", {}, lambda: self.impl.open(self.data_dir, world),
                             extra=extra)
        if outcome.kind == "returned":
            self.runtimes[instance] = outcome.value
            outcome = _Outcome("returned")
        return instance, outcome

    def restart(self) -> None:
        """Open a new primary instance on the same data dir and world, then ``recover()``."""
        for _ in range(MAX_RESTARTS_IN_A_ROW):
            instance = self.next_instance
            self.event(Kind.RESTART, instance, {"instance": instance})
            instance, outcome = self.open_instance()
            if outcome.kind == "crashed":
                self.drop(instance)
                continue
            if outcome.kind != "returned":
                return
            outcome = self.drive(instance, "recover", {}, lambda: self.runtime(instance).recover())
            if outcome.kind == "crashed":
                self.drop(instance)
                continue
            self.primary = instance
            if outcome.kind != "hung":
                self.observe(instance, "after_restart")
            return
        self.fail(f"the implementation crashed {MAX_RESTARTS_IN_A_ROW} times in a row while "
                  "restarting and recovering")

    def after(self, instance: int, outcome: _Outcome) -> None:
        """What follows a primary driver call: a crash means drop, restart and recover."""
        if outcome.kind == "crashed":
            self.drop(instance)
            self.restart()

    # -- steps -------------------------------------------------------------------------------

    def execute(self) -> None:
        self.primary, outcome = self.open_instance()
        if outcome.kind == "crashed":
            self.drop(self.primary)
            self.restart()
        for config in self.scenario.sessions:
            if self.stopped:
                break
            primary = self.primary
            outcome = self.drive(primary, "open_session", {"config": to_json(config)},
                                 lambda: self.runtime(primary).open_session(config))
            self.after(primary, outcome)
        for step in self.scenario.steps:
            if self.stopped:
                break
            self.step(step)
            if not self.hung and not self.stopped:
                self.observe(self.primary, "quiescent")
        if not self.hung:
            self.observe(self.primary, "final")

    def step(self, step: Step) -> None:
        primary = self.primary
        session = step.session or self.scenario.default_session
        if step.do is StepKind.TURN:
            text = self.world.expand(step.text)
            self.after(primary, self.drive(
                primary, "run_turn", {"session_id": session, "user_text": text},
                lambda: self.runtime(primary).run_turn(session, text)))
        elif step.do is StepKind.ANSWER:
            self.answer(primary, step)
        elif step.do is StepKind.UPDATE_RULES:
            rules, version = step.rules, step.permission_version
            if not self.bumps_version(session, version, "an update_rules step"):
                return
            self.after(primary, self.drive(
                primary, "update_rules",
                {"session_id": session, "rules": to_json(rules), "permission_version": version},
                lambda: self.runtime(primary).update_rules(session, rules, version)))
        elif step.do is StepKind.CANCEL:
            self.after(primary, self.drive(primary, "cancel", {"session_id": session},
                                           lambda: self.runtime(primary).cancel(session)))
        elif step.do is StepKind.RESTART:
            outcome = self.drive(primary, "close", {}, lambda: self.runtime(primary).close())
            if outcome.kind in ("returned", "raised", "crashed"):
                self.drop(primary)
                self.restart()
        elif step.do is StepKind.CONCURRENT_TURN:
            self.concurrent_turn(primary, session, step)
        elif step.do is StepKind.LOAD_CHECKPOINT:
            self.load_checkpoint(primary, session, step.fixture)
        elif step.do is StepKind.OBSERVE:
            self.observe(primary, f"observe:{step.label}" if step.label else "observe")

    def skip(self, instance: int, method: str, args: dict[str, Any], reason: str) -> None:
        # A closed span keeps checkers' driver-span logic simple; ``skipped`` says no call ran.
        self.event(Kind.DRIVER_CALL, instance, {"method": method, "args": args, "skipped": reason})
        self.event(Kind.DRIVER_RETURN, instance, {"method": method, "result": None,
                                                  "skipped": reason})

    def answer(self, primary: int, step: Step) -> None:
        approve = step.approve
        if step.wait == "next":
            wait_id = self.world.approver.next_unanswered()
            missing = "no approval prompt is waiting for an answer"
        elif step.wait == "again":  # the same human answer delivered a second time
            wait_id = self.world.approver.last_answered()
            missing = "no wait was answered before, so none can be answered again"
        else:
            wait_id = self._wait_for_call(step.wait)
            missing = f"no approval prompt was shown for tool call {step.wait!r}"
        if wait_id is None:
            self.skip(primary, "answer_approval", {"wait_id": None, "approve": approve},
                      missing)
            return
        self.world.approver.mark_answered(wait_id)  # the human clicked once, whatever follows
        self.answered.add(wait_id)
        self.after(primary, self.drive(
            primary, "answer_approval", {"wait_id": wait_id, "approve": approve},
            lambda: self.runtime(primary).answer_approval(wait_id, approve)))

    def _wait_for_call(self, tool_call_id: str) -> str | None:
        """The wait shown for this tool call: the oldest one not answered yet, else the last
        one shown (so a scenario can answer a wait twice)."""
        prompts = [p for p in self.world.approver.prompted() if p.tool_call_id == tool_call_id]
        unanswered = [p.wait_id for p in prompts if p.wait_id not in self.answered]
        if unanswered:
            return unanswered[0]
        return prompts[-1].wait_id if prompts else None

    def concurrent_turn(self, a: int, session: str, step: Step) -> None:
        text = self.world.expand(step.text)
        hold_at = step.hold_at.value if step.hold_at else None
        planned = next((f.failpoint.value for f in self.scenario.faults
                        if f.action is Action.HOLD), None)
        args = {"session_id": session, "user_text": text, "hold_at": hold_at or planned}
        if step.optional:
            args["optional"] = True  # fault_coverage exempts this hold
        self.concurrent = _Hold(a, hold_at)
        try:
            first = self.drive(a, "concurrent_turn", {**args, "role": "A"},
                               lambda: self.runtime(a).run_turn(session, text), allow_hold=True)
            held = first.kind == "held"
            if first.kind == "hung" or (self.stopped and not held):
                return
            b, opened = self.open_instance(extra={"concurrent_with": a})
            if opened.kind == "returned":
                second = self.drive(b, "concurrent_turn", {**args, "role": "B", "held": held},
                                    lambda: self.runtime(b).run_turn(session, text))
                if second.kind not in ("crashed", "hung"):
                    self.drive(b, "close", {}, lambda: self.runtime(b).close())
            self.drop(b)
            if held:
                assert first.call is not None
                if self.hung:
                    self.world.kill(a)  # A wakes up dead and its thread ends
                with self.cond:
                    self.concurrent.released = True
                    self.cond.notify_all()
                if self.hung:
                    return
                first = self.finish(a, "concurrent_turn", first.call)
            self.after(a, first)
        finally:
            if self.concurrent is not None and not self.concurrent.released:
                with self.cond:
                    self.concurrent.released = True
                    self.cond.notify_all()
            self.concurrent = None

    def load_checkpoint(self, primary: int, session: str, name: str) -> None:
        args: dict[str, Any] = {"session_id": session, "fixture": name}
        declared = tuple(self._info().checkpoint_fixtures)
        matches = [d for d in declared if _fixture_matches(name, d)]
        if not matches:
            self.skip(primary, "load_checkpoint", {**args, "expected_messages": None,
                                                   "fixture_content": None},
                      f"the implementation declares no checkpoint fixture {name!r} "
                      f"(declared: {', '.join(declared) or 'none'})")
            return
        try:
            # Asked of the implementation: the harness never opens a path it names.
            fixture = fixture_source.fetch(self.impl, matches[0])
        except Exception as exc:  # noqa: BLE001 - any failure to hand it over is reported
            self.fail(f"declared checkpoint fixture {matches[0]!r} could not be had from the "
                      f"implementation: {type(exc).__name__}: {exc}")
            return
        data = fixture.content
        # What the harness itself reads from the bytes it passes (L1.6 judges the load on it;
        # null when the fixture is in no documented layout: the sidecar is all there is).
        expected = None if fixture.expected_messages is None else list(fixture.expected_messages)
        args.update({"path": matches[0], "expected_messages": expected,
                     "fixture_content": read_fixture(data),
                     "size_bytes": len(data),
                     "sha256": hashlib.sha256(data).hexdigest()})
        self.after(primary, self.drive(primary, "load_checkpoint", args,
                                       lambda: self.runtime(primary).load_checkpoint(session, data)))

    # -- the end -----------------------------------------------------------------------------

    def result(self) -> tuple[Trace, tuple[str, ...], tuple[str, ...]]:
        """The trace, the failpoints reached, and what was planned but did not happen.

        A run that stopped on its own error (hang, unexpected exception) keeps that error
        alone: the faults it never got to are a consequence, not news."""
        self._foreign_thread_calls()
        info = self._info()
        sessions = self.scenario.sessions
        meta = TraceMeta(
            scenario_id=self.scenario.id,
            stage=self.scenario.stage,
            seed=self.seed,
            implementation=info.name,
            features=tuple(Feature(f) for f in info.features),
            thresholds=self.scenario.thresholds,
            sessions=sessions,
            tools=self.scenario.tools,
            faults=tuple(fault.spec() for fault in self.scenario.faults),
            crash_mode=self.crash_mode,
            dangerous_markers=self.scenario.classifier.dangerous,
            tags=self.scenario.tags,
        )
        with self._obs_lock:
            observations = tuple(self.observations)
        events = self.log.events()
        unfired: tuple[str, ...] = ()
        if not self.errors:
            unfired = fault_coverage.messages(Trace(meta, events, observations))
        errors = [*self.errors, *(f"planned but not carried out: {line}" for line in unfired)]
        trace = Trace(meta, events, observations, completed=not errors, error="; ".join(errors))
        return _scrub(trace, self.data_dir), self.world.failpoints_reached(), unfired

    def shutdown(self) -> None:
        """Close what is still open, outside the trace (nothing it does is recorded)."""
        self.finished = True
        for instance in list(self.runtimes):
            self.world.kill(instance)
        if not self.hung:
            for instance in list(self.runtimes):
                call = _Call(self.runtimes[instance].close, self.cond, "lh-close")
                call.thread.start()
                with self.cond:
                    self.cond.wait_for(lambda: call.done, timeout=self.limit)
                _forget(call.take()[1])
        self.runtimes.clear()
        gc.collect()


# --------------------------------------------------------------------------- helpers


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


def _fixture_matches(name: str, declared: str) -> bool:
    """Does a step's ``fixture`` name this declared fixture? By path, file name, stem, or
    a stem prefix ending at a separator ("v1" names "fixtures/checkpoints/v1_basic.json")."""
    path = PurePosixPath(declared)
    stem = path.name.split(".")[0]
    return name in (declared, path.name, path.stem, stem) or any(
        stem.startswith(name + sep) for sep in "_-.")


def _scrub(trace: Trace, data_dir: str) -> Trace:
    """The trace without the data dir path or memory addresses (they vary run to run)."""
    # Longest first: one spelling may contain the other (/private/tmp/x vs /tmp/x).
    marks = sorted({data_dir, os.path.realpath(data_dir)}, key=len, reverse=True)
    text = trace_canonical_json(trace)
    if not any(mark in text for mark in marks) and not _ADDRESS.search(text):
        return trace

    def clean(value: Any) -> Any:
        if isinstance(value, str):
            for mark in marks:
                value = value.replace(mark, DATA_DIR_MARK)
            return _ADDRESS.sub(" at 0x?", value)
        if isinstance(value, dict):
            return {clean(k): clean(v) for k, v in value.items()}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value

    return trace_from_json(clean(trace_to_json(trace)))
