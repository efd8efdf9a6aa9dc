"""M criteria on hand-built traces: pass, fail (evidence at the right index), not_exercised."""

from __future__ import annotations

from harness.contract import Feature, Message, ModelRequestStatus, Observation, ToolCall
from harness.criteria import m
from harness.criteria.base import Status, run_check

try:
    from .lbuilder import TB, USER, assistant, request_view
except ImportError:  # collected without a package
    from lbuilder import TB, USER, assistant, request_view

BY_ID = {c.id: c for c in m.CRITERIA}
W = ToolCall("c1", "write_file", {"path": "/repo/a", "content": "x"})


def check(cid, trace):
    return run_check(BY_ID[cid], trace)


def assert_fail_at(verdict, index):
    assert verdict.status is Status.FAIL, verdict
    assert any(index in e.trace_indexes for e in verdict.evidence), verdict.evidence


def assert_pass(verdict, exercised=1):
    assert verdict.status is Status.PASS, verdict
    assert verdict.exercised == exercised, verdict


def _request(tb, how="end", text="done", status="completed", ends=1, messages=(USER,), request_id=None):
    tb.emit("model_request_started", request_id=request_id or f"r{tb._req + 1}")
    rid = tb.request("s1", messages, request_id=request_id)
    index = tb.stream_end(rid, how, text)
    for _ in range(ends):
        tb.emit("model_request_ended", request_id=rid, status=status)
    return rid, index


def test_catalogue_ids_and_stage():
    assert [c.id for c in m.CRITERIA] == ["M1", "M2", "M3", "M4", "M5"]
    assert {c.stage for c in m.CRITERIA} == {"m"}


# --------------------------------------------------------------------------- M1


def test_m1_passes_with_one_start_and_one_end():
    tb = TB()
    rid, _ = _request(tb, how="eof", text="", status="incomplete")
    tb.observe("final", Observation(model_requests=(request_view(rid, status=ModelRequestStatus.INCOMPLETE,
                                                                 incomplete=True),)))
    assert_pass(check("M1", tb.build()))


def test_m1_requests_that_ended_normally_are_judged_but_exercise_nothing():
    tb = TB()
    rid, _ = _request(tb)
    tb.observe("final", Observation(model_requests=(request_view(rid),)))
    assert check("M1", tb.build()).status is Status.NOT_EXERCISED


def test_m1_fails_on_two_end_events():
    tb = TB()
    _request(tb, ends=2)
    trace = tb.build()
    request = next(e.index for e in trace.events if e.kind == "model_request")
    assert_fail_at(check("M1", trace), request)


def test_m1_fails_on_a_reused_request_id():
    tb = TB()
    _request(tb, request_id="same")
    _request(tb, request_id="same", messages=(USER, Message("assistant", "done")))
    trace = tb.build()
    second = [e.index for e in trace.events if e.kind == "model_request"][1]
    assert_fail_at(check("M1", trace), second)


def test_m1_a_crash_may_cut_the_end_off():
    tb = TB()
    _request(tb, ends=0)
    tb.failpoint("after_model_stream_ended", "crash")
    tb.crash("after_model_stream_ended")
    assert_pass(check("M1", tb.build()))


def _cut_then_recovered(tb):
    """A request whose instance crashed after its stream ended, before any end was recorded;
    then a restart whose recover() is called (the caller says how it ends)."""
    rid, _ = _request(tb, ends=0)
    tb.failpoint("after_model_stream_ended", "crash")
    tb.crash("after_model_stream_ended")
    tb.restart()
    tb.call("open")
    tb.ret("open")
    tb.call("recover")
    return rid


def test_m1_a_recovery_must_end_what_the_crash_left_open():
    tb = TB()
    rid = _cut_then_recovered(tb)
    tb.emit("model_request_ended", request_id=rid, status="incomplete", interrupted=True)
    tb.ret("recover")
    tb.observe("final", Observation(model_requests=(request_view(
        rid, status=ModelRequestStatus.INCOMPLETE, incomplete=True),)))
    assert_pass(check("M1", tb.build()))


