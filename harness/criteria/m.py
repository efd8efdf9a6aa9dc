"""Stage M: model request events (start/end, status, propagation, no replays, partial text).

Pure checks over a Trace. The world's ``MODEL_REQUEST`` and ``MODEL_STREAM_END`` events say
which requests were really sent and how each stream really ended; the implementation's
``model_request_started`` / ``model_request_ended`` / ``turn_ended`` lifecycle events, the
driver's returns and raises, and the store's ``model_requests`` are judged against them.
"""

from __future__ import annotations

from harness.contract import Feature, ModelRequestStatus, TurnStatus
from harness.criteria import answer_provenance as P
from harness.criteria import trace_readings as s
from harness.criteria import unfinished_stream_calls, user_messages
from harness.criteria.base import Criterion, Verdict, judge
from harness.trace.record import Trace, TraceEvent

END_STATUS = {
    "end": ModelRequestStatus.COMPLETED,
    "eof": ModelRequestStatus.INCOMPLETE,
    "transport_error": ModelRequestStatus.FAILED,
    "cancelled": ModelRequestStatus.CANCELLED,
}
RAISES = {"transport_error": "ModelTransportError", "cancelled": "ModelStreamCancelled"}
NOT_ANSWERED = ("eof", "transport_error", "cancelled")


def _events_by_request(trace: Trace, type_: str) -> dict[str, list[TraceEvent]]:
    out: dict[str, list[TraceEvent]] = {}
    for event, payload in s.lifecycle_of(trace, type_):
        out.setdefault(str(payload.get("request_id", "")), []).append(event)
    return out


def _interruption(trace: Trace, start: int, ends: list[TraceEvent]) -> s.Interruption | None:
    """The crash (or escaped injected exception) that cut the request off before any end
    was recorded, if one did."""
    first_end = min((e.index for e in ends), default=None)
    return s.first_interruption(trace, start, first_end)


def _lost_in_crash(trace: Trace, stream: TraceEvent, ends: list[TraceEvent]) -> bool:
    """Cut off between the stream's end and its recorded end: the reply never reached the
    store (recovery may only close the request, without its text)."""
    first_end = min((e.index for e in ends), default=None)
    return s.interrupted_between(trace, stream.index, first_end)


def _views(trace: Trace):
    final = s.final_point(trace)
    if final is None or not trace.completed:
        return None, {}
    return final, {v.request_id: v for v in final.observation.model_requests}


# --------------------------------------------------------------------------- M1


def _ended_abnormally(trace: Trace) -> set[str]:
    """Request ids whose stream ended otherwise than normally (EOF, transport error,
    cancellation) or was never ended by the world (cut off by a crash or injected fault)."""
    ended = {str(e.data.get("request_id", "")): str(e.data.get("how", "")) for e in s.stream_ends(trace)}
    return {str(r.data.get("request_id", "")) for r in s.model_requests(trace)
            if ended.get(str(r.data.get("request_id", "")), "") != "end"}


