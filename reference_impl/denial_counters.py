"""Classifier risk-denial counters and the fallback to manual approval (L3.1, L3.5-L3.9).

Guarantees:

* counts are kept per (session, permission version); a new version starts at zero (L3.6);
* a risk denial increments ``consecutive`` and ``cumulative`` once per operation identity,
  enforced by a unique row in ``counted_denials``, so replays, recovery and concurrent
  duplicates cannot count twice (L3.7);
* any allowed operation resets ``consecutive`` only; answering the approval that the
  cumulative threshold triggered resets ``cumulative`` too (L3.5);
* nothing else changes the counts: classifier faults, eviction from the failure table and
  other denials leave them alone (L3.8, L1.2).
"""

from __future__ import annotations

import enum
import sqlite3
from dataclasses import dataclass

from harness.contract import Thresholds


class FallbackTrigger(enum.StrEnum):
    CONSECUTIVE = "fallback_consecutive"
    CUMULATIVE = "fallback_cumulative"
    BOTH = "fallback_consecutive_and_cumulative"


@dataclass(frozen=True, slots=True)
class DenialCounts:
    consecutive: int = 0
    cumulative: int = 0


def fallback_trigger(counts: DenialCounts, thresholds: Thresholds) -> FallbackTrigger | None:
    consecutive = counts.consecutive >= thresholds.consecutive_denials_max
    cumulative = counts.cumulative >= thresholds.cumulative_denials_max
    if consecutive and cumulative:
        return FallbackTrigger.BOTH
    if consecutive:
        return FallbackTrigger.CONSECUTIVE
    if cumulative:
        return FallbackTrigger.CUMULATIVE
    return None


def trigger_resets_cumulative(trigger: str) -> bool:
    return trigger in (FallbackTrigger.CUMULATIVE, FallbackTrigger.BOTH)


def read(conn: sqlite3.Connection, session_id: str, permission_version: int) -> DenialCounts:
    row = conn.execute(
        "SELECT consecutive, cumulative FROM denial_counters"
        " WHERE session_id = ? AND permission_version = ?",
        (session_id, permission_version),
    ).fetchone()
    return DenialCounts(row["consecutive"], row["cumulative"]) if row else DenialCounts()


def record_risk_denial(
    conn: sqlite3.Connection, session_id: str, permission_version: int, execution_id: str
) -> bool:
    """Count one risk denial of one identity; False when this identity was already counted."""
    counted = conn.execute(
        "INSERT OR IGNORE INTO counted_denials (session_id, permission_version, execution_id)"
        " VALUES (?, ?, ?)",
        (session_id, permission_version, execution_id),
    ).rowcount
    if not counted:
        return False
    _ensure_row(conn, session_id, permission_version)
    conn.execute(
        "UPDATE denial_counters SET consecutive = consecutive + 1, cumulative = cumulative + 1"
        " WHERE session_id = ? AND permission_version = ?",
        (session_id, permission_version),
    )
    return True


def reset_consecutive(conn: sqlite3.Connection, session_id: str, permission_version: int) -> None:
    conn.execute(
        "UPDATE denial_counters SET consecutive = 0"
        " WHERE session_id = ? AND permission_version = ?",
        (session_id, permission_version),
    )


def reset_cumulative(conn: sqlite3.Connection, session_id: str, permission_version: int) -> None:
    conn.execute(
        "UPDATE denial_counters SET cumulative = 0"
        " WHERE session_id = ? AND permission_version = ?",
        (session_id, permission_version),
    )


def _ensure_row(conn: sqlite3.Connection, session_id: str, permission_version: int) -> None:
    conn.execute(
        "INSERT OR IGNORE INTO denial_counters (session_id, permission_version) VALUES (?, ?)",
        (session_id, permission_version),
    )
