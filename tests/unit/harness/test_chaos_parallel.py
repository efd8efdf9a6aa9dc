"""chaos --jobs/--shard: bases learned in workers give the same campaign as one process."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

pytest.importorskip("hypothesis")

import reference_impl  # noqa: E402
from harness import cli  # noqa: E402
from harness.chaos import run_campaign  # noqa: E402
from harness.scenarios import load  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
BASES = [REPO / "scenarios" / "l4" / "concurrent_duplicates.toml",
         REPO / "scenarios" / "x" / next(p.name for p in sorted((REPO / "scenarios" / "x").glob("*.toml")))]


def _campaign(jobs: int, tmp_path: Path):
    return run_campaign(reference_impl.implementation(), [load(p) for p in BASES], seed=5,
                        budget=4, regressions_dir=tmp_path / f"r{jobs}", jobs=jobs)


def test_the_campaign_does_not_depend_on_the_jobs(tmp_path):
    one, two = _campaign(1, tmp_path), _campaign(2, tmp_path)
    assert one.bases == two.bases and one.skipped == two.skipped
    assert [(t.schedule, t.outcome) for t in one.trials] == [(t.schedule, t.outcome) for t in two.trials]
    assert one.failure is None and two.failure is None


def test_a_shard_campaigns_over_its_share_of_the_bases(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    names = []
    for i in (1, 2):
        out, err = io.StringIO(), io.StringIO()
        code = cli.main(["chaos", "--scenarios", *map(str, BASES), "--budget", "2", "--shard",
                         f"{i}/2", "--jobs", "1", "--regressions-dir", str(tmp_path / "r")],
                        stdout=out, stderr=err)
        if code == 2:
            assert "no base scenario falls in this shard" in err.getvalue()
            continue
        assert code == 0, out.getvalue() + err.getvalue()
        names.append(err.getvalue())
    assert names  # at least one shard held a base
    out, err = io.StringIO(), io.StringIO()
    assert cli.main(["chaos", "--shard", "3/2"], stdout=out, stderr=err) == 2
    assert "shard number must be between 1 and the count" in err.getvalue()
