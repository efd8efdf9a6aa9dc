"""execution: the pipeline's steps, failpoints and events in order; three independent states
(X1); identity and duplicates (X2, L4.10); denials continue the loop (X3); start before the
tool (L4.6); results before checkpoints (L4.5); checkpoint and diagnostics failures (L4.4,
L4.7); one lifecycle for every entry point (X6)."""

from __future__ import annotations

import pytest

from harness.contract import (
    DecisionSource,
    Delivery,
    EventType,
    Failpoint,
    FailureKind,
    ModelRequestStatus,
    Outcome,
    Permission,
    TurnStatus,
    args_digest,
    execution_id_for,
)
from ref_fakes import STANDARD_TOOLS, FakeWorld, Reply, allow, ask, call, config, deny
from reference_impl.errors import RuntimeClosedError, UnknownSessionError

WRITE = call("c1", "write_file", path="/repo/a.txt", content="x")
OPERATION_FAILPOINTS = [
    "after_prepare", "after_permission_decision", "after_revalidation", "after_start_recorded",
    "after_tool_returned", "after_result_saved", "during_diagnostics_write",
    "during_checkpoint_build", "after_checkpoint_saved", "after_projection",
]


def _write_world(**kwargs):
    return FakeWorld(replies={"s1": [Reply("writing", (WRITE,))]}, **kwargs)


def test_an_allowed_write_goes_through_every_step_in_order(start, impl, data_dir):
    world = _write_world()
    result = start(world, config(rules=(allow("write_file"),))).run_turn("s1", "write")
    assert result == result.__class__("s1", TurnStatus.COMPLETED, "done.")
    op_points = [(name, ctx) for name, ctx in world.failpoints if "execution_id" in ctx]
    assert [name for name, _ in op_points] == OPERATION_FAILPOINTS
    execution_id = execution_id_for("s1", "c1")
    assert all(ctx == {"session_id": "s1", "execution_id": execution_id, "tool_call_id": "c1"}
               for _, ctx in op_points)
    assert world.hit_names()[:2] == ["before_model_request", "after_model_request_started"]
    types = world.event_types()
    for earlier, later in [("operation_prepared", "permission_decided"),
                           ("permission_decided", "execution_started"),
                           ("execution_started", "result_saved"),
                           ("result_saved", "checkpoint_saved"),
                           ("checkpoint_saved", "projected")]:
        assert types.index(earlier) < types.index(later)
    op = impl.inspect(data_dir).operation("c1")
    assert op.identity.args_digest == args_digest("write_file", WRITE.args)
    assert (op.permission, op.outcome, op.delivery) == (Permission.ALLOW, Outcome.SUCCEEDED,
                                                        Delivery.PROJECTED)
    saved = next(e for e in world.events if e.type is EventType.RESULT_SAVED)
    assert (saved.data["outcome"], saved.data["execution_started"]) == ("succeeded", True)
    assert saved.data["result_digest"] == op.result_digest


def test_the_start_is_durable_before_the_tool_runs(start, impl, data_dir):
    seen = []
    world = _write_world(execute_hook=lambda inv: seen.append(impl.inspect(data_dir).operation("c1")))
    start(world, config(rules=(allow("write_file"),))).run_turn("s1", "write")
    (at_execution,) = seen
    assert at_execution.execution_started and at_execution.delivery is Delivery.PENDING


def test_the_result_is_saved_before_the_checkpoint(start, impl, data_dir):
    seen = []
    world = _write_world(hooks={"during_checkpoint_build": lambda ctx: seen.append(impl.inspect(data_dir))})
    start(world, config(rules=(allow("write_file"),))).run_turn("s1", "write")
    (before_checkpoint,) = seen
    assert before_checkpoint.result_records == 1
    assert before_checkpoint.operation("c1").delivery is Delivery.RECORDED
    assert all(cp.last_execution_id != execution_id_for("s1", "c1") for cp in before_checkpoint.checkpoints)


def test_a_denial_is_not_a_failure_and_the_loop_goes_on(start, impl, data_dir):
    world = FakeWorld(replies={"s1": [Reply("", (call("c1", "write_file", path="/etc/passwd"),)),
                                      Reply("I could not write it.")]})
    result = start(world, config(rules=(deny("write_file"),))).run_turn("s1", "write")
    op = impl.inspect(data_dir).operation("c1")
    assert (op.permission, op.outcome, op.execution_started, op.failure_kind) == (
        Permission.DENY, Outcome.NOT_STARTED, False, FailureKind.PERMISSION_DENIED)
    assert len(world.requests) == 2
    tool_message = world.requests[1].messages[-1]
    assert (tool_message.role, tool_message.tool_call_id, tool_message.outcome) == (
        "tool", "c1", Outcome.NOT_STARTED)
    assert result.status is TurnStatus.COMPLETED and result.final_text == "I could not write it."


