"""Persisted approval waits (L3.1-L3.4, L3.10).

Guarantees:

* a wait is created only for an ``ask`` decision, which permissions hand out only to
  interactive owners who can approve; hard constraints and explicit denies never become
  ``ask`` and so never become waits;
* the wait row (with the operation moved to ``waiting`` in the same transaction) is
  committed before the prompt is shown; one wait per operation (``wait-<execution id>``);
* an answer applies exactly once: the ``pending -> approved|rejected`` transition, the
  operation's new decision (``decided_by=approval``, bound to the version the wait was
  created under) and the counter resets happen in one transaction guarded by the wait's
  status, so a second answer, or an answer replayed after a crash, changes nothing.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from harness.contract import (
    ApprovalPrompt,
    DecisionSource,
    Permission,
    WaitStatus,
)
from reference_impl import denial_counters
from reference_impl.records import OperationRecord, Stage


@dataclass(frozen=True, slots=True)
class WaitRecord:
    wait_id: str
    session_id: str
    execution_id: str
    tool_call_id: str
    reason: str
    trigger: str
    permission_version: int
    status: WaitStatus
    prompted: bool


def wait_id_for(execution_id: str) -> str:
    return f"wait-{execution_id}"


def create(conn: sqlite3.Connection, op: OperationRecord, *, now: float) -> WaitRecord | None:
    """Move a decided ``ask`` operation to ``waiting`` and persist its wait; None if another
    instance already did."""
    moved = conn.execute(
        "UPDATE operations SET stage = ? WHERE execution_id = ? AND stage = ? AND permission = ?",
        (Stage.WAITING.value, op.execution_id, Stage.DECIDED.value, Permission.ASK.value),
    ).rowcount
    if not moved:
        return None
    wait = WaitRecord(
        wait_id=wait_id_for(op.execution_id),
        session_id=op.session_id,
        execution_id=op.execution_id,
        tool_call_id=op.tool_call_id,
        reason=op.reason,
        trigger=op.wait_trigger or op.decided_by.value,
        permission_version=op.decided_version if op.decided_version is not None
        else op.identity.permission_version,
        status=WaitStatus.PENDING,
        prompted=False,
    )
    conn.execute(
        "INSERT INTO approval_waits (wait_id, session_id, execution_id, tool_call_id, reason,"
        " trigger, permission_version, status, prompted, created_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, ?)",
        (wait.wait_id, wait.session_id, wait.execution_id, wait.tool_call_id, wait.reason,
         wait.trigger, wait.permission_version, wait.status.value, now),
    )
    return wait


def load(conn: sqlite3.Connection, wait_id: str) -> WaitRecord | None:
    row = conn.execute("SELECT * FROM approval_waits WHERE wait_id = ?", (wait_id,)).fetchone()
    return _from_row(row) if row else None


def for_operation(conn: sqlite3.Connection, execution_id: str) -> WaitRecord | None:
    row = conn.execute(
        "SELECT * FROM approval_waits WHERE execution_id = ?", (execution_id,)
    ).fetchone()
    return _from_row(row) if row else None


def unprompted(conn: sqlite3.Connection) -> tuple[WaitRecord, ...]:
    rows = conn.execute(
        "SELECT * FROM approval_waits WHERE status = ? AND prompted = 0 ORDER BY rowid",
        (WaitStatus.PENDING.value,),
    ).fetchall()
    return tuple(_from_row(row) for row in rows)


def mark_prompted(conn: sqlite3.Connection, wait_id: str) -> None:
    conn.execute("UPDATE approval_waits SET prompted = 1 WHERE wait_id = ?", (wait_id,))


def prompt_for(wait: WaitRecord, op: OperationRecord) -> ApprovalPrompt:
    return ApprovalPrompt(
        wait_id=wait.wait_id,
        session_id=wait.session_id,
        execution_id=wait.execution_id,
        tool_call_id=wait.tool_call_id,
        tool=op.tool,
        args=op.args,
        reason=wait.reason,
    )


def apply_answer(conn: sqlite3.Connection, wait: WaitRecord, approve: bool, *, now: float) -> bool:
    """Apply the owner's answer; False when the wait was already answered (nothing changes)."""
    status = WaitStatus.APPROVED if approve else WaitStatus.REJECTED
    answered = conn.execute(
        "UPDATE approval_waits SET status = ?, answered_at = ? WHERE wait_id = ? AND status = ?",
        (status.value, now, wait.wait_id, WaitStatus.PENDING.value),
    ).rowcount
    if not answered:
        return False
    if approve:
        permission, reason = Permission.ALLOW, "approved by the owner"
    else:
        permission, reason = Permission.DENY, "rejected by the owner; not executed"
    conn.execute(
        "UPDATE operations SET stage = ?, permission = ?, decided_by = ?, reason = ?,"
        " decided_version = ? WHERE execution_id = ? AND stage = ?",
        (Stage.DECIDED.value, permission.value, DecisionSource.APPROVAL.value, reason,
         wait.permission_version, wait.execution_id, Stage.WAITING.value),
    )
    if approve:
        denial_counters.reset_consecutive(conn, wait.session_id, wait.permission_version)
    if denial_counters.trigger_resets_cumulative(wait.trigger):
        denial_counters.reset_cumulative(conn, wait.session_id, wait.permission_version)
    return True


def _from_row(row: sqlite3.Row) -> WaitRecord:
    return WaitRecord(
        wait_id=row["wait_id"],
        session_id=row["session_id"],
        execution_id=row["execution_id"],
        tool_call_id=row["tool_call_id"],
        reason=row["reason"],
        trigger=row["trigger"],
        permission_version=row["permission_version"],
        status=WaitStatus(row["status"]),
        prompted=bool(row["prompted"]),
    )
