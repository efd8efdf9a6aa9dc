"""L5 criteria on hand-built traces: pass, fail (evidence at the right index), not_exercised."""

from __future__ import annotations

import dataclasses

from harness.contract import (
    DecisionSource,
    Delivery,
    Feature,
    FailureKind,
    Observation,
    Outcome,
    Permission,
    RecoveryAction,
    Rule,
    RuleEffect,
    SessionConfig,
    ToolCall,
    ToolKind,
    ToolSpec,
    WaitStatus,
    to_json,
)
from harness.criteria import l5
from harness.criteria.base import Status, run_check

try:
    from .lbuilder import TB, USER, denied, op, projection_of, tool_msg, wait, xid
except ImportError:  # collected without a package
    from lbuilder import TB, USER, denied, op, projection_of, tool_msg, wait, xid

BY_ID = {c.id: c for c in l5.CRITERIA}
SMS_TOOLS = (ToolSpec("send_sms", ToolKind.EXTERNAL), ToolSpec("read_file", ToolKind.READ))
ALLOW_BOTH = (Rule(RuleEffect.ALLOW, "send_sms"), Rule(RuleEffect.ALLOW, "read_file"))
DENY_SMS = (Rule(RuleEffect.DENY, "send_sms"), Rule(RuleEffect.ALLOW, "read_file"))
S1 = SessionConfig("s1", rules=ALLOW_BOTH)
SMS = ToolCall("c1", "send_sms", {"to": "+1", "text": "hi"})
READ = ToolCall("c0", "read_file", {"path": "/repo/VERSION"})
W = ToolCall("c1", "write_file", {"path": "/repo/a", "content": "x"})


def check(cid, trace):
    return run_check(BY_ID[cid], trace)


def assert_fail_at(verdict, index):
    assert verdict.status is Status.FAIL, verdict
    assert any(index in e.trace_indexes for e in verdict.evidence), verdict.evidence


def assert_pass(verdict, exercised=1):
    assert verdict.status is Status.PASS, verdict
    assert verdict.exercised == exercised, verdict


def test_catalogue_ids_and_stage():
    assert [c.id for c in l5.CRITERIA] == [f"L5.{i}" for i in range(1, 6)]
    assert {c.stage for c in l5.CRITERIA} == {"l5"}


# --------------------------------------------------------------------------- L5.1


def _revocation(tb, offered_after, later_view=None):
    tb.respond("s1", (READ,), tools=("read_file", "send_sms"))
    tb.executed("s1", READ)
    tb.observe("quiescent", Observation(operations=(op(READ),)))
    tb.update_rules("s1", DENY_SMS, 2)
    request = len(tb.events)
    tb.respond("s1", messages=(USER, tool_msg(READ, Outcome.SUCCEEDED)), tools=offered_after)
    point = tb.observe("final", Observation(operations=(later_view or op(READ),)))
    return request, point


def test_l5_1_passes_when_the_next_request_drops_the_revoked_tool():
    tb = TB(S1, tools=SMS_TOOLS)
    _revocation(tb, ("read_file",))
    assert_pass(check("L5.1", tb.build()), exercised=2)


def test_l5_1_fails_when_the_revoked_tool_is_still_offered():
    tb = TB(S1, tools=SMS_TOOLS)
    request, _ = _revocation(tb, ("read_file", "send_sms"))
    assert_fail_at(check("L5.1", tb.build()), request)


def test_l5_1_fails_when_filtering_rewrites_a_saved_operation():
    tb = TB(S1, tools=SMS_TOOLS)
    _, point = _revocation(tb, ("read_file",), later_view=op(READ, version=2))
    assert_fail_at(check("L5.1", tb.build()), point)


def _escalation_replaced_around_a_change(tb, run_before_change):
    """SMS's sandboxed attempt failed and asked to escalate; the owner approved; the run
    outside the sandbox starts before or after a change that revokes SMS; the record then
    holds that run's success instead of the sandboxed failure."""
    tb.respond("s1", (SMS,), tools=("read_file", "send_sms"))
    tb.executed("s1", SMS, status="error", output="partial")  # the sandboxed attempt
    sandboxed = op(SMS, outcome=Outcome.FAILED, failure_kind=FailureKind.PERMISSION_DENIED,
                   status="error", output="partial")
    _, wid = tb.prompt("s1", SMS)
    tb.call("answer_approval", wait_id=wid, approve=True)
    tb.observe("quiescent", Observation(operations=(sandboxed,), approval_waits=(
        wait(wid, SMS, status=WaitStatus.APPROVED, applied=True),)))
    if run_before_change:
        tb.executed("s1", SMS)
    tb.update_rules("s1", DENY_SMS, 2)
    if not run_before_change:
        tb.executed("s1", SMS)
    tb.ret("answer_approval", {"session_id": "s1", "status": "completed", "final_text": ""})
    return tb.observe("final", Observation(operations=(op(SMS),), approval_waits=(
        wait(wid, SMS, status=WaitStatus.APPROVED, applied=True),)))


