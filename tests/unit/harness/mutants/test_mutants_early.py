"""The stage X/L1/L2 mutants are well formed and still match the reference source (fast)."""

import re

import pytest

from harness.criteria import catalogue
from harness.mutants.early import MUTANTS

KEBAB = re.compile(r"[a-z0-9]+(-[a-z0-9]+)+")


def test_names_are_unique_and_kebab_case():
    names = [m.name for m in MUTANTS]
    assert len(names) == len(set(names))
    for name in names:
        assert KEBAB.fullmatch(name), name


def test_each_mutant_names_a_defect_and_catalogued_criteria():
    known = set(catalogue.ids())
    for mutant in MUTANTS:
        assert mutant.defect.strip(), mutant.name
        assert mutant.expected, mutant.name
        assert set(mutant.expected) <= known, (mutant.name, mutant.expected)


def test_every_x_l1_l2_criterion_has_a_mutant():
    wanted = {c for c in catalogue.ids() if c.startswith(("X", "L1.", "L2."))}
    covered = {c for m in MUTANTS for c in m.expected}
    assert wanted <= covered, sorted(wanted - covered)


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_patches_apply_and_undo_cleanly(mutant):
    before = _snapshot()
    with mutant.patches():  # every `find` text still occurs exactly once
        assert _snapshot() != before, f"{mutant.name} replaced nothing"
    assert _snapshot() == before


def _snapshot() -> dict[str, object]:
    """Every function and method object of the reference modules, by qualified name."""
    import importlib
    import inspect
    import pkgutil

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
