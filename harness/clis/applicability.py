"""Which scenarios a CLI can run: what the driver can express and where it can inject faults.

Guarantees: :func:`why_not` is pure; it returns an empty string for a scenario the driver
can run as written, else the first reason it cannot (a session the CLI's settings cannot
express, a step the driver does not offer, a fault at a failpoint the driver never calls),
so the docs' table and ``matrix`` say which scenarios apply and why the others do not.
"""

from __future__ import annotations

from typing import Any, Iterable

from harness.contract import Failpoint, SessionConfig

DRIVEN_FAILPOINTS: tuple[Failpoint, ...] = (
    Failpoint.BEFORE_MODEL_REQUEST,
    Failpoint.AFTER_MODEL_REQUEST_STARTED,
    Failpoint.AFTER_MODEL_STREAM_ENDED,
    Failpoint.AFTER_START_RECORDED,
    Failpoint.AFTER_TOOL_RETURNED,
    Failpoint.AFTER_PROMPT,
)
"""The points the driver sees from outside: a model call arrived, its answer was written;
the ledger program started (before the effect) and the effect happened (before the result
reaches the CLI); an approval prompt was shown."""

OFFERED_STEPS = ("turn", "answer", "restart", "observe")
"""Steps the driver offers (a rule change, a cancel, a second instance and a checkpoint
import are not: :class:`harness.clis.driver.NotOffered`)."""


OFFERED_ACTIONS = ("crash", "raise", "delay", "hold")
"""Fault actions the driver can carry out at a point it sees (a rule change or a cancel in
the middle of a turn is not offered)."""


def why_not(dialect: Any, sessions: Iterable[SessionConfig], steps: Iterable[str],
            faults: Iterable[tuple[str, str]]) -> str:
    """``dialect``: a :class:`harness.clis.driver.Dialect` (its ``check_session``)."""
    for config in sessions:
        problem = dialect.check_session(config)
        if problem:
            return f"session {config.session_id!r}: {problem}"
    for step in steps:
        if step not in OFFERED_STEPS:
            return f"a {step!r} step (the driver offers {', '.join(OFFERED_STEPS)})"
    driven = {point.value for point in DRIVEN_FAILPOINTS}
    for point, action in faults:
        if point not in driven:
            return (f"a fault at {point!r}, a point inside the CLI that cannot be seen from "
                    "outside")
        if action not in OFFERED_ACTIONS:
            return f"a {action!r} fault at {point!r} (the driver does not offer it)"
    return ""
