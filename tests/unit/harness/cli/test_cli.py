"""The command line: exit codes 0/1/2/3, list output, replay, reports written."""

from __future__ import annotations

import dataclasses
import io
import os
import json
import shlex
from pathlib import Path

import pytest
from suite_fakes import FakeImplementation, FakeScenario, criterion, fake_runner, render_faults

from harness.cli import app as cli
from harness.contract import Failpoint
from harness.contract.errors import ImplementationLoadError, ScenarioError

GOOD = FakeScenario("good", file="scenarios/l4/good.toml", marks=("A:ok", "B:ok"),
                    faults=("crash@after_result_saved",), failpoints=("after_result_saved",))
BAD = FakeScenario("bad", stage="l1", file="scenarios/l1/bad.toml", marks=("B:bad",))
HUNG = FakeScenario("hung", error="hung in run_turn after 20.0s", marks=("A:ok", "B:ok"))
IDLE = FakeScenario("idle", marks=("A:ok",))


def _deps(scenarios, runner=None, criteria=(criterion("A"), criterion("B", "l1"))):
    def resolve(spec):
        if spec in ("reference", "fake"):
            return FakeImplementation()
        raise ImplementationLoadError(f"--impl {spec!r} is not a known implementation spec; valid forms: reference")

    def load_scenario(path):
        for s in scenarios:
            if s.file == path or path.endswith(s.file.rsplit("/", 1)[-1]):
                return s
        raise ScenarioError(f"{path}: unknown key 'bogus'; valid keys: id, stage")

    return cli.Deps(
        resolve_impl=resolve,
        discover=lambda paths: tuple(scenarios),
        load_scenario=load_scenario,
        default_scenario_dir=lambda: ".",
        criteria=lambda: tuple(criteria),
        runner=lambda: runner or fake_runner(),
        fault_renderer=lambda: render_faults,
    )


def _main(argv, deps):
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(argv, deps=deps, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def test_run_exit_0_writes_reports_in_the_default_dir(tmp_path):
    code, out, err = _main(["run", "--seed", "5"], _deps([GOOD]))
    assert code == 0, err
    assert "gate PASSED" in out
    report_dir = tmp_path / "reports" / "latest"
    assert sorted(p.name for p in report_dir.iterdir()) == ["durations.json", "junit.xml", "report.html", "report.json", "report.md"]
    data = json.loads((report_dir / "report.json").read_text())
    assert data["run"]["seed"] == 5 and data["gate_passed"] is True
    assert data["run"]["command"] == "lifecycle-harness run --seed 5"
    # fault plans and progress go to stderr
    assert "good: fault crash@after_result_saved" in err
    assert "[1/1] passed" in err


def test_run_exit_1_on_a_conformance_failure_with_replay_command(tmp_path):
    code, out, err = _main(["run", "--impl", "fake", "--report-dir", "out", "--seed", "3"], _deps([GOOD, BAD]))
    assert code == 1, err
    assert "FAILED" in out and "B " in out
    assert f"replay: lifecycle-harness replay {tmp_path}/scenarios/l1/bad.toml --seed 3 --impl fake" in out
    assert "gate FAILED" in out
    assert (tmp_path / "out" / "report.html").is_file()


def test_run_exit_1_when_a_criterion_is_not_exercised():
    code, out, _ = _main(["run"], _deps([IDLE]))
    assert code == 1
    assert "NOT EXERCISED" in out and " B " in out


def test_run_exit_1_when_a_scenario_errors_even_if_criteria_pass():
    code, out, err = _main(["run"], _deps([GOOD, HUNG]))
    assert code == 1
    assert "SCENARIO ERROR" in out and "hung in run_turn" in out
    assert "[2/2] error" in err


@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "the following arguments are required: COMMAND"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        (["run", "--seed", "x"], "argument --seed: 'x' is not an integer"),
        (["run", "--seed", "-1"], "use a seed >= 0"),
        (["run", "--time-limit-s", "0"], "must be > 0 seconds"),
        (["run", "--bogus"], "unrecognized arguments: --bogus"),
        (["list", "things"], "invalid choice: 'things'"),
        (["replay"], "the following arguments are required: SCENARIO_FILE"),
    ],
)
def test_bad_arguments_exit_2_with_a_message(argv, message):
    code, out, err = _main(argv, _deps([GOOD]))
    assert code == 2
    assert message in err and "usage:" in err and "--help" in err
    assert out == ""


def test_bad_implementation_exits_2_naming_the_valid_forms():
    code, _, err = _main(["run", "--impl", "nonsense"], _deps([GOOD]))
    assert code == 2
    assert "lifecycle-harness: error: --impl 'nonsense'" in err and "valid forms" in err


def test_missing_scenarios_path_and_empty_discovery_exit_2():
    code, _, err = _main(["run", "--scenarios", "nowhere"], _deps([GOOD]))
    assert code == 2 and "nowhere does not exist" in err
    code, _, err = _main(["run"], _deps([]))
    assert code == 2 and "no scenario files found" in err


def test_invalid_scenario_exits_2():
    deps = _deps([GOOD])

    def discover(paths):
        raise ScenarioError("scenarios/l4/x.toml: unknown key 'bogus'; valid keys: id, stage")

    code, _, err = _main(["run"], dataclasses.replace(deps, discover=discover))
    assert code == 2 and "unknown key 'bogus'" in err


