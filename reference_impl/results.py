"""The authoritative result record of an operation (L4.5, L4.7, X2).

Guarantees: at most one result record per operation identity; it binds the identity
(execution id, tool call id, argument digest, permission version), the outcome,
``execution_started``, the result digest and the error reason. It is written in the same
transaction that moves the operation to ``recorded`` (and logs its failure, if any), and
only from the stage the caller expects, so a second instance or a replay cannot write a
second one. Diagnostics and display state live elsewhere and cannot alter it.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from harness.contract import (
    FAILURE_TABLE_CAPACITY,
    DecisionSource,
    Delivery,
    FailureKind,
    Message,
    Outcome,
)
from reference_impl import failure_policy, records
from reference_impl.failure_policy import ToolOutcome
from reference_impl.records import OperationRecord, SessionState, Stage
from reference_impl.store import read_through, rows_of


@dataclass(frozen=True, slots=True)
class ResultRecord:
    execution_id: str
    tool_call_id: str
    outcome: Outcome
    failure_kind: FailureKind | None
    execution_started: bool
    reconciliation_required: bool
    result_digest: str | None
    reason: str
    output: str
    attempts: int


def not_executed(op: OperationRecord) -> ToolOutcome:
    """The outcome of an operation that was refused before it could start."""
    cancelled = op.decided_by is DecisionSource.CANCELLATION
    failure = None if cancelled else FailureKind.PERMISSION_DENIED
    return ToolOutcome(Outcome.NOT_STARTED, failure, False, False, op.reason)


def save(
    conn: sqlite3.Connection,
    session: SessionState,
    op: OperationRecord,
    outcome: ToolOutcome,
    *,
    from_stage: Stage,
    to_stage: Stage = Stage.RECORDED,
    output: str = "",
    result_digest: str | None = None,
    attempts: int = 0,
    now: float,
) -> bool:
    """Record the result; False when the operation was no longer at ``from_stage``.

    ``to_stage=WAITING`` keeps a sandboxed attempt's result undelivered while its escalation
    waits for the owner; the run that follows an approved escalation replaces the record
    (still one per identity) and adds its attempts."""
    current = records.load_operation(conn, op.execution_id)  # the row, in this transaction
    previous = load(conn, op.execution_id)  # an escalation's second run adds its attempts
    moved = conn.execute(
        "UPDATE operations SET stage = ?, delivery = 'recorded', execution_started = ?"
        " WHERE execution_id = ? AND stage = ?",
        (to_stage.value, int(outcome.execution_started), op.execution_id, from_stage.value),
    ).rowcount
    if not moved:
        return False
    if current is not None:
        records.operation_written(conn, current, stage=to_stage, delivery=Delivery.RECORDED,
                                  execution_started=outcome.execution_started)
    identity = op.identity
    conn.execute(
        "INSERT INTO result_records (execution_id, session_id, tool_call_id, args_digest,"
        " permission_version, outcome, failure_kind, execution_started,"
        " reconciliation_required, result_digest, reason, output, attempts, recorded_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (execution_id) DO UPDATE SET outcome = excluded.outcome,"
        " failure_kind = excluded.failure_kind, execution_started = excluded.execution_started,"
        " reconciliation_required = excluded.reconciliation_required,"
        " result_digest = excluded.result_digest, reason = excluded.reason,"
        " output = excluded.output, attempts = attempts + excluded.attempts,"
        " recorded_at = excluded.recorded_at",
        (identity.execution_id, op.session_id, identity.tool_call_id, identity.args_digest,
         identity.permission_version, outcome.outcome.value,
         outcome.failure_kind.value if outcome.failure_kind else None,
         int(outcome.execution_started), int(outcome.reconciliation_required), result_digest,
         outcome.reason, output, attempts, now),
    )
    rows = rows_of(conn)
    if rows is not None:  # the record as this transaction leaves it, read without a query
        rows.put("result_records", identity.execution_id, ResultRecord(
            identity.execution_id, identity.tool_call_id, outcome.outcome, outcome.failure_kind,
            outcome.execution_started, outcome.reconciliation_required, result_digest,
            outcome.reason, output, attempts + (previous.attempts if previous else 0)))
    if outcome.failure_kind is not None:
        failure_policy.record_failure(
            conn,
            session_id=op.session_id,
            execution_id=op.execution_id,
            dedup_key=op.dedup_key,
            tool=op.tool,
            failure_kind=outcome.failure_kind,
            permission_version=session.permission_version,
            consumes_budget=failure_policy.consumes_repeat_budget(
                outcome.outcome, outcome.failure_kind, op.decided_by
            ),
            capacity=FAILURE_TABLE_CAPACITY,
            now=now,
        )
    if outcome.outcome is Outcome.SUCCEEDED:
        failure_policy.record_success(conn, op.session_id, op.dedup_key)
    return True


def load(conn: sqlite3.Connection, execution_id: str) -> ResultRecord | None:
    def read() -> ResultRecord | None:
        row = conn.execute(
            "SELECT * FROM result_records WHERE execution_id = ?", (execution_id,)
        ).fetchone()
        return None if row is None else records.remembered_view(conn, "result", row,
                                                                  record_from_row)

    return read_through(conn, "result_records", execution_id, read)


def record_from_row(row: sqlite3.Row) -> ResultRecord:
    return ResultRecord(
        execution_id=row["execution_id"],
        tool_call_id=row["tool_call_id"],
        outcome=records.member(Outcome, row["outcome"]),
        failure_kind=(records.member(FailureKind, row["failure_kind"]) if row["failure_kind"]
                      else None),
        execution_started=bool(row["execution_started"]),
        reconciliation_required=bool(row["reconciliation_required"]),
        result_digest=row["result_digest"],
        reason=row["reason"],
        output=row["output"],
        attempts=row["attempts"],
    )


def tool_message(record: ResultRecord) -> Message:
    """The host's result as the model will read it (X3): status fields plus output/reason."""
    if record.outcome is Outcome.NOT_STARTED:
        content = f"not executed: {record.reason}"
    elif record.outcome is Outcome.UNKNOWN:
        content = f"outcome unknown, reconciliation required: {record.reason}"
    elif record.outcome is Outcome.FAILED:
        content = "\n".join(part for part in (record.output, record.reason) if part)
    else:
        content = record.output
    return Message(
        role="tool",
        content=content,
        tool_call_id=record.tool_call_id,
        outcome=record.outcome,
        failure_kind=record.failure_kind,
    )
