"""Partial runs: which criteria a run judges, which scenarios it runs, and when it stops.

Guarantees:

* :func:`parse_criteria` / :func:`parse_stages` accept comma-separated, repeatable values
  (case-insensitive) and raise :class:`~harness.contract.errors.UsageError` (exit 2) naming every
  valid id or stage for an unknown one;
* :func:`restrict` turns every criterion outside the selection into ``not_selected`` (no
  violations, no expectation verdict, counted apart in the summary, never
  ``not_exercised`` and never a pass) and recomputes each scenario's passed/failed status
  from the selected criteria only; it never touches a selected criterion's verdict;
* :func:`scenario_failed` is the one meaning of "this scenario failed" shared by
  ``--fail-fast`` and ``--last-failed``: it errored, or a selected criterion that is not
  expected to fail failed or errored on it.

The rules for choosing scenarios (documented in ``docs/cli.md``): ``--criteria`` and
``--stage`` select criteria (their union); without ``--scenarios`` the bundled scenarios of
the selected criteria's stages run (every criterion is exercised by scenarios of its own
stage: the hard cases of a stage live in its folder), with ``--scenarios`` exactly the
given scenarios run. ``--scenarios`` alone selects the criteria of the stages its scenarios
belong to.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Collection, Iterable, Mapping, Sequence

from harness.contract.errors import UsageError
from harness.report.result import CriterionStatus, RunResult, ScenarioResult, ScenarioStatus


def _split(values: Iterable[str] | None) -> list[str]:
    return [part.strip() for value in values or () for part in value.split(",") if part.strip()]


def parse_criteria(values: Iterable[str] | None, criteria: Sequence[Any]) -> tuple[str, ...]:
    """``--criteria`` values as catalogue ids, in catalogue order."""
    by_key = {c.id.lower(): c.id for c in criteria}
    wanted = _split(values)
    unknown = [w for w in wanted if w.lower() not in by_key]
    if unknown:
        raise UsageError(
            f"--criteria: unknown criterion id(s) {', '.join(unknown)}; valid ids: "
            f"{', '.join(c.id for c in criteria)}"
        )
    chosen = {by_key[w.lower()] for w in wanted}
    return tuple(c.id for c in criteria if c.id in chosen)


def parse_stages(values: Iterable[str] | None, criteria: Sequence[Any]) -> tuple[str, ...]:
    """``--stage`` values as stage names, in catalogue order."""
    stages = list(dict.fromkeys(c.stage for c in criteria))
    wanted = [w.lower() for w in _split(values)]
    unknown = [w for w in wanted if w not in stages]
    if unknown:
        raise UsageError(
            f"--stage: unknown stage(s) {', '.join(unknown)}; valid stages: {', '.join(stages)}"
        )
    return tuple(s for s in stages if s in wanted)


def criteria_of_stages(stages: Collection[str], criteria: Sequence[Any]) -> tuple[str, ...]:
    return tuple(c.id for c in criteria if c.stage in stages)


def stages_of(criterion_ids: Collection[str], criteria: Sequence[Any]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(c.stage for c in criteria if c.id in criterion_ids))


def scenario_failed(result: ScenarioResult, selected: Collection[str] | None,
                    expected: Mapping[str, str] | None = None) -> bool:
    """Did this scenario fail (``selected`` None: every criterion is selected)?"""
    if result.status is ScenarioStatus.ERROR:
        return True
    return any(
        v.status in ("fail", "error")
        and (selected is None or v.criterion_id in selected)
        and v.criterion_id not in (expected or {})
        for v in result.verdicts
    )


def bearing_on(result: RunResult) -> frozenset[str]:
    """The criteria some scenario of ``result`` exercised, failed or errored."""
    return frozenset(
        v.criterion_id for s in result.scenarios for v in s.verdicts
        if v.exercised > 0 or v.status in ("fail", "error")
    )


def restrict(result: RunResult, selected: Collection[str], how: str) -> RunResult:
    """``result`` with only the ``selected`` criteria judged (see the module guarantees);
    ``how`` says in words how the selection was made (recorded in the run info)."""
    from harness.running.suite import summarize

    chosen = set(selected)
    criteria = tuple(
        c if c.id in chosen else dataclasses.replace(
            c, status=CriterionStatus.NOT_SELECTED, violations=(), expectation_reason="")
        for c in result.criteria
    )
    scenarios = tuple(_rejudged(s, chosen) for s in result.scenarios)
    return dataclasses.replace(
        result,
        criteria=criteria,
        scenarios=scenarios,
        summary=summarize(criteria),
        coverage={cid: fps for cid, fps in result.coverage.items() if cid in chosen},
        run=dataclasses.replace(result.run, selection=how),
    )


def _rejudged(scenario: ScenarioResult, chosen: Collection[str]) -> ScenarioResult:
    if scenario.status not in (ScenarioStatus.PASSED, ScenarioStatus.FAILED):
        return scenario
    failed = any(v.status in ("fail", "error") and v.criterion_id in chosen
                 for v in scenario.verdicts)
    status = ScenarioStatus.FAILED if failed else ScenarioStatus.PASSED
    return scenario if status is scenario.status else dataclasses.replace(scenario, status=status)
