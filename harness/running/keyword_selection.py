"""Which scenarios and criteria a partial run selects, and which criteria it then judges.

The pytest plugin turns every scenario into one test item, so pytest's own selection
(``-k``, ``-m``, ``--deselect``, node ids, ``-x``) decides which scenarios run. This module
says, as pure functions, what that selection means for the criteria:

* **keywords of a scenario item** (:func:`scenario_keywords`): its id, its stage, its tags
  and the ids of the criteria it can bear on, taken to be the criteria of its stage (every
  criterion of the catalogue is exercised by a scenario of its own stage; scenarios of other
  stages may exercise it too, but selection never relies on that). So ``-k L4`` or
  ``-k L4.1`` runs the stage-l4 scenarios, ``-k crash`` the scenarios tagged ``crash``;
  matching is pytest's: case-insensitive substrings, so ``-k L4.1`` also names L4.10;
* **keywords of a criterion** (:func:`criterion_keywords`): its id, its stage and
  ``lifecycle``. A criterion is *named* when the ``-k`` expression is true for them;
* **criteria judged** (:func:`judged_criteria`): the named ones when ``-k`` names any;
  otherwise every criterion when every scenario ran (a full run); otherwise (a partial run
  selected by tag, id, marker or node id) the criteria the scenarios that ran exercised or
  violated. Every other criterion is *not selected*: it is neither judged nor counted as
  not exercised, and a partial run claims no conformance level.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

from harness.criteria.base import Criterion

SUITE_KEYWORD = "lifecycle"
"""The name of the collector holding every scenario item (so ``-k lifecycle`` is all)."""

Matches = Callable[[frozenset[str]], bool]
"""Is the ``-k`` expression true for an item with these keywords?"""


def criterion_keywords(criterion: Criterion) -> frozenset[str]:
    return frozenset({criterion.id, criterion.stage, SUITE_KEYWORD})


def bearing_criteria(scenario: Any, criteria: Iterable[Criterion]) -> tuple[str, ...]:
    """The criteria a scenario can bear on: those of its stage."""
    return tuple(c.id for c in criteria if c.stage == scenario.stage)


def scenario_keywords(scenario: Any, criteria: Iterable[Criterion]) -> frozenset[str]:
    return frozenset(
        {scenario.id, scenario.stage, *getattr(scenario, "tags", ()),
         *bearing_criteria(scenario, criteria)}
    )


def named_criteria(criteria: Sequence[Criterion], matches: Matches | None) -> frozenset[str] | None:
    """The criteria a ``-k`` expression names, or None when there is no expression or it
    names none (then the scenarios it selects decide, see :func:`judged_criteria`)."""
    if matches is None:
        return None
    named = frozenset(c.id for c in criteria if matches(criterion_keywords(c)))
    return named or None


def judged_criteria(
    criteria: Sequence[Criterion],
    named: frozenset[str] | None,
    full_run: bool,
    scenario_results: Iterable[Any],
) -> tuple[Criterion, ...]:
    """The criteria a run judges (see the module docstring); the rest are not selected."""
    if named is not None:
        return tuple(c for c in criteria if c.id in named)
    if full_run:
        return tuple(criteria)
    bore = {
        verdict.criterion_id
        for result in scenario_results
        for verdict in result.verdicts
        if verdict.exercised > 0 or verdict.status in ("fail", "error")
    }
    return tuple(c for c in criteria if c.id in bore)