def check_m1(trace: Trace) -> Verdict:
    """Exercised per model request the world received whose stream did not end normally
    (EOF, transport error, cancellation, no end at all) or that a crash or injected fault cut
    off before its end was recorded: that is where a second end event or a missing one appears. Every request is judged: a reused
    request id, other than one start event, more than one end event, or no end although
    nothing cut the request off fail, in the realtime channel and in the final store. A
    request cut off is excused its missing end only while no recovery followed: once a
    ``recover()`` returned after the interruption, the recovered implementation must have
    recorded the end (event and store) by the end of the run."""
    starts = _events_by_request(trace, "model_request_started")
    ends = _events_by_request(trace, "model_request_ended")
    final, views = _views(trace)
    hard = _ended_abnormally(trace)
    exercised, violations = 0, []
    seen: dict[str, int] = {}
    for request in s.model_requests(trace):
        rid = str(request.data.get("request_id", ""))
        if rid in seen:
            violations.append(s.ev(f"request id {rid} was sent twice", seen[rid], request.index))
            continue
        seen[rid] = request.index
        mine_starts, mine_ends = starts.get(rid, []), ends.get(rid, [])
        interruption = _interruption(trace, request.index, mine_ends)
        exercised += rid in hard or interruption is not None
        # A recover() that returned after the cut owes the request its one end (a request a
        # crashed instance left behind ends incomplete); only a cut nobody recovered excuses it.
        recovery = (s.recovery_after(trace, interruption.index) if interruption is not None
                    else None)
        cut = interruption is not None and recovery is None
        if len(mine_starts) != 1:
            violations.append(s.ev(f"request {rid} has {len(mine_starts)} start events", request.index,
                                   *(e.index for e in mine_starts)))
        recovered = ("" if recovery is None else
                     f" (cut off, then recovered at event {recovery.index}, which had to end it)")
        if len(mine_ends) > 1 or (not mine_ends and not cut):
            violations.append(s.ev(f"request {rid} has {len(mine_ends)} end events{recovered}",
                                   request.index, *(e.index for e in mine_ends),
                                   recovery.index if recovery is not None else None))
        view = views.get(rid)
        if view is not None and final is not None:
            if view.start_events != 1 or view.end_events > 1 or (view.end_events == 0 and not cut):
                violations.append(s.ev(f"the store records {view.start_events} start and {view.end_events} end "
                                       f"events for request {rid}{recovered}", request.index, final.index))
    for rid, events in starts.items():
        if rid not in seen and len(events) > 1:
            violations.append(s.ev(f"request {rid} was started {len(events)} times", *(e.index for e in events)))
    return judge("M1", exercised, violations, "no model request that ended otherwise than normally")


# --------------------------------------------------------------------------- M2


def check_m2(trace: Trace) -> Verdict:
    """Exercised per stream that ended by EOF, transport error or cancellation, or whose
    response a crash lost before its end was recorded, and whose end the implementation
    recorded (event or store). Every stream with a recorded end is
    judged: the recorded status must be the one its ending implies (completed, incomplete,
    failed, cancelled); a crash between the stream's end and its recorded end allows only
    incomplete or failed."""
    ends = _events_by_request(trace, "model_request_ended")
    final, views = _views(trace)
    exercised, violations = 0, []
    for stream in s.stream_ends(trace):
        rid = str(stream.data.get("request_id", ""))
        how = str(stream.data.get("how", ""))
        wanted = END_STATUS.get(how)
        if wanted is None:
            continue
        mine = ends.get(rid, [])
        view = views.get(rid)
        if not mine and (view is None or view.status is None):
            continue
        lost = _lost_in_crash(trace, stream, mine)
        exercised += how in NOT_ANSWERED or lost
        # a crash between the stream's end and its recorded end lost the response: recovery
        # may only close the request as incomplete (or failed), never as something else
        allowed = {wanted.value}
        if lost:
            allowed |= {ModelRequestStatus.INCOMPLETE.value, ModelRequestStatus.FAILED.value}
        for event in mine:
            status = ((event.data.get("event") or {}).get("data") or {}).get("status")
            if status not in allowed:
                violations.append(s.ev(f"stream of request {rid} ended by {how}, its end event says {status}, "
                                       f"expected {wanted.value}", stream.index, event.index))
        if view is not None and view.status is not None and view.status.value not in allowed and final is not None:
            violations.append(s.ev(f"stream of request {rid} ended by {how}, the store says {view.status.value}, "
                                   f"expected {wanted.value}", stream.index, final.index))
    return judge("M2", exercised, violations, "no EOF, transport error or cancelled stream with a recorded end")


# --------------------------------------------------------------------------- M3


