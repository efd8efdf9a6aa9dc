"""M5: a tool call only a stream ended by EOF, a transport error or a cancellation emitted is
never taken up (harness/criteria/unfinished_stream_calls.py), on hand-built traces."""

from __future__ import annotations

import pytest

from harness.contract import Observation, Outcome, ToolCall
from harness.criteria import m
from harness.criteria import unfinished_stream_calls as U
from harness.criteria.base import Status, run_check
from harness.trace.record import Kind

try:
    from .lbuilder import TB, USER, denied, op, xid
except ImportError:  # collected without a package
    from lbuilder import TB, USER, denied, op, xid

M5 = next(c for c in m.CRITERIA if c.id == "M5")
W = ToolCall("c1", "write_file", {"path": "/repo/report.txt", "content": "q3"})
W_OTHER_ARGS = ToolCall("c1", "write_file", {"path": "/repo/report.txt", "content": "q4"})
RAISES = {"transport_error": "ModelTransportError", "cancelled": "ModelStreamCancelled"}


def _turn_with_stream(tb, how, calls=(W,), session="s1", text="Writing"):
    """One run_turn whose only request's stream ends ``how`` after emitting ``calls``; the
    index of the stream's end."""
    tb.call("run_turn", session_id=session, user_text="go")
    rid = tb.request(session, (USER,))
    end = tb.stream_end(rid, how, text, calls)
    if how in RAISES:
        tb.raised("run_turn", RAISES[how])
    else:
        tb.ret("run_turn", {"session_id": session, "status": "completed" if how == "end" else "incomplete"})
    return end


def _next_turn(tb, session="s1"):
    """The run goes on: another run_turn of the session begins; its call index."""
    return tb.call("run_turn", session_id=session, user_text="go")


def _reading(tb):
    return U.unfinished_calls_never_taken(tb.build())


def assert_m5_fails_at(tb, *indexes, ledger_seq=None):
    verdict = run_check(M5, tb.build())
    assert verdict.status is Status.FAIL, verdict
    evidence = [e for e in verdict.evidence if "unfinished request" in e.note]
    assert evidence, verdict.evidence
    assert set(indexes) <= set(evidence[0].trace_indexes), evidence
    if ledger_seq is not None:
        assert evidence[0].ledger_rows == (ledger_seq,), evidence


def assert_m5_passes(tb):
    verdict = run_check(M5, tb.build())
    assert verdict.status is Status.PASS, verdict
    return verdict


# --------------------------------------------------------------------------- must pass


@pytest.mark.parametrize("how", ["eof", "transport_error", "cancelled"])
def test_a_call_of_an_unfinished_stream_that_nothing_runs_passes_and_is_exercised(how):
    tb = TB()
    _turn_with_stream(tb, how)
    _next_turn(tb)
    tb.respond("s1", messages=(USER, USER), text="I will wait.")
    tb.ret("run_turn", {"session_id": "s1", "status": "completed"})
    tb.observe("final", Observation())
    reading = _reading(tb)
    assert reading.exercised == 1 and reading.taken == ()
    assert_m5_passes(tb)


def test_a_call_the_model_reissues_in_a_completed_answer_runs():
    tb = TB()
    _turn_with_stream(tb, "eof")
    _next_turn(tb)
    rid = tb.request("s1", (USER, USER))
    tb.stream_end(rid, "end", "Writing it again", (W,))
    tb.executed("s1", W)
    tb.observe("quiescent", Observation(operations=(op(W),)))
    reading = _reading(tb)
    assert reading.exercised == 1 and reading.taken == (), reading
    assert_m5_passes(tb)


def test_the_same_call_id_in_another_session_runs():
    tb = TB()
    _turn_with_stream(tb, "eof", session="s1")
    _next_turn(tb, session="s2")
    rid = tb.request("s2", (USER,))
    tb.stream_end(rid, "end", "", (W,))
    tb.executed("s2", W)
    tb.observe("quiescent", Observation(operations=(op(W, "s2"),)))
    _next_turn(tb, session="s1")
    reading = _reading(tb)
    assert reading.exercised == 1 and reading.taken == (), reading


def test_an_operation_of_an_earlier_completed_answer_is_not_the_unfinished_streams():
    # c1 ran for a completed answer; a later stream emitted c1 again and ended by EOF: the
    # operation already in the store, and its row, are the completed answer's.
    tb = TB()
    _turn_with_stream(tb, "end", calls=(W,))
    tb.executed("s1", W)
    tb.observe("quiescent", Observation(operations=(op(W),)))
    _turn_with_stream(tb, "eof", calls=(W,))
    _next_turn(tb)
    tb.observe("final", Observation(operations=(op(W),)))
    assert _reading(tb).taken == ()


