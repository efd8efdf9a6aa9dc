"""merge: the shards of a run, merged, give the report of one unsharded run; shards that do
not make one run are refused with exit 2."""

from __future__ import annotations

import io
import re
import json
from pathlib import Path

import pytest
from suite_fakes import FakeImplementation, FakeScenario, criterion, fake_runner, render_faults

from harness.cli import app as cli
from harness.campaigns.merge import VOLATILE_FIELDS

SCENARIOS = tuple(
    FakeScenario(f"s{i}", file=f"scenarios/l4/s{i}.toml",
                 marks=("A:ok", "B:bad") if i == 3 else ("A:ok",) if i % 2 else ("B:ok",),
                 failpoints=("after_prepare",) if i % 3 == 0 else ())
    for i in range(8)
)


def _deps():
    return cli.Deps(
        resolve_impl=lambda spec: FakeImplementation(),
        discover=lambda paths: SCENARIOS,
        load_scenario=lambda path: SCENARIOS[0],
        default_scenario_dir=lambda: ".",
        criteria=lambda: (criterion("A"), criterion("B", "l1")),
        runner=lambda: fake_runner(),
        fault_renderer=lambda: render_faults,
    )


def _main(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), deps=_deps(), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def _normal(path: Path) -> dict:
    """report.json without the fields no two runs share (VOLATILE_FIELDS)."""
    data = json.loads(path.read_text())
    assert set(VOLATILE_FIELDS) == {"run.started", "run.duration_s", "run.command",
                                    "scenarios[].duration_s"}
    for key in ("started", "duration_s", "command"):
        data["run"].pop(key)
    for scenario in data["scenarios"]:
        scenario.pop("duration_s")
    return data


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def test_shards_merged_equal_one_run(tmp_path):
    code, _, _ = _main("run", "--jobs", "1", "--report-dir", "all")
    assert code == 1  # B fails on s3: the merge must keep that failure and its excerpt
    shard_codes = [_main("run", "--jobs", "2", "--shard", f"{i}/3", "--report-dir", f"p{i}")[0]
                   for i in (1, 2, 3)]
    assert shard_codes.count(1) == 1  # only the shard holding s3 fails
    code, out, err = _main("merge", "p3", "p1", "p2", "--report-dir", "merged")
    assert code == 1, err
    assert _normal(tmp_path / "merged" / "report.json") == _normal(tmp_path / "all" / "report.json")
    merged = json.loads((tmp_path / "merged" / "report.json").read_text())
    assert "--shard" not in merged["run"]["command"]
    durations = json.loads((tmp_path / "merged" / "durations.json").read_text())["cases"]
    assert sorted(durations) == sorted(s.id for s in SCENARIOS)


def test_durations_balanced_shards_merge_too(tmp_path):
    _main("run", "--jobs", "1", "--report-dir", "all")
    for i in (1, 2):
        _main("run", "--shard", f"{i}/2", "--durations", "all/durations.json",
              "--report-dir", f"p{i}")
    code, _, err = _main("merge", "p1", "p2", "--report-dir", "merged")
    assert code == 1, err
    assert _normal(tmp_path / "merged" / "report.json") == _normal(tmp_path / "all" / "report.json")


@pytest.mark.parametrize("dirs, message", [
    (["p1"], r"shard\(s\) 2/2 missing"),
    (["p1", "p1b"], "both shard 1/2"),
    (["p1", "other"], "is a shard of another run|one of 3 shards"),
    (["p1", "nowhere"], "no readable shard.json"),
])
def test_merge_refuses_shards_that_do_not_make_one_run(dirs, message):
    _main("run", "--shard", "1/2", "--report-dir", "p1")
    _main("run", "--shard", "1/2", "--report-dir", "p1b")
    _main("run", "--shard", "1/3", "--report-dir", "other")
    code, _, err = _main("merge", *dirs, "--report-dir", "merged")
    assert code == 2
    assert re.search(message, err), err


def _unseen(cid: str):
    """A criterion a black box's trace cannot show: n/a on every scenario (as
    harness.criteria.outside_view judges it)."""
    from harness.criteria.base import Criterion, Evidence, Status, Verdict

    def check(trace):
        return Verdict(cid, Status.NOT_APPLICABLE, (Evidence("cannot be read here"),))

    return Criterion(id=cid, stage="l2", title=f"title of {cid}", statement="s",
                     seed_clause="c", check=check)


def test_a_black_box_runs_unseen_criteria_stay_not_applicable_after_a_merge(tmp_path):
    import dataclasses

    from suite_fakes import FakeImplementation

    @dataclasses.dataclass
    class BlackBox(FakeImplementation):
        black_box: str = "a black-box CLI"

    deps = dataclasses.replace(_deps(), resolve_impl=lambda spec: BlackBox(),
                               criteria=lambda: (criterion("X3"), _unseen("L2.1")))

    def main(*argv):
        out, err = io.StringIO(), io.StringIO()
        return cli.main(list(argv), deps=deps, stdout=out, stderr=err), err.getvalue()

    main("run", "--report-dir", "all")
    for i in (1, 2):
        main("run", "--shard", f"{i}/2", "--report-dir", f"p{i}")
    code, err = main("merge", "p1", "p2", "--report-dir", "merged")
    assert code in (0, 1), err
    for where in ("all", "p1", "merged"):
        data = json.loads((tmp_path / where / "report.json").read_text())
        statuses = {c["id"]: c["status"] for c in data["criteria"]}
        assert statuses["L2.1"] == "not_applicable", where  # not "not_exercised"
        reasons = {c["id"]: c["expectation_reason"] for c in data["criteria"]}
        assert reasons["L2.1"] == "cannot be read here", where  # n/a says why, merged too
        assert data["run"]["black_box"] == "a black-box CLI"
    assert _normal(tmp_path / "merged" / "report.json") == _normal(tmp_path / "all" / "report.json")
