"""Model requests with durable start and end events (M1-M5).

Guarantees:

* each request gets a fresh ``request_id``, unique in the store (allocated inside the
  transaction that records its start), and exactly one durable start and one durable end
  (the end update is guarded by ``status IS NULL``), each followed by its realtime event;
* the end status is ``completed`` (END chunk), ``incomplete`` (EOF: the partial text is kept
  and marked incomplete, tool calls of the unfinished stream are never run), ``failed``
  (``ModelTransportError`` or any other error of the stream) or ``cancelled``
  (``ModelStreamCancelled``); the reply of a failed or cancelled request carries the very
  exception the stream raised, for the turn loop to re-raise unchanged once its end is
  recorded (M3);
* there are no retries: one logical request is one ``open_model_stream`` call (M4), and
  recording never touches tools;
* the caller's ``compose`` reads the conversation inside the start transaction and its
  ``on_end`` runs inside the end transaction, so the answer (with what follows from it: its
  first call's prepare, or the turn's end) is committed atomically with the end record; the
  end is synced unless the answer carries tool calls (their start is the next synced
  commit);
* :func:`end_interrupted` closes requests a crash left open, as ``incomplete``.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Callable

from harness.contract import (
    ChunkKind,
    EventType,
    Failpoint,
    Message,
    ModelRequest,
    ModelRequestStatus,
    ModelStreamCancelled,
    ToolCall,
    TurnStatus,
    World,
)
from reference_impl import records
from reference_impl.events import Signals
from reference_impl.store import MISSING, Durability, Store, rows_of


@dataclass(frozen=True, slots=True)
class ModelReply:
    request_id: str
    status: ModelRequestStatus
    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    error: Exception | None = None
    ended_turn: TurnStatus | None = None
    """The turn's status when the caller's ``on_end`` ended the turn in the end transaction
    (a final answer), set by the caller; None otherwise."""


OnEnd = Callable[[sqlite3.Connection, ModelReply, float], None]
Compose = Callable[[sqlite3.Connection, float],
                   "tuple[tuple[Message, ...], tuple[str, ...]] | None"]
"""Reads, inside the transaction that records a request's start (and at its time), the
conversation and the visible tools to send; None when the session no longer needs a model
request (another instance moved it on while this one waited)."""

SUPERSEDED = ModelReply("", ModelRequestStatus.CANCELLED, "")
"""The reply of a request not made: when its start was to be recorded, the session no longer
needed it. Nothing was recorded; the caller reads the session again."""


class ModelRequester:
    def __init__(self, store: Store, world: World, signals: Signals) -> None:
        self._store = store
        self._world = world
        self._signals = signals

    def request(self, session_id: str, compose: Compose, on_end: OnEnd) -> ModelReply | None:
        """One request; None when the session was cancelled before anything was recorded,
        :data:`SUPERSEDED` when ``compose`` found nothing to ask. A cancellation after the
        start is recorded ends the request ``cancelled`` unsent.

        The conversation is read with the start, after ``before_model_request``: an instance
        that waited there (another instance of the same session ran meanwhile) sends the
        session as it is now, never the one it saw before waiting (X3)."""
        self._signals.failpoint(Failpoint.BEFORE_MODEL_REQUEST, session_id)
        # ORDERED: the model relies on nothing we store; a start lost on a power cut is a
        # crash before the request, and asking again is what recovery does then.
        with self._store.transaction(Durability.ORDERED) as conn:
            if records.load_session(conn, session_id).cancelled:
                return None  # read with the start: nothing is written
            now = self._world.now()  # one time for what one transaction writes
            composed = compose(conn, now)
            if composed is None:
                return SUPERSEDED
            conversation, tools = composed
            request_id = _record_start(conn, session_id, now)
        self._signals.emit(EventType.MODEL_REQUEST_STARTED, session_id, request_id=request_id)
        self._signals.failpoint(
            Failpoint.AFTER_MODEL_REQUEST_STARTED, session_id, request_id=request_id
        )
        if self._cancelled(session_id):  # a cancel may arrive re-entrantly at a failpoint
            reply = ModelReply(request_id, ModelRequestStatus.CANCELLED, "")
        else:
            reply = self._read_stream(ModelRequest(request_id, session_id, conversation, tools))
        self._signals.failpoint(
            Failpoint.AFTER_MODEL_STREAM_ENDED, session_id, request_id=request_id
        )
        # A completed answer with tool calls is only a step: their start is the next synced
        # commit. Any other end returns to the caller with it (``on_end`` ends the turn in
        # this commit when the answer is final): synced.
        durability = (Durability.ORDERED if reply.status is ModelRequestStatus.COMPLETED
                      and reply.error is None and reply.tool_calls else Durability.SYNCED)
        now = self._world.now()  # one time for what one transaction writes
        with self._store.transaction(durability) as conn:
            ended = _record_end(conn, session_id, request_id, reply.status, _kept_text(reply),
                                now)
            if ended:
                on_end(conn, reply, now)
        if ended:
            self._signals.emit(EventType.MODEL_REQUEST_ENDED, session_id, request_id=request_id,
                               status=reply.status.value)
        return reply

    def _cancelled(self, session_id: str) -> bool:
        return records.load_session(self._store.connection, session_id).cancelled

    def _read_stream(self, request: ModelRequest) -> ModelReply:
        text: list[str] = []
        calls: list[ToolCall] = []
        try:
            stream = self._world.open_model_stream(request)
            while True:
                chunk = stream.next_chunk()
                if chunk.kind is ChunkKind.TEXT:
                    text.append(chunk.text)
                elif chunk.kind is ChunkKind.TOOL_CALL and chunk.tool_call is not None:
                    calls.append(chunk.tool_call)
                elif chunk.kind is ChunkKind.END:
                    return ModelReply(request.request_id, ModelRequestStatus.COMPLETED,
                                      "".join(text), tuple(calls))
                elif chunk.kind is ChunkKind.EOF:
                    return ModelReply(request.request_id, ModelRequestStatus.INCOMPLETE,
                                      "".join(text))
        except ModelStreamCancelled as exc:
            return ModelReply(request.request_id, ModelRequestStatus.CANCELLED, "".join(text),
                              error=exc)
        except Exception as exc:  # transport error or a broken stream: the request failed
            return ModelReply(request.request_id, ModelRequestStatus.FAILED, "".join(text),
                              error=exc)


def end_interrupted(conn: sqlite3.Connection, now: float) -> tuple[tuple[str, str], ...]:
    """End every request a crash left without an end; returns (session_id, request_id)."""
    rows = conn.execute(
        "SELECT request_id, session_id FROM model_requests WHERE status IS NULL ORDER BY rowid"
    ).fetchall()
    for row in rows:
        _record_end(conn, row["session_id"], row["request_id"], ModelRequestStatus.INCOMPLETE,
                    "", now)
    return tuple((row["session_id"], row["request_id"]) for row in rows)


def _kept_text(reply: ModelReply) -> str:
    # Only an unfinished answer is "partial"; a completed one lives in the conversation.
    return "" if reply.status is ModelRequestStatus.COMPLETED else reply.text


def _record_start(conn: sqlite3.Connection, session_id: str, now: float) -> str:
    # The session's latest request through the index on session_id: a COUNT(*) here grew
    # with every request of the session (the top cost of a long multi-turn session).
    rows = rows_of(conn)
    latest = rows.get("model_requests", session_id) if rows is not None else MISSING
    if latest is MISSING:
        row = conn.execute(
            "SELECT request_id FROM model_requests WHERE session_id = ?"
            " ORDER BY rowid DESC LIMIT 1",
            (session_id,),
        ).fetchone()
        latest = None if row is None else row["request_id"]
    prefix = f"{session_id}:req-"
    if latest is None:
        count = 0
    elif latest.startswith(prefix) and latest[len(prefix):].isdigit():
        count = int(latest[len(prefix):])
    else:  # not an id this code wrote: count them, as ids were always numbered
        (count,) = conn.execute(
            "SELECT COUNT(*) FROM model_requests WHERE session_id = ?", (session_id,)
        ).fetchone()
    request_id = f"{session_id}:req-{count + 1}"
    conn.execute(
        "INSERT INTO model_requests (request_id, session_id, start_events, started_at)"
        " VALUES (?, ?, 1, ?)",
        (request_id, session_id, now),
    )
    if rows is not None:  # the session's latest request is this one
        rows.put("model_requests", session_id, request_id)
    return request_id


def _record_end(
    conn: sqlite3.Connection,
    session_id: str,
    request_id: str,
    status: ModelRequestStatus,
    partial_text: str,
    now: float,
) -> bool:
    rows = rows_of(conn)
    latest = rows.get("model_requests", session_id) if rows is not None else MISSING
    ended = bool(
        conn.execute(
            "UPDATE model_requests SET status = ?, partial_text = ?, ended_at = ?,"
            " end_events = end_events + 1 WHERE request_id = ? AND status IS NULL",
            (status.value, partial_text, now, request_id),
        ).rowcount
    )
    if latest is not MISSING:  # an end changes no request id: the latest one stands
        rows.put("model_requests", session_id, latest)
    return ended