def check_m3(trace: Trace) -> Verdict:
    """Exercised per transport error or cancellation of a model stream inside a turn driver
    call that then returned or raised, with no injected fault cutting it short in between.
    Fails when the call returned normally or raised another exception."""
    spans = s.driver_spans(trace)
    exercised, violations = 0, []
    for stream in s.stream_ends(trace):
        how = str(stream.data.get("how", ""))
        if how not in RAISES:
            continue
        span = s.innermost_span(spans, stream.index, s.TURN_METHODS)
        if span is None or span.end_kind not in ("return", "raised"):
            continue
        if s.interrupted_between(trace, stream.index, span.end_index):
            continue  # an injected fault, not the stream's error, ended the call
        exercised += 1
        if span.end_kind == "return":
            violations.append(s.ev(f"the {how} of request {stream.data.get('request_id')} was swallowed: "
                                   f"{span.method} returned normally", stream.index, span.end_index or span.index))
        elif span.end_data.get("exception") != RAISES[how]:
            violations.append(s.ev(f"the {how} of request {stream.data.get('request_id')} surfaced as "
                                   f"{span.end_data.get('exception')}, expected {RAISES[how]}",
                                   stream.index, span.end_index or span.index))
    return judge("M3", exercised, violations, "no transport error or cancelled stream inside a driver call")


# --------------------------------------------------------------------------- M4


def check_m4(trace: Trace) -> Verdict:
    """Exercised where a replay or an added retry would show: per stream ended by EOF,
    transport error or cancellation inside a turn driver call that then ended (the call
    must send no further request after it), and per legitimate tool retry (a ledger row
    following a transient failure of the same identity: recording must add no execution).
    Every request is judged: the world receiving the same conversation twice from one
    instance with no crash between fails, as does any unjustified re-execution without a crash."""
    spans = s.driver_spans(trace)
    requests = s.model_requests(trace)
    exercised, violations = 0, []
    earlier: dict[tuple[str, str], list[TraceEvent]] = {}
    for request in requests:
        key = (str(request.data.get("session_id", "")), s.messages_key(request))
        for before in earlier.get(key, []):
            if s.request_instance(before) == s.request_instance(request) and not s.crash_between(
                    trace, before.index, request.index):
                violations.append(s.ev("the world received the same model request twice (a replay or retry)",
                                       before.index, request.index))
                break
        earlier.setdefault(key, []).append(request)
    sessions = s.request_sessions(trace)
    for stream in s.stream_ends(trace):
        if stream.data.get("how") not in NOT_ANSWERED:
            continue
        session = sessions.get(stream.data.get("request_id", ""), "")
        span = s.innermost_span(spans, stream.index, s.TURN_METHODS)
        if span is None:
            continue
        stop = span.end_index if span.end_index is not None else None
        exercised += span.end_kind in ("return", "raised")
        extra = [r for r in requests if r.index > stream.index and (stop is None or r.index < stop)
                 and r.data.get("session_id") == session and s.request_instance(r) == stream.instance]
        if extra:
            violations.append(s.ev(f"after request {stream.data.get('request_id')} ended by {stream.data.get('how')}, "
                                   "another model request was sent in the same call", stream.index, extra[0].index))
    last: dict[s.OpKey, TraceEvent] = {}
    for row in trace.ledger():
        previous = last.get(s.ledger_key(row))
        exercised += previous is not None and previous.data.get("error_kind") == "transient"
        last[s.ledger_key(row)] = row
    for first, again in s.reexecutions(trace):
        if first.instance == again.instance and not s.crash_between(trace, first.index, again.index):
            violations.append(s.ev(f"{again.data.get('tool_call_id')} was executed again without any crash: "
                                   "recording replayed a tool", first.index, again.index, rows=[first, again]))
    return judge("M4", exercised, violations, "no failed or incomplete model request and no tool retry")


# --------------------------------------------------------------------------- M5


