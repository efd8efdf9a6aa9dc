"""Where every assistant message the model is sent comes from, judged from the world alone.

The world records each model request with the whole conversation it carried
(``MODEL_REQUEST.messages``) and, per request, what it served (``MODEL_STREAM_END``: how the
stream ended, the text, the tool calls). An implementation may hold an assistant message in
its conversation for three reasons only, and this module finds, for each assistant message
of each request, which one applies:

* **answered**: the world served exactly this message (its tool calls, and its text but for
  surrounding whitespace or, beside calls, left out) as the complete answer (stream ended
  ``end``) to an earlier request of the session whose messages are exactly the messages
  before it: the answer joined the conversation it was asked from;
* **partial**: the message is marked ``incomplete``, its text is the text the world served
  to such a request (any ending) and its tool calls, if any, are ones served to it (M5 keeps
  an EOF's partial text, marked so);
* **imported**: a checkpoint was loaded into the session (L1.6) before the request, and the
  message sits where the first request after that load carried it (same messages up to and
  including it), and is one of the fixture's messages when the harness knows them (the
  harness's own reading of the bytes, else the fixture's sidecar).

Anything else is **unsourced**: the model is shown, as its own earlier answer, something it
never said after that conversation. The case that matters is an answer that came back after
another instance moved the conversation on, appended to the new conversation (an answer to
a conversation that is gone); an invented, edited or reordered history shows the same way.

Guarantees: pure over the trace, linear in the messages the requests carried (each prefix
is compared by a running digest, never re-encoded); requests are grouped by session; only
a stream end recorded before a request can have supplied an answer it carries.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from harness.contract import canonical_json
from harness.trace.identity_memo import by_identity
from harness.trace.sequence_delta import common_prefix
from harness.trace.record import Kind, Trace, TraceEvent


@dataclass(frozen=True, slots=True)
class ServedAnswer:
    """What the world served to one request."""

    request: TraceEvent
    end: TraceEvent
    """The request's ``MODEL_STREAM_END``."""
    how: str
    text: str
    tool_calls: tuple[Any, ...]
    """The served calls as ToolCall JSON, or their ids alone when the trace kept only ids."""


@dataclass(frozen=True, slots=True)
class Unsourced:
    """An assistant message a request carried that nothing legitimate accounts for."""

    request: TraceEvent
    position: int
    """0-based position of the message in ``request``'s messages."""
    message: dict[str, Any]
    served_elsewhere: tuple[ServedAnswer, ...]
    """Requests the world served this very answer to (other conversations): the evidence of
    a stale answer; empty when the world never served it at all."""


@dataclass(frozen=True, slots=True)
class Provenance:
    unsourced: tuple[Unsourced, ...]
    moved_on: tuple[tuple[ServedAnswer, TraceEvent], ...]
    """Completed answers the session's conversation moved on without: the session's next
    request after the answer was served does not carry it right after the conversation it
    answered (another instance raced it, or a crash lost it), with that request. This is where an
    implementation would append a stale answer: the rule's hard case."""


@dataclass(frozen=True, slots=True)
class _Request:
    event: TraceEvent
    session_id: str
    messages: tuple[dict[str, Any], ...]
    prefixes: tuple[bytes, ...]
    """prefixes[i] is the digest of messages[:i] (len(messages) + 1 entries)."""


@by_identity(2)  # provenance and imported_lengths read the same requests of a trace
def _requests(trace: Trace) -> tuple[_Request, ...]:
    """Every model request, with its messages and their prefix digests. A request that
    carries the very message objects of its session's previous one, and more, takes that
    one's messages and digests and goes on from where they end (the same values as
    computed afresh: a session's conversation repeats itself in every request)."""
    requests = []
    latest: dict[str, tuple[list[Any], _Request, Any]] = {}
    for event in trace.of_kind(Kind.MODEL_REQUEST):
        session_id = str(event.data.get("session_id", ""))
        sent = event.data.get("messages") or ()
        before = latest.get(session_id)
        if type(sent) is list and before is not None and len(before[0]) <= len(sent) \
                and common_prefix(before[0], sent) == len(before[0]):
            added = tuple(m for m in sent[len(before[0]):] if isinstance(m, dict))
            running = before[2].copy()
            digests = list(before[1].prefixes)
            for message in added:
                running.update(canonical_json(message).encode())
                digests.append(running.digest())
            request = _Request(event, session_id, before[1].messages + added, tuple(digests))
        else:
            messages = tuple(m for m in sent if isinstance(m, dict))
            running = hashlib.blake2b(digest_size=16)
            digests = [running.digest()]
            for message in messages:
                running.update(canonical_json(message).encode())
                digests.append(running.digest())
            request = _Request(event, session_id, messages, tuple(digests))
        if type(sent) is list:
            latest[session_id] = (sent, request, running)
        requests.append(request)
    return tuple(requests)


def _text(message: dict[str, Any]) -> str:
    return str(message.get("content") or "").strip()