def test_one_call_delivered_twice_is_one_operation(start, impl, data_dir):
    world = FakeWorld(replies={"s1": [Reply("", (WRITE, WRITE)), Reply("", (WRITE,))]})
    start(world, config(rules=(allow("write_file"),))).run_turn("s1", "write")
    obs = impl.inspect(data_dir)
    assert len(obs.operations) == 1 and obs.result_records == 1
    assert world.executed("c1") == 1
    assert world.event_types().count("operation_prepared") == 1


def test_a_failing_checkpoint_build_keeps_the_result(start, impl, data_dir):
    world = FakeWorld(replies={"s1": [Reply("", (WRITE,)), Reply("ok, written.")]},
                      raise_at={"during_checkpoint_build": 1})
    result = start(world, config(rules=(allow("write_file"),))).run_turn("s1", "write")
    op = impl.inspect(data_dir).operation("c1")
    assert EventType.CHECKPOINT_FAILED.value in world.event_types()
    assert (op.outcome, op.delivery, op.reconciliation_required) == (
        Outcome.SUCCEEDED, Delivery.PROJECTED, False)
    assert world.requests[1].messages[-1].outcome is Outcome.SUCCEEDED  # the model still gets it
    assert result.status is TurnStatus.COMPLETED


def test_a_diagnostics_failure_is_a_runtime_fault_that_changes_no_result(start, impl, data_dir):
    world = _write_world(raise_at={"during_diagnostics_write": 1})
    start(world, config(rules=(allow("write_file"),))).run_turn("s1", "write")
    fault = next(e for e in world.events if e.type is EventType.RUNTIME_FAULT)
    assert fault.data["location"] == "during_diagnostics_write"
    op = impl.inspect(data_dir).operation("c1")
    assert (op.outcome, op.failure_kind, op.reconciliation_required) == (Outcome.SUCCEEDED, None, False)


def test_a_ui_failure_leaves_the_projection_to_be_replayed(start, impl, data_dir):
    world = _write_world(publish_error=True)
    runtime = start(world, config(rules=(allow("write_file"),)))
    runtime.run_turn("s1", "write")
    assert impl.inspect(data_dir).operation("c1").delivery is Delivery.RECORDED
    world.publish_error = False
    report = runtime.recover()
    assert report.projections_replayed == (execution_id_for("s1", "c1"),)
    assert impl.inspect(data_dir).operation("c1").delivery is Delivery.PROJECTED
    assert world.executed("c1") == 1


@pytest.mark.parametrize("hold_at", ["after_prepare", "after_permission_decision",
                                     "after_revalidation", "after_start_recorded",
                                     "after_tool_returned", "after_result_saved"])
def test_two_instances_delivering_one_call_execute_it_once(impl, data_dir, hold_at):
    world = FakeWorld(replies={"s1": [Reply("", (WRITE,)), Reply("", (WRITE,)), Reply("sent.")]})
    first = impl.open(data_dir, world)
    first.open_session(config(rules=(allow("write_file"),)))
    second_results = []

    def run_second_instance(_context):
        world.hooks.pop(hold_at)  # only the first hit holds instance A
        second = impl.open(data_dir, world)
        second_results.append(second.run_turn("s1", "send"))
        second.close()

    world.hooks[hold_at] = run_second_instance
    first.run_turn("s1", "send")
    first.close()
    obs = impl.inspect(data_dir)
    assert world.executed("c1") == 1
    assert obs.result_records == 1 and len(obs.operations) == 1
    assert obs.operation("c1").delivery is Delivery.PROJECTED
    if hold_at in ("after_start_recorded", "after_tool_returned"):
        assert second_results[0].status is TurnStatus.DEFERRED


@pytest.mark.parametrize("spec", STANDARD_TOOLS, ids=lambda s: s.kind.value)
def test_every_entry_point_uses_the_same_pipeline(start, impl, data_dir, spec):
    world = FakeWorld(replies={"s1": [Reply("", (call("c1", spec.name, target="x"),))]})
    start(world, config(rules=(ask(spec.name),))).run_turn("s1", "use it")
    assert world.executed("c1") == 0 and world.prompts[0].tool == spec.name
    assert impl.inspect(data_dir).operation("c1").permission is Permission.ASK


def test_update_rules_stores_the_callers_version(start, impl, data_dir):
    runtime = start(FakeWorld(), config())
    runtime.update_rules("s1", (allow("Bash"),), 7)
    assert impl.inspect(data_dir).sessions[0].permission_version == 7


@pytest.mark.parametrize("failpoint", ["after_prepare", "after_permission_decision",
                                       "after_revalidation", "after_start_recorded"])
def test_a_revocation_at_any_point_before_the_tool_stops_it(start, impl, data_dir, failpoint):
    world = _write_world()
    runtime = start(world, config(rules=(allow("write_file"),)))
    world.hooks[failpoint] = lambda _ctx: runtime.update_rules("s1", (deny("write_file"),), 2)
    runtime.run_turn("s1", "write")
    op = impl.inspect(data_dir).operation("c1")
    assert world.executed("c1") == 0
    assert (op.permission, op.decided_by, op.outcome, op.execution_started) == (
        Permission.DENY, DecisionSource.EXPLICIT_DENY, Outcome.NOT_STARTED, False)
    assert op.identity.permission_version == 2  # the decision that stands was taken under v2


