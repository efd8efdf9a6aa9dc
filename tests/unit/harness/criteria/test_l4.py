"""L4 criteria on hand-built traces: pass, fail (evidence at the right index), not_exercised."""

from __future__ import annotations

import pytest

from harness.contract import (
    CheckpointView,
    Delivery,
    FailureKind,
    Feature,
    Message,
    Observation,
    OperationView,
    Outcome,
    Permission,
    Rule,
    RuleEffect,
    SessionConfig,
    ToolCall,
    TurnStatus,
    result_digest,
)
from harness.criteria import l4
from harness.criteria.base import Status, run_check

try:
    from .lbuilder import (TB, USER, assistant, denied, op, projection_of, request_view, session_view,
                           tool_msg, xid)
except ImportError:  # collected without a package
    from lbuilder import (TB, USER, assistant, denied, op, projection_of, request_view, session_view,
                          tool_msg, xid)

BY_ID = {c.id: c for c in l4.CRITERIA}
S1 = SessionConfig("s1", rules=(Rule(RuleEffect.ALLOW, "write_file"),))
W = ToolCall("c1", "write_file", {"path": "/repo/a", "content": "x"})
CTX = {"session_id": "s1", "tool_call_id": "c1", "execution_id": xid("c1")}


def check(cid, trace):
    return run_check(BY_ID[cid], trace)


def assert_fail_at(verdict, index):
    assert verdict.status is Status.FAIL, verdict
    assert any(index in e.trace_indexes for e in verdict.evidence), verdict.evidence


def assert_pass(verdict, exercised=1):
    assert verdict.status is Status.PASS, verdict
    assert verdict.exercised == exercised, verdict


def test_catalogue_ids_and_stage():
    assert [c.id for c in l4.CRITERIA] == [f"L4.{i}" for i in range(1, 11)]
    assert {c.stage for c in l4.CRITERIA} == {"l4"}


SAVED = op(W, delivery=Delivery.RECORDED)
IN_FLIGHT = op(W, outcome=Outcome.NOT_STARTED, delivery=Delivery.PENDING, started=True, digest=None)


def _hit(tb, failpoint, action="none", context=CTX, *views, checkpoints=(), instance=None):
    """A failpoint hit and the store read while the world handled it."""
    index = tb.add("failpoint", {"name": failpoint, "context": dict(context or {}), "hit": 1, "action": action,
                                 "params": {}}, instance=instance)
    if views or checkpoints:
        tb.observe(f"probe:failpoint:{failpoint}", Observation(operations=views, checkpoints=checkpoints))
    return index


def _crash(tb, failpoint, context=CTX, *views, checkpoints=()):
    _hit(tb, failpoint, "crash", context, *views, checkpoints=checkpoints)
    index = tb.crash(failpoint)
    tb.restart()
    tb.call("recover")
    return index


def _idle(tb):
    tb.respond("s1")
    tb.executed("s1", ToolCall("r0", "read_file", {"path": "/x"}))


# --------------------------------------------------------------------------- L4.1


def _saved_then_crash(tb, again=False, carry=True):
    tb.respond("s1", (W,))
    tb.executed("s1", W, output="wrote a")
    crash = _crash(tb, "after_result_saved", CTX, op(W, output="wrote a", delivery=Delivery.RECORDED))
    row = tb.executed("s1", W, output="wrote a") if again else None
    content = "wrote a" if carry else ""
    messages = (USER, assistant((W,)), tool_msg(W, Outcome.SUCCEEDED, content)) if carry else (USER, assistant((W,)))
    request = tb.request("s1", messages)
    tb.stream_end(request, text="done")
    tb.ret("recover")
    tb.observe("after_restart", Observation(operations=(op(W, output="wrote a"),)))
    return crash, row, len(tb.events) - 4


def test_l4_1_passes_when_the_saved_result_is_reused():
    tb = TB(S1)
    _saved_then_crash(tb)
    assert_pass(check("L4.1", tb.build()))


def test_l4_1_fails_when_the_write_runs_again():
    tb = TB(S1)
    _, row, _ = _saved_then_crash(tb, again=True)
    assert_fail_at(check("L4.1", tb.build()), row)


def test_l4_1_fails_when_the_continuation_drops_the_result():
    tb = TB(S1)
    _saved_then_crash(tb, carry=False)
    trace = tb.build()
    request = next(e.index for e in trace.events if e.kind == "model_request" and e.index > 3)
    assert_fail_at(check("L4.1", trace), request)


def test_l4_1_not_exercised_without_that_crash():
    tb = TB(S1)
    tb.respond("s1", (W,))
    tb.executed("s1", W)
    assert check("L4.1", tb.build()).status is Status.NOT_EXERCISED


# --------------------------------------------------------------------------- L4.2


def _checkpoint_then_crash(tb, resend=False, replay=True):
    first = tb.request("s1", (USER,))
    tb.stream_end(first, calls=(W,))
    tb.executed("s1", W)
    crash = _crash(tb, "after_checkpoint_saved", CTX, SAVED, checkpoints=(CheckpointView("s1", 2, 1, 0, 100, xid("c1")),))
    again = None
    if resend:
        again = len(tb.events)
        tb.stream_end(tb.request("s1", (USER,)), calls=(W,))
    if replay:
        tb.publish(projection_of(op(W)))
    tb.ret("recover")
    return crash, again


def test_l4_2_passes_when_only_the_projection_is_replayed():
    tb = TB(S1)
    _checkpoint_then_crash(tb)
    assert_pass(check("L4.2", tb.build()))


def test_l4_2_fails_when_recovery_resends_the_model_request():
    tb = TB(S1)
    _, again = _checkpoint_then_crash(tb, resend=True)
    assert_fail_at(check("L4.2", tb.build()), again)


def test_l4_2_fails_when_the_projection_is_not_replayed():
    tb = TB(S1)
    crash, _ = _checkpoint_then_crash(tb, replay=False)
    assert_fail_at(check("L4.2", tb.build()), crash)


def test_l4_2_not_exercised_without_that_crash():
    tb = TB(S1)
    _idle(tb)
    assert check("L4.2", tb.build()).status is Status.NOT_EXERCISED


# --------------------------------------------------------------------------- L4.3


