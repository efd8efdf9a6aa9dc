"""The process clock held to the world's virtual clock while a scenario runs (freezegun).

An in-process implementation written the ordinary way reads ``time.time()``,
``time.monotonic()``, ``time.perf_counter()``, ``datetime.now()`` or ``date.today()`` for its
timeouts and timestamps instead of the world's clock port. Without help it would need the
world to sleep for real and would give a different trace on every run.

Guarantees, for the span of one :class:`FrozenProcessClock` (one scenario run):

* every one of those readings, from any thread, equals the world's virtual time
  (``time.monotonic() == time.time() == world.now()``; ``datetime.now(timezone.utc)`` is the
  same instant), and it moves only when the world's clock moves (a slow classifier verdict,
  a hanging tool, a ``delay`` fault) — never with the wall clock;
* the harness's own wall-clock readings (hang limits, durations for reports) stay real:
  the runner waits through ``threading``'s timeouts, which freezegun leaves alone, and a
  reading made directly by a ``harness.`` module is given the real time;
* only the direct caller decides: ``time.monotonic()`` called by the implementation's code is
  virtual however shallow its stack, while blocking waits with a timeout (``queue.get``,
  ``Event.wait``, sqlite's busy timeout) stay real waits;
* asyncio's event loop keeps real time (``real_asyncio``), so an implementation's
  ``asyncio.sleep`` still ends; a real ``time.sleep`` is not virtualised either — the world's
  clock is the only thing that moves the frozen one;
* leaving the block restores the real clock even when the run raised, and the clock is only
  frozen while a scenario of an implementation that asked for it runs (``python:``
  implementations by default; ``--no-freeze-clock`` turns it off).

freezegun is the well-kept library for this (it patches ``time``, ``datetime``, ``uuid1`` and
every module that imported them); nothing here re-implements it.
"""

from __future__ import annotations

import datetime as _dt
import threading
from types import TracebackType
from typing import Any

_HARNESS_MODULES = ("harness.",)
"""Direct clock readings from these modules stay real (the harness's own timing)."""
_CALLER_FRAMES_CHECKED = 1
"""freezegun gives the real time to a reading whose caller, or any of the next few frames
up the stack, is in an ignored module. Every driver call runs under ``threading`` and the
runner (both ignored), so a shallow implementation would read the real clock; only the
direct caller decides here."""


class ProcessClockError(RuntimeError):
    """The process clock could not be frozen (freezegun missing or already in use)."""


def instant(seconds: float) -> _dt.datetime:
    """The UTC instant ``seconds`` after the Unix epoch, as freezegun takes it (naive UTC)."""
    return _dt.datetime(1970, 1, 1) + _dt.timedelta(seconds=seconds)


class FrozenProcessClock:
    """Holds ``time``/``datetime`` at the virtual clock's reading; :meth:`follow` moves it.

    One per scenario run; not re-entrant (a second one while the first is active would fight
    over the same global patch, so it is refused)."""

    _active_lock = threading.Lock()

    def __init__(self, start_s: float) -> None:
        self._start_s = float(start_s)
        self._freezer: Any = None
        self._factory: Any = None
        self._lock = threading.Lock()
        self._checked_before: int | None = None

    def __enter__(self) -> "FrozenProcessClock":
        try:
            import freezegun
        except ImportError as exc:  # a dependency of the package; only a broken install
            raise ProcessClockError(
                "freezegun is not installed, so the process clock cannot follow the world's "
                "clock; reinstall lifecycle-harness or pass --no-freeze-clock") from exc
        if not FrozenProcessClock._active_lock.acquire(blocking=False):
            raise ProcessClockError("the process clock is already frozen for another "
                                    "scenario in this process; run scenarios one at a time "
                                    "or pass --no-freeze-clock")
        import freezegun.api

        try:
            self._freezer = freezegun.freeze_time(
                instant(self._start_s), ignore=list(_HARNESS_MODULES), real_asyncio=True)
            self._checked_before = freezegun.api.call_stack_inspection_limit
            freezegun.api.call_stack_inspection_limit = _CALLER_FRAMES_CHECKED
            self._factory = self._freezer.start()
        except BaseException:
            self._restore_inspection_limit()
            FrozenProcessClock._active_lock.release()
            raise
        return self

    def _restore_inspection_limit(self) -> None:
        import freezegun.api

        if self._checked_before is not None:
            freezegun.api.call_stack_inspection_limit = self._checked_before
            self._checked_before = None

    def follow(self, now_s: float) -> None:
        """The world's clock now reads ``now_s``: move the process clock there."""
        with self._lock:
            if self._factory is not None:
                self._factory.move_to(instant(now_s))

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        with self._lock:
            factory, self._factory = self._factory, None
        try:
            if factory is not None:
                self._freezer.stop()
        finally:
            self._restore_inspection_limit()
            FrozenProcessClock._active_lock.release()
