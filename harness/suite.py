"""Run a set of scenarios against one implementation and judge every criterion on every trace.

Guarantees of :func:`run_suite`:

* every criterion is applied to every trace with :func:`harness.criteria.base.run_check`
  (so a crashing checker is an ``error``, a missing feature ``not_applicable``);
* per criterion, verdicts combine with :func:`~harness.criteria.base.combine`: ``passed``
  only when exercised at least once and never failed or errored; ``not_applicable`` only when
  n/a on every trace; ``not_exercised`` otherwise (also with no scenarios at all);
* every failing or erroring verdict becomes a :class:`~harness.result.Violation` carrying the
  scenario, the seed, the evidence, the exact replay command and a trace excerpt;
* a scenario whose run reported an error (hang, IUT crash, a planned fault or hold that
  did not happen) or whose trace is not ``completed`` is ``error`` and fails the gate; its
  verdicts count neither as a pass nor as an exercise of any criterion (a pass becomes
  ``not_exercised`` saying why), while its failures and checker errors still count and
  show;
* conformance levels (:mod:`harness.conformance`): core features never gate a criterion; a
  scenario needing an optional feature the implementation does not declare is not run and
  is ``skipped`` (every verdict ``not_applicable``, judged by no criterion); a criterion
  ends ``not_applicable`` only when an optional feature it needs is undeclared, otherwise
  n/a everywhere becomes ``not_exercised`` (so the core cannot be declared away);
  ``required_features`` (``--require-features``) are recorded for the gate;
* the result is a plain :class:`~harness.result.RunResult`; no trace or live object leaks
  into it, and nothing wall-clock enters a trace (only ``run.started``/``duration_s``).

An exception escaping the runner is a harness bug and propagates (the CLI exits 3); a
:class:`~harness.errors.HarnessError` from the runner (bad scenario) propagates likewise.
"""

from __future__ import annotations

import datetime as _dt
import os
import shlex
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

import harness
from harness import conformance
from harness.contract import Failpoint, Implementation, ImplementationInfo, Thresholds
from harness.criteria.base import (
    Criterion,
    Evidence,
    Status,
    Verdict,
    combine,
    not_exercised,
    run_check,
)
from harness.errors import ExpectationsError
from harness.result import (
    REPORT_SCHEMA_VERSION,
    CriterionResult,
    CriterionStatus,
    EvidenceItem,
    RunInfo,
    RunResult,
    ScenarioResult,
    ScenarioStatus,
    Summary,
    VerdictRecord,
    Violation,
)
from harness.trace import Trace, trace_digest
from harness.tracelines import excerpt as trace_excerpt

DEFAULT_TIME_LIMIT_S = 20.0
DEFAULT_SEED = 0
DEFAULT_IMPL_SPEC = "reference"

Runner = Callable[..., Any]
"""``runner(implementation, scenario, seed, *, time_limit_s, data_root) -> ScenarioRun``."""

FaultRenderer = Callable[[Any], Sequence[str]]
"""``render(scenario.faults) -> lines``, one fault a line."""


@dataclass(frozen=True, slots=True)
class ProgressEvent:
    """What the suite tells a progress callback: once before and once after each scenario."""

    phase: str
    """"start" or "done"."""
    index: int
    """1-based position of the scenario in the run."""
    total: int
    scenario_id: str
    faults: tuple[str, ...]
    status: ScenarioStatus | None = None
    """Set when ``phase == "done"``."""
    duration_s: float = 0.0
    error: str = ""


Progress = Callable[[ProgressEvent], None]


# --------------------------------------------------------------------------- defaults


def default_criteria() -> tuple[Criterion, ...]:
    """The acceptance catalogue (imported lazily so this module loads without it)."""
    from harness.criteria.catalogue import CRITERIA

    return tuple(CRITERIA)


def default_runner() -> Runner:
    from harness.runner import run_scenario

    return run_scenario


def default_fault_renderer() -> FaultRenderer:
    from harness.faults import render

    return render


# --------------------------------------------------------------------------- helpers


def replay_command(scenario_file: str, seed: int, impl_spec: str, variant: str = "") -> str:
    """The exact shell command that replays one scenario under one seed and implementation
    (``variant``: which variant of a scenario template)."""
    chosen = f" --variant {shlex.quote(variant)}" if variant else ""
    return (
        f"lifecycle-harness replay {shlex.quote(display_path(scenario_file))}{chosen} "
        f"--seed {int(seed)} --impl {shlex.quote(impl_spec)}"
    )


