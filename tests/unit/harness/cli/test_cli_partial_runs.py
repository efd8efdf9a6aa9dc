"""`run` partial runs and their reporting: --criteria/--stage/--scenarios (not_selected),
-x/--fail-fast (not_run), --last-failed, strict/lenient expectations, default report dirs,
replay paths that resolve from any directory, the failing block that ends the summary."""

from __future__ import annotations

import io
import json
import os
import shlex
from pathlib import Path

import pytest
from suite_fakes import FakeImplementation, FakeScenario, criterion, fake_runner, render_faults

from harness.cli import app as cli
from harness.contract.errors import ScenarioError

L4_OK = FakeScenario("l4-ok", file="scenarios/l4/ok.toml", marks=("A:ok",))
L4_BAD = FakeScenario("l4-bad", file="scenarios/l4/bad.toml", marks=("A:bad",))
L1_OK = FakeScenario("l1-ok", stage="l1", file="scenarios/l1/ok.toml", marks=("B:ok",))
L1_BAD = FakeScenario("l1-bad", stage="l1", file="scenarios/l1/bad.toml", marks=("B:bad",))
X_OK = FakeScenario("x-ok", stage="x", file="scenarios/x/ok.toml", marks=("C:ok",))
CRITERIA = (criterion("A", "l4"), criterion("B", "l1"), criterion("C", "x"))


def _deps(scenarios, calls=None, bundled="."):
    def load_scenario(path, variant=None):
        for s in scenarios:
            if os.path.abspath(path).endswith(s.file.split("/", 1)[1]):
                return s
        raise ScenarioError(f"{path}: unknown")

    return cli.Deps(
        resolve_impl=lambda spec: FakeImplementation(),
        discover=lambda paths: tuple(scenarios),
        load_scenario=load_scenario,
        default_scenario_dir=lambda: bundled,
        criteria=lambda: CRITERIA,
        runner=lambda: fake_runner(calls),
        fault_renderer=lambda: render_faults,
    )


def _main(argv, deps):
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(argv, deps=deps, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


SCHEMA = Path(__file__).resolve().parents[4] / "fixtures" / "report.schema.json"


def _report(path="r"):
    """report.json, validated against the published schema."""
    import jsonschema

    data = json.loads((Path(path) / "report.json").read_text())
    jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text())).validate(data)
    return data


def _statuses(report):
    return {c["id"]: c["status"] for c in report["criteria"]}


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NO_COLOR", raising=False)


# --------------------------------------------------------------------------- selection


def test_criteria_run_the_scenarios_of_their_stage_and_judge_only_them():
    calls = []
    code, out, err = _main(["run", "--criteria", "a", "--report-dir", "r"],
                           _deps([L4_OK, L1_BAD, X_OK], calls))
    assert code == 0, out + err  # B fails on l1-bad, but B was not selected and l1 did not run
    assert [c[0] for c in calls] == ["l4-ok"]
    report = _report()
    assert _statuses(report) == {"A": "passed", "B": "not_selected", "C": "not_selected"}
    assert report["summary"]["not_selected"] == 2 and report["summary"]["not_exercised"] == 0
    assert report["run"]["selection"] == "--criteria A"
    assert "2 not selected" in out and "partial run (--criteria A)" in out


def test_a_selected_failure_fails_the_run_and_a_not_selected_one_never_shows():
    code, out, _ = _main(["run", "--stage", "L4,l1", "--report-dir", "r"],
                         _deps([L4_BAD, L1_OK, X_OK]))
    assert code == 1
    report = _report()
    assert _statuses(report) == {"A": "failed", "B": "passed", "C": "not_selected"}
    code, out, _ = _main(["run", "--stage", "l1", "--stage", "x", "--report-dir", "r"],
                         _deps([L4_BAD, L1_OK, X_OK]))
    assert code == 0 and "FAILED" not in out
    by_id = {s["id"]: s for s in _report()["scenarios"]}
    assert set(by_id) == {"l1-ok", "x-ok"}


def test_explicit_scenarios_select_the_criteria_of_their_stages():
    code, out, err = _main(["run", "--scenarios", ".", "--report-dir", "r"], _deps([L1_OK]))
    assert code == 0, out + err
    assert _statuses(_report()) == {"A": "not_selected", "B": "passed", "C": "not_selected"}


def test_a_scenario_failing_only_a_not_selected_criterion_counts_as_passed():
    both = FakeScenario("l4-both", file="scenarios/l4/both.toml", marks=("A:ok", "B:bad"))
    code, _, _ = _main(["run", "--criteria", "A", "--report-dir", "r"], _deps([both]))
    assert code == 0
    (scenario,) = _report()["scenarios"]
    assert scenario["status"] == "passed"


