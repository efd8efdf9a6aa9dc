"""Every scenario we ship is neutral: its required faults and holds fire on every path the
docs allow (harness/criteria/neutrality.py), the bundled suite and its regression files alike.

And the model the check walks is the documented lifecycle as the reference implements it:
on a spread of bundled scenarios its first path (every choice made as the reference makes
it) counts exactly the failpoint hits, and fires exactly the faults, of a real run of the
reference.
"""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

import reference_impl
from harness.criteria import neutrality
from harness.criteria.pipeline_model import Chooser, walk
from harness.running.runner import run_scenario
from harness.scenarios import bundled_suite_dir, discover, load
from harness.trace.record import Kind

RUNNER_DATA = Path(__file__).parents[1] / "running" / "data"


def test_every_bundled_and_regression_scenario_is_neutral():
    scenarios = discover([bundled_suite_dir()])
    assert any("/regressions/" in s.file for s in scenarios)
    found = neutrality.check(scenarios)
    assert neutrality.report(found) == ""


def test_the_runner_test_scenarios_are_neutral():
    scenarios = discover([RUNNER_DATA])
    assert scenarios
    assert neutrality.report(neutrality.check(scenarios)) == ""


AGREEMENT = [
    "x/reconciliation_only_when_honest.toml",  # a denial's delivery failpoints, two crashes
    "l4/crash_after_tool_returned.toml",  # recovery of a cut-off call
    "l4/checkpoint_build_failure.toml",  # a raise skipping after_checkpoint_saved
    "l3/crash_keeps_denial_toward_fallback.toml",  # counters, fallback, an answer
    "l3/wait_survives_crash_after_prompt.toml",
    "l2/revoke_during_review.toml",  # a voided verdict
    "l2/escalation_after_sandbox.toml",  # escalation waits and a second run
    "l1/failure_classes.toml",  # retries, behaviours, two calls in one answer
    "m/crash_mid_request.toml",
    "x/new_message_answers_waits.toml",
    "regressions/regression-l3-classifier-fault-keeps-streak-6881224d5c.toml",  # a wait voided
    "regressions/regression-x-new-message-answers-waits-c494555940.toml",  # cancel, new turns
]


@pytest.mark.parametrize("path", AGREEMENT)
def test_the_first_path_is_the_reference_run(path):
    scenario = load(Path(bundled_suite_dir()) / path)
    model = walk(scenario, Chooser(), every_failpoint=True)
    assert model.stopped == "" and model.departures() == ()
    run = run_scenario(reference_impl.implementation(), scenario, 0)
    assert run.error == ""
    hits = tuple(run.trace.of_kind(Kind.FAILPOINT))
    assert model.reached == dict(collections.Counter(e.data["name"] for e in hits))
    fired = [set() for _ in scenario.faults]
    for event in hits:
        if "fault_index" in event.data and event.data.get("action") != "none":
            fired[event.data["fault_index"]].add(event.data["hit"])
    assert [set(f) for f in model.fired] == fired
