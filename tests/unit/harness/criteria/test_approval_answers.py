"""The owner's answers (explicit, or a new message that answers "no") on hand-built traces,
and what L3.2 and the projection oracle make of a new message."""

from __future__ import annotations

from harness.contract import DecisionSource, Observation, Outcome, Permission, WaitStatus
from harness.criteria import approval_answers as A
from harness.criteria import facts as F
from harness.criteria import l3
from harness.criteria.base import Status, run_check
from harness.criteria.projection_oracle import wait_pending

try:
    from .lbuilder import TB, op, wait
    from .test_l3 import ASK, W
except ImportError:  # collected without a package
    from lbuilder import TB, op, wait
    from test_l3 import ASK, W

L3_2 = next(c for c in l3.CRITERIA if c.id == "L3.2")
WAITING = op(W, permission=Permission.ASK, decided_by=DecisionSource.ASK_RULE,
             outcome=Outcome.NOT_STARTED)


def _prompted(tb):
    """A turn whose call c1 asks: prompt shown, turn returns awaiting_approval."""
    tb.call("run_turn", session_id="s1", user_text="write it")
    tb.respond("s1", (W,))
    prompt, wait_id = tb.prompt("s1", W)
    tb.ret("run_turn", {"session_id": "s1", "status": "awaiting_approval", "final_text": ""})
    return prompt, wait_id


def _new_message(tb, *, returns=True, session="s1"):
    """A new message in ``session``; returns (call index, index its request reached the model)."""
    call = tb.call("run_turn", session_id=session, user_text="never mind")
    if not returns:
        return call, None
    tb.respond(session, (), text="Understood.")
    reached = len(tb.events) - 2  # the MODEL_REQUEST, before its stream's end
    tb.ret("run_turn", {"session_id": session, "status": "completed", "final_text": "Understood."})
    return call, reached


def test_an_explicit_answer_takes_effect_when_given():
    tb = TB(ASK)
    _, wait_id = _prompted(tb)
    given = tb.call("answer_approval", wait_id=wait_id, approve=True)
    (answer,) = A.answers(tb.build())
    assert (answer.wait_id, answer.approve, answer.index, answer.settled) == (wait_id, True, given, given)
    assert not answer.by_new_message


def test_a_new_message_answers_the_sessions_shown_prompts_no():
    tb = TB(ASK)
    _, wait_id = _prompted(tb)
    call, reached = _new_message(tb)
    late = tb.call("answer_approval", wait_id=wait_id, approve=True)
    trace = tb.build()
    refusal, explicit = A.answers(trace)
    assert refusal.by_new_message and not refusal.approve
    assert (refusal.index, refusal.call_index, refusal.settled) == (call, call, reached)
    assert explicit.index == late
    assert A.first_answers(trace)[wait_id] is refusal
    assert F.approval_between(trace, F.operations(trace)[("s1", "c1")], -1, late + 1) is None


def test_a_new_message_answers_neither_other_sessions_nor_answered_or_later_prompts():
    tb = TB(ASK)
    _, first = _prompted(tb)
    tb.call("answer_approval", wait_id=first, approve=False)
    _new_message(tb, session="s2")  # another session's message answers nothing here
    trace = tb.build()
    assert [a.by_new_message for a in A.answers(trace)] == [False]
    tb = TB(ASK)
    _new_message(tb)
    _prompted(tb)  # shown after the message reached the model
    assert A.answers(tb.build()) == ()


def test_a_new_message_cut_off_counts_only_when_the_store_shows_the_refusal():
    for status, counted in ((WaitStatus.REJECTED, True), (WaitStatus.PENDING, False)):
        tb = TB(ASK)
        _, wait_id = _prompted(tb)
        _new_message(tb, returns=False)
        tb.crash("before_model_request")
        tb.restart()
        tb.observe("after_restart", Observation(
            operations=(WAITING,), approval_waits=(wait(wait_id, W, status=status),)))
        assert bool(A.answers(tb.build())) is counted, status


def test_the_projection_oracle_waits_for_the_new_message_to_reach_the_model():
    tb = TB(ASK)
    prompt, _ = _prompted(tb)
    call, reached = _new_message(tb)
    trace = tb.build()
    c1 = F.operations(trace)[("s1", "c1")]
    assert wait_pending(trace, c1, call) is True
    assert wait_pending(trace, c1, call + 1) is None  # answering: only the store knows
    assert wait_pending(trace, c1, reached + 1) is False


def _refused_then_late_approval(tb, *, executes_late: bool):
    _, wait_id = _prompted(tb)
    tb.observe("probe:approval_prompt", Observation(operations=(WAITING,),
                                                    approval_waits=(wait(wait_id, W),)))
    _new_message(tb)
    answer = tb.call("answer_approval", wait_id=wait_id, approve=True)
    row = tb.executed("s1", W) if executes_late else None
    tb.ret("answer_approval", {"session_id": "s1", "status": "completed", "final_text": ""})
    refused = op(W, permission=Permission.DENY, decided_by=DecisionSource.APPROVAL,
                 outcome=Outcome.NOT_STARTED)
    status = WaitStatus.APPROVED if executes_late else WaitStatus.REJECTED
    tb.observe("final", Observation(operations=(refused,), approval_waits=(
        wait(wait_id, W, status=status, applied=True),)))
    return answer, row


def test_l3_2_a_late_approval_after_a_new_message_changes_nothing():
    tb = TB(ASK)
    _refused_then_late_approval(tb, executes_late=False)
    verdict = run_check(L3_2, tb.build())
    # before approval_answers the late "approve" was taken as the answer: "approved, yet never
    # executed" and "answered approved is rejected in the store"
    assert verdict.status is Status.PASS, verdict.evidence


def test_l3_2_fails_when_a_late_approval_runs_a_call_the_new_message_refused():
    tb = TB(ASK)
    _, row = _refused_then_late_approval(tb, executes_late=True)
    verdict = run_check(L3_2, tb.build())
    assert verdict.status is Status.FAIL
    assert any("executed although its wait" in e.note and row in e.trace_indexes
               for e in verdict.evidence), verdict.evidence


def test_a_wait_shown_twice_is_answered_once_by_the_message():
    tb = TB(ASK)
    _, wait_id = _prompted(tb)
    tb.prompt("s1", W, wait_id=wait_id)  # shown again (a recovery shows what it finds pending)
    _new_message(tb)
    assert [(a.wait_id, a.by_new_message) for a in A.answers(tb.build())] == [(wait_id, True)]
