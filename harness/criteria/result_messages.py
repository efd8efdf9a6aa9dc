"""Each tool message the model is sent is the one result of a call the conversation holds.

Judged from the world's model requests alone (``MODEL_REQUEST.messages``): in every request,
a ``tool`` message must answer a call of an assistant message before it in that request,
and no call may be answered twice after the message that emitted it (a call the model
delivered again, in a later answer, is answered again after it). A second result of one
call (a result folded again, e.g. by a recovery that does not see it was already folded)
tells the model the call returned twice; a result for a call the conversation does not
hold answers nothing the model asked. History loaded from a checkpoint (the prefix a
request shares with the first request after the load,
:func:`answer_provenance.imported_lengths`) is L1.6's to judge: its results are only
remembered here, so that one answered again after it is still a second result.

Guarantees: pure over the trace, linear in the messages the requests carried; each
problem is reported once per (session, call, kind), at the first request that shows it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.criteria import answer_provenance as P
from harness.trace.identity_memo import by_identity
from harness.trace.record import Kind, Trace, TraceEvent
from harness.trace.sequence_delta import common_prefix

DUPLICATE = "answered twice"
ORPHAN = "answers no call before it"


@dataclass(frozen=True, slots=True)
class Misplaced:
    request: TraceEvent
    position: int
    tool_call_id: str
    problem: str
    """:data:`DUPLICATE` or :data:`ORPHAN`."""
    first_position: int | None = None
    """For a duplicate: the position of the call's first tool message in the request."""

    def describe(self) -> str:
        rid = self.request.data.get("request_id")
        if self.problem == DUPLICATE:
            return (f"request {rid} carries two tool messages for call {self.tool_call_id!r} "
                    f"(#{self.first_position} and #{self.position}): one call, one result")
        return (f"request {rid} carries a tool message #{self.position} for call "
                f"{self.tool_call_id!r}, which no assistant message before it emitted")


@by_identity(4)
def misplaced_results(trace: Trace) -> tuple[Misplaced, ...]:
    imported = P.imported_lengths(trace)
    found: list[Misplaced] = []
    reported: set[tuple[str, str, str]] = set()
    # Per session, the latest request's messages, history and the walk's state at their
    # end: a request carrying the very message objects of its session's previous one (and
    # the same imported history) walks on from there, since walking them again would find
    # the same state and only problems already reported for this session.
    latest: dict[str, tuple[list[Any], int, dict[str, int], dict[str, int]]] = {}
    for request in trace.of_kind(Kind.MODEL_REQUEST):
        session_id = str(request.data.get("session_id", ""))
        history = imported.get(request.index, 0)
        emitted: dict[str, int] = {}  # call id -> position of the latest message emitting it
        answered: dict[str, int] = {}  # call id -> position of its result since then
        sent = request.data.get("messages") or ()
        if type(sent) is not list:
            sent = list(sent)  # walked the same; not kept (a copy is never shared)
            kept_for_next = False
        else:
            kept_for_next = True
        start = 0
        before = latest.get(session_id)
        if kept_for_next and before is not None and before[1] == history \
                and len(before[0]) <= len(sent) and common_prefix(before[0], sent) == len(before[0]):
            # taken over: the previous request's walk is not needed again
            start, emitted, answered = len(before[0]), before[2], before[3]
        for position in range(start, len(sent)):
            message = sent[position]
            if not isinstance(message, dict):
                continue
            role = message.get("role")
            if role == "assistant":
                for call in message.get("tool_calls") or ():
                    if isinstance(call, dict):
                        # a call delivered again (a duplicate delivery) is answered again
                        emitted[str(call.get("tool_call_id", ""))] = position
                        answered.pop(str(call.get("tool_call_id", "")), None)
                continue
            if role != "tool":
                continue
            call_id = str(message.get("tool_call_id", ""))
            if position < history:
                answered.setdefault(call_id, position)
                continue
            problem = None
            if call_id in answered:
                problem = DUPLICATE
            elif call_id not in emitted:
                problem = ORPHAN
            else:
                answered[call_id] = position
            if problem is not None and (session_id, call_id, problem) not in reported:
                reported.add((session_id, call_id, problem))
                found.append(Misplaced(request, position, call_id, problem, answered.get(call_id)))
        if kept_for_next:
            latest[session_id] = (sent, history, emitted, answered)
        else:
            latest.pop(session_id, None)
    return tuple(found)
