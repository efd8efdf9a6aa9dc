"""chaos --jobs/--shard: bases learned in workers give the same campaign as one process."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

pytest.importorskip("hypothesis")

import reference_impl  # noqa: E402
from harness.cli import app as cli  # noqa: E402
from harness.campaigns import chaos  # noqa: E402
from harness.campaigns.chaos import run_campaign  # noqa: E402
from harness.scenarios.loader import load  # noqa: E402

REPO = Path(__file__).resolve().parents[4]
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


# --------------------------------------------------------------------------- schedules run ahead

def _fake_campaign(tmp_path: Path, fails, jobs: int, **kwargs):
    from test_chaos import BASE_TEXT, fake_runner

    from harness.scenarios import loader as scenarios
    from suite_fakes import FakeImplementation, criterion

    path = tmp_path / f"bases{jobs}" / "fake_base.toml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(BASE_TEXT, encoding="utf-8")
    options = dict(seed=5, budget=40, impl_spec="fake", regressions_dir=tmp_path / f"reg{jobs}",
                   criteria=(criterion("C1"),), runner=fake_runner(fails), jobs=jobs)
    options.update(kwargs)
    return run_campaign(FakeImplementation(), [scenarios.load(path)], **options)


def _trials(result):
    return [(t.number, t.phase, t.schedule, t.outcome, t.cached) for t in result.trials]


@pytest.mark.parametrize("fails", [
    lambda faults: False,  # every example passes: the drawn list is the campaign
    lambda faults: any(f.failpoint.value == "after_result_saved" for f in faults),  # early
    # first fails at example 20: in the third batch run ahead
    lambda faults: len(faults) == 3 and faults[2].action.value == "change_rules",
], ids=["passes", "fails-early", "fails-later"])
@pytest.mark.parametrize("max_shrink_runs", [200, 0])
def test_schedules_run_ahead_in_workers_give_the_campaign_of_one_process(tmp_path, monkeypatch,
                                                                          fails, max_shrink_runs):
    monkeypatch.setattr(chaos, "RUN_AHEAD_PER_JOB", 4)  # batches of 8 schedules
    one = _fake_campaign(tmp_path, fails, 1, max_shrink_runs=max_shrink_runs)
    two = _fake_campaign(tmp_path, fails, 2, max_shrink_runs=max_shrink_runs)
    assert _trials(one) == _trials(two)
    assert (one.failure is None) == (two.failure is None)
    if one.failure is not None:
        assert one.failure.schedule == two.failure.schedule
        assert one.failure.outcome == two.failure.outcome and two.failure.reproduced
    assert one.runs == two.runs > 0
    assert any(t.cached for t in two.trials)  # repeats drawn are cached trials in both


def test_the_command_says_how_far_the_schedules_run_ahead(tmp_path):
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["chaos", "--scenarios", *map(str, BASES), "--budget", "3", "--jobs", "2",
                     "--regressions-dir", str(tmp_path / "r")], stdout=out, stderr=err)
    assert code == 0, out.getvalue() + err.getvalue()
    lines = err.getvalue().splitlines()
    ahead = [i for i, line in enumerate(lines) if line.startswith("[run ahead] ")]
    trials = [i for i, line in enumerate(lines) if line.startswith("[   1] ")]
    assert ahead and trials and ahead[-1] < trials[0]  # before the trials it ran
    assert "drawn schedules run in 2 workers" in lines[ahead[-1]]
