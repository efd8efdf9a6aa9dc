"""The agent loop of one session, driven by its durable conversation.

Guarantees:

* each iteration reads the latest checkpoint and does the one thing it calls for: ask the
  model, run the next pending tool call, or end the turn; so ``run_turn``,
  ``answer_approval`` and ``recover`` all continue the same loop from the same state;
* a denied or failed operation does not end the turn: its result goes back to the model in
  the next request (X3); an operation waiting for approval returns ``awaiting_approval``;
* the model sees, in each request, only the tools visible under the rules in force then;
* EOF ends the turn ``incomplete`` and is never taken as an answer (M5); a transport error
  or a cancellation ends it ``failed``/``cancelled`` and is re-raised unchanged after the
  request's end is recorded (M3); nothing is retried (M4);
* a cancelled session stops at the next step; every end emits ``TURN_ENDED``;
* a one-call turn takes eight commits, three synced (``docs/lifecycle.md``, "What must be on
  disk before what"): steps with no failpoint between them share one, the user message with
  the first request's start (:meth:`TurnLoop.open_turn`), a request's end with the prepare
  of the first call it answered, the final answer's end with the turn's end. A crash at the
  turn's first ``before_model_request`` leaves nothing of the turn: the unacknowledged turn
  call is lost as a whole, the store exactly as before it (docs/contract.md, "A turn call
  cut before its first commit").
"""

from __future__ import annotations

import dataclasses

from harness.contract import (
    EventType,
    Message,
    ModelRequestStatus,
    TurnResult,
    TurnStatus,
    World,
)
from reference_impl import approvals, continuation, records
from reference_impl.continuation import StepKind
from reference_impl.events import Signals
from reference_impl.execution import OperationPipeline, Prepared, StepResult
from reference_impl.model_requests import SUPERSEDED, ModelReply, ModelRequester
from reference_impl.store import Store
from reference_impl.visibility import visible_tools

MAX_MODEL_REQUESTS_PER_DRIVE = 1_000
"""A guard against a model that never stops calling tools; the turn then ends incomplete.
It counts model requests, not calls: the calls of one response are that response's work,
however many (a response of 10,000 calls is run to the end)."""
MAX_STEPS_PER_DRIVE = 100_000_000
"""A backstop for the loop itself (steps are model requests and tool calls)."""

_STATUS_OF_FAILED_REQUEST = {
    ModelRequestStatus.FAILED: TurnStatus.FAILED,
    ModelRequestStatus.CANCELLED: TurnStatus.CANCELLED,
}


