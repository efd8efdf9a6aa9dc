"""What changed from one store reading (or model request) to the next, for folds over a trace.

Many checks fold over every row of every reading (``for point in trace.observations: for
op in point.observation.operations``) or every message of every request, keeping the first
sighting of something. A session of N calls has N readings of N rows each, and N requests
of N messages: those loops were quadratic. Successive readings share their unchanged rows
as the very same objects (an implementation hands back what it did not re-read; the
runner reuses decoded rows in process mode), as a session's requests share the messages
of its previous request.

Guarantees: :func:`new_rows` gives, for each reading in recording order, the rows of a part
past the head it shares, object for object, with the previous reading's same part (all of
them for the first reading, or when nothing is shared); :func:`new_messages` gives, for each
model request, the messages past the head it shares with the same session's previous
request. A fold whose step for a row (message) already folded at the previous reading
(request) changes nothing — a ``setdefault`` of a value read off the row, a set of keys —
gives over these exactly what it gives over every row (message) of every reading
(request). Whether the objects are shared changes only the cost, never the answer.
"""

from __future__ import annotations

from typing import Any

from harness.trace.identity_memo import by_identity
from harness.trace.record import Kind, ObservationPoint, Trace, TraceEvent
from harness.trace.sequence_delta import common_prefix


def new_rows(trace: Trace, part: str = "operations") -> tuple[tuple[ObservationPoint, Any], ...]:
    """(reading, row) for the rows of ``part`` each reading does not share with the one
    before it (see the module doc), in recording order."""
    return _new_rows_memo(part)(trace)


_MEMOS: dict[str, Any] = {}


def _new_rows_memo(part: str) -> Any:
    memo = _MEMOS.get(part)
    if memo is None:
        def compute(trace: Trace) -> tuple[tuple[ObservationPoint, Any], ...]:
            found: list[tuple[ObservationPoint, Any]] = []
            before: Any = ()
            for point in trace.observations:
                rows = getattr(point.observation, part)
                if rows is before:
                    continue
                kept = common_prefix(before, rows) if isinstance(rows, (tuple, list)) \
                    and isinstance(before, (tuple, list)) else 0
                found += [(point, row) for row in rows[kept:]]
                before = rows
            return tuple(found)

        compute.__name__ = f"new_rows_{part}"
        memo = _MEMOS[part] = by_identity(2)(compute)
    return memo


@by_identity(2)
def new_messages(trace: Trace) -> tuple[tuple[TraceEvent, int, Any], ...]:
    """(request, position, message) for the messages each model request does not share
    with its session's previous request (see the module doc), in trace order."""
    found: list[tuple[TraceEvent, int, Any]] = []
    latest: dict[str, Any] = {}
    for event in trace.of_kind(Kind.MODEL_REQUEST):
        messages = event.data.get("messages", [])
        session = repr(event.data.get("session_id", ""))
        before = latest.get(session)
        kept = 0
        if type(messages) is list:
            if before is not None and len(before) <= len(messages) \
                    and common_prefix(before, messages) == len(before):
                kept = len(before)
            latest[session] = messages
        found += [(event, at, messages[at]) for at in range(kept, len(messages))]
    return tuple(found)
