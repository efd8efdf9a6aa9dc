"""The serializable result of one harness run: the only thing report writers consume.

Guarantees: plain frozen data (no live objects), JSON-ready through ``to_json`` of the
contract; statuses are the run-level ones below, combined from per-trace verdicts by
``harness.criteria.base.combine`` and the expectation file, never by a writer.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


from harness.contract import ImplementationInfo, Thresholds

REPORT_SCHEMA_VERSION = 1


class CriterionStatus(enum.StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"
    NOT_EXERCISED = "not_exercised"
    NOT_APPLICABLE = "not_applicable"
    EXPECTED_FAIL = "expected_fail"
    UNEXPECTED_PASS = "unexpected_pass"


GATE_FAILING = frozenset(
    {CriterionStatus.FAILED, CriterionStatus.ERROR, CriterionStatus.NOT_EXERCISED}
)


class ScenarioStatus(enum.StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"
    """The implementation hung or raised unexpectedly, or the run could not complete."""


@dataclass(frozen=True, slots=True)
class EvidenceItem:
    note: str
    trace_indexes: tuple[int, ...] = ()
    ledger_rows: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Violation:
    scenario: str
    seed: int
    evidence: tuple[EvidenceItem, ...]
    replay: str
    """The exact command that replays this case."""
    excerpt: tuple[str, ...] = ()
    """A few rendered trace lines around the first evidence index."""


@dataclass(frozen=True, slots=True)
class CriterionResult:
    id: str
    stage: str
    title: str
    statement: str
    seed_clause: str
    status: CriterionStatus
    exercised: int
    scenarios_exercising: tuple[str, ...] = ()
    violations: tuple[Violation, ...] = ()
    expectation_reason: str = ""


@dataclass(frozen=True, slots=True)
class VerdictRecord:
    criterion_id: str
    status: str
    exercised: int
    evidence: tuple[EvidenceItem, ...] = ()


@dataclass(frozen=True, slots=True)
class ScenarioResult:
    id: str
    file: str
    stage: str
    seed: int
    status: ScenarioStatus
    duration_s: float
    trace_digest: str
    faults: tuple[str, ...]
    """The fault plan, rendered one fault a line (printed at the start of the run)."""
    failpoints_reached: tuple[str, ...]
    verdicts: tuple[VerdictRecord, ...]
    error: str = ""
    replay: str = ""
    faults_unfired: tuple[str, ...] = ()
    """Planned faults / concurrent_turn holds that did not happen (then ``status`` is error)."""


@dataclass(frozen=True, slots=True)
class RunInfo:
    seed: int
    harness_version: str
    thresholds: Thresholds
    started: str
    """ISO-8601 wall-clock start, for humans only: never part of a trace or digest."""
    duration_s: float
    command: str = ""


@dataclass(frozen=True, slots=True)
class Summary:
    criteria: int
    passed: int
    failed: int
    not_exercised: int
    not_applicable: int
    errors: int = 0
    expected_fail: int = 0
    unexpected_pass: int = 0


@dataclass(frozen=True, slots=True)
class DivergenceRecord:
    """Where a scenario's second run first differed from its first (same seed)."""

    scenario: str
    file: str
    where: str
    first: str
    second: str


@dataclass(frozen=True, slots=True)
class DeterminismCheck:
    scenarios: int
    divergences: tuple[DivergenceRecord, ...] = ()


@dataclass(frozen=True, slots=True)
class MutantResult:
    name: str
    defect: str
    expected: tuple[str, ...]
    """Criterion ids expected to catch this mutant."""
    killed_by: tuple[str, ...]
    """Criterion ids that failed (or errored) on this mutant's traces."""
    caught: bool
    """True when at least one expected criterion is among ``killed_by``."""
    scenarios_run: tuple[str, ...] = ()
    scenario_errors: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SelftestResult:
    reference_passed: bool
    mutants: tuple[MutantResult, ...]
    mutation_score: float
    """Share of mutants caught by an expected criterion (0..1)."""
    kills_per_criterion: dict[str, int]
    blind_criteria: tuple[str, ...]
    """Criteria that kill no mutant (flagged: such a criterion may be unable to fail)."""

    @property
    def passed(self) -> bool:
        return self.reference_passed and all(m.caught for m in self.mutants)


@dataclass(frozen=True, slots=True)
class RunResult:
    schema_version: int
    implementation: ImplementationInfo
    run: RunInfo
    summary: Summary
    criteria: tuple[CriterionResult, ...]
    scenarios: tuple[ScenarioResult, ...]
    coverage: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """criterion id -> failpoints reached by the scenarios that exercised it."""
    failpoints_unreached: tuple[str, ...] = ()
    selftest: SelftestResult | None = None
    """Mutation kill matrix when the run is a selftest (see harness.selftest)."""
    determinism: DeterminismCheck | None = None
    """Set by ``run --check-determinism``: every scenario run twice, digests compared."""

    @property
    def gate_passed(self) -> bool:
        conformant = all(c.status not in GATE_FAILING for c in self.criteria) and all(
            s.status is not ScenarioStatus.ERROR for s in self.scenarios
        )
        deterministic = self.determinism is None or not self.determinism.divergences
        selftest_ok = self.selftest is None or self.selftest.passed
        return conformant and deterministic and selftest_ok
