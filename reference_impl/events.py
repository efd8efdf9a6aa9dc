"""The two outward signals of the lifecycle: realtime events and failpoints.

Guarantees: every event is a canonical ``LifecycleEvent`` sent through ``World.emit``;
every failpoint call carries the same context keys (``session_id``, ``execution_id``,
``tool_call_id``, plus ``request_id`` for model requests; empty when not applicable).
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
        context = {"session_id": session_id, "execution_id": execution_id,
                   "tool_call_id": tool_call_id}
        if request_id:
            context["request_id"] = request_id
        self._world.failpoint(name, context)