def check_m5(trace: Trace) -> Verdict:
    """Exercised per stream ended by EOF, transport error or cancellation, and per completed
    answer the session's conversation moved on without (its next request does not carry the
    answer after the conversation it answered: another instance raced it, or a crash lost
    it), where a stale answer would be appended. Fails when an EOF
    request is not stored incomplete with its partial text, when the turn ends completed
    (or, after EOF, anything but incomplete) on it, or when its partial text is later sent as
    a complete assistant answer. A stream a crash cut off before its end was recorded
    decides no turn status: the turn recovery resumes ends on what follows.

    Also fails, judged from the world's model requests alone
    (:mod:`harness.criteria.answer_provenance`), when a request carries an assistant message
    that is not what the world served to a request whose messages are exactly the messages
    before it (complete, or its text marked incomplete), nor a message of a checkpoint
    loaded into the session, where the first request after the load carried it: an answer
    the model gave to a conversation that is gone is no answer of this one. Likewise for what
    the user said (:mod:`harness.criteria.user_messages`): the first request of a turn carries
    the turn's text as its last user message, and no request carries a user message the user
    never sent; each turn whose first request reached the model is exercised.

    Also fails when a tool call that only a stream ended by EOF, a transport error or a
    cancellation emitted is taken up (:mod:`harness.criteria.unfinished_stream_calls`): the
    world executes it (ledger row) or is asked to start it, or the store holds an operation
    for it, before any completed stream of the session emitted the same call id with the same
    tool and arguments (a call the model re-issues in a completed answer is that answer's,
    and runs). Identity: (session, tool-call id), the arguments telling which emission of an
    id a run carries out. Exercised per such stream that emitted at least one complete call
    and after which the run went on (a later turn of its session, an answer or a
    ``recover()``), where the call could have been run."""
    spans = s.driver_spans(trace)
    requests = s.model_requests(trace)
    sessions = s.request_sessions(trace)
    ends = _events_by_request(trace, "model_request_ended")
    final, views = _views(trace)
    exercised, violations = 0, []
    found = P.provenance(trace)
    unsourced_at = {(item.request.index, item.position) for item in found.unsourced}
    explained: set[tuple[int, int]] = set()
    for stream in s.stream_ends(trace):
        how = str(stream.data.get("how", ""))
        if how not in NOT_ANSWERED:
            continue
        rid = str(stream.data.get("request_id", ""))
        session = sessions.get(rid, "")
        text = str(stream.data.get("text", ""))
        exercised += 1
        view = views.get(rid)
        lost = _lost_in_crash(trace, stream, ends.get(rid, []))
        keeps_text = bool(text) and not lost
        if how == "eof" and view is not None and final is not None and not (lost and view.status is None):
            if view.status is not ModelRequestStatus.INCOMPLETE or not view.incomplete or (
                    keeps_text and view.partial_text != text):
                violations.append(s.ev(f"request {rid} ended by EOF is stored as {view.status} (incomplete="
                                       f"{view.incomplete}, partial text {'kept' if view.partial_text == text else 'lost'})",
                                       stream.index, final.index))
        following = [r for r in requests if r.index > stream.index and r.data.get("session_id") == session]
        horizon = following[0].index if following else len(trace.events)
        if lost:
            # The stream's end never reached the store: recovery ended the request and
            # resumed the turn, which ends on what happens next (a cancellation, another
            # answer); a resumed turn marked completed without an answer is L4.8's.
            horizon = stream.index
        for event, payload in s.lifecycle_of(trace, "turn_ended"):
            if stream.index < event.index < horizon and payload.get("session_id") == session:
                status = (payload.get("data") or {}).get("status")
                if status == TurnStatus.CANCELLED.value and s.cancelled(trace, session, stream.index,
                                                                        event.index):
                    break  # the session was cancelled meanwhile (found by generation: another
                    # instance's cancel while this one's EOF was held)
                if status == TurnStatus.COMPLETED.value or (how == "eof" and status != TurnStatus.INCOMPLETE.value):
                    violations.append(s.ev(f"the turn ended {status} on request {rid} that ended by {how}",
                                           stream.index, event.index))
                break
        span = s.innermost_span(spans, stream.index, ("run_turn", "answer_approval"))
        if span is not None and span.end_kind == "return" and not any(r.index < (span.end_index or 0) for r in following):
            status = (span.end_data.get("result") or {}).get("status")
            if status == TurnStatus.COMPLETED.value or (how == "eof" and status != TurnStatus.INCOMPLETE.value):
                violations.append(s.ev(f"{span.method} returned {status} after request {rid} ended by {how}",
                                       stream.index, span.end_index or span.index))
        if text:
            for request in following:
                # A complete message with the same text may be another request's own
                # complete answer (the model said the same words twice): only a message no
                # completed answer accounts for is this partial text taken as an answer.
                taken = [position for position, m in enumerate(request.data.get("messages", []))
                         if m.get("role") == "assistant" and m.get("content") == text
                         and not m.get("incomplete") and (request.index, position) in unsourced_at]
                if taken:
                    violations.append(s.ev(f"the partial text of request {rid} was later sent as a complete answer",
                                           stream.index, request.index))
                    explained.update((request.index, position) for position in taken)
                    break
    exercised += len(found.moved_on)
    for item in found.unsourced:
        if (item.request.index, item.position) in explained:
            continue
        violations.append(s.ev(P.describe(item), *(a.end.index for a in item.served_elsewhere[:1]),
                               item.request.index))
    users = user_messages.read(trace)
    exercised += users.told
    for finding in users.findings:
        indexes = (finding.call_index, finding.request.index) if finding.call_index is not None \
            else (finding.request.index,)
        violations.append(s.ev(finding.note, *indexes))
    calls = unfinished_stream_calls.unfinished_calls_never_taken(trace)
    exercised += calls.exercised
    for taken in calls.taken:
        violations.append(s.ev(taken.note, taken.emission.stream.index, taken.index,
                               rows=() if taken.row is None else (taken.row,)))
    return judge("M5", exercised, violations, "no stream ended by EOF, transport error or cancellation")


