"""The run's single ordered event log, shared by the world and the runner.

Guarantees: events get consecutive indexes from 0 in the order they were appended (one lock,
so concurrent instances interleave in a total order); once an instance is declared dead (it
crashed, or the run gave up on it), nothing it does reaches the log any more, so a
"killed" in-process instance cannot leave ground truth behind, exactly as a killed process
could not. The implementation can make the world record at most
``Limits.events_per_scenario`` events (:mod:`harness.contract.limits`); past that a guarded append
raises :class:`~harness.contract.limits.LimitExceeded` into the implementation (a ``BaseException``,
so it ends the driver call and the run reports it) and records nothing more.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable

from harness.contract.limits import LimitExceeded, current_limits
from harness.trace.record import TraceEvent


class EventLog:
    def __init__(self, max_events: int | None = None) -> None:
        self.max_events = current_limits().events_per_scenario if max_events is None \
            else max_events
        self._guarded = 0
        self._events: list[TraceEvent] = []
        self._progress = 0
        """Guarded appends that recorded an event: how far the implementation got (read by
        the hang check; a refused or dropped append is no progress)."""
        self._dead: set[int] = set()
        self._lock = threading.Lock()

    def append(
        self, source: str, kind: str, instance: int, data: dict[str, Any], *, guarded: bool = False
    ) -> TraceEvent | None:
        """Append one event; with ``guarded`` (world/IUT events) drop it if ``instance`` is dead."""
        with self._lock:
            if guarded and instance in self._dead:
                return None
            if guarded:
                self._guarded += 1
                if self._guarded > self.max_events:
                    raise LimitExceeded("events_per_scenario", self.max_events,
                                        f"{self._guarded} events (the last a {kind!r})",
                                        "it made the world record too many events")
            event = TraceEvent(len(self._events), source, kind, instance, data)
            self._events.append(event)
            if guarded:
                self._progress += 1
            return event

    def progress(self) -> int:
        """How many world/IUT events were recorded so far (grows while the implementation
        calls the world; a driver call that makes none is idle)."""
        with self._lock:
            return self._progress

    def kill(self, instance: int) -> None:
        with self._lock:
            self._dead.add(instance)

    def is_dead(self, instance: int) -> bool:
        with self._lock:
            return instance in self._dead

    def events(self) -> tuple[TraceEvent, ...]:
        with self._lock:
            return tuple(self._events)

    def last_index(self) -> int:
        with self._lock:
            return len(self._events) - 1

    def __len__(self) -> int:
        with self._lock:
            return len(self._events)


@dataclass(frozen=True, slots=True)
class Channel:
    """How one world part talks back for one instance: record an event, check the instance is
    still alive, and note a world error it is about to raise into the implementation."""

    instance: int
    record: Callable[[str, dict[str, Any]], None]
    guard: Callable[[], None]
    raised: Callable[[BaseException], None]
