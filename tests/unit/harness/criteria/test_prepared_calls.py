"""A call a crash left prepared is taken up by the recovery that follows (L4.8).

An auto-mode Bash call is prepared and its instance dies at ``after_prepare`` (before any
decision). After a restart that drives the session's turn the call must be decided and
closed (here: reviewed, run, result saved; or, in a cancelled session, closed as not
executed); a recovery that leaves it ``pending``/``not_started`` fails, whether the turn
then ends, goes on asking the model or is left running. The seed-73 shape (instance B of a
concurrent turn dies there and is dropped, never restarted) is not judged without a
restart, and judged like any other once a restarted runtime recovers that store.
"""

from __future__ import annotations

from harness.contract import ApprovalWaitView, Message, TurnStatus, WaitStatus, execution_id_for
from harness.criteria import l2, l4, prepared_calls
from harness.criteria.base import Status

from tracebuilder import TraceBuilder, all_indexes, call, op_view, session, verdict_of

LS = {"command": "ls /repo", "description": "list"}
C1 = call("c1", "Bash", LS)
CONTEXT = {"session_id": "s1", "tool_call_id": "c1", "execution_id": execution_id_for("s1", "c1")}
PREPARED = op_view("s1", "c1", "Bash", LS, permission="ask", decided_by="default_ask", delivery="pending")
DONE = op_view("s1", "c1", "Bash", LS, permission="allow", decided_by="classifier",
               classifier_outcome="allow", delivery="projected")
WAITING = op_view("s1", "c1", "Bash", LS, permission="ask", decided_by="classifier", delivery="pending")


def _auto():
    return session("s1", mode="auto", interactive=False)


def _status(status: TurnStatus):
    from harness.contract import Mode, SessionView
    return (SessionView("s1", status, 1, Mode.AUTO, False),)


def _crashed_after_prepare(failpoint="after_prepare"):
    """The turn serves c1; its instance dies right after preparing it (or inside its
    review); the store read there holds c1 prepared, the turn running."""
    b = TraceBuilder(_auto(), tools=[("Bash", "bash")])
    b.turn()
    b.model("s1", [C1])
    if failpoint == "during_classifier_review":
        b.failpoint("after_prepare", context=CONTEXT)
        b.classifier("s1", "Bash", LS, "allow")
    crash = b.crash(failpoint, context=CONTEXT)
    probe = b.probe(f"failpoint:{failpoint}", PREPARED, at=crash - 1, sessions=_status(TurnStatus.RUNNING))
    return b, probe


def _recover(b, *, resumes=True):
    """Restart, open, recover(); returns (restart index, recover's return index)."""
    restart = b.restart()
    b.driver("open")
    b.returned("open")
    b.driver("recover")
    return restart, resumes


def _taken_up(b):
    """The resumed turn reviews c1, runs it, saves and shows its result, asks the model
    with it and ends completed."""
    b.failpoint("after_prepare", context=CONTEXT)  # a re-delivery finds the record
    b.classifier("s1", "Bash", LS, "allow")
    b.failpoint("after_permission_decision", context=CONTEXT)
    b.executed("s1", "c1", "Bash", LS, output="a.txt")
    b.model("s1", messages=[Message("user", "go"), Message("assistant", "", tool_calls=(C1,)),
                            Message("tool", "a.txt", tool_call_id="c1")], text="listed")
    b.lifecycle("turn_ended", "s1", status="completed")


def _forgotten(b, how):
    if how == "ends":  # the turn is closed around the undecided call
        return b.lifecycle("turn_ended", "s1", status="incomplete")
    if how == "goes_on":  # the model is asked again without the call's result
        b.model("s1", messages=[Message("user", "go"), Message("assistant", "", tool_calls=(C1,))],
                text="listed")
        return b.lifecycle("turn_ended", "s1", status="completed")
    return None  # "idles": recovery returns without resuming the running turn