def _start_then_crash(tb, after_view, failpoint="after_start_recorded", execute=False, again=False):
    tb.respond("s1", (W,))
    if execute:
        tb.executed("s1", W)
    crash = _crash(tb, failpoint, CTX, IN_FLIGHT)
    row = tb.executed("s1", W) if again else None
    tb.ret("recover")
    point = tb.observe("after_restart", Observation(operations=(after_view,)))
    return crash, row, point


UNKNOWN = op(W, outcome=Outcome.UNKNOWN, reconcile=True, started=True, digest=None)


def test_l4_3_passes_when_the_operation_is_left_for_reconciliation():
    tb = TB(S1)
    _start_then_crash(tb, UNKNOWN)
    assert_pass(check("L4.3", tb.build()))


def test_l4_3_passes_after_tool_returned():
    tb = TB(S1)
    _start_then_crash(tb, UNKNOWN, "after_tool_returned", execute=True)
    assert_pass(check("L4.3", tb.build()))


def test_l4_3_fails_when_restart_forgets_the_start():
    tb = TB(S1)
    _, _, point = _start_then_crash(tb, op(W, outcome=Outcome.NOT_STARTED, delivery=Delivery.PENDING))
    assert_fail_at(check("L4.3", tb.build()), point)


def test_l4_3_fails_when_restart_re_executes():
    tb = TB(S1)
    _, row, _ = _start_then_crash(tb, UNKNOWN, again=True)
    assert_fail_at(check("L4.3", tb.build()), row)


def test_l4_3_not_exercised_without_that_crash():
    tb = TB(S1)
    _idle(tb)
    assert check("L4.3", tb.build()).status is Status.NOT_EXERCISED


# --------------------------------------------------------------------------- L4.4


def _checkpoint_fails(tb, view):
    tb.respond("s1", (W,))
    tb.executed("s1", W)
    fp = _hit(tb, "during_checkpoint_build", "raise", CTX, SAVED)
    tb.respond("s1", messages=(USER, assistant((W,)), tool_msg(W, Outcome.SUCCEEDED)))
    point = tb.observe("quiescent", Observation(operations=(view,)))
    return fp, point


def test_l4_4_passes_when_the_result_is_kept():
    tb = TB(S1)
    _checkpoint_fails(tb, op(W, delivery=Delivery.RECORDED))
    assert_pass(check("L4.4", tb.build()))


def test_l4_4_fails_when_the_operation_goes_to_reconciliation():
    tb = TB(S1)
    _, point = _checkpoint_fails(tb, op(W, outcome=Outcome.UNKNOWN, reconcile=True, delivery=Delivery.PENDING))
    assert_fail_at(check("L4.4", tb.build()), point)


def test_l4_4_not_exercised_without_a_checkpoint_failure():
    tb = TB(S1)
    _idle(tb)
    assert check("L4.4", tb.build()).status is Status.NOT_EXERCISED


# --------------------------------------------------------------------------- L4.5


def _checkpoint_probe(tb, views, call=W, execute=True, sequence=1):
    tb.respond("s1", (call,))
    if execute:
        tb.executed("s1", call)
    tb.failpoint("after_checkpoint_saved", context={"session_id": "s1", "tool_call_id": call.tool_call_id})
    return tb.observe("probe:failpoint:after_checkpoint_saved", Observation(
        operations=views, checkpoints=(CheckpointView("s1", 2, sequence, 0, 100, xid(call.tool_call_id)),)))


def test_l4_5_passes_when_results_precede_the_checkpoint():
    tb = TB(S1)
    _checkpoint_probe(tb, (op(W, delivery=Delivery.RECORDED),))
    denial = ToolCall("c2", "write_file", {"path": "/etc/x", "content": "y"})
    _checkpoint_probe(tb, (op(W), denied(denial, delivery=Delivery.RECORDED)), call=denial, execute=False, sequence=2)
    assert_pass(check("L4.5", tb.build()), exercised=2)


def test_l4_5_fails_when_the_checkpoint_precedes_the_result():
    tb = TB(S1)
    point = _checkpoint_probe(tb, (op(W, outcome=Outcome.NOT_STARTED, delivery=Delivery.PENDING, started=True),))
    assert_fail_at(check("L4.5", tb.build()), point)


def test_l4_5_not_exercised_without_a_fresh_checkpoint_or_a_named_operation():
    tb = TB(S1)
    _checkpoint_probe(tb, (op(W, delivery=Delivery.RECORDED),))
    # the same checkpoint again: nothing new was saved at this hit
    tb.failpoint("after_checkpoint_saved", context=CTX)
    tb.observe("probe:failpoint:after_checkpoint_saved", Observation(
        operations=(op(W, outcome=Outcome.NOT_STARTED, delivery=Delivery.PENDING, started=True),),
        checkpoints=(CheckpointView("s1", 2, 1, 0, 100, xid("c1")),)))
    # a fresh checkpoint, but the hit names no operation
    tb.failpoint("after_checkpoint_saved", context={"session_id": "s1"})
    tb.observe("probe:failpoint:after_checkpoint_saved", Observation(
        operations=(op(W, outcome=Outcome.NOT_STARTED, delivery=Delivery.PENDING, started=True),),
        checkpoints=(CheckpointView("s1", 2, 2, 0, 100, xid("c1")),)))
    assert_pass(check("L4.5", tb.build()), exercised=1)


def test_l4_5_not_exercised_without_probes():
    tb = TB(S1)
    _idle(tb)
    assert check("L4.5", tb.build()).status is Status.NOT_EXERCISED


# --------------------------------------------------------------------------- L4.6


def _probe_at_execution(tb, started):
    tb.respond("s1", (W,))
    row = tb.executed("s1", W)
    tb.observe("probe:tool_executed", Observation(operations=(
        op(W, outcome=Outcome.NOT_STARTED, delivery=Delivery.PENDING, started=started, digest=None),)))
    return row


def test_l4_6_passes_when_the_start_is_durable_first():
    tb = TB(S1)
    _probe_at_execution(tb, True)
    assert_pass(check("L4.6", tb.build()))


