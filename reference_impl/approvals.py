"""Persisted approval waits (L3.1-L3.4, L3.10).

Guarantees:

* a permission wait is created only for an ``ask`` decision, which permissions hand out
  only to interactive owners who can approve; hard constraints and explicit denies never
  become ``ask`` and so never become waits (L3.4, L3.10);
* an escalation wait (run again outside the sandbox) is created only for such owners too:
  escalation is never granted by a retry or a classifier, only by its own approval (L2.11);
* the wait row (with the operation moved to ``waiting`` in the same transaction) is
  committed before the prompt is shown; at most one pending wait per operation;
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
from reference_impl.store import read_through


PERMISSION = "permission"
ESCALATION = "escalation"


@dataclass(frozen=True, slots=True)
class WaitRecord:
    wait_id: str
    session_id: str
    execution_id: str
    purpose: str
    tool_call_id: str
    reason: str
    trigger: str
    permission_version: int
    status: WaitStatus
    prompted: bool


def wait_id_for(execution_id: str, purpose: str, number: int) -> str:
    """``wait-<execution id>`` for the first permission wait; later or other waits of the
    same operation (a wait withdrawn and asked again, an escalation) get a suffix."""
    suffix = "" if purpose == PERMISSION else f"-{purpose}"
    return f"wait-{execution_id}{suffix}" + (f"-{number}" if number > 1 else "")


def create(conn: sqlite3.Connection, op: OperationRecord, *, now: float) -> WaitRecord | None:
    """Move a decided ``ask`` operation to ``waiting`` and persist its wait; None if another
    instance already did."""
    moved = conn.execute(
        "UPDATE operations SET stage = ? WHERE execution_id = ? AND stage = ? AND permission = ?",
        (Stage.WAITING.value, op.execution_id, Stage.DECIDED.value, Permission.ASK.value),
    ).rowcount
    if not moved:
        return None
    return _insert(conn, op, PERMISSION, op.reason, op.wait_trigger or op.decided_by.value,
                   op.identity.permission_version, now)


def create_escalation(
    conn: sqlite3.Connection, op: OperationRecord, *, reason: str, permission_version: int,
    now: float,
) -> WaitRecord:
    """Persist the wait for running ``op`` outside the sandbox (the caller moves the
    operation to ``waiting`` in the same transaction)."""
    return _insert(conn, op, ESCALATION, reason, ESCALATION, permission_version, now)


def _insert(
    conn: sqlite3.Connection, op: OperationRecord, purpose: str, reason: str, trigger: str,
    permission_version: int, now: float,
) -> WaitRecord:
    (earlier,) = conn.execute(
        "SELECT COUNT(*) FROM approval_waits WHERE execution_id = ? AND purpose = ?",
        (op.execution_id, purpose),
    ).fetchone()
    wait = WaitRecord(
        wait_id=wait_id_for(op.execution_id, purpose, earlier + 1),
        session_id=op.session_id,
        execution_id=op.execution_id,
        purpose=purpose,
        tool_call_id=op.tool_call_id,
        reason=reason,
        trigger=trigger,
        permission_version=permission_version,
        status=WaitStatus.PENDING,
        prompted=False,
    )
    conn.execute(
        "INSERT INTO approval_waits (wait_id, session_id, execution_id, purpose, tool_call_id,"
        " reason, trigger, permission_version, status, prompted, created_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?)",
        (wait.wait_id, wait.session_id, wait.execution_id, purpose, wait.tool_call_id,
         wait.reason, wait.trigger, wait.permission_version, wait.status.value, now),
    )
    return wait


def load(conn: sqlite3.Connection, wait_id: str) -> WaitRecord | None:
    row = conn.execute("SELECT * FROM approval_waits WHERE wait_id = ?", (wait_id,)).fetchone()
    return _from_row(row) if row else None


def for_operation(
    conn: sqlite3.Connection, execution_id: str, purpose: str = PERMISSION
) -> WaitRecord | None:
    """The latest wait of ``purpose`` for the operation (the one its decision rests on)."""
    row = conn.execute(
        "SELECT * FROM approval_waits WHERE execution_id = ? AND purpose = ?"
        " ORDER BY rowid DESC LIMIT 1",
        (execution_id, purpose),
    ).fetchone()
    return _from_row(row) if row else None


def has_pending(conn: sqlite3.Connection, execution_id: str, session_id: str = "") -> bool:
    """Does the operation have a pending wait? With its ``session_id``, answered from the
    session's pending waits (one read per session while no wait changes, not one per
    operation)."""
    if session_id:
        return any(wait.execution_id == execution_id
                   for wait in pending_of_session(conn, session_id))

    def read() -> bool:
        return conn.execute(
            "SELECT 1 FROM approval_waits WHERE execution_id = ? AND status = ?",
            (execution_id, WaitStatus.PENDING.value),
        ).fetchone() is not None

    return read_through(conn, "approval_waits", ("has_pending", execution_id), read)


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


REJECTED_REASON = "rejected by the owner; not executed"
MOVED_ON_REASON = ("the owner sent a new message instead of answering the approval; "
                   "not executed")


def pending_of_session(conn: sqlite3.Connection, session_id: str) -> tuple[WaitRecord, ...]:
    def read() -> tuple[WaitRecord, ...]:
        rows = conn.execute(
            "SELECT * FROM approval_waits WHERE session_id = ? AND status = ? ORDER BY rowid",
            (session_id, WaitStatus.PENDING.value),
        ).fetchall()
        return tuple(_from_row(row) for row in rows)

    return read_through(conn, "approval_waits", ("pending", session_id), read)


def apply_answer(conn: sqlite3.Connection, wait: WaitRecord, approve: bool, *, now: float,
                 rejection_reason: str = REJECTED_REASON) -> bool:
    """Apply the owner's answer; False when the wait was already answered (nothing changes)."""
    status = WaitStatus.APPROVED if approve else WaitStatus.REJECTED
    answered = conn.execute(
        "UPDATE approval_waits SET status = ?, answered_at = ? WHERE wait_id = ? AND status = ?",
        (status.value, now, wait.wait_id, WaitStatus.PENDING.value),
    ).rowcount
    if not answered:
        return False
    if wait.purpose == ESCALATION:
        _apply_escalation_answer(conn, wait, approve)
        return True
    if approve:
        permission, reason = Permission.ALLOW, "approved by the owner"
    else:
        permission, reason = Permission.DENY, rejection_reason
    conn.execute(
        "UPDATE operations SET stage = ?, permission = ?, decided_by = ?, reason = ?,"
        " permission_version = ? WHERE execution_id = ? AND stage = ?",
        (Stage.DECIDED.value, permission.value, DecisionSource.APPROVAL.value, reason,
         wait.permission_version, wait.execution_id, Stage.WAITING.value),
    )
    # The counts reset are those of the period the prompt was shown in (the wait's version).
    if approve:
        denial_counters.reset_consecutive(conn, wait.session_id, wait.permission_version)
    if denial_counters.trigger_resets_cumulative(wait.trigger):
        denial_counters.reset_cumulative(conn, wait.session_id, wait.permission_version)
    return True


