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
    assert_pass(check("M5", tb.build()), exercised=3)  # the EOF, and two turns told the user's text


def test_m5_fails_when_the_turn_completes_on_partial_text():
    tb = TB()
    ret, _, _ = _partial(tb, returned="completed")
    assert_fail_at(check("M5", tb.build()), ret)


def test_m5_fails_when_partial_text_becomes_a_complete_answer():
    tb = TB()
    _, later, _ = _partial(tb, later_incomplete=False)
    assert_fail_at(check("M5", tb.build()), later)


def _same_words_twice(tb, second_incomplete=False):
    """An EOF answer "the numbers grew by", then a later request whose complete answer has the
    very same words: the model said them twice."""
    _partial(tb)
    second = messages_so_far = (USER, assistant(content="the numbers grew by", incomplete=True),
                                Message("user", "again"))
    rid, _ = _request(tb, text="the numbers grew by", messages=messages_so_far)
    tb.call("run_turn", session_id="s1", user_text="more")
    later = len(tb.events)
    tb.respond("s1", messages=(*second, assistant(content="the numbers grew by",
                                                   incomplete=second_incomplete),
                               Message("user", "more")))
    tb.ret("run_turn", {"session_id": "s1", "status": "completed", "final_text": "done"})
    return later


def test_m5_passes_when_a_later_complete_answer_says_the_same_words():
    # found by generation: the complete answer of a later request was taken for the EOF's
    # partial text because the two had the same words
    tb = TB()
    _same_words_twice(tb)
    assert check("M5", tb.build()).status is Status.PASS


def test_m5_still_fails_when_the_partial_text_itself_becomes_complete():
    tb = TB()
    _partial(tb)
    tb.call("run_turn", session_id="s1", user_text="more")
    later = len(tb.events)
    tb.respond("s1", messages=(USER, assistant(content="the numbers grew by", incomplete=False),
                               Message("user", "again"), Message("user", "more")))
    tb.ret("run_turn", {"session_id": "s1", "status": "completed", "final_text": "done"})
    verdict = check("M5", tb.build())
    assert_fail_at(verdict, later)
    assert any("partial text" in e.note for e in verdict.evidence)


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


# --------------------------------------------------------------------------- M5: where answers come from

C2 = ToolCall("c2", "write_file", {"path": "/repo/b", "content": "y"})


def _tool(call, content="wrote"):
    return Message("tool", content, tool_call_id=call.tool_call_id, outcome="succeeded")


def _raced_turn(tb, *, stale_appended):
    """Instance 1 asks from [go] and is answered c1; before it goes on, instance 2 asks from
    the same session's conversation, is answered c2, runs it and finishes with "done".
    Then the session's next request: with the answer to the gone conversation dropped, or
    with c1 appended after "done" (the stale answer) and run."""
    r1 = tb.request("s1", (USER,), instance=1)
    tb.stream_end(r1, "end", calls=(W,), instance=1)
    moved = (USER, USER, assistant((C2,)), _tool(C2))
    r2 = tb.request("s1", (USER, USER), instance=2)
    tb.stream_end(r2, "end", calls=(C2,), instance=2)
    r3 = tb.request("s1", moved, instance=2)
    tb.stream_end(r3, "end", text="done", instance=2)
    history = moved + (assistant(content="done"),)
    if stale_appended:
        history += (assistant((W,)), _tool(W))
    later = len(tb.events)
    r4 = tb.request("s1", history + (Message("user", "next"),), instance=1)
    tb.stream_end(r4, "end", text="done", instance=1)
    return later


def test_m5_passes_when_an_answer_to_a_gone_conversation_is_dropped():
    tb = TB()
    _raced_turn(tb, stale_appended=False)
    assert_pass(check("M5", tb.build()), exercised=1)  # c1's conversation moved on without it


def test_m5_fails_when_an_answer_to_a_gone_conversation_is_appended():
    # The stale-answer-appended mutant's shape: c1 answered [go]; it is sent after "done".
    tb = TB()
    later = _raced_turn(tb, stale_appended=True)
    verdict = check("M5", tb.build())
    assert_fail_at(verdict, later)
    assert any("an answer to a conversation that is gone" in e.note for e in verdict.evidence)
    assert any(1 in e.trace_indexes for e in verdict.evidence)  # where the world served c1


def test_m5_passes_a_sequential_turn_whose_answers_join_their_conversations():
    tb = TB()
    r1 = tb.request("s1", (USER,))
    tb.stream_end(r1, "end", text="writing", calls=(W,))
    first = (USER, assistant((W,), content="writing"), _tool(W))
    r2 = tb.request("s1", first)
    tb.stream_end(r2, "end", text="done")
    r3 = tb.request("s1", first + (assistant(content="done"), Message("user", "again")))
    tb.stream_end(r3, "eof", text="half")
    r4 = tb.request("s1", first + (assistant(content="done"), Message("user", "again"),
                                   assistant(content="half", incomplete=True), Message("user", "more")))
    tb.stream_end(r4, "end", text="done")
    verdict = check("M5", tb.build())
    assert verdict.status is not Status.FAIL, verdict


def test_m5_a_repeated_answer_matches_any_request_it_was_served_to():
    # A scripted response served twice (a duplicate delivery): the second request carries
    # nothing new, so the answer is served to the same conversation both times.
    tb = TB()
    for _ in range(2):
        rid = tb.request("s1", (USER,))
        tb.stream_end(rid, "end", calls=(W,))
    tb.request("s1", (USER, assistant((W,)), _tool(W)))
    assert check("M5", tb.build()).status is not Status.FAIL


