"""The session's continuation state is its latest checkpoint; this module reads and extends it.

Guarantees:

* the conversation a model request carries is exactly the latest checkpoint's messages;
* every change (user message, model answer, folded tool results, imported checkpoint) is a
  new checkpoint with the next sequence number, written inside the caller's transaction,
  carrying the session's current recent-failure table (already bounded);
* a checkpoint is stored as a full snapshot (format 3) or as a delta holding only the
  messages it appends to the one before; a snapshot is written when the deltas since the
  last one outgrow it (and at least :data:`SNAPSHOT_BYTES_MIN`), so the store grows linearly
  in the work and reading a checkpoint back reads at most about twice its size;
* each connection keeps a memo of the last state it read or wrote per session, used only
  when the latest checkpoint's ``chain`` (a digest of the whole state) equals the memo's, so
  a step costs the same at the 10,000th operation as at the first, and another instance's
  or a rolled-back write is never mistaken for this one's;
* folding is idempotent: a saved result becomes a tool message only if the call it answers
  is still pending in the conversation, in call order, once (L4.1, L4.5);
* :func:`next_step` derives what the turn loop does next from the conversation alone, so
  any instance (or a restarted one) continues from the same durable state.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import hashlib
import itertools
import sqlite3
from dataclasses import dataclass

from harness.contract import Message, ToolCall, execution_id_for
from reference_impl import checkpoint_codec, failure_policy, records, results
from reference_impl.checkpoint_codec import Continuation, Delta
from reference_impl.errors import CheckpointFormatError
from reference_impl.records import Stage
from reference_impl.store import read_through, rows_of

SNAPSHOT_BYTES_MIN = 64 * 1024
"""Deltas are written until their bytes since the last snapshot exceed the larger of this
and that snapshot's size: the snapshots then total at most about twice the deltas."""


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
    latest: "State | None" = None
    """When the fold found nothing to do without opening a transaction or calling anyone:
    the state it read, which the caller may use as its own next reading (reading again
    would differ only by a commit of another instance, which may as well come after)."""


@dataclass(frozen=True, slots=True)
class State:
    """The latest checkpoint of a session, decoded, with what is derived from it."""

    session_id: str
    sequence: int
    last_execution_id: str
    log: list[Message] = dataclasses.field(repr=False, compare=False)
    """The conversation is ``log[:count]``. Appending to the latest state extends the same
    list (so an append costs the messages appended, not the conversation), and any other
    state reads only its own prefix; a list nobody else extends is copied first."""
    count: int
    pending: tuple[ToolCall, ...]
    """``pending_tool_calls(messages)``, kept up to date without rescanning."""
    chain: str
    snapshot_sequence: int
    snapshot_bytes: int
    delta_bytes: int
    """Bytes of the deltas written since the snapshot this checkpoint extends."""
    texts: list[str] = dataclasses.field(default_factory=list, repr=False, compare=False)
    """``checkpoint_codec.message_text`` of ``log[:len(texts)]`` (at most ``count``): each
    message encoded once, when its delta was written, so that a snapshot joins them
    instead of encoding the conversation again. Extended with the log; a state read from
    the store starts without them (they are encoded when a snapshot needs them)."""

    @property
    def messages(self) -> tuple[Message, ...]:
        """The whole conversation (a new tuple: costs its length)."""
        log = self.log
        return tuple(log) if len(log) == self.count else tuple(log[:self.count])

    @property
    def conversation(self) -> "ConversationView":
        """The whole conversation as a read-only view (costs nothing, whatever its length):
        what a model request carries."""
        return ConversationView(self.log, self.count)

    @property
    def last_message(self) -> Message | None:
        return self.log[self.count - 1] if self.count else None

    def extended(self, added: tuple[Message, ...],
                 added_texts: list[str]) -> tuple[list[Message], list[str]]:
        """The log of this conversation followed by ``added``, and its texts (``added_texts``
        encode ``added``; appended only where the texts cover the whole conversation)."""
        texts = self.texts
        if len(self.log) == self.count:  # this is the latest state of its log: share it
            self.log.extend(added)
            if len(texts) == self.count:
                texts.extend(added_texts)
            return self.log, texts
        log = self.log[:self.count] + list(added)
        if len(texts) >= self.count:
            return log, texts[:self.count] + added_texts
        return log, texts[:]  # a prefix still, of a log of its own