class TurnLoop:
    def __init__(
        self,
        store: Store,
        world: World,
        signals: Signals,
        pipeline: OperationPipeline,
        requester: ModelRequester,
    ) -> None:
        self._store = store
        self._world = world
        self._signals = signals
        self._pipeline = pipeline
        self._requester = requester

    def open_turn(self, session_id: str, message: Message) -> TurnResult | None:
        """Start a turn with the user's ``message``, the session settled by the caller and not
        cancelled: the message is committed with the start of the turn's first model request
        (one commit, after ``before_model_request``), then the loop goes on as :meth:`drive`.
        None when, while this instance waited at that failpoint, another left the session
        unsettled (calls pending or a wait open): nothing was committed, the caller settles
        again and opens again."""
        return self.drive(session_id, Opening(
            message, continuation.state(self._store.connection, session_id)))

    def drive(self, session_id: str, opening: Opening | None = None) -> TurnResult | None:
        """Drive the session's turn until it ends; with ``opening`` (:meth:`open_turn`) the
        first step is the request that commits the new turn's message, whatever the
        conversation's own next step (the previous turn's end) says."""
        requests = 0
        for _ in range(MAX_STEPS_PER_DRIVE):
            session = records.load_session(self._store.connection, session_id)
            if session.cancelled:
                # Calls already emitted are recorded as cancelled (not executed), not lost.
                self.settle_pending_calls(session_id)
                return self.end(session_id, TurnStatus.CANCELLED)
            # catch up, e.g. with a result whose own checkpoint failed to build
            fold = self._pipeline.fold(session_id, reason="catch_up", project=True)
            current = (fold.latest if fold.latest is not None
                       else continuation.state(self._store.connection, session_id))
            step = continuation.next_step_of(current) if opening is None else _OPEN
            if step.kind is StepKind.DONE:
                status = TurnStatus.INCOMPLETE if step.incomplete else TurnStatus.COMPLETED
                return self.end(session_id, status, step.final_text)
            if step.kind is StepKind.RUN_CALL:
                assert step.call is not None
                outcome = self._pipeline.run(session_id, step.call)
                if outcome is StepResult.AWAITING_APPROVAL:
                    return self.end(session_id, TurnStatus.AWAITING_APPROVAL)
                if outcome is StepResult.DEFERRED:
                    # The instance that started the operation owns the turn from here on.
                    return self.end(session_id, TurnStatus.DEFERRED, persist=False)
                continue
            if requests == MAX_MODEL_REQUESTS_PER_DRIVE:
                break
            requests += 1
            reply = self._ask_model(session_id, opening)
            if opening is not None:
                first, opening = opening, None
                if reply is None:  # cancelled at before_model_request: nothing was committed
                    return self.end(session_id, TurnStatus.CANCELLED, opening=first)
                if reply is SUPERSEDED and first.outcome is UNSETTLED:
                    return None  # nothing committed: the caller settles again
                # DELIVERED (the other instance sent this very message): drive on from the store
            if reply is SUPERSEDED:
                continue  # another instance moved the session on while this one waited
            if reply is None or (reply.error is None
                                 and reply.status is ModelRequestStatus.CANCELLED):
                return self.end(session_id, TurnStatus.CANCELLED)  # the session was cancelled
            if reply.error is not None:
                self.end(session_id, _STATUS_OF_FAILED_REQUEST[reply.status], persist=False)
                raise reply.error  # the very exception the stream raised (M3)
            if reply.status is ModelRequestStatus.INCOMPLETE:
                return self.end(session_id, TurnStatus.INCOMPLETE, reply.text, persist=False)
            if reply.ended_turn is not None:  # the end transaction ended the turn too
                return self.end(session_id, reply.ended_turn, reply.text, persist=False)
        return self.end(session_id, TurnStatus.INCOMPLETE)

    def settle_pending_calls(self, session_id: str) -> StepResult:
        """Run the conversation's pending tool calls (no model request); a call that waits
        for approval stays waiting, one held by another instance defers the caller."""
        while True:
            fold = self._pipeline.fold(session_id, reason="catch_up", project=True)
            step = continuation.next_step_of(
                fold.latest if fold.latest is not None
                else continuation.state(self._store.connection, session_id))
            if step.kind is not StepKind.RUN_CALL:
                return StepResult.DONE
            assert step.call is not None
            outcome = self._pipeline.run(session_id, step.call)
            if outcome is not StepResult.DONE:
                return outcome

    def _ask_model(self, session_id: str, opening: Opening | None = None) -> ModelReply | None:
        """One model request. ``opening``: the turn's user message, appended in the request's
        start transaction when its verdict there allows (its ``outcome`` says what happened).
        Answered with tool calls, the first is prepared in the end transaction (its
        announcement is owed to the pipeline's next run of it); answered finally, the turn
        ends in that transaction (the reply's ``ended_turn``)."""
        sent_at_sequence: list[int] = []
        prepared: list[Prepared] = []
        final: list[TurnStatus] = []

        def compose(conn, now: float) -> tuple[tuple[Message, ...], tuple[str, ...]] | None:
            current = continuation.state(conn, session_id)
            if opening is not None:
                opening.outcome = opening.verdict(conn, session_id, current)
                if opening.outcome is not OPENED:
                    return None
                continuation.append_to(conn, session_id, current, opening.message,
                                       reason="user_message", now=now)
                records.set_turn_status(conn, session_id, TurnStatus.RUNNING, uncancel=True)
                current = continuation.state(conn, session_id)
            elif continuation.next_step_of(current).kind is not StepKind.ASK_MODEL:
                return None
            sent_at_sequence.append(current.sequence if current else 0)
            config = records.load_session(conn, session_id).config
            return (current.conversation if current else ()), visible_tools(config)

        def on_end(conn, reply: ModelReply, now: float) -> None:  # in the end-record transaction
            if reply.status is ModelRequestStatus.COMPLETED:
                current = continuation.state(conn, session_id)
                if (current.sequence if current else 0) != sent_at_sequence[0]:
                    # Another instance moved the conversation on while this request ran: the
                    # answer is to a conversation that is gone; the loop asks from the new one.
                    return
                answer = Message("assistant", reply.text, tool_calls=reply.tool_calls)
                continuation.append_to(conn, session_id, current, answer, reason="model_answer",
                                       now=now)
                step = continuation.next_step_of(continuation.state(conn, session_id))
                if step.kind is StepKind.RUN_CALL:  # its first call, prepared in this commit
                    assert step.call is not None
                    done = self._pipeline.prepare_in(conn, session_id, step.call, now=now)
                    if done is not None:
                        prepared.append(done)
                elif step.kind is StepKind.DONE and not records.load_session(
                        conn, session_id).cancelled:  # a cancelled turn ends as such, later
                    status = TurnStatus.INCOMPLETE if step.incomplete else TurnStatus.COMPLETED
                    records.set_turn_status(conn, session_id, status)
                    final.append(status)
                return
            if reply.status is ModelRequestStatus.INCOMPLETE:
                if reply.text:  # kept, and marked so that nobody takes it as an answer
                    partial = Message("assistant", reply.text, incomplete=True)
                    continuation.append(conn, session_id, partial, reason="model_partial", now=now)
                records.set_turn_status(conn, session_id, TurnStatus.INCOMPLETE)
                return
            records.set_turn_status(conn, session_id, _STATUS_OF_FAILED_REQUEST[reply.status])

        reply = self._requester.request(session_id, compose, on_end)
        for done in prepared:
            self._pipeline.owe_announcement(done)
        if final and reply is not None:
            return dataclasses.replace(reply, ended_turn=final[0])
        return reply

    def end(
        self, session_id: str, status: TurnStatus, final_text: str = "", *, persist: bool = True,
        opening: Opening | None = None,
    ) -> TurnResult:
        """End the turn (``persist``: its status committed, synced: the caller reads it
        next), with ``opening``'s message, not yet committed, appended first where its
        verdict allows (a turn cancelled at its first request keeps what the user said)."""
        if persist:
            with self._store.transaction() as conn:
                if opening is not None:
                    current = continuation.state(conn, session_id)
                    if opening.verdict(conn, session_id, current) is OPENED:
                        continuation.append_to(conn, session_id, current, opening.message,
                                               reason="user_message", now=self._world.now())
                records.set_turn_status(conn, session_id, status)
        self._signals.emit(EventType.TURN_ENDED, session_id, status=status.value)
        return TurnResult(session_id, status, final_text)