def withdraw(
    conn: sqlite3.Connection, wait: WaitRecord, reason: str, *, redecide: bool, now: float
) -> bool:
    """Close a pending wait before anyone was asked, because the rules changed meanwhile.

    ``redecide=False``: the rules in force forbid the operation outright (a deny rule or
    hard constraint was added), so no approval could lift them: it is refused
    (revalidation). ``redecide=True``: only the version changed, so the decision that
    asked (e.g. a fallback armed by the old period's counts) is void and the operation is
    decided again under the rules in force. Nothing is reset either way."""
    closed = conn.execute(
        "UPDATE approval_waits SET status = ?, answered_at = ? WHERE wait_id = ? AND status = ?",
        (WaitStatus.REJECTED.value, now, wait.wait_id, WaitStatus.PENDING.value),
    ).rowcount
    if not closed:
        return False
    if wait.purpose == ESCALATION:
        _apply_escalation_answer(conn, wait, approve=False)
    elif redecide:
        conn.execute(
            "UPDATE operations SET stage = ?, permission = ?, decided_by = ?, reason = ?,"
            " classifier_outcome = NULL, wait_trigger = '' WHERE execution_id = ? AND stage = ?",
            (Stage.PREPARED.value, Permission.ASK.value, DecisionSource.DEFAULT_ASK.value, "",
             wait.execution_id, Stage.WAITING.value),
        )
    else:
        conn.execute(
            "UPDATE operations SET stage = ?, permission = ?, decided_by = ?, reason = ?"
            " WHERE execution_id = ? AND stage = ?",
            (Stage.DECIDED.value, Permission.DENY.value, DecisionSource.REVALIDATION.value,
             reason, wait.execution_id, Stage.WAITING.value),
        )
    return True


def _apply_escalation_answer(conn: sqlite3.Connection, wait: WaitRecord, approve: bool) -> None:
    if approve:  # the unsandboxed run still has to pass revalidation and its start claim
        conn.execute(
            "UPDATE operations SET stage = ?, decided_by = ?, permission_version = ?, reason = ?"
            " WHERE execution_id = ? AND stage = ?",
            (Stage.ESCALATING.value, DecisionSource.APPROVAL.value, wait.permission_version,
             "running outside the sandbox was approved by the owner", wait.execution_id,
             Stage.WAITING.value),
        )
        return
    # The sandboxed attempt's saved result stands; it is now final and can be delivered.
    conn.execute(
        "UPDATE operations SET stage = ? WHERE execution_id = ? AND stage = ?",
        (Stage.RECORDED.value, wait.execution_id, Stage.WAITING.value),
    )
    conn.execute(
        "UPDATE result_records SET reason = ? WHERE execution_id = ?",
        ("the owner refused to run it outside the sandbox; the sandboxed attempt ran and may "
         "have had partial effects", wait.execution_id),
    )


def _from_row(row: sqlite3.Row) -> WaitRecord:
    return WaitRecord(
        wait_id=row["wait_id"],
        session_id=row["session_id"],
        execution_id=row["execution_id"],
        purpose=row["purpose"],
        tool_call_id=row["tool_call_id"],
        reason=row["reason"],
        trigger=row["trigger"],
        permission_version=row["permission_version"],
        status=WaitStatus(row["status"]),
        prompted=bool(row["prompted"]),
    )
