"""policy seams: the reference's defaults are unchanged, and each seam a profile sets does
what it says (a denial limit that ends the turn, a window of recent reviews, re-running
started calls after a restart, pending waits lost at a restart)."""

from __future__ import annotations

import pytest

from harness.contract import Mode, Outcome, SimulatedCrash, TurnStatus, WaitStatus
from ref_fakes import WRITE_CALL, FakeWorld, Reply, allow, ask, call, config
from reference_impl import ReferenceRuntime, implementation, policy
from reference_impl.denial_counters import DenialPolicy, LimitAction
from reference_impl.policy import RestartAction, RuntimePolicy

END_TURN = RuntimePolicy(denials=DenialPolicy(LimitAction.END_TURN, LimitAction.END_TURN))
WINDOW = RuntimePolicy(denials=DenialPolicy(LimitAction.END_TURN, LimitAction.END_TURN,
                                            cumulative_window_reviews=50,
                                            cumulative_denials_max=10))
RERUN = RuntimePolicy(incomplete_calls_on_restart=RestartAction.RERUN, restart_reruns_max=2)
MEMORY_WAITS = RuntimePolicy(waits_survive_restart=False)


def risky(n: int):
    return call(f"c{n}", "write_file", path=f"/repo/{n}.txt", content="rm -rf /")


def safe(n: int):
    return call(f"c{n}", "write_file", path=f"/repo/{n}.txt", content="fine")


def test_the_reference_policy_is_the_default():
    assert policy.REFERENCE == RuntimePolicy()
    assert RuntimePolicy().denials.action(True) is LimitAction.ASK_OWNER
    assert RuntimePolicy().denials.action(False) is LimitAction.KEEP_REVIEWING


@pytest.mark.parametrize("interactive", [True, False])
def test_end_turn_policy_cancels_the_turn_at_the_third_consecutive_denial(data_dir, interactive):
    calls = tuple(risky(n) for n in range(1, 5))
    world = FakeWorld(replies={"s1": [Reply("", calls), Reply("done")]})
    runtime = ReferenceRuntime(data_dir, world, END_TURN)
    runtime.open_session(config(mode=Mode.AUTO, interactive=interactive))
    result = runtime.run_turn("s1", "go")
    assert result.status is TurnStatus.CANCELLED
    observation = implementation().inspect(data_dir)
    decided = {op.identity.tool_call_id: op.decided_by.value for op in observation.operations}
    assert [decided[f"c{n}"] for n in (1, 2, 3)] == ["classifier"] * 3
    assert decided["c4"] == "cancellation"  # never reviewed: the turn was over
    assert not world.prompts and all(world.executed(f"c{n}") == 0 for n in range(1, 5))
    runtime.close()


def test_reference_policy_goes_on_and_asks_the_owner_instead(data_dir):
    calls = tuple(risky(n) for n in range(1, 5))
    world = FakeWorld(replies={"s1": [Reply("", calls), Reply("done")]})
    runtime = ReferenceRuntime(data_dir, world)
    runtime.open_session(config(mode=Mode.AUTO))
    assert runtime.run_turn("s1", "go").status is TurnStatus.AWAITING_APPROVAL
    assert [p.tool_call_id for p in world.prompts] == ["c4"]
    runtime.close()


def test_window_policy_ends_the_turn_at_ten_denials_among_recent_reviews(data_dir):
    # deny, deny, allow: never three in a row; the 10th denial is the 15th review.
    pattern = []
    for n in range(5):
        pattern += [risky(3 * n + 1), risky(3 * n + 2), safe(3 * n + 3)]
    world = FakeWorld(replies={"s1": [Reply("", tuple(pattern)), Reply("done")]})
    runtime = ReferenceRuntime(data_dir, world, WINDOW)
    runtime.open_session(config(mode=Mode.AUTO))
    assert runtime.run_turn("s1", "go").status is TurnStatus.CANCELLED
    executed = [c.tool_call_id for c in pattern if world.executed(c.tool_call_id)]
    assert executed == ["c3", "c6", "c9", "c12"]  # c15 came after the 10th denial (c14)
    runtime.close()


def _crash_and_restart(data_dir, world, cfg, failpoint, chosen):
    world.crash_at = failpoint
    runtime = ReferenceRuntime(data_dir, world, chosen)
    runtime.open_session(cfg)
    with pytest.raises(SimulatedCrash):
        runtime.run_turn("s1", "please write a.txt")
    world.crash_at = ""
    restarted = ReferenceRuntime(data_dir, world, chosen)
    return restarted, restarted.recover()


def test_rerun_policy_runs_a_started_call_again_after_a_restart(data_dir, impl):
    world = FakeWorld(replies={"s1": [Reply("writing", (WRITE_CALL,)), Reply("done")]})
    runtime, report = _crash_and_restart(data_dir, world, config(rules=(allow("write_file"),)),
                                         "after_tool_returned", RERUN)
    assert world.executed("c1") == 2  # at-least-once: the effect happened twice
    assert report.reconciliation_required == ()
    op = impl.inspect(data_dir).operation("c1")
    assert (op.outcome, op.reconciliation_required) == (Outcome.SUCCEEDED, False)
    runtime.close()