_OPEN = continuation.NextStep(StepKind.ASK_MODEL)
"""The first step of a turn being opened: the request that commits its message."""

OPENED = "opened"
DELIVERED = "delivered"
UNSETTLED = "unsettled"


class Opening:
    """A turn's user message on its way into the conversation with the turn's first model
    request, and the session's state as the caller settled it before the request's
    failpoint (what tells, inside the start transaction, whether another instance moved the
    session on meanwhile)."""

    __slots__ = ("message", "_settled_count", "outcome")

    def __init__(self, message: Message, settled: continuation.State | None) -> None:
        self.message = message
        self._settled_count = settled.count if settled is not None else 0
        self.outcome: str | None = None

    def verdict(self, conn, session_id: str, current: continuation.State | None) -> str:
        """Inside a transaction, when the conversation moved on since the caller settled
        the session (another instance ran it while this one waited at the failpoint):
        ``DELIVERED`` when a user message of the same text was appended meanwhile (the same
        turn delivered to the other instance, which sent it to the model: appending it
        again would say it twice); ``UNSETTLED`` when calls are pending or a wait is open
        now (the caller settles again first). Otherwise ``OPENED``: the message may be
        appended, as it would have been right after the caller settled."""
        count = current.count if current is not None else 0
        if count <= self._settled_count:
            return OPENED  # nobody moved the session: it is as the caller settled it
        if any(message.role == "user" and message.content == self.message.content
               for message in current.log[self._settled_count:count]):
            return DELIVERED
        if current.pending or approvals.pending_of_session(conn, session_id):
            return UNSETTLED
        return OPENED
