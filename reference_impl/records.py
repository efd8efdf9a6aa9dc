"""Typed views of the rows the lifecycle reads back: sessions and operations.

Guarantees: rows become frozen values (contract enums, parsed JSON) in one place, so the
rest of the package never handles raw column strings; a missing session is an
:class:`UnknownSessionError`, never a ``None`` that travels.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import sqlite3
from dataclasses import dataclass
from typing import Any, Callable

from harness.contract import (
    ClassifierOutcome,
    DecisionSource,
    Delivery,
    OperationIdentity,
    Permission,
    Rule,
    SessionConfig,
    ToolKind,
    TurnStatus,
    from_json,
)
from reference_impl.errors import UnknownSessionError
from reference_impl.store import MISSING, read_through, rows_of


class Stage(enum.StrEnum):
    """Where an operation is in the pipeline; each step moves it forward exactly once."""

    PREPARED = "prepared"
    DECIDED = "decided"
    WAITING = "waiting"
    """A wait is pending: for permission (no result yet) or for an escalation (the
    sandboxed attempt's result is saved but not yet delivered)."""
    ESCALATING = "escalating"
    """The owner approved running outside the sandbox; that run has not started yet."""
    STARTED = "started"
    RECORDED = "recorded"


@dataclass(frozen=True, slots=True)
class SessionState:
    config: SessionConfig
    """As opened, with the rules and permission version in force now."""
    turn_status: TurnStatus
    cancelled: bool

    @property
    def session_id(self) -> str:
        return self.config.session_id

    @property
    def permission_version(self) -> int:
        return self.config.permission_version

    def tool_kind(self, tool: str) -> ToolKind | None:
        for spec in self.config.tools:
            if spec.name == tool:
                return spec.kind
        return None

    def tool_is_idempotent(self, tool: str) -> bool:
        return any(spec.name == tool and spec.idempotent for spec in self.config.tools)


@dataclass(frozen=True, slots=True)
class OperationRecord:
    session_id: str
    identity: OperationIdentity
    """Its ``permission_version`` is the version of the decision in force: the version at
    prepare time until decided, then the version each (re)decision was taken under."""
    tool: str
    args: dict[str, Any]
    dedup_key: str
    stage: Stage
    permission: Permission
    decided_by: DecisionSource
    classifier_outcome: ClassifierOutcome | None
    wait_trigger: str
    reason: str
    execution_started: bool
    delivery: Delivery
    checkpoint_sequence: int | None
    start_mark: int
    """How many starts the store had recorded when the decision was taken."""

    @property
    def execution_id(self) -> str:
        return self.identity.execution_id

    @property
    def tool_call_id(self) -> str:
        return self.identity.tool_call_id


_OPERATION_FIELDS = tuple(field.name for field in dataclasses.fields(OperationRecord))


def load_session(conn: sqlite3.Connection, session_id: str) -> SessionState:
    return read_through(conn, "sessions", session_id, lambda: _read_session(conn, session_id))


def _read_session(conn: sqlite3.Connection, session_id: str) -> SessionState:
    row = conn.execute("SELECT * FROM sessions WHERE session_id = ?", (session_id,)).fetchone()
    if row is None:
        raise UnknownSessionError(f"session {session_id!r} was never opened on this data dir")
    memo = getattr(conn, "memo", None)
    if memo is None:
        return session_from_row(row)

    def decode(row: sqlite3.Row) -> SessionState:
        # Parsing the config is most of the cost of a step; it is reused only while the
        # very texts it was parsed from are the ones stored (see store.StoreConnection).
        texts = (row["config_json"], row["rules_json"], row["permission_version"])
        remembered = memo.get(("session", session_id))
        if remembered is None or remembered[0] != texts:
            remembered = (texts, _config_from_row(row))
            memo[("session", session_id)] = remembered
        return SessionState(remembered[1], member(TurnStatus, row["turn_status"]),
                            bool(row["cancelled"]))

    return remembered_view(conn, ("session row", session_id), row, decode)


def session_from_row(row: sqlite3.Row) -> SessionState:
    return SessionState(_config_from_row(row), TurnStatus(row["turn_status"]),
                        bool(row["cancelled"]))


def _config_from_row(row: sqlite3.Row) -> SessionConfig:
    config = from_json(SessionConfig, json.loads(row["config_json"]))
    rules = from_json(tuple[Rule, ...], json.loads(row["rules_json"]))
    return dataclasses.replace(config, rules=rules, permission_version=row["permission_version"])


def load_operation(conn: sqlite3.Connection, execution_id: str) -> OperationRecord | None:
    def read() -> OperationRecord | None:
        row = conn.execute(_SELECT_OPERATION, (execution_id,)).fetchone()
        return _operation_from_values(*row, parts=getattr(conn, "memo", None)) if row else None

    return read_through(conn, "operations", execution_id, read)


def operation_inserted(conn: sqlite3.Connection, *values: Any) -> OperationRecord:
    """The record of a row this transaction just inserted with ``values`` (in
    ``_OPERATION_COLUMNS`` order, defaults included), decoded as a read of it would be, and
    kept in the connection's row cache: read back without a query."""
    op = _operation_from_values(*values, parts=getattr(conn, "memo", None))
    rows = rows_of(conn)
    if rows is not None and conn.in_transaction:
        rows.put("operations", op.execution_id, op)
    return op


def operation_written(conn: sqlite3.Connection, before: OperationRecord, **changed: Any) -> None:
    """After a statement of this transaction changed exactly ``changed`` of one operation
    row that was ``before`` (read in this same transaction: the row as it was): the row as it
    is now goes back into the connection's row cache (every write to the table emptied it),
    so the step after the commit reads it without a query. ``permission_version`` changes
    the identity's. Outside a transaction nothing is kept (nothing would vouch for it)."""
    rows = rows_of(conn)
    if rows is None or not conn.in_transaction:
        return
    version = changed.pop("permission_version", None)
    if version is not None and version != before.identity.permission_version:
        changed["identity"] = dataclasses.replace(before.identity, permission_version=version)
    rows.put("operations", before.execution_id, OperationRecord(
        *[changed[name] if name in changed else getattr(before, name)
          for name in _OPERATION_FIELDS]))  # dataclasses.replace, without its field lookup


def remembered_view(conn: sqlite3.Connection, kind: Any, row: sqlite3.Row,
                    decode: Callable[[sqlite3.Row], Any]) -> Any:
    """``decode(row)``, or the view decoded last time for a row of ``kind`` with the very
    same column values (one slot per kind: a step reads the same row over and over; an
    operation's row changes between a step's reads of it, so operations are decoded afresh:
    measured, a memo of them never hit).
    A cache checked against the row just read, never state of its own (see
    store.StoreConnection)."""
    memo = getattr(conn, "memo", None)
    if memo is None:
        return decode(row)
    values = tuple(row)
    remembered = memo.get(kind)
    if remembered is not None and remembered[0] == values:
        return remembered[1]
    view = decode(row)
    memo[kind] = (values, view)
    return view


_OPERATION_COLUMNS = (
    "session_id", "execution_id", "tool_call_id", "args_digest", "permission_version", "tool",
    "args_json", "dedup_key", "stage", "permission", "decided_by", "classifier_outcome",
    "wait_trigger", "reason", "execution_started", "delivery", "checkpoint_sequence",
    "start_mark",
)
_SELECT_OPERATION = (f"SELECT {', '.join(_OPERATION_COLUMNS)} FROM operations"
                     " WHERE execution_id = ?")
"""The columns an :class:`OperationRecord` is made of, by position: a ``sqlite3.Row`` looks
each name up by comparing it with every column's, which cost more than the rest of the
decoding."""


def operation_from_row(row: sqlite3.Row) -> OperationRecord:
    return _operation_from_values(*[row[column] for column in _OPERATION_COLUMNS])


def _operation_from_values(
    session_id: str, execution_id: str, tool_call_id: str, args_digest: str,
    permission_version: int, tool: str, args_json: str, dedup_key: str, stage: str,
    permission: str, decided_by: str, classifier_outcome: str | None, wait_trigger: str,
    reason: str, execution_started: int, delivery: str, checkpoint_sequence: int | None,
    start_mark: int, *, parts: dict[object, object] | None = None,
) -> OperationRecord:
    """``parts``: a connection's memo; an operation read again (after each of its steps)
    reuses the identity and parsed arguments of its previous reading when their columns are
    the same texts (one slot: the operation read last)."""
    identity_values = (execution_id, tool_call_id, args_digest, permission_version, args_json)
    remembered = parts.get("operation parts") if parts is not None else None
    if remembered is not None and remembered[0] == identity_values:
        identity, args = remembered[1], remembered[2]
    else:
        identity = OperationIdentity(
            execution_id=execution_id,
            tool_call_id=tool_call_id,
            args_digest=args_digest,
            permission_version=permission_version,
        )
        args = json.loads(args_json)
        if parts is not None:
            parts["operation parts"] = (identity_values, identity, args)
    return OperationRecord(
        session_id=session_id,
        identity=identity,
        tool=tool,
        args=args,
        dedup_key=dedup_key,
        stage=member(Stage, stage),
        permission=member(Permission, permission),
        decided_by=member(DecisionSource, decided_by),
        classifier_outcome=_optional(ClassifierOutcome, classifier_outcome),
        wait_trigger=wait_trigger,
        reason=reason,
        execution_started=bool(execution_started),
        delivery=member(Delivery, delivery),
        checkpoint_sequence=checkpoint_sequence,
        start_mark=start_mark,
    )


def set_turn_status(conn: sqlite3.Connection, session_id: str, status: TurnStatus, *,
                    uncancel: bool = False) -> None:
    """Set the turn's status (``uncancel``: and clear a cancellation: a new turn runs)."""
    rows = rows_of(conn)
    before = rows.get("sessions", session_id) if rows is not None else MISSING
    if uncancel:
        conn.execute("UPDATE sessions SET turn_status = ?, cancelled = 0 WHERE session_id = ?",
                     (status.value, session_id))
    else:
        conn.execute("UPDATE sessions SET turn_status = ? WHERE session_id = ?",
                     (status.value, session_id))
    if before is not MISSING:  # the row as this statement left it
        rows.put("sessions", session_id, SessionState(
            before.config, status, False if uncancel else before.cancelled))


def _optional(enum_type: type[enum.StrEnum], value: str | None) -> Any:
    return member(enum_type, value) if value is not None else None


_MEMBERS: dict[type[enum.Enum], dict[Any, enum.Enum]] = {}


def member(enum_type: type[enum.Enum], value: Any) -> Any:
    """``enum_type(value)`` through a dict (calling an enum class is slow, and every row a
    step reads holds several); a value that names no member raises the same ValueError."""
    members = _MEMBERS.get(enum_type)
    if members is None:
        members = _MEMBERS[enum_type] = {m.value: m for m in enum_type}
    found = members.get(value)
    return found if found is not None else enum_type(value)