# --------------------------------------------------------------------------- catalogue

CRITERIA: tuple[Criterion, ...] = (
    Criterion(
        "M1", "m", "One start, one end",
        "Every model request has a unique request_id and exactly one start and one end event, in "
        "the realtime channel and in the store; a request a crash cut off gets its end from the "
        "recovery that follows.",
        "每次发出的模型请求具有唯一 request_id，并且恰好记录一次开始和结束。",
        check_m1, (Feature.MODEL_EVENTS,),
    ),
    Criterion(
        "M2", "m", "End status",
        "A request ends completed, failed, cancelled or incomplete as its stream did: a normal end "
        "is completed, a transport error failed, a cancellation cancelled, an EOF incomplete.",
        "结束状态区分完成、失败、取消和未完整结束，覆盖传输异常及缺少终止事件的 EOF。",
        check_m2, (Feature.MODEL_EVENTS,),
    ),
    Criterion(
        "M3", "m", "Propagation",
        "A transport error or a cancellation of the model stream propagates out of the driver "
        "call as the same exception.",
        "异常与取消保持原样传播；事件记录不重放工具，也不增加模型重试。",
        check_m3,
    ),
    Criterion(
        "M4", "m", "Recording replays nothing",
        "Recording model events never re-sends a model request, never adds a retry after a "
        "failed or incomplete request, and never executes a tool again.",
        "事件记录不重放工具，也不增加模型重试。",
        check_m4,
    ),
    Criterion(
        "M5", "m", "Partial is incomplete",
        "Partial text ended by EOF is kept and marked incomplete, and a failed or incomplete "
        "request never completes the turn or becomes a complete answer: no tool call only such "
        "a request emitted is ever recorded or run; every assistant message "
        "the model is sent is what it answered to exactly the conversation before it (an "
        "answer that comes back after another instance moved the conversation on is dropped, "
        "never appended to the new one), its partial text marked incomplete, or history "
        "loaded from a checkpoint; likewise every user message is what the user said, and a "
        "turn's first request carries its text.",
        "原有部分文本返回仍标为未完整结束。完成观察器不把失败请求视为成功回答。",
        check_m5,
    ),
)