@pytest.mark.parametrize("argv, says", [
    (["--criteria", "A,Z9"], "--criteria: unknown criterion id(s) Z9; valid ids: A, B, C"),
    (["--stage", "l9"], "--stage: unknown stage(s) l9; valid stages: l4, l1, x"),
])
def test_an_unknown_criterion_or_stage_exits_2_listing_the_valid_ones(argv, says):
    calls = []
    code, _, err = _main(["run", *argv], _deps([L4_OK], calls))
    assert code == 2 and says in err and calls == []


# --------------------------------------------------------------------------- fail-fast


def test_fail_fast_stops_after_the_first_failing_scenario():
    calls = []
    code, out, err = _main(["run", "-x", "--report-dir", "r"],
                           _deps([L4_OK, L1_BAD, L4_BAD, X_OK], calls))
    assert code == 1
    assert [c[0] for c in calls] == ["l4-ok", "l1-bad"]
    by_id = {s["id"]: s["status"] for s in _report()["scenarios"]}
    assert by_id == {"l4-ok": "passed", "l1-bad": "failed", "l4-bad": "not_run", "x-ok": "not_run"}
    assert "2 not run after --fail-fast stopped" in out
    assert "not exercised by the scenarios that ran (2 not run" in out  # C: x-ok never ran


def test_fail_fast_ignores_expected_failures_and_not_selected_criteria(tmp_path):
    (tmp_path / "e.toml").write_text('[[expected_fail]]\ncriterion = "B"\nreason = "known"\n')
    calls = []
    code, out, err = _main(["run", "-x", "--expectations", "e.toml", "--report-dir", "r"],
                           _deps([L1_BAD, L4_OK, X_OK], calls))
    assert code == 0, out + err
    assert [c[0] for c in calls] == ["l1-bad", "l4-ok", "x-ok"]


# --------------------------------------------------------------------------- last-failed


def test_last_failed_reruns_what_failed_and_forgets_what_passed(tmp_path):
    code, out, err = _main(["run", "--last-failed", "--report-dir", "r"],
                           _deps([L4_OK, L1_BAD, X_OK]))
    assert code == 1 and "no previous failures recorded; running everything" in err
    cache = json.loads((tmp_path / ".lifecycle-harness" / "lastfailed.json").read_text())
    assert cache == {"version": 1, "scenarios": ["l1-bad"], "criteria": ["B"]}

    calls = []
    fixed = FakeScenario("l1-bad", stage="l1", file="scenarios/l1/bad.toml", marks=("B:ok",))
    code, out, err = _main(["run", "--last-failed", "--report-dir", "r"],
                           _deps([L4_OK, fixed, X_OK], calls))
    assert code == 0, out + err
    assert [c[0] for c in calls] == ["l1-bad"]
    assert "rerunning the 1 scenario(s) that failed last time" in err
    assert _statuses(_report()) == {"A": "not_selected", "B": "passed", "C": "not_selected"}
    cache = json.loads((tmp_path / ".lifecycle-harness" / "lastfailed.json").read_text())
    assert cache["scenarios"] == [] and cache["criteria"] == []


def test_last_failed_after_a_scenario_error_judges_what_the_rerun_reaches(tmp_path):
    hung = FakeScenario("l4-hung", file="scenarios/l4/hung.toml", error="hang", marks=("A:ok",))
    code, _, _ = _main(["run", "--report-dir", "r"], _deps([hung, L1_OK, X_OK]))
    assert code == 1
    cache = json.loads((tmp_path / ".lifecycle-harness" / "lastfailed.json").read_text())
    assert cache == {"version": 1, "scenarios": ["l4-hung"], "criteria": []}
    completes = FakeScenario("l4-hung", file="scenarios/l4/hung.toml", marks=("A:ok",))
    code, out, err = _main(["run", "--last-failed", "--report-dir", "r"],
                           _deps([completes, L1_OK, X_OK]))
    assert code == 0, out + err
    assert _statuses(_report()) == {"A": "passed", "B": "not_selected", "C": "not_selected"}
    failing_now = FakeScenario("l4-hung", file="scenarios/l4/hung.toml", marks=("A:ok", "B:bad"))
    _main(["run", "--report-dir", "r"], _deps([hung, L1_OK, X_OK]))
    code, _, _ = _main(["run", "--last-failed", "--report-dir", "r"],
                       _deps([failing_now, L1_OK, X_OK]))
    assert code == 1 and _statuses(_report())["B"] == "failed"


