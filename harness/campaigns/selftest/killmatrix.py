"""Run the suite on the reference and on every mutant; build the kill matrix.

Guarantees of :func:`run_selftest`:

* the reference runs the whole given suite first; its per-scenario verdicts tell which
  scenarios exercise which criterion;
* each mutant runs (with its defect applied) first on the scenarios of its expected
  criteria's stages that exercise them on the reference (hand-written ones, then the
  variants of templates too), widening to every exercising
  scenario and then to the whole suite only while it is not caught — or on the whole suite
  at once with ``full=True``; every criterion is judged on the traces it ran (``killed_by``
  is complete only with ``full=True``);
* without ``full``, a mutant's scenarios run one at a time and stop after the one on which
  every criterion it names has failed (otherwise at the end of the first set that caught
  it, as before): which of its expected criteria catch it, hence every score, is the same
  as running the whole set; only criteria it does not name that would fail on the skipped
  scenarios are left out of ``killed_by`` (the matrix's ``+`` cells; ``full=True`` gives
  them all). The scenarios of a :data:`FAULT_FIRED` mutant are ordered so that those
  together planning at every failpoint come first (:func:`new_plans_first`);
* each mutant runs only the scenarios whose reference run called one of the functions or
  methods it replaces (:mod:`harness.mutants.target_coverage`; also with ``full=True``),
  plus any the reference did not pass or whose coverage is unknown: a scenario calling none
  of them runs identically under the mutant, so every verdict, ``killed_by`` and score is
  the same as without the selection (``select=False``). A mutant that cannot be tracked
  that way (it edits a top-level assignment, declares its own features, or is not made of
  text edits) keeps every scenario. A mutant no scenario of the suite executes is reported
  not caught with :data:`NEVER_EXECUTED` as its reason, without running any scenario;
* a mutant's witnesses (the scenarios an earlier self-test caught it on,
  :mod:`harness.campaigns.selftest.witnesses`) run before its stages, and it stops there when they
  fail every criterion it names; else its stages run as without them (a witness is not run
  again; its failures count for the stage sets it belongs to): being caught never depends
  on them, and the expected criteria credited are never fewer; ``caught_on`` names the
  scenarios that caught it, the next table's witnesses;
* a mutant whose edits no longer apply to the reference (:class:`MutantError`) is reported
  not caught, with the reason, without running any scenario;
* a mutant is *caught* only when one of its expected criteria fails on it; other criteria
  that fail are recorded too (``killed_by``); a checker error or a scenario error is never
  counted as a criterion's kill (a crash is not a detection by the criterion);
* one judgement that is not a criterion also kills: :data:`FAULT_FIRED` (``"fault-fired"``)
  is in ``killed_by`` when a scenario errored because a planned fault or concurrent_turn
  hold did not happen (its ``faults_unfired``, see :mod:`harness.criteria.fault_coverage`), and only
  then (a hang or an unexpected exception is not it). A mutant whose defect is skipping a
  failpoint names it in ``expected``; its first scenarios are those with a required fault
  or a concurrent turn. It gets its own column in the matrix, and no entry in
  ``kills_per_criterion`` (it is not a criterion);
* ``kills_per_criterion`` counts, for every criterion of the catalogue, the mutants it
  failed on; criteria with no kill are listed as blind;
* :func:`mutation_scores` (pure) scores each criterion (of the mutants expecting it, how
  many it failed on) and each trust class (of its mutants, how many were caught; mutants
  without a class count under ``criterion``).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from typing import Any, Callable, Collection, Mapping, Sequence

from harness.criteria.base import Criterion
from harness.criteria.fault_coverage import FAULT_FIRED
from harness.report.result import (
    CriterionStatus,
    MutantResult,
    MutationScore,
    RunResult,
    ScenarioResult,
    ScenarioStatus,
    SelftestResult,
)
from harness.mutants.mutant import TRUST_CLASSES, Mutant, MutantImplementation
from harness.mutants.source_patch import MutantError
from harness.mutants.target_coverage import (
    Tracking,
    covering_runner,
    read_coverage,
    recording,
    tracking,
)
from harness.campaigns.selftest.witnesses import first as witnessed_first
from harness.running.suite import default_runner, run_suite

NEVER_EXECUTED = "no bundled scenario executes the code it edits"
"""The reason a mutant is reported not caught when no scenario's reference run called any
function or method it replaces: a gap in the scenarios, not in the criteria."""


@dataclass(frozen=True, slots=True)
class SelftestProgress:
    phase: str
    """"reference" or "mutant"."""
    index: int
    total: int
    name: str
    caught: bool | None = None
    killed_by: tuple[str, ...] = ()


def reference_clean(result: RunResult) -> bool:
    """No criterion failed or errored and every scenario completed on the reference.

    (A criterion a subset of scenarios leaves unexercised is reported by the run itself;
    over the bundled suite every criterion is exercised.)"""
    return all(
        c.status not in (CriterionStatus.FAILED, CriterionStatus.ERROR) for c in result.criteria
    ) and all(s.status is not ScenarioStatus.ERROR for s in result.scenarios)


def exercising_scenarios(result: RunResult) -> dict[str, set[str]]:
    """criterion id → ids of the scenarios whose trace exercised it (and passed it)."""
    found: dict[str, set[str]] = {}
    for scenario in result.scenarios:
        for verdict in scenario.verdicts:
            if verdict.exercised > 0:
                found.setdefault(verdict.criterion_id, set()).add(scenario.id)
    return found


def run_selftest(
    reference: Any,
    scenarios: Sequence[Any],
    mutants: Sequence[Mutant],
    seed: int = 0,
    *,
    criteria: Sequence[Criterion] | None = None,
    runner: Callable[..., Any] | None = None,
    full: bool = False,
    time_limit_s: float = 20.0,
    progress: Callable[[SelftestProgress], None] | None = None,
    jobs: int = 1,
    select: bool = True,
    witnesses: Mapping[str, Sequence[str]] | None = None,
) -> tuple[RunResult, SelftestResult]:
    """The reference's RunResult and the kill matrix over ``mutants``.

    ``jobs`` > 1 runs mutants in forked worker processes (:mod:`harness.running.parallel`; each
    mutant's patches then live in its own process); the result does not depend on the
    number of jobs, and a worker that dies is that mutant's failure, not the run's.
    ``select`` (default) runs each mutant only on the scenarios that execute what it edits
    (see the module doc); False runs every scenario its stages name. ``witnesses`` (mutant
    name -> scenario ids, :mod:`harness.campaigns.selftest.witnesses`) are tried before a mutant's
    stages; they order, they never decide (ignored with ``full``).
    """
    trackings = [tracking(mutant) for mutant in mutants] if select else []
    with tempfile.TemporaryDirectory(prefix="lh-coverage-") as folder, \
            recording((t for tracked in trackings for t in tracked.targets), reference):
        reference_result = run_suite(
            reference, scenarios, seed, criteria=criteria,
            runner=covering_runner(runner or default_runner(), folder) if select else runner,
            time_limit_s=time_limit_s, jobs=jobs,
        )
        coverage = read_coverage(folder) if select else {}
    if progress:
        progress(SelftestProgress("reference", 0, len(mutants), reference.info.name,
                                  reference_clean(reference_result)))
    criterion_ids = [c.id for c in reference_result.criteria]
    exercising = exercising_scenarios(reference_result)
    exercising[FAULT_FIRED] = {s.id for s in scenarios if _plans_something(s)}
    kept = [kept_scenarios(tracked, reference_result, coverage) for tracked in trackings] \
        or [None] * len(mutants)
    plans = [
        (mutant,
         () if full or not witnesses else witnessed_first(
             witnesses.get(mutant.name, ()),
             scenarios if keep is None else [s for s in scenarios if s.id in keep]),
         _scenarios_for(mutant, scenarios, exercising, full, keep))
        for mutant, keep in zip(mutants, kept)
    ]
    job = _Job(reference, tuple(plans), tuple(criterion_ids), seed, criteria, runner, time_limit_s,
               full, frozenset(m.name for m, keep in zip(mutants, kept) if keep == frozenset()))
    if jobs > 1 and len(mutants) > 1:
        warm_up_here(reference, scenarios, seed, criteria, runner, time_limit_s)
    outcomes = run_mutants(job, jobs, progress, len(mutants))
    return reference_result, selftest_result(reference_result, outcomes, criterion_ids)


def warm_up_here(reference: Any, scenarios: Sequence[Any], seed: int,
                 criteria: Sequence[Criterion] | None, runner: Callable[..., Any] | None,
                 time_limit_s: float) -> None:
    """Run the reference on the suite's shortest scenario (fewest steps) in this process,
    result discarded, before a worker is forked per mutant: what a first run in a process
    builds lazily (imports, caches) is then inherited instead of built again per mutant.
    A scenario run leaves nothing behind that changes a later one (the premise of the
    suite's reused workers), so no result changes; a failure here only forgoes the gain."""
    if not scenarios:
        return
    shortest = min(scenarios, key=lambda s: len(getattr(s, "steps", ())))
    try:
        run_suite(reference, (shortest,), seed, criteria=criteria, runner=runner,
                  time_limit_s=time_limit_s)
    except Exception:  # noqa: BLE001 - only a speed-up: each mutant's own run reports problems
        return


def kept_scenarios(tracked: Tracking, reference_result: RunResult,
                   coverage: Mapping[str, frozenset[str]]) -> frozenset[str] | None:
    """Ids of the scenarios a mutant must run on (None: every one): those whose reference
    run called one of its targets, or passed nothing to decide on (it did not pass, or its
    coverage is unknown: such a scenario is kept, which is always sound)."""
    if tracked.untracked:
        return None
    names = tracked.names
    return frozenset(
        s.id for s in reference_result.scenarios
        if s.status is not ScenarioStatus.PASSED or s.id not in coverage
        or coverage[s.id] & names
    )


def run_mutants(job: "_Job", jobs: int, progress: Callable[[SelftestProgress], None] | None,
                total: int) -> list[MutantResult]:
    """Every mutant of ``job`` through the worker pool (each in its own forked process when
    ``jobs`` > 1, its patches living and dying there), in mutant order; a worker that dies
    or hangs gives that mutant a result naming the cause (not caught)."""
    from harness.running.parallel import CaseFailure, run_cases

    def result(index: int, outcome: Any) -> MutantResult:
        if not isinstance(outcome, CaseFailure):
            return outcome
        mutant = job.plans[index][0]
        return MutantResult(name=mutant.name, defect=mutant.defect, expected=mutant.expected,
                            killed_by=(), caught=False,
                            scenario_errors=(f"worker process: {outcome.cause}",),
                            trust_class=mutant.trust_class)

    order = heaviest_first(job.plans) if jobs > 1 else list(range(len(job.plans)))

    def done(started: int, outcome: Any) -> None:
        if progress:
            mutant = result(order[started], outcome)
            progress(SelftestProgress("mutant", order[started] + 1, total, mutant.name,
                                      mutant.caught, mutant.killed_by))

    ran = run_cases(lambda started: job.run(order[started]), len(order), jobs=jobs,
                    on_done=done)
    outcomes: list[Any] = [None] * len(order)
    for started, outcome in enumerate(ran):
        outcomes[order[started]] = outcome
    return [result(i, o) for i, o in enumerate(outcomes)]


def heaviest_first(plans: Sequence[tuple[Any, Sequence[Any], Sequence[Sequence[Any]]]]
                   ) -> list[int]:
    """Mutant positions by the most scenario runs each may need (its witnesses and every
    stage), most first, ties in mutant order. The worker pool takes cases in the order
    given, so a mutant that runs long starts early instead of running alone at the end
    (one mutant whose witnesses never fail every criterion it names ran its 34 scenarios
    for the last 3 s of a 20 s self-test). Each mutant runs in a process of its own, so
    its result does not depend on the order."""
    def bound(position: int) -> int:
        _mutant, witnessed, stages = plans[position]
        return len({s.id for s in witnessed} | {s.id for stage in stages for s in stage})

    return sorted(range(len(plans)), key=lambda position: (-bound(position), position))


def selftest_result(reference_result: RunResult, outcomes: Sequence[MutantResult],
                    criterion_ids: Sequence[str]) -> SelftestResult:
    """The kill matrix of the mutants' results (also what ``merge`` rebuilds from shards)."""
    kills = {cid: sum(1 for m in outcomes if cid in m.killed_by) for cid in criterion_ids}
    caught = sum(1 for m in outcomes if m.caught)
    per_criterion, per_class = mutation_scores(outcomes, criterion_ids)
    return SelftestResult(
        reference_passed=reference_clean(reference_result),
        mutants=tuple(outcomes),
        mutation_score=round(caught / len(outcomes), 4) if outcomes else 0.0,
        kills_per_criterion=kills,
        blind_criteria=tuple(cid for cid in criterion_ids if kills[cid] == 0),
        score_per_criterion=per_criterion,
        score_per_class=per_class,
    )


UNCLASSED = "criterion"
"""The score key of mutants with no trust class (the per-criterion and durability ones)."""


def mutation_scores(
    mutants: Sequence[MutantResult], criterion_ids: Sequence[str] = ()
) -> tuple[dict[str, MutationScore], dict[str, MutationScore]]:
    """(per criterion, per trust class) mutation scores of a kill matrix.

    Per criterion: the mutants that list it as expected, and how many of them it failed on
    (without ``--full`` a mutant stops at its first catching scenarios, so a second expected
    criterion may be under-counted). Every id of ``criterion_ids`` gets an entry (0/0 for a
    criterion no mutant expects), in that order, then any other expected id. Per class:
    every trust class met (``criterion`` for none), its mutants and how many were caught by
    an expected criterion."""
    order = list(criterion_ids)
    for m in mutants:
        order += [c for c in m.expected if c not in order]
    per_criterion = {
        cid: MutationScore(
            expected=sum(1 for m in mutants if cid in m.expected),
            caught=sum(1 for m in mutants if cid in m.expected and cid in m.killed_by),
        )
        for cid in order
    }
    classes: dict[str, list[MutantResult]] = {}
    for m in mutants:
        classes.setdefault(m.trust_class or UNCLASSED, []).append(m)
    per_class = {
        name: MutationScore(len(members), sum(1 for m in members if m.caught))
        for name, members in sorted(classes.items())
    }
    return per_criterion, per_class


def score_lines(result: SelftestResult) -> list[str]:
    """The per-criterion and per-class mutation scores as text (what ``selftest`` prints)."""
    lines = ["mutation score per trust class (caught/mutants):"]
    for name, score in result.score_per_class.items():
        about = TRUST_CLASSES.get(name, "per-criterion and durability mutants")
        flag = "" if score.caught == score.expected else "  <- MISSED"
        lines.append(f"  {name:<20} {score.caught}/{score.expected} ({score.score:.0%})  "
                     f"{about}{flag}")
    lines.append("mutation score per criterion (killed/expected; - none expects it):")
    cells = []
    for cid, score in result.score_per_criterion.items():
        cells.append(f"{cid} {score.caught}/{score.expected}" if score.expected else f"{cid} -")
    for start in range(0, len(cells), 8):
        lines.append("  " + "  ".join(f"{c:<11}" for c in cells[start:start + 8]).rstrip())
    return lines


@dataclass(frozen=True, slots=True)
class _Job:
    reference: Any
    plans: tuple[tuple[Mutant, tuple[Any, ...], tuple[tuple[Any, ...], ...]], ...]
    """Per mutant, its witnesses (tried first) and the scenario sets to try in turn."""
    criterion_ids: tuple[str, ...]
    seed: int
    criteria: Sequence[Criterion] | None
    runner: Callable[..., Any] | None
    time_limit_s: float
    full: bool = False
    """Run every scenario set whole (no stop once the named criteria failed)."""
    never_executed: frozenset[str] = frozenset()
    """Names of the mutants no scenario's reference run executes the code of."""

    def run(self, position: int) -> MutantResult:
        mutant, witnessed, stages = self.plans[position]
        unapplied = _does_not_apply(mutant)
        if unapplied:  # every scenario would only error on it: say so once, run nothing
            return MutantResult(name=mutant.name, defect=mutant.defect, expected=mutant.expected,
                                killed_by=(), caught=False, scenario_errors=(unapplied,),
                                trust_class=mutant.trust_class)
        if mutant.name in self.never_executed:  # it would run exactly as the reference
            return MutantResult(name=mutant.name, defect=mutant.defect, expected=mutant.expected,
                                killed_by=(), caught=False, scenario_errors=(NEVER_EXECUTED,),
                                trust_class=mutant.trust_class)
        expected = set(mutant.expected)
        killed: set[str] = set()
        ran: list[Any] = []
        kills_on: dict[str, set[str]] = {}  # scenario id -> what it counts (_kills_in)
        errors: list[str] = []

        def run_set(chosen: tuple[Any, ...], failing_before: set[str]) -> None:
            failing_so_far = set(failing_before)

            def every_expected_failed(scenario: ScenarioResult) -> bool:
                failing_so_far.update(_kills_in(scenario))
                return expected <= failing_so_far

            mutated = run_suite(
                MutantImplementation(self.reference, mutant), chosen, self.seed,
                criteria=self.criteria, runner=self.runner, time_limit_s=self.time_limit_s,
                impl_spec=f"mutant:{mutant.name}",
                stop_after=None if self.full else every_expected_failed,
            )
            judged = [s for s in mutated.scenarios if s.status is not ScenarioStatus.NOT_RUN]
            ran.extend(chosen[:len(judged)])
            for scenario in judged:
                kills_on[scenario.id] = _kills_in(scenario)
            killed.update(c.id for c in mutated.criteria if c.status is CriterionStatus.FAILED)
            if any(s.status is ScenarioStatus.ERROR and s.faults_unfired for s in judged):
                killed.add(FAULT_FIRED)
            errors.extend(
                f"{s.id}: {s.error.splitlines()[0] if s.error else 'error'}"
                for s in judged if s.status is ScenarioStatus.ERROR
            )

        def failed_on(scenarios: Sequence[Any]) -> set[str]:
            return set().union(*(kills_on.get(s.id, set()) for s in scenarios))

        if witnessed:  # tried first; decisive only when they fail every expected criterion
            run_set(witnessed, set())
        if not (witnessed and expected <= failed_on(witnessed)):
            for chosen in stages:  # a later stage only when the earlier ones did not catch it
                # The set as without witnesses: one already run is not run again, and its
                # failures count for this set (so the stages decide what they decide alone).
                fresh = tuple(s for s in chosen if s not in ran)
                if fresh:
                    run_set(fresh, failed_on(chosen))
                if failed_on(chosen) & expected:
                    break
        order = {cid: i for i, cid in enumerate((*self.criterion_ids, FAULT_FIRED))}
        killed_by = tuple(sorted(killed, key=lambda cid: order.get(cid, len(order))))
        return MutantResult(
            name=mutant.name,
            defect=mutant.defect,
            expected=mutant.expected,
            killed_by=killed_by,
            caught=any(c in killed_by for c in mutant.expected),
            scenarios_run=tuple(s.id for s in ran),
            scenario_errors=tuple(errors),
            trust_class=mutant.trust_class,
            caught_on=_caught_on(ran, kills_on, expected),
        )


def _caught_on(ran: Sequence[Any], kills_on: Mapping[str, set[str]],
               expected: set[str]) -> tuple[str, ...]:
    """The scenarios (in the order run) each of which failed an expected criterion none run
    before it had: the fewest that, run first, catch the mutant as this run did."""
    found: list[str] = []
    covered: set[str] = set()
    for scenario in ran:
        new = (kills_on.get(scenario.id, set()) & expected) - covered
        if new:
            found.append(scenario.id)
            covered |= new
    return tuple(found)


def _kills_in(scenario: ScenarioResult) -> set[str]:
    """What one judged scenario of a mutant counts against it: the criteria that failed on
    its trace, and :data:`FAULT_FIRED` when it errored because a planned fault or hold did
    not happen (the same readings the whole run's ``killed_by`` is made of)."""
    failed = {v.criterion_id for v in scenario.verdicts if v.status == "fail"}
    if scenario.status is ScenarioStatus.ERROR and scenario.faults_unfired:
        failed.add(FAULT_FIRED)
    return failed


def _does_not_apply(mutant: Mutant) -> str:
    """Why the mutant's edits cannot be applied to the current reference ("" when they can).

    A stale edit (the reference moved the text it finds) would otherwise surface as the
    same error in every scenario of every stage, the whole suite run for nothing."""
    try:
        with mutant.patches():
            pass
    except Exception as exc:  # noqa: BLE001 - a MutantError, or a mutant's own bug
        kind = "" if isinstance(exc, MutantError) else f"{type(exc).__name__}: "
        return f"the mutant does not apply: {kind}{exc}"
    return ""


def default_jobs() -> int:
    """``--jobs`` default: the number of cores (the worker pool's default)."""
    from harness.running.parallel import default_jobs as cores

    return cores()


def _scenarios_for(
    mutant: Mutant, scenarios: Sequence[Any], exercising: dict[str, set[str]], full: bool,
    keep: Collection[str] | None = None,
) -> tuple[tuple[Any, ...], ...]:
    """The scenario sets a mutant is tried on, in order, until one catches it.

    First the scenarios of the expected criteria's own stages that exercise them (a stage's
    folder is where its defects are staged), then every scenario that exercises them on the
    reference, then the whole suite — so the matrix shows what catches a mutant even when
    its expected criteria miss it. Within its own stages the hand-written scenarios come
    before the variants of scenario templates. ``full`` runs the whole suite at once.
    ``keep`` (None: all) are the ids of the only scenarios that can kill it (see
    :func:`kept_scenarios`); every set holds only those, in the same order."""
    if keep is not None:
        scenarios = tuple(s for s in scenarios if s.id in keep)
    if full:
        return (tuple(scenarios),) if scenarios else ()
    wanted = set().union(*(exercising.get(c, set()) for c in mutant.expected))
    stages = {_stage_of(c) for c in mutant.expected}
    own_stage = tuple(s for s in scenarios if s.id in wanted and s.stage in stages)
    # Hand-written scenarios before the variants of templates: most defects show in the
    # example staged for them, and a stage's variants outnumber its examples several times.
    own_examples = tuple(s for s in own_stage if not getattr(s, "variant", ""))
    exercising_all = tuple(s for s in scenarios if s.id in wanted)
    chosen_in_turn = (own_examples, own_stage, exercising_all, tuple(scenarios))
    if FAULT_FIRED in mutant.expected:
        chosen_in_turn = tuple(new_plans_first(chosen) for chosen in chosen_in_turn)
    return tuple(chosen for chosen in chosen_in_turn if chosen)


def new_plans_first(scenarios: Sequence[Any]) -> tuple[Any, ...]:
    """The scenarios reordered so that each next one plans a fault or hold at a failpoint
    none before it planned at (the one planning the most new failpoints first, the suite's
    order among equals), then the rest in the suite's order.

    A mutant that skips a failpoint on some path is caught by a scenario planning something
    there (:data:`FAULT_FIRED`); which failpoint it skips is its secret, so the scenarios
    that together plan at every planned failpoint come first, one per failpoint."""
    remaining = list(scenarios)
    ordered: list[Any] = []
    covered: set[str] = set()
    while remaining:
        gains = [len(_planned_failpoints(s) - covered) for s in remaining]
        best = max(gains)
        if best == 0:
            break
        chosen = remaining.pop(gains.index(best))
        ordered.append(chosen)
        covered |= _planned_failpoints(chosen)
    return (*ordered, *remaining)


def _planned_failpoints(scenario: Any) -> set[str]:
    """The failpoints where the scenario plans a required fault or a concurrent turn's hold."""
    faults = {str(f.failpoint) for f in getattr(scenario, "faults", ())
              if not getattr(f, "optional", False)}
    holds = {str(step.hold_at) for step in getattr(scenario, "steps", ())
             if str(getattr(step, "do", "")) == "concurrent_turn"
             and getattr(step, "hold_at", None) is not None}
    return faults | holds


def _plans_something(scenario: Any) -> bool:
    """Does the scenario plan a required fault or a concurrent turn (so a skipped failpoint
    can leave something unfired)?"""
    return any(not getattr(f, "optional", False) for f in getattr(scenario, "faults", ())) or any(
        str(getattr(step, "do", "")) == "concurrent_turn" for step in getattr(scenario, "steps", ()))


def _stage_of(criterion_id: str) -> str:
    """"L4.1" -> "l4", "X3" -> "x", "M2" -> "m"."""
    return criterion_id.split(".")[0].lower() if "." in criterion_id else criterion_id[0].lower()


def never_executed(mutant: MutantResult) -> bool:
    """Was the mutant left unrun because no scenario executes the code it edits?"""
    return not mutant.scenarios_run and mutant.scenario_errors == (NEVER_EXECUTED,)


def matrix_lines(result: SelftestResult, criterion_ids: Sequence[str]) -> list[str]:
    """The kill matrix as text: one row per mutant, one column per criterion.

    ``#`` expected criterion that killed it, ``o`` expected criterion that did not, ``+``
    another criterion that killed it, ``.`` none. A :data:`FAULT_FIRED` column follows the
    criteria when a mutant expects it or was killed by it. The row of a mutant no scenario
    executes says so after its cells (its criteria never saw it: not a criterion's miss).
    """
    if any(FAULT_FIRED in (*m.expected, *m.killed_by) for m in result.mutants):
        criterion_ids = (*criterion_ids, FAULT_FIRED)
    name_width = max([len(m.name) for m in result.mutants] + [6])
    header_rows = []
    width = max(len(c) for c in criterion_ids)
    for row in range(width):
        cells = "".join((c.rjust(width)[row]) for c in criterion_ids)
        header_rows.append(" " * (name_width + 8) + cells)
    lines = header_rows
    for m in result.mutants:
        cells = []
        for c in criterion_ids:
            if c in m.expected:
                cells.append("#" if c in m.killed_by else "o")
            else:
                cells.append("+" if c in m.killed_by else ".")
        why = f"  ({NEVER_EXECUTED})" if never_executed(m) else ""
        lines.append(f"{m.name:<{name_width}} {'caught ' if m.caught else 'MISSED '}"
                     f"{''.join(cells)}{why}")
    counts = {**result.kills_per_criterion,
              FAULT_FIRED: sum(1 for m in result.mutants if FAULT_FIRED in m.killed_by)}
    kills = "".join(
        (str(counts.get(c, 0)) if counts.get(c, 0) < 10 else "*") for c in criterion_ids
    )
    lines.append(f"{'kills':<{name_width}}        {kills}")
    return lines
