"""A world whose ports one thread at a time may use.

Libraries run parts of a turn on worker threads (LangGraph saves checkpoints and runs nodes
on a thread pool; DBOS runs recovered workflows on its executor). The wire protocol's
endpoint is strictly nested and single-threaded, so every port call of an adapter goes
through one re-entrant lock: a call made from a worker waits until no other thread is
inside a port, and a driver request the harness sends back while a port call waits (e.g.
``update_rules`` at a failpoint) is served by the thread that holds the lock.

A worker may use the world only while the serving thread admits it (:meth:`admitting`,
around a driver call that waits for the library's background work): a library that starts
work on its own (DBOS recovers pending workflows on launch) would otherwise write to the
protocol stream while the serving thread reads the next request from it. Such a worker
waits at the gate until a driver call admits it.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Iterator

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


class _Gate:
    """One re-entrant lock, entered by other threads only while the owner admits them."""

    def __init__(self) -> None:
        self.owner = threading.get_ident()
        self.lock = threading.RLock()
        self.admitted = threading.Event()

    def __enter__(self) -> None:
        if threading.get_ident() != self.owner:
            self.admitted.wait()
        self.lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self.lock.release()


class _SerializedStream:
    def __init__(self, stream: Any, lock: _Gate) -> None:
        self._stream = stream
        self._lock = lock

    def next_chunk(self) -> ModelChunk:
        with self._lock:
            return self._stream.next_chunk()


class SerializedWorld:
    """``world`` behind one gate (see the module docstring); build it on the serving
    thread."""

    def __init__(self, world: World) -> None:
        self._world = world
        self._lock = _Gate()

    @contextmanager
    def admitting(self) -> Iterator[None]:
        """Let worker threads use the world until the block ends (serving thread only)."""
        self._lock.admitted.set()
        try:
            yield
        finally:
            self._lock.admitted.clear()

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