def display_path(path: object) -> str:
    """``path`` relative to the working directory when it lies below it, else as given."""
    text = os.fspath(path) if isinstance(path, os.PathLike) else str(path)
    try:
        rel = os.path.relpath(text)
    except ValueError:  # other drive on Windows
        return text
    return text if rel.startswith(os.pardir) else rel


def evaluate(criteria: Iterable[Criterion], trace: Trace) -> tuple[Verdict, ...]:
    """Every criterion applied to one trace, in criteria order."""
    return tuple(run_check(criterion, trace) for criterion in criteria)


def render_faults(renderer: FaultRenderer, scenario: Any) -> tuple[str, ...]:
    faults = getattr(scenario, "faults", ())
    if not faults:
        return ()
    return tuple(str(line) for line in renderer(faults))


def uncounted(verdict: Verdict, error: str) -> Verdict:
    """A verdict of an errored scenario: a pass there proves nothing (the run did not
    happen as planned), so it becomes ``not_exercised``; failures and errors stay."""
    if verdict.status is not Status.PASS:
        return verdict
    first = error.splitlines()[0] if error else "the run did not complete"
    return not_exercised(verdict.criterion_id, f"not counted: the scenario errored ({first})")


def _evidence(verdict: Verdict) -> tuple[EvidenceItem, ...]:
    return tuple(
        EvidenceItem(e.note, tuple(e.trace_indexes), tuple(e.ledger_rows)) for e in verdict.evidence
    )


def _first_indexes(verdict: Verdict) -> tuple[int, ...]:
    """Evidence trace indexes, the first evidence item's first index leading."""
    ordered: list[int] = []
    for item in verdict.evidence:
        for index in item.trace_indexes:
            if index not in ordered:
                ordered.append(index)
    return tuple(ordered)


_STATUS_MAP: dict[Status, CriterionStatus] = {
    Status.PASS: CriterionStatus.PASSED,
    Status.FAIL: CriterionStatus.FAILED,
    Status.ERROR: CriterionStatus.ERROR,
    Status.NOT_EXERCISED: CriterionStatus.NOT_EXERCISED,
    Status.NOT_APPLICABLE: CriterionStatus.NOT_APPLICABLE,
}


def combined_status(verdicts: Sequence[Verdict]) -> CriterionStatus:
    """Run-level status of one criterion from its per-trace verdicts (no vacuous pass)."""
    status = _STATUS_MAP[combine(verdicts)]
    if status is CriterionStatus.PASSED and sum(v.exercised for v in verdicts) <= 0:
        return CriterionStatus.NOT_EXERCISED
    return status


def apply_expectation(status: CriterionStatus, expected_failure: bool) -> CriterionStatus:
    """A criterion listed as expected to fail: failed/error → expected_fail, passed →
    unexpected_pass; not_exercised and not_applicable stay as they are."""
    if not expected_failure:
        return status
    if status in (CriterionStatus.FAILED, CriterionStatus.ERROR):
        return CriterionStatus.EXPECTED_FAIL
    if status is CriterionStatus.PASSED:
        return CriterionStatus.UNEXPECTED_PASS
    return status


def summarize(criteria: Sequence[CriterionResult]) -> Summary:
    def count(status: CriterionStatus) -> int:
        return sum(1 for c in criteria if c.status is status)

    return Summary(
        criteria=len(criteria),
        passed=count(CriterionStatus.PASSED),
        failed=count(CriterionStatus.FAILED),
        not_exercised=count(CriterionStatus.NOT_EXERCISED),
        not_applicable=count(CriterionStatus.NOT_APPLICABLE),
        errors=count(CriterionStatus.ERROR),
        expected_fail=count(CriterionStatus.EXPECTED_FAIL),
        unexpected_pass=count(CriterionStatus.UNEXPECTED_PASS),
    )


def _check_expectations(
    expectations: Mapping[str, str] | None, criteria: Sequence[Criterion]
) -> Mapping[str, str]:
    if not expectations:
        return {}
    known = {c.id for c in criteria}
    unknown = sorted(set(expectations) - known)
    if unknown:
        raise ExpectationsError(
            f"expectations name unknown criterion id(s) {', '.join(unknown)}; "
            f"valid ids: {', '.join(c.id for c in criteria)}"
        )
    return expectations


# --------------------------------------------------------------------------- the suite


@dataclass(frozen=True, slots=True)
class _Judged:
    scenario: Any
    result: ScenarioResult
    verdicts: tuple[Verdict, ...]
    trace: Trace | None
    """None for a skipped scenario (never run), or one judged in another process."""
    excerpts: Mapping[str, tuple[str, ...]] | None = None
    """When ``trace`` is None: criterion id → the excerpt its failing verdict had (see
    :class:`ScenarioJudgement`)."""


