"""The issue-13 L3 mutants are well formed: world_judges class, L3 criteria, one defect each.
Whether the suite catches them is the kill matrix's job."""

from harness.criteria import catalogue
from harness.mutants.mutant import TRUST_CLASSES
from harness.mutants.l3 import MUTANTS

WANTED = {
    "silent-denial-fallback", "fallback-counts-classifier-faults", "approved-wait-never-run",
    "answer-applied-twice", "inspect-reports-expected-counters", "crash-loses-denial-count",
}


def test_every_defect_of_the_brief_has_a_mutant():
    assert WANTED <= {m.name for m in MUTANTS}


def test_each_mutant_is_a_world_judges_defect_caught_by_an_l3_criterion():
    known = set(catalogue.ids())
    for mutant in MUTANTS:
        assert mutant.trust_class == "world_judges" and mutant.trust_class in TRUST_CLASSES, mutant.name
        assert mutant.expected and set(mutant.expected) <= known, mutant.name
        assert all(c.startswith("L3.") for c in mutant.expected), mutant.name
        assert mutant.defect and not mutant.defect.endswith("."), mutant.name
