"""``lifecycle-harness diff``: the same cases on two implementations, and for each the first
event where what the world observed differs.

For comparing a new implementation with the reference, or a release with the last one. A
case is one scenario under one seed, run once on side A and once on side B.

Guarantees of :func:`run_diff`:

* **Cases.** The scenarios given, in the order given: a sequence of scenarios, or a
  :data:`ScenariosSource` (a function of the seed that returns them: the hook the workload
  generator of issue 26 plugs into; the bundled suite and ``--scenarios`` are plain
  sequences). Each runs through the runner on A, then on B, under the same seed.
* **What is compared.** The world's view of each trace
  (:func:`harness.trace.world_view.world_view`): model requests served and their ends, the classifier's exact bytes, ledger rows, approval
  prompts, UI publications and the faults that fired, in order, with what an implementation
  may choose freely normalised (ids it allocates renamed by first appearance, its wording
  replaced unless ``exact_text``, unordered lists sorted; the list with the reasons is
  :data:`harness.trace.world_view.NORMALISED`). A case whose views differ is ``diverged`` at
  the first differing position, with both sides' events there (or "A ended here"), the
  fields that differ and a few events of context.
* **Judging.** Every criterion judges both runs, exactly as ``run`` judges a scenario
  (:func:`harness.running.suite.judge_scenario`); each side's status, failing criteria
  (with their first evidence note) and replay command are kept. Equal views with different
  verdicts (the failing criteria, or whether the run errored) are ``verdicts_differ``: an
  implementation's store and realtime events are not in the view, but the criteria read them.
  Every scenario runs on both sides, whatever features they declare (features are judged
  by behaviour; a side without one refuses it the documented way); a case whose worker
  process died is ``error``.
* **Determinism.** Nothing wall-clock or machine-specific is in the result: the same
  implementations, cases and seed give the same result, and ``diff.json`` byte for byte.
  With ``jobs`` > 1 the cases run in the worker pool (:mod:`harness.running.parallel`; a worker
  runs both sides of its case), and the result is that of ``jobs`` = 1 (the pool hands
  results back in case order).
* **Verdict.** :attr:`DiffResult.differs` is true when some case diverged, its verdicts
  differ or it errored, or when no case could be compared at all: "no difference" is claimed
  only over cases that ran.
* **Reports.** ``diff.json`` (:func:`to_dict`, the result's dataclasses as plain data) and
  ``diff.md``, written as one set (:func:`harness.report.report_set.write_set`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Callable, Sequence, Union

from harness.contract import Implementation, to_json
from harness.criteria.base import Criterion
from harness.trace.world_view import (
    NORMALISED, WORDING, WorldDivergence, WorldEvent, first_world_divergence, world_view,
)

DIFF_FILE = "diff.json"
DIFF_MD = "diff.md"
DIFF_FORMAT = "lifecycle-harness-diff/1"
DEFAULT_DIFF_DIR = os.path.join("reports", "diff")

SAME = "same"
DIVERGED = "diverged"
VERDICTS_DIFFER = "verdicts_differ"
SKIPPED = "skipped"
ERROR = "error"
STATUSES = (SAME, DIVERGED, VERDICTS_DIFFER, SKIPPED, ERROR)
"""Case statuses, in the order the summary counts them."""
DIFFERENT = (DIVERGED, VERDICTS_DIFFER, ERROR)
"""The statuses that make a diff exit 1."""

ScenariosSource = Callable[[int], Sequence[Any]]
"""A function of the seed returning the scenarios to compare: where a generated workload
(``--generate``, :mod:`harness.campaigns.generate` once it exists) plugs in. The same seed
must give the same scenarios."""

Scenarios = Union[Sequence[Any], ScenariosSource]


# --------------------------------------------------------------------------- values


@dataclass(frozen=True, slots=True)
class FailingCriterion:
    criterion_id: str
    status: str
    """``fail`` or ``error``."""
    note: str
    """Its first evidence note ("" when it gave none)."""


@dataclass(frozen=True, slots=True)
class Side:
    """One side's run of a case, as judged."""

    status: str
    """The scenario status of ``run``: ``passed``, ``failed``, ``error`` or ``skipped``."""
    failing: tuple[FailingCriterion, ...]
    error: str
    """The run's error (first line), "" when it completed."""
    world_events: int
    """Length of its world view."""
    trace_digest: str
    replay: str

    def brief(self) -> str:
        """``passed``, ``failed: L4.1, X2``, ``error: <why>``, ``skipped (<why>)``."""
        if self.status == SKIPPED:
            return f"skipped ({self.error})" if self.error else "skipped"
        details = ([", ".join(f.criterion_id for f in self.failing)] if self.failing else []) \
            + ([f"error: {self.error}"] if self.error else [])
        return self.status + (": " + "; ".join(details) if details else "")