def test_a_corrupt_last_failed_cache_exits_2_with_the_fix(tmp_path):
    (tmp_path / ".lifecycle-harness").mkdir()
    (tmp_path / ".lifecycle-harness" / "lastfailed.json").write_text("{not json")
    code, _, err = _main(["run", "--last-failed"], _deps([L4_OK]))
    assert code == 2 and "lastfailed.json" in err and "delete the file" in err


# --------------------------------------------------------------------------- expectations


def _expect(tmp_path, *ids):
    (tmp_path / "e.toml").write_text("".join(
        f'[[expected_fail]]\ncriterion = "{cid}"\nreason = "gap {cid}"\n' for cid in ids))
    return "e.toml"


def test_an_unexpected_pass_fails_the_gate_by_default_and_says_to_remove_it(tmp_path):
    code, out, _ = _main(["run", "--expectations", _expect(tmp_path, "A"), "--report-dir", "r"],
                         _deps([L4_OK, L1_OK, X_OK]))
    assert code == 1
    report = _report()
    assert report["run"]["expectations_mode"] == "strict" and report["gate_passed"] is False
    assert _statuses(report)["A"] == "unexpected_pass"
    assert "remove it from the expectations file e.toml" in out.splitlines()[-1]


def test_lenient_expectations_report_an_unexpected_pass_without_failing(tmp_path):
    code, out, _ = _main(["run", "--expectations", _expect(tmp_path, "A"),
                          "--lenient-expectations", "--report-dir", "r"],
                         _deps([L4_OK, L1_OK, X_OK]))
    assert code == 0 and "UNEXPECTED PASS" in out
    assert _report()["run"]["expectations_mode"] == "lenient"


def test_replay_with_expectations_does_not_count_an_expected_failure(tmp_path):
    (tmp_path / "scenarios" / "l4").mkdir(parents=True)
    (tmp_path / "scenarios" / "l4" / "bad.toml").write_text("# loaded by the fake\n")
    deps = _deps([L4_BAD])
    assert _main(["replay", "scenarios/l4/bad.toml"], deps)[0] == 1
    code, out, _ = _main(["replay", "scenarios/l4/bad.toml", "--expectations",
                          _expect(tmp_path, "A")], deps)
    assert code == 0 and "EXPECTED FAIL" in out
    code, _, err = _main(["replay", "scenarios/l4/bad.toml", "--expectations",
                          _expect(tmp_path, "Q")], deps)
    assert code == 2 and "unknown criterion id(s) Q" in err


# --------------------------------------------------------------------------- report dirs


def test_runs_go_to_timestamped_dirs_with_latest_pointing_at_the_newest(tmp_path):
    deps = _deps([L4_OK, L1_OK, X_OK])
    assert _main(["run"], deps)[0] == 0
    assert _main(["run"], deps)[0] == 0
    runs = sorted(p for p in (tmp_path / "reports").iterdir() if p.name != "latest")
    assert len(runs) == 2
    latest = tmp_path / "reports" / "latest"
    assert latest.is_symlink() and latest.resolve() in {r.resolve() for r in runs}
    newest = json.loads((latest / "report.json").read_text())
    assert sorted(p.name for p in latest.iterdir()) == [
        "durations.json", "junit.xml", "report.html", "report.json", "report.md"]
    assert newest["gate_passed"] is True


def test_report_dir_keeps_writing_exactly_there(tmp_path):
    assert _main(["run", "--report-dir", "out"], _deps([L4_OK, L1_OK, X_OK]))[0] == 0
    assert (tmp_path / "out" / "report.json").is_file()
    assert not (tmp_path / "reports").exists()


# --------------------------------------------------------------------------- replay paths


def test_a_printed_replay_command_replays_from_another_directory(tmp_path, monkeypatch):
    """The bundled suite: relative to its root; a user's file: absolute."""
    bundled = tmp_path / "site" / "scenarios"
    (bundled / "l4").mkdir(parents=True)
    (bundled / "l4" / "bad.toml").write_text("# the bundled file\n")
    scenario = FakeScenario("l4-bad", file=str(bundled / "l4" / "bad.toml"), marks=("A:bad",))
    monkeypatch.setattr("harness.running.suite.bundled_scenario_root", lambda: str(bundled))
    deps = _deps([scenario], bundled=str(bundled))
    code, out, _ = _main(["run", "--criteria", "A", "--report-dir", "r"], deps)
    assert code == 1
    replay = _report()["scenarios"][0]["replay"]
    assert replay.startswith("lifecycle-harness replay l4/bad.toml ")
    assert out.splitlines()[-1].strip() == replay  # the summary ends with it
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    code, out, err = _main(shlex.split(replay)[1:], deps)
    assert code == 1 and "FAIL" in out and "not found" not in err


