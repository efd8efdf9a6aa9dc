"""The virtual clock: the only time an implementation under test can see.

Guarantees: time starts at a fixed instant, never reads the wall clock, and moves only when
the world says so (a slow classifier verdict, a hanging tool, a ``delay`` fault), so that
timeouts happen in virtual time and a run is reproducible.
"""

from __future__ import annotations

import threading
from typing import Callable

EPOCH = 1_700_000_000.0
"""Where every run's clock starts (a fixed instant, so timestamps look real but never vary)."""


class VirtualClock:
    def __init__(self, start: float = EPOCH) -> None:
        self._now = float(start)
        self._lock = threading.Lock()
        self._followers: list[Callable[[float], None]] = []

    def follow(self, follower: Callable[[float], None]) -> None:
        """Call ``follower(now)`` after every move (e.g. to hold the process clock in step)."""
        self._followers.append(follower)
        follower(self.now())

    def now(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> float:
        """Move time forward by ``seconds`` (>= 0) and return the new time."""
        if seconds < 0:
            raise ValueError(f"the virtual clock cannot go back (advance({seconds!r}))")
        with self._lock:
            self._now += float(seconds)
            now = self._now
        for follower in self._followers:
            follower(now)
        return now