@dataclass(frozen=True, slots=True)
class Difference:
    """Where two world views first part, rendered (a :class:`WorldDivergence` as text)."""

    position: int
    """0-based position of the first differing world event."""
    trace_index_a: int | None
    """Its index in A's trace; None: A's view ended here."""
    trace_index_b: int | None
    kind_a: str
    """Its kind on side A ("" when A ended here)."""
    kind_b: str
    event_a: str
    """The event rendered on one line (numbered by its position in the view), or
    ``A ended here (N world events)``."""
    event_b: str
    fields: tuple[tuple[str, str, str], ...]
    """(path, A's value, B's value) for each differing field."""
    before: tuple[str, ...]
    """Events of context before it (the same on both sides)."""
    after_a: tuple[str, ...]
    after_b: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CaseDiff:
    scenario_id: str
    file: str
    status: str
    """One of :data:`STATUSES`."""
    a: Side
    b: Side
    difference: Difference | None = None
    """Set when ``diverged``."""
    note: str = ""
    """Why a case was skipped or errored, or which verdicts differ."""


@dataclass(frozen=True, slots=True)
class DiffResult:
    impl_a: str
    impl_b: str
    implementation_a: str
    """Name and version the implementation declares."""
    implementation_b: str
    seed: int
    source: str
    """Where the cases came from (the bundled suite, --scenarios paths, a generator)."""
    exact_text: bool
    cases: tuple[CaseDiff, ...]

    @property
    def same_impl(self) -> bool:
        return self.impl_a.strip() == self.impl_b.strip()

    @property
    def counts(self) -> dict[str, int]:
        counts = {status: 0 for status in STATUSES}
        for case in self.cases:
            counts[case.status] += 1
        return {"cases": len(self.cases), **counts}

    @property
    def compared(self) -> int:
        return sum(1 for case in self.cases if case.status != SKIPPED)

    @property
    def differs(self) -> bool:
        return self.compared == 0 or any(case.status in DIFFERENT for case in self.cases)


def headline(result: DiffResult) -> str:
    counts = result.counts
    if result.compared == 0:
        return (f"no case compared: all {counts['cases']} skipped (each needs an optional "
                "feature one side does not declare)")
    differ = counts[DIVERGED] + counts[VERDICTS_DIFFER] + counts[ERROR]
    return (f"{differ} of {result.compared} cases differ: {counts[DIVERGED]} diverged, "
            f"{counts[VERDICTS_DIFFER]} verdicts differ, {counts[ERROR]} errors, "
            f"{counts[SAME]} same; {counts[SKIPPED]} skipped")


# --------------------------------------------------------------------------- one case


def render_difference(divergence: WorldDivergence, length_a: int, length_b: int
                      ) -> Difference:
    """A divergence as text: each side's event (or where its view ended) and context."""
    def event(side: WorldEvent | None, label: str, length: int) -> str:
        if side is None:
            return f"{label} ended here ({length} world events)"
        return side.line(width=None)

    def lines(events: Sequence[WorldEvent]) -> tuple[str, ...]:
        return tuple(e.line() for e in events)

    a, b = divergence.a, divergence.b
    return Difference(
        divergence.position,
        a.trace_index if a else None, b.trace_index if b else None,
        a.kind if a else "", b.kind if b else "",
        event(a, "A", length_a), event(b, "B", length_b),
        tuple((f.path, f.a, f.b) for f in divergence.fields),
        lines(divergence.before), lines(divergence.after_a), lines(divergence.after_b),
    )


def _side(judgement: Any, view_length: int) -> Side:
    result = judgement.result
    failing = tuple(
        FailingCriterion(v.criterion_id, v.status, v.evidence[0].note if v.evidence else "")
        for v in result.verdicts if v.status in ("fail", "error"))
    first_line = result.error.splitlines()[0] if result.error else ""
    return Side(str(result.status), failing, first_line, view_length, result.trace_digest,
                result.replay)