def test_l4_6_fails_when_the_tool_runs_before_the_start_record():
    tb = TB(S1)
    row = _probe_at_execution(tb, False)
    verdict = check("L4.6", tb.build())
    assert_fail_at(verdict, row)
    assert verdict.evidence[0].ledger_rows == (1,)


def test_l4_6_not_exercised_without_probes():
    tb = TB(S1)
    _idle(tb)
    assert check("L4.6", tb.build()).status is Status.NOT_EXERCISED


# --------------------------------------------------------------------------- L4.7


def test_l4_7_passes_when_the_record_binds_the_executed_result():
    tb = TB(S1)
    tb.respond("s1", (W,))
    tb.executed("s1", W, output="wrote")
    _hit(tb, "during_diagnostics_write", "raise", CTX, op(W, output="wrote", delivery=Delivery.RECORDED))
    tb.observe("final", Observation(operations=(op(W, output="wrote"),)))
    assert_pass(check("L4.7", tb.build()), exercised=2)


def test_l4_7_fails_when_the_digest_is_not_the_executed_result():
    tb = TB(S1)
    tb.respond("s1", (W,))
    tb.executed("s1", W, output="wrote")
    point = tb.observe("final", Observation(operations=(op(W, output="something else"),)))
    assert_fail_at(check("L4.7", tb.build()), point)


def test_l4_7_fails_when_a_diagnostics_failure_damages_the_record():
    tb = TB(S1)
    tb.respond("s1", (W,))
    tb.executed("s1", W)
    fp = _hit(tb, "during_diagnostics_write", "raise", CTX, SAVED)
    tb.observe("quiescent", Observation(operations=(UNKNOWN,)))
    assert_fail_at(check("L4.7", tb.build()), fp)


def _unknown_answer_then_diagnostics_failure(kept: OperationView):
    """The tool answers "unknown" (its effect could not be confirmed); the diagnostics
    write after the saved result fails (chaos regression l1-failure-classes, seed 3)."""
    tb = TB(S1)
    tb.respond("s1", (W,))
    tb.executed("s1", W, status="error", output="lost", error_kind="unknown")
    fp = tb.failpoint("during_diagnostics_write", "crash", dict(CTX))
    tb.observe("final", Observation(operations=(kept,)))
    return tb.build(), fp


def test_l4_7_passes_when_an_unknown_tool_answer_stays_unknown():
    kept = op(W, outcome=Outcome.UNKNOWN, reconcile=True, started=True, digest=result_digest("error", "lost"),
              failure_kind=FailureKind.UNKNOWN)
    trace, _ = _unknown_answer_then_diagnostics_failure(kept)
    # not judged a violation (whether it also counts as L4.7's hard case is the
    # exercised rule's business: the diagnostics failure must hit a saved result)
    assert check("L4.7", trace).status in (Status.PASS, Status.NOT_EXERCISED)


def test_l4_7_fails_when_an_unknown_tool_answer_is_kept_as_failed():
    kept = op(W, outcome=Outcome.FAILED, started=True, status="error", output="lost",
              failure_kind=FailureKind.FAILED)
    trace, fp = _unknown_answer_then_diagnostics_failure(kept)
    assert_fail_at(check("L4.7", trace), fp)


def test_l4_7_not_exercised_without_executions():
    tb = TB(S1)
    tb.respond("s1")
    tb.observe("final", Observation())
    assert check("L4.7", tb.build()).status is Status.NOT_EXERCISED


# --------------------------------------------------------------------------- L4.8


def _repair(tb, view, answered=True):
    tb.call("run_turn", session_id="s1", user_text="go")
    tb.respond("s1", (W,))
    tb.executed("s1", W, output="not executed")
    tb.failpoint("after_result_saved", "crash")
    tb.crash("after_result_saved")
    tb.restart()
    tb.call("recover")
    if answered:
        tb.respond("s1", text="done", messages=(USER, assistant((W,)), tool_msg(W, Outcome.SUCCEEDED)))
    ended = tb.emit("turn_ended", status="completed")
    tb.ret("recover")
    point = tb.observe("after_restart", Observation(
        sessions=(session_view(status=TurnStatus.COMPLETED),), operations=(view,)))
    return ended, point


def test_l4_8_passes_when_repair_trusts_the_ledger_and_the_model():
    tb = TB(S1)
    _repair(tb, op(W, output="not executed"))
    assert_pass(check("L4.8", tb.build()), exercised=2)


def test_l4_8_fails_when_tool_text_flips_the_operation_to_not_started():
    tb = TB(S1)
    _, point = _repair(tb, op(W, outcome=Outcome.NOT_STARTED, started=False))
    assert_fail_at(check("L4.8", tb.build()), point)


def test_l4_8_fails_when_recovery_alone_completes_the_turn():
    tb = TB(S1)
    ended, point = _repair(tb, op(W, output="not executed"), answered=False)
    verdict = check("L4.8", tb.build())
    assert_fail_at(verdict, ended)
    assert_fail_at(verdict, point)


def test_l4_8_fails_when_recovery_completes_the_turn_after_the_instance_is_reopened():
    # as the runner does it: the new instance is opened before recover() is called
    tb = TB(S1)
    tb.call("run_turn", session_id="s1", user_text="go")
    tb.respond("s1", (W,))
    tb.executed("s1", W)
    tb.failpoint("after_result_saved", "crash")
    tb.crash("after_result_saved")
    tb.restart()
    tb.call("open")
    tb.ret("open")
    tb.call("recover")
    ended = tb.emit("turn_ended", status="completed")
    tb.ret("recover")
    point = tb.observe("after_restart", Observation(
        sessions=(session_view(status=TurnStatus.COMPLETED),), operations=(op(W),)))
    verdict = check("L4.8", tb.build())
    assert_fail_at(verdict, ended)
    assert_fail_at(verdict, point)


