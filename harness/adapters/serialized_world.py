"""A world whose ports one thread at a time may use.

Libraries run parts of a turn on worker threads (LangGraph saves checkpoints and runs nodes
on a thread pool; DBOS runs recovered workflows on its executor). The wire protocol's
endpoint is strictly nested and single-threaded, so every port call of an adapter goes
through one re-entrant lock: a call made from a worker waits until no other thread is
inside a port, and a driver request the harness sends back while a port call waits (e.g.
``update_rules`` at a failpoint) is served by the thread that holds the lock.
"""

from __future__ import annotations

import threading
from typing import Any

from harness.contract import (
    ApprovalPrompt,
    ClassifierRequest,
    ClassifierVerdict,
    Failpoint,
    LifecycleEvent,
    ModelChunk,
    ModelRequest,
    Projection,
    ToolInvocation,
    ToolResult,
    World,
)


class _SerializedStream:
    def __init__(self, stream: Any, lock: threading.RLock) -> None:
        self._stream = stream
        self._lock = lock

    def next_chunk(self) -> ModelChunk:
        with self._lock:
            return self._stream.next_chunk()


class SerializedWorld:
    """``world`` behind one re-entrant lock (see the module docstring)."""

    def __init__(self, world: World) -> None:
        self._world = world
        self._lock = threading.RLock()

    def open_model_stream(self, request: ModelRequest) -> _SerializedStream:
        with self._lock:
            return _SerializedStream(self._world.open_model_stream(request), self._lock)

    def review(self, request: ClassifierRequest) -> ClassifierVerdict:
        with self._lock:
            return self._world.review(request)

    def execute_tool(self, invocation: ToolInvocation) -> ToolResult:
        with self._lock:
            return self._world.execute_tool(invocation)

    def prompt_approval(self, prompt: ApprovalPrompt) -> None:
        with self._lock:
            self._world.prompt_approval(prompt)

    def publish(self, projection: Projection) -> None:
        with self._lock:
            self._world.publish(projection)

    def now(self) -> float:
        with self._lock:
            return self._world.now()

    def emit(self, event: LifecycleEvent) -> None:
        with self._lock:
            self._world.emit(event)

    def failpoint(self, name: Failpoint, context: dict[str, Any]) -> None:
        with self._lock:
            self._world.failpoint(name, context)
