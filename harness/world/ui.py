"""The fake UI: records every projection an implementation publishes.

Guarantees: each publication is one ``UI_PUBLISH`` event, in order; :meth:`FakeUI.current`
is what a user would see now (the latest projection per session and execution id).
"""

from __future__ import annotations

import threading

from harness.contract import Projection, to_json
from harness.trace.record import Kind
from harness.world.log import Channel


class FakeUI:
    def __init__(self) -> None:
        self._published: list[Projection] = []
        self._lock = threading.Lock()

    def publish(self, projection: Projection, channel: Channel) -> None:
        channel.guard()
        with self._lock:
            self._published.append(projection)
        channel.record(Kind.UI_PUBLISH, {"projection": to_json(projection)})

    def published(self) -> tuple[Projection, ...]:
        with self._lock:
            return tuple(self._published)

    def current(self) -> dict[tuple[str, str], Projection]:
        with self._lock:
            latest: dict[tuple[str, str], Projection] = {}
            for projection in self._published:
                latest[(projection.session_id, projection.execution_id)] = projection
            return latest