def test_l5_1_an_escalated_run_started_before_the_change_may_replace_its_record():
    """Found by chaos: the run outside the sandbox was authorized under the old rules."""
    tb = TB(S1, tools=SMS_TOOLS)
    _escalation_replaced_around_a_change(tb, run_before_change=True)
    assert check("L5.1", tb.build()).status is not Status.FAIL


def test_l5_1_fails_when_an_escalated_run_after_the_change_replaces_the_saved_record():
    tb = TB(S1, tools=SMS_TOOLS)
    point = _escalation_replaced_around_a_change(tb, run_before_change=False)
    assert_fail_at(check("L5.1", tb.build()), point)


def _escalation_revalidated_after_a_change(refused: bool):
    """Found by generation: the owner approves SMS's escalation; the rules change (version 2)
    before the run outside the sandbox; revalidation either binds the run to version 2 (it
    runs) or refuses it, and the sandboxed attempt's saved failure stands."""
    tb = TB(S1, tools=SMS_TOOLS)
    tb.respond("s1", (SMS,), tools=("read_file", "send_sms"))
    tb.executed("s1", SMS, status="error", output="partial")
    sandboxed = op(SMS, outcome=Outcome.FAILED, failure_kind=FailureKind.PERMISSION_DENIED,
                   status="error", output="partial")
    _, wid = tb.prompt("s1", SMS)
    tb.call("answer_approval", wait_id=wid, approve=True)
    tb.observe("quiescent", Observation(operations=(sandboxed,), approval_waits=(
        wait(wid, SMS, status=WaitStatus.APPROVED, applied=True),)))
    tb.update_rules("s1", DENY_SMS if refused else (Rule(RuleEffect.ALLOW, "send_sms"),), 2)
    if refused:
        final = dataclasses.replace(sandboxed, decided_by=DecisionSource.APPROVAL)
    else:
        tb.executed("s1", SMS)
        final = op(SMS, version=2)
    tb.ret("answer_approval", {"session_id": "s1", "status": "completed", "final_text": ""})
    tb.observe("final", Observation(operations=(final,), approval_waits=(
        wait(wid, SMS, status=WaitStatus.APPROVED, applied=True),)))
    return tb.build()


def test_l5_1_an_approved_escalation_revalidated_after_a_change_may_settle_its_record():
    assert check("L5.1", _escalation_revalidated_after_a_change(refused=False)).status is not Status.FAIL
    assert check("L5.1", _escalation_revalidated_after_a_change(refused=True)).status is not Status.FAIL


def test_l5_1_not_exercised_without_rule_changes():
    tb = TB(S1, tools=SMS_TOOLS)
    tb.respond("s1", tools=("read_file", "send_sms"))
    assert check("L5.1", tb.build()).status is Status.NOT_EXERCISED


# --------------------------------------------------------------------------- L5.2


def _old_call(tb, executes=False):
    tb.respond("s1", (SMS,), tools=("read_file", "send_sms"))
    fp = tb.failpoint("after_model_stream_ended", "change_rules",
                      params={"session": "s1", "permission_version": 2, "rules": to_json(DENY_SMS)})
    row = tb.executed("s1", SMS, version=2) if executes else None
    tb.observe("final", Observation(operations=(op(SMS) if executes else denied(SMS, decided_by=DecisionSource.EXPLICIT_DENY),)))
    return fp, row


def test_l5_2_passes_when_the_old_call_meets_the_new_deny():
    tb = TB(S1, tools=SMS_TOOLS)
    _old_call(tb)
    assert_pass(check("L5.2", tb.build()))


def test_l5_2_fails_when_the_old_call_executes():
    tb = TB(S1, tools=SMS_TOOLS)
    _, row = _old_call(tb, executes=True)
    assert_fail_at(check("L5.2", tb.build()), row)


