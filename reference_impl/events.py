"""The outward signals of the lifecycle: realtime events, failpoints and runtime faults.

Guarantees:

* every event is a canonical ``LifecycleEvent`` sent through ``World.emit``; callers emit
  only after the commit that made the event true;
* every failpoint call carries ``session_id`` and, where they apply, ``execution_id`` and
  ``tool_call_id`` (operation steps) or ``request_id`` (model request steps); callers call
  failpoints only outside transactions;
* an ordinary exception raised at a failpoint is a runtime fault of that point: it is
  recorded durably (``runtime_faults``) and reported (``RUNTIME_FAULT``) on its own, and
  the lifecycle goes on, because the step before it is committed and the step after it is
  still owed; it never changes a saved result (L1.7). A caller that gives the point a
  meaning of its own (a checkpoint build that fails) asks for the exception instead.
  ``SimulatedCrash`` is not an ``Exception`` and always propagates.
"""

from __future__ import annotations

from typing import Any

from harness.contract import EventType, Failpoint, LifecycleEvent, World
from reference_impl.store import Store


class Signals:
    def __init__(self, world: World, store: Store) -> None:
        self._world = world
        self._store = store

    def emit(
        self,
        event_type: EventType,
        session_id: str,
        execution_id: str = "",
        request_id: str = "",
        **data: Any,
    ) -> None:
        self._world.emit(LifecycleEvent(event_type, session_id, execution_id, request_id, data))

    def failpoint(
        self,
        name: Failpoint,
        session_id: str,
        execution_id: str = "",
        tool_call_id: str = "",
        request_id: str = "",
        *,
        contain: bool = True,
    ) -> Exception | None:
        """Call the failpoint; returns the contained exception, or None when it passed."""
        context = {"session_id": session_id}
        # Keys that do not apply are left out rather than sent empty: an empty id would
        # read as "names an operation whose id is empty".
        if execution_id:
            context["execution_id"] = execution_id
        if tool_call_id:
            context["tool_call_id"] = tool_call_id
        if request_id:
            context["request_id"] = request_id
        try:
            self._world.failpoint(name, context)
        except Exception as exc:
            if not contain:
                raise
            self.runtime_fault(session_id, execution_id, name.value, exc)
            return exc
        return None

    def runtime_fault(
        self, session_id: str, execution_id: str, location: str, error: Exception
    ) -> None:
        message = f"{type(error).__name__}: {error}"
        with self._store.transaction() as conn:
            conn.execute(
                "INSERT INTO runtime_faults (session_id, execution_id, location, error, at)"
                " VALUES (?, ?, ?, ?, ?)",
                (session_id, execution_id, location, message, self._world.now()),
            )
        self.emit(EventType.RUNTIME_FAULT, session_id, execution_id,
                  location=location, error=message)
