"""The whole bundled suite end to end, through the command line, against the reference.

What a user gating on this tool relies on: the reference comes out fully green and fully
exercised, deterministically; a broken copy of one reference module turns the run red with
the matching criterion and a replay command that reproduces it; expectation files work
both ways.
"""

import io
import json
import shlex
from pathlib import Path

import jsonschema
import pytest

from harness.cli import app as cli

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "fixtures" / "report.schema.json").read_text(encoding="utf-8"))

# The acceptance catalogue's IDs, spelled out: a criterion silently dropped from the
# harness must fail this test, not disappear from the report.
ACCEPTANCE_IDS = (
    ["X1", "X2", "X3", "X4", "X5", "X6"]
    + [f"L1.{n}" for n in range(1, 9)]
    + [f"L2.{n}" for n in range(1, 12)]
    + [f"L3.{n}" for n in range(1, 11)]
    + [f"L4.{n}" for n in range(1, 11)]
    + [f"L5.{n}" for n in range(1, 6)]
    + [f"M{n}" for n in range(1, 6)]
)


def _cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def _report(report_dir):
    data = json.loads((Path(report_dir) / "report.json").read_text(encoding="utf-8"))
    jsonschema.validate(data, SCHEMA)
    return data


@pytest.fixture(scope="session")  # validated once per worker: the run's tests are reordered
def reference_run(reference_suite_run):
    run = reference_suite_run  # `run` on the whole suite (conftest.py)
    return run.code, run.out, run.err, _report(run.report_dir), run.report_dir


def test_reference_passes_every_acceptance_criterion_and_exercises_it(reference_run):
    code, out, err, report, _ = reference_run
    assert code == 0, out + err
    statuses = {c["id"]: (c["status"], c["exercised"]) for c in report["criteria"]}
    assert sorted(statuses) == sorted(ACCEPTANCE_IDS)
    not_green = {cid: s for cid, s in statuses.items() if s[0] != "passed" or s[1] < 1}
    assert not not_green
    assert report["gate_passed"] is True
    assert all(s["status"] == "passed" for s in report["scenarios"])
    assert report["failpoints_unreached"] == []


def test_same_seed_gives_identical_traces_for_every_scenario(selftest_run, reference_run):
    # Two runs of the whole suite, seed 0: the shared `run` (one scenario after another in
    # this process) and the self-test's reference run (in forked workers), which this test
    # starts (conftest.py: selftest_run first, so it does not wait on the other's lock).
    _, _, _, report, _ = reference_run
    again = selftest_run.report
    assert report["run"]["seed"] == again["run"]["seed"] == 0
    digests = {s["id"]: s["trace_digest"] for s in report["scenarios"]}
    digests_again = {s["id"]: s["trace_digest"] for s in again["scenarios"]}
    assert len(digests) == len(report["scenarios"]) and digests.keys() == digests_again.keys()
    assert all(s["status"] == "passed" for s in report["scenarios"])  # every trace complete
    diverged = sorted(sid for sid, digest in digests.items() if digests_again[sid] != digest)
    assert diverged == [], f"{len(diverged)} scenarios gave different traces: {diverged[:10]}"


def test_check_determinism_runs_each_scenario_twice_and_reports_it(tmp_path):
    # `run --check-determinism` (the whole suite is compared above, from two shared runs)
    code, out, err = _cli("run", "--check-determinism", "--scenarios", "scenarios/m",
                          "--report-dir", str(tmp_path))
    report = _report(tmp_path)
    ran = len(report["scenarios"])
    assert code == 0 and ran >= 5, out + err
    assert report["determinism"] == {"scenarios": ran, "divergences": []}
    assert f"running each of the {ran} scenarios a second time" in err
    assert "all %d scenarios gave identical trace digests" % ran in out


def test_every_report_format_is_written(reference_run):
    *_, report_dir = reference_run
    for name in ("report.json", "junit.xml", "report.md", "report.html"):
        assert (report_dir / name).stat().st_size > 0


def test_a_broken_reference_module_fails_the_gate_with_a_working_replay(tmp_path):
    # reference_impl/execution.py with one defect: a checkpoint failure sends the saved
    # result to reconciliation (the seed design's "dispatched" bug).
    code, out, err = _cli(
        "run", "--impl", "mutant:checkpoint-failure-leaves-dispatched",
        "--scenarios", "scenarios/l4", "--report-dir", str(tmp_path),
    )
    assert code == 1, out + err
    report = _report(tmp_path)
    l44 = next(c for c in report["criteria"] if c["id"] == "L4.4")
    assert l44["status"] == "failed" and l44["violations"]
    replay = l44["violations"][0]["replay"]
    assert replay.startswith("lifecycle-harness replay ") and "--impl mutant:" in replay
    replay_code, replay_out, _ = _cli(*shlex.split(replay)[1:])
    assert replay_code == 1
    assert any(line.strip().startswith("FAIL") and "L4.4" in line for line in replay_out.splitlines())


def test_expectations_turn_a_known_failure_into_expected_fail(tmp_path):
    expectations = tmp_path / "expect.toml"
    expectations.write_text(
        '[[expected_fail]]\ncriterion = "L1.1"\nreason = "table never evicts"\n'
        'link = "https://tracker.example/1"\n', encoding="utf-8")
    code, out, err = _cli(
        "run", "--impl", "mutant:failure-table-overflows", "--scenarios", "scenarios/l1",
        "--expectations", str(expectations), "--report-dir", str(tmp_path / "r"),
    )
    report = _report(tmp_path / "r")
    l11 = next(c for c in report["criteria"] if c["id"] == "L1.1")
    assert l11["status"] == "expected_fail"
    assert "table never evicts" in l11["expectation_reason"]
    failing = [c["id"] for c in report["criteria"] if c["status"] in ("failed", "error")]
    assert failing == [], failing
    assert "expected fail" in out


def test_expectations_report_an_unexpected_pass(tmp_path):
    expectations = tmp_path / "expect.toml"
    expectations.write_text('[[expected_fail]]\ncriterion = "M2"\nreason = "EOF bug"\n', encoding="utf-8")
    code, out, err = _cli(
        "run", "--scenarios", "scenarios/m", "--expectations", str(expectations),
        "--report-dir", str(tmp_path / "r"),
    )
    report = _report(tmp_path / "r")
    m2 = next(c for c in report["criteria"] if c["id"] == "M2")
    assert m2["status"] == "unexpected_pass"
    assert "UNEXPECTED PASS" in out