def test_a_user_scenario_is_replayed_by_its_absolute_path(tmp_path, monkeypatch):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "bad.toml").write_text("# a user's file\n")
    scenario = FakeScenario("l4-bad", file="mine/bad.toml", marks=("A:bad",))
    deps = _deps([scenario])
    _main(["run", "--criteria", "A", "--report-dir", "r"], deps)
    replay = _report()["scenarios"][0]["replay"]
    assert f" {tmp_path / 'mine' / 'bad.toml'} " in replay
    monkeypatch.chdir(tmp_path / "r")
    code, _, err = _main(shlex.split(replay)[1:], deps)
    assert code == 1 and "not found" not in err


def test_replay_of_a_file_neither_here_nor_bundled_names_both_places():
    code, _, err = _main(["replay", "l4/nope.toml"], _deps([L4_OK]))
    assert code == 2 and "neither in the working directory nor in the bundled suite" in err


# --------------------------------------------------------------------------- summary


def test_the_summary_ends_with_the_failing_criteria_and_their_replay_commands():
    code, out, _ = _main(["run", "--report-dir", "r", "--color", "never"],
                         _deps([L4_BAD, L1_OK]))
    assert code == 1
    tail = out.splitlines()[-5:]
    assert tail[0] == "failing (2 criteria, 0 scenario errors):"
    assert tail[1].startswith("  A failed: title of A")
    assert tail[2].startswith("    lifecycle-harness replay ") and "bad.toml" in tail[2]
    assert tail[3].startswith("  C not_exercised")
    assert "\x1b[" not in out


def _expect_error(tmp_path, scenario="l4-hung", cause="hang"):
    (tmp_path / "e.toml").write_text(
        f'[[expected_error]]\nscenario = "{scenario}"\ncause = "{cause}"\nreason = "no timeouts yet"\n')
    return "e.toml"


HUNG = FakeScenario("l4-hung", file="scenarios/l4/hung.toml", error="hang in run_turn",
                    marks=("A:ok",))


def test_a_listed_scenario_error_is_expected_and_the_run_gates_on_nothing_new(tmp_path):
    assert _main(["run", "--report-dir", "r"], _deps([HUNG, L4_OK, L1_OK, X_OK]))[0] == 1
    code, out, err = _main(["run", "--expectations", _expect_error(tmp_path), "--report-dir",
                            "r"], _deps([HUNG, L4_OK, L1_OK, X_OK]))
    assert code == 0, out + err
    report = _report()  # validates against the schema
    (hung,) = [s for s in report["scenarios"] if s["id"] == "l4-hung"]
    assert hung["status"] == "expected_error" and report["gate_passed"] is True
    assert hung["expected_error"] == "l4-hung errors with 'hang': no timeouts yet"
    assert "expected error l4-hung: hang in run_turn [expected: l4-hung errors with 'hang'" in out
    assert any("1 errored as expected" in line for line in out.splitlines() if line.startswith("gate PASSED"))
    # a new error (another cause) still fails, and says what was expected instead
    code, out, _ = _main(["run", "--expectations", _expect_error(tmp_path, cause="did not fire"),
                          "--report-dir", "r"], _deps([HUNG, L4_OK, L1_OK, X_OK]))
    assert code == 1 and "scenario error (expected another: l4-hung errors with 'did not fire'" in out


def test_an_expected_error_that_did_not_happen_fails_strict_and_is_reported_lenient(tmp_path):
    fixed = FakeScenario("l4-hung", file="scenarios/l4/hung.toml", marks=("A:ok",))
    code, out, _ = _main(["run", "--expectations", _expect_error(tmp_path), "--report-dir", "r"],
                         _deps([fixed, L1_OK, X_OK]))
    assert code == 1 and _report()["gate_passed"] is False
    assert ("l4-hung unexpected success: listed as expected to error (l4-hung errors with "
            "'hang': no timeouts yet) but it passed: remove it from the expectations file e.toml"
            in out)
    code, out, _ = _main(["run", "--expectations", _expect_error(tmp_path),
                          "--lenient-expectations", "--report-dir", "r"],
                         _deps([fixed, L1_OK, X_OK]))
    assert code == 0 and "UNEXPECTED SUCCESS l4-hung: passed" in out


def test_fail_fast_goes_on_after_an_expected_error(tmp_path):
    calls = []
    code, out, err = _main(["run", "-x", "--expectations", _expect_error(tmp_path),
                            "--report-dir", "r"], _deps([HUNG, L1_OK, X_OK, L4_OK], calls))
    assert code == 0, out + err
    assert [c[0] for c in calls] == ["l4-hung", "l1-ok", "x-ok", "l4-ok"]
