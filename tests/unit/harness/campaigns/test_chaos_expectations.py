"""`chaos --expectations`: known gaps are not counterexamples; new failures still are."""

from __future__ import annotations

import io
from pathlib import Path

from harness.cli import app as cli

ROOT = Path(__file__).resolve().parents[4] / "scenarios"
RESULT_SAVED = str(ROOT / "l4" / "crash_after_result_saved.toml")
MUTANT = "mutant:reexecute-after-result-saved"
"""Fails L4.1 and L1.8 on l4-crash-after-result-saved without any chaos fault."""


def _chaos(tmp_path, *ids):
    expectations = tmp_path / "e.toml"
    expectations.write_text("".join(
        f'[[expected_fail]]\ncriterion = "{cid}"\nreason = "known gap"\n' for cid in ids))
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["chaos", "--impl", MUTANT, "--scenarios", RESULT_SAVED, "--budget", "2",
                     "--seed", "1", "--regressions-dir", str(tmp_path / "reg"),
                     "--expectations", str(expectations)], stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_a_base_failing_only_expected_criteria_becomes_a_base(tmp_path):
    code, out, err = _chaos(tmp_path, "L4.1", "L1.8")
    assert code == 0, out + err
    assert "looking for new failures only; expected to fail (not judged): L1.8, L4.1" in err
    assert "skipped base" not in err and "no failure in 2 examples" in out
    assert not (tmp_path / "reg").exists()


def test_a_failure_not_listed_is_still_a_failure(tmp_path):
    code, out, err = _chaos(tmp_path, "L4.1")
    assert code == 1
    assert "skipped base l4-crash-after-result-saved: already fails without chaos faults (FAIL L1.8)" in err


def test_an_unknown_criterion_in_the_file_exits_2(tmp_path):
    code, _, err = _chaos(tmp_path, "L4.99")
    assert code == 2 and "unknown criterion id(s) L4.99; valid ids: X1" in err