def test_l5_2_fails_when_an_approved_call_runs_after_its_tool_was_revoked():
    tb = TB(SessionConfig("s1", rules=(Rule(RuleEffect.ASK, "send_sms"),)), tools=SMS_TOOLS)
    tb.respond("s1", (SMS,))
    _, wid = tb.prompt("s1", SMS)
    tb.observe("quiescent", Observation(operations=(op(SMS, permission=Permission.ASK, outcome=Outcome.NOT_STARTED,
                                                        delivery=Delivery.PENDING),),
                                        approval_waits=(wait(wid, SMS),)))
    tb.update_rules("s1", (Rule(RuleEffect.DENY, "send_sms", "+1*", "to"),), 2)
    tb.call("answer_approval", wait_id=wid, approve=True)
    row = tb.executed("s1", SMS, version=2)
    assert_fail_at(check("L5.2", tb.build()), row)


def test_l5_2_a_call_already_executing_when_the_rules_change_is_not_judged():
    tb = TB(S1, tools=SMS_TOOLS)
    tb.respond("s1", (SMS,))
    tb.failpoint("after_start_recorded", context={"session_id": "s1", "tool_call_id": "c1"})
    tb.update_rules("s1", DENY_SMS, 2)
    tb.executed("s1", SMS)
    assert check("L5.2", tb.build()).status is Status.NOT_EXERCISED


def test_l5_2_not_exercised_without_rule_changes():
    tb = TB(S1, tools=SMS_TOOLS)
    tb.respond("s1", (SMS,))
    tb.executed("s1", SMS)
    assert check("L5.2", tb.build()).status is Status.NOT_EXERCISED


# --------------------------------------------------------------------------- L5.3

READER = SessionConfig("s1", capabilities=("read_file",))


def test_l5_3_passes_when_visibility_matches_capability():
    tb = TB(READER)
    tb.respond("s1", tools=("read_file",))
    tb.respond(SessionConfig("s1").session_id, tools=("read_file",))
    assert_pass(check("L5.3", tb.build()), exercised=2)


def test_l5_3_fails_when_an_incapable_tool_is_offered():
    tb = TB(READER)
    tb.respond("s1", tools=("read_file",))
    request = len(tb.events)
    tb.respond("s1", tools=("read_file", "write_file"))
    assert_fail_at(check("L5.3", tb.build()), request)


def test_l5_3_fails_when_a_usable_tool_is_hidden():
    tb = TB(SessionConfig("s1", rules=(Rule(RuleEffect.DENY, "write_file", "/etc/*", "path"),)))
    request = len(tb.events)
    tb.respond("s1", tools=("read_file",))
    assert_fail_at(check("L5.3", tb.build()), request)


def test_l5_3_not_exercised_without_model_requests():
    tb = TB(READER)
    tb.executed("s1", READ)
    assert check("L5.3", tb.build()).status is Status.NOT_EXERCISED


# --------------------------------------------------------------------------- L5.4


def _published(tb, record, shown):
    tb.respond("s1", (W,))
    tb.executed("s1", W, status="error", output="disk full", error_kind="failed")
    index = tb.publish(shown)
    tb.observe("probe:ui_publish", Observation(operations=(record,)))
    return index


FAILED_W = op(W, outcome=Outcome.FAILED, failure_kind=FailureKind.FAILED, reason="disk full",
              status="error", output="disk full")


def test_l5_4_passes_when_the_ui_shows_the_record():
    tb = TB()
    _published(tb, FAILED_W, projection_of(FAILED_W))
    assert_pass(check("L5.4", tb.build()))


def test_l5_4_fails_when_the_ui_disagrees_with_the_record():
    tb = TB()
    index = _published(tb, FAILED_W, projection_of(FAILED_W, status="succeeded", recovery_actions=()))
    assert_fail_at(check("L5.4", tb.build()), index)


def test_l5_4_fails_when_retry_is_offered_for_an_unknown_operation():
    tb = TB()
    tb.respond("s1", (W,))
    tb.executed("s1", W)
    unknown = op(W, outcome=Outcome.UNKNOWN, reconcile=True)
    index = tb.publish(projection_of(unknown, recovery_actions=(RecoveryAction.RETRY,)))
    assert_fail_at(check("L5.4", tb.build()), index)


