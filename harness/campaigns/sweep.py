"""``lifecycle-harness sweep``: a crash (and raise, and hold) at every failpoint hit a
scenario reaches, each run judged by every criterion and audited for lost results and
double executions.

Guarantees of :func:`run_sweep`:

* **Learning.** Each scenario runs once as written (its *baseline* case, judged like every
  case); the ``FAILPOINT`` events of that trace say which failpoints it reaches and how
  often. Nothing about reachability is taken from the implementation's word.
* **Cases.** Per scenario, in lifecycle order of failpoints and hit order: ``crash`` and
  ``raise`` at hit *h* of failpoint *F* for every hit reached (at most ``max_hits`` per
  failpoint) that the scenario's own faults do not already use; and for each
  ``concurrent_turn`` step, instance A held at each failpoint A reached during that turn.
  The scenario's own faults and holds become optional (the swept fault may divert the run
  from the path they were planned on; :func:`harness.campaigns.chaos.with_faults`), a closing
  ``restart`` step is appended (so recovery runs after every swept fault, also when the
  crashed instance was a concurrent turn's second one), the swept crash
  or raise stays *required*: the run up to it is the baseline's, so it must fire, and a
  run where it did not is an error, never excused. A swept hold is optional (A's path can
  change once the scenario's own hold is gone); a case whose hold did not engage is
  ``not_exercised``, never ``passed``.
* **Judging.** Every criterion on every case (:func:`harness.campaigns.chaos.judge`), plus the ledger
  audit (:mod:`harness.criteria.ledger_audit`): a lost result or a double execution fails the case
  even if no criterion noticed it. In process mode (``--impl process:…``) a crash is a real
  SIGKILL of the implementation's process (the runner's crash mode).
* **Replay.** Each case names its replay command: the scenario file plus ``--crash-at
  F:H``, ``--raise-at F:H`` or ``--hold-at F:STEP`` on ``replay``, which rebuilds exactly
  this case's scenario with :func:`case_scenario`.
* **Parallel and sharded.** Cases run in the worker pool (:mod:`harness.running.parallel`; a dead
  worker is that case's error) or on a Dask cluster's workers
  (:mod:`harness.campaigns.executor`); ``--shard I/N`` splits them by case id
  (:mod:`harness.running.shard`) after every shard learned the same case list; ``merge`` joins
  the shards' ``sweep.json`` into the one an unsharded sweep writes (byte for byte: nothing
  wall-clock is in it; durations go to ``durations.json``).
* **Report.** ``sweep.json`` (every case, the matrix scenario → case → status, the
  headline), ``sweep.md`` and ``sweep.html``; the headline "N crash points, L lost results,
  D double executions" counts crash cases run and, over every case, the audit's findings.
"""

from __future__ import annotations

import argparse
import dataclasses
import html
import json
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from harness.contract import Failpoint, Implementation
from harness.criteria.base import Criterion
from harness.contract.errors import EXIT_CONFORMANCE_FAILURE, EXIT_OK, UsageError
from harness.faults.plan import Action, FaultPlan, make_fault
from harness.trace.record import Kind, Trace

ACTIONS = ("crash", "raise", "hold")
BASELINE = "baseline"
SWEEP_MESSAGE = "sweep: injected fault"
SWEEP_FILE = "sweep.json"
SWEEP_MD = "sweep.md"
SWEEP_HTML = "sweep.html"
SWEEP_FORMAT = "lifecycle-harness-sweep/1"
DEFAULT_SWEEP_DIR = os.path.join("reports", "sweep")
_ORDER = {point.value: i for i, point in enumerate(Failpoint)}


# --------------------------------------------------------------------------- values


@dataclass(frozen=True, slots=True)
class SweepCase:
    """One run of the sweep: scenario ``scenario_index`` with ``action`` at ``failpoint``
    hit ``hit`` (for ``hold``: ``hit`` is the 1-based number of the concurrent_turn step;
    for the baseline: no fault added)."""

    scenario_index: int
    scenario_id: str
    action: str
    failpoint: str = ""
    hit: int = 0

    @property
    def point(self) -> str:
        if self.action == BASELINE:
            return BASELINE
        if self.action == "hold":
            return f"hold:{self.failpoint}@step{self.hit}"
        return f"{self.action}:{self.failpoint}:{self.hit}"

    @property
    def id(self) -> str:
        return f"{self.scenario_id}|{self.point}"