def _superseded_turn(tb, b_turn_status):
    """Instance A of a concurrent turn waits; instance B runs the same session's turn and ends
    it ``b_turn_status``; then A crashes and the restarted instance recovers."""
    tb.call("concurrent_turn", session_id="s1", user_text="go", role="A", hold_at="after_prepare")
    tb.respond("s1", (W,))
    a = tb.instance
    tb.instance = a + 100
    tb.call("concurrent_turn", session_id="s1", user_text="go", role="B", held=True)
    tb.executed("s1", W)
    if b_turn_status == "completed":
        tb.respond("s1", text="sent", messages=(USER, assistant((W,)), tool_msg(W, Outcome.SUCCEEDED)))
    tb.emit("turn_ended", status=b_turn_status)
    tb.ret("concurrent_turn")
    tb.instance = a
    tb.failpoint("after_permission_decision", "crash")
    tb.crash("after_permission_decision")
    tb.restart()
    tb.call("recover")
    tb.ret("recover")
    return tb.observe("after_restart", Observation(
        sessions=(session_view(status=TurnStatus.COMPLETED),), operations=(op(W),)))


def test_l4_8_passes_when_another_instance_completed_the_turn_before_the_crash():
    # found by the crash sweep: B gave the final answer and ended the turn while A waited;
    # recovery finding the session completed did not mark it so
    tb = TB(S1)
    _superseded_turn(tb, "completed")
    verdict = check("L4.8", tb.build())
    assert verdict.status is Status.PASS, verdict


def test_l4_8_fails_when_the_other_instance_had_not_completed_the_turn():
    tb = TB(S1)
    point = _superseded_turn(tb, "awaiting_approval")
    assert_fail_at(check("L4.8", tb.build()), point)


# A turn call cut before its first commit (docs/contract.md, "A turn call cut before its first
# commit"): lost whole when the world saw nothing of it and the store reads as before it.

NEXT = Message("user", "next")
DONE_STORE = Observation(sessions=(session_view(status=TurnStatus.COMPLETED),),
                         model_requests=(request_view("r1"),))


def _cut_before_first_commit(tb, during=None, crash_at="before_model_request", after=DONE_STORE,
                             recovery=None):
    """Turn "go" completes; turn "next" is cut by a crash at ``crash_at``, after ``during``
    (what the cut call did first, if anything); the restarted instance recovers (doing
    ``recovery``, if anything) and the store reads ``after``. Returns the index of that
    reading."""
    tb.call("run_turn", session_id="s1", user_text="go")
    tb.respond("s1", text="done", messages=(USER,))
    tb.emit("turn_ended", status="completed")
    tb.ret("run_turn", {"session_id": "s1", "status": "completed", "final_text": "done"})
    tb.observe("quiescent", DONE_STORE)
    tb.call("run_turn", session_id="s1", user_text="next")
    if during is not None:
        during(tb)
    tb.failpoint(crash_at, "crash", {"session_id": "s1"})
    tb.crash(crash_at)
    tb.restart()
    tb.call("open")
    tb.ret("open")
    tb.call("recover")
    if recovery is not None:
        recovery(tb)
    tb.ret("recover")
    return tb.observe("after_restart", after)


def test_l4_8_passes_when_a_turn_call_cut_before_its_first_commit_is_lost_whole():
    tb = TB(S1)
    _cut_before_first_commit(tb)
    assert_pass(check("L4.8", tb.build()), exercised=1)


def test_l4_8_passes_when_the_caller_sends_the_lost_turn_again():
    tb = TB(S1)
    _cut_before_first_commit(tb)
    tb.call("run_turn", session_id="s1", user_text="next")
    tb.respond("s1", text="ok", messages=(USER, assistant(content="done"), NEXT))
    tb.ret("run_turn", {"session_id": "s1", "status": "completed", "final_text": "ok"})
    assert check("L4.8", tb.build()).status is Status.PASS


_EFFECTS = {
    "model request sent": lambda tb: tb.respond("s1", (W,), messages=(USER, assistant(content="done"), NEXT)),
    "ledger row": lambda tb: tb.executed("s1", W),
    "prompt shown": lambda tb: tb.prompt("s1", W),
    "projection published": lambda tb: tb.publish(projection_of(op(W))),
    "classifier call": lambda tb: tb.review("s1", "write_file", dict(W.args), "allow"),
    "lifecycle event": lambda tb: tb.emit("operation_prepared", "s1", xid("c1")),
}


@pytest.mark.parametrize("effect", sorted(_EFFECTS))
def test_l4_8_fails_when_the_cut_turn_did_something_visible_and_shows_the_previous_turn_completed(effect):
    tb = TB(S1)
    point = _cut_before_first_commit(tb, during=_EFFECTS[effect], crash_at="after_prepare")
    assert_fail_at(check("L4.8", tb.build()), point)


def test_l4_8_fails_when_the_store_after_recovery_differs_from_before_the_cut_call():
    # something of the turn was committed (here a request's start) yet the session reads
    # completed: not a call lost whole
    tb = TB(S1)
    changed = Observation(sessions=(session_view(status=TurnStatus.COMPLETED),),
                          model_requests=(request_view("r1"), request_view("s1:req-2")))
    point = _cut_before_first_commit(tb, after=changed)
    assert_fail_at(check("L4.8", tb.build()), point)


def test_l4_8_fails_when_the_cut_turn_s_message_survived_in_the_conversation():
    # the store reading equals the one before, but the next request shows the message was
    # kept: a turn started (its message durable) and shown completed without an answer
    tb = TB(S1)
    point = _cut_before_first_commit(tb)
    tb.call("run_turn", session_id="s1", user_text="again")
    tb.respond("s1", text="ok", messages=(USER, assistant(content="done"), NEXT, Message("user", "again")))
    tb.ret("run_turn", {"session_id": "s1", "status": "completed", "final_text": "ok"})
    assert_fail_at(check("L4.8", tb.build()), point)


def test_l4_8_fails_when_recovery_emits_a_completed_end_for_a_turn_lost_whole():
    tb = TB(S1)
    ended = []
    _cut_before_first_commit(tb, recovery=lambda tb: ended.append(tb.emit("turn_ended", status="completed")))
    assert_fail_at(check("L4.8", tb.build()), ended[0])


def test_l4_8_not_exercised_without_restarts():
    tb = TB(S1)
    _idle(tb)
    assert check("L4.8", tb.build()).status is Status.NOT_EXERCISED


# --------------------------------------------------------------------------- L4.9


def _unconfirmed(tb, view, published=Outcome.UNKNOWN):
    tb.respond("s1", (W,))
    tb.executed("s1", W)
    _crash(tb, "after_tool_returned", CTX, IN_FLIGHT)
    publish = tb.publish(projection_of(view, outcome=published))
    tb.ret("recover")
    point = tb.observe("after_restart", Observation(operations=(view,)))
    return publish, point