def test_a_cancel_before_the_request_is_sent_ends_it_cancelled_unsent(start, impl, data_dir):
    world = _write_world()
    runtime = start(world, config(rules=(allow("write_file"),)))
    world.hooks["after_model_request_started"] = lambda _ctx: runtime.cancel("s1")
    assert runtime.run_turn("s1", "write").status is TurnStatus.CANCELLED
    (request,) = impl.inspect(data_dir).model_requests
    assert (request.status, request.end_events, world.requests) == (
        ModelRequestStatus.CANCELLED, 1, [])


def test_calls_emitted_before_a_cancel_are_recorded_as_cancelled(start, impl, data_dir):
    world = _write_world()
    runtime = start(world, config(rules=(allow("write_file"),)))
    world.hooks["after_model_stream_ended"] = lambda _ctx: runtime.cancel("s1")
    assert runtime.run_turn("s1", "write").status is TurnStatus.CANCELLED
    op = impl.inspect(data_dir).operation("c1")
    assert (op.decided_by, op.outcome, world.executed("c1")) == (
        DecisionSource.CANCELLATION, Outcome.NOT_STARTED, 0)


def test_a_new_turn_after_a_cancel_runs_normally(start, impl, data_dir):
    world = _write_world()
    runtime = start(world, config(rules=(allow("write_file"),)))
    runtime.cancel("s1")
    assert impl.inspect(data_dir).sessions[0].turn_status is TurnStatus.IDLE
    assert runtime.run_turn("s1", "write").status is TurnStatus.COMPLETED
    assert world.executed("c1") == 1


def test_unknown_sessions_and_closed_runtimes_are_errors(start, impl, data_dir):
    runtime = start(FakeWorld(), config())
    with pytest.raises(UnknownSessionError):
        runtime.run_turn("nope", "hi")
    runtime.close()
    with pytest.raises(RuntimeClosedError):
        runtime.run_turn("s1", "hi")


def test_opening_a_session_twice_keeps_its_state(start, impl, data_dir):
    runtime = start(FakeWorld(), config())
    runtime.update_rules("s1", (allow("Bash"),), 2)
    runtime.open_session(config())
    assert impl.inspect(data_dir).sessions[0].permission_version == 2


def test_failpoints_are_called_outside_transactions(impl, data_dir):
    """At every failpoint a second connection can write: no transaction is held there."""
    from reference_impl.store import Store

    probe = Store.open(data_dir)
    checked = []

    def try_write(context):
        with probe.transaction() as conn:
            conn.execute("SELECT 1")
        checked.append(context)

    world = _write_world()
    world.hooks = {name: try_write for name in [f.value for f in Failpoint]}
    runtime = impl.open(data_dir, world)
    runtime.open_session(config(rules=(allow("write_file"),)))
    runtime.run_turn("s1", "write")
    runtime.close()
    probe.close()
    assert len(checked) == len(world.failpoints) >= 12


@pytest.mark.parametrize("failpoint", [f for f in OPERATION_FAILPOINTS if f != "during_checkpoint_build"]
                         + ["before_model_request", "after_model_request_started",
                            "after_model_stream_ended"])
def test_an_ordinary_fault_at_a_lifecycle_point_is_reported_and_the_lifecycle_goes_on(
        start, impl, data_dir, failpoint):
    world = _write_world(raise_at={failpoint: 1})
    result = start(world, config(rules=(allow("write_file"),))).run_turn("s1", "write")
    faults = [e for e in world.events if e.type is EventType.RUNTIME_FAULT]
    assert [f.data["location"] for f in faults] == [failpoint]
    op = impl.inspect(data_dir).operation("c1")
    assert (op.outcome, op.delivery, world.executed("c1")) == (Outcome.SUCCEEDED, Delivery.PROJECTED, 1)
    assert result.status is TurnStatus.COMPLETED


def test_a_held_instance_never_rewrites_a_record_another_instance_settled(impl, data_dir):
    world = FakeWorld(replies={"s1": [Reply("", (WRITE,)), Reply("", (WRITE,)), Reply("sent.")]})
    first = impl.open(data_dir, world)
    first.open_session(config(rules=(allow("write_file"),)))

    def second_instance(_context):
        world.hooks.clear()
        second = impl.open(data_dir, world)
        world.hooks["after_tool_returned"] = lambda _ctx: second.update_rules(
            "s1", (allow("write_file"),), 2)
        second.run_turn("s1", "send")
        second.close()

    world.hooks["after_revalidation"] = second_instance
    first.run_turn("s1", "send")
    first.close()
    op = impl.inspect(data_dir).operation("c1")
    assert world.executed("c1") == 1
    assert op.identity.permission_version == world.ledger[0].identity.permission_version == 1
