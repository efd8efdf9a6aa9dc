"""The catalogue assembles every stage once, in order, with unique ids."""

import pytest

from harness.criteria import catalogue
from harness.criteria.base import CriteriaError

EXPECTED_XL = ["X1", "X2", "X3", "X4", "X5", "X6"] + [f"L1.{i}" for i in range(1, 9)] + [
    f"L2.{i}" for i in range(1, 12)
]


def test_catalogue_starts_with_x_l1_l2_in_order():
    ids = [c.id for c in catalogue.CRITERIA]
    assert ids[: len(EXPECTED_XL)] == EXPECTED_XL
    assert len(ids) == len(set(ids))
    assert [stage for stage, _ in catalogue.STAGES] == ["x", "l1", "l2", "l3", "l4", "l5", "m"]


def test_every_stage_criterion_names_its_stage_and_the_seed():
    for stage, criteria in catalogue.STAGES:
        for criterion in criteria:
            assert criterion.stage == stage
            assert criterion.seed_clause and criterion.statement and criterion.title


def test_by_id_finds_and_rejects():
    assert catalogue.by_id("L2.3").title == "Dangerous tail"
    with pytest.raises(CriteriaError, match="valid ids: X1"):
        catalogue.by_id("L9.9")


def test_duplicate_ids_are_refused():
    one = catalogue.by_id("X1")
    with pytest.raises(CriteriaError, match="duplicate"):
        catalogue._check_unique((one, one))


def test_per_trace_computes_once_per_trace_and_never_across_traces():
    from harness.criteria.base import per_trace
    from harness.trace.record import Trace

    calls = []

    @per_trace
    def oracle(trace):
        calls.append(trace)
        return len(calls)

    first, second = object.__new__(Trace), object.__new__(Trace)
    assert oracle(first) == oracle(first) == 1
    assert oracle(second) == 2 and oracle(first) == 3  # only the last trace is remembered
    assert calls == [first, second, first]


def test_stages_and_criteria_are_the_same_judged_objects():
    assert [c for _, stage in catalogue.STAGES for c in stage] == list(catalogue.CRITERIA)
    assert all(c.check is d.check for c, d in zip(
        (c for _, stage in catalogue.STAGES for c in stage), catalogue.CRITERIA))