@dataclass(frozen=True, slots=True)
class CaseResult:
    id: str
    scenario: str
    point: str
    action: str
    failpoint: str
    hit: int
    status: str
    """"passed", "failed", "error" or "not_exercised" (a swept hold that did not engage)."""
    failing: tuple[str, ...]
    """Criterion ids that failed or errored, then "lost-result"/"double-execution"."""
    notes: tuple[str, ...]
    error: str
    trace_digest: str
    executed: int
    lost: int
    doubles: int
    replay: str


def count_cases(statuses: Sequence[CaseResult]) -> dict[str, int]:
    return {
        "crash_points": sum(1 for c in statuses if c.action == "crash"),
        "raise_points": sum(1 for c in statuses if c.action == "raise"),
        "hold_points": sum(1 for c in statuses if c.action == "hold"),
        "cases": len(statuses),
        "passed": sum(1 for c in statuses if c.status == "passed"),
        "failed": sum(1 for c in statuses if c.status == "failed"),
        "errors": sum(1 for c in statuses if c.status == "error"),
        "not_exercised": sum(1 for c in statuses if c.status == "not_exercised"),
        "executions": sum(c.executed for c in statuses),
        "lost_results": sum(c.lost for c in statuses),
        "double_executions": sum(c.doubles for c in statuses),
    }


def headline(counts: dict[str, int]) -> str:
    return (f"{counts['crash_points']} crash points, {counts['lost_results']} lost results, "
            f"{counts['double_executions']} double executions "
            f"({counts['raise_points']} raise points, {counts['hold_points']} hold points; "
            f"{counts['passed']}/{counts['cases']} cases passed, {counts['failed']} failed, "
            f"{counts['errors']} errors, {counts['not_exercised']} not exercised)")


# --------------------------------------------------------------------------- cases


def reached_hits(trace: Trace) -> dict[str, int]:
    """Failpoint name → how many times the trace reached it (the world's FAILPOINT events)."""
    counts: dict[str, int] = {}
    for event in trace.of_kind(Kind.FAILPOINT):
        name = str(event.data.get("name", ""))
        counts[name] = counts.get(name, 0) + 1
    return counts


def held_points(trace: Trace) -> dict[int, tuple[str, ...]]:
    """For the n-th concurrent_turn (1-based, in driving order): the failpoints instance A
    reached during it, in first-reach order."""
    out: dict[int, tuple[str, ...]] = {}
    number = 0
    events = trace.events
    for event in events:
        if event.kind != Kind.DRIVER_CALL or event.data.get("method") != "concurrent_turn":
            continue
        if (event.data.get("args") or {}).get("role") != "A":
            continue
        number += 1
        names: list[str] = []
        for later in events[event.index + 1:]:
            if later.instance != event.instance:
                continue
            if later.kind in (Kind.DRIVER_RETURN, Kind.DRIVER_RAISED, Kind.CRASH):
                break
            if later.kind == Kind.FAILPOINT and later.data.get("name") not in names:
                names.append(str(later.data.get("name")))
        out[number] = tuple(names)
    return out


def plan_cases(index: int, scenario: Any, trace: Trace, *, actions: Sequence[str],
               max_hits: int | None, failpoints: Sequence[str] | None) -> list[SweepCase]:
    """The cases of one scenario from its baseline trace (see the module docstring)."""
    cases = [SweepCase(index, scenario.id, BASELINE)]
    counts = reached_hits(trace)
    names = sorted((n for n in counts if n in _ORDER and (not failpoints or n in failpoints)),
                   key=_ORDER.__getitem__)
    plan = FaultPlan(tuple(scenario.faults))
    for name in names:
        hits = range(1, min(counts[name], max_hits or counts[name]) + 1)
        free = [h for h in hits if plan.fault_at(name, h) is None]
        for action in ("crash", "raise"):
            if action in actions:
                cases += [SweepCase(index, scenario.id, action, name, h) for h in free]
    if "hold" in actions:
        turns = [n for n, s in enumerate(scenario.steps, start=1)
                 if str(s.do) == "concurrent_turn"]
        reached = held_points(trace)
        for number, step_no in enumerate(turns, start=1):
            for name in reached.get(number, ()):
                if name in _ORDER and (not failpoints or name in failpoints):
                    cases.append(SweepCase(index, scenario.id, "hold", name, step_no))
    return cases