def _unrun_side(scenario: Any, seed: int, impl_spec: str, status: str, why: str) -> Side:
    """A side with no run to show: ``skipped`` (``why``: the feature it lacks) or ``error``
    (its worker died)."""
    from harness.running.suite import display_path, replay_command

    return Side(status, (), why, 0, "",
                replay_command(display_path(getattr(scenario, "file", "")), seed, impl_spec,
                               getattr(scenario, "variant", "")))


def diff_case(scenario: Any, seed: int, sides: tuple[tuple[str, Implementation],
                                                     tuple[str, Implementation]], *,
              criteria: Sequence[Criterion], runner: Callable[..., Any],
              time_limit_s: float, exact_text: bool = False) -> CaseDiff:
    """Run ``scenario`` on both sides (A, then B) and compare (see the module docstring)."""
    from harness.running.suite import display_path, judge_scenario
    from harness.trace.determinism import RecordingRunner

    file = display_path(getattr(scenario, "file", ""))
    # Every scenario runs on both sides: optional features are judged by behaviour, and a
    # side without one refuses it the documented way (harness.criteria.feature_evidence).
    judged: list[tuple[Any, tuple[WorldEvent, ...]]] = []
    for spec, implementation in sides:
        recording = RecordingRunner(runner)
        judgement = judge_scenario(implementation, scenario, seed, criteria=criteria,
                                   runner=recording, time_limit_s=time_limit_s, impl_spec=spec)
        trace = recording.traces.get(scenario.id)
        judged.append((judgement, world_view(trace, exact_text=exact_text) if trace else ()))
    (judgement_a, view_a), (judgement_b, view_b) = judged
    a, b = _side(judgement_a, len(view_a)), _side(judgement_b, len(view_b))
    divergence = first_world_divergence(view_a, view_b)
    if divergence is not None:
        return CaseDiff(scenario.id, file, DIVERGED, a, b,
                        render_difference(divergence, len(view_a), len(view_b)))
    if _verdict_key(a) != _verdict_key(b):
        return CaseDiff(scenario.id, file, VERDICTS_DIFFER, a, b,
                        note=f"same world events; A {a.brief()}, B {b.brief()}")
    return CaseDiff(scenario.id, file, SAME, a, b)


def _verdict_key(side: Side) -> tuple[frozenset[str], bool]:
    """What "the same verdict" means: the same failing criteria and both errored or not
    (error texts name the implementation and may say the same in other words)."""
    return frozenset(f.criterion_id for f in side.failing), side.status == ERROR


def _failed_case(scenario: Any, seed: int, specs: tuple[str, str], cause: str) -> CaseDiff:
    from harness.running.suite import display_path

    why = f"worker process: {cause}"
    a, b = (_unrun_side(scenario, seed, spec, ERROR, why) for spec in specs)
    return CaseDiff(scenario.id, display_path(getattr(scenario, "file", "")), ERROR, a, b,
                    note=why)


# --------------------------------------------------------------------------- the campaign


Progress = Callable[[int, int, CaseDiff], None]
"""``progress(done, total, case)`` after each case."""


def run_diff(
    impl_a: tuple[str, Implementation],
    impl_b: tuple[str, Implementation],
    scenarios: Scenarios,
    seed: int = 0,
    *,
    source: str = "",
    criteria: Sequence[Criterion] | None = None,
    runner: Callable[..., Any] | None = None,
    time_limit_s: float = 20.0,
    exact_text: bool = False,
    jobs: int = 1,
    progress: Progress | None = None,
) -> DiffResult:
    """Compare ``impl_a`` with ``impl_b`` (each ``(spec, implementation)``) on every case of
    ``scenarios`` under ``seed`` (see the module docstring)."""
    from harness.running.parallel import CaseFailure, run_cases
    from harness.running.suite import default_criteria, default_runner

    cases = tuple(scenarios(seed) if callable(scenarios) else scenarios)
    criteria = tuple(default_criteria() if criteria is None else criteria)
    runner = default_runner() if runner is None else runner
    sides = (impl_a, impl_b)
    specs = (impl_a[0], impl_b[0])

    def one(index: int) -> CaseDiff:
        return diff_case(cases[index], seed, sides, criteria=criteria, runner=runner,
                         time_limit_s=time_limit_s, exact_text=exact_text)

    finished = [0]

    def done(index: int, outcome: Any) -> None:
        finished[0] += 1
        if progress is not None:
            case = (_failed_case(cases[index], seed, specs, outcome.cause)
                    if isinstance(outcome, CaseFailure) else outcome)
            progress(finished[0], len(cases), case)

    outcomes = run_cases(one, len(cases), jobs=jobs, on_done=done, reuse_workers=True)
    results = tuple(
        _failed_case(cases[i], seed, specs, o.cause) if isinstance(o, CaseFailure) else o
        for i, o in enumerate(outcomes))
    return DiffResult(impl_a[0], impl_b[0], _named(impl_a[1]), _named(impl_b[1]), seed,
                      source, exact_text, results)