class ConversationView(collections.abc.Sequence):
    """The first ``count`` messages of a log, read-only. A log is only ever appended to (a
    state that is not the latest copies it before adding), so the view never changes; a
    model request carries one instead of a copy of the whole conversation, which kept a
    long session's turns from staying flat (two copies of every message per turn)."""

    __slots__ = ("_log", "_count")

    def __init__(self, log: list[Message], count: int) -> None:
        self._log = log
        self._count = count

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index):
        if isinstance(index, slice):
            return tuple(self._log[:self._count][index])
        if index < 0:
            index += self._count
        if not 0 <= index < self._count:
            raise IndexError("conversation index out of range")
        return self._log[index]

    def __iter__(self):
        return itertools.islice(self._log, self._count)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, collections.abc.Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(other) == self._count and all(a == b for a, b in zip(self, other))

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"ConversationView({list(self)!r})"


def state(conn: sqlite3.Connection, session_id: str) -> State | None:
    """The latest checkpoint of ``session_id`` as ``conn`` sees it, or None."""
    return read_through(conn, "checkpoints", session_id, lambda: _latest(conn, session_id))


def _latest(conn: sqlite3.Connection, session_id: str) -> State | None:
    head = conn.execute(
        "SELECT sequence, base_sequence, chain FROM checkpoints WHERE session_id = ?"
        " ORDER BY sequence DESC LIMIT 1",
        (session_id,),
    ).fetchone()
    if head is None:
        return None
    memo = getattr(conn, "memo", None)
    key = ("continuation", session_id)
    if memo is not None and head["chain"]:
        remembered = memo.get(key)
        if remembered is not None and remembered.chain == head["chain"]:
            return remembered
    current = _read(conn, session_id, head)
    if memo is not None:
        memo[key] = current
    return current


def messages(conn: sqlite3.Connection, session_id: str) -> tuple[Message, ...]:
    current = state(conn, session_id)
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
    """Write the next checkpoint, as a snapshot of ``conversation``;
    ``last_execution_id=None`` keeps the previous one."""
    return _write(conn, session_id, state(conn, session_id), conversation, whole=True,
                  last_execution_id=last_execution_id, reason=reason, now=now).sequence


def append(
    conn: sqlite3.Connection, session_id: str, message: Message, *, reason: str, now: float
) -> int:
    return append_to(conn, session_id, state(conn, session_id), message, reason=reason, now=now)


def append_to(
    conn: sqlite3.Connection, session_id: str, current: State | None, message: Message, *,
    reason: str, now: float,
) -> int:
    """:func:`append` to ``current``, the state read in this same transaction."""
    return _write(conn, session_id, current, (message,), whole=False,
                  last_execution_id=None, reason=reason, now=now).sequence


def foldable(conn: sqlite3.Connection, session_id: str, current: State | None) -> bool:
    """Does the next pending call of ``current`` (the session's state just read) have a
    final saved result (a fold would write)? A read outside any transaction may be stale:
    the fold itself decides again."""
    if current is None or not current.pending:
        return False
    execution_id = execution_id_for(session_id, current.pending[0].tool_call_id)
    return results.load(conn, execution_id) is not None and _final(conn, execution_id)