def test_l4_9_passes_when_everything_reports_unknown():
    tb = TB(S1)
    _unconfirmed(tb, UNKNOWN)
    assert_pass(check("L4.9", tb.build()))


def test_l4_9_fails_when_an_unconfirmed_effect_is_reported_succeeded():
    tb = TB(S1)
    publish, point = _unconfirmed(tb, op(W), published=Outcome.SUCCEEDED)
    verdict = check("L4.9", tb.build())
    assert_fail_at(verdict, publish)
    assert_fail_at(verdict, point)


def test_l4_9_not_exercised_without_unconfirmed_operations():
    tb = TB(S1)
    _idle(tb)
    assert check("L4.9", tb.build()).status is Status.NOT_EXERCISED


# --------------------------------------------------------------------------- L4.10


def _driver(tb, kind, instance, method, **data):
    return tb.add(kind, {"method": method, **data}, source="harness", instance=instance)


def _concurrent(tb, twice=False, records=1, hold_at="after_revalidation", engaged=True, b_reaches=True,
                held_view=IN_FLIGHT, hold_context=CTX):
    """A concurrent_turn as the runner records it: A (instance 1) is held, B (instance 2)
    runs the same turn, then A is released."""
    args = {"session_id": "s1", "user_text": "go", "hold_at": hold_at}
    _driver(tb, "driver_call", 1, "concurrent_turn", args={**args, "role": "A"})
    tb.respond("s1", (W,), instance=1)
    _hit(tb, hold_at, "hold" if engaged else "none", hold_context, held_view, instance=1)
    _driver(tb, "driver_call", 2, "concurrent_turn", args={**args, "role": "B", "held": engaged})
    if b_reaches:
        tb.respond("s1", (W,), instance=2)
        _hit(tb, "after_revalidation", "none", CTX, instance=2)
        tb.executed("s1", W, instance=2)
    else:
        tb.respond("s1", instance=2)
    _driver(tb, "driver_return", 2, "concurrent_turn", result=None)
    row = tb.executed("s1", W, instance=1) if twice else None
    _driver(tb, "driver_return", 1, "concurrent_turn", result=None)
    point = tb.observe("quiescent", Observation(operations=(op(W),), result_records=records))
    return row, point


def test_l4_10_passes_when_one_instance_executes():
    tb = TB(S1)
    _concurrent(tb)
    assert_pass(check("L4.10", tb.build()))


def test_l4_10_fails_when_both_instances_execute():
    tb = TB(S1)
    row, _ = _concurrent(tb, twice=True)
    verdict = check("L4.10", tb.build())
    assert_fail_at(verdict, row)
    assert verdict.evidence[0].ledger_rows == (1, 2)


def test_l4_10_fails_on_two_result_records():
    tb = TB(S1)
    _, point = _concurrent(tb, records=2)
    assert_fail_at(check("L4.10", tb.build()), point)


def test_l4_10_not_exercised_when_the_hold_never_engaged():
    tb = TB(S1)
    _concurrent(tb, engaged=False)
    verdict = check("L4.10", tb.build())
    assert verdict.status is Status.NOT_EXERCISED, verdict


def test_l4_10_a_duplicate_without_an_engaged_hold_still_fails():
    tb = TB(S1)
    row, _ = _concurrent(tb, twice=True, engaged=False)
    assert_fail_at(check("L4.10", tb.build()), row)


def test_l4_10_not_exercised_when_a_was_held_before_reaching_the_operation():
    tb = TB(S1)
    _concurrent(tb, hold_at="before_model_request", hold_context={"session_id": "s1"})
    assert check("L4.10", tb.build()).status is Status.NOT_EXERCISED


def test_l4_10_not_exercised_when_a_was_held_after_the_result_was_saved():
    tb = TB(S1)
    _concurrent(tb, hold_at="after_result_saved", held_view=SAVED)
    assert check("L4.10", tb.build()).status is Status.NOT_EXERCISED


def test_l4_10_not_exercised_when_b_never_reached_the_operation():
    tb = TB(S1)
    _concurrent(tb, b_reaches=False)
    assert check("L4.10", tb.build()).status is Status.NOT_EXERCISED


def test_l4_10_not_exercised_without_concurrent_turns():
    tb = TB(S1)
    _idle(tb)
    assert check("L4.10", tb.build()).status is Status.NOT_EXERCISED


def test_l4_10_not_applicable_for_single_instance_implementations():
    # multi_instance undeclared, and the second open refused (the documented way): A runs
    # the turn alone and L4.10 has nothing to judge
    tb = TB(S1, features=(Feature.APPROVALS,))
    args = {"session_id": "s1", "user_text": "go", "hold_at": "after_revalidation"}
    _driver(tb, "driver_call", 1, "concurrent_turn", args={**args, "role": "A"})
    tb.respond("s1", (W,), instance=1)
    _hit(tb, "after_revalidation", "hold", CTX, IN_FLIGHT, instance=1)
    _driver(tb, "driver_call", 2, "open", args={}, concurrent_with=1)
    _driver(tb, "driver_raised", 2, "open", exception="RuntimeError", refused=True,
            message="another live instance holds <data_dir>", expected=False)
    tb.executed("s1", W, instance=1)
    _driver(tb, "driver_return", 1, "concurrent_turn", result=None)
    tb.observe("quiescent", Observation(operations=(op(W),), result_records=1))
    verdict = check("L4.10", tb.build())
    assert verdict.status is Status.NOT_APPLICABLE
    assert "neither declares multi_instance nor showed it" in verdict.evidence[0].note


def test_l4_10_judges_a_second_instance_opened_without_declaring_multi_instance():
    # B opened and took the turn: the behaviour shows multi_instance, so the duplicate it
    # executed is judged although nothing was declared
    tb = TB(S1, features=(Feature.APPROVALS,))
    row, _ = _concurrent(tb, twice=True)
    assert_fail_at(check("L4.10", tb.build()), row)
    tb = TB(S1, features=())
    _concurrent(tb)
    assert_pass(check("L4.10", tb.build()))