def test_l5_4_checks_stored_projections_at_rest():
    tb = TB()
    tb.respond("s1", (W,))
    tb.executed("s1", W, status="error", output="disk full", error_kind="failed")
    point = tb.observe("final", Observation(operations=(FAILED_W,), projections=(
        projection_of(FAILED_W, status="not_executed"),)))
    assert_fail_at(check("L5.4", tb.build()), point)


def test_l5_4_not_exercised_without_projections():
    tb = TB()
    tb.respond("s1", (W,))
    assert check("L5.4", tb.build()).status is Status.NOT_EXERCISED


def test_l5_4_not_applicable_without_web_projection():
    tb = TB(features=(Feature.APPROVALS,))
    assert check("L5.4", tb.build()).status is Status.NOT_APPLICABLE


# --------------------------------------------------------------------------- L5.5


def _result_event(tb, said, stored=Outcome.SUCCEEDED, history=Outcome.SUCCEEDED):
    tb.respond("s1", (W,))
    tb.executed("s1", W)
    index = tb.emit("result_saved", execution_id=xid("c1"), outcome=said.value)
    point = tb.observe("quiescent", Observation(operations=(op(W, outcome=stored),)))
    tb.respond("s1", messages=(USER, tool_msg(W, history)))
    return index, point, len(tb.events) - 2


def test_l5_5_passes_when_event_store_and_history_agree():
    tb = TB()
    tb.respond("s1", (W,))
    tb.executed("s1", W, status="error", output="disk full", error_kind="failed")
    tb.emit("result_saved", execution_id=xid("c1"), outcome="failed")
    tb.observe("quiescent", Observation(operations=(FAILED_W,)))
    tb.respond("s1", messages=(USER, tool_msg(W, Outcome.FAILED)))
    assert_pass(check("L5.5", tb.build()))


def test_l5_5_a_plain_success_does_not_exercise_it():
    tb = TB()
    _result_event(tb, Outcome.SUCCEEDED)
    assert check("L5.5", tb.build()).status is Status.NOT_EXERCISED


def test_l5_5_fails_when_the_event_calls_an_unknown_answer_failed():
    tb = TB()
    tb.respond("s1", (W,))
    row = tb.executed("s1", W, status="error", output="?", error_kind="unknown")
    index = tb.emit("result_saved", execution_id=xid("c1"), outcome="failed")
    verdict = check("L5.5", tb.build())
    assert_fail_at(verdict, index)
    assert any(row in e.trace_indexes for e in verdict.evidence)


def test_l5_5_fails_when_the_event_contradicts_the_ledger():
    tb = TB()
    index, _, _ = _result_event(tb, Outcome.FAILED, stored=Outcome.FAILED, history=Outcome.FAILED)
    assert_fail_at(check("L5.5", tb.build()), index)


def test_l5_5_fails_when_the_history_disagrees_with_the_event():
    tb = TB()
    _, _, request = _result_event(tb, Outcome.SUCCEEDED, history=Outcome.UNKNOWN)
    assert_fail_at(check("L5.5", tb.build()), request)


def _unknown_settled_by_recovery(tb, *, announced=True, recover_ends="return"):
    """A write whose instance crashed after its start was recorded; the restart's recover()
    saves it unknown (announced live or not) and the run ends with it in the store."""
    unknown = op(W, outcome=Outcome.UNKNOWN, reconcile=True, delivery=Delivery.PROJECTED)
    tb.call("run_turn", session_id="s1", user_text="go")
    tb.respond("s1", (W,))
    tb.failpoint("after_start_recorded", "crash")
    tb.crash("after_start_recorded")
    tb.restart()
    recover = tb.call("recover")
    event = None
    if announced:
        event = tb.emit("result_saved", execution_id=xid("c1"), outcome="unknown")
    tb.failpoint("after_projection")  # the probe at a failpoint inside recover()
    settled = tb.observe("probe:after_projection", Observation(operations=(unknown,)))
    if recover_ends == "return":
        tb.ret("recover")
    else:
        tb.failpoint("after_projection", "crash")
        tb.crash("after_projection")
    final = tb.observe("final", Observation(operations=(unknown,)))
    return recover, event, settled, final


def test_l5_5_a_result_saved_by_recovery_is_announced_live():
    tb = TB()
    _unknown_settled_by_recovery(tb)
    # the event agrees with the store (the older reading) and it went live (the new one)
    assert_pass(check("L5.5", tb.build()), exercised=2)