def _after_recovery(b, *views, status=TurnStatus.COMPLETED, waits=()):
    returned = b.returned("recover", {"results_completed": [], "projections_replayed": [],
                                      "reconciliation_required": [], "turns_resumed": ["s1"]})
    point = b.observe(*views, label="after_restart", sessions=_status(status), approval_waits=waits)
    b.observe(*views, label="final", sessions=_status(status), approval_waits=waits)
    return returned, point


def l48(trace):
    return verdict_of(l4.CRITERIA, "L4.8", trace)


def test_a_recovery_that_takes_the_call_up_passes_and_exercises_the_hard_case():
    b, _ = _crashed_after_prepare()
    _recover(b)
    _taken_up(b)
    _after_recovery(b, DONE)
    trace = b.build()
    assert prepared_calls.forgotten_calls(trace) == (1, [])
    verdict = l48(trace)
    assert verdict.status is Status.PASS and verdict.exercised >= 1, verdict
    # taken up again, the call is judged by L2.2 once more (the seed-73 exemption ends)
    assert verdict_of(l2.CRITERIA, "L2.2", trace).status is Status.PASS


def test_a_crash_inside_the_review_is_the_hard_case_too():
    b, _ = _crashed_after_prepare("during_classifier_review")
    _recover(b)
    _taken_up(b)
    _after_recovery(b, DONE)
    assert prepared_calls.forgotten_calls(b.build()) == (1, [])


def test_a_recovery_that_ends_the_turn_around_the_call_fails():
    b, probe = _crashed_after_prepare()
    restart, _ = _recover(b)
    ended = _forgotten(b, "ends")
    _, point = _after_recovery(b, PREPARED, status=TurnStatus.INCOMPLETE)
    verdict = l48(b.build())
    assert verdict.status is Status.FAIL, verdict
    assert {probe, restart, ended, point} <= all_indexes(verdict)
    assert any("c1 was left prepared" in e.note for e in verdict.evidence)


def test_a_recovery_that_asks_the_model_without_the_calls_result_fails():
    b, probe = _crashed_after_prepare()
    restart, _ = _recover(b)
    _forgotten(b, "goes_on")
    request = next(e.index for e in b.events if e.kind == "model_request" and e.index > restart)
    _after_recovery(b, PREPARED)
    verdict = l48(b.build())
    assert verdict.status is Status.FAIL, verdict
    assert any("without a result for c1" in e.note and request in e.trace_indexes
               for e in verdict.evidence), verdict.evidence


def test_a_recovery_that_leaves_the_running_turn_alone_fails():
    b, _ = _crashed_after_prepare()
    _recover(b)
    returned, point = _after_recovery(b, PREPARED, status=TurnStatus.RUNNING)
    verdict = l48(b.build())
    assert verdict.status is Status.FAIL and {returned, point} <= all_indexes(verdict), verdict


def test_a_call_behind_a_pending_wait_of_its_session_is_not_yet_due():
    """The resumed turn asks the owner about c1 (a persisted wait): taken up, paused."""
    b, _ = _crashed_after_prepare()
    _recover(b)
    b.prompt("s1", "c1", "Bash", LS, wait_id="w1")
    b.lifecycle("turn_ended", "s1", status="awaiting_approval")
    wait = ApprovalWaitView("w1", "s1", execution_id_for("s1", "c1"), "c1", "ask", WaitStatus.PENDING, False)
    _after_recovery(b, WAITING, status=TurnStatus.AWAITING_APPROVAL, waits=(wait,))
    assert prepared_calls.forgotten_calls(b.build()) == (1, [])


