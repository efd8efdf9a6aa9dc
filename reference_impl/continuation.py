"""The session's continuation state is its latest checkpoint; this module reads and extends it.

Guarantees:

* the conversation a model request carries is exactly the latest checkpoint's messages;
* every change (user message, model answer, folded tool results, imported checkpoint) is a
  new checkpoint with the next sequence number, written inside the caller's transaction,
  carrying the session's current recent-failure table (already bounded);
* folding is idempotent: a saved result becomes a tool message only if the call it answers
  is still pending in the conversation, in call order, once (L4.1, L4.5);
* :func:`next_step` derives what the turn loop does next from the conversation alone, so
  any instance (or a restarted one) continues from the same durable state.
"""

from __future__ import annotations

import enum
import sqlite3
from dataclasses import dataclass

from harness.contract import Message, ToolCall, execution_id_for
from reference_impl import checkpoint_codec, failure_policy, results
from reference_impl.checkpoint_codec import Continuation
from reference_impl.records import Stage


class StepKind(enum.StrEnum):
    ASK_MODEL = "ask_model"
    RUN_CALL = "run_call"
    DONE = "done"


@dataclass(frozen=True, slots=True)
class NextStep:
    kind: StepKind
    call: ToolCall | None = None
    final_text: str = ""
    incomplete: bool = False


@dataclass(frozen=True, slots=True)
class Fold:
    sequence: int | None
    """The new checkpoint's sequence, or None when nothing was pending a fold."""
    execution_ids: tuple[str, ...] = ()


def latest(conn: sqlite3.Connection, session_id: str) -> Continuation | None:
    row = conn.execute(
        "SELECT data FROM checkpoints WHERE session_id = ? ORDER BY sequence DESC LIMIT 1",
        (session_id,),
    ).fetchone()
    return checkpoint_codec.decode(bytes(row["data"])) if row else None


def messages(conn: sqlite3.Connection, session_id: str) -> tuple[Message, ...]:
    current = latest(conn, session_id)
    return current.messages if current else ()


def save(
    conn: sqlite3.Connection,
    session_id: str,
    conversation: tuple[Message, ...],
    *,
    last_execution_id: str | None,
    reason: str,
    now: float,
) -> int:
    """Write the next checkpoint; ``last_execution_id=None`` keeps the previous one."""
    previous = conn.execute(
        "SELECT sequence, last_execution_id FROM checkpoints WHERE session_id = ?"
        " ORDER BY sequence DESC LIMIT 1",
        (session_id,),
    ).fetchone()
    sequence = previous["sequence"] + 1 if previous else 1
    if last_execution_id is None:
        last_execution_id = previous["last_execution_id"] if previous else ""
    entries = failure_policy.table_entries(conn, session_id)
    data = checkpoint_codec.encode(
        Continuation(session_id, sequence, last_execution_id, conversation, entries)
    )
    conn.execute(
        "INSERT INTO checkpoints (session_id, sequence, format_version, data, size_bytes,"
        " failure_entries, last_execution_id, reason, created_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (session_id, sequence, checkpoint_codec.CURRENT_FORMAT_VERSION, data, len(data),
         len(entries), last_execution_id, reason, now),
    )
    return sequence


def append(
    conn: sqlite3.Connection, session_id: str, message: Message, *, reason: str, now: float
) -> int:
    return save(conn, session_id, messages(conn, session_id) + (message,),
                last_execution_id=None, reason=reason, now=now)


def fold_results(conn: sqlite3.Connection, session_id: str, *, reason: str, now: float) -> Fold:
    """Add the saved results of pending calls, in call order, as tool messages."""
    conversation = messages(conn, session_id)
    folded: list[Message] = []
    execution_ids: list[str] = []
    for call in pending_tool_calls(conversation):
        execution_id = execution_id_for(session_id, call.tool_call_id)
        record = results.load(conn, execution_id)
        if record is None or not _final(conn, execution_id):
            break  # later calls wait for this one: tool messages keep the call order
        folded.append(results.tool_message(record))
        execution_ids.append(execution_id)
    if not folded:
        return Fold(None)
    sequence = save(conn, session_id, conversation + tuple(folded),
                    last_execution_id=execution_ids[-1], reason=reason, now=now)
    conn.executemany(
        "UPDATE operations SET checkpoint_sequence = ?"
        " WHERE execution_id = ? AND checkpoint_sequence IS NULL",
        [(sequence, execution_id) for execution_id in execution_ids],
    )
    return Fold(sequence, tuple(execution_ids))


def pending_tool_calls(conversation: tuple[Message, ...]) -> tuple[ToolCall, ...]:
    """Calls of the last assistant message not yet answered by a tool message after it."""
    index = _last_assistant_index(conversation)
    if index is None:
        return ()
    later = conversation[index + 1:]
    if any(message.role == "user" for message in later):
        return ()  # the conversation moved on; those calls are no longer pending
    answered = {message.tool_call_id for message in later if message.role == "tool"}
    pending: list[ToolCall] = []
    for call in conversation[index].tool_calls:
        if call.tool_call_id not in answered and all(
            call.tool_call_id != seen.tool_call_id for seen in pending
        ):
            pending.append(call)
    return tuple(pending)


def next_step(conversation: tuple[Message, ...]) -> NextStep:
    pending = pending_tool_calls(conversation)
    if pending:
        return NextStep(StepKind.RUN_CALL, call=pending[0])
    if not conversation or conversation[-1].role != "assistant":
        return NextStep(StepKind.ASK_MODEL)
    last = conversation[-1]
    if last.tool_calls:
        return NextStep(StepKind.ASK_MODEL)  # every call answered: the model goes on
    return NextStep(StepKind.DONE, final_text=last.content, incomplete=last.incomplete)


def _final(conn: sqlite3.Connection, execution_id: str) -> bool:
    """A saved result is final unless an escalation of it is still undecided or running."""
    row = conn.execute(
        "SELECT stage FROM operations WHERE execution_id = ?", (execution_id,)
    ).fetchone()
    return row is None or row["stage"] == Stage.RECORDED.value


def _last_assistant_index(conversation: tuple[Message, ...]) -> int | None:
    for index in range(len(conversation) - 1, -1, -1):
        if conversation[index].role == "assistant":
            return index
    return None