def test_m5_fails_when_the_history_before_an_answer_was_rewritten():
    tb = TB()
    r1 = tb.request("s1", (USER,))
    tb.stream_end(r1, "end", calls=(W,))
    r2 = tb.request("s1", (USER, assistant((W,)), _tool(W)))
    tb.stream_end(r2, "end", text="done")
    later = len(tb.events)
    tb.request("s1", (USER, assistant((W,)), _tool(W, "edited afterwards"), assistant(content="done"),
                      Message("user", "again")))
    assert_fail_at(check("M5", tb.build()), later)


def test_m5_fails_on_an_answer_the_world_never_served_or_with_other_calls():
    for carried in (assistant(content="I already did it"), assistant((W, C2))):
        tb = TB()
        r1 = tb.request("s1", (USER,))
        tb.stream_end(r1, "end", calls=(W,))
        later = len(tb.events)
        tb.request("s1", (USER, carried, _tool(W)))
        verdict = check("M5", tb.build())
        assert_fail_at(verdict, later)
        assert any("never served" in e.note for e in verdict.evidence), verdict.evidence


def test_m5_an_answer_counts_only_once_its_stream_ended():
    tb = TB()
    r1 = tb.request("s1", (USER,), instance=1)
    later = len(tb.events)
    tb.request("s1", (USER, assistant((W,)), _tool(W)), instance=2)
    tb.stream_end(r1, "end", calls=(W,), instance=1)
    assert_fail_at(check("M5", tb.build()), later)


def test_m5_incomplete_text_must_be_what_the_stream_served():
    for kept, fails in (("the numbers grew by", False), ("the numbers grew by 40%", True)):
        tb = TB()
        r1 = tb.request("s1", (USER,))
        tb.stream_end(r1, "transport_error", text="the numbers grew by")
        later = len(tb.events)
        tb.request("s1", (USER, assistant(content=kept, incomplete=True), Message("user", "again")))
        verdict = check("M5", tb.build())
        assert (verdict.status is Status.FAIL) is fails, (kept, verdict)
        if fails:
            assert_fail_at(verdict, later)


def _loaded(tb, fixture_messages, carried):
    tb.call("load_checkpoint", session_id="s1", fixture="v1",
            fixture_content={"format_version": 1, "messages": fixture_messages, "failure_entries": []})
    tb.ret("load_checkpoint")
    first = len(tb.events)
    r1 = tb.request("s1", carried + (Message("user", "continue"),))
    tb.stream_end(r1, "end", text="done")
    second = len(tb.events)
    tb.request("s1", carried + (Message("user", "continue"), assistant(content="done"),
                                Message("user", "again")))
    return first, second


def test_m5_history_loaded_from_a_checkpoint_is_legitimate():
    tb = TB()
    _loaded(tb, [{"role": "user", "content": "old"}, {"role": "assistant", "content": "old answer"}],
            (Message("user", "old"), assistant(content="old answer")))
    assert check("M5", tb.build()).status is not Status.FAIL


def test_m5_an_assistant_message_the_loaded_checkpoint_does_not_hold_fails():
    tb = TB()
    first, second = _loaded(tb, [{"role": "user", "content": "old"}],
                            (Message("user", "old"), assistant(content="invented answer")))
    verdict = check("M5", tb.build())
    assert_fail_at(verdict, first)
    assert_fail_at(verdict, second)


def test_m5_without_a_load_an_old_answer_is_not_history():
    tb = TB()
    tb.request("s1", (Message("user", "old"), assistant(content="old answer"), Message("user", "continue")))
    assert check("M5", tb.build()).status is Status.FAIL


# --------------------------------------------------------------------------- M5: what the user said


def _turn_reaching_the_model(tb, said, carried):
    """A turn call saying ``said`` whose first request carries ``carried`` as its messages."""
    call = tb.call("run_turn", session_id="s1", user_text=said)
    tb.respond("s1", (), text="ok", messages=carried)
    request = len(tb.events) - 2
    tb.ret("run_turn", {"session_id": "s1", "status": "completed", "final_text": "ok"})
    return call, request


def test_m5_passes_when_each_turn_tells_the_model_what_the_user_said():
    tb = TB()
    _turn_reaching_the_model(tb, "go", (Message("user", "go"),))
    _turn_reaching_the_model(tb, "and then?", (Message("user", "go"), Message("assistant", "ok"),
                                               Message("user", "and then?")))
    verdict = check("M5", tb.build())
    assert verdict.status is not Status.FAIL, verdict.evidence


def test_m5_fails_when_the_turn_reaches_the_model_without_the_users_words():
    tb = TB()
    call, request = _turn_reaching_the_model(tb, "delete the branch", (Message("user", ""),))
    verdict = check("M5", tb.build())  # not judged before user_messages
    assert_fail_at(verdict, request)
    assert any("not told what the user said" in e.note and call in e.trace_indexes
               for e in verdict.evidence), verdict.evidence


def test_m5_fails_on_a_user_message_the_user_never_sent():
    tb = TB()
    _, request = _turn_reaching_the_model(tb, "go", (Message("user", "go"), Message("user", "go")))
    verdict = check("M5", tb.build())
    assert_fail_at(verdict, request)
    assert any("never sent" in e.note for e in verdict.evidence), verdict.evidence