def case_scenario(scenario: Any, action: str, failpoint: str = "", hit: int = 0) -> Any:
    """The scenario one case runs: ``scenario`` with its own faults and holds optional and
    ``action`` added at ``failpoint`` (hit ``hit``; for ``hold`` the step number)."""
    from harness.campaigns.chaos import with_faults

    from harness.scenarios.loader import Step, StepKind

    if action == BASELINE:
        return scenario
    base = with_faults(scenario, ())
    # A closing restart + recover(): the durability claim is about the state after recovery,
    # and a crash of a second instance (or a last step's crash) is otherwise never recovered.
    base = dataclasses.replace(base, steps=tuple(base.steps) + (Step(StepKind.RESTART),))
    if action == "hold":
        if not 1 <= hit <= len(base.steps) or str(base.steps[hit - 1].do) != "concurrent_turn":
            turns = [n for n, s in enumerate(base.steps, 1) if str(s.do) == "concurrent_turn"]
            raise UsageError(f"--hold-at {failpoint}:{hit}: step {hit} of {scenario.id} is not a "
                             f"concurrent_turn (those are step(s) "
                             f"{', '.join(map(str, turns)) or 'none'})")
        steps = list(base.steps)
        steps[hit - 1] = dataclasses.replace(steps[hit - 1], hold_at=Failpoint(failpoint),
                                             optional=True)
        faults = tuple(f for f in base.faults if f.action is not Action.HOLD)
        return dataclasses.replace(base, faults=faults, steps=tuple(steps))
    params = {"message": SWEEP_MESSAGE} if action == "raise" else {}
    fault = make_fault(failpoint, str(hit), action, params, where="sweep")
    try:
        plan = FaultPlan(tuple(base.faults) + (fault,))
    except Exception as exc:  # the scenario's own fault already uses that hit
        raise UsageError(f"{scenario.id}: {action} at {failpoint}:{hit}: {exc}") from None
    return dataclasses.replace(base, faults=plan.faults)


def _hold_engaged(trace: Trace) -> bool:
    return any(e.data.get("action") == "hold" for e in trace.of_kind(Kind.FAILPOINT))


def replay_of(case: SweepCase, scenario: Any, seed: int, impl_spec: str) -> str:
    from harness.running.suite import replay_command

    base = replay_command(scenario.file, seed, impl_spec, getattr(scenario, "variant", ""))
    if case.action == BASELINE:
        return base
    return f"{base} --{case.action}-at {case.failpoint}:{case.hit}"


def judge_case(case: SweepCase, scenario: Any, run: Any, criteria: Sequence[Criterion],
               replay: str) -> CaseResult:
    from harness.campaigns.chaos import judge
    from harness.criteria.ledger_audit import audit

    outcome = judge(run, criteria)
    ledger = audit(run.trace)
    failing = list(outcome.failing)
    notes = list(outcome.notes) + list(ledger.evidence)
    if ledger.lost:
        failing.append("lost-result")
    if ledger.doubles:
        failing.append("double-execution")
    if outcome.error:
        status = "error"
    elif failing:
        status = "failed"
    elif case.action == "hold" and not _hold_engaged(run.trace):
        status = "not_exercised"
        notes.append(f"the hold at {case.failpoint} did not engage: instance A did not reach "
                     "it during the concurrent turn once the scenario's own hold was gone")
    else:
        status = "passed"
    return CaseResult(case.id, case.scenario_id, case.point, case.action, case.failpoint,
                      case.hit, status, tuple(failing), tuple(notes), outcome.error,
                      outcome.trace_digest, len(ledger.executed), len(ledger.lost),
                      len(ledger.doubles), replay)


def _failed_case(case: SweepCase, replay: str, cause: str) -> CaseResult:
    return CaseResult(case.id, case.scenario_id, case.point, case.action, case.failpoint,
                      case.hit, "error", (), (), f"worker process: {cause}", "", 0, 0, 0, replay)