def _named(implementation: Implementation) -> str:
    return f"{implementation.info.name} {implementation.info.version}"


# --------------------------------------------------------------------------- reports


def to_dict(result: DiffResult) -> dict[str, Any]:
    """The result as plain JSON data: its dataclasses as objects, plus the counts, the
    headline and what the comparison normalised."""
    return {
        "format": DIFF_FORMAT,
        "headline": headline(result),
        "counts": result.counts,
        "differs": result.differs,
        "same_impl": result.same_impl,
        "normalised": [{"field": where, "how": how} for where, how in NORMALISED],
        **to_json(result),
    }


def case_lines(case: CaseDiff, result: DiffResult) -> list[str]:
    """A case on the console and in ``diff.md``: what differs, with context and verdicts."""
    label = {DIVERGED: "DIVERGED", VERDICTS_DIFFER: "VERDICTS DIFFER", ERROR: "ERROR",
             SKIPPED: "SKIPPED", SAME: "SAME"}[case.status]
    lines = []
    difference = case.difference
    if difference is not None:
        where = ", ".join(f"{side}: trace event {index}" for side, index in
                          (("A", difference.trace_index_a), ("B", difference.trace_index_b))
                          if index is not None)
        lines.append(f"{label} {case.scenario_id} at world event {difference.position}"
                     + (f" ({where})" if where else ""))
        lines += [f"      {line}" for line in difference.before]
        lines.append(f"  A > {difference.event_a}")
        lines.append(f"  B > {difference.event_b}")
        for path, a, b in difference.fields:
            lines.append(f"    differs at {path}: A {a} | B {b}")
        lines += [f"  A   {line}" for line in difference.after_a]
        lines += [f"  B   {line}" for line in difference.after_b]
    else:
        lines.append(f"{label} {case.scenario_id}" + (f": {case.note}" if case.note else ""))
    for name, spec, side in (("A", result.impl_a, case.a), ("B", result.impl_b, case.b)):
        lines.append(f"  {name} {spec}: {side.brief()}")
        lines += [f"      {f.criterion_id} {f.status}: {f.note}" for f in side.failing[:3]]
        if side.replay and case.status != SKIPPED:
            lines.append(f"      replay: {side.replay}")
    return lines


def to_markdown(result: DiffResult) -> str:
    lines = [f"# Differential run: `{result.impl_a}` (A) vs `{result.impl_b}` (B)", "",
             f"A is {result.implementation_a}, B is {result.implementation_b}; seed "
             f"{result.seed}; cases: {result.source or 'as given'}; wording "
             + ("compared exactly" if result.exact_text else f"normalised to `{WORDING}`")
             + ".", ""]
    if result.same_impl:
        lines += ["Both sides are the same implementation: this compares two runs of it.", ""]
    lines += [f"**{headline(result)}**", "", "| case | status | A | B |", "|---|---|---|---|"]
    for case in result.cases:
        where = (f" at world event {case.difference.position}"
                 if case.difference is not None else "")
        lines.append(f"| `{case.scenario_id}` | {case.status}{where} | "
                     f"{_cell(case.a.brief())} | {_cell(case.b.brief())} |")
    shown = [c for c in result.cases if c.status in DIFFERENT]
    if shown:
        lines += ["", "## Cases that differ", ""]
        for case in shown:
            lines += ["```text", *case_lines(case, result), "```", ""]
    lines += ["", "## What the comparison normalises", ""]
    lines += [f"- `{where}`: {how}" for where, how in NORMALISED]
    return "\n".join(lines).rstrip("\n") + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "/").replace("\n", " ")


def report_files(result: DiffResult) -> dict[str, bytes]:
    return {
        DIFF_FILE: (json.dumps(to_dict(result), indent=2, sort_keys=True, ensure_ascii=False)
                    + "\n").encode("utf-8"),
        DIFF_MD: to_markdown(result).encode("utf-8"),
    }
