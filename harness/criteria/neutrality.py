"""Neutral scenarios: a required fault must fire whatever an allowed implementation chooses.

A scenario is neutral when it relies only on what the contract requires: a fault that must
fire (not ``optional``) sits on a hit the documented pipeline reaches, for the steps before
it, on every path the docs leave open; a ``concurrent_turn`` that must hold reaches its
hold the same way. Otherwise an implementation written from the docs alone gets a scenario
error for a choice the docs allowed (issue 31: a crash planned on the deny path's
``after_result_saved``, a crash at the decision of a call its cancelled session closes).

This is a static check, with no implementation: :func:`paths` walks the scenario through
:mod:`harness.criteria.pipeline_model` once per combination of the free choices that
matter to its faults (exhaustively, like an odometer: the first path is the reference's),
and :func:`findings` names every required fault or hold that some path misses.

Guarantees:

* pure: a function of the scenario; the same scenario gives the same findings;
* a :class:`Finding` names the file, the scenario, the fault (as the fault plan prints it)
  or the step, and why: how often its failpoint is reached on the path that misses it and
  the choices (each allowed by the docs) that lead there, or what the model could not
  follow on that path (then the fault cannot be shown to fire: mark it optional, with the
  reason, or re-plan it);
* an ``optional`` fault, and a ``concurrent_turn`` marked optional (or held only by
  optional ``hold`` faults), is never a finding: scenarios.md's rule for faults that
  correct implementations may legitimately never reach;
* a scenario with more than :data:`PATHS_MAX` paths is one finding (the exploration is cut
  there), never a silent pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

from harness.criteria.base import CriteriaError
from harness.criteria.pipeline_model import Chooser, Path, walk
from harness.faults.plan import Action, render
from harness.scenarios import Scenario, StepKind

PATHS_MAX = 4096
"""Paths explored per scenario at most (the bundled suite needs far fewer)."""


@dataclass(frozen=True, slots=True)
class Finding:
    file: str
    scenario: str
    what: str
    """The fault as the plan prints it (``fault 2: after_result_saved, hit #2 -> crash
    (...)``), or the step (``concurrent_turn (step 1) hold at after_prepare``)."""
    why: str

    def text(self) -> str:
        return f"{self.file}: {self.scenario}: {self.what}: {self.why}"


class TooManyPaths(CriteriaError):
    """More than :data:`PATHS_MAX` paths: the scenario cannot be checked exhaustively."""


def paths(scenario: Scenario, limit: int = PATHS_MAX) -> Iterator[Path]:
    """Every path of ``scenario`` through the documented lifecycle: one per combination of
    its free choices, the reference's first. Raises :class:`TooManyPaths` past ``limit``."""
    prefix: list[int] = []
    for _ in range(limit):
        path = walk(scenario, Chooser(prefix))
        yield path
        picks = [(c.picked, len(c.options)) for c in path.choices]
        position = len(picks) - 1
        while position >= 0 and picks[position][0] == picks[position][1] - 1:
            position -= 1
        if position < 0:
            return
        prefix = [picked for picked, _ in picks[:position]] + [picks[position][0] + 1]
    raise TooManyPaths(f"more than {limit} paths")


def _fires(fault_index: int, scenario: Scenario, path: Path) -> bool:
    fault = scenario.faults[fault_index]
    fired = path.fired[fault_index]
    schedule = fault.schedule
    if not set(schedule.hits) <= fired:
        return False
    return schedule.from_hit is None or any(h >= schedule.from_hit for h in fired)


def _required_holds(scenario: Scenario) -> list[int]:
    """Positions of the concurrent_turn steps whose hold must engage."""
    planned = [f for f in scenario.faults if f.action is Action.HOLD]
    only_optional = bool(planned) and all(f.optional for f in planned)
    return [i for i, step in enumerate(scenario.steps)
            if step.do is StepKind.CONCURRENT_TURN and not step.optional
            and not (step.hold_at is None and only_optional)]


def _why(path: Path, missed: str) -> str:
    departures = path.departures()
    if path.stopped:
        because = f"the check cannot follow the path past this: {path.stopped}"
    else:
        because = missed
    if not departures:
        return f"{because}, even as the reference implementation behaves"
    return (f"{because}, when an implementation makes these allowed choices: "
            + "; ".join(c.text() for c in departures))


def findings(scenario: Scenario, limit: int = PATHS_MAX) -> tuple[Finding, ...]:
    """Every required fault or hold of ``scenario`` that some allowed path misses."""
    rendered = render(scenario.faults)
    required = [i for i, fault in enumerate(scenario.faults) if not fault.optional]
    holds = _required_holds(scenario)
    missed_fault: dict[int, Path] = {}
    missed_hold: dict[int, Path] = {}

    def keep(table: dict[int, Path], key: int, path: Path) -> None:
        known = table.get(key)
        if known is None or len(path.departures()) < len(known.departures()):
            table[key] = path

    try:
        for path in paths(scenario, limit):
            for index in required:
                if not _fires(index, scenario, path):
                    keep(missed_fault, index, path)
            engaged = dict(path.holds)
            for position in holds:
                if not engaged.get(position, False):
                    keep(missed_hold, position, path)
    except TooManyPaths:
        return (Finding(scenario.file, scenario.id, "the fault plan",
                        f"more than {limit} paths through the documented lifecycle: the check "
                        "cannot show its faults fire; split the scenario or mark faults "
                        "optional"),)
    found = []
    for index, path in sorted(missed_fault.items()):
        point = scenario.faults[index].failpoint.value
        reached = path.reached.get(point, 0)
        missed = (f"{point} is never reached" if not reached
                  else f"{point} is reached only {reached} time(s), not on hit "
                       f"{scenario.faults[index].hits}")
        found.append(Finding(scenario.file, scenario.id, rendered[index], _why(path, missed)))
    for position, path in sorted(missed_hold.items()):
        step = scenario.steps[position]
        at = step.hold_at.value if step.hold_at is not None else "its planned hold"
        found.append(Finding(scenario.file, scenario.id,
                             f"concurrent_turn (step {position + 1}) hold at {at}",
                             _why(path, f"instance A never reaches {at} before it ends")))
    return tuple(found)


def check(scenarios: Iterable[Scenario], limit: int = PATHS_MAX) -> tuple[Finding, ...]:
    """The findings of every scenario, in the order given."""
    return tuple(f for scenario in scenarios for f in findings(scenario, limit))


def report(found: Sequence[Finding]) -> str:
    """One line per finding (empty when there is none)."""
    return "\n".join(f.text() for f in found)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m harness.criteria.neutrality [PATH...]`` (default: the bundled suite):
    prints every finding; exit 0 when there is none, 1 when there are, 2 when a scenario
    does not load (its error on stderr)."""
    import sys

    from harness.contract.errors import EXIT_USAGE_OR_INPUT_ERROR, ScenarioError
    from harness.scenarios import bundled_suite_dir, discover

    paths = list(sys.argv[1:] if argv is None else argv) or [str(bundled_suite_dir())]
    try:
        scenarios = discover(paths)
    except ScenarioError as exc:
        print(exc, file=sys.stderr)
        return EXIT_USAGE_OR_INPUT_ERROR
    found = check(scenarios)
    if found:
        print(report(found))
    print(f"{len(scenarios)} scenario(s), {len(found)} finding(s)")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