def run_suite(
    implementation: Implementation,
    scenarios: Sequence[Any],
    seed: int = DEFAULT_SEED,
    *,
    criteria: Sequence[Criterion] | None = None,
    runner: Runner | None = None,
    expectations: Mapping[str, str] | None = None,
    progress: Progress | None = None,
    time_limit_s: float = DEFAULT_TIME_LIMIT_S,
    impl_spec: str = DEFAULT_IMPL_SPEC,
    data_root: str | None = None,
    thresholds: Thresholds | None = None,
    fault_renderer: FaultRenderer | None = None,
    command: str = "",
    required_features: Sequence[str] = (),
) -> RunResult:
    """Run every scenario once under ``seed``, judge every criterion, return the RunResult.

    ``criteria`` defaults to the catalogue, ``runner`` to ``harness.runner.run_scenario``,
    ``fault_renderer`` to ``harness.faults.render`` (all resolved lazily).
    ``expectations`` maps criterion id → reason for criteria known to fail (see
    :func:`apply_expectation`). ``impl_spec`` is the ``--impl`` text quoted in replay
    commands. ``thresholds`` are the defaults reported in the run info.
    """
    criteria = conformance.core_always_applies(
        tuple(default_criteria() if criteria is None else criteria)
    )
    declared = tuple(str(f) for f in implementation.info.features)
    runner = default_runner() if runner is None else runner
    fault_renderer = default_fault_renderer() if fault_renderer is None else fault_renderer
    expected = _check_expectations(expectations, criteria)

    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    clock_start = time.monotonic()
    total = len(scenarios)
    judged: list[_Judged] = []
    for position, scenario in enumerate(scenarios, start=1):
        faults = render_faults(fault_renderer, scenario)
        if progress:
            progress(ProgressEvent("start", position, total, scenario.id, faults))
        missing = conformance.missing_features(scenario, declared)
        if missing:
            item = _skip(scenario, missing, seed, criteria, faults, impl_spec)
        else:
            run = runner(
                implementation, scenario, seed, time_limit_s=time_limit_s, data_root=data_root
            )
            item = _judge(scenario, run, seed, criteria, faults, impl_spec)
        judged.append(item)
        if progress:
            progress(
                ProgressEvent(
                    "done", position, total, scenario.id, faults,
                    item.result.status, item.result.duration_s, item.result.error,
                )
            )

    criterion_results = tuple(
        _criterion_result(i, criterion, judged, seed, impl_spec, expected, declared)
        for i, criterion in enumerate(criteria)
    )
    coverage = _coverage(criteria, judged)
    reached = {fp for item in judged for fp in item.result.failpoints_reached}
    unreached = tuple(fp.value for fp in Failpoint if fp.value not in reached)
    return RunResult(
        schema_version=REPORT_SCHEMA_VERSION,
        implementation=implementation.info,
        run=RunInfo(
            seed=seed,
            harness_version=harness.__version__,
            thresholds=thresholds or Thresholds(),
            started=started,
            duration_s=round(time.monotonic() - clock_start, 6),
            command=command,
        ),
        summary=summarize(criterion_results),
        criteria=criterion_results,
        scenarios=tuple(item.result for item in judged),
        coverage=coverage,
        failpoints_unreached=unreached,
        required_features=tuple(str(f) for f in required_features),
    )


def _judge(
    scenario: Any,
    run: Any,
    seed: int,
    criteria: Sequence[Criterion],
    faults: tuple[str, ...],
    impl_spec: str,
) -> _Judged:
    verdicts = evaluate(criteria, run.trace)
    error = run.error or (
        "" if run.trace.completed else (run.trace.error or "the run did not complete")
    )
    if error:
        status = ScenarioStatus.ERROR
        verdicts = tuple(uncounted(v, error) for v in verdicts)
    elif any(v.status in (Status.FAIL, Status.ERROR) for v in verdicts):
        status = ScenarioStatus.FAILED
    else:
        status = ScenarioStatus.PASSED
    file = display_path(scenario.file)
    result = ScenarioResult(
        id=scenario.id,
        file=file,
        stage=scenario.stage,
        seed=seed,
        status=status,
        duration_s=round(float(run.duration_s), 6),
        trace_digest=trace_digest(run.trace),
        faults=faults,
        failpoints_reached=tuple(run.failpoints_reached),
        verdicts=tuple(
            VerdictRecord(v.criterion_id, v.status.value, v.exercised, _evidence(v))
            for v in verdicts
        ),
        error=error,
        replay=replay_command(file, seed, impl_spec, getattr(scenario, "variant", "")),
        requires=_requires(scenario),
        faults_unfired=tuple(getattr(run, "unfired", ())),
    )
    return _Judged(scenario, result, verdicts, run.trace)


