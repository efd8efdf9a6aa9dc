"""recovery: every row of the recovery table, after an in-process crash (SimulatedCrash) at
each failpoint and after a real killed child process (L4.1-L4.3, L4.9, X4, L3.2, L3.7, M1)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from harness.contract import (
    Delivery,
    Mode,
    ModelRequestStatus,
    Outcome,
    RecoveryAction,
    SimulatedCrash,
    TurnStatus,
    canonical_json,
    execution_id_for,
    to_json,
)
from ref_fakes import WRITE_CALL, FakeWorld, Reply, allow, ask, config

HERE = os.path.dirname(os.path.abspath(__file__))
EXECUTION_ID = execution_id_for("s1", "c1")
BEFORE_START = ["after_prepare", "after_permission_decision", "after_revalidation"]
AFTER_RESULT = ["after_result_saved", "during_diagnostics_write", "during_checkpoint_build",
                "after_checkpoint_saved", "after_projection"]


def _crash_then_recover(impl, data_dir, world, cfg, failpoint, hit=1):
    world.crash_at, world.crash_hit = failpoint, hit
    runtime = impl.open(data_dir, world)
    runtime.open_session(cfg)
    with pytest.raises(SimulatedCrash):
        runtime.run_turn("s1", "please write a.txt")
    # the crashed instance is dropped without close(), like a dead process
    world.crash_at = ""
    restarted = impl.open(data_dir, world)
    report = restarted.recover()
    return restarted, report


def _assert_model_requests_closed(obs):
    assert all((r.start_events, r.end_events) == (1, 1) for r in obs.model_requests)


@pytest.mark.parametrize("failpoint", BEFORE_START + AFTER_RESULT)
def test_a_crash_before_the_start_or_after_the_result_never_runs_the_write_twice(impl, data_dir, failpoint):
    world = FakeWorld(replies={"s1": [Reply("writing", (WRITE_CALL,))]})
    runtime, _ = _crash_then_recover(impl, data_dir, world, config(rules=(allow("write_file"),)), failpoint)
    obs = impl.inspect(data_dir)
    assert world.executed("c1") == 1
    op = obs.operation("c1")
    assert (op.outcome, op.delivery, op.reconciliation_required) == (
        Outcome.SUCCEEDED, Delivery.PROJECTED, False)
    assert obs.result_records == 1
    assert obs.sessions[0].turn_status is TurnStatus.COMPLETED
    assert world.requests[-1].messages[-1].outcome is Outcome.SUCCEEDED  # continued from the result
    _assert_model_requests_closed(obs)
    runtime.close()


def test_result_saved_without_checkpoint_is_folded_without_a_tool_call(impl, data_dir):
    world = FakeWorld(replies={"s1": [Reply("writing", (WRITE_CALL,))]})
    runtime, report = _crash_then_recover(impl, data_dir, world, config(rules=(allow("write_file"),)),
                                          "after_result_saved")
    assert report.results_completed == (EXECUTION_ID,)
    assert report.turns_resumed == ("s1",)
    assert impl.inspect(data_dir).checkpoints[-1].last_execution_id == EXECUTION_ID
    runtime.close()


def test_checkpoint_saved_without_projection_replays_only_the_projection(impl, data_dir):
    world = FakeWorld(replies={"s1": [Reply("writing", (WRITE_CALL,))]})
    runtime, report = _crash_then_recover(impl, data_dir, world, config(rules=(allow("write_file"),)),
                                          "after_checkpoint_saved")
    assert (report.results_completed, report.projections_replayed) == ((), (EXECUTION_ID,))
    assert [p.execution_id for p in world.ui] == [EXECUTION_ID]
    messages_seen = [canonical_json(to_json(r.messages)) for r in world.requests]
    assert len(set(messages_seen)) == len(messages_seen)  # no model request was sent twice
    runtime.close()


@pytest.mark.parametrize(("failpoint", "ledger"), [("after_start_recorded", 0), ("after_tool_returned", 1)])
def test_started_without_a_result_is_unknown_and_never_re_executed(impl, data_dir, failpoint, ledger):
    world = FakeWorld(replies={"s1": [Reply("writing", (WRITE_CALL,))]})
    runtime, report = _crash_then_recover(impl, data_dir, world, config(rules=(allow("write_file"),)), failpoint)
    op = impl.inspect(data_dir).operation("c1")
    assert world.executed("c1") == ledger
    assert (op.outcome, op.reconciliation_required, op.execution_started) == (Outcome.UNKNOWN, True, True)
    assert op.recovery_actions == (RecoveryAction.RECONCILE,)
    assert report.reconciliation_required == (EXECUTION_ID,)
    assert world.ui[-1].recovery_actions == (RecoveryAction.RECONCILE,)
    runtime.recover()  # a second recovery changes nothing
    assert world.executed("c1") == ledger
    runtime.close()


@pytest.mark.parametrize(("failpoint", "hit", "executed"), [
    ("before_model_request", 2, 1),
    ("after_model_request_started", 1, 1),
    ("after_model_stream_ended", 1, 0),  # the answer with the call was lost: never guessed
    ("after_model_stream_ended", 2, 1),
])
def test_a_crash_around_a_model_request_leaves_one_start_and_one_end(impl, data_dir, failpoint, hit, executed):
    world = FakeWorld(replies={"s1": [Reply("writing", (WRITE_CALL,))]})
    runtime, _ = _crash_then_recover(impl, data_dir, world, config(rules=(allow("write_file"),)),
                                     failpoint, hit)
    obs = impl.inspect(data_dir)
    _assert_model_requests_closed(obs)
    assert len({r.request_id for r in obs.model_requests}) == len(obs.model_requests)
    interrupted = [r for r in obs.model_requests if r.status is ModelRequestStatus.INCOMPLETE]
    assert len(interrupted) == (0 if failpoint == "before_model_request" else 1)
    assert world.executed("c1") == executed
    assert obs.sessions[0].turn_status is TurnStatus.COMPLETED
    runtime.close()


def test_a_crash_before_a_turn_s_first_request_leaves_nothing_of_the_turn(impl, data_dir):
    """The user message is committed with the first request's start (one commit): a crash at
    the ``before_model_request`` before it leaves the store as before the turn, like a crash
    before ``run_turn``; recovery resumes nothing, and the caller, who got no answer, sends
    the message again: it runs once."""
    world = FakeWorld(replies={"s1": [Reply("writing", (WRITE_CALL,))]})
    runtime, report = _crash_then_recover(impl, data_dir, world,
                                          config(rules=(allow("write_file"),)),
                                          "before_model_request", 1)
    obs = impl.inspect(data_dir)
    assert report.turns_resumed == () and obs.model_requests == () and world.requests == []
    assert obs.sessions[0].turn_status is TurnStatus.IDLE
    assert runtime.run_turn("s1", "please write a.txt").status is TurnStatus.COMPLETED
    assert world.executed("c1") == 1
    assert [m.content for m in world.requests[0].messages] == ["please write a.txt"]
    runtime.close()


@pytest.mark.parametrize("failpoint", ["after_wait_persisted", "after_prompt"])
def test_a_pending_wait_survives_and_its_answer_applies_once(impl, data_dir, failpoint):
    world = FakeWorld(replies={"s1": [Reply("writing", (WRITE_CALL,))]})
    runtime, report = _crash_then_recover(impl, data_dir, world, config(rules=(ask("write_file"),)), failpoint)
    assert report.turns_resumed == ()
    assert len(world.prompts) == 1
    runtime.answer_approval(world.prompts[0].wait_id, True)
    runtime.answer_approval(world.prompts[0].wait_id, True)
    assert world.executed("c1") == 1
    runtime.close()


def test_a_crash_after_a_risk_denial_counts_it_once(impl, data_dir):
    world = FakeWorld(replies={"s1": [Reply("", (WRITE_CALL,))]}, dangerous=("hello",))
    cfg = config(mode=Mode.AUTO, interactive=False)
    runtime, _ = _crash_then_recover(impl, data_dir, world, cfg, "after_permission_decision")
    runtime.recover()
    (counter,) = impl.inspect(data_dir).denial_counters
    assert (counter.consecutive, counter.cumulative) == (1, 1)
    assert world.executed("c1") == 0
    runtime.close()


def test_recovery_resumes_a_decided_operation_from_its_decision(impl, data_dir):
    world = FakeWorld(replies={"s1": [Reply("", (WRITE_CALL,))]})
    cfg = config(mode=Mode.AUTO, interactive=False)
    runtime, _ = _crash_then_recover(impl, data_dir, world, cfg, "during_classifier_review")
    assert world.executed("c1") == 1
    assert impl.inspect(data_dir).operation("c1").outcome is Outcome.SUCCEEDED
    runtime.close()


# --------------------------------------------------------------------------- real processes


def _kill_child_at(data_dir, ledger, failpoint):
    child = subprocess.run(
        [sys.executable, os.path.join(HERE, "crash_child.py"), data_dir, ledger, failpoint],
        capture_output=True, text=True, timeout=60,
    )
    assert child.returncode == 137, child.stderr


def _ledger_rows(path):
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as ledger:
        return [json.loads(line) for line in ledger if line.strip()]


def _reopen(impl, data_dir, ledger):
    world = FakeWorld(replies={"s1": [Reply("all written.")]}, ledger_path=ledger)
    runtime = impl.open(data_dir, world)
    return world, runtime, runtime.recover()


@pytest.mark.process
def test_process_killed_after_result_saved_does_not_write_again(impl, data_dir, tmp_path):
    ledger = str(tmp_path / "ledger.jsonl")
    _kill_child_at(data_dir, ledger, "after_result_saved")
    assert len(_ledger_rows(ledger)) == 1
    world, runtime, report = _reopen(impl, data_dir, ledger)
    assert len(_ledger_rows(ledger)) == 1
    assert report.results_completed == (EXECUTION_ID,)
    op = impl.inspect(data_dir).operation("c1")
    assert (op.outcome, op.delivery) == (Outcome.SUCCEEDED, Delivery.PROJECTED)
    assert world.requests[0].messages[-1].outcome is Outcome.SUCCEEDED  # continuation uses it
    runtime.close()


@pytest.mark.process
def test_process_killed_after_checkpoint_replays_only_the_projection(impl, data_dir, tmp_path):
    ledger = str(tmp_path / "ledger.jsonl")
    _kill_child_at(data_dir, ledger, "after_checkpoint_saved")
    world, runtime, report = _reopen(impl, data_dir, ledger)
    assert len(_ledger_rows(ledger)) == 1
    assert (report.results_completed, report.projections_replayed) == ((), (EXECUTION_ID,))
    assert [p.execution_id for p in world.ui] == [EXECUTION_ID]
    runtime.close()


@pytest.mark.process
@pytest.mark.parametrize(("failpoint", "rows"), [("after_start_recorded", 0), ("after_tool_returned", 1)])
def test_process_killed_mid_execution_leaves_it_unknown(impl, data_dir, tmp_path, failpoint, rows):
    ledger = str(tmp_path / "ledger.jsonl")
    _kill_child_at(data_dir, ledger, failpoint)
    world, runtime, report = _reopen(impl, data_dir, ledger)
    assert len(_ledger_rows(ledger)) == rows  # never re-executed
    op = impl.inspect(data_dir).operation("c1")
    assert (op.outcome, op.reconciliation_required) == (Outcome.UNKNOWN, True)
    assert report.reconciliation_required == (EXECUTION_ID,)
    assert world.ui[-1].status == "reconciliation_required"
    runtime.close()
