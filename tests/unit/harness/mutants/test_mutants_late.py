"""The stage L3/L4/L5/M mutants are well formed and still match the reference source (fast).

Structure only: whether the suite catches each mutant is the kill matrix's job.
"""

import importlib
import inspect
import pkgutil
import re

import pytest

from harness.criteria import catalogue
from harness.mutants import catalogue as mutants
from harness.mutants.late import MUTANTS

KEBAB = re.compile(r"[a-z0-9]+(-[a-z0-9]+)+")

CLASSICS = (
    "reexecute-after-result-saved",
    "retry-unknown-after-crash",
    "double-count-on-recovery",
    "extra-model-retry",
)


def test_names_are_unique_and_kebab_case():
    names = [m.name for m in MUTANTS]
    assert len(names) == len(set(names))
    for name in names:
        assert KEBAB.fullmatch(name), name


def test_names_are_unique_across_the_whole_catalogue():
    names = [m.name for m in mutants.MUTANTS]
    assert len(names) == len(set(names))


def test_each_mutant_names_one_defect_and_catalogued_criteria():
    known = set(catalogue.ids())
    for mutant in MUTANTS:
        defect = mutant.defect.strip()
        assert defect and not defect.endswith("."), mutant.name
        assert mutant.expected, mutant.name
        assert len(set(mutant.expected)) == len(mutant.expected), mutant.name
        assert set(mutant.expected) <= known, (mutant.name, mutant.expected)
        assert not mutant.seed_defect, mutant.name


def test_every_l3_l4_l5_m_criterion_has_a_mutant():
    wanted = {c for c in catalogue.ids() if c.startswith(("L3.", "L4.", "L5.", "M"))}
    covered = {c for m in MUTANTS for c in m.expected}
    assert wanted <= covered, sorted(wanted - covered)


def test_the_classic_durability_bugs_are_present():
    names = {m.name for m in MUTANTS}
    assert set(CLASSICS) <= names, sorted(set(CLASSICS) - names)


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_patches_apply_and_undo_cleanly(mutant):
    before = _snapshot()
    with mutant.patches():  # every `find` text still occurs exactly once
        during = _snapshot()
    assert during != before, f"{mutant.name} replaced nothing"
    assert set(during) == set(before), f"{mutant.name} added or removed module attributes"
    assert _snapshot() == before


def _snapshot() -> dict[str, object]:
    """Every function, method and module-level value of the reference, by qualified name."""
    import reference_impl

    found: dict[str, object] = {}
    for info in pkgutil.iter_modules(reference_impl.__path__):
        module = importlib.import_module(f"reference_impl.{info.name}")
        for name, value in vars(module).items():
            if inspect.isfunction(value) or not inspect.isclass(value):
                found[f"{info.name}.{name}"] = value
            elif value.__module__ == module.__name__:
                for attribute, member in vars(value).items():
                    found[f"{info.name}.{name}.{attribute}"] = member
    return found


def test_a_recovery_that_forgets_a_prepared_call_is_caught_by_l4_8_alone(monkeypatch):
    """The brief's question, answered on the bundled scenario that stages it: only L4.8's
    taken-up rule (harness.criteria.prepared_calls) sees a call left prepared for ever; with
    it switched off, every criterion passes the mutant's trace."""
    from pathlib import Path

    import reference_impl
    from harness.criteria import prepared_calls
    from harness.criteria.base import Status, run_check
    from harness.running.runner import run_scenario
    from harness.scenarios.loader import load
    from harness.mutants.mutant import MutantImplementation

    scenario = load(Path(__file__).resolve().parents[4] / "scenarios/l4/recovery_takes_up_prepared_call.toml")
    reference = run_scenario(reference_impl.implementation(), scenario, 0).trace
    assert prepared_calls.forgotten_calls(reference) == (2, [])
    mutant = mutants.by_name("recovery-forgets-prepared-calls")
    trace = run_scenario(MutantImplementation(reference_impl.implementation(), mutant), scenario, 0).trace
    verdict = run_check(catalogue.by_id("L4.8"), trace)
    assert verdict.status is Status.FAIL
    assert any(e.note.startswith("c1 was left prepared") for e in verdict.evidence), verdict.evidence
    monkeypatch.setattr(prepared_calls, "forgotten_calls", lambda trace: (0, []))
    failing = [c.id for c in catalogue.CRITERIA if run_check(c, trace).status is Status.FAIL]
    assert failing == []
