"""Every profile against the whole suite, once each (session-scoped), through the command line.

What a user reading the matrix relies on: each criterion a profile does not pass (failed,
error, not exercised, or a failure its table expected) is exactly one its divergence table
explains, the report carries that explanation, and the matrix block of docs/matrix.md (moved
there from the README) is what the generator makes from these very runs.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from harness.cli import app as cli
from harness.profiles import PROFILES, load

pytest.importorskip("pandas")

from harness.campaigns.matrix import DOC as MATRIX_DOC  # noqa: E402
from harness.campaigns.matrix import readme_block, readme_block_of  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
NOT_PASSING = {"failed", "error", "not_exercised", "expected_fail"}


@pytest.fixture(scope="session")
def profile_report(tmp_path_factory, run_once):
    """spec -> (exit code, report.json dict): one suite run per profile, once per test run
    whichever worker asks first (conftest.py). One result per profile, so the parametrized
    tests below build their profiles on different workers at once instead of one worker
    building all of them while the others wait."""
    def report_of(spec: str) -> tuple[int, dict]:
        def build():
            report_dir = tmp_path_factory.mktemp("profile")
            out, err = io.StringIO(), io.StringIO()
            # a generous time limit: a busy machine must not turn a slow scenario into a hang
            code = cli.main(["run", "--impl", spec, "--report-dir", str(report_dir),
                             "--time-limit-s", "60"], stdout=out, stderr=err)
            assert code in (0, 1), f"{spec}: exit {code}\n{err.getvalue()[-2000:]}"
            return [code, json.loads((report_dir / "report.json").read_text("utf-8"))]

        code, report = run_once(f"profile-report-{spec.replace(':', '-')}", build)
        return code, report

    return report_of


@pytest.mark.parametrize("name", [p.name for p in PROFILES])
def test_the_divergence_table_names_exactly_what_the_harness_finds(profile_report, name):
    profile = load(name).profile
    _, report = profile_report(profile.spec)
    found = {c["id"]: c["status"] for c in report["criteria"] if c["status"] in NOT_PASSING}
    explained = profile.explanations()
    assert set(found) - set(explained) == set(), (
        f"{profile.spec}: the harness reports divergences the table does not explain: "
        f"{ {cid: found[cid] for cid in set(found) - set(explained)} }")
    assert set(explained) - set(found) == set(), (
        f"{profile.spec}: the table explains divergences the harness does not find: "
        f"{sorted(set(explained) - set(found))}")
    for criterion in report["criteria"]:  # the explanation reaches the report
        assert criterion["expectation_reason"] == explained.get(criterion["id"], "")
    statuses = {c["status"] for c in report["criteria"]}
    assert "unexpected_pass" not in statuses and "failed" not in statuses


def test_the_docs_matrix_is_generated_from_the_profile_runs(profile_report):
    page = (ROOT / MATRIX_DOC).read_text(encoding="utf-8")
    expected = readme_block([profile_report(p.spec)[1] for p in PROFILES])
    assert readme_block_of(page) == expected, (
        f"{MATRIX_DOC}'s matrix block is stale: run `lifecycle-harness matrix --update-readme "
        f"{MATRIX_DOC}`")
