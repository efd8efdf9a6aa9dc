"""matrix: its targets (adapters tolerated when absent), the README block, and the command
end to end over fake implementations."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

import pytest
from suite_fakes import FakeImplementation, FakeScenario, criterion, fake_runner, render_faults

pytest.importorskip("pandas")

from harness.cli import app as cli  # noqa: E402
from harness.campaigns import matrix  # noqa: E402
from harness.contract.errors import UsageError  # noqa: E402
from harness.profiles import PROFILES  # noqa: E402


def adapter(name, installed, reason=""):
    return SimpleNamespace(name=name, impl_spec=f"python:adapters.{name}:implementation",
                           installed=installed, missing_reason=reason)



@pytest.fixture(autouse=True)
def _no_real_clis(monkeypatch):
    """The real CLIs installed on this machine (CI installs two) are not these tests' targets;
    the test of CLI targets sets its own."""
    monkeypatch.setattr(matrix, "_available_clis", lambda: ())


def test_targets_are_the_reference_every_profile_and_every_adapter(monkeypatch):
    monkeypatch.setattr(matrix, "_available_clis", lambda: ())
    found = matrix.targets(lambda: (adapter("langgraph", True), adapter("dbos", False, "pip install dbos")))
    assert [t.kind for t in found] == ["reference"] + ["profile"] * len(PROFILES) + ["adapter"] * 2
    assert found[-1].absent_reason == "pip install dbos" and found[-2].absent_reason == ""
    assert found[1].slug == "profile-codex" and found[-1].slug == "adapter-dbos"


def test_targets_without_the_adapters_module_are_reference_and_profiles(monkeypatch):
    monkeypatch.setattr(matrix, "_available_adapters", lambda: ())
    monkeypatch.setattr(matrix, "_available_clis", lambda: ())
    assert len(matrix.targets()) == 1 + len(PROFILES)


def test_the_real_clis_are_targets_absent_with_their_install_command(monkeypatch):
    monkeypatch.setattr(matrix, "_available_adapters", lambda: ())
    monkeypatch.setattr(matrix, "_available_clis", lambda: (
        SimpleNamespace(name="claude-code", missing_reason=""),
        SimpleNamespace(name="other", missing_reason="npm install other")))
    found = matrix.targets()[-2:]
    assert [(t.spec, t.kind, t.absent_reason, t.slug) for t in found] == [
        ("cli:claude-code", "cli", "", "cli-claude-code"),
        ("cli:other", "cli", "npm install other", "cli-other")]


def test_the_readme_block_is_replaced_between_the_markers_only():
    text = f"intro\n{matrix.BEGIN}\nold\n{matrix.END}\noutro\n"
    new = matrix.replace_block(text, f"{matrix.BEGIN}\nnew\n{matrix.END}", "README.md")
    assert new == f"intro\n{matrix.BEGIN}\nnew\n{matrix.END}\noutro\n"
    assert matrix.readme_block_of(new) == f"{matrix.BEGIN}\nnew\n{matrix.END}"
    with pytest.raises(UsageError, match="README.md: no"):
        matrix.replace_block("no markers", "x", "README.md")


def test_matrix_command_runs_every_target_and_writes_the_matrix(tmp_path, monkeypatch):
    monkeypatch.setattr(matrix, "_available_adapters", lambda: (adapter("dbos", False, "not installed"),))
    resolved = []

    def resolve(spec):
        resolved.append(spec)
        return FakeImplementation()

    deps = cli.Deps(resolve_impl=resolve, discover=lambda paths: (FakeScenario("good", marks=("A:ok",)),),
                    default_scenario_dir=lambda: str(tmp_path), criteria=lambda: (criterion("A", "x"),),
                    runner=lambda: fake_runner(), fault_renderer=lambda: render_faults)
    readme = tmp_path / "README.md"
    readme.write_text(f"# t\n{matrix.BEGIN}\n{matrix.END}\n", encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["matrix", "--report-dir", str(tmp_path / "m"), "--update-readme", str(readme)],
                    deps=deps, stdout=out, stderr=err)
    assert resolved == ["reference"] + [p.spec for p in PROFILES]
    assert "absent: not installed" in out.getvalue()
    # the fake passes everything, so each profile's table finds nothing: they disagree
    assert code == 1 and "DISAGREES" in out.getvalue()
    for name in ("matrix.md", "matrix.html", "matrix.json"):
        assert (tmp_path / "m" / name).is_file()
    assert (tmp_path / "m" / "reference" / "report.json").is_file()
    data = json.loads((tmp_path / "m" / "matrix.json").read_text(encoding="utf-8"))
    runs = 1 + len(PROFILES)  # the fake has one name: its columns are numbered runs
    assert sorted(data["matrix"]) == [f"fake-impl #{n}" for n in range(1, runs + 1)]
    assert "do not edit by hand" in readme.read_text(encoding="utf-8")


def test_with_adapters_the_readme_gets_their_block_too_and_without_keeps_it(tmp_path, monkeypatch):
    installed = [adapter("dbos", True)]
    monkeypatch.setattr(matrix, "_available_adapters", lambda: tuple(installed))
    deps = cli.Deps(resolve_impl=lambda spec: FakeImplementation(),
                    discover=lambda paths: (FakeScenario("good", marks=("A:ok",)),),
                    default_scenario_dir=lambda: str(tmp_path), criteria=lambda: (criterion("A", "x"),),
                    runner=lambda: fake_runner(), fault_renderer=lambda: render_faults)
    readme = tmp_path / "README.md"
    readme.write_text(f"# t\n{matrix.BEGIN}\n{matrix.END}\nmiddle\n"
                      f"{matrix.ADAPTERS_BEGIN}\nold\n{matrix.ADAPTERS_END}\n", encoding="utf-8")
    args = ["matrix", "--report-dir", str(tmp_path / "m"), "--update-readme", str(readme)]
    cli.main(args, deps=deps, stdout=io.StringIO(), stderr=io.StringIO())
    text = readme.read_text(encoding="utf-8")
    block = matrix.readme_block_of(text, matrix.ADAPTERS_BEGIN, matrix.ADAPTERS_END)
    assert "old" not in block and "| criterion |" in block and "middle" in text
    header = next(line for line in block.splitlines() if line.startswith("| criterion |"))
    assert header == "| criterion | fake-impl #1 | fake-impl #2 |"  # the reference and the adapter
    assert "fake-impl #" in matrix.readme_block_of(text)
    installed.clear()  # no adapter installed: their block stays as the last run left it
    cli.main(args, deps=deps, stdout=io.StringIO(), stderr=io.StringIO())
    assert matrix.readme_block_of(readme.read_text(encoding="utf-8"), matrix.ADAPTERS_BEGIN,
                                  matrix.ADAPTERS_END) == block


def test_matrix_refuses_a_readme_without_the_adapters_block_before_running(tmp_path, monkeypatch):
    monkeypatch.setattr(matrix, "_available_adapters", lambda: (adapter("dbos", True),))
    readme = tmp_path / "README.md"
    readme.write_text(f"{matrix.BEGIN}\n{matrix.END}\n", encoding="utf-8")
    resolved = []
    deps = cli.Deps(resolve_impl=lambda spec: resolved.append(spec) or FakeImplementation(),
                    discover=lambda paths: (FakeScenario("good"),),
                    default_scenario_dir=lambda: str(tmp_path), criteria=lambda: (criterion("A", "x"),),
                    runner=lambda: fake_runner(), fault_renderer=lambda: render_faults)
    err = io.StringIO()
    code = cli.main(["matrix", "--update-readme", str(readme), "--report-dir", str(tmp_path / "m")],
                    deps=deps, stdout=io.StringIO(), stderr=err)
    assert code == 2 and "matrix-adapters:begin" in err.getvalue() and resolved == []


def test_matrix_refuses_a_missing_readme(tmp_path):
    err = io.StringIO()
    code = cli.main(["matrix", "--update-readme", str(tmp_path / "nope.md")],
                    stdout=io.StringIO(), stderr=err)
    assert code == 2 and "file not found" in err.getvalue()


def test_an_installed_cli_alone_needs_the_adapters_block_before_running(tmp_path, monkeypatch):
    monkeypatch.setattr(matrix, "_available_adapters", lambda: ())
    monkeypatch.setattr(matrix, "_available_clis", lambda: (
        SimpleNamespace(name="codex", missing_reason=""),))
    readme = tmp_path / "README.md"
    readme.write_text(f"{matrix.BEGIN}\n{matrix.END}\n", encoding="utf-8")
    resolved = []
    deps = cli.Deps(resolve_impl=lambda spec: resolved.append(spec) or FakeImplementation(),
                    discover=lambda paths: (FakeScenario("good"),),
                    default_scenario_dir=lambda: str(tmp_path), criteria=lambda: (criterion("A", "x"),),
                    runner=lambda: fake_runner(), fault_renderer=lambda: render_faults)
    err = io.StringIO()
    code = cli.main(["matrix", "--update-readme", str(readme), "--report-dir", str(tmp_path / "m")],
                    deps=deps, stdout=io.StringIO(), stderr=err)
    assert code == 2 and "matrix-adapters:begin" in err.getvalue() and resolved == []
