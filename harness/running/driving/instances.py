"""Instances of the implementation: open, drop after a crash, restart + recover, close at the end.

Guarantees:

* instances are numbered in the order they are opened (0 first), one number per ``open``
  attempt; an opened runtime is held only in :attr:`RunState.runtimes`;
* a crash drops the instance without closing it: the world kills it, the runtime is
  forgotten and a full garbage collection runs, so an uncommitted SQLite transaction it held
  rolls back before anything else opens the data dir;
* :meth:`Instances.restart` records ``RESTART``, opens a new instance on the same data dir and
  world, calls ``recover()`` and observes ``"after_restart"``; a crash during either is
  another restart, up to :data:`MAX_RESTARTS_IN_A_ROW` before the run fails;
* :meth:`Instances.shutdown` closes what is still open outside the trace (nothing it does is
  recorded), and after a hang closes nothing (the hung call may hold what close would need).
"""

from __future__ import annotations

import gc
from typing import Any

from harness.running.driving.calls import Call, DriverCalls, Outcome, forget
from harness.running.driving.state import RunState
from harness.running.driving.store_probe import StoreProbe
from harness.trace.record import Kind

MAX_RESTARTS_IN_A_ROW = 8
"""Crashes during restart + recovery allowed before the run is given up as an error."""


class Instances:
    """Opens, drops and restarts the run's instances."""

    def __init__(self, state: RunState, calls: DriverCalls, store: StoreProbe) -> None:
        self.state = state
        self.calls = calls
        self.store = store

    def drop(self, instance: int) -> None:
        """Forget an instance without closing it (what a killed process leaves behind)."""
        self.state.world.kill(instance)
        runtime = self.state.runtimes.pop(instance, None)
        del runtime
        gc.collect()

    def open(self, extra: dict[str, Any] | None = None, *, may_refuse: bool = False
             ) -> tuple[int, Outcome]:
        """Open the next instance; ``may_refuse``: its ``open`` raising is a recorded refusal,
        not a run error (a second live instance, for an implementation without
        ``multi_instance``)."""
        state = self.state
        instance = state.next_instance
        state.next_instance += 1
        world = state.world.port(instance)
        outcome = self.calls.drive(instance, "open", {},
                                   lambda: state.impl.open(state.data_dir, world), extra=extra,
                                   may_refuse=may_refuse)
        if outcome.kind == "returned":
            state.runtimes[instance] = outcome.value
            outcome = Outcome("returned")
        return instance, outcome

    def restart(self) -> None:
        """Open a new primary instance on the same data dir and world, then ``recover()``."""
        state = self.state
        for _ in range(MAX_RESTARTS_IN_A_ROW):
            instance = state.next_instance
            state.event(Kind.RESTART, instance, {"instance": instance})
            instance, outcome = self.open()
            if outcome.kind == "crashed":
                self.drop(instance)
                continue
            if outcome.kind != "returned":
                return
            outcome = self.calls.drive(instance, "recover", {},
                                       lambda: state.runtime(instance).recover())
            if outcome.kind == "crashed":
                self.drop(instance)
                continue
            state.primary = instance
            if outcome.kind != "hung":
                self.store.observe(instance, "after_restart")
            return
        state.fail(f"the implementation crashed {MAX_RESTARTS_IN_A_ROW} times in a row while "
                   "restarting and recovering")

    def after(self, instance: int, outcome: Outcome) -> None:
        """What follows a primary driver call: a crash means drop, restart and recover."""
        if outcome.kind == "crashed":
            self.drop(instance)
            self.restart()

    def shutdown(self) -> None:
        """Close what is still open, outside the trace (nothing it does is recorded)."""
        state = self.state
        state.finished = True
        for instance in list(state.runtimes):
            state.world.kill(instance)
        if not state.hung:
            for instance in list(state.runtimes):
                call = Call(state.runtimes[instance].close, state.cond, "lh-close")
                call.thread.start()
                with state.cond:
                    state.cond.wait_for(lambda: call.done, timeout=state.limit)
                forget(call.take()[1])
        state.runtimes.clear()
        gc.collect()
