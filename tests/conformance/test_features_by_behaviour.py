"""Optional features judged by behaviour, end to end: the reference declaring no optional
feature still publishes projections and escalates from its sandbox, so L5.4, L2.11 and L2.10
judge it; a copy of it whose projections offer retry for a definite failure (the outside
reviewer's case, which passed the gate while web_projection was undeclared) fails L5.4, one
that escalates without an approval of its own fails L2.11; and L2.10 does not pass without
its hard case, a post-sandbox escalation."""

from __future__ import annotations

from pathlib import Path

import pytest

import reference_impl
from harness.criteria.catalogue import CRITERIA
from harness.mutants.mutant import Mutant, MutantImplementation
from harness.mutants.levels import MUTANTS as LEVEL_MUTANTS
from harness.mutants.source_patch import edits
from harness.report.result import CriterionStatus, ScenarioStatus
from harness.running.suite import run_suite
from harness.scenarios.loader import discover

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = tuple(discover([str(ROOT / "scenarios" / name) for name in (
    "l1/failure_classes.toml",              # definite failures, projected
    "l5/projection_agrees_with_backend.toml",
    "l2/escalation_after_sandbox.toml",     # post-sandbox escalations, one approved
    "l2/escalation_neighbours.toml",
)]))

DECLARES_NOTHING = Mutant("declares-nothing", "declares no optional feature", ("X1",),
                          edits(), features=())
RETRY_FOR_A_DEFINITE_FAILURE = next(m for m in LEVEL_MUTANTS
                                    if m.name == "web-projection-declared-away-offers-retry")
UNAPPROVED_ESCALATION = next(m for m in LEVEL_MUTANTS
                             if m.name == "sandbox-escalation-declared-away-retries-unapproved")


JUDGED = tuple(c for c in CRITERIA if c.id in {"X1", "L2.10", "L2.11", "L5.4", "L1.6", "L4.10"})
"""What these scenarios are about: every optional feature's criterion, L2.10, and X1 (the
projection step, core) so the level has a core to stand on."""


def _run(mutant: Mutant, scenarios=SCENARIOS):
    implementation = MutantImplementation(reference_impl.implementation(), mutant)
    assert implementation.info.features == ()
    return run_suite(implementation, scenarios, 0, criteria=JUDGED)


@pytest.fixture(scope="module")
def bare():
    return _run(DECLARES_NOTHING)


def test_projections_and_escalations_of_an_undeclaring_implementation_are_judged(bare):
    status = {c.id: c for c in bare.criteria}
    for cid in ("L5.4", "L2.11", "L2.10"):
        assert status[cid].status is CriterionStatus.PASSED and status[cid].exercised > 0, cid
    # the features nothing here shows stay n/a
    assert status["L1.6"].status is CriterionStatus.NOT_APPLICABLE
    assert status["L4.10"].status is CriterionStatus.NOT_APPLICABLE
    level = bare.conformance
    assert level.shown_not_declared == ("sandbox_escalation", "web_projection")
    assert level.headline == (
        "conformant: core + sandbox_escalation (shown, not declared) + web_projection "
        "(shown, not declared); not claimed: checkpoint_import, multi_instance")
    by_id = {s.id: s for s in bare.scenarios}
    assert "sandbox_escalation" in by_id["l2-escalation-after-sandbox"].features_shown
    assert all(s.status is ScenarioStatus.PASSED for s in bare.scenarios)


def test_a_wrong_projection_fails_l5_4_though_web_projection_is_not_declared():
    result = _run(RETRY_FOR_A_DEFINITE_FAILURE)
    l54 = next(c for c in result.criteria if c.id == "L5.4")
    assert l54.status is CriterionStatus.FAILED and l54.violations
    notes = " ".join(e.note for v in l54.violations for e in v.evidence)
    assert "retry" in notes
    assert not result.gate_passed
    assert result.conformance.headline.startswith(
        "not conformant: web_projection (shown, not declared) not met (L5.4 failed)")


def test_an_unapproved_escalation_fails_l2_11_though_sandbox_escalation_is_not_declared():
    result = _run(UNAPPROVED_ESCALATION)
    l211 = next(c for c in result.criteria if c.id == "L2.11")
    assert l211.status is CriterionStatus.FAILED
    notes = " ".join(e.note for v in l211.violations for e in v.evidence)
    assert "retried without sandbox after its escalation request with no approval" in notes
    assert "sandbox_escalation (shown, not declared) not met (L2.11 failed)" in \
        result.conformance.headline


def test_l2_10_does_not_pass_without_a_post_sandbox_escalation(bare):
    # the scenarios without an escalation: pre-call denials and ledger rows are checked,
    # but they are not L2.10's hard case, so it is not exercised and the core is not met
    without = tuple(s for s in SCENARIOS if not s.id.startswith("l2-escalation"))
    assert without and len(without) < len(SCENARIOS)
    result = _run(DECLARES_NOTHING, without)
    l210 = next(c for c in result.criteria if c.id == "L2.10")
    assert l210.status is CriterionStatus.NOT_EXERCISED
    assert not result.gate_passed and not result.conformance.core_met
    # with them, the hard case happened and counted
    with_escalation = next(c for c in bare.criteria if c.id == "L2.10")
    assert set(with_escalation.scenarios_exercising) <= {
        s.id for s in bare.scenarios if s.id.startswith("l2-escalation")}