def test_l5_5_fails_on_a_result_that_never_went_live():
    tb = TB()
    recover, _, settled, final = _unknown_settled_by_recovery(tb, announced=False)
    verdict = check("L5.5", tb.build())
    assert_fail_at(verdict, settled)
    assert any("no realtime result_saved event" in e.note and f"during recover, event {recover}" in e.note
               and final in e.trace_indexes for e in verdict.evidence), verdict.evidence


def test_l5_5_a_result_whose_call_was_cut_off_may_miss_its_event():
    tb = TB()
    _unknown_settled_by_recovery(tb, announced=False, recover_ends="crash")
    assert check("L5.5", tb.build()).status is Status.NOT_EXERCISED


def test_l5_5_a_result_waiting_for_an_escalation_answer_is_not_final_yet():
    tb = TB()
    tb.call("answer_approval", wait_id="w1", approve=True)
    tb.respond("s1", (W,))
    tb.executed("s1", W, status="error", output="needs more", escalation=True)
    attempt = op(W, outcome=Outcome.FAILED, failure_kind=FailureKind.FAILED, delivery=Delivery.RECORDED)
    escalation = wait("w2", W)  # pending: the owner has not answered the escalation
    tb.failpoint("after_wait_persisted")
    tb.observe("probe:after_wait_persisted", Observation(operations=(attempt,),
                                                          approval_waits=(escalation,)))
    tb.ret("answer_approval", {"session_id": "s1", "status": "awaiting_approval", "final_text": ""})
    tb.observe("final", Observation(operations=(attempt,), approval_waits=(escalation,)))
    assert check("L5.5", tb.build()).status is Status.NOT_EXERCISED
    answered = TB()  # the same result once the escalation is answered: its event is due
    answered.call("answer_approval", wait_id="w1", approve=True)
    answered.respond("s1", (W,))
    answered.executed("s1", W, status="error", output="needs more", escalation=True)
    answered.failpoint("after_wait_persisted")
    settled = answered.observe("probe:after_wait_persisted", Observation(
        operations=(attempt,), approval_waits=(wait("w2", W, status=WaitStatus.REJECTED, applied=True),)))
    answered.ret("answer_approval", {"session_id": "s1", "status": "completed", "final_text": ""})
    answered.observe("final", Observation(operations=(attempt,), approval_waits=(
        wait("w2", W, status=WaitStatus.REJECTED, applied=True),)))
    assert_fail_at(check("L5.5", answered.build()), settled)


def test_l5_5_not_exercised_without_result_events():
    tb = TB()
    tb.respond("s1", (W,))
    tb.executed("s1", W)
    assert check("L5.5", tb.build()).status is Status.NOT_EXERCISED


def test_l5_5_a_later_result_of_the_same_operation_supersedes_the_event():
    tb = TB()
    tb.respond("s1", (W,))
    tb.executed("s1", W, status="error", output="blocked", escalation=True)
    tb.emit("result_saved", execution_id=xid("c1"), outcome="failed")
    tb.observe("quiescent", Observation(operations=(op(W, outcome=Outcome.FAILED, status="error", output="blocked"),)))
    tb.executed("s1", W)
    tb.emit("result_saved", execution_id=xid("c1"), outcome="succeeded")
    tb.respond("s1", messages=(USER, tool_msg(W, Outcome.SUCCEEDED)))
    assert_pass(check("L5.5", tb.build()), exercised=1)  # the failed attempt; the success is plain


# --------------------------------------------------------------------------- L5.1/L5.3: exercised only by the hard case


def test_l5_1_a_change_that_revokes_nothing_does_not_exercise_it():
    tb = TB(S1, tools=SMS_TOOLS)
    tb.respond("s1", (READ,), tools=("read_file", "send_sms"))
    tb.update_rules("s1", ALLOW_BOTH + (Rule(RuleEffect.ASK, "send_sms", "+9*", "to"),), 2)
    tb.respond("s1", tools=("read_file", "send_sms"))
    assert check("L5.1", tb.build()).status is Status.NOT_EXERCISED


PARTLY = SessionConfig("s1", rules=(Rule(RuleEffect.DENY, "write_file", "/etc/*", "path"),))


def test_l5_3_passes_when_a_tool_forbidden_for_some_operations_stays_visible():
    tb = TB(PARTLY)
    tb.respond("s1", tools=("write_file", "read_file"))
    assert_pass(check("L5.3", tb.build()))


