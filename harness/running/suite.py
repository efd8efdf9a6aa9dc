"""Run a set of scenarios against one implementation and judge every criterion on every trace.

Guarantees of :func:`run_suite`:

* every criterion is applied to every trace with :func:`harness.criteria.base.run_check`
  (so a crashing checker is an ``error``, an optional feature neither declared nor shown
  by the trace's behaviour ``not_applicable``);
* per criterion, verdicts combine with :func:`~harness.criteria.base.combine`: ``passed``
  only when exercised at least once and never failed or errored; ``not_applicable`` only when
  n/a on every trace; ``not_exercised`` otherwise (also with no scenarios at all);
* every failing or erroring verdict becomes a :class:`~harness.report.result.Violation` carrying the
  scenario, the seed, the evidence, the exact replay command, every cited trace event (with
  context) and every cited ledger row; a failed or errored scenario keeps its per-instance
  timeline (:mod:`harness.running.timeline`), and every scenario the failpoints where a fault fired;
* a scenario whose run reported an error (hang, IUT crash, a planned fault or hold that
  did not happen) or whose trace is not ``completed`` is ``error`` and fails the gate; its
  verdicts count neither as a pass nor as an exercise of any criterion (a pass becomes
  ``not_exercised`` saying why), while its failures and checker errors still count and
  show;
* conformance levels (:mod:`harness.contract.conformance`): core features never gate a
  criterion; every scenario runs whatever the implementation declares, and each records the
  optional features its behaviour showed (``features_shown``,
  :mod:`harness.criteria.feature_evidence`); a criterion ends ``not_applicable`` only when
  an optional feature it needs is neither declared nor shown in any scenario, otherwise n/a
  everywhere becomes ``not_exercised`` (so the core cannot be declared away); a scenario
  whose planned faults were excused (written for a feature the implementation neither
  declares nor showed, :attr:`harness.running.runner.ScenarioRun.excused`) lists them in
  ``faults_excused`` and counts none of its passes; ``required_features``
  (``--require-features``) are recorded for the gate;
* ``stop_after`` (``--fail-fast``) ends the run after the scenario it is true for; the
  scenarios after it are ``not_run`` (no verdicts, judged by no criterion); replay commands
  resolve from any directory (:func:`replay_path`);
* the result is a plain :class:`~harness.report.result.RunResult`; no trace or live object leaks
  into it, and nothing wall-clock enters a trace (only ``run.started``/``duration_s``).

An exception escaping the runner is a harness bug and propagates (the CLI exits 3); a
:class:`~harness.contract.errors.HarnessError` from the runner (bad scenario) propagates likewise.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import os
import shlex
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

import harness
from harness.contract import conformance
from harness.contract import Failpoint, Implementation, ImplementationInfo, Thresholds
from harness.criteria import feature_evidence, outside_view
from harness.criteria.base import (
    Criterion,
    Evidence,
    Status,
    Verdict,
    combine,
    not_exercised,
    run_check,
)
from harness.contract.errors import ExpectationsError
from harness.contract.expectations import ExpectedError
from harness.report.result import (
    EXPECTATIONS_STRICT,
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
from harness.trace.record import Trace, TraceMeta, trace_digest
from harness.running.timeline import build_timeline, cited_ledger_rows, injected_failpoints
from harness.trace.lines import cited_excerpt

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
    from harness.running.runner import run_scenario

    return run_scenario


def default_fault_renderer() -> FaultRenderer:
    from harness.faults.plan import render

    return render


# --------------------------------------------------------------------------- helpers


def replay_command(scenario_file: str, seed: int, impl_spec: str, variant: str = "") -> str:
    """The exact shell command that replays one scenario under one seed and implementation
    (``variant``: which variant of a scenario template); it works from any directory (see
    :func:`replay_path`)."""
    chosen = f" --variant {shlex.quote(variant)}" if variant else ""
    return (
        f"lifecycle-harness replay {shlex.quote(replay_path(scenario_file))}{chosen} "
        f"--seed {int(seed)} --impl {shlex.quote(impl_spec)}"
    )


def bundled_scenario_root() -> str:
    """The folder of the bundled suite (where ``replay`` looks up a relative path that is
    not a file in the working directory)."""
    from harness.scenarios.loader import DEFAULT_SCENARIO_DIR

    return os.path.abspath(os.fspath(DEFAULT_SCENARIO_DIR))


def replay_path(scenario_file: object) -> str:
    """How a replay command names a scenario file so that it resolves from any directory: a
    bundled scenario relative to the bundled suite root (``l4/crash_after_result_saved.toml``,
    which ``replay`` finds there when no such file is in the working directory), any other
    file by its absolute path."""
    text = os.fspath(scenario_file) if isinstance(scenario_file, os.PathLike) else str(scenario_file)
    absolute = os.path.abspath(text)
    root = bundled_scenario_root()
    try:
        inside = os.path.commonpath([absolute, root]) == root
    except ValueError:  # other drive on Windows
        inside = False
    if inside and absolute != root:
        return os.path.relpath(absolute, root).replace(os.sep, "/")
    return absolute


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


def not_counted_excused(verdict: Verdict, excused: Sequence[str]) -> Verdict:
    """A verdict of a scenario whose planned faults were excused (written for a feature the
    implementation neither declares nor showed): the run did not go as planned, so a pass
    proves nothing and becomes ``not_exercised``; failures, errors and n/a stay."""
    if verdict.status is not Status.PASS:
        return verdict
    first = excused[0].split(" [excused:")[0] if excused else "a planned fault"
    return not_exercised(verdict.criterion_id,
                         f"not counted: planned but not carried out ({first}); the scenario is "
                         "written for an optional feature the implementation neither declares "
                         "nor showed")


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
        not_selected=count(CriterionStatus.NOT_SELECTED),
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
    excerpts: tuple[tuple[str, ...], ...]
    """Per criterion (criteria order): the trace lines around every event a failing verdict
    cites (empty for the others and for a scenario never run), cut where the trace is, so a
    worker process hands back no trace."""
    ledger_rows: tuple[tuple[str, ...], ...] = ()
    """Per criterion (criteria order, or empty): the ledger rows a failing verdict cites."""


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
    stop_after: Callable[[ScenarioResult], bool] | None = None,
    expectations_mode: str = EXPECTATIONS_STRICT,
    jobs: int = 1,
    expected_errors: Sequence[ExpectedError] = (),
    not_applicable: Mapping[str, str] | None = None,
) -> RunResult:
    """Run every scenario once under ``seed``, judge every criterion, return the RunResult.

    ``jobs`` > 1 runs the scenarios in forked worker processes (:mod:`harness.running.parallel`):
    the result is the same as with one job (volatile durations aside); a worker that dies
    or hangs makes its scenario ``error`` with the cause, not the run.

    ``criteria`` defaults to the catalogue, ``runner`` to ``harness.running.runner.run_scenario``,
    ``fault_renderer`` to ``harness.faults.plan.render`` (all resolved lazily).
    ``expectations`` maps criterion id → reason for criteria known to fail (see
    :func:`apply_expectation`). ``impl_spec`` is the ``--impl`` text quoted in replay
    commands. ``thresholds`` are the defaults reported in the run info.
    ``stop_after(scenario_result)`` true ends the run there (``--fail-fast``): the scenarios
    after it are recorded ``not_run`` and judged by no criterion. ``expectations_mode`` says
    whether an unexpected pass fails the gate (recorded in the run info).
    ``expected_errors`` are the expectations file's known scenario errors
    (:func:`expect_errors`).
    ``not_applicable`` maps criterion id → why the implementation cannot be judged on it
    (a profile's or an adapter's system lacks the concept, or the adapter cannot see it):
    such a criterion is reported ``not_applicable`` with that reason, never passed, the
    violations the scenarios found still listed. Only the harness's own profiles and
    adapters declare it (``harness.profiles.not_applicable_of``); an implementation under
    test has no way to.
    """
    criteria, runner, fault_renderer = _resolve_defaults(
        implementation, criteria, runner, fault_renderer)
    expected = _check_expectations(expectations, criteria)
    inapplicable = _check_expectations(not_applicable, criteria)

    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    clock_start = time.monotonic()
    total = len(scenarios)
    plans = [render_faults(fault_renderer, scenario) for scenario in scenarios]

    def case(index: int) -> _Judged:
        scenario, faults = scenarios[index], plans[index]
        run = runner(
            implementation, scenario, seed, time_limit_s=time_limit_s, data_root=data_root
        )
        return _judge(scenario, run, seed, criteria, faults, impl_spec)

    def started_case(index: int) -> None:
        if progress:
            progress(ProgressEvent("start", index + 1, total, scenarios[index].id, plans[index]))

    def done_case(index: int, item: Any) -> None:
        if progress and isinstance(item, _Judged):
            progress(
                ProgressEvent(
                    "done", index + 1, total, item.scenario.id, plans[index],
                    item.result.status, item.result.duration_s, item.result.error,
                )
            )

    def on_failure(index: int, cause: str) -> _Judged:
        # a case that lost its worker: the scenario errored with the worker's cause
        return _worker_failed(scenarios[index], cause, seed, criteria, plans[index], impl_spec)

    if stop_after is None:
        if jobs > 1 and scenarios:
            warm_up_workers(scenarios[0], criteria)
        judged = judge_cases(case, scenarios, jobs=jobs, on_start=started_case,
                             on_failure=on_failure, on_done=done_case)
    else:
        # --fail-fast: one scenario at a time, in order, so "the scenarios after the first
        # failure" are the same ones whatever --jobs says
        judged = []
        for index in range(total):
            started_case(index)
            judged.append(case(index))
            done_case(index, judged[-1])
            if stop_after(judged[-1].result):
                break
    not_run = tuple(_not_run(s, seed, fault_renderer, impl_spec) for s in scenarios[len(judged):])

    run_info = RunInfo(
        seed=seed,
        harness_version=harness.__version__,
        thresholds=thresholds or Thresholds(),
        started=started,
        duration_s=round(time.monotonic() - clock_start, 6),
        command=command,
        expectations_mode=expectations_mode,
        black_box=str(getattr(implementation, "black_box", "") or ""),
    )
    return assemble_result(implementation.info, run_info, criteria, judged, impl_spec,
                           expected, required_features, not_run, expected_errors,
                           inapplicable)


JudgedCase = _Judged
"""One judged scenario (public name for :mod:`harness.campaigns.merge`, which rebuilds them)."""


def expect_errors(results: Sequence[ScenarioResult], expected: Sequence[ExpectedError]
                  ) -> tuple[ScenarioResult, ...]:
    """``results`` with the expectations file's ``[[expected_error]]`` entries applied: a
    listed scenario records its entries (``expected_error``), and one that errored for a
    listed cause (its error message contains it) becomes ``expected_error``. Any other
    status stays: an error for another cause is a new error, a pass or a failure an
    unexpected success (``ScenarioResult.unexpected_success``), a ``not_run`` scenario
    neither."""
    if not expected:
        return tuple(results)
    marked = []
    for result in results:
        listed = [e for e in expected if e.scenario == result.id]
        if not listed:
            marked.append(result)
            continue
        status = result.status
        if status is ScenarioStatus.ERROR and any(e.matches(result.id, result.error)
                                                  for e in listed):
            status = ScenarioStatus.EXPECTED_ERROR
        marked.append(dataclasses.replace(result, status=status, expected_error="; ".join(
            e.text() for e in listed)))
    return tuple(marked)


def assemble_result(
    info: Any,
    run_info: RunInfo,
    criteria: Sequence[Criterion],
    judged: Sequence[_Judged],
    impl_spec: str,
    expected: Mapping[str, str],
    required_features: Sequence[str] = (),
    not_run: Sequence[ScenarioResult] = (),
    expected_errors: Sequence[ExpectedError] = (),
    inapplicable: Mapping[str, str] | None = None,
) -> RunResult:
    """The RunResult of judged scenarios, in the order given (then the ``not_run`` ones a
    ``--fail-fast`` run left): what a run and a merge of shards both end with, so both give
    the same report for the same scenarios. ``expected_errors`` mark the scenarios they
    list (:func:`expect_errors`); a merge passes none and keeps what each shard marked.
    ``run_info.black_box``: the implementation is
    judged from outside only (a real CLI), so a criterion that cannot be seen from there
    stays ``not_applicable`` (:mod:`harness.criteria.outside_view`)."""
    declared = tuple(str(f) for f in info.features)
    seed = run_info.seed
    criterion_results = tuple(
        _criterion_result(i, criterion, judged, seed, impl_spec, expected, declared,
                          inapplicable or {}, run_info.black_box)
        for i, criterion in enumerate(criteria)
    )
    coverage = _coverage(criteria, judged)
    reached = {fp for item in judged for fp in item.result.failpoints_reached}
    unreached = tuple(fp.value for fp in Failpoint if fp.value not in reached)
    return RunResult(
        schema_version=REPORT_SCHEMA_VERSION,
        implementation=info,
        run=run_info,
        summary=summarize(criterion_results),
        criteria=criterion_results,
        scenarios=expect_errors(tuple(item.result for item in judged) + tuple(not_run),
                                expected_errors),
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
    excused = tuple(getattr(run, "excused", ()))
    if excused and not error:
        verdicts = tuple(not_counted_excused(v, excused) for v in verdicts)
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
        failpoints_injected=injected_failpoints(run.trace),
        features_shown=tuple(f.value for f in feature_evidence.shown_features(run.trace)),
        faults_excused=excused,
        timeline=(build_timeline(run.trace, _cited_indexes(verdicts))
                  if status is not ScenarioStatus.PASSED else None),
    )
    failing = [v.status in (Status.FAIL, Status.ERROR) for v in verdicts]
    excerpts = tuple(cited_excerpt(run.trace, _first_indexes(v)) if bad else ()
                     for v, bad in zip(verdicts, failing))
    ledger_rows = tuple(
        cited_ledger_rows(run.trace, [row for e in v.evidence for row in e.ledger_rows])
        if bad else () for v, bad in zip(verdicts, failing))
    return _Judged(scenario, result, verdicts, excerpts, ledger_rows)


def warm_up_workers(scenario: Any, criteria: Sequence[Criterion]) -> None:
    """Before a worker is forked per case: do here the lazy imports and fill the caches that
    every run and judgement needs (a world's fake filesystem; the criteria's readings, on an
    empty trace), so each worker inherits them warm instead of paying them per case (about
    30-60 ms of CPU each). No implementation code runs and nothing is recorded."""
    from harness.running.runner import warm_up
    from harness.scenarios.loader import Scenario

    if not isinstance(scenario, Scenario):  # a caller's own case type: nothing known to warm
        return
    try:
        warm_up(scenario)
    except Exception:  # noqa: BLE001 - only a speed-up: the case itself reports the problem
        return
    meta = TraceMeta(scenario_id="warm-up", stage=str(getattr(scenario, "stage", "")), seed=0,
                     implementation="", features=(), thresholds=Thresholds(),
                     sessions=tuple(scenario.sessions), tools=tuple(scenario.tools), faults=())
    evaluate(criteria, Trace(meta, (), ()))  # a checker's error is a verdict, never raised


def judge_cases(
    case: Callable[[int], _Judged],
    scenarios: Sequence[Any],
    *,
    jobs: int,
    on_failure: Callable[[int, str], _Judged],
    on_start: Callable[[int], None] | None = None,
    on_done: Callable[[int, _Judged], None] | None = None,
) -> list[_Judged]:
    """``case(i)`` for every scenario, through the worker pool; a case whose worker gave no
    result becomes ``on_failure(i, cause)``."""
    from harness.running.parallel import CaseFailure, run_cases

    def finished(index: int, outcome: Any) -> None:
        if isinstance(outcome, CaseFailure):
            outcome = on_failure(index, outcome.cause)
        if on_done:
            on_done(index, outcome)

    # A case leaves nothing behind that changes a later one (the sequential run is the same
    # process for all): each worker takes case after case instead of a fork per case.
    outcomes = run_cases(case, len(scenarios), jobs=jobs, on_start=on_start, on_done=finished,
                         reuse_workers=True)
    return [on_failure(i, o.cause) if isinstance(o, CaseFailure) else o
            for i, o in enumerate(outcomes)]


def _worker_failed(
    scenario: Any,
    cause: str,
    seed: int,
    criteria: Sequence[Criterion],
    faults: tuple[str, ...],
    impl_spec: str,
) -> _Judged:
    """A scenario whose worker process died, hung or raised: ``error`` with the cause, and
    no criterion counts it as exercised."""
    error = f"worker process: {cause}"
    verdicts = tuple(not_exercised(c.id, f"not counted: the scenario errored ({error})")
                     for c in criteria)
    return _unrun(scenario, ScenarioStatus.ERROR, error, verdicts, seed, faults, impl_spec)


def _cited_indexes(verdicts: Sequence[Verdict]) -> tuple[int, ...]:
    """Trace indexes cited by the failing or erroring verdicts (the timeline keeps them)."""
    return tuple(i for v in verdicts if v.status in (Status.FAIL, Status.ERROR)
                 for item in v.evidence for i in item.trace_indexes)


def _requires(scenario: Any) -> tuple[str, ...]:
    return tuple(f.value for f in conformance.scenario_requirements(scenario))


def _unrun(
    scenario: Any,
    status: ScenarioStatus,
    error: str,
    verdicts: tuple[Verdict, ...],
    seed: int,
    faults: tuple[str, ...],
    impl_spec: str,
) -> _Judged:
    """A scenario with no trace (its worker lost): its verdicts as given."""
    file = display_path(scenario.file)
    result = ScenarioResult(
        id=scenario.id,
        file=file,
        stage=scenario.stage,
        seed=seed,
        status=status,
        duration_s=0.0,
        trace_digest="",
        faults=faults,
        failpoints_reached=(),
        verdicts=tuple(VerdictRecord(v.criterion_id, v.status.value, 0, _evidence(v))
                       for v in verdicts),
        error=error,
        replay=replay_command(file, seed, impl_spec, getattr(scenario, "variant", "")),
        requires=_requires(scenario),
    )
    return _Judged(scenario, result, verdicts, tuple(() for _ in verdicts))


def _not_run(scenario: Any, seed: int, fault_renderer: FaultRenderer, impl_spec: str
             ) -> ScenarioResult:
    """A scenario after the ``--fail-fast`` stop: listed, never run, judged by no criterion."""
    file = display_path(scenario.file)
    return ScenarioResult(
        id=scenario.id, file=file, stage=scenario.stage, seed=seed,
        status=ScenarioStatus.NOT_RUN, duration_s=0.0, trace_digest="",
        faults=render_faults(fault_renderer, scenario), failpoints_reached=(), verdicts=(),
        replay=replay_command(file, seed, impl_spec, getattr(scenario, "variant", "")),
        requires=_requires(scenario),
    )


def _criterion_result(
    position: int,
    criterion: Criterion,
    judged: Sequence[_Judged],
    seed: int,
    impl_spec: str,
    expected: Mapping[str, str],
    declared: Sequence[str] = (),
    inapplicable: Mapping[str, str] | None = None,
    black_box: str = "",
) -> CriterionResult:
    verdicts = [item.verdicts[position] for item in judged]
    combined = combined_status(verdicts)
    gates = tuple(str(f) for f in criterion.required_features)
    unseen = bool(black_box) and criterion.id not in outside_view.OUTSIDE
    if (combined is CriterionStatus.NOT_APPLICABLE and all(f in declared for f in gates)
            and not unseen):
        # Only an optional feature neither declared nor shown makes a criterion n/a; n/a
        # verdicts alone must not (a core criterion no scenario judged is not exercised).
        combined = CriterionStatus.NOT_EXERCISED
    reason = expected.get(criterion.id, "")
    if unseen:
        # the report gives every criterion pass, fail, or n/a with its reason: the one the
        # scenarios' verdicts cite (harness.criteria.outside_view), said once for the criterion
        reason = next((e.note for v in verdicts for e in v.evidence if e.note),
                      f"{criterion.id} cannot be judged from outside: {black_box}")
    if criterion.id in (inapplicable or {}):
        # the system lacks the concept, or the harness cannot see it in this system (a
        # profile's or adapter's declaration, with its reason): a verdict here would judge
        # the harness's stand-in, not the system. n/a, never passed; what the scenarios saw
        # stays listed under violations
        combined = CriterionStatus.NOT_APPLICABLE
        reason = (inapplicable or {})[criterion.id]
    status = apply_expectation(combined, criterion.id in expected)
    violations = tuple(
        Violation(
            scenario=item.result.id,
            seed=seed,
            evidence=_evidence(verdict),
            replay=item.result.replay,
            excerpt=item.excerpts[position],
            cited_ledger_rows=item.ledger_rows[position] if item.ledger_rows else (),
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
        expectation_reason=reason,
        required_features=gates,
    )


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
    ledger_rows: tuple[str, ...] = ()
    """The ledger rows the verdict cites, rendered."""


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
    """Run one scenario and judge every criterion on its trace, exactly as one step of
    :func:`run_suite`."""
    criteria, runner, fault_renderer = _resolve_defaults(
        implementation, criteria, runner, fault_renderer)
    faults = render_faults(fault_renderer, scenario)
    run = runner(implementation, scenario, seed, time_limit_s=time_limit_s, data_root=data_root)
    item = _judge(scenario, run, seed, criteria, faults, impl_spec)
    excerpts = tuple(
        VerdictExcerpt(verdict.criterion_id, item.excerpts[position],
                       item.ledger_rows[position] if item.ledger_rows else ())
        for position, verdict in enumerate(item.verdicts)
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
    expectations_mode: str = EXPECTATIONS_STRICT,
    expected_errors: Sequence[ExpectedError] = (),
    black_box: str = "",
) -> RunResult:
    """The RunResult of scenarios judged one at a time (by :func:`judge_scenario`, perhaps in
    other processes), in the order given, judged by ``criteria`` (default: the catalogue;
    a subset judges only those). Same rules as :func:`run_suite`: no vacuous pass, an
    errored scenario's passes do not count, expectations applied."""
    criteria = conformance.core_always_applies(
        tuple(default_criteria() if criteria is None else criteria)
    )
    expected = _check_expectations(expectations, criteria)
    judged = [_rejudged(judgement, criteria) for judgement in judgements]
    run_info = RunInfo(
        seed=seed,
        harness_version=harness.__version__,
        thresholds=thresholds or Thresholds(),
        started=started,
        duration_s=round(duration_s, 6),
        command=command,
        expectations_mode=expectations_mode,
        black_box=black_box,
    )
    return assemble_result(implementation, run_info, criteria, judged, impl_spec, expected,
                           required_features, expected_errors=expected_errors)


