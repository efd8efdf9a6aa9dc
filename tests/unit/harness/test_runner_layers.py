"""The runner's parts (harness.driving) depend one way: each module imports only the parts
listed before it in the package's order, and none imports the runner or anything above it."""

from __future__ import annotations

import ast
from pathlib import Path

import harness.driving

ORDER = ("state", "calls", "hung_threads", "store_probe", "instances", "world_hooks", "steps",
         "recorded_trace")
ABOVE = ("harness.runner", "harness.suite", "harness.cli", "harness.report", "harness.chaos",
         "harness.selftest", "harness.parallel")
PACKAGE = Path(harness.driving.__file__).parent


def harness_imports(source: str) -> set[str]:
    """Every ``harness.*`` module a source imports, at any depth (TYPE_CHECKING included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name == "harness" or name.startswith("harness.")}


def layer_problems(name: str, source: str) -> list[str]:
    allowed = {f"harness.driving.{earlier}" for earlier in ORDER[:ORDER.index(name)]}
    problems = []
    for module in sorted(harness_imports(source)):
        if module.startswith("harness.driving.") and module not in allowed:
            problems.append(f"{name} imports {module}, which is not before it")
        if module.startswith(ABOVE):
            problems.append(f"{name} imports {module}, which is above the runner's parts")
    return problems


def test_the_order_names_every_module_of_the_package():
    assert {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"} == set(ORDER)


def test_each_part_imports_only_parts_before_it_and_nothing_above():
    problems = [problem for name in ORDER
                for problem in layer_problems(name, (PACKAGE / f"{name}.py").read_text())]
    assert problems == []


def test_a_backward_or_upward_import_is_found():
    source = ("from typing import TYPE_CHECKING\n"
              "if TYPE_CHECKING:\n    from harness.driving.steps import Steps\n"
              "import harness.runner\n")
    assert layer_problems("calls", source) == [
        "calls imports harness.driving.steps, which is not before it",
        "calls imports harness.runner, which is above the runner's parts"]
    assert layer_problems("recorded_trace", "from harness.driving.steps import Steps\n") == []
