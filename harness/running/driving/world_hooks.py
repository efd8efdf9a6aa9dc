"""What the world asks of a run while the implementation runs (:class:`RunHooks`).

Guarantees (all called from the implementation's thread, inside a driver call):

* ``probe`` reads the durable store (:meth:`StoreProbe.probe`);
* ``change_rules`` / ``cancel`` call the live runtime re-entrantly, recorded as a
  ``DRIVER_CALL`` with ``via_failpoint`` and its ``DRIVER_RETURN`` / ``DRIVER_RAISED``; any
  exception but :class:`~harness.contract.SimulatedCrash` (which must kill the outer call) is
  a run error; a rule change under a version the session already had is refused (a scenario
  error); nothing happens once the instance is gone or the run is finished;
* ``hold`` blocks instance A of a ``concurrent_turn`` at the failpoint the step names (or the
  planned ``hold`` fault's) until the steps release it; every other instance, and A once
  held, is never held.
"""

from __future__ import annotations

from typing import Any, Callable

from harness.contract import Rule, to_json
from harness.running.driving.calls import jsonable
from harness.running.driving.state import RunState
from harness.running.driving.store_probe import StoreProbe
from harness.trace.record import Kind


class RunHooks:
    """The world's hooks for one run (see :class:`harness.world.world.WorldHooks`)."""

    def __init__(self, state: RunState, store: StoreProbe) -> None:
        self.state = state
        self.store = store

    def probe(self, instance: int, label: str) -> None:
        self.store.probe(instance, label)

    def _reentrant(self, instance: int, method: str, args: dict[str, Any], failpoint: str,
                   fn: Callable[[Any], Any]) -> None:
        state = self.state
        runtime = state.runtimes.get(instance)
        if runtime is None or state.finished:
            return
        state.event(Kind.DRIVER_CALL, instance, {"method": method, "args": args,
                                                 "via_failpoint": failpoint})
        try:
            result = fn(runtime)
        except Exception as exc:  # SimulatedCrash passes through: it kills the outer call
            state.event(Kind.DRIVER_RAISED, instance, {
                "method": method, "exception": type(exc).__name__, "message": str(exc),
                "expected": False})
            state.fail(f"{method} (re-entrant, at failpoint {failpoint}) raised "
                       f"{type(exc).__name__}: {exc}")
            return
        state.event(Kind.DRIVER_RETURN, instance, {"method": method, "result": jsonable(result)})

    def change_rules(self, instance: int, session_id: str, rules: tuple[Rule, ...],
                     permission_version: int, failpoint: str) -> None:
        if not self.state.bumps_version(session_id, permission_version,
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
        hold = self.state.concurrent
        return (hold is not None and not hold.held and not self.state.finished
                and instance == hold.instance and (planned or failpoint == hold.at))

    def hold(self, instance: int, failpoint: str) -> None:
        state = self.state
        hold = state.concurrent
        if hold is None:
            return
        with state.cond:
            hold.held = True
            state.cond.notify_all()
            state.cond.wait_for(lambda: hold.released)