# --------------------------------------------------------------------------- the sweep


@dataclass(frozen=True, slots=True)
class SweepResult:
    impl_spec: str
    implementation: str
    seed: int
    all_cases: tuple[str, ...]
    """Every case id in sweep order (also the ones another shard ran)."""
    cases: tuple[CaseResult, ...]
    durations: dict[str, float]

    @property
    def counts(self) -> dict[str, int]:
        return count_cases(self.cases)

    @property
    def passed(self) -> bool:
        return all(c.status in ("passed", "not_exercised") for c in self.cases)


Progress = Callable[[str], None]


def run_sweep(
    implementation: Implementation,
    scenarios: Sequence[Any],
    *,
    seed: int = 0,
    impl_spec: str = "reference",
    criteria: Sequence[Criterion] | None = None,
    runner: Callable[..., Any] | None = None,
    time_limit_s: float = 20.0,
    actions: Sequence[str] = ACTIONS,
    max_hits: int | None = None,
    failpoints: Sequence[str] | None = None,
    jobs: int = 1,
    shard: Any = None,
    durations: dict[str, float] | None = None,
    progress: Progress | None = None,
    executor: Any = None,
) -> SweepResult:
    """Learn, plan and run every case (see the module docstring); ``executor`` (default:
    ``jobs`` local worker processes, :mod:`harness.campaigns.executor`) runs them."""
    import time

    from harness.campaigns.executor import LocalPool
    from harness.running.parallel import CaseFailure
    from harness.running.shard import select
    from harness.running.suite import default_criteria, default_runner

    criteria = tuple(default_criteria() if criteria is None else criteria)
    runner = default_runner() if runner is None else runner

    def learn(index: int) -> tuple[list[SweepCase], CaseResult, float]:
        started = time.monotonic()
        scenario = scenarios[index]
        run = runner(implementation, scenario, seed, time_limit_s=time_limit_s, data_root=None)
        planned = plan_cases(index, scenario, run.trace, actions=actions, max_hits=max_hits,
                             failpoints=failpoints)
        baseline = judge_case(planned[0], scenario, run, criteria,
                              replay_of(planned[0], scenario, seed, impl_spec))
        return planned, baseline, time.monotonic() - started

    # Cases are independent runs, as the suite's are: a worker takes case after case.
    executor = LocalPool(jobs) if executor is None else executor
    learned = executor.run(learn, len(scenarios))
    all_cases: list[SweepCase] = []
    known: dict[str, CaseResult] = {}
    took: dict[str, float] = {}
    for index, item in enumerate(learned):
        if isinstance(item, CaseFailure):
            case = SweepCase(index, scenarios[index].id, BASELINE)
            all_cases.append(case)
            known[case.id] = _failed_case(case, replay_of(case, scenarios[index], seed,
                                                          impl_spec), item.cause)
            continue
        planned, baseline, seconds = item
        all_cases += planned
        known[baseline.id] = baseline
        took[baseline.id] = seconds
    if progress:
        progress(f"learned {len(all_cases)} cases over {len(scenarios)} scenarios")
    ids = [c.id for c in all_cases]
    chosen = select(all_cases, ids, shard, durations)
    to_run = [c for c in chosen if c.id not in known]

    def one(position: int) -> tuple[CaseResult, float]:
        started = time.monotonic()
        case = to_run[position]
        scenario = scenarios[case.scenario_index]
        replay = replay_of(case, scenario, seed, impl_spec)
        variant = case_scenario(scenario, case.action, case.failpoint, case.hit)
        run = runner(implementation, variant, seed, time_limit_s=time_limit_s, data_root=None)
        return judge_case(case, scenario, run, criteria, replay), time.monotonic() - started

    finished = [0]

    def done(position: int, outcome: Any) -> None:
        if progress and not isinstance(outcome, CaseFailure):
            result = outcome[0]
            if result.status not in ("passed",):
                progress(f"{result.status.upper()} {result.id}: "
                         f"{', '.join(result.failing) or result.error or ''}")
        finished[0] += 1
        if progress and finished[0] % 100 == 0:
            progress(f"[{finished[0]}/{len(to_run)}] cases run")

    outcomes = executor.run(one, len(to_run), on_done=done)
    for case, outcome in zip(to_run, outcomes):
        if isinstance(outcome, CaseFailure):
            scenario = scenarios[case.scenario_index]
            known[case.id] = _failed_case(case, replay_of(case, scenario, seed, impl_spec),
                                          outcome.cause)
        else:
            known[case.id], took[case.id] = outcome
    results = tuple(known[c.id] for c in chosen)
    return SweepResult(impl_spec, f"{implementation.info.name} {implementation.info.version}",
                       seed, tuple(ids), results,
                       {c.id: round(took.get(c.id, 0.0), 6) for c in chosen})