def _calls_of(message: dict[str, Any]) -> list[Any]:
    return list(message.get("tool_calls") or ())


def _call_id(call: Any) -> Any:
    return call.get("tool_call_id") if isinstance(call, dict) else call


def _served(end: TraceEvent, request: TraceEvent) -> ServedAnswer:
    calls = end.data.get("tool_calls")
    if not isinstance(calls, list):  # an older trace kept only the ids
        calls = list(end.data.get("tool_call_ids") or ())
    return ServedAnswer(request, end, str(end.data.get("how", "")), str(end.data.get("text", "")),
                        tuple(calls))


def _same_calls(carried: list[Any], served: tuple[Any, ...]) -> bool:
    if len(carried) != len(served):
        return False
    return all(c == s if isinstance(s, dict) else _call_id(c) == s
               for c, s in zip(carried, served))


def answers(message: dict[str, Any], served: ServedAnswer) -> bool:
    """Is ``message`` the world's ``served`` reply as a conversation may hold it: the
    complete answer of a normally ended stream, or its text marked incomplete (with none or
    some of its calls)? The text is compared without surrounding whitespace (trimming the
    model's text changes nothing it said), and a complete answer with calls may leave its
    text out: its calls (ids, tools, args) already say which answer it is."""
    if message.get("role") != "assistant":
        return False
    carried = _calls_of(message)
    text = _text(message)
    if text != served.text.strip() and (text or not carried or message.get("incomplete")):
        return False
    if message.get("incomplete"):
        ids = [_call_id(c) for c in served.tool_calls]
        return [_call_id(c) for c in carried] == ids[:len(carried)]
    return served.how == "end" and _same_calls(carried, served.tool_calls)


def _first_call_id(message: dict[str, Any]) -> str | None:
    calls = _calls_of(message)
    return str(_call_id(calls[0])) if calls else None


def _same_answer(message: dict[str, Any], served: ServedAnswer) -> bool:
    """``message`` is ``served`` as a conversation may hold it, or its complete form with
    its incomplete flag wrong: evidence of where it came from, whatever else is wrong."""
    return answers(message, served) or answers({**message, "incomplete": False}, served)


def _fixture_messages(call: TraceEvent) -> list[dict[str, Any]] | None:
    args = call.data.get("args") if isinstance(call.data.get("args"), dict) else {}
    content = args.get("fixture_content")
    messages = content.get("messages") if isinstance(content, dict) else args.get("expected_messages")
    if not isinstance(messages, list) or not messages:
        return None
    return [m for m in messages if isinstance(m, dict)]


def _fixture_holds(fixture: list[dict[str, Any]], message: dict[str, Any]) -> bool:
    """The fixture has this message: the fields the fixture gives (role, text, call ids) agree
    (an old format may give fewer fields than the implementation's rendering of them)."""
    for held in fixture:
        if held.get("role") not in (None, "", message.get("role")):
            continue
        if held.get("content") not in (None, "") and held.get("content") != message.get("content"):
            continue
        wanted = [_call_id(c) for c in held.get("tool_calls") or ()]
        if wanted and wanted != [_call_id(c) for c in _calls_of(message)]:
            continue
        return True
    return False


@dataclass(frozen=True, slots=True)
class _Load:
    call: TraceEvent
    first_request: _Request | None
    fixture: list[dict[str, Any]] | None


def _loads_by_session(trace: Trace, requests: list[_Request]) -> dict[str, list[_Load]]:
    loads: dict[str, list[_Load]] = {}
    for call in trace.of_kind(Kind.DRIVER_CALL):
        if call.data.get("method") != "load_checkpoint" or call.data.get("skipped"):
            continue
        args = call.data.get("args") if isinstance(call.data.get("args"), dict) else {}
        session_id = str(args.get("session_id", ""))
        first = next((r for r in requests
                      if r.session_id == session_id and r.event.index > call.index), None)
        loads.setdefault(session_id, []).append(_Load(call, first, _fixture_messages(call)))
    return loads


def _imported(loads: list[_Load], request: _Request, position: int) -> bool:
    load = next((ld for ld in reversed(loads) if ld.call.index < request.event.index), None)
    if load is None or load.first_request is None:
        return False
    first = load.first_request
    if position >= len(first.messages) or first.prefixes[position + 1] != request.prefixes[position + 1]:
        return False
    return load.fixture is None or _fixture_holds(load.fixture, request.messages[position])


