"""The full kill matrix: every mutant of the reference is caught by a criterion it names,
and every acceptance criterion catches at least one mutant. A change that makes a
criterion blind (or a scenario stop staging its defect) fails here."""

from harness.criteria.fault_coverage import FAULT_FIRED
from harness.mutants.catalogue import MUTANTS, SEED_DEFECTS

from .test_reference_suite import ACCEPTANCE_IDS


def test_selftest_kills_every_mutant_and_no_criterion_is_blind(selftest_run):
    # `selftest` through the command line, shared with the determinism test (conftest.py)
    code, out, err, report = selftest_run.code, selftest_run.out, selftest_run.err, \
        selftest_run.report
    selftest = report["selftest"]
    missed = [(m["name"], m["expected"], m["killed_by"]) for m in selftest["mutants"] if not m["caught"]]
    assert missed == [], missed
    assert selftest["reference_passed"] is True
    assert selftest["blind_criteria"] == []
    assert sorted(selftest["kills_per_criterion"]) == sorted(ACCEPTANCE_IDS)
    assert all(kills >= 1 for kills in selftest["kills_per_criterion"].values())
    assert selftest["mutation_score"] == 1.0
    assert code == 0, out + err
    assert "mutation score 100%" in out


def test_every_criterion_has_a_mutant_named_for_it_and_the_seed_defects_are_all_there():
    expected = {cid for mutant in MUTANTS for cid in mutant.expected}
    assert expected - {FAULT_FIRED} == set(ACCEPTANCE_IDS)  # fault-fired is no criterion
    assert {m.name for m in SEED_DEFECTS} >= {
        "failure-table-overflows",
        "bash-key-drops-more-than-description",
        "bash-key-keeps-description",
        "auto-denies-bash-by-name",
        "classifier-reads-first-800-chars",
        "fallback-prompts-without-persisted-wait",
        "checkpoint-failure-leaves-dispatched",
    }
    classics = {m.name for m in MUTANTS}
    assert classics >= {
        "reexecute-after-result-saved", "retry-unknown-after-crash", "timeout-counted-as-denial",
        "double-count-on-recovery", "trusts-tool-not-executed-text", "eof-reported-completed",
        "extra-model-retry",
    }