def _requires(scenario: Any) -> tuple[str, ...]:
    return tuple(f.value for f in conformance.scenario_requirements(scenario))


def _skip(
    scenario: Any,
    missing: Sequence[Any],
    seed: int,
    criteria: Sequence[Criterion],
    faults: tuple[str, ...],
    impl_spec: str,
) -> _Judged:
    """A scenario the implementation cannot run: not run, judged by no criterion."""
    why = (f"scenario {scenario.id} skipped: it needs optional feature(s) "
           f"{', '.join(str(f) for f in missing)} the implementation does not declare")
    verdicts = tuple(
        Verdict(c.id, Status.NOT_APPLICABLE, (Evidence(why),)) for c in criteria
    )
    file = display_path(scenario.file)
    result = ScenarioResult(
        id=scenario.id,
        file=file,
        stage=scenario.stage,
        seed=seed,
        status=ScenarioStatus.SKIPPED,
        duration_s=0.0,
        trace_digest="",
        faults=faults,
        failpoints_reached=(),
        verdicts=tuple(VerdictRecord(v.criterion_id, v.status.value, 0, _evidence(v))
                       for v in verdicts),
        error="",
        replay=replay_command(file, seed, impl_spec, getattr(scenario, "variant", "")),
        requires=_requires(scenario),
    )
    return _Judged(scenario, result, verdicts, None)


def _criterion_result(
    position: int,
    criterion: Criterion,
    judged: Sequence[_Judged],
    seed: int,
    impl_spec: str,
    expected: Mapping[str, str],
    declared: Sequence[str] = (),
) -> CriterionResult:
    verdicts = [item.verdicts[position] for item in judged]
    combined = combined_status(verdicts)
    gates = tuple(str(f) for f in criterion.required_features)
    if combined is CriterionStatus.NOT_APPLICABLE and all(f in declared for f in gates):
        # Only an undeclared optional feature makes a criterion n/a; skipped scenarios
        # alone must not (a core criterion only they exercise is simply not exercised).
        combined = CriterionStatus.NOT_EXERCISED
    status = apply_expectation(combined, criterion.id in expected)
    violations = tuple(
        Violation(
            scenario=item.result.id,
            seed=seed,
            evidence=_evidence(verdict),
            replay=item.result.replay,
            excerpt=_excerpt(item, verdict),
        )
        for item, verdict in zip(judged, verdicts)
        if verdict.status in (Status.FAIL, Status.ERROR)
    )
    return CriterionResult(
        id=criterion.id,
        stage=criterion.stage,
        title=criterion.title,
        statement=criterion.statement,
        seed_clause=criterion.seed_clause,
        status=status,
        exercised=sum(v.exercised for v in verdicts),
        scenarios_exercising=tuple(
            item.result.id for item, v in zip(judged, verdicts) if v.exercised > 0
        ),
        violations=violations,
        expectation_reason=expected.get(criterion.id, ""),
        required_features=gates,
    )


def _excerpt(item: _Judged, verdict: Verdict) -> tuple[str, ...]:
    if item.trace is not None:
        return trace_excerpt(item.trace, _first_indexes(verdict))
    return tuple((item.excerpts or {}).get(verdict.criterion_id, ()))


def _coverage(
    criteria: Sequence[Criterion], judged: Sequence[_Judged]
) -> dict[str, tuple[str, ...]]:
    coverage: dict[str, tuple[str, ...]] = {}
    for position, criterion in enumerate(criteria):
        reached: set[str] = set()
        for item in judged:
            if item.verdicts[position].exercised > 0:
                reached.update(item.result.failpoints_reached)
        coverage[criterion.id] = tuple(sorted(reached))
    return coverage


# --------------------------------------------------------------------------- one scenario at a time


@dataclass(frozen=True, slots=True)
class VerdictExcerpt:
    """The trace excerpt around a failing or erroring verdict's evidence."""

    criterion_id: str
    lines: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ScenarioJudgement:
    """One scenario run and judged by every criterion, as plain data: what a process that
    judged a scenario hands to the one that combines the run (pytest-xdist workers, through
    ``harness.contract.to_json``). :func:`combine_judgements` over the judgements of a set of
    scenarios gives the RunResult :func:`run_suite` gives for the same set, order aside."""

    result: ScenarioResult
    excerpts: tuple[VerdictExcerpt, ...] = ()
    """One per failing or erroring verdict: the trace itself stays where it was judged."""


