"""The reference survives chaos campaigns over the whole suite.

A campaign (``harness.campaigns.chaos.run_campaign``) lays 1–3 random extra faults over each bundled
scenario (regression files aside) and requires every run to complete with no criterion
failing. Every campaign here has a fixed seed and budget, so it tries the same schedules
on every run (Hypothesis is seeded, its example database is off):

* the default run has one short campaign in-process over every bundled scenario, sized to
  take well under a minute on a busy 2-core machine, and one short campaign in process mode
  (the reference as a child process, crashes as real SIGKILLs) over the crash scenarios;
* ``-m slow`` runs the long campaigns, the ones docs/campaigns.md ("Chaos campaigns") reports.

A failure names the shrunk schedule, the failing criteria and the regression file written
to a temporary folder: decide which side is wrong (the reference or the criterion), fix
it, and commit the file under ``scenarios/regressions/``.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

import reference_impl
from harness.campaigns.chaos import CampaignResult, run_campaign
from harness.faults.plan import render
from harness.remote.launcher import ProcessImplementation
from harness.scenarios.loader import discover

pytest.importorskip("hypothesis")

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "scenarios"
SERVER = [sys.executable, "-m", "reference_impl.remote"]

CI_SEEDS = (2,)
CI_BUDGET = 30
SLOW_SEEDS = (0, 1, 2, 3, 4, 5, 6, 7)
SLOW_BUDGET = 200
PROCESS_SEEDS = (1,)
PROCESS_BUDGET = 10
PROCESS_SLOW_SEEDS = (2, 7)
PROCESS_SLOW_BUDGET = 100


def _bundled():
    regressions = SCENARIOS / "regressions"
    return tuple(s for s in discover([SCENARIOS])
                 if regressions not in Path(s.file).resolve().parents)


def _crash_bases():
    return tuple(s for s in _bundled() if "crash" in s.tags)


def _explain(result: CampaignResult) -> str:
    failure = result.failure
    if failure is None:
        return "no failure"
    lines = [f"seed {result.seed}: failure at example {result.examples} over "
             f"{failure.schedule.base_id}:", *render(failure.schedule.faults)]
    if failure.outcome.error:
        lines.append(f"run error: {failure.outcome.error.splitlines()[0]}")
    lines += list(failure.outcome.notes)
    lines += [f"regression file: {failure.regression_file}", f"replay: {failure.replay}"]
    return "\n".join(lines)


def _survives(result: CampaignResult, scenarios) -> None:
    assert result.failure is None, _explain(result)
    assert not result.skipped, [f"{s.scenario_id}: {s.reason}" for s in result.skipped]
    assert len(result.bases) == len(scenarios)
    assert result.examples == result.budget
    assert result.runs > result.budget // 2  # schedules were really run, not all cached


def _in_process(seed: int, budget: int, tmp_path: Path) -> None:
    scenarios = _bundled()
    result = run_campaign(reference_impl.implementation(), scenarios, seed=seed, budget=budget,
                          regressions_dir=tmp_path / "regressions")
    _survives(result, scenarios)


def _in_process_mode(seed: int, budget: int, tmp_path: Path, scenarios) -> None:
    spec = "process:" + shlex.join(SERVER)
    with ProcessImplementation(SERVER) as implementation:
        result = run_campaign(implementation, scenarios, seed=seed, budget=budget,
                              impl_spec=spec, reference=reference_impl.implementation(),
                              regressions_dir=tmp_path / "regressions")
    _survives(result, scenarios)


@pytest.mark.parametrize("seed", CI_SEEDS)
def test_the_reference_survives_a_short_campaign_over_the_suite(seed, tmp_path):
    _in_process(seed, CI_BUDGET, tmp_path)


@pytest.mark.process
@pytest.mark.parametrize("seed", PROCESS_SEEDS)
def test_the_reference_as_a_process_survives_a_short_campaign_over_the_crash_scenarios(
        seed, tmp_path):
    scenarios = _crash_bases()
    assert len(scenarios) >= 4
    _in_process_mode(seed, PROCESS_BUDGET, tmp_path, scenarios)


@pytest.mark.slow
@pytest.mark.parametrize("seed", SLOW_SEEDS)
def test_the_reference_survives_a_long_campaign_over_the_suite(seed, tmp_path):
    _in_process(seed, SLOW_BUDGET, tmp_path)


@pytest.mark.slow
@pytest.mark.process
@pytest.mark.parametrize("seed", PROCESS_SLOW_SEEDS)
def test_the_reference_as_a_process_survives_a_long_campaign_over_the_suite(seed, tmp_path):
    _in_process_mode(seed, PROCESS_SLOW_BUDGET, tmp_path, _bundled())
