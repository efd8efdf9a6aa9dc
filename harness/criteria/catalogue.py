"""The acceptance catalogue: every criterion of every stage, in stage order.

Guarantees: ``CRITERIA`` lists stages X, L1, L2, L3, L4, L5 and M in that order, each
stage's criteria in the order its module defines them; ids are unique (checked at import,
a duplicate raises :class:`~harness.criteria.base.CriteriaError`); :func:`by_id` finds one
criterion or raises ``CriteriaError`` naming the valid ids; each criterion's
``required_features`` are those of the optional-feature table of :mod:`harness.contract.conformance`
(empty for the core, which no declaration can make n/a). A criterion that relies on
failpoints also fails when one of them is misplaced on some hit
(:func:`harness.criteria.failpoint_preconditions.guard`). On the trace of a black box (a real
CLI, ``TraceMeta.black_box``) every criterion is judged from outside only, or is
``not_applicable`` with the reason (:mod:`harness.criteria.outside_view`).

Every criterion carries its requirement twice: ``statement``, in English, is what every report
and ``list criteria`` show first; ``seed_clause`` is the original clause of the design
document (in Chinese), shown after it labelled as its source. A criterion whose title or
statement is empty or not English (holds CJK text) raises ``CriteriaError`` at import.
"""

from __future__ import annotations

import re

from harness.contract.conformance import gate_criteria
from harness.criteria import l1, l2, l3, l4, l5, m, x
from harness.criteria.base import CriteriaError, Criterion
from harness.criteria.failpoint_preconditions import guard
from harness.criteria.outside_view import judged_from_outside

STAGES: tuple[tuple[str, tuple[Criterion, ...]], ...] = (
    ("x", x.CRITERIA),
    ("l1", l1.CRITERIA),
    ("l2", l2.CRITERIA),
    ("l3", l3.CRITERIA),
    ("l4", l4.CRITERIA),
    ("l5", l5.CRITERIA),
    ("m", m.CRITERIA),
)
# Each criterion as the suite judges it: failing also on a misplaced failpoint it relies on
# (guard), and n/a only for the optional features of harness.contract.conformance's table, not each
# stage module's own list (gate_criteria); STAGES and CRITERIA hold the same objects.
# A black box's trace (a real CLI) is judged by harness.criteria.outside_view instead, on the
# criterion's own unguarded check where it reads the world alone.
STAGES = tuple((stage, gate_criteria(tuple(judged_from_outside(c, guard(c)) for c in criteria)))
               for stage, criteria in STAGES)

CRITERIA: tuple[Criterion, ...] = tuple(c for _, stage in STAGES for c in stage)


def _check_unique(criteria: tuple[Criterion, ...]) -> dict[str, Criterion]:
    index: dict[str, Criterion] = {}
    for criterion in criteria:
        if criterion.id in index:
            raise CriteriaError(f"duplicate criterion id {criterion.id!r} in the catalogue")
        index[criterion.id] = criterion
    return index


_CJK = re.compile("[\u2e80-\u2fff\u3000-\u303f\u3040-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]")
"""CJK ideographs, kana, hangul, CJK punctuation and full-width forms."""


def _check_statements(criteria: tuple[Criterion, ...]) -> None:
    for criterion in criteria:
        for name in ("title", "statement"):
            text = getattr(criterion, name)
            if not text.strip() or _CJK.search(text):
                raise CriteriaError(
                    f"criterion {criterion.id}: its {name} must be non-empty English text "
                    f"(the original clause belongs in seed_clause), got {text!r}")


_BY_ID = _check_unique(CRITERIA)
_check_statements(CRITERIA)


def by_id(criterion_id: str) -> Criterion:
    try:
        return _BY_ID[criterion_id]
    except KeyError:
        raise CriteriaError(
            f"unknown criterion {criterion_id!r}; valid ids: {', '.join(_BY_ID)}"
        ) from None


def ids() -> tuple[str, ...]:
    return tuple(_BY_ID)
