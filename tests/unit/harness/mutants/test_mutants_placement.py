"""The failpoint-placement mutants are well formed, and one of them is caught by the
placement check itself (not by a criterion that trusts the failpoint's name)."""

import re

import reference_impl
from harness.criteria import catalogue
from harness.criteria import failpoint_preconditions as fp
from harness.criteria.base import Status, run_check
from harness.running.runner import run_scenario
from harness.scenarios.loader import load
from harness.mutants import catalogue as mutants
from harness.mutants.mutant import MutantImplementation
from harness.mutants.placement import MUTANTS

KEBAB = re.compile(r"[a-z0-9]+(-[a-z0-9]+)+")
REQUIRED = ("result-saved-failpoint-after-checkpoint", "start-recorded-failpoint-before-commit",
            "checkpoint-saved-failpoint-after-projection", "wait-persisted-failpoint-before-commit",
            "result-saved-failpoint-without-operation")


def test_placement_mutants_are_well_formed_and_registered():
    names = [m.name for m in MUTANTS]
    assert set(REQUIRED) <= set(names)
    registered = {m.name for m in mutants.MUTANTS}
    relied = {c for p in fp.PRECONDITIONS.values() for c in p.relied_on_by}
    for mutant in MUTANTS:
        assert KEBAB.fullmatch(mutant.name) and mutant.name in registered, mutant.name
        assert mutant.trust_class == "failpoint_placement", mutant.name
        assert mutant.expected and set(mutant.expected) <= relied & set(catalogue.ids())


def test_result_saved_after_the_checkpoint_fails_l4_1_by_its_placement():
    scenario = load("scenarios/l4/crash_after_result_saved.toml")
    mutant = mutants.by_name("result-saved-failpoint-after-checkpoint")
    trace = run_scenario(MutantImplementation(reference_impl.implementation(), mutant),
                         scenario, 0).trace
    verdict = run_check(catalogue.by_id("L4.1"), trace)
    assert verdict.status is Status.FAIL
    assert any(e.note.startswith("failpoint placement: after_result_saved")
               and "already folds it" in e.note for e in verdict.evidence)
    reference = run_scenario(reference_impl.implementation(), scenario, 0).trace
    assert run_check(catalogue.by_id("L4.1"), reference).status is Status.PASS
