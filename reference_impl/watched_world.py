"""The world as one runtime instance sees it: every port call tells the instance's row cache
that another instance may have run meanwhile.

Guarantees: each call of a :class:`~harness.contract.World` port (a model stream's
``next_chunk`` included) is passed through unchanged (same arguments, same value, same
exception, ``SimulatedCrash`` included), and once it returns or raises, the store's
:class:`~reference_impl.store.RowCache` verifies against the store before serving another
cached row. While the instance waits in a port, another instance (or a re-entrant driver
call of this one) may commit; nothing else lets it run, so between two port calls the
rows this instance committed or verified last are the store's.
"""

from __future__ import annotations

from typing import Any

from harness.contract import (
    ApprovalPrompt,
    ClassifierRequest,
    ClassifierVerdict,
    Failpoint,
    LifecycleEvent,
    ModelChunk,
    ModelRequest,
    ModelStream,
    Projection,
    ToolInvocation,
    ToolResult,
    World,
)
from reference_impl.store import RowCache


class WatchedWorld:
    """``world``, telling ``rows`` after each port call (see the module docstring)."""

    __slots__ = ("_world", "_rows", "_called")

    def __init__(self, world: World, rows: RowCache | None) -> None:
        self._world = world
        self._rows = rows
        # after each port call: the cache's own method, bound once (one call, not two)
        self._called = rows.others_may_have_run if rows is not None else _nothing

    def open_model_stream(self, request: ModelRequest) -> ModelStream:
        try:
            stream = self._world.open_model_stream(request)
        finally:
            self._called()
        return _WatchedStream(stream, self._rows) if self._rows is not None else stream

    def review(self, request: ClassifierRequest) -> ClassifierVerdict:
        try:
            return self._world.review(request)
        finally:
            self._called()

    def execute_tool(self, invocation: ToolInvocation) -> ToolResult:
        try:
            return self._world.execute_tool(invocation)
        finally:
            self._called()

    def prompt_approval(self, prompt: ApprovalPrompt) -> None:
        try:
            self._world.prompt_approval(prompt)
        finally:
            self._called()

    def publish(self, projection: Projection) -> None:
        try:
            self._world.publish(projection)
        finally:
            self._called()

    def now(self) -> float:
        try:
            return self._world.now()
        finally:
            self._called()

    def emit(self, event: LifecycleEvent) -> None:
        try:
            self._world.emit(event)
        finally:
            self._called()

    def failpoint(self, name: Failpoint, context: dict[str, Any]) -> None:
        try:
            self._world.failpoint(name, context)
        finally:
            self._called()


def _nothing() -> None:
    pass


class _WatchedStream:
    __slots__ = ("_stream", "_rows")

    def __init__(self, stream: ModelStream, rows: RowCache) -> None:
        self._stream = stream
        self._rows = rows

    def next_chunk(self) -> ModelChunk:
        try:
            return self._stream.next_chunk()
        finally:
            self._rows.others_may_have_run()
