"""Hand-built RunResults for the writer tests: every status, hostile text, a passing run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.contract import Feature, ImplementationInfo, Thresholds
from harness.report.result import (
    REPORT_SCHEMA_VERSION,
    CriterionResult,
    CriterionStatus,
    DeterminismCheck,
    DivergenceRecord,
    MutantResult,
    SelftestResult,
    Timeline,
    TimelineEntry,
    EvidenceItem,
    RunInfo,
    RunResult,
    ScenarioResult,
    ScenarioStatus,
    Summary,
    VerdictRecord,
    Violation,
)

REPO = Path(__file__).resolve().parents[4]
SCHEMA_PATH = REPO / "fixtures" / "report.schema.json"
DIGEST = "sha256:" + "ab" * 32
HOSTILE = '<script>alert("x")</script> & `tick` | *star* \x00\x07 end'
REPLAY = "lifecycle-harness replay scenarios/l4/crash.toml --seed 7 --impl reference"


def _criterion(cid, stage, status, exercised=1, violations=(), reason=""):
    return CriterionResult(
        id=cid, stage=stage, title=f"title {cid}", statement=f"statement {cid}",
        seed_clause=f"「clause {cid}」", status=status, exercised=exercised,
        scenarios_exercising=("l4-crash",) if exercised else (), violations=tuple(violations),
        expectation_reason=reason,
    )


def _violation(note=HOSTILE):
    return Violation(
        scenario="l4-crash", seed=7,
        evidence=(EvidenceItem(note, (4, 5), (1,)), EvidenceItem("second note")),
        replay=REPLAY,
        excerpt=(
            "     3 world   tool_executed        {\"tool\":\"write_file\"}",
            ">    4 harness crash                {\"failpoint\":\"after_result_saved\"}",
            ">    5 world   tool_executed        {\"html\":\"<b>bold</b>\"}",
            "   ⋮ 12 events",
            ">   18 world   tool_executed        i1 {\"tool\":\"write_file\",\"ledger_seq\":2}",
        ),
        cited_ledger_rows=("    3 world   tool_executed        {\"ledger_seq\":1,\"tool\":\"write_file\"}",),
    )


TIMELINE = Timeline(
    instances=(0, 1),
    entries=(
        TimelineEntry(0, 0, "driver_call", "run_turn"),
        TimelineEntry(3, 0, "tool_executed", "#1 write_file c1: ok, effect applied", 1),
        TimelineEntry(4, 0, "crash", "CRASH at after_result_saved"),
        TimelineEntry(5, 1, "restart", "restart as i1"),
        TimelineEntry(18, 1, "tool_executed", "#2 write_file c1: ok, effect applied <again>", 2),
        TimelineEntry(20, 1, "ui_publish", "c1: succeeded (no actions)"),
    ),
)


def _scenario(sid, status, error=""):
    troubled = status in (ScenarioStatus.FAILED, ScenarioStatus.ERROR)
    return ScenarioResult(
        id=sid, file=f"scenarios/l4/{sid}.toml", stage="l4", seed=7, status=status,
        duration_s=0.5, trace_digest=DIGEST, faults=("after_result_saved hit 1 -> crash",),
        failpoints_reached=("after_result_saved",),
        verdicts=(VerdictRecord("L4.1", "fail", 1, (EvidenceItem("ran twice", (5,)),)),),
        error=error, replay=REPLAY,
        failpoints_injected=("after_result_saved",) if sid == "l4-crash" else (),
        timeline=TIMELINE if troubled else None,
    )


def build(criteria, scenarios, unreached=("after_projection",), selftest=None, determinism=None) -> RunResult:
    counts = {s: sum(1 for c in criteria if c.status is s) for s in CriterionStatus}
    return RunResult(
        schema_version=REPORT_SCHEMA_VERSION,
        implementation=ImplementationInfo("ref<impl>", "1.0", (Feature.APPROVALS, Feature.AUTO_MODE)),
        run=RunInfo(7, "0.1.0", Thresholds(), "2026-01-02T03:04:05+00:00", 1.25, "lifecycle-harness run"),
        summary=Summary(
            criteria=len(criteria), passed=counts[CriterionStatus.PASSED],
            failed=counts[CriterionStatus.FAILED], not_exercised=counts[CriterionStatus.NOT_EXERCISED],
            not_applicable=counts[CriterionStatus.NOT_APPLICABLE], errors=counts[CriterionStatus.ERROR],
            expected_fail=counts[CriterionStatus.EXPECTED_FAIL],
            unexpected_pass=counts[CriterionStatus.UNEXPECTED_PASS],
        ),
        criteria=tuple(criteria),
        scenarios=tuple(scenarios),
        coverage={c.id: ("after_result_saved",) if c.exercised else () for c in criteria},
        failpoints_unreached=tuple(unreached),
        selftest=selftest,
        determinism=determinism,
    )


@pytest.fixture
def failing_result() -> RunResult:
    return build(
        [
            _criterion("X1", "x", CriterionStatus.PASSED, exercised=3),
            _criterion("L4.1", "l4", CriterionStatus.FAILED, violations=[_violation()]),
            _criterion("L4.2", "l4", CriterionStatus.ERROR, violations=[_violation("checker raised KeyError: 'x'")]),
            _criterion("L2.3", "l2", CriterionStatus.NOT_EXERCISED, exercised=0),
            _criterion("L5.3", "l5", CriterionStatus.NOT_APPLICABLE, exercised=0),
            _criterion("M1", "m", CriterionStatus.EXPECTED_FAIL, violations=[_violation("m")], reason="issue 12"),
            _criterion("M2", "m", CriterionStatus.UNEXPECTED_PASS, reason="issue 13"),
        ],
        [
            _scenario("l4-crash", ScenarioStatus.FAILED),
            _scenario("l4-hang", ScenarioStatus.ERROR, error="hung in run_turn after 20.0s"),
            _scenario("x-ok", ScenarioStatus.PASSED),
        ],
        selftest=SelftestResult(
            reference_passed=True,
            mutants=(
                MutantResult("m1", "re-executes <writes>", ("L4.1",), ("L4.1", "X4"), True, ("l4-crash",)),
                MutantResult("m2", "blind spot", ("L2.3",), (), False, ("l2-tail",)),
            ),
            mutation_score=0.5,
            kills_per_criterion={"L4.1": 1, "X4": 1, "L2.3": 0},
            blind_criteria=("L2.3",),
        ),
        determinism=DeterminismCheck(3, (DivergenceRecord("x-ok", "scenarios/x/ok.toml", "event 4", "a", "b"),)),
    )


@pytest.fixture
def passing_result() -> RunResult:
    return build(
        [_criterion("X1", "x", CriterionStatus.PASSED), _criterion("L5.3", "l5", CriterionStatus.NOT_APPLICABLE, 0)],
        [_scenario("x-ok", ScenarioStatus.PASSED)],
        unreached=(),
    )


@pytest.fixture(scope="session")
def report_schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