# --------------------------------------------------------------------------- reports


def to_dict(result: SweepResult) -> dict[str, Any]:
    counts = result.counts
    matrix: dict[str, dict[str, str]] = {}
    for case in result.cases:
        matrix.setdefault(case.scenario, {})[case.point] = case.status
    return {
        "format": SWEEP_FORMAT,
        "impl": result.impl_spec,
        "implementation": result.implementation,
        "seed": result.seed,
        "headline": headline(counts),
        "counts": counts,
        "passed": result.passed,
        "matrix": matrix,
        "cases": [dataclasses.asdict(c) for c in result.cases],
    }


def from_dict(data: dict[str, Any], all_cases: Sequence[str]) -> SweepResult:
    cases = tuple(
        CaseResult(**{**c, "failing": tuple(c["failing"]), "notes": tuple(c["notes"])})
        for c in data["cases"])
    return SweepResult(data["impl"], data["implementation"], data["seed"], tuple(all_cases),
                       cases, {})


def to_markdown(result: SweepResult) -> str:
    counts = result.counts
    lines = [f"# Crash sweep: {result.implementation} (`--impl {result.impl_spec}`), "
             f"seed {result.seed}", "", f"**{headline(counts)}**", ""]
    bad = [c for c in result.cases if c.status != "passed"]
    if bad:
        lines += ["## Cases that did not pass", "", "| case | status | failing | replay |",
                  "|---|---|---|---|"]
        for c in bad:
            why = ", ".join(c.failing) or (c.error.splitlines()[0] if c.error else "") \
                or (c.notes[0] if c.notes else "")
            lines.append(f"| `{c.id}` | {c.status} | {why.replace('|', '/')} | `{c.replay}` |")
        lines.append("")
    lines += ["## Matrix (per scenario)", "", "| scenario | crash | raise | hold | not passed |",
              "|---|---|---|---|---|"]
    per: dict[str, list[CaseResult]] = {}
    for c in result.cases:
        per.setdefault(c.scenario, []).append(c)
    for scenario, cases in per.items():
        def count(action: str) -> str:
            mine = [c for c in cases if c.action == action]
            return f"{sum(c.status == 'passed' for c in mine)}/{len(mine)}"
        failing = ", ".join(c.point for c in cases if c.status != "passed") or "-"
        lines.append(f"| {scenario} | {count('crash')} | {count('raise')} | {count('hold')} "
                     f"| {failing} |")
    return "\n".join(lines) + "\n"


def to_html(result: SweepResult) -> str:
    names = [p.value for p in Failpoint]
    per: dict[str, dict[str, list[CaseResult]]] = {}
    for c in result.cases:
        if c.failpoint:
            per.setdefault(c.scenario, {}).setdefault(c.failpoint, []).append(c)
        else:
            per.setdefault(c.scenario, {})
    used = [n for n in names if any(n in row for row in per.values())]
    colour = {"passed": "#cfc", "failed": "#f99", "error": "#fc9", "not_exercised": "#ddd"}
    rows = []
    for scenario, cells in per.items():
        tds = []
        for name in used:
            marks = "".join(
                f'<span title="{html.escape(c.id)}: {c.status}" style="background:'
                f'{colour.get(c.status, "#fff")}">{c.action[0]}{c.hit}</span> '
                for c in cells.get(name, ()))
            tds.append(f"<td>{marks}</td>")
        rows.append(f"<tr><th>{html.escape(scenario)}</th>{''.join(tds)}</tr>")
    head = "".join(f"<th>{html.escape(n)}</th>" for n in used)
    return (f"<!doctype html><meta charset=utf-8><title>crash sweep</title>"
            f"<h1>Crash sweep: {html.escape(result.implementation)}</h1>"
            f"<p><b>{html.escape(headline(result.counts))}</b></p>"
            f"<p>c = crash, r = raise, h = hold (h: concurrent_turn step number); green passed, "
            f"red failed, orange error, grey not exercised.</p>"
            f"<table border=1 cellspacing=0><tr><th>scenario</th>{head}</tr>{''.join(rows)}"
            f"</table>\n")


