"""``lifecycle-harness diff`` on the command line: its usage errors (exit 2, saying what is
wrong and what to give), a mutant named at its divergence (exit 1), the same implementation
twice (allowed, said, exit 0) and the reports it writes."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from harness.cli import app as cli

REPO = Path(__file__).resolve().parents[4]
CRASH_AFTER_SAVED = str(REPO / "scenarios" / "l4" / "crash_after_result_saved.toml")


def main(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def test_missing_impl_is_a_usage_error_that_says_how_to_give_two():
    code, out, err = main("diff", "--scenarios", CRASH_AFTER_SAVED)
    assert code == 2 and out == ""
    assert "diff compares exactly two implementations and got no --impl" in err
    assert "--impl A --impl B" in err
    assert not Path("reports").exists()


def test_one_impl_is_a_usage_error():
    code, _, err = main("diff", "--impl", "reference", "--scenarios", CRASH_AFTER_SAVED)
    assert code == 2
    assert "got 1 --impl ('reference')" in err


def test_three_impls_are_a_usage_error_naming_them():
    code, _, err = main("diff", "--impl", "reference", "--impl", "mutant:claim-not-atomic",
                        "--impl", "reference", "--scenarios", CRASH_AFTER_SAVED)
    assert code == 2
    assert "got 3 --impl ('reference', 'mutant:claim-not-atomic', 'reference')" in err


def test_an_empty_impl_is_a_usage_error():
    code, _, err = main("diff", "--impl", "reference", "--impl", " ")
    assert code == 2 and "an empty implementation spec" in err


def test_a_report_dir_that_is_a_file_is_refused_before_anything_runs(tmp_path):
    blocker = tmp_path / "taken"
    blocker.write_text("not a directory")
    code, out, err = main("diff", "--impl", "reference", "--impl", "reference",
                          "--scenarios", CRASH_AFTER_SAVED, "--report-dir", str(blocker))
    assert code == 2 and out == ""
    assert f"--report-dir {str(blocker)!r}" in err and "is not a directory" in err
    assert "diff: A" not in err  # refused before the run started
    assert blocker.read_text() == "not a directory"


def test_an_unknown_implementation_and_a_missing_scenario_path_are_usage_errors():
    code, _, err = main("diff", "--impl", "reference", "--impl", "mutant:no-such-defect",
                        "--scenarios", CRASH_AFTER_SAVED)
    assert code == 2 and "no such mutant" in err
    code, _, err = main("diff", "--impl", "reference", "--impl", "reference",
                        "--scenarios", "nowhere.toml")
    assert code == 2 and "nowhere.toml does not exist" in err


def test_a_mutant_is_named_at_its_divergence_and_exits_1(tmp_path):
    code, out, err = main("diff", "--impl", "reference", "--impl",
                          "mutant:reexecute-after-result-saved", "--scenarios",
                          CRASH_AFTER_SAVED, "--report-dir", "out", "--jobs", "1")
    assert code == 1
    assert "DIVERGED l4-crash-after-result-saved at world event 4" in out
    assert "  B >      4 world   tool_executed" in out
    assert "  A reference: passed" in out
    assert "  B mutant:reexecute-after-result-saved: failed: L1.8, L4.1" in out
    assert "1 of 1 cases differ: 1 diverged" in out
    data = json.loads((tmp_path / "out" / "diff.json").read_text())
    assert data["impl_a"] == "reference" and data["differs"] is True
    assert (tmp_path / "out" / "diff.md").read_text().startswith("# Differential run")
    assert "[1/1] DIVERGED l4-crash-after-result-saved" in err


def test_the_same_implementation_twice_is_allowed_and_said(tmp_path):
    code, out, err = main("diff", "--impl", "reference", "--impl", "reference",
                          "--scenarios", CRASH_AFTER_SAVED, "--jobs", "1")
    assert code == 0
    assert "both sides are 'reference'; this compares two runs of one implementation" in err
    assert "no difference: A and B made the same world events, with the same verdicts, in " \
           "all 1 compared case(s)" in out
    assert (tmp_path / "reports" / "diff" / "diff.json").is_file()
    assert "Both sides are the same implementation" in \
        (tmp_path / "reports" / "diff" / "diff.md").read_text()
