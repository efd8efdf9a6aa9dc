"""The virtual clock: the only time an implementation under test can see.

Guarantees: time starts at a fixed instant, never reads the wall clock, and moves only when
the world says so (a slow classifier verdict, a hanging tool, a ``delay`` fault), so that
timeouts happen in virtual time and a run is reproducible.
"""

from __future__ import annotations

import threading

EPOCH = 1_700_000_000.0
"""Where every run's clock starts (a fixed instant, so timestamps look real but never vary)."""


class VirtualClock:
    def __init__(self, start: float = EPOCH) -> None:
        self._now = float(start)
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> float:
        """Move time forward by ``seconds`` (>= 0) and return the new time."""
        if seconds < 0:
            raise ValueError(f"the virtual clock cannot go back (advance({seconds!r}))")
        with self._lock:
            self._now += float(seconds)
            return self._now