def test_l5_3_names_the_partly_denied_tool_it_hid():
    tb = TB(PARTLY)
    tb.respond("s1", tools=("read_file",))
    verdict = check("L5.3", tb.build())
    assert verdict.status is Status.FAIL
    assert "forbidden for specific operations only" in verdict.evidence[0].note


def test_l5_3_rules_that_deny_nothing_do_not_exercise_it():
    tb = TB(SessionConfig("s1"))
    tb.respond("s1", tools=("write_file", "read_file"))
    assert check("L5.3", tb.build()).status is Status.NOT_EXERCISED


# --------------------------------------------------------------------------- L5.4: judged against the oracle


def test_l5_4_fails_when_store_and_ui_agree_but_the_world_says_unknown():
    """The record calls an unknown tool answer a definite failure; UI and store agree on
    'failed' + edit_args; the world demands reconcile."""
    tb = TB()
    tb.respond("s1", (W,))
    tb.executed("s1", W, status="error", output="?", error_kind="unknown")
    index = tb.publish(projection_of(FAILED_W))
    tb.observe("probe:ui_publish", Observation(operations=(FAILED_W,)))
    verdict = check("L5.4", tb.build())
    assert_fail_at(verdict, index)
    assert "the world says 'unknown'" in verdict.evidence[0].note


def test_l5_4_fails_when_a_hard_constraint_denial_offers_a_rule_change():
    call = ToolCall("c1", "write_file", {"path": "/etc/passwd", "content": "x"})
    hard = SessionConfig("s1", hard_constraints=(Rule(RuleEffect.DENY, "write_file", "/etc/*", "path"),))
    tb = TB(hard)
    tb.respond("s1", (call,))
    record = denied(call, decided_by=DecisionSource.HARD_CONSTRAINT, delivery=Delivery.RECORDED)
    index = tb.publish(projection_of(record, recovery_actions=(RecoveryAction.CHANGE_RULES,)))
    tb.observe("probe:ui_publish", Observation(operations=(record,)))
    verdict = check("L5.4", tb.build())
    assert_fail_at(verdict, index)
    assert "hard-constraint denial offers change_rules" in verdict.evidence[0].note


def test_l5_4_fails_when_a_denial_offers_retry():
    tb = TB()
    tb.respond("s1", (W,))
    record = denied(W, delivery=Delivery.RECORDED)
    index = tb.publish(projection_of(record, recovery_actions=(RecoveryAction.RETRY,)))
    tb.observe("probe:ui_publish", Observation(operations=(record,)))
    assert_fail_at(check("L5.4", tb.build()), index)


def test_l5_4_passes_for_a_pending_wait_from_the_world():
    ask = SessionConfig("s1", rules=(Rule(RuleEffect.ASK, "write_file"),))
    tb = TB(ask)
    tb.respond("s1", (W,))
    _, wid = tb.prompt("s1", W)
    record = op(W, permission=Permission.ASK, decided_by=DecisionSource.ASK_RULE, outcome=Outcome.NOT_STARTED,
                delivery=Delivery.PENDING)
    tb.publish(projection_of(record, wait_pending=True))
    tb.observe("probe:ui_publish", Observation(operations=(record,), approval_waits=(wait(wid, W),)))
    assert_pass(check("L5.4", tb.build()))


def test_l5_4_fails_when_the_ui_still_shows_the_wait_after_the_run():
    ask = SessionConfig("s1", rules=(Rule(RuleEffect.ASK, "write_file"),))
    tb = TB(ask)
    tb.respond("s1", (W,))
    _, wid = tb.prompt("s1", W)
    waiting = op(W, permission=Permission.ASK, decided_by=DecisionSource.ASK_RULE, outcome=Outcome.NOT_STARTED,
                 delivery=Delivery.PENDING)
    shown = tb.publish(projection_of(waiting, wait_pending=True))
    tb.observe("probe:ui_publish", Observation(operations=(waiting,)))
    tb.call("answer_approval", wait_id=wid, approve=True)
    tb.executed("s1", W)
    done = op(W, decided_by=DecisionSource.APPROVAL)
    point = tb.observe("quiescent", Observation(operations=(done,)))
    verdict = check("L5.4", tb.build())
    assert verdict.status is Status.FAIL
    assert any({shown, point} <= set(e.trace_indexes) and "still shows" in e.note for e in verdict.evidence)