def test_l4_9_an_unrecovered_in_flight_record_claims_nothing():
    tb = TB(S1)
    tb.respond("s1", (W,))
    tb.failpoint("after_start_recorded", "crash", CTX)
    tb.crash("after_start_recorded")
    tb.observe("final", Observation(operations=(
        op(W, outcome=Outcome.NOT_STARTED, delivery=Delivery.PENDING, started=True, digest=None),)))
    assert check("L4.9", tb.build()).status is Status.NOT_EXERCISED


# --------------------------------------------------------------------------- the hard case happened


R = ToolCall("c2", "read_file", {"path": "/repo/b"})
CTX2 = {"session_id": "s1", "tool_call_id": "c2", "execution_id": xid("c2")}


def test_l4_1_not_exercised_when_the_crash_names_another_operation():
    tb = TB(S1)
    tb.respond("s1", (W,))
    tb.executed("s1", W)
    _crash(tb, "after_result_saved", CTX2, SAVED)
    tb.ret("recover")
    assert check("L4.1", tb.build()).status is Status.NOT_EXERCISED


def test_l4_1_not_exercised_when_the_store_holds_no_saved_result_there():
    # the failpoint was called before the result was saved: the crash did not hit that point
    tb = TB(S1)
    tb.respond("s1", (W,))
    tb.executed("s1", W)
    _crash(tb, "after_result_saved", CTX, op(W, outcome=Outcome.NOT_STARTED, delivery=Delivery.PENDING,
                                             started=True, digest=None))
    tb.ret("recover")
    assert check("L4.1", tb.build()).status is Status.NOT_EXERCISED


def test_l4_1_not_exercised_without_a_context_naming_the_operation():
    tb = TB(S1)
    tb.respond("s1", (W,))
    tb.executed("s1", W)
    _crash(tb, "after_result_saved", {"session_id": "s1"}, SAVED)
    tb.ret("recover")
    assert check("L4.1", tb.build()).status is Status.NOT_EXERCISED


def test_l4_1_fails_when_a_read_tool_runs_again_after_its_saved_result():
    tb = TB(S1)
    tb.respond("s1", (R,))
    tb.executed("s1", R, output="bee")
    _crash(tb, "after_result_saved", CTX2, op(R, output="bee", delivery=Delivery.RECORDED))
    row = tb.executed("s1", R, output="bee")
    tb.ret("recover")
    verdict = check("L4.1", tb.build())
    assert_fail_at(verdict, row)
    assert "called again" in verdict.evidence[0].note


def test_l4_1_fails_when_any_crash_is_followed_by_a_repeat_of_a_saved_result():
    # the crash hit another point; the read's result had been saved before it
    tb = TB(S1)
    tb.respond("s1", (R,))
    tb.executed("s1", R, output="bee")
    tb.observe("quiescent", Observation(operations=(op(R, output="bee"),)))
    tb.respond("s1", (W,))
    _crash(tb, "after_start_recorded", CTX, IN_FLIGHT)
    row = tb.executed("s1", R, output="bee")
    tb.ret("recover")
    assert_fail_at(check("L4.1", tb.build()), row)


def test_l4_1_an_approved_escalation_may_run_again():
    tb = TB(S1)
    tb.respond("s1", (R,))
    tb.executed("s1", R, status="error", error_kind="failed", escalation=True)
    tb.observe("quiescent", Observation(operations=(op(R, outcome=Outcome.FAILED, delivery=Delivery.RECORDED,
                                                       status="error"),)))
    _crash(tb, "after_prompt", CTX2)
    tb.executed("s1", R)
    tb.ret("recover")
    assert check("L4.1", tb.build()).status is Status.NOT_EXERCISED


def test_l4_2_not_exercised_without_a_fresh_checkpoint_there():
    tb = TB(S1)
    tb.respond("s1", (W,))
    tb.executed("s1", W)
    _crash(tb, "after_checkpoint_saved", CTX, SAVED)
    tb.publish(projection_of(op(W)))
    tb.ret("recover")
    assert check("L4.2", tb.build()).status is Status.NOT_EXERCISED


def test_l4_2_not_exercised_when_the_operation_was_already_projected():
    tb = TB(S1)
    tb.respond("s1", (W,))
    tb.executed("s1", W)
    _crash(tb, "after_checkpoint_saved", CTX, op(W), checkpoints=(CheckpointView("s1", 2, 1, 0, 100, xid("c1")),))
    tb.ret("recover")
    assert check("L4.2", tb.build()).status is Status.NOT_EXERCISED


def test_l4_3_not_exercised_when_the_result_was_already_saved_at_the_crash():
    # the failpoint was called after the result was saved: nothing was left unconfirmed
    tb = TB(S1)
    tb.respond("s1", (W,))
    tb.executed("s1", W)
    _crash(tb, "after_tool_returned", CTX, SAVED)
    tb.ret("recover")
    tb.observe("after_restart", Observation(operations=(SAVED,)))
    assert check("L4.3", tb.build()).status is Status.NOT_EXERCISED
    assert check("L4.9", tb.build()).status is Status.NOT_EXERCISED


def test_l4_3_not_exercised_when_the_context_names_no_operation():
    tb = TB(S1)
    tb.respond("s1", (W,))
    _crash(tb, "after_start_recorded", {"session_id": "s1"}, IN_FLIGHT)
    tb.ret("recover")
    tb.observe("after_restart", Observation(operations=(UNKNOWN,)))
    assert check("L4.3", tb.build()).status is Status.NOT_EXERCISED


def test_l4_4_not_exercised_when_the_build_failed_before_any_result_was_saved():
    tb = TB(S1)
    tb.respond("s1", (W,))
    tb.executed("s1", W)
    _hit(tb, "during_checkpoint_build", "raise", CTX, IN_FLIGHT)
    tb.observe("quiescent", Observation(operations=(op(W, delivery=Delivery.RECORDED),)))
    assert check("L4.4", tb.build()).status is Status.NOT_EXERCISED


def test_l4_4_not_exercised_when_nothing_was_raised():
    tb = TB(S1)
    tb.respond("s1", (W,))
    tb.executed("s1", W)
    _hit(tb, "during_checkpoint_build", "none", CTX, SAVED)
    tb.observe("quiescent", Observation(operations=(op(W, delivery=Delivery.RECORDED),)))
    assert check("L4.4", tb.build()).status is Status.NOT_EXERCISED


