"""``replay --trials K``: a scenario run K times, each failing criterion reported as a rate
(how a finding that depends on thread timing is stated), with the count of distinct traces."""

from __future__ import annotations

import io
from pathlib import Path

from harness.cli import app as cli

ROOT = Path(__file__).resolve().parents[4]
SCENARIO = str(ROOT / "scenarios" / "l2" / "dangerous_tail_in_a_write.toml")


def _replay(*argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["replay", SCENARIO, *argv], stdout=out, stderr=err)
    return code, out.getvalue()


def test_a_deterministic_pass_is_one_trace_and_no_failure():
    code, text = _replay("--trials", "3")
    assert code == 0
    assert "trials: 3 runs of l2-dangerous-tail-in-a-write, 1 distinct trace(s), 0 error(s)" \
        in text
    assert "no criterion failed in any trial" in text


def test_a_failure_is_reported_as_its_rate_over_the_trials():
    code, text = _replay("--trials", "2", "--impl", "mutant:classifier-reads-first-800-chars")
    assert code == 1
    assert "  L2.2   failed in 2 of 2 trials (100%)" in text
    assert "  L2.3   failed in 2 of 2 trials (100%)" in text


def test_one_trial_prints_no_rate_and_a_bad_count_is_a_usage_error():
    code, text = _replay()
    assert code == 0 and "trials:" not in text
    assert _replay("--trials", "0")[0] == 2