def test_only_the_hard_case_exercises_the_rule():
    tb = TB()  # calls, but the run stops there: no chance to run them
    _turn_with_stream(tb, "eof")
    assert _reading(tb).exercised == 0
    tb = TB()  # the run goes on, but the stream emitted no call
    _turn_with_stream(tb, "eof", calls=())
    _next_turn(tb)
    assert _reading(tb).exercised == 0
    tb = TB()  # a completed stream's calls are not the hard case
    _turn_with_stream(tb, "end")
    _next_turn(tb)
    assert _reading(tb).exercised == 0
    tb = TB()  # a turn of another session gives this one's calls no chance
    _turn_with_stream(tb, "eof", session="s1")
    _next_turn(tb, session="s2")
    assert _reading(tb).exercised == 0
    tb = TB()  # a recovery does, whatever the session
    _turn_with_stream(tb, "eof")
    tb.restart()
    tb.call("recover")
    assert _reading(tb).exercised == 1


# --------------------------------------------------------------------------- must fail


@pytest.mark.parametrize("how", ["eof", "transport_error", "cancelled"])
def test_a_call_executed_after_its_stream_ended_unfinished_fails(how):
    tb = TB()
    end = _turn_with_stream(tb, how)
    _next_turn(tb)
    row = tb.executed("s1", W)
    reading = _reading(tb)
    assert [(t.where, t.index, t.emission.stream.index) for t in reading.taken] == [("ledger", row, end)]
    assert how in reading.taken[0].note
    assert_m5_fails_at(tb, end, row, ledger_seq=1)


def test_a_call_executed_at_recovery_after_a_crash_fails():
    tb = TB()
    tb.call("run_turn", session_id="s1", user_text="go")
    rid = tb.request("s1", (USER,))
    end = tb.stream_end(rid, "eof", "Writing", (W,))
    tb.failpoint("after_model_stream_ended", "crash", {"session_id": "s1", "request_id": rid})
    tb.crash("after_model_stream_ended")
    tb.restart()
    tb.call("recover")
    tb.emit("model_request_ended", request_id=rid, status="incomplete", interrupted=True)
    row = tb.executed("s1", W)
    tb.ret("recover", {"turns_resumed": ["s1"]})
    assert _reading(tb).exercised == 1
    assert_m5_fails_at(tb, end, row, ledger_seq=1)


def test_a_call_recorded_as_an_operation_without_a_ledger_row_fails():
    tb = TB()
    end = _turn_with_stream(tb, "eof")
    _next_turn(tb)
    at = tb.observe("quiescent", Observation(operations=(denied(W),)))
    reading = _reading(tb)
    assert [(t.where, t.index, t.row) for t in reading.taken] == [("store", at, None)]
    assert "not_started" in reading.taken[0].note
    assert_m5_fails_at(tb, end, at)


def test_a_refusal_to_start_is_an_attempt_to_run_the_call():
    tb = TB()
    end = _turn_with_stream(tb, "transport_error")
    _next_turn(tb)
    refusal = tb.add(Kind.TOOL_UNAVAILABLE, {
        "session_id": "s1", "tool_call_id": "c1", "execution_id": xid("c1"), "tool": W.tool,
        "args": W.args, "reason": "unavailable"})
    assert [(t.where, t.index, t.row) for t in _reading(tb).taken] == [("ledger", refusal, None)]
    assert_m5_fails_at(tb, end, refusal)


def test_a_run_before_the_model_reissued_the_call_is_the_unfinished_streams():
    tb = TB()
    end = _turn_with_stream(tb, "eof")
    _next_turn(tb)
    row = tb.executed("s1", W)  # settled as "pending" before the model was asked again
    rid = tb.request("s1", (USER, USER))
    tb.stream_end(rid, "end", "Writing it again", (W,))
    assert_m5_fails_at(tb, end, row, ledger_seq=1)


def test_a_reissued_id_with_other_arguments_does_not_cover_the_unfinished_ones():
    tb = TB()
    end = _turn_with_stream(tb, "eof", calls=(W,))
    _next_turn(tb)
    rid = tb.request("s1", (USER, USER))
    tb.stream_end(rid, "end", "Writing a new version", (W_OTHER_ARGS,))
    stale = tb.executed("s1", W)
    reading = _reading(tb)
    assert [t.index for t in reading.taken] == [stale]
    assert "with other arguments" in reading.taken[0].note
    assert_m5_fails_at(tb, end, stale)

    tb = TB()  # the completed answer's own arguments run
    _turn_with_stream(tb, "eof", calls=(W,))
    _next_turn(tb)
    rid = tb.request("s1", (USER, USER))
    tb.stream_end(rid, "end", "Writing a new version", (W_OTHER_ARGS,))
    tb.executed("s1", W_OTHER_ARGS)
    assert _reading(tb).taken == ()


def test_each_taken_call_is_reported_once_per_record_kind():
    tb = TB()
    _turn_with_stream(tb, "eof")
    _next_turn(tb)
    prepared = tb.observe("probe", Observation(operations=(op(W, outcome=Outcome.NOT_STARTED),)))
    first = tb.executed("s1", W)
    tb.executed("s1", W)
    tb.observe("final", Observation(operations=(op(W),)))
    taken = _reading(tb).taken
    assert sorted((t.where, t.index) for t in taken) == [("ledger", first), ("store", prepared)]