def fold_results(conn: sqlite3.Connection, session_id: str, *, reason: str, now: float) -> Fold:
    """Add the saved results of pending calls, in call order, as tool messages."""
    current = state(conn, session_id)
    folded: list[Message] = []
    execution_ids: list[str] = []
    for call in current.pending if current else ():
        execution_id = execution_id_for(session_id, call.tool_call_id)
        record = results.load(conn, execution_id)
        if record is None or not _final(conn, execution_id):
            break  # later calls wait for this one: tool messages keep the call order
        folded.append(results.tool_message(record))
        execution_ids.append(execution_id)
    if not folded:
        return Fold(None)
    sequence = _write(conn, session_id, current, tuple(folded), whole=False,
                      last_execution_id=execution_ids[-1], reason=reason, now=now).sequence
    before = [records.load_operation(conn, execution_id) for execution_id in execution_ids]
    conn.executemany(
        "UPDATE operations SET checkpoint_sequence = ?"
        " WHERE execution_id = ? AND checkpoint_sequence IS NULL",
        [(sequence, execution_id) for execution_id in execution_ids],
    )
    for op in before:  # as read in this transaction (by _final above: no query)
        if op is not None:
            records.operation_written(conn, op, checkpoint_sequence=(
                sequence if op.checkpoint_sequence is None else op.checkpoint_sequence))
    return Fold(sequence, tuple(execution_ids))


def _write(
    conn: sqlite3.Connection,
    session_id: str,
    previous: State | None,
    added: tuple[Message, ...],
    *,
    whole: bool,
    last_execution_id: str | None,
    reason: str,
    now: float,
) -> State:
    """Insert checkpoint ``previous.sequence + 1``: the conversation ``added`` (``whole``)
    or the previous one followed by ``added``; a delta unless a snapshot is due."""
    sequence = previous.sequence + 1 if previous else 1
    if last_execution_id is None:
        last_execution_id = previous.last_execution_id if previous else ""
    entries = failure_policy.table_entries(conn, session_id)
    added_texts = [checkpoint_codec.message_text(message) for message in added]
    data = None
    if not whole and previous is not None:
        data = checkpoint_codec.encode_delta(
            Delta(session_id, sequence, previous.count, last_execution_id, added, entries),
            added_texts)
        if previous.delta_bytes + len(data) > max(previous.snapshot_bytes, SNAPSHOT_BYTES_MIN):
            data = None  # the deltas outgrew their snapshot: write a new one
    if whole or previous is None:
        log, texts = list(added), added_texts
    else:
        log, texts = previous.extended(added, added_texts)
    count = len(log) if whole or previous is None else previous.count + len(added)
    if data is None:
        conversation = tuple(log[:count])
        if len(texts) < count:  # a state read from the store: encode what it lacks, once
            texts.extend(checkpoint_codec.message_text(message)
                         for message in log[len(texts):count])
        data = checkpoint_codec.encode(
            Continuation(session_id, sequence, last_execution_id, conversation, entries),
            texts[:count] if len(texts) > count else texts)
        base_sequence, chain = None, _chain("", data)
        snapshot_sequence, snapshot_bytes, delta_bytes = sequence, len(data), 0
        pending = pending_tool_calls(conversation)
    else:
        base_sequence, chain = previous.snapshot_sequence, _chain(previous.chain, data)
        snapshot_sequence, snapshot_bytes = previous.snapshot_sequence, previous.snapshot_bytes
        delta_bytes = previous.delta_bytes + len(data)
        pending = _pending_after(previous.pending, added)
    conn.execute(
        "INSERT INTO checkpoints (session_id, sequence, format_version, data, size_bytes,"
        " failure_entries, last_execution_id, reason, created_at, base_sequence, chain)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (session_id, sequence, checkpoint_codec.CURRENT_FORMAT_VERSION, data, len(data),
         len(entries), last_execution_id, reason, now, base_sequence, chain),
    )
    written = State(session_id, sequence, last_execution_id, log, count, pending, chain,
                    snapshot_sequence, snapshot_bytes, delta_bytes, texts)
    memo = getattr(conn, "memo", None)
    if memo is not None:
        memo[("continuation", session_id)] = written
    rows = rows_of(conn)
    if rows is not None:  # what this transaction commits (a rollback forgets it)
        rows.put("checkpoints", session_id, written)
    return written


