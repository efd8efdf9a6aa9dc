"""The stage L3/L4/L5/M mutants are well formed and still match the reference source (fast).

Structure only: whether the suite catches each mutant is the kill matrix's job.
"""

import importlib
import inspect
import pkgutil
import re

import pytest

from harness.criteria import catalogue
from harness.selftest import mutants
from harness.selftest.mutants_late import MUTANTS

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