def test_a_turn_deferred_to_another_live_instance_is_not_an_end():
    """Recovery was cut short (an injected fault escaped recover()); the owner's next turn
    finds another live instance owning the call and defers: not due yet."""
    b = TraceBuilder(_auto(), tools=[("Bash", "bash")])
    b.turn()
    b.model("s1", [C1])
    crash = b.crash("after_prepare", context=CONTEXT)
    b.probe("failpoint:after_prepare", PREPARED, at=crash - 1, sessions=_status(TurnStatus.INCOMPLETE))
    _recover(b)
    b.failpoint("before_model_request", "raise", context={"session_id": "s1"})
    b.raised("recover", "InjectedFault", expected=True)
    b.turn()
    b.lifecycle("turn_ended", "s1", status="deferred")
    b.turn_returns(status="deferred")
    b.observe(PREPARED, label="final", sessions=_status(TurnStatus.RUNNING))
    assert prepared_calls.forgotten_calls(b.build()) == (0, [])
    b.turn()  # the next turn that ends must have taken it up
    b.lifecycle("turn_ended", "s1", status="completed")
    b.turn_returns(status="completed")
    b.observe(PREPARED, label="final", sessions=_status(TurnStatus.COMPLETED))
    exercised, violations = prepared_calls.forgotten_calls(b.build())
    assert exercised == 1 and len(violations) == 1, violations


def test_an_instance_never_restarted_is_not_judged():
    """The instance dies at after_prepare and nothing restarts on its store: the call stays
    prepared, and no recovery was there to take it up (L2.2 does not judge it either)."""
    b, _ = _crashed_after_prepare()
    b.observe(PREPARED, label="final", sessions=_status(TurnStatus.CANCELLED))
    trace = b.build()
    assert prepared_calls.forgotten_calls(trace) == (0, [])
    assert l48(trace).status is not Status.FAIL
    assert verdict_of(l2.CRITERIA, "L2.2", trace).status is Status.NOT_EXERCISED


def test_a_recovery_takes_up_a_prepared_call_whatever_the_turn_status():
    """The turn was not running when the instance stopped (cancelled, or left awaiting an
    approval whose wait was withdrawn): a recover() that returns must still settle the call
    (decide it, or record a cancelled session's call not executed), not leave it prepared."""
    for status in (TurnStatus.CANCELLED, TurnStatus.AWAITING_APPROVAL):
        b = TraceBuilder(_auto(), tools=[("Bash", "bash")])
        b.turn()
        b.model("s1", [C1])
        crash = b.crash("after_prepare", context=CONTEXT)
        b.probe("failpoint:after_prepare", PREPARED, at=crash - 1, sessions=_status(status))
        _recover(b)
        _after_recovery(b, PREPARED, status=status)
        exercised, violations = prepared_calls.forgotten_calls(b.build())
        assert exercised == 1 and len(violations) == 1, (status, violations)


def _cut_short(then_turn):
    b, _ = _crashed_after_prepare()
    _recover(b)
    b.failpoint("after_prepare", "raise", context=CONTEXT)  # the resumed turn is cut short
    b.raised("recover", "InjectedFault", expected=True)
    if then_turn:  # the owner's next message: the loop takes up the call first
        b.turn()
        ended = b.lifecycle("turn_ended", "s1", status="completed")
        b.turn_returns(status="completed")
    b.observe(PREPARED, label="final", sessions=_status(TurnStatus.RUNNING))
    return b


def test_a_recovery_cut_short_by_an_injected_fault_is_not_judged():
    assert prepared_calls.forgotten_calls(_cut_short(then_turn=False).build()) == (0, [])


def test_a_later_turn_after_a_cut_short_recovery_must_take_the_call_up():
    exercised, violations = prepared_calls.forgotten_calls(_cut_short(then_turn=True).build())
    assert exercised == 1 and len(violations) == 1, violations


