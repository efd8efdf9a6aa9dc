"""The ledger audit: lost results and double executions from the world's records only."""

from __future__ import annotations

from harness.contract import Thresholds
from harness.criteria.ledger_audit import audit
from harness.trace.record import Kind, Trace, TraceEvent, TraceMeta


def _trace(*items: tuple[str, dict]) -> Trace:
    events = tuple(TraceEvent(i, "world", kind, 1, data) for i, (kind, data) in enumerate(items))
    meta = TraceMeta(scenario_id="t", stage="unit", seed=0, implementation="x", features=(),
                     thresholds=Thresholds(), sessions=(), tools=(), faults=())
    return Trace(meta, events, ())


def row(seq: int, ex: str, effect: str = "applied", **extra) -> tuple[str, dict]:
    return (Kind.TOOL_EXECUTED, {"ledger_seq": seq, "execution_id": ex, "effect": effect,
                                 "escalation_requested": False, **extra})


def shown(ex: str, outcome: str) -> tuple[str, dict]:
    return (Kind.UI_PUBLISH, {"projection": {"execution_id": ex, "outcome": outcome}})


def test_an_execution_shown_with_its_result_or_honestly_unknown_is_clean():
    result = audit(_trace(row(1, "e1"), shown("e1", "succeeded"), row(2, "e2"),
                          shown("e2", "not_started"), shown("e2", "unknown")))
    assert result.executed == ("e1", "e2") and result.clean and not result.evidence


def test_an_execution_never_shown_or_last_shown_not_started_is_lost():
    result = audit(_trace(row(1, "e1"), row(2, "e2"), shown("e2", "succeeded"),
                          shown("e2", "not_started"), shown("e3", "succeeded")))
    assert result.lost == ("e1", "e2") and not result.doubles
    assert "no publication shows it" in result.evidence[0]
    assert "says not_started" in result.evidence[1]


def test_a_second_run_after_one_that_took_effect_is_a_double():
    result = audit(_trace(row(1, "e1"), row(2, "e1", effect="partial"), row(3, "e1"),
                          shown("e1", "succeeded")))
    assert result.doubles == ("e1",) and not result.lost
    assert "ledger rows 1 and 2" in result.evidence[0]


def test_escalated_reruns_and_retries_without_effect_are_not_doubles():
    result = audit(_trace(row(1, "e1", escalation_requested=True), row(2, "e1"),
                          row(3, "e2", effect="none", status="error"), row(4, "e2"),
                          shown("e1", "succeeded"), shown("e2", "succeeded")))
    assert result.clean
    partial_then_escalated = audit(_trace(row(1, "e1", effect="partial"), row(2, "e1"),
                                          shown("e1", "failed")))
    assert partial_then_escalated.doubles == ("e1",)
