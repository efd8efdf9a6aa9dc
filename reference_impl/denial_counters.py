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
from reference_impl.store import read_through


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
    return read_through(conn, "denial_counters", (session_id, permission_version),
                        lambda: _read(conn, session_id, permission_version))


def _read(conn: sqlite3.Connection, session_id: str, permission_version: int) -> DenialCounts:
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
    if read(conn, session_id, permission_version).consecutive == 0:
        return  # nothing to reset (an allowed call after another): no write
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


# --------------------------------------------------------------------------- policy seam
# The reference's rule is above: a tripped threshold sends the next auto decision to the
# owner when the owner can answer, and changes nothing otherwise. Other runtimes answer a
# tripped limit differently (end the turn, count over a window of recent reviews); a
# DenialPolicy says which, so a profile composes the same counters with its own rule.


class LimitAction(enum.StrEnum):
    ASK_OWNER = "ask_owner"
    """The next auto decision goes to the owner (the reference, with an owner to ask)."""
    END_TURN = "end_turn"
    """The denial that reaches the limit ends the turn (the session is cancelled)."""
    KEEP_REVIEWING = "keep_reviewing"
    """Nothing happens: the classifier keeps deciding (the reference, with nobody to ask)."""


@dataclass(frozen=True, slots=True)
class DenialPolicy:
    with_owner: LimitAction = LimitAction.ASK_OWNER
    without_owner: LimitAction = LimitAction.KEEP_REVIEWING
    cumulative_window_reviews: int | None = None
    """None: ``cumulative`` counts risk denials since its last reset; N: the denials among
    the last N classifier reviews that gave a verdict (allow or risk_deny)."""
    cumulative_denials_max: int | None = None
    """Overrides the session's ``cumulative_denials_max`` (a runtime whose limit is fixed)."""

    def action(self, owner_can_answer: bool) -> LimitAction:
        return self.with_owner if owner_can_answer else self.without_owner


REFERENCE_POLICY = DenialPolicy()


def limit_reached(
    conn: sqlite3.Connection, session_id: str, permission_version: int,
    thresholds: Thresholds, policy: DenialPolicy,
) -> FallbackTrigger | None:
    """Which limit the counts reach now under ``policy`` (None: neither)."""
    counts = read(conn, session_id, permission_version)
    if policy.cumulative_window_reviews is not None:
        counts = DenialCounts(counts.consecutive, _denials_in_window(
            conn, session_id, permission_version, policy.cumulative_window_reviews))
    if policy.cumulative_denials_max is not None:
        thresholds = Thresholds(consecutive_denials_max=thresholds.consecutive_denials_max,
                                cumulative_denials_max=policy.cumulative_denials_max)
    return fallback_trigger(counts, thresholds)


def end_turn_on_limit(
    conn: sqlite3.Connection, session_id: str, permission_version: int,
    thresholds: Thresholds, policy: DenialPolicy, owner_can_answer: bool,
) -> FallbackTrigger | None:
    """After a counted risk denial, inside its transaction: when the policy ends the turn
    at a reached limit, cancel the session's turn; returns the trigger, or None when
    nothing happened. The counts are left as they are: only an allowed operation ends a
    streak (no runtime modelled here documents a reset when the limit ends the turn)."""
    if policy.action(owner_can_answer) is not LimitAction.END_TURN:
        return None
    trigger = limit_reached(conn, session_id, permission_version, thresholds, policy)
    if trigger is None:
        return None
    conn.execute("UPDATE sessions SET cancelled = 1 WHERE session_id = ?", (session_id,))
    return trigger


def _denials_in_window(
    conn: sqlite3.Connection, session_id: str, permission_version: int, reviews: int
) -> int:
    (denials,) = conn.execute(
        "SELECT COUNT(*) FROM (SELECT classifier_outcome FROM operations"
        " WHERE session_id = ? AND permission_version = ? AND classifier_outcome IN (?, ?)"
        " ORDER BY rowid DESC LIMIT ?) WHERE classifier_outcome = ?",
        (session_id, permission_version, "allow", "risk_deny", reviews, "risk_deny"),
    ).fetchone()
    return int(denials)
