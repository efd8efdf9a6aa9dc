"""How failures are keyed, remembered, limited and retried (docs/lifecycle.md, L1.x).

Guarantees:

* the dedup key of a Bash call is its canonical arguments without ``description`` and
  nothing else removed; any other tool keeps every field (a user tool's own
  ``description`` included); command text is never normalised (L1.3-L1.5);
* every failure of an operation is logged once (one row per identity) in the durable
  failure history, and the per-session recent-failure table keeps at most
  ``FAILURE_TABLE_CAPACITY`` (16, fixed) entries, the least recently touched evicted first (L1.1);
  eviction deletes a table row and nothing else (L1.2);
* the repeat guard keeps its own counts per (session, dedup key, permission version), apart
  from the table, so eviction cannot reset them; only definite failures (``failed``,
  ``param_error``), unknown outcomes and denials by a rule, the default, an owner or the
  guard itself consume the budget, not classifier denials or faults, cancellations or
  voided decisions (L3.9); a success of the key starts its count again;
* a tool result's text never changes the recorded outcome: only the host's status and the
  structured error kind do (X5);
* automatic retries happen only when the tool certainly did not run (``ToolUnavailable``)
  or the error is transient and the tool declares idempotency, and at most
  ``auto_retries_max`` times (L1.8).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

from harness.contract import (
    DecisionSource,
    FailureKind,
    Outcome,
    ToolKind,
    ToolResult,
    ToolStatus,
    args_digest,
)

from reference_impl.store import read_through

BASH_TOOL_NAME = "Bash"
BASH_DISPLAY_ONLY_FIELD = "description"


@dataclass(frozen=True, slots=True)
class FailureEntry:
    dedup_key: str
    tool: str
    failure_kind: FailureKind
    count: int
    last_execution_id: str


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """What the host concludes from one finished invocation (or from the lack of one)."""

    outcome: Outcome
    failure_kind: FailureKind | None
    execution_started: bool
    reconciliation_required: bool
    reason: str
    escalation_requested: bool = False


# --------------------------------------------------------------------------- dedup key


def is_bash(tool: str, kind: ToolKind | None) -> bool:
    return kind is ToolKind.BASH or tool == BASH_TOOL_NAME


def dedup_key(tool: str, kind: ToolKind | None, args: dict[str, Any],
              digest: str | None = None) -> str:
    """``digest``: ``args_digest(tool, args)`` when the caller has it (every tool but Bash
    keeps all its arguments, so its key is that digest)."""
    if is_bash(tool, kind):
        args = {name: value for name, value in args.items() if name != BASH_DISPLAY_ONLY_FIELD}
    elif digest is not None:
        return digest
    return args_digest(tool, args)


# --------------------------------------------------------------------------- history + table


_BUDGET_FREE_DENIALS = (
    DecisionSource.CLASSIFIER,  # risk denials must be able to reach the approval fallback
    DecisionSource.CANCELLATION,
    DecisionSource.REVALIDATION,
)
_BUDGET_CONSUMING_FAILURES = (FailureKind.FAILED, FailureKind.PARAM_ERROR, FailureKind.UNKNOWN)
"""Results that say the call itself did not work (or may not have): repeating it verbatim
is refused past the limit. An unknown outcome counts because it must not be retried blindly."""


def consumes_repeat_budget(
    outcome: Outcome, failure_kind: FailureKind | None, decided_by: DecisionSource
) -> bool:
    if outcome is Outcome.NOT_STARTED:
        return (failure_kind is FailureKind.PERMISSION_DENIED
                and decided_by not in _BUDGET_FREE_DENIALS)
    return (outcome in (Outcome.FAILED, Outcome.UNKNOWN)
            and failure_kind in _BUDGET_CONSUMING_FAILURES)


def record_failure(
    conn: sqlite3.Connection,
    *,
    session_id: str,
    execution_id: str,
    dedup_key: str,
    tool: str,
    failure_kind: FailureKind,
    permission_version: int,
    consumes_budget: bool,
    capacity: int,
    now: float,
) -> bool:
    """Log the failure of one operation; False when it was already logged (a replay)."""
    inserted = conn.execute(
        "INSERT OR IGNORE INTO failure_events (session_id, execution_id, dedup_key, tool,"
        " failure_kind, permission_version, at) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (session_id, execution_id, dedup_key, tool, failure_kind.value, permission_version, now),
    ).rowcount
    if not inserted:
        return False
    if consumes_budget:
        conn.execute(
            "INSERT INTO repeat_budget (session_id, dedup_key, permission_version, failures)"
            " VALUES (?, ?, ?, 1) ON CONFLICT (session_id, dedup_key, permission_version)"
            " DO UPDATE SET failures = failures + 1",
            (session_id, dedup_key, permission_version),
        )
    conn.execute(
        "INSERT INTO failure_table (session_id, dedup_key, tool, failure_kind, count,"
        " last_execution_id, touched) VALUES (?, ?, ?, ?, 1, ?, ?)"
        " ON CONFLICT (session_id, dedup_key) DO UPDATE SET failure_kind = excluded.failure_kind,"
        " count = count + 1, last_execution_id = excluded.last_execution_id,"
        " touched = excluded.touched",
        (session_id, dedup_key, tool, failure_kind.value, execution_id,
         _next_touch(conn, session_id)),
    )
    _evict_beyond(conn, session_id, capacity)
    return True


def record_success(conn: sqlite3.Connection, session_id: str, dedup_key: str) -> None:
    """A call that worked is no repeat of earlier failures: its count starts again."""
    if not _counts_repeats(conn, session_id):
        return  # no count to reset (the common case: a session whose calls worked)
    conn.execute(
        "DELETE FROM repeat_budget WHERE session_id = ? AND dedup_key = ?", (session_id, dedup_key)
    )


def _counts_repeats(conn: sqlite3.Connection, session_id: str) -> bool:
    """Does the session have any repeat-guard count (through the row cache: read again only
    after a write to the counts)?"""
    return read_through(conn, "repeat_budget", ("any", session_id), lambda: conn.execute(
        "SELECT 1 FROM repeat_budget WHERE session_id = ? LIMIT 1", (session_id,)
    ).fetchone() is not None)


def repeat_budget_spent(
    conn: sqlite3.Connection, session_id: str, dedup_key: str, permission_version: int, limit: int
) -> bool:
    if not _counts_repeats(conn, session_id):
        return False
    row = conn.execute(
        "SELECT failures FROM repeat_budget WHERE session_id = ? AND dedup_key = ?"
        " AND permission_version = ?",
        (session_id, dedup_key, permission_version),
    ).fetchone()
    return row is not None and row["failures"] >= limit


def table_entries(conn: sqlite3.Connection, session_id: str) -> tuple[FailureEntry, ...]:
    """The session's recent-failure table, least recently touched first."""
    def read() -> tuple[FailureEntry, ...]:
        rows = conn.execute(
            "SELECT * FROM failure_table WHERE session_id = ? ORDER BY touched",
            (session_id,),
        ).fetchall()
        return tuple(
            FailureEntry(row["dedup_key"], row["tool"], FailureKind(row["failure_kind"]),
                         row["count"], row["last_execution_id"])
            for row in rows
        )

    return read_through(conn, "failure_table", session_id, read)


