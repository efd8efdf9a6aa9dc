"""The two outward signals of the lifecycle: realtime events and failpoints.

Guarantees: every event is a canonical ``LifecycleEvent`` sent through ``World.emit``;
every failpoint call carries ``session_id`` and, where they apply, ``execution_id`` and
``tool_call_id`` (operation steps) or ``request_id`` (model request steps).
Callers emit only after the commit that made the event true, and call failpoints only
outside transactions; whatever a failpoint raises (``SimulatedCrash`` included) propagates.
"""

from __future__ import annotations

from typing import Any

from harness.contract import EventType, Failpoint, LifecycleEvent, World


class Signals:
    def __init__(self, world: World) -> None:
        self._world = world

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
    ) -> None:
        context = {"session_id": session_id}
        # Keys that do not apply are left out rather than sent empty: an empty id would
        # read as "names an operation whose id is empty".
        for key, value in (("execution_id", execution_id), ("tool_call_id", tool_call_id),
                           ("request_id", request_id)):
            if value:
                context[key] = value
        self._world.failpoint(name, context)