def test_l5_4_fails_when_the_stored_projection_is_not_what_the_ui_received():
    tb = TB()
    tb.respond("s1", (W,))
    tb.executed("s1", W, status="error", output="disk full", error_kind="failed")
    tb.publish(projection_of(FAILED_W, recovery_actions=(RecoveryAction.EDIT_ARGS, RecoveryAction.RETRY)))
    point = tb.observe("final", Observation(operations=(FAILED_W,), projections=(projection_of(FAILED_W),)))
    verdict = check("L5.4", tb.build())
    assert_fail_at(verdict, point)
    assert any("the UI received" in e.note for e in verdict.evidence)


def test_l5_4_a_plain_success_does_not_exercise_it():
    tb = TB()
    tb.respond("s1", (W,))
    tb.executed("s1", W)
    tb.publish(projection_of(op(W)))
    tb.observe("probe:ui_publish", Observation(operations=(op(W),)))
    assert check("L5.4", tb.build()).status is Status.NOT_EXERCISED


def test_l5_4_a_wait_shown_in_the_ui_before_the_prompt_is_awaiting_approval():
    """The UI may be where the owner answers: a committed wait, not prompted yet, shows as
    awaiting approval."""
    ask = SessionConfig("s1", rules=(Rule(RuleEffect.ASK, "write_file"),))
    tb = TB(ask)
    tb.respond("s1", (W,))
    record = op(W, permission=Permission.ASK, decided_by=DecisionSource.ASK_RULE, outcome=Outcome.NOT_STARTED,
                delivery=Delivery.PENDING)
    index = tb.publish(projection_of(record, wait_pending=True))
    tb.observe("probe:ui_publish", Observation(operations=(record,), approval_waits=(wait("w1", W),)))
    assert_pass(check("L5.4", tb.build()))
    tb2 = TB(ask)
    tb2.respond("s1", (W,))
    index = tb2.publish(projection_of(record, wait_pending=True))
    tb2.observe("probe:ui_publish", Observation(operations=(record,)))  # no wait anywhere
    assert_fail_at(check("L5.4", tb2.build()), index)


# --------------------------------------------------------------------------- L5.4: the reason the loop read back


def _reason_told(shown_reason, *, replay=False, interim=None):
    """W failed ('disk full'); the UI shows ``shown_reason`` (and the store says the same,
    as when one function builds both); the model's next request carries the result record
    as the loop read it back. ``replay``: the publication comes after that request (a
    recovery replaying it); ``interim``: an earlier publication of a superseded result."""
    record = op(W, outcome=Outcome.FAILED, failure_kind=FailureKind.FAILED, reason=shown_reason,
                status="error", output="disk full")
    tb = TB()
    tb.respond("s1", (W,))
    tb.executed("s1", W, status="error", output="disk full", error_kind="failed")
    if interim is not None:
        tb.publish(projection_of(record, reason=interim))
        tb.observe("probe:ui_publish", Observation(operations=(op(W, outcome=Outcome.FAILED,
                   failure_kind=FailureKind.FAILED, reason=interim, status="error", output="disk full"),)))
    told = tool_msg(W, Outcome.FAILED, "disk full\nthe tool failed: disk full")
    if replay:
        tb.respond("s1", messages=(USER, told))
    index = tb.publish(projection_of(record))
    tb.observe("probe:ui_publish", Observation(operations=(record,)))
    if not replay:
        tb.respond("s1", messages=(USER, told))
    return tb, index


def test_l5_4_passes_when_the_ui_gives_the_reason_the_model_was_told():
    for replay in (False, True):
        tb, _ = _reason_told("the tool failed: disk full", replay=replay)
        assert_pass(check("L5.4", tb.build()))


def test_l5_4_fails_when_the_ui_reason_is_not_the_result_records():
    """The probe projection-reason-from-operation: UI and inspect() both give the decision's
    reason (one function builds both), while the result the loop read back says why it failed."""
    for replay in (False, True):
        tb, index = _reason_told("allow rule write_file:'*' grants it", replay=replay)
        verdict = check("L5.4", tb.build())
        assert_fail_at(verdict, index)
        assert "the result the model received for it does not give" in verdict.evidence[0].note


def test_l5_4_a_result_superseded_before_the_loop_read_it_is_not_compared():
    """A sandboxed attempt's result, shown until its escalation was answered: the model only
    ever receives the final one."""
    tb, _ = _reason_told("the tool failed: disk full", interim="the sandboxed attempt asks for more")
    assert_pass(check("L5.4", tb.build()), exercised=2)
