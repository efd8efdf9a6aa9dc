"""The faults_fire mutants: each skips a failpoint on some path, applies to the current
reference, and is expected to be caught by the fault-fired judgement."""

import pytest

from harness.criteria.fault_coverage import FAULT_FIRED
from harness.mutants.fired import MUTANTS


def test_there_are_faults_fire_mutants():
    assert len(MUTANTS) >= 1


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_each_mutant_applies_and_expects_the_fault_fired_kill(mutant):
    assert mutant.trust_class == "faults_fire"
    assert FAULT_FIRED in mutant.expected
    with mutant.patches():  # every find text still matches the current reference
        pass
