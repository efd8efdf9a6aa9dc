"""The harness's architecture is enforced by import-linter, from the contracts in pyproject.toml.

Dependencies point one way, from the command line down to the contract; no package's modules
or subpackages import each other in a cycle; the report writers read only the serializable
result; the reference imports only the contract (and the wire protocol it speaks); the
runner's parts depend one way. These tests run the contracts on the tree, check that every
package of ``harness`` has its place in the layers (a new package must be placed), that
``harness/`` holds no loose module, and that a planted back-arrow and a planted cycle are
caught with the offending import named (so the contracts cannot pass vacuously).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

pytest.importorskip("importlinter", reason="pip install -e '.[test]' brings import-linter")

REPO = Path(__file__).resolve().parents[3]
PYPROJECT = REPO / "pyproject.toml"
pytestmark = pytest.mark.skipif(not PYPROJECT.is_file(), reason="needs the repository's pyproject.toml")


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """Run ``lint-imports`` on the tree at ``root`` (its pyproject's contracts, no cache)."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    script = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run([sys.executable, "-c", script, "--no-cache"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120)


def contracts() -> list[dict]:
    return tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["tool"]["importlinter"]["contracts"]


def test_the_tree_keeps_every_contract():
    run = lint_imports(REPO)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 broken" in run.stdout


def test_every_package_of_the_harness_has_its_place_in_the_layers():
    layers = next(c for c in contracts() if c["type"] == "layers" and "containers" not in c)
    placed = {name.strip() for layer in layers["layers"] for name in layer.replace(":", "|").split("|")}
    packages = {f"harness.{p.name}" for p in (REPO / "harness").iterdir()
                if (p / "__init__.py").is_file()}
    assert packages - placed == set(), "place each new package in the layers of pyproject.toml"
    assert placed - packages == set(), "the layers name a package that does not exist"


def test_the_harness_has_no_loose_module():
    loose = sorted(p.name for p in (REPO / "harness").glob("*.py") if p.name != "__init__.py")
    assert loose == [], "put each module in the package of its concept"


def test_every_package_says_what_it_guarantees():
    import ast

    silent = [str(init.relative_to(REPO)) for init in sorted((REPO / "harness").rglob("__init__.py"))
              if "bundled_scenarios" not in init.parts
              and not ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))]
    assert silent == []


@pytest.fixture(scope="module")
def tree_copy(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tree")
    for name in ("harness", "reference_impl"):
        shutil.copytree(REPO / name, root / name, symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__", "bundled_scenarios"))
    shutil.copy(PYPROJECT, root / "pyproject.toml")
    return root


def planted(tree: Path, module: str, line: str) -> subprocess.CompletedProcess[str]:
    path = tree / (module.replace(".", "/") + ".py")
    original = path.read_text(encoding="utf-8")
    path.write_text(original + f"\n{line}  # planted by the test\n", encoding="utf-8")
    try:
        return lint_imports(tree)
    finally:
        path.write_text(original, encoding="utf-8")


def test_a_back_arrow_is_caught_and_named(tree_copy):
    run = planted(tree_copy, "harness.contract.limits", "from harness.cli import app")
    assert run.returncode != 0
    assert "harness.contract is not allowed to import harness.cli" in run.stdout
    assert "harness.contract.limits -> harness.cli.app" in run.stdout


def test_a_cycle_inside_a_package_is_caught(tree_copy):
    # the campaigns' merge reads the sweep's results; the sweep knowing merge closes a cycle
    run = planted(tree_copy, "harness.campaigns.sweep", "from harness.campaigns import merge")
    assert run.returncode != 0
    assert "No cycles between the modules or subpackages of any package BROKEN" in run.stdout


def test_the_report_writers_cannot_reach_into_a_run(tree_copy):
    run = planted(tree_copy, "harness.report.markdown", "import harness.running.suite")
    assert run.returncode != 0
    assert "harness.report.markdown -> harness.running.suite" in run.stdout
