"""Render trace events as one human-readable line each, and excerpts around an index.

Guarantees: pure functions of the trace (no wall clock, no I/O); the same event always
renders to the same line; a line never contains a newline, so excerpts stay one event a
line in every report format. Used by the suite (violation excerpts) and ``replay``.
"""

from __future__ import annotations

from typing import Iterable

from harness.contract import canonical_json
from harness.trace import Trace, TraceEvent

DEFAULT_WIDTH = 200
"""Longest compact data kept on one line; longer data ends with an ellipsis."""

EXCERPT_RADIUS = 3
"""Events shown before and after the first evidence index."""


def compact(data: object, width: int | None = DEFAULT_WIDTH) -> str:
    """Canonical JSON of ``data`` on one line, cut to ``width`` characters (None: never)."""
    try:
        text = canonical_json(data)
    except (TypeError, ValueError):
        text = repr(data)
    text = text.replace("\n", "\\n").replace("\r", "\\r")
    if width is not None and len(text) > width:
        return text[: max(width - 1, 0)] + "…"
    return text


def render_event(event: TraceEvent, width: int | None = DEFAULT_WIDTH, marker: str = " ") -> str:
    """``<marker> <index> <source> <kind> [i<instance>] <compact data>`` on one line."""
    instance = f" i{event.instance}" if event.instance else ""
    return (
        f"{marker}{event.index:>5} {event.source:<7} {event.kind:<20}{instance} "
        f"{compact(event.data, width)}"
    ).rstrip()


def render_trace(trace: Trace, width: int | None = DEFAULT_WIDTH) -> tuple[str, ...]:
    """Every event of the trace, one line each, in trace order."""
    return tuple(render_event(event, width) for event in trace.events)


def excerpt(
    trace: Trace,
    indexes: Iterable[int],
    radius: int = EXCERPT_RADIUS,
    width: int | None = DEFAULT_WIDTH,
) -> tuple[str, ...]:
    """A few lines around the first of ``indexes`` (evidence lines marked with ``>``).

    Returns ``()`` when ``indexes`` is empty or names no event of the trace.
    """
    wanted = [i for i in indexes]
    if not wanted:
        return ()
    marked = set(wanted)
    positions = {event.index: pos for pos, event in enumerate(trace.events)}
    first = wanted[0]
    if first not in positions:
        known = [i for i in wanted if i in positions]
        if not known:
            return ()
        first = known[0]
    centre = positions[first]
    start = max(centre - radius, 0)
    stop = min(centre + radius + 1, len(trace.events))
    return tuple(
        render_event(event, width, ">" if event.index in marked else " ")
        for event in trace.events[start:stop]
    )