def report_files(result: SweepResult) -> dict[str, bytes]:
    from harness.running.shard import DURATIONS_FILE, durations_bytes

    return {
        SWEEP_FILE: (json.dumps(to_dict(result), indent=2, sort_keys=True) + "\n").encode(),
        SWEEP_MD: to_markdown(result).encode(),
        SWEEP_HTML: to_html(result).encode(),
        DURATIONS_FILE: durations_bytes(result.durations),
    }


def write_files(report_dir: str, files: dict[str, bytes]) -> list[str]:
    from harness.report import ReportDirError, check_report_dir
    from harness.report.report_set import write_set
    from harness.running.suite import display_path

    problem = check_report_dir(report_dir)
    if problem is not None:
        raise UsageError(f"--report-dir {report_dir!r}: {problem}")
    try:
        paths = write_set(report_dir, files)
    except (ReportDirError, OSError) as exc:
        raise UsageError(f"--report-dir {report_dir!r}: {exc}") from exc
    return [display_path(p) for p in paths.values()]


def merge_shards(shards: Sequence[Any], out: str,
                 durations: dict[str, float]) -> tuple[int, list[str]]:
    """Join the sweep results of complete shards (``merge`` checked them) into one set in
    ``out``; ``durations`` are the shards' case durations, joined by the caller."""
    order = shards[0].info["cases"]
    cases: dict[str, CaseResult] = {}
    first: SweepResult | None = None
    for shard in shards:
        path = Path(shard.path) / SWEEP_FILE
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            part = from_dict(data, order)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise UsageError(f"merge: {os.fspath(path)!r}: not a readable sweep result ({exc}); "
                             "rerun that shard") from None
        if first is not None and (part.impl_spec, part.seed) != (first.impl_spec, first.seed):
            raise UsageError(f"merge: {shard.path!r} swept another implementation or seed")
        first = first or part
        cases.update((c.id, c) for c in part.cases)
    assert first is not None
    merged = SweepResult(first.impl_spec, first.implementation, first.seed, tuple(order),
                         tuple(cases[c] for c in order), durations)
    written = write_files(out, report_files(merged))
    return (EXIT_OK if merged.passed else EXIT_CONFORMANCE_FAILURE,
            [headline(merged.counts), "reports: " + ", ".join(written)])


# --------------------------------------------------------------------------- replay options


def _point(text: str) -> tuple[str, int]:
    name, _, number = str(text).rpartition(":")
    if not name or not number.isdigit() or int(number) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not FAILPOINT:N (N >= 1), e.g. "
                                         "after_tool_returned:1")
    try:
        Failpoint(name)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{name!r} is not a failpoint (valid: {', '.join(p.value for p in Failpoint)})"
        ) from None
    return name, int(number)


def add_replay_options(parser: argparse.ArgumentParser) -> None:
    """``--crash-at``/``--raise-at``/``--hold-at`` on ``replay``: rebuild one sweep case."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--crash-at", type=_point, metavar="FAILPOINT:HIT",
                       help="add a crash at that hit of that failpoint (a sweep case)")
    group.add_argument("--raise-at", type=_point, metavar="FAILPOINT:HIT",
                       help="add a raised fault at that hit of that failpoint (a sweep case)")
    group.add_argument("--hold-at", type=_point, metavar="FAILPOINT:STEP",
                       help="hold instance A of concurrent_turn step STEP at that failpoint "
                       "(a sweep case)")


def apply_replay_options(scenario: Any, args: argparse.Namespace) -> Any:
    for action in ACTIONS:
        point = getattr(args, f"{action}_at", None)
        if point is not None:
            return case_scenario(scenario, action, point[0], point[1])
    return scenario
