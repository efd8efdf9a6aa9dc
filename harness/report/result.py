"""The serializable result of one harness run: the only thing report writers consume.

Guarantees: plain frozen data (no live objects), JSON-ready through ``to_json`` of the
contract; statuses are the run-level ones below, combined from per-trace verdicts by
``harness.criteria.base.combine`` and the expectation file, never by a writer.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


from harness.contract.conformance import ConformanceLevel, assess
from harness.contract import ImplementationInfo, Thresholds

REPORT_SCHEMA_VERSION = 6
"""2: conformance levels (derived ``conformance``, ``required_features``, skipped scenarios).
3: reports a person reads: a violation's ``excerpt`` shows every cited event and
``cited_ledger_rows`` every cited ledger row; a failing scenario's ``timeline`` and the
failpoints where a fault was injected (``ScenarioResult.failpoints_injected``).
4: partial runs (criterion status ``not_selected``, scenario status ``not_run``,
``run.selection``) and the expectations mode (``run.expectations_mode``).
5: optional features judged by behaviour: every scenario runs (no new ``skipped``), each
records the features its behaviour showed (``features_shown``) and the faults excused on a
feature's path (``faults_excused``); ``conformance`` says per feature whether it was
declared and shown, and lists ``shown_not_declared``.
6: expected scenario errors: a scenario that errored for a cause the expectations file lists
has status ``expected_error``; every listed scenario records the entry (``expected_error``),
so one that did not error for it is an unexpected success."""

class CriterionStatus(enum.StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"
    NOT_EXERCISED = "not_exercised"
    NOT_APPLICABLE = "not_applicable"
    EXPECTED_FAIL = "expected_fail"
    UNEXPECTED_PASS = "unexpected_pass"
    NOT_SELECTED = "not_selected"
    """A partial run (``--criteria``, ``--stage``, ``--scenarios``, ``--last-failed``) did
    not judge it: neither a pass nor a failure, counted apart."""


EXPECTATIONS_STRICT = "strict"
EXPECTATIONS_LENIENT = "lenient"
EXPECTATIONS_MODES = (EXPECTATIONS_STRICT, EXPECTATIONS_LENIENT)
"""What an unexpected pass means: ``strict`` (the default) fails the gate, so the
expectations file is tightened as soon as a gap closes; ``lenient`` only reports it."""


GATE_FAILING = frozenset(
    {CriterionStatus.FAILED, CriterionStatus.ERROR, CriterionStatus.NOT_EXERCISED}
)


def gate_failing_statuses(expectations_mode: str) -> frozenset[CriterionStatus]:
    """The criterion statuses that fail the gate under this expectations mode."""
    if expectations_mode == EXPECTATIONS_LENIENT:
        return GATE_FAILING
    return GATE_FAILING | {CriterionStatus.UNEXPECTED_PASS}


class ScenarioStatus(enum.StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"
    """The implementation hung or raised unexpectedly, or the run could not complete."""
    SKIPPED = "skipped"
    """Not run because it needed an optional feature the implementation did not declare:
    found only in reports of schema 4 and before. Since schema 5 every scenario runs and an
    optional feature's criteria apply when it is declared or shown by behaviour."""
    NOT_RUN = "not_run"
    """Not run: ``--fail-fast`` stopped the run at an earlier failing scenario."""
    EXPECTED_ERROR = "expected_error"
    """Errored for a cause the expectations file lists (``[[expected_error]]``): reported,
    not failing the gate; still an errored scenario for the conformance level."""


ERRORED = frozenset({ScenarioStatus.ERROR, ScenarioStatus.EXPECTED_ERROR})
"""The statuses of a scenario that errored, expected or not."""


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
    """Rendered trace lines around every cited event (cited ones marked ``>``); a gap
    between two windows is one line ``   ⋮ N events``."""
    cited_ledger_rows: tuple[str, ...] = ()
    """Every ledger row (world ``tool_executed`` event) the evidence cites, rendered in full."""


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
    required_features: tuple[str, ...] = ()
    """Optional features that gate it (empty: a core criterion, never not_applicable)."""


@dataclass(frozen=True, slots=True)
class VerdictRecord:
    criterion_id: str
    status: str
    exercised: int
    evidence: tuple[EvidenceItem, ...] = ()


@dataclass(frozen=True, slots=True)
class TimelineEntry:
    """One thing that happened in a failing scenario, placed in a lane of the timeline."""

    index: int
    """The trace event index (time runs down the timeline in this order)."""
    instance: int
    """The implementation instance it belongs to (a lane; a restart starts a new one)."""
    kind: str
    """The trace event kind (``crash``, ``restart``, ``tool_executed``, ``ui_publish``...)."""
    label: str
    """A short human text: the driver method, the tool and its status, the UI status..."""
    ledger_seq: int = 0
    """The world ledger row number for a ``tool_executed`` entry (rows count from 1)."""