def test_m1_fails_when_the_recovery_leaves_the_request_without_an_end():
    tb = TB()
    rid = _cut_then_recovered(tb)
    recovered = tb.ret("recover")
    tb.observe("final", Observation(model_requests=(request_view(rid, status=None, ends=0),)))
    trace = tb.build()
    verdict = check("M1", trace)
    assert_fail_at(verdict, recovered)
    assert any("recovered at event" in e.note for e in verdict.evidence), verdict.evidence
    store = [e for e in verdict.evidence if e.note.startswith("the store records")]
    assert store and "0 end events" in store[0].note, verdict.evidence


def test_m1_a_crashed_instance_nobody_recovered_is_excused_its_end():
    tb = TB()
    rid = _cut_then_recovered(tb)
    tb.raised("recover", "RuntimeError", expected=False)  # recovery did not complete
    tb.observe("final", Observation(model_requests=(request_view(rid, status=None, ends=0),)))
    assert_pass(check("M1", tb.build()))


def test_m1_not_exercised_without_model_requests():
    assert check("M1", TB().build()).status is Status.NOT_EXERCISED


def test_m1_not_applicable_without_model_events():
    assert check("M1", TB(features=(Feature.APPROVALS,)).build()).status is Status.NOT_APPLICABLE


# --------------------------------------------------------------------------- M2


def test_m2_passes_when_each_end_matches_its_stream():
    tb = TB()
    rid, _ = _request(tb, how="eof", text="partial", status="incomplete")
    rid2, _ = _request(tb, how="transport_error", text="", status="failed", messages=(USER, USER))
    tb.observe("final", Observation(model_requests=(
        request_view(rid, status=ModelRequestStatus.INCOMPLETE, partial="partial", incomplete=True),
        request_view(rid2, status=ModelRequestStatus.FAILED))))
    assert_pass(check("M2", tb.build()), exercised=2)


def test_m2_a_normal_end_is_judged_but_exercises_nothing():
    tb = TB()
    rid, _ = _request(tb)
    tb.observe("final", Observation(model_requests=(request_view(rid),)))
    assert check("M2", tb.build()).status is Status.NOT_EXERCISED
    tb = TB()
    _request(tb, status="failed")
    assert check("M2", tb.build()).status is Status.FAIL


def test_m2_fails_when_an_eof_is_recorded_completed():
    tb = TB()
    _request(tb, how="eof", text="partial", status="completed")
    trace = tb.build()
    ended = trace.events[-1].index
    assert_fail_at(check("M2", trace), ended)


def test_m2_not_exercised_without_recorded_ends():
    tb = TB()
    tb.respond("s1")
    assert check("M2", tb.build()).status is Status.NOT_EXERCISED


# --------------------------------------------------------------------------- M3


def _broken_turn(tb, how="transport_error"):
    tb.call("run_turn", session_id="s1", user_text="go")
    tb.respond("s1", how=how)


def test_m3_passes_when_the_errors_propagate():
    tb = TB()
    _broken_turn(tb)
    tb.raised("run_turn", "ModelTransportError")
    _broken_turn(tb, "cancelled")
    tb.raised("run_turn", "ModelStreamCancelled")
    assert_pass(check("M3", tb.build()), exercised=2)


def test_m3_fails_when_the_error_is_swallowed():
    tb = TB()
    _broken_turn(tb)
    index = tb.ret("run_turn", {"session_id": "s1", "status": "failed", "final_text": ""})
    assert_fail_at(check("M3", tb.build()), index)


def test_m3_fails_when_the_error_is_wrapped():
    tb = TB()
    _broken_turn(tb, "cancelled")
    index = tb.raised("run_turn", "RuntimeError", expected=False)
    assert_fail_at(check("M3", tb.build()), index)