def test_l4_7_a_diagnostics_failure_before_the_result_was_saved_does_not_count():
    tb = TB(S1)
    tb.respond("s1", (W,))
    tb.executed("s1", W)
    _hit(tb, "during_diagnostics_write", "raise", CTX, IN_FLIGHT)
    tb.observe("quiescent", Observation(operations=(UNKNOWN,)))
    assert check("L4.7", tb.build()).status is Status.NOT_EXERCISED


# --------------------------------------------------------------------------- L4.8: trusted denials only

D = ToolCall("c0", "drop_table", {"table": "invoices"})
NOT_RUN = op(W, outcome=Outcome.NOT_STARTED, delivery=Delivery.RECORDED, started=False, digest=None,
             permission=Permission.DENY, failure_kind=FailureKind.PERMISSION_DENIED)


def _in_flight_repair(tb, after_view, *, before_restart=()):
    tb.call("run_turn", session_id="s1", user_text="go")
    tb.respond("s1", (D, W))
    tb.observe("quiescent", Observation(operations=(denied(D, delivery=Delivery.RECORDED), IN_FLIGHT)))
    for action in before_restart:
        action(tb)
    _crash(tb, "after_start_recorded", CTX, IN_FLIGHT)
    tb.ret("recover")
    return tb.observe("after_restart", Observation(operations=(denied(D), after_view)))


S_DENY = SessionConfig("s1", rules=(Rule(RuleEffect.DENY, "drop_table"), Rule(RuleEffect.ALLOW, "write_file")))


def test_l4_8_passes_when_an_in_flight_call_stays_unknown():
    tb = TB(S_DENY)
    _in_flight_repair(tb, UNKNOWN)
    assert_pass(check("L4.8", tb.build()), exercised=2)


def test_l4_8_fails_when_repair_borrows_another_calls_denial():
    tb = TB(S_DENY)
    point = _in_flight_repair(tb, NOT_RUN)
    verdict = check("L4.8", tb.build())
    assert_fail_at(verdict, point)
    assert "only another call was denied: c0" in verdict.evidence[0].note


def test_l4_8_a_rule_denying_that_exact_call_justifies_not_executed():
    tb = TB(S_DENY)
    _in_flight_repair(tb, NOT_RUN, before_restart=(
        lambda t: t.update_rules("s1", (Rule(RuleEffect.DENY, "write_file", "/repo/a", "path"),), 2),))
    assert_pass(check("L4.8", tb.build()), exercised=2)


def test_l4_8_a_rule_denying_other_arguments_does_not_justify_it():
    tb = TB(S_DENY)
    point = _in_flight_repair(tb, NOT_RUN, before_restart=(
        lambda t: t.update_rules("s1", (Rule(RuleEffect.DENY, "write_file", "/etc/*", "path"),), 2),))
    assert_fail_at(check("L4.8", tb.build()), point)


def test_l4_8_a_rejected_prompt_for_that_exact_call_justifies_not_executed():
    def reject(t):
        _, wait_id = t.prompt("s1", W)
        t.call("answer_approval", wait_id=wait_id, approve=False)
        t.ret("answer_approval")
    tb = TB(S_DENY)
    _in_flight_repair(tb, NOT_RUN, before_restart=(reject,))
    assert_pass(check("L4.8", tb.build()), exercised=2)


def test_l4_8_a_classifier_denial_of_another_call_does_not_justify_it():
    tb = TB(S_DENY)
    point = _in_flight_repair(tb, NOT_RUN, before_restart=(
        lambda t: t.review("s1", "drop_table", D.args, "risk_deny"),))
    assert_fail_at(check("L4.8", tb.build()), point)


def test_l4_8_tool_text_never_justifies_not_executed():
    tb = TB(S1)
    tb.call("run_turn", session_id="s1", user_text="go")
    tb.respond("s1", (W,))
    tb.executed("s1", W, output="not executed: nothing was written")
    _crash(tb, "after_tool_returned", CTX, IN_FLIGHT)
    tb.ret("recover")
    point = tb.observe("after_restart", Observation(operations=(NOT_RUN,)))
    assert_fail_at(check("L4.8", tb.build()), point)


def test_l4_1_fails_when_a_clean_restart_runs_a_saved_read_again():
    tb = TB(S1)
    tb.respond("s1", (R,))
    tb.executed("s1", R, output="bee")
    tb.observe("quiescent", Observation(operations=(op(R, output="bee"),)))
    restart = tb.restart()
    row = tb.executed("s1", R, output="bee")
    verdict = check("L4.1", tb.build())
    assert_fail_at(verdict, row)
    assert restart in verdict.evidence[0].trace_indexes


def test_fresh_checkpoints_are_those_no_earlier_observation_showed():
    """The first-sighting map gives what a scan of every earlier observation gives, with
    observations recorded out of index order and one observation object at several points."""
    try:
        from .tracebuilder import TraceBuilder
    except ImportError:  # collected without a package
        from tracebuilder import TraceBuilder

    def cp(session, sequence):
        return CheckpointView(session, 2, sequence, 0, 100, xid(f"c{sequence}"))

    b = TraceBuilder("s1", "s2")
    for _ in range(6):
        b.add("MARK")
    b.observe(label="quiescent", at=3, checkpoints=[cp("s1", 1), cp("s1", 2), cp("s2", 1)])
    b.observe(label="quiescent", at=1, checkpoints=[cp("s1", 1)])
    b.observe(label="quiescent", at=5, checkpoints=[cp("s1", 1), cp("s1", 3)])
    trace = b.build()
    shared = trace.observations[2].observation
    trace = trace.__class__(trace.meta, trace.events,
                            (*trace.observations, trace.observations[2].__class__(2, "probe:x", shared)),
                            trace.completed, trace.error)

    def naive(point, session):
        earlier = {(c.session_id, c.sequence) for p in trace.observations if p.index < point.index
                   for c in p.observation.checkpoints}
        return [c for c in point.observation.checkpoints
                if c.session_id == session and (c.session_id, c.sequence) not in earlier]

    answers = {(point.index, session): [c.sequence for c in l4._fresh_checkpoints(trace, point, session)]
               for point in trace.observations for session in ("s1", "s2")}
    assert answers == {(point.index, session): [c.sequence for c in naive(point, session)]
                       for point in trace.observations for session in ("s1", "s2")}
    assert answers[(1, "s1")] == [1] and answers[(3, "s1")] == [2] and answers[(3, "s2")] == [1]
    assert answers[(2, "s1")] == [3] and answers[(5, "s1")] == []  # shown at 2 already