def judge_scenario(
    implementation: Implementation,
    scenario: Any,
    seed: int = DEFAULT_SEED,
    *,
    criteria: Sequence[Criterion] | None = None,
    runner: Runner | None = None,
    time_limit_s: float = DEFAULT_TIME_LIMIT_S,
    impl_spec: str = DEFAULT_IMPL_SPEC,
    data_root: str | None = None,
    fault_renderer: FaultRenderer | None = None,
) -> ScenarioJudgement:
    """Run (or skip, for an undeclared optional feature) one scenario and judge every
    criterion on its trace, exactly as one step of :func:`run_suite`."""
    criteria = conformance.core_always_applies(
        tuple(default_criteria() if criteria is None else criteria)
    )
    declared = tuple(str(f) for f in implementation.info.features)
    runner = default_runner() if runner is None else runner
    fault_renderer = default_fault_renderer() if fault_renderer is None else fault_renderer
    faults = render_faults(fault_renderer, scenario)
    missing = conformance.missing_features(scenario, declared)
    if missing:
        item = _skip(scenario, missing, seed, criteria, faults, impl_spec)
    else:
        run = runner(implementation, scenario, seed, time_limit_s=time_limit_s, data_root=data_root)
        item = _judge(scenario, run, seed, criteria, faults, impl_spec)
    excerpts = tuple(
        VerdictExcerpt(verdict.criterion_id, _excerpt(item, verdict))
        for verdict in item.verdicts
        if verdict.status in (Status.FAIL, Status.ERROR)
    )
    return ScenarioJudgement(item.result, excerpts)


def combine_judgements(
    implementation: ImplementationInfo,
    judgements: Sequence[ScenarioJudgement],
    seed: int = DEFAULT_SEED,
    *,
    criteria: Sequence[Criterion] | None = None,
    expectations: Mapping[str, str] | None = None,
    impl_spec: str = DEFAULT_IMPL_SPEC,
    thresholds: Thresholds | None = None,
    command: str = "",
    required_features: Sequence[str] = (),
    started: str = "",
    duration_s: float = 0.0,
) -> RunResult:
    """The RunResult of scenarios judged one at a time (by :func:`judge_scenario`, perhaps in
    other processes), in the order given, judged by ``criteria`` (default: the catalogue;
    a subset judges only those). Same rules as :func:`run_suite`: no vacuous pass, an
    errored scenario's passes do not count, expectations applied."""
    criteria = conformance.core_always_applies(
        tuple(default_criteria() if criteria is None else criteria)
    )
    declared = tuple(str(f) for f in implementation.features)
    expected = _check_expectations(expectations, criteria)
    judged = [_rejudged(judgement, criteria) for judgement in judgements]
    criterion_results = tuple(
        _criterion_result(i, criterion, judged, seed, impl_spec, expected, declared)
        for i, criterion in enumerate(criteria)
    )
    reached = {fp for item in judged for fp in item.result.failpoints_reached}
    return RunResult(
        schema_version=REPORT_SCHEMA_VERSION,
        implementation=implementation,
        run=RunInfo(
            seed=seed,
            harness_version=harness.__version__,
            thresholds=thresholds or Thresholds(),
            started=started,
            duration_s=round(duration_s, 6),
            command=command,
        ),
        summary=summarize(criterion_results),
        criteria=criterion_results,
        scenarios=tuple(item.result for item in judged),
        coverage=_coverage(criteria, judged),
        failpoints_unreached=tuple(fp.value for fp in Failpoint if fp.value not in reached),
        required_features=tuple(str(f) for f in required_features),
    )


def _rejudged(judgement: ScenarioJudgement, criteria: Sequence[Criterion]) -> _Judged:
    """A judgement's verdicts back as Verdicts, in ``criteria`` order."""
    records = {record.criterion_id: record for record in judgement.result.verdicts}
    missing = [c.id for c in criteria if c.id not in records]
    if missing:
        raise ValueError(f"scenario {judgement.result.id} was not judged by {', '.join(missing)}")
    verdicts = tuple(
        Verdict(
            record.criterion_id,
            Status(record.status),
            tuple(Evidence(e.note, e.trace_indexes, e.ledger_rows) for e in record.evidence),
            record.exercised,
        )
        for record in (records[c.id] for c in criteria)
    )
    excerpts = {e.criterion_id: e.lines for e in judgement.excerpts}
    return _Judged(None, judgement.result, verdicts, None, excerpts)