@dataclass(frozen=True, slots=True)
class Timeline:
    """What each instance did in one failing scenario, compact enough to keep in a report."""

    instances: tuple[int, ...]
    entries: tuple[TimelineEntry, ...]
    left_out: int = 0
    """Routine events dropped to keep the timeline short (crashes, restarts, ledger rows,
    UI publications and cited events are always kept)."""


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
    requires: tuple[str, ...] = ()
    """Optional features the scenario is written for (it runs whatever is declared)."""
    faults_unfired: tuple[str, ...] = ()
    """Planned faults / concurrent_turn holds that did not happen (then ``status`` is error)."""
    failpoints_injected: tuple[str, ...] = ()
    """Failpoints where a planned fault really fired (a subset of ``failpoints_reached``)."""
    timeline: Timeline | None = None
    """Per-instance timeline, kept only for a scenario that failed or errored."""
    features_shown: tuple[str, ...] = ()
    """Optional features the implementation's behaviour showed in this scenario, declared or
    not (:mod:`harness.criteria.feature_evidence`)."""
    faults_excused: tuple[str, ...] = ()
    """Planned faults / holds that did not happen on the path of a feature in ``requires``
    the implementation neither declares nor showed: no error, but none of the scenario's
    passes counts."""
    expected_error: str = ""
    """For a scenario the expectations file lists under ``[[expected_error]]``: the entry
    (cause and reason; "" for the others). Status ``expected_error`` when it errored for
    that cause; any other status makes it an unexpected success or a new error."""

    @property
    def unexpected_success(self) -> bool:
        """Listed as expected to error, but did not error (for any cause)."""
        return bool(self.expected_error) and self.status in (ScenarioStatus.PASSED,
                                                             ScenarioStatus.FAILED)


@dataclass(frozen=True, slots=True)
class RunInfo:
    seed: int
    harness_version: str
    thresholds: Thresholds
    started: str
    """ISO-8601 wall-clock start, for humans only: never part of a trace or digest."""
    duration_s: float
    command: str = ""
    expectations_mode: str = EXPECTATIONS_STRICT
    """``strict``: an unexpected pass fails the gate; ``lenient``: it is only reported."""
    selection: str = ""
    """How a partial run chose its criteria and scenarios ("" for the whole suite)."""


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
    not_selected: int = 0


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
    trust_class: str = ""
    """The mutant's trust class (``harness.mutants.mutant.TRUST_CLASSES``), "" for none."""
    caught_on: tuple[str, ...] = ()
    """The scenarios, in the order run, each of which failed an expected criterion none run
    before it had (empty when not caught): what ``selftest --write-witnesses`` records."""


@dataclass(frozen=True, slots=True)
class MutationScore:
    """How many of the mutants meant to be caught (by a criterion, or within a trust class)
    were caught."""

    expected: int
    caught: int

    @property
    def score(self) -> float:
        return round(self.caught / self.expected, 4) if self.expected else 0.0


@dataclass(frozen=True, slots=True)
class SelftestResult:
    reference_passed: bool
    mutants: tuple[MutantResult, ...]
    mutation_score: float
    """Share of mutants caught by an expected criterion (0..1)."""
    kills_per_criterion: dict[str, int]
    blind_criteria: tuple[str, ...]
    """Criteria that kill no mutant (flagged: such a criterion may be unable to fail)."""
    score_per_criterion: dict[str, MutationScore] = field(default_factory=dict)
    """criterion id → mutants listing it as expected / of those, the ones it failed on."""
    score_per_class: dict[str, MutationScore] = field(default_factory=dict)
    """trust class (``criterion`` for mutants without one) → its mutants / caught ones."""

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
    """Mutation kill matrix when the run is a selftest (see harness.campaigns.selftest)."""
    determinism: DeterminismCheck | None = None
    """Set by ``run --check-determinism``: every scenario run twice, digests compared."""
    required_features: tuple[str, ...] = ()
    """Optional features a CI demanded (``--require-features``): each must be declared and met."""

    @property
    def conformance(self) -> ConformanceLevel:
        """The level reached (core + claimed features) and its headline; derived, not stored."""
        return assess(
            self.criteria, self.implementation.features, required=self.required_features,
            shown=self.features_shown,
            scenarios_errored=sum(1 for s in self.scenarios if s.status in ERRORED),
        )

    @property
    def features_shown(self) -> tuple[str, ...]:
        """The optional features some scenario's behaviour showed (sorted, derived)."""
        return tuple(sorted({f for s in self.scenarios for f in s.features_shown}))

    @property
    def unexpected_successes(self) -> tuple[ScenarioResult, ...]:
        """Scenarios listed as expected to error that did not error (derived)."""
        return tuple(s for s in self.scenarios if s.unexpected_success)

    @property
    def gate_passed(self) -> bool:
        failing = gate_failing_statuses(self.run.expectations_mode)
        strict = self.run.expectations_mode != EXPECTATIONS_LENIENT
        conformant = all(c.status not in failing for c in self.criteria) and all(
            s.status is not ScenarioStatus.ERROR for s in self.scenarios
        ) and not (strict and self.unexpected_successes)
        deterministic = self.determinism is None or not self.determinism.divergences
        selftest_ok = self.selftest is None or self.selftest.passed
        demanded = not self.required_features or not self.conformance.required_unmet
        return conformant and deterministic and selftest_ok and demanded