def test_m3_not_exercised_without_broken_streams():
    tb = TB()
    tb.call("run_turn", session_id="s1", user_text="go")
    tb.respond("s1")
    tb.ret("run_turn", {"session_id": "s1", "status": "completed", "final_text": "done"})
    assert check("M3", tb.build()).status is Status.NOT_EXERCISED


# --------------------------------------------------------------------------- M4


def test_m4_not_exercised_when_nothing_could_have_been_retried():
    tb = TB()
    tb.call("run_turn", session_id="s1", user_text="go")
    tb.respond("s1", (W,), messages=(USER,))
    tb.executed("s1", W)
    tb.respond("s1", messages=(USER, assistant((W,))))
    tb.ret("run_turn", {"session_id": "s1", "status": "completed", "final_text": "done"})
    assert check("M4", tb.build()).status is Status.NOT_EXERCISED


def test_m4_passes_when_an_incomplete_request_is_not_retried():
    tb = TB()
    tb.call("run_turn", session_id="s1", user_text="go")
    tb.respond("s1", how="eof", text="par")
    tb.ret("run_turn", {"session_id": "s1", "status": "incomplete", "final_text": "par"})
    tb.call("run_turn", session_id="s1", user_text="again")
    tb.respond("s1", messages=(USER, assistant(content="par", incomplete=True), Message("user", "again")))
    tb.ret("run_turn", {"session_id": "s1", "status": "completed", "final_text": "done"})
    assert_pass(check("M4", tb.build()))


def test_m4_a_legitimate_tool_retry_exercises_and_passes():
    tb = TB()
    tb.respond("s1", (W,))
    tb.executed("s1", W, status="error", error_kind="transient")
    tb.executed("s1", W)
    assert_pass(check("M4", tb.build()))


def test_m4_an_incomplete_request_cut_by_a_crash_exercises_nothing():
    tb = TB()
    tb.call("run_turn", session_id="s1", user_text="go")
    tb.respond("s1", how="eof", text="par")
    tb.failpoint("after_model_stream_ended", "crash")
    tb.crash("after_model_stream_ended")
    assert check("M4", tb.build()).status is Status.NOT_EXERCISED


def test_m4_fails_on_a_duplicate_request():
    tb = TB()
    tb.respond("s1", messages=(USER,))
    index = len(tb.events)
    tb.respond("s1", messages=(USER,))
    assert_fail_at(check("M4", tb.build()), index)


def test_m4_fails_on_a_retry_after_eof():
    tb = TB()
    tb.call("run_turn", session_id="s1", user_text="go")
    tb.respond("s1", how="eof", text="par")
    index = len(tb.events)
    tb.respond("s1", messages=(USER, assistant(content="par", incomplete=True)))
    tb.ret("run_turn")
    assert_fail_at(check("M4", tb.build()), index)


def test_m4_fails_when_a_tool_is_replayed_without_a_crash():
    tb = TB()
    tb.respond("s1", (W,))
    tb.executed("s1", W)
    row = tb.executed("s1", W)
    verdict = check("M4", tb.build())
    assert_fail_at(verdict, row)
    assert verdict.evidence[0].ledger_rows == (1, 2)


def test_m4_not_exercised_without_requests():
    assert check("M4", TB().build()).status is Status.NOT_EXERCISED


# --------------------------------------------------------------------------- M5


def _partial(tb, returned="incomplete", view_partial="the numbers grew by", later_incomplete=True):
    tb.call("run_turn", session_id="s1", user_text="go")
    rid, _ = _request(tb, how="eof", text="the numbers grew by", status="incomplete")
    tb.emit("turn_ended", status="incomplete")
    ret = tb.ret("run_turn", {"session_id": "s1", "status": returned, "final_text": ""})
    tb.call("run_turn", session_id="s1", user_text="again")
    later = len(tb.events)
    tb.respond("s1", messages=(USER, assistant(content="the numbers grew by", incomplete=later_incomplete),
                               Message("user", "again")))
    tb.ret("run_turn", {"session_id": "s1", "status": "completed", "final_text": "done"})
    final = tb.observe("final", Observation(model_requests=(
        request_view(rid, status=ModelRequestStatus.INCOMPLETE, partial=view_partial, incomplete=True),)))
    return ret, later, final


