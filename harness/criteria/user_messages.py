"""Whether the model is told what the user said, judged from the world alone.

The harness is the user: every ``run_turn``/``concurrent_turn`` driver call carries the
user's text, and the world records every model request with the whole conversation it
carried. Two things must hold of each session without a loaded checkpoint (a checkpoint's
history is L1.6's to judge):

* **told**: the first model request of the session inside a turn call carries that call's
  text as its last user message, as given (a turn that reaches the model without the
  user's words answers a question nobody asked);
* **not invented**: every user message a request carries is the text of a turn call of its
  session made before the request, no more often than such calls were made (the two
  instances of a concurrent turn each send the text once).

Guarantees: pure over the trace; only the user's own texts are compared, exactly (the
contract: ``Message("user", user_text)``); a turn call that never reached the model (a
deferral, a cancellation, a crash before the request) is not judged.
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass

from harness.criteria.trace_readings import driver_spans
from harness.trace.identity_memo import by_identity
from harness.trace.record import Kind, Trace, TraceEvent

TURN_METHODS = ("run_turn", "concurrent_turn")


@dataclass(frozen=True, slots=True)
class Finding:
    request: TraceEvent
    call_index: int | None
    """The turn call whose text is missing (``None`` for an invented message)."""
    note: str


@dataclass(frozen=True, slots=True)
class Reading:
    told: int
    """Turn calls whose first model request was judged."""
    findings: tuple[Finding, ...]


@by_identity(2)
def read(trace: Trace) -> Reading:
    loaded = {str((e.data.get("args") or {}).get("session_id", "")) for e in trace.of_kind(Kind.DRIVER_CALL)
              if e.data.get("method") == "load_checkpoint" and not e.data.get("skipped")}
    spans = {span.index: span for span in driver_spans(trace)}
    turns: list[tuple[TraceEvent, str, str]] = []
    for call in trace.of_kind(Kind.DRIVER_CALL):
        args = call.data.get("args") or {}
        if call.data.get("method") in TURN_METHODS and not call.data.get("skipped") \
                and "user_text" in args:
            turns.append((call, str(args.get("session_id", "")), str(args["user_text"])))
    requests: dict[str, list[TraceEvent]] = {}  # per session, ascending
    for request in trace.of_kind(Kind.MODEL_REQUEST):
        session = str(request.data.get("session_id", ""))
        if session not in loaded:
            requests.setdefault(session, []).append(request)
    told, findings = 0, []
    for call, session, text in turns:
        mine = requests.get(session, [])
        span = spans.get(call.index)
        end = span.end_index if span is not None and span.end_index is not None else len(trace.events)
        position = bisect.bisect_right(mine, call.index, key=lambda r: r.index)
        if session in loaded or position == len(mine) or mine[position].index >= end:
            continue
        first = mine[position]
        told += 1
        users = [m for m in first.data.get("messages") or () if m.get("role") == "user"]
        last = str(users[-1].get("content", "")) if users else None
        if last != text:
            findings.append(Finding(first, call.index, (
                f"request {first.data.get('request_id')} of {session} is the first of the turn "
                f"that said {text[:60]!r}, yet its last user message is "
                f"{'missing' if last is None else repr(last[:60])}: the model is not told what "
                "the user said")))
    said_by_session: dict[str, list[tuple[int, str]]] = {}
    for call, session, text in turns:
        said_by_session.setdefault(session, []).append((call.index, text))
    for session, session_requests in requests.items():
        spoken = said_by_session.get(session)
        if not spoken:
            continue  # a trace without the harness's turn calls (hand-built) says nothing here
        said: Counter[str] = Counter()
        next_said = 0
        for request in session_requests:  # the texts said so far, kept as the requests go by
            while next_said < len(spoken) and spoken[next_said][0] < request.index:
                said[spoken[next_said][1]] += 1
                next_said += 1
            carried = Counter(str(m.get("content", "")) for m in request.data.get("messages") or ()
                              if m.get("role") == "user")
            for content, count in carried.items():
                if count > said.get(content, 0):
                    findings.append(Finding(request, None, (
                        f"request {request.data.get('request_id')} of {session} carries the user "
                        f"message {content[:60]!r} {count} time(s), the user said it "
                        f"{said.get(content, 0)} time(s) in this session: a user message the user "
                        "never sent")))
    return Reading(told, tuple(findings))
