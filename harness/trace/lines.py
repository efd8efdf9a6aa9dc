"""Render trace events as one human-readable line each, and excerpts around an index.

Guarantees: pure functions of the trace (no wall clock, no I/O); the same event always
renders to the same line; a line never contains a newline, so excerpts stay one event a
line in every report format. Used by the suite (violation excerpts) and ``replay``.
"""

from __future__ import annotations

from typing import Iterable

from harness.contract import canonical_json
from harness.trace.record import Trace, TraceEvent

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


CITED_RADIUS = 2
"""Events shown before and after each cited event by :func:`cited_excerpt`."""

CITED_LINES_MAX = 200
"""At most this many lines in a :func:`cited_excerpt` (cited events are kept first)."""


def cited_excerpt(
    trace: Trace,
    indexes: Iterable[int],
    radius: int = CITED_RADIUS,
    width: int | None = DEFAULT_WIDTH,
    lines_max: int = CITED_LINES_MAX,
) -> tuple[str, ...]:
    """Every cited event with ``radius`` events of context around each (cited lines marked
    ``>``), overlapping windows merged, each gap shown as one ``   ⋮ N events`` line.

    When the windows would exceed ``lines_max`` lines the context shrinks, then only the
    cited events remain (they are never dropped below ``lines_max``). Returns ``()`` when no
    index names an event of the trace.
    """
    positions = {event.index: pos for pos, event in enumerate(trace.events)}
    cited = sorted({positions[i] for i in indexes if i in positions})
    if not cited:
        return ()
    marked = {trace.events[pos].index for pos in cited}
    for around in range(max(radius, 0), -1, -1):
        shown = sorted({p for c in cited for p in range(c - around, c + around + 1)
                        if 0 <= p < len(trace.events)})
        if len(shown) <= lines_max or around == 0:
            break
    lines: list[str] = []
    previous = -1
    for pos in shown[:lines_max]:
        if previous >= 0 and pos > previous + 1:
            lines.append(_gap(pos - previous - 1))
        elif previous < 0 and pos > 0:
            lines.append(_gap(pos))
        event = trace.events[pos]
        lines.append(render_event(event, width, ">" if event.index in marked else " "))
        previous = pos
    if len(shown) > lines_max:
        lines.append(f"   ⋮ {len(shown) - lines_max} more cited events")
    elif previous < len(trace.events) - 1:
        lines.append(_gap(len(trace.events) - 1 - previous))
    return tuple(lines)


def _gap(events: int) -> str:
    return f"   ⋮ {events} event{'' if events == 1 else 's'}"