def test_m5_passes_when_partial_text_stays_incomplete():
    tb = TB()
    _partial(tb)
    assert_pass(check("M5", tb.build()))


def test_m5_fails_when_the_turn_completes_on_partial_text():
    tb = TB()
    ret, _, _ = _partial(tb, returned="completed")
    assert_fail_at(check("M5", tb.build()), ret)


def test_m5_fails_when_partial_text_becomes_a_complete_answer():
    tb = TB()
    _, later, _ = _partial(tb, later_incomplete=False)
    assert_fail_at(check("M5", tb.build()), later)


def test_m5_fails_when_the_partial_text_is_lost():
    tb = TB()
    _, _, final = _partial(tb, view_partial="")
    assert_fail_at(check("M5", tb.build()), final)


def test_m5_not_exercised_with_complete_streams_only():
    tb = TB()
    _request(tb)
    assert check("M5", tb.build()).status is Status.NOT_EXERCISED


def test_m2_a_response_lost_in_a_crash_may_be_closed_incomplete_by_recovery():
    tb = TB()
    rid, _ = _request(tb, ends=0)
    tb.failpoint("after_model_stream_ended", "crash")
    tb.crash("after_model_stream_ended")
    tb.restart()
    tb.emit("model_request_ended", request_id=rid, status="incomplete", interrupted=True)
    assert_pass(check("M2", tb.build()))
    tb.emit("model_request_ended", request_id=rid, status="cancelled")
    assert check("M2", tb.build()).status is Status.FAIL


def test_m5_partial_text_lost_in_a_crash_before_its_end_was_recorded_is_not_required():
    tb = TB()
    rid, _ = _request(tb, how="eof", text="partial", ends=0)
    tb.failpoint("after_model_stream_ended", "crash")
    tb.crash("after_model_stream_ended")
    tb.restart()
    tb.emit("model_request_ended", request_id=rid, status="incomplete", interrupted=True)
    tb.observe("final", Observation(model_requests=(
        request_view(rid, status=ModelRequestStatus.INCOMPLETE, partial="", incomplete=True),)))
    assert_pass(check("M5", tb.build()))


def _eof_then_cancelled(tb, *, crash):
    """An EOF stream with partial text; (``crash``) the instance dies before its end is
    recorded and the resumed turn is cancelled before its next request, else the same turn
    is cancelled; the turn ends cancelled either way."""
    rid, _ = _request(tb, how="eof", text="partial", ends=0 if crash else 1, status="incomplete")
    if crash:
        tb.failpoint("after_model_stream_ended", "crash")
        tb.crash("after_model_stream_ended")
        tb.restart()
        tb.call("recover")
        tb.emit("model_request_ended", request_id=rid, status="incomplete", interrupted=True)
    tb.failpoint("before_model_request", "cancel", {"session_id": "s1"})
    ended = tb.emit("turn_ended", status="cancelled")
    tb.observe("final", Observation(model_requests=(
        request_view(rid, status=ModelRequestStatus.INCOMPLETE, partial="" if crash else "partial",
                     incomplete=True),)))
    return ended


def test_m5_a_turn_resumed_after_a_crash_ends_on_what_follows():
    # Chaos seed 402: the EOF answer was lost in the crash, recovery ended the request and
    # resumed the turn, and the session was cancelled before the next request.
    tb = TB()
    _eof_then_cancelled(tb, crash=True)
    assert check("M5", tb.build()).status is not Status.FAIL


def test_m5_still_fails_a_turn_that_ends_cancelled_on_an_eof_it_recorded():
    tb = TB()
    ended = _eof_then_cancelled(tb, crash=False)
    assert_fail_at(check("M5", tb.build()), ended)