def verdict_of(record: VerdictRecord) -> Verdict:
    """A recorded verdict (a report's, a shard's, an xdist worker's) back as a Verdict."""
    return Verdict(record.criterion_id, Status(record.status),
                   tuple(Evidence(e.note, tuple(e.trace_indexes), tuple(e.ledger_rows))
                         for e in record.evidence),
                   record.exercised)


def _rejudged(judgement: ScenarioJudgement, criteria: Sequence[Criterion]) -> _Judged:
    """A judgement's verdicts back as Verdicts, in ``criteria`` order."""
    records = {record.criterion_id: record for record in judgement.result.verdicts}
    missing = [c.id for c in criteria if c.id not in records]
    if missing:
        raise ValueError(f"scenario {judgement.result.id} was not judged by {', '.join(missing)}")
    verdicts = tuple(verdict_of(records[c.id]) for c in criteria)
    cut = {e.criterion_id: e for e in judgement.excerpts}
    return _Judged(None, judgement.result, verdicts,
                   tuple(cut[c.id].lines if c.id in cut else () for c in criteria),
                   tuple(cut[c.id].ledger_rows if c.id in cut else () for c in criteria))


def _resolve_defaults(
    implementation: Implementation,
    criteria: Sequence[Criterion] | None,
    runner: Runner | None,
    fault_renderer: FaultRenderer | None,
) -> tuple[tuple[Criterion, ...], Runner, FaultRenderer]:
    """The criteria (core always applying), the runner and the fault renderer one run uses:
    the same for a whole suite and for one judged scenario."""
    return (
        conformance.core_always_applies(
            tuple(default_criteria() if criteria is None else criteria)),
        default_runner() if runner is None else runner,
        default_fault_renderer() if fault_renderer is None else fault_renderer,
    )