def _counting_runner():
    calls = []
    inner = fake_runner()

    def runner(*args, **kwargs):
        calls.append(args)
        return inner(*args, **kwargs)

    return runner, calls


@pytest.mark.parametrize("setup, report_dir, says", [
    (lambda root: (root / "file").write_text("x"), "file/sub", "file is not a directory"),
    (lambda root: (root / "file").write_text("x"), "file", "is not a directory"),
    (lambda root: None, "", "--report-dir . for the current directory"),
    (lambda root: (root / "real").mkdir() or (root / "link").symlink_to(root / "real"), "link",
     "is a symbolic link"),
])
def test_a_bad_report_dir_exits_2_before_anything_runs(tmp_path, setup, report_dir, says):
    setup(tmp_path)
    runner, calls = _counting_runner()
    code, out, err = _main(["run", "--report-dir", report_dir], _deps([GOOD], runner=runner))
    assert code == 2 and says in err and "--report-dir" in err
    assert calls == [] and "fault plans" not in err  # refused before running anything
    assert not (tmp_path / "real" / "report.json").exists()


def test_an_unwritable_report_dir_exits_2_before_anything_runs(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root may write anywhere")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    runner, calls = _counting_runner()
    code, _, err = _main(["run", "--report-dir", "locked"], _deps([GOOD], runner=runner))
    assert code == 2 and "not writable" in err and calls == []


def test_harness_bug_exits_3_with_a_short_hint():
    def broken_runner(*args, **kwargs):
        raise ZeroDivisionError("oops")

    code, _, err = _main(["run"], _deps([GOOD], runner=broken_runner))
    assert code == 3
    assert "internal error (a harness bug, exit 3): ZeroDivisionError: oops" in err
    assert "test_cli.py" in err and "in broken_runner" in err
    assert "Traceback (most recent call last)" not in err


def test_help_and_version_exit_0(capsys):
    assert cli.main(["--help"]) == 0
    assert "run" in capsys.readouterr().out
    assert cli.main(["--version"]) == 0
    assert "lifecycle-harness 0.1.0" in capsys.readouterr().out


def test_list_criteria_scenarios_failpoints():
    deps = _deps([GOOD, BAD])
    code, out, _ = _main(["list", "criteria"], deps)
    assert code == 0 and out.splitlines() == ["A      l4  title of A", "           statement of A",
                                              "B      l1  title of B", "           statement of B"]
    code, out, _ = _main(["list", "scenarios"], deps)
    assert code == 0 and out.splitlines() == ["good  l4  scenarios/l4/good.toml", "bad  l1  scenarios/l1/bad.toml"]
    code, out, _ = _main(["list", "failpoints"], deps)
    lines = out.splitlines()
    assert code == 0 and len(lines) == len(Failpoint)
    assert lines[0].split()[0] == "after_prepare" and "operation record created" in lines[0]


def test_replay_prints_plan_trace_and_verdicts(tmp_path):
    (tmp_path / "bad.toml").write_text("")
    code, out, _ = _main(["replay", "bad.toml", "--seed", "9", "--impl", "fake"], _deps([GOOD, BAD]))
    assert code == 1
    assert "scenario bad" in out and "seed 9" in out and "fault plan:\n  (no faults)" in out
    assert "trace (3 events" in out
    assert '    1 harness mark                 {"label":"B:bad"}' in out
    assert "FAIL           B      exercised 1" in out and "B violated <here> & there [trace 1]" in out
    assert "NOT_EXERCISED  A" in out
    assert "scenario failed; trace digest sha256:" in out


def test_replay_of_a_passing_scenario_exits_0(tmp_path):
    (tmp_path / "good.toml").write_text("")
    code, out, _ = _main(["replay", "good.toml"], _deps([GOOD]))
    assert code == 0
    assert "  fault crash@after_result_saved" in out and "failpoints reached: after_result_saved" in out


def test_replay_of_a_missing_file_exits_2():
    code, _, err = _main(["replay", "nope.toml"], _deps([GOOD]))
    assert code == 2 and "scenario file 'nope.toml' not found" in err


REPO = Path(__file__).resolve().parents[4]
REAL_SCENARIO = REPO / "scenarios" / "m" / "eof_without_text.toml"


@pytest.mark.skipif(not REAL_SCENARIO.is_file(), reason="bundled scenarios not present")
def test_default_wiring_runs_and_replays_a_bundled_scenario(tmp_path):
    """The real resolve/discover/load/runner/catalogue, on one scenario (most criteria idle)."""
    import jsonschema

    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["run", "--scenarios", str(REAL_SCENARIO), "--report-dir", "r"], stdout=out, stderr=err)
    assert code == 1, err.getvalue()  # one scenario cannot exercise every criterion
    assert "NOT EXERCISED" in out.getvalue() and "[1/1] passed m-eof-without-text" in err.getvalue()
    data = json.loads((tmp_path / "r" / "report.json").read_text())
    schema = json.loads((REPO / "fixtures" / "report.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(data)
    replay = data["scenarios"][0]["replay"]
    assert replay.startswith("lifecycle-harness replay ") and "--impl reference" in replay

    out = io.StringIO()
    argv = shlex.split(replay)[1:]
    assert cli.main(argv, stdout=out, stderr=io.StringIO()) == 0
    assert "scenario passed; trace digest " + data["scenarios"][0]["trace_digest"] in out.getvalue()
