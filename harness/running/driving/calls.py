"""Driver calls: each one runs in its own (daemon) thread, and only one thread runs at a time.

Guarantees of :meth:`DriverCalls.drive`:

* the call is recorded (``DRIVER_CALL``) before its thread starts, and the world admits that
  thread alone to the instance's ports;
* the main thread waits as long as the implementation makes progress, and at most the run's
  ``limit`` seconds of wall-clock time without any (no world or lifecycle event recorded:
  :meth:`~harness.world.log.EventLog.progress`), so a slow machine does not turn a long call
  into a hang while a call that stops calling the world is still given up after ``limit``;
  an implementation that calls the world for ever is stopped by the event limit
  (``Limits.events_per_scenario``). The call then ends in exactly one :class:`Outcome`: ``returned`` (``DRIVER_RETURN``, the value checked
  against the contract: a value off it is recorded with ``contract_error`` and counts as
  ``raised``), ``raised`` (``DRIVER_RAISED``; ``expected`` only for an error the world itself
  raised into this instance; ``refused`` for an exception out of a call the caller allowed
  to refuse, e.g. opening a second live instance, which is then no run error), ``crashed`` (``CRASH``, the instance killed in the world; an
  implementation that caught the :class:`~harness.contract.SimulatedCrash` is marked
  ``swallowed`` and fails the run), ``hung`` (``HANG``, the call abandoned, the instance
  killed), or ``held`` (a concurrent turn's instance A reached its hold: the call goes on and
  :meth:`DriverCalls.finish` collects it later);
* nothing an exception carries outlives the call: its frames are cleared (they would keep a
  crashed runtime alive past the garbage collection that must roll its transactions back).
"""

from __future__ import annotations

import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable

from harness.contract import (
    InjectedFault,
    ModelStreamCancelled,
    ModelTransportError,
    SimulatedCrash,
    to_json,
)
from harness.contract.value_checks import driver_result_problem
from harness.running.driving.state import RunState
from harness.trace.record import Kind

EXPECTED_ERRORS = (ModelTransportError, ModelStreamCancelled, InjectedFault)
"""World errors an implementation may let out of a driver call (M3; injected faults)."""


class Call:
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


@dataclass(frozen=True, slots=True)
class Outcome:
    kind: str
    """"returned", "raised", "crashed", "hung" or "held"."""
    value: Any = None
    expected: bool = False
    call: Call | None = None


def forget(exc: BaseException | None) -> None:
    """Clear the frames an exception keeps alive (they hold the dead runtime)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if exc.__traceback__ is not None:
            traceback.clear_frames(exc.__traceback__)
            exc.__traceback__ = None
        exc = exc.__context__ or exc.__cause__


def jsonable(value: Any) -> Any:
    try:
        return to_json(value)
    except Exception:
        if isinstance(value, dict):
            return {str(k): jsonable(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [jsonable(v) for v in value]
        return repr(value)


class DriverCalls:
    """Starts driver calls and turns how each ended into a recorded :class:`Outcome`."""

    def __init__(self, state: RunState) -> None:
        self.state = state

    def drive(self, instance: int, method: str, args: dict[str, Any], fn: Callable[[], Any],
              *, extra: dict[str, Any] | None = None, allow_hold: bool = False,
              may_refuse: bool = False) -> Outcome:
        """Run one driver call. ``may_refuse``: an exception out of it is a documented
        refusal (recorded with ``refused: true``, no run error), not a failure."""
        state = self.state
        state.event(Kind.DRIVER_CALL, instance, {"method": method, "args": args, **(extra or {})})
        state.world.take_raised(instance)
        state.world.take_crash(instance)
        call = Call(fn, state.cond, f"lh-{method}-{instance}")
        state.world.admit_thread(instance, call.thread)
        call.thread.start()
        return self.finish(instance, method, call, allow_hold=allow_hold, may_refuse=may_refuse)

    def _wait_while_progressing(self, ready: Callable[[], bool]) -> None:
        """Wait (holding ``state.cond``) until ``ready()``, or until ``limit`` seconds passed
        without progress. Wakes at most every quarter limit to look at the progress."""
        state = self.state
        limit = state.limit
        seen = state.log.progress()
        idle_until = time.monotonic() + limit
        while not ready():
            left = idle_until - time.monotonic()
            if left <= 0:
                return
            state.cond.wait(min(left, limit / 4))
            now = state.log.progress()
            if now != seen:
                seen, idle_until = now, time.monotonic() + limit

    def finish(self, instance: int, method: str, call: Call, *, allow_hold: bool = False,
               may_refuse: bool = False) -> Outcome:
        state = self.state
        hold = state.concurrent if allow_hold else None

        def ready() -> bool:
            return call.done or (hold is not None and hold.held and not hold.reported)

        with state.cond:
            self._wait_while_progressing(ready)
            if not call.done and hold is not None and hold.held and not hold.reported:
                hold.reported = True
                return Outcome("held", call=call)
        state.foreign_thread_calls()
        if not call.done:
            state.event(Kind.HANG, instance, {"method": method, "limit_s": state.limit})
            state.fail(f"{method} on instance {instance} did not return and made no progress "
                       f"(no call to the world) for {state.limit:g}s of wall-clock time (hang)")
            state.hung = True
            state.abandoned.append((method, call))
            state.world.kill(instance)
            return Outcome("hung")
        crash = state.world.take_crash(instance)
        crash_point, fired = crash if crash is not None else (None, None)
        del crash
        raised = state.world.take_raised(instance)
        value, exc = call.take()
        try:
            if isinstance(exc, SimulatedCrash) or crash_point is not None:
                data: dict[str, Any] = {"failpoint": crash_point or "", "mode": state.crash_mode}
                if fired is not None and exc is not fired:
                    # What came out is not the crash the world raised: the implementation
                    # caught it (maybe dying later on a dead-instance call).
                    data["swallowed"] = True
                    state.fail(f"{method}: the implementation caught SimulatedCrash at "
                               f"failpoint {crash_point} and carried on (it must never "
                               "catch it)")
                state.world.kill(instance)
                state.event(Kind.CRASH, instance, data)
                return Outcome("crashed")
            if exc is not None:
                expected = isinstance(exc, EXPECTED_ERRORS) and any(
                    exc is error or (type(exc) is type(error) and str(exc) == str(error))
                    for error in raised)
                refused = may_refuse and not expected and isinstance(exc, Exception)
                data = {"method": method, "exception": type(exc).__name__,
                        "message": str(exc), "expected": expected}
                if refused:
                    data["refused"] = True
                state.event(Kind.DRIVER_RAISED, instance, data)
                if not expected and not refused:
                    state.fail(f"{method} on instance {instance} raised "
                               f"{type(exc).__name__}: {exc}")
                return Outcome("raised", expected=expected)
            result = None if method == "open" else jsonable(value)
            problem = driver_result_problem(method, value)
            if problem:
                # The call returned, but nothing it returned can be used: as if it raised.
                state.event(Kind.DRIVER_RETURN, instance, {"method": method, "result": result,
                                                           "contract_error": problem})
                state.fail(f"{problem} (instance {instance})")
                return Outcome("raised")
            state.event(Kind.DRIVER_RETURN, instance, {"method": method, "result": result})
            return Outcome("returned", value=value)
        finally:
            for error in (exc, fired, *raised):
                forget(error)
            del exc, fired, raised