def test_rerun_policy_gives_up_after_its_limit_and_leaves_the_reference_marking(data_dir, impl):
    world = FakeWorld(replies={"s1": [Reply("writing", (WRITE_CALL,)), Reply("done")]})
    world.crash_at = "after_tool_returned"
    runtime = ReferenceRuntime(data_dir, world, RERUN)
    runtime.open_session(config(rules=(allow("write_file"),)))
    with pytest.raises(SimulatedCrash):
        runtime.run_turn("s1", "please write a.txt")
    for hit in (2, 3):  # each re-run crashes again: the limit of 2 re-runs is spent
        world.crash_hit = hit
        with pytest.raises(SimulatedCrash):
            ReferenceRuntime(data_dir, world, RERUN).recover()
    world.crash_at = ""
    last = ReferenceRuntime(data_dir, world, RERUN)
    assert last.recover().reconciliation_required != ()
    assert impl.inspect(data_dir).operation("c1").outcome is Outcome.UNKNOWN
    assert world.executed("c1") == 3  # the first run and two re-runs, no more
    last.close()


def test_memory_waits_are_lost_at_a_restart_and_the_turn_goes_on(data_dir, impl):
    world = FakeWorld(replies={"s1": [Reply("writing", (WRITE_CALL,)), Reply("done")]})
    runtime, report = _crash_and_restart(data_dir, world, config(rules=(ask("write_file"),)),
                                         "after_prompt", MEMORY_WAITS)
    observation = impl.inspect(data_dir)
    assert [w.status for w in observation.approval_waits] == [WaitStatus.REJECTED]
    assert world.executed("c1") == 0
    assert observation.sessions[0].turn_status is TurnStatus.COMPLETED
    assert report.turns_resumed == ("s1",)
    runtime.close()


def test_the_reference_keeps_the_same_wait_pending(data_dir, impl):
    world = FakeWorld(replies={"s1": [Reply("writing", (WRITE_CALL,)), Reply("done")]})
    runtime, _ = _crash_and_restart(data_dir, world, config(rules=(ask("write_file"),)),
                                    "after_prompt", policy.REFERENCE)
    assert [w.status for w in impl.inspect(data_dir).approval_waits] == [WaitStatus.PENDING]
    runtime.close()


def test_rerun_of_an_approved_escalation_runs_outside_the_sandbox_again(data_dir):
    world = FakeWorld(replies={"s1": [Reply("", (call("c1", "Bash", command="npm i -g tsc"),)),
                                      Reply("done")]},
                      tool_behaviour={"c1": ["escalate", "ok", "ok"]})
    runtime = ReferenceRuntime(data_dir, world, RERUN)
    runtime.open_session(config(rules=(allow("Bash"),)))
    assert runtime.run_turn("s1", "install").status is TurnStatus.AWAITING_APPROVAL
    world.crash_at, world.crash_hit = "after_tool_returned", 2  # the unsandboxed run
    with pytest.raises(SimulatedCrash):
        runtime.answer_approval(world.prompts[0].wait_id, True)
    world.crash_at = ""
    restarted = ReferenceRuntime(data_dir, world, RERUN)
    restarted.recover()
    assert [inv.sandboxed for inv in world.ledger] == [True, False, False]
    restarted.close()


MARK_FAILED = RuntimePolicy(incomplete_calls_on_restart=RestartAction.MARK_FAILED)
NO_CLASSIFIER = RuntimePolicy(classifier=False)


def test_mark_failed_policy_records_an_interrupted_call_failed_and_resumes_the_turn(
        data_dir, impl):
    """OpenCode: a call running at a restart is marked failed, "Tool execution interrupted";
    it is not run again, and the resumed turn hands that result to the model."""
    world = FakeWorld(replies={"s1": [Reply("writing", (WRITE_CALL,)), Reply("done")]})
    runtime, report = _crash_and_restart(data_dir, world, config(rules=(allow("write_file"),)),
                                         "after_tool_returned", MARK_FAILED)
    assert world.executed("c1") == 1  # not re-run
    assert report.reconciliation_required == ()
    op = impl.inspect(data_dir).operation("c1")
    assert (op.outcome, op.reconciliation_required, op.execution_started) == (
        Outcome.FAILED, False, True)
    assert op.reason == "Tool execution interrupted"
    assert world.requests[-1].messages[-1].tool_call_id == "c1"  # the model saw it
    runtime.close()


@pytest.mark.parametrize("interactive", [True, False])
def test_without_a_classifier_an_auto_operation_takes_the_ask_path(data_dir, impl, interactive):
    world = FakeWorld(replies={"s1": [Reply("", (risky(1),)), Reply("done")]})
    runtime = ReferenceRuntime(data_dir, world, NO_CLASSIFIER)
    runtime.open_session(config(mode=Mode.AUTO, interactive=interactive))
    runtime.run_turn("s1", "write")
    assert world.reviews == []  # never asked
    op = impl.inspect(data_dir).operation("c1")
    assert world.executed("c1") == 0
    if interactive:
        assert [p.tool_call_id for p in world.prompts] == ["c1"]
    else:
        assert world.prompts == [] and op.outcome is Outcome.NOT_STARTED
    runtime.close()