def replace_table(
    conn: sqlite3.Connection, session_id: str, entries: tuple[FailureEntry, ...], capacity: int
) -> None:
    """Install a loaded checkpoint's table; only the ``capacity`` most recent entries fit."""
    conn.execute("DELETE FROM failure_table WHERE session_id = ?", (session_id,))
    kept = entries[-capacity:] if capacity > 0 else ()
    for touched, entry in enumerate(kept, start=1):
        conn.execute(
            "INSERT OR REPLACE INTO failure_table (session_id, dedup_key, tool, failure_kind,"
            " count, last_execution_id, touched) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (session_id, entry.dedup_key, entry.tool, entry.failure_kind.value, entry.count,
             entry.last_execution_id, touched),
        )


def _next_touch(conn: sqlite3.Connection, session_id: str) -> int:
    (latest,) = conn.execute(
        "SELECT COALESCE(MAX(touched), 0) FROM failure_table WHERE session_id = ?", (session_id,)
    ).fetchone()
    return latest + 1


def _evict_beyond(conn: sqlite3.Connection, session_id: str, capacity: int) -> None:
    conn.execute(
        "DELETE FROM failure_table WHERE session_id = ? AND touched NOT IN ("
        " SELECT touched FROM failure_table WHERE session_id = ? ORDER BY touched DESC LIMIT ?)",
        (session_id, session_id, max(capacity, 0)),
    )


# --------------------------------------------------------------------------- tool results


def classify_tool_result(result: ToolResult) -> ToolOutcome:
    """The host's reading of a returned result: structured status only, never its text."""
    if result.status is ToolStatus.OK:
        return ToolOutcome(Outcome.SUCCEEDED, None, True, False, "")
    if result.escalation_requested:
        # L2.10/L2.11: the sandboxed attempt ran (its effects may be partial) and asking to
        # run again outside the sandbox is not an authorization: nothing is re-run.
        return ToolOutcome(
            Outcome.FAILED,
            FailureKind.PERMISSION_DENIED,
            True,
            False,
            "the sandboxed attempt ran and may have had partial effects; running outside the "
            "sandbox needs its own permission, which a retry does not grant",
            escalation_requested=True,
        )
    if result.error_kind is FailureKind.UNKNOWN:
        return ToolOutcome(
            Outcome.UNKNOWN,
            FailureKind.UNKNOWN,
            True,
            True,
            "the tool could not confirm what it did; reconcile before acting again",
        )
    kind = result.error_kind or FailureKind.FAILED
    return ToolOutcome(Outcome.FAILED, kind, True, False, f"the tool failed ({kind.value})")


def tool_unavailable_outcome(message: str) -> ToolOutcome:
    return ToolOutcome(
        Outcome.NOT_STARTED,
        FailureKind.TRANSIENT,
        False,
        False,
        f"the tool could not be started, so it did not run: {message}",
    )


def invocation_error_outcome(error: Exception) -> ToolOutcome:
    """The world raised mid-invocation: the tool may have run, so the outcome is unknown."""
    return ToolOutcome(
        Outcome.UNKNOWN,
        FailureKind.UNKNOWN,
        True,
        True,
        f"the invocation broke ({type(error).__name__}: {error}); the effect is unknown",
    )


def may_retry_result(
    result: ToolResult, idempotent: bool, retries_done: int, retries_max: int
) -> bool:
    return (
        result.status is ToolStatus.ERROR
        and result.error_kind is FailureKind.TRANSIENT
        and not result.escalation_requested
        and idempotent
        and retries_done < retries_max
    )


def may_retry_unavailable(retries_done: int, retries_max: int) -> bool:
    return retries_done < retries_max
