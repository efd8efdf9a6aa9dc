"""``answer`` steps: ``wait = "again"`` delivers the last answer a second time."""

from __future__ import annotations

import reference_impl
from harness.running.runner import run_scenario
from harness.scenarios.loader import DEFAULT_SCENARIO_DIR, load, loads
from harness.trace.record import Kind

TEMPLATE = DEFAULT_SCENARIO_DIR / "l3" / "answer_neighbours.toml"


def answers(trace):
    return [e.data for e in trace.of_kind(Kind.DRIVER_CALL) if e.data["method"] == "answer_approval"]


def test_again_answers_the_same_wait_a_second_time_and_it_applies_once():
    scenario = load(TEMPLATE, "approve-true.timing-twice")
    run = run_scenario(reference_impl.implementation(), scenario, 0)
    first, second = answers(run.trace)
    assert first["args"]["wait_id"] == second["args"]["wait_id"] is not None
    assert "skipped" not in second
    assert len(run.trace.ledger()) == 1 and not run.error


def test_again_before_any_answer_is_recorded_as_skipped():
    scenario = loads('''
id = "x-again"
stage = "x"
[[sessions]]
id = "s1"
[[steps]]
do = "answer"
wait = "again"
''', "again.toml")
    run = run_scenario(reference_impl.implementation(), scenario, 0)
    (call,) = answers(run.trace)
    assert "none can be answered again" in call["skipped"]
