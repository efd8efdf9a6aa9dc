"""The owner's answers to approval waits, as the world gave them.

Guarantees:

* an answer is either an ``answer_approval`` driver call (``approve`` as given) or a new user
  message in the wait's session (a ``run_turn`` or ``concurrent_turn`` driver call) while the
  wait's prompt is shown and unanswered: the owner moved on, which answers "no"
  (``docs/lifecycle.md``, "A new message while calls wait"). A new message answers every
  prompt of its session shown before the message reached the model (its session's first
  model request inside the call) or, without such a request, before the call ended; prompts
  shown later are not its to answer;
* a new message whose driver call returned answered for certain; one cut off by a crash or a
  raise may have been cut before it took effect, so it counts only when the store read at
  rest after it shows the wait rejected (the one place the store is asked: the world cannot
  tell how far a cut-off call got);
* :func:`first_answers` gives, per wait id, the answer that took effect (the first), which
  every check of what an answer must do or must not do uses; nothing here reads a clock or
  keeps state between calls.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from harness.contract import WaitStatus
from harness.criteria.trace_readings import driver_spans
from harness.trace.identity_memo import by_identity
from harness.trace.record import Kind, Trace, TraceEvent

EXPLICIT_METHODS = ("answer_approval", "answer")
NEW_MESSAGE_METHODS = ("run_turn", "concurrent_turn")
_AT_REST = ("after_restart", "quiescent", "final")


@dataclass(frozen=True, slots=True)
class Answer:
    """One answer to one wait."""

    wait_id: str
    approve: bool
    event: TraceEvent
    """The driver call that gave it."""
    index: int
    """When it was given: the driver call; for a new message answering a prompt shown during
    that call, the prompt."""
    settled: int
    """By when it has taken effect: the driver call for an explicit answer; for a new message,
    the moment the message reached the model (or its call ended). In between, only the store
    knows whether it has."""
    by_new_message: bool

    @property
    def call_index(self) -> int:
        return self.event.index


@by_identity(2)
def answers(trace: Trace) -> tuple[Answer, ...]:
    """Every answer, explicit or by a new message, in the order they took effect (a new
    message cut off before it could be told to have taken effect is left out unless the
    store shows its refusal)."""
    found: list[Answer] = []
    ends = {span.index: span for span in driver_spans(trace)}
    requests: dict[str, list[int]] = {}  # per session, ascending
    for request in trace.of_kind(Kind.MODEL_REQUEST):
        requests.setdefault(_request_session(request), []).append(request.index)
    unanswered: dict[str, list[TraceEvent]] = {}  # per session, prompts no message answered yet
    for prompt in trace.of_kind(Kind.APPROVAL_PROMPT):
        unanswered.setdefault(str(prompt.data.get("session_id")), []).append(prompt)
    turns = []
    for call in trace.of_kind(Kind.DRIVER_CALL):
        if call.data.get("skipped"):
            continue
        method = call.data.get("method")
        args = call.data.get("args") or {}
        if method in EXPLICIT_METHODS and args.get("wait_id") is not None:
            found.append(Answer(str(args["wait_id"]), bool(args.get("approve", False)),
                                call, call.index, call.index, False))
        elif method in NEW_MESSAGE_METHODS and args.get("session_id") is not None:
            turns.append(call)
    answered_at: dict[str, int] = {}
    for answer in found:
        answered_at.setdefault(answer.wait_id, answer.index)
    for call in turns:  # in call order: each prompt is answered by the first message that can
        session_id = str((call.data.get("args") or {})["session_id"])
        span = ends[call.index]
        end = span.end_index if span.end_index is not None else len(trace.events)
        returned = span.end_kind == "return"
        session_requests = requests.get(session_id, [])
        position = bisect.bisect_right(session_requests, call.index)
        reached = session_requests[position] if position < len(session_requests) else end
        cutoff = min(reached, end)
        pending = unanswered.get(session_id, [])
        kept: list[TraceEvent] = []
        for at, prompt in enumerate(pending):
            if prompt.index >= cutoff:
                kept.extend(pending[at:])
                break
            wait_id = str(prompt.data.get("wait_id", ""))
            if answered_at.get(wait_id, cutoff) < cutoff:
                continue  # answered before this message (or by it, shown twice): done
            if returned or _store_rejected(trace, wait_id, end):
                found.append(Answer(wait_id, False, call, max(call.index, prompt.index),
                                    cutoff, True))
                answered_at[wait_id] = call.index
            else:
                kept.append(prompt)  # cut off: a later message may still answer it
        unanswered[session_id] = kept
    found.sort(key=lambda a: (a.index, a.call_index))
    return tuple(found)


@by_identity(2)
def first_answers(trace: Trace) -> dict[str, Answer]:
    """The answer that took effect, per wait id: the first given after its (first) prompt."""
    first_prompt: dict[str, int] = {}
    for prompt in trace.of_kind(Kind.APPROVAL_PROMPT):
        first_prompt.setdefault(str(prompt.data.get("wait_id", "")), prompt.index)
    first: dict[str, Answer] = {}
    for answer in answers(trace):
        if answer.by_new_message and answer.index < first_prompt.get(answer.wait_id, -1):
            continue
        first.setdefault(answer.wait_id, answer)
    return first


def _request_session(request: TraceEvent) -> str:
    return str(request.data.get("session_id", ""))


def _store_rejected(trace: Trace, wait_id: str, after: int) -> bool:
    for point in trace.observations:
        if point.index <= after or point.label not in _AT_REST:
            continue
        for wait in point.observation.approval_waits:
            if wait.wait_id == wait_id:
                return wait.status is WaitStatus.REJECTED
        return False
    return False


@by_identity(2)
def refusals(trace: Trace) -> tuple[tuple[int, TraceEvent], ...]:
    """Every refusal of a prompted wait (the owner's "no", or a new message's): when it was
    given, and the prompt it answered. An owner's refusal of an operation uses its repeat
    budget (docs/contract.md), which the repeat judgements of L1.x and L3.x both read."""
    prompts = {str(p.data.get("wait_id", "")): p for p in trace.of_kind(Kind.APPROVAL_PROMPT)}
    return tuple((answer.index, prompts[answer.wait_id]) for answer in answers(trace)
                 if not answer.approve and answer.wait_id in prompts)
