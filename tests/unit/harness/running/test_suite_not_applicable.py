"""``run_suite(not_applicable=...)``: a criterion the harness's own profile or adapter says
its system cannot be judged on is reported n/a with that reason, whatever the scenarios
found (their violations stay listed), and never passed; an unknown id is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.contract.errors import ExpectationsError
from harness.implementations import resolve
from harness.report.result import CriterionStatus
from harness.running.suite import run_suite
from harness.scenarios.loader import load as load_scenario

ROOT = Path(__file__).resolve().parents[4]
SCENARIO = ROOT / "scenarios" / "l2" / "dangerous_tail_in_a_write.toml"


def _result(spec: str, not_applicable=None):  # noqa: ANN001
    return run_suite(resolve(spec), [load_scenario(SCENARIO)], 0,
                     not_applicable=not_applicable)


def _criterion(result, cid):  # noqa: ANN001
    return next(c for c in result.criteria if c.id == cid)


def test_a_failing_criterion_declared_na_is_na_with_its_reason_and_keeps_its_violations():
    judged = _result("mutant:classifier-reads-first-800-chars")
    assert _criterion(judged, "L2.3").status is CriterionStatus.FAILED
    declared = _result("mutant:classifier-reads-first-800-chars",
                       {"L2.3": "the system has no such concept"})
    l2_3 = _criterion(declared, "L2.3")
    assert l2_3.status is CriterionStatus.NOT_APPLICABLE
    assert l2_3.expectation_reason == "the system has no such concept"
    assert l2_3.violations  # what the scenario saw stays visible
    assert _criterion(declared, "L2.2").status is CriterionStatus.FAILED  # only the named one


def test_a_passing_criterion_declared_na_is_not_counted_passed():
    result = _result("reference", {"L2.6": "no review exists"})
    assert _criterion(result, "L2.6").status is CriterionStatus.NOT_APPLICABLE
    assert _criterion(result, "L2.2").status is CriterionStatus.PASSED


def test_an_unknown_criterion_is_refused():
    with pytest.raises(ExpectationsError, match="L9.9"):
        _result("reference", {"L9.9": "no such criterion"})