def test_a_call_decided_before_the_crash_is_judged_but_is_not_the_hard_case():
    """Crash after the decision: a recovery that forgets it still fails; one that takes it
    up does not count as the hard case (the instance died after deciding)."""
    decided = op_view("s1", "c1", "Bash", LS, permission="allow", decided_by="classifier",
                      classifier_outcome="allow", outcome="not_started", delivery="pending")
    for forgets in (True, False):
        b = TraceBuilder(_auto(), tools=[("Bash", "bash")])
        b.turn()
        b.model("s1", [C1])
        b.classifier("s1", "Bash", LS, "allow")
        crash = b.crash("after_permission_decision", context=CONTEXT)
        b.probe("failpoint:after_permission_decision", decided, at=crash - 1,
                sessions=_status(TurnStatus.RUNNING))
        _recover(b)
        if forgets:
            _forgotten(b, "ends")
            _after_recovery(b, decided, status=TurnStatus.INCOMPLETE)
        else:
            b.executed("s1", "c1", "Bash", LS, output="a.txt")
            b.lifecycle("turn_ended", "s1", status="completed")
            _after_recovery(b, DONE)
        exercised, violations = prepared_calls.forgotten_calls(b.build())
        assert exercised == 0 and bool(violations) is forgets, violations


# --------------------------------------------------------------------------- the seed-73 shape

CANCELLED_CLOSED = op_view("s1", "c1", "Bash", LS, permission="deny", decided_by="cancellation",
                           delivery="projected")


def _seed_73(recovery=None):
    """A's concurrent turn is cancelled before it is held; B runs the turn alone and dies
    right after preparing c1 (dropped: no restart). Then, for ``recovery``, a runtime is
    restarted on that store: "closes" settles the cancelled session's prepared call as not
    executed, "forgets" leaves it prepared."""
    b = TraceBuilder(_auto(), tools=[("Bash", "bash")])
    b.driver("concurrent_turn", session_id="s1", user_text="go", hold_at="before_model_request", role="A")
    b.failpoint("before_model_request", "cancel", {"session_id": "s1"}, params={"session": "s1"})
    b.lifecycle("turn_ended", "s1", status="cancelled")
    b.turn_returns(status="cancelled", method="concurrent_turn")
    b.instance = 2
    b.driver("open")
    b.returned("open")
    b.driver("concurrent_turn", session_id="s1", user_text="go", hold_at="before_model_request", role="B",
             held=False)
    end = b.model("s1", [C1])[1]
    crash = b.crash("after_prepare", context=CONTEXT)
    probe = b.probe("failpoint:after_prepare", PREPARED, at=crash - 1, sessions=_status(TurnStatus.RUNNING))
    if recovery is None:
        b.observe(PREPARED, label="final", sessions=_status(TurnStatus.RUNNING))
        return b, end, probe, None
    restart, _ = _recover(b)
    if recovery == "closes":
        b.lifecycle("permission_decided", "s1", CONTEXT["execution_id"], permission="deny",
                    decided_by="cancellation")
        b.failpoint("after_permission_decision", context=CONTEXT)
        _, point = _after_recovery(b, CANCELLED_CLOSED, status=TurnStatus.CANCELLED)
    else:
        _, point = _after_recovery(b, PREPARED, status=TurnStatus.RUNNING)
    return b, end, probe, point


def test_seed_73_without_a_recovery_stays_passing():
    b, _, _, _ = _seed_73()
    trace = b.build()
    assert prepared_calls.forgotten_calls(trace) == (0, [])
    assert l48(trace).status is not Status.FAIL
    assert verdict_of(l2.CRITERIA, "L2.2", trace).status is Status.NOT_EXERCISED


def test_seed_73_with_a_recovery_that_closes_the_call_passes():
    b, _, _, _ = _seed_73("closes")
    trace = b.build()
    assert prepared_calls.forgotten_calls(trace) == (1, [])
    assert l48(trace).status is Status.PASS


def test_seed_73_with_a_recovery_that_leaves_the_call_prepared_fails():
    b, _, probe, point = _seed_73("forgets")
    verdict = l48(b.build())
    assert verdict.status is Status.FAIL and {probe, point} <= all_indexes(verdict), verdict