@by_identity(4)
def provenance(trace: Trace) -> Provenance:
    ends: dict[str, TraceEvent] = {}
    for end in trace.of_kind(Kind.MODEL_STREAM_END):
        ends.setdefault(str(end.data.get("request_id", "")), end)
    requests = list(_requests(trace))
    loads = _loads_by_session(trace, requests)
    # (session, digest of the conversation a request carried) -> what the world served it
    served_to: dict[tuple[str, bytes], list[ServedAnswer]] = {}
    # answers by text and by first call id, to name where a misplaced answer was served
    served_like: dict[tuple[str, str, str | None], list[ServedAnswer]] = {}
    pending: list[tuple[_Request, ServedAnswer]] = []  # served, not yet usable (ends later)
    unsourced: list[Unsourced] = []
    # Per session, the latest request's messages and how many of them lead with only
    # answers found among what the world served for their conversation (or no answer): a
    # request carrying those very messages finds them so again (what was served is only
    # added to, and the same messages have the same conversation before them), so it walks
    # on from the first one that was not.
    sourced_upto: dict[str, tuple[tuple[dict[str, Any], ...], int]] = {}
    for request in requests:
        still = []
        for asked, answer in pending:
            if answer.end.index < request.event.index:
                served_to.setdefault((asked.session_id, asked.prefixes[-1]), []).append(answer)
                served_like.setdefault((asked.session_id, "text", answer.text.strip()), []).append(answer)
                if answer.tool_calls:
                    served_like.setdefault((asked.session_id, "calls", str(_call_id(answer.tool_calls[0]))),
                                           []).append(answer)
            else:
                still.append((asked, answer))
        pending = still
        start, first_unsourced = 0, None
        before = sourced_upto.get(request.session_id)
        if before is not None and len(before[0]) <= len(request.messages) \
                and common_prefix(before[0], request.messages) == len(before[0]):
            start = before[1]
        for position in range(start, len(request.messages)):
            message = request.messages[position]
            if message.get("role") != "assistant":
                continue
            candidates = served_to.get((request.session_id, request.prefixes[position]), ())
            if any(answers(message, answer) for answer in candidates):
                continue
            if first_unsourced is None:
                first_unsourced = position
            if _imported(loads.get(request.session_id, []), request, position):
                continue
            elsewhere = tuple({id(a): a for key in ((request.session_id, "text", _text(message)),
                                                    (request.session_id, "calls", _first_call_id(message)))
                               for a in served_like.get(key, ()) if _same_answer(message, a)}.values())
            unsourced.append(Unsourced(request.event, position, message, elsewhere))
        sourced_upto[request.session_id] = (
            request.messages, len(request.messages) if first_unsourced is None else first_unsourced)
        end = ends.get(str(request.event.data.get("request_id", "")))
        if end is not None:
            pending.append((request, _served(end, request.event)))
    return Provenance(tuple(unsourced), _moved_on(requests, ends))


def _moved_on(requests: list[_Request], ends: dict[str, TraceEvent]
              ) -> tuple[tuple[ServedAnswer, TraceEvent], ...]:
    found = []
    for at, asked in enumerate(requests):
        end = ends.get(str(asked.event.data.get("request_id", "")))
        if end is None or end.data.get("how") != "end":
            continue
        answer = _served(end, asked.event)
        size = len(asked.messages)
        for later in requests[at + 1:]:
            if later.session_id != asked.session_id or later.event.index < end.index:
                continue
            carried = (len(later.messages) > size
                       and later.prefixes[size] == asked.prefixes[size]
                       and answers(later.messages[size], answer))
            if not carried:
                found.append((answer, later.event))
            break  # the session's next request says whether its conversation went on from it
    return tuple(found)


@by_identity(4)
def imported_lengths(trace: Trace) -> dict[int, int]:
    """Per MODEL_REQUEST index, how many of its leading messages are history loaded from a
    checkpoint: the prefix it shares with the first request of its session after the latest
    load before it (0 for a session no checkpoint was loaded into)."""
    requests = list(_requests(trace))
    loads = _loads_by_session(trace, requests)
    lengths = {}
    for request in requests:
        load = next((ld for ld in reversed(loads.get(request.session_id, []))
                     if ld.call.index < request.event.index), None)
        shared = 0
        if load is not None and load.first_request is not None:
            first = load.first_request
            limit = min(len(first.messages), len(request.messages))
            while shared < limit and first.prefixes[shared + 1] == request.prefixes[shared + 1]:
                shared += 1
        lengths[request.event.index] = shared
    return lengths


def describe(item: Unsourced) -> str:
    """One line for the evidence: which message, and where the world did serve it."""
    message = item.message
    calls = [_call_id(c) for c in _calls_of(message)]
    what = (f"assistant message #{item.position}"
            + (f" with calls {calls}" if calls else f" {str(message.get('content') or '')[:40]!r}")
            + (" (marked incomplete)" if message.get("incomplete") else ""))
    rid = item.request.data.get("request_id")
    if item.served_elsewhere:
        other = item.served_elsewhere[0]
        return (f"request {rid} carries {what}, which the world served to request "
                f"{other.request.data.get('request_id')} asked from another conversation "
                f"({len(other.request.data.get('messages') or ())} messages, not the "
                f"{item.position} before it here): an answer to a conversation that is gone")
    return (f"request {rid} carries {what} that the world never served as the answer to the "
            f"conversation before it (nor did an imported checkpoint hold it there)")
