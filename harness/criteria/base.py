"""Criterion and Verdict values, and how verdicts combine.

Guarantees: a criterion is pure data plus a pure ``check(trace) -> Verdict``; an exception
inside a check becomes an ``error`` verdict (never a pass); a criterion needing an optional
feature is ``not_applicable`` on a trace only when the implementation neither declares the
feature nor shows it there by its behaviour; per-trace verdicts combine by an explicit
priority so that a criterion counts as passed only when it was exercised and never failed.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Callable, Iterable, TypeVar

from harness.contract import Feature
from harness.criteria import feature_evidence
from harness.trace.identity_memo import by_identity
from harness.trace.record import Trace


class CriteriaError(Exception):
    """Root of errors in the criteria package (bad catalogue, unknown id...)."""


class Status(enum.StrEnum):
    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"
    NOT_EXERCISED = "not_exercised"
    NOT_APPLICABLE = "not_applicable"


# Higher wins when verdicts of one criterion over many traces are combined.
STATUS_PRIORITY: dict[Status, int] = {
    Status.ERROR: 4,
    Status.FAIL: 3,
    Status.PASS: 2,
    Status.NOT_EXERCISED: 1,
    Status.NOT_APPLICABLE: 0,
}


@dataclass(frozen=True, slots=True)
class Evidence:
    """Where to look: trace event indexes, ledger rows (ledger_seq), and what is wrong."""

    note: str
    trace_indexes: tuple[int, ...] = ()
    ledger_rows: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Verdict:
    criterion_id: str
    status: Status
    evidence: tuple[Evidence, ...] = ()
    exercised: int = 0
    """How many times the trace exercised the criterion (0 for n/a and not_exercised)."""


@dataclass(frozen=True, slots=True)
class Criterion:
    id: str
    stage: str
    title: str
    statement: str
    seed_clause: str
    check: Callable[[Trace], Verdict] = field(repr=False, compare=False)
    required_features: tuple[Feature, ...] = ()


def passed(criterion_id: str, exercised: int, *evidence: Evidence) -> Verdict:
    assert exercised > 0, "a pass must be backed by at least one exercise"
    return Verdict(criterion_id, Status.PASS, tuple(evidence), exercised)


def failed(criterion_id: str, evidence: Iterable[Evidence], exercised: int = 1) -> Verdict:
    evidence = tuple(evidence)
    assert evidence, "a failure must carry evidence"
    return Verdict(criterion_id, Status.FAIL, evidence, max(exercised, 1))


def not_exercised(criterion_id: str, why: str = "") -> Verdict:
    return Verdict(criterion_id, Status.NOT_EXERCISED, (Evidence(why),) if why else ())


def judge(criterion_id: str, exercised: int, violations: list[Evidence], why_idle: str = "") -> Verdict:
    """The usual ending of a check: violations fail, exercised passes, else not_exercised."""
    if violations:
        return failed(criterion_id, violations, exercised)
    if exercised:
        return passed(criterion_id, exercised)
    return not_exercised(criterion_id, why_idle)


def run_check(criterion: Criterion, trace: Trace) -> Verdict:
    """Apply one criterion to one trace; ``error`` on exceptions; n/a only when a feature
    it needs is neither declared nor shown by the trace's behaviour
    (:func:`harness.criteria.feature_evidence.in_force`)."""
    if criterion.required_features:
        have = feature_evidence.in_force(trace)
        missing = [f for f in criterion.required_features if f not in have]
        if missing:
            return Verdict(
                criterion.id,
                Status.NOT_APPLICABLE,
                tuple(Evidence(f"the implementation neither declares {f} nor showed it in this "
                               f"scenario (shown when {feature_evidence.SHOWN_BY[f]})")
                      if f in feature_evidence.SHOWN_BY else
                      Evidence(f"the implementation does not declare {f}")
                      for f in missing),
            )
    try:
        verdict = criterion.check(trace)
    except Exception as exc:  # a crashing checker is never a pass
        return Verdict(
            criterion.id,
            Status.ERROR,
            (Evidence(f"checker raised {type(exc).__name__}: {exc}"),),
        )
    if not isinstance(verdict, Verdict) or verdict.criterion_id != criterion.id:
        return Verdict(
            criterion.id, Status.ERROR, (Evidence(f"checker returned {verdict!r}"),)
        )
    return verdict


def combine(verdicts: Iterable[Verdict]) -> Status:
    """Combine one criterion's verdicts over many traces by STATUS_PRIORITY."""
    best = Status.NOT_APPLICABLE
    seen = False
    for verdict in verdicts:
        seen = True
        if STATUS_PRIORITY[verdict.status] > STATUS_PRIORITY[best]:
            best = verdict.status
    return best if seen else Status.NOT_EXERCISED




_R = TypeVar("_R")


def per_trace(compute: Callable[[Trace], _R]) -> Callable[[Trace], _R]:
    """``compute`` remembered for the last trace it was given (by identity, holding the trace
    so a reused id never matches): the criteria judge one trace in a row, and several of
    them ask the same oracle about it. Still a pure function of the trace."""
    return by_identity(1)(compute)