def _deferred(tb, b_status="deferred", a_final=True):
    """A is held after recording the start of c1; B delivers c1 again, finds it held by A and
    returns ``b_status``; A is released, runs c1 and (``a_final``) gets the final answer."""
    args = {"session_id": "s1", "user_text": "go", "hold_at": "after_start_recorded"}
    _driver(tb, "driver_call", 1, "concurrent_turn", args={**args, "role": "A"})
    tb.respond("s1", (W,), instance=1)
    _hit(tb, "after_start_recorded", "hold", CTX, IN_FLIGHT, instance=1)
    _driver(tb, "driver_call", 2, "concurrent_turn", args={**args, "role": "B", "held": True})
    tb.respond("s1", (W,), instance=2)
    b_return = _driver(tb, "driver_return", 2, "concurrent_turn",
                       result={"session_id": "s1", "status": b_status, "final_text": ""})
    tb.executed("s1", W, instance=1)
    if a_final:
        tb.respond("s1", text="Written.", instance=1)
    a_return = _driver(tb, "driver_return", 1, "concurrent_turn",
                       result={"session_id": "s1", "status": "completed", "final_text": "Written."})
    tb.observe("quiescent", Observation(operations=(SAVED,), result_records=1))
    return b_return, a_return


def test_l4_10_passes_when_the_instance_that_left_the_call_says_deferred():
    tb = TB(S1)
    _deferred(tb)
    assert_pass(check("L4.10", tb.build()), exercised=3)  # the raced call and both returns


def test_l4_10_fails_when_the_instance_that_left_the_call_reports_the_turn_completed():
    """The probe deferred-turn-reported-completed: B's turn ended on A's unsettled call."""
    tb = TB(S1)
    b_return, _ = _deferred(tb, b_status="completed")
    assert_fail_at(check("L4.10", tb.build()), b_return)


def test_l4_10_fails_when_the_released_instance_reports_completed_without_a_final_answer():
    tb = TB(S1)
    _, a_return = _deferred(tb, a_final=False)
    assert_fail_at(check("L4.10", tb.build()), a_return)


# --------------------------------------------------------------------------- what recover() reports


def _reported(tb, listed, announced=None):
    """An operation cut off after its tool returned; the recovery that follows returns a
    RecoveryReport listing ``listed`` (and emits a recovered event listing ``announced``)."""
    tb.respond("s1", (W,))
    tb.executed("s1", W)
    _crash(tb, "after_tool_returned", CTX, IN_FLIGHT)
    if announced is not None:
        tb.emit("recovered", "s1", reconciliation_required=list(announced))
    returned = tb.ret("recover", {"results_completed": [], "projections_replayed": [],
                                  "reconciliation_required": list(listed), "turns_resumed": []})
    tb.observe("after_restart", Observation(operations=(UNKNOWN,)))
    return returned


def test_l4_9_passes_when_the_recovery_lists_the_unconfirmed_operation():
    tb = TB(S1)
    _reported(tb, [xid("c1")], announced=[xid("c1")])
    assert_pass(check("L4.9", tb.build()))


def test_l4_9_fails_when_the_recovery_report_or_event_leaves_it_out():
    tb = TB(S1)
    returned = _reported(tb, [])
    verdict = check("L4.9", tb.build())
    assert_fail_at(verdict, returned)  # passed before recovery_reports: the report was not read
    assert "RecoveryReport" in verdict.evidence[0].note
    tb = TB(S1)
    returned = _reported(tb, [xid("c1")], announced=[])
    verdict = check("L4.9", tb.build())
    assert_fail_at(verdict, returned)
    assert "recovered event of s1" in verdict.evidence[0].note


def test_x4_fails_when_the_recovery_lists_a_confirmed_operation():
    from harness.criteria import x

    x4 = next(c for c in x.CRITERIA if c.id == "X4")
    tb = TB(S1)
    tb.respond("s1", (W,))
    tb.executed("s1", W)
    tb.observe("quiescent", Observation(operations=(op(W),)))
    _crash(tb, "after_checkpoint_saved", CTX, op(W))
    returned = tb.ret("recover", {"results_completed": [], "projections_replayed": [],
                                  "reconciliation_required": [xid("c1")], "turns_resumed": []})
    tb.observe("after_restart", Observation(operations=(op(W),)))
    verdict = run_check(x4, tb.build())
    assert_fail_at(verdict, returned)
    tb = TB(S1)
    _reported(tb, [xid("c1")])
    assert run_check(x4, tb.build()).status is Status.PASS


def _recovery_resuming(tb, resumed):
    """A crash mid-turn; the recovery drives the turn on (a model request during the call) and
    its RecoveryReport lists ``resumed`` in turns_resumed."""
    tb.respond("s1", (W,))
    _crash(tb, "after_prepare", CTX)
    tb.respond("s1", (), text="done")
    request = len(tb.events) - 2
    returned = tb.ret("recover", {"results_completed": [], "projections_replayed": [],
                                  "reconciliation_required": [], "turns_resumed": list(resumed)})
    return request, returned


def test_l4_8_passes_when_the_recovery_reports_the_turn_it_resumed():
    tb = TB(S1)
    _recovery_resuming(tb, ["s1"])
    verdict = check("L4.8", tb.build())
    assert verdict.status is Status.PASS, verdict.evidence


def test_l4_8_fails_when_the_recovery_resumes_a_turn_its_report_does_not_list():
    tb = TB(S1)
    request, returned = _recovery_resuming(tb, [])
    verdict = check("L4.8", tb.build())  # the report was not read before recovery_reports
    assert_fail_at(verdict, request)
    assert any("turns_resumed" in e.note and returned in e.trace_indexes for e in verdict.evidence)