def _read(conn: sqlite3.Connection, session_id: str, head: sqlite3.Row) -> State:
    """Rebuild the latest checkpoint: the snapshot it extends, then each delta in order."""
    base = head["base_sequence"] if head["base_sequence"] is not None else head["sequence"]
    rows = conn.execute(
        "SELECT sequence, base_sequence, data, chain FROM checkpoints"
        " WHERE session_id = ? AND sequence BETWEEN ? AND ? ORDER BY sequence",
        (session_id, base, head["sequence"]),
    ).fetchall()
    if not rows or rows[0]["sequence"] != base or rows[0]["base_sequence"] is not None:
        raise CheckpointFormatError(
            f"session {session_id}: checkpoint {head['sequence']} extends snapshot {base}, "
            "which is not in the store")
    snapshot_data = bytes(rows[0]["data"])
    snapshot = checkpoint_codec.decode(snapshot_data)
    conversation = list(snapshot.messages)
    last_execution_id = snapshot.last_execution_id
    chain = rows[0]["chain"] or _chain("", snapshot_data)  # a store written before chains
    delta_bytes = 0
    for expected, row in enumerate(rows[1:], start=base + 1):
        data = bytes(row["data"])
        delta = checkpoint_codec.decode_delta(data)
        if (row["sequence"], delta.sequence, delta.base_messages) != (
                expected, expected, len(conversation)):
            raise CheckpointFormatError(
                f"session {session_id}: checkpoint delta {row['sequence']} does not extend "
                f"checkpoint {expected - 1} ({len(conversation)} messages)")
        conversation.extend(delta.messages)
        last_execution_id = delta.last_execution_id
        chain = row["chain"] or _chain(chain, data)
        delta_bytes += len(data)
    return State(session_id, head["sequence"], last_execution_id, conversation,
                 len(conversation), pending_tool_calls(tuple(conversation)), chain, base,
                 len(snapshot_data), delta_bytes)


def _chain(previous: str, data: bytes) -> str:
    return hashlib.sha256(previous.encode("ascii") + b"\n" + data).hexdigest()


def _pending_after(pending: tuple[ToolCall, ...], added: tuple[Message, ...]) -> tuple[ToolCall, ...]:
    """``pending_tool_calls(before + added)`` from ``pending_tool_calls(before)``, without
    rescanning ``before`` (results usually answer the first pending calls, in order)."""
    if any(message.role == "assistant" for message in added):
        return pending_tool_calls(added)  # everything that matters is after that message
    if any(message.role == "user" for message in added):
        return ()
    answered = {message.tool_call_id for message in added if message.role == "tool"}
    if not answered:
        return pending
    first = 0
    while first < len(pending) and pending[first].tool_call_id in answered:
        first += 1
    left = answered - {call.tool_call_id for call in pending[:first]}
    remaining = pending[first:]
    if left:
        remaining = tuple(call for call in remaining if call.tool_call_id not in left)
    return remaining


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
    seen: set[str] = set()
    for call in conversation[index].tool_calls:
        if call.tool_call_id not in answered and call.tool_call_id not in seen:
            seen.add(call.tool_call_id)
            pending.append(call)
    return tuple(pending)


def next_step(conversation: tuple[Message, ...]) -> NextStep:
    return _next_step(conversation[-1] if conversation else None,
                      pending_tool_calls(conversation))


def next_step_of(current: State | None) -> NextStep:
    """:func:`next_step` of a state's conversation, from its maintained pending calls."""
    if current is None:
        return NextStep(StepKind.ASK_MODEL)
    return _next_step(current.last_message, current.pending)


def _next_step(last: Message | None, pending: tuple[ToolCall, ...]) -> NextStep:
    if pending:
        return NextStep(StepKind.RUN_CALL, call=pending[0])
    if last is None or last.role != "assistant":
        return NextStep(StepKind.ASK_MODEL)
    if last.tool_calls:
        return NextStep(StepKind.ASK_MODEL)  # every call answered: the model goes on
    return NextStep(StepKind.DONE, final_text=last.content, incomplete=last.incomplete)


def _final(conn: sqlite3.Connection, execution_id: str) -> bool:
    """A saved result is final unless an escalation of it is still undecided or running."""
    op = records.load_operation(conn, execution_id)
    return op is None or op.stage is Stage.RECORDED


def _last_assistant_index(conversation: tuple[Message, ...]) -> int | None:
    for index in range(len(conversation) - 1, -1, -1):
        if conversation[index].role == "assistant":
            return index
    return None
