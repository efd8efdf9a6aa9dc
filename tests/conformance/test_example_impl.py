"""The example in examples/ is what its README pointer promises: an implementation written
from the docs, importing neither the harness nor the reference, that meets the core over the
wire protocol (real processes, real SIGKILL crashes)."""

from __future__ import annotations

import ast
import io
import json
import shlex
import sys
from pathlib import Path

import pytest

from harness import cli

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "minimal_runtime.py"
FORBIDDEN = ("harness", "reference_impl")


def imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            found.add("." if node.level else (node.module or "").split(".")[0])
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "") in (
                "__import__", "import_module"):
            found |= {str(arg.value).split(".")[0] for arg in node.args
                      if isinstance(arg, ast.Constant)}
    return found


def test_the_scan_sees_every_kind_of_import(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import harness.contract\nfrom reference_impl import x\n"
                     "from . import y\n__import__('harness')\n", encoding="utf-8")
    assert imported_packages(probe) >= {"harness", "reference_impl", "."}


def test_every_example_imports_only_the_standard_library():
    examples = sorted((ROOT / "examples").glob("*.py"))
    assert EXAMPLE in examples
    for path in examples:
        imported = imported_packages(path)
        assert not imported & {*FORBIDDEN, "."}, (path.name, imported)
        assert imported <= set(sys.stdlib_module_names) | {"__future__"}, (path.name, imported)


@pytest.mark.process
def test_the_example_meets_the_core_as_a_process(tmp_path):
    command = shlex.join([sys.executable, str(EXAMPLE)])
    out, err = io.StringIO(), io.StringIO()
    # The default limit: it bounds a call that stops calling the world, so the longest
    # scenario's turn (twenty classifier reviews, each a round trip with store probes) may
    # take longer than 20 s on a loaded machine without being a hang.
    code = cli.main(["run", "--impl", f"process:{command}", "--report-dir", str(tmp_path)],
                    stdout=out, stderr=err)
    report = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    conformance = report["conformance"]
    assert conformance["core_met"], conformance["headline"] + "\n" + out.getvalue()[-4000:]
    assert code == 0, out.getvalue()[-4000:] + err.getvalue()
    core = {c["id"]: c for c in report["criteria"] if not c["required_features"]}
    assert sorted(core) == sorted(conformance["core_criteria"]) and len(core) == 51
    assert all(c["status"] == "passed" and c["exercised"] >= 1 for c in core.values())
    # it claims no optional feature: their criteria are n/a, their scenarios skipped
    assert conformance["claimed"] == []
    gated = [c for c in report["criteria"] if c["required_features"]]
    assert gated and all(c["status"] == "not_applicable" for c in gated)
    assert {s["status"] for s in report["scenarios"]} <= {"passed", "skipped"}
