"""Stage X criteria on hand-built traces: each must pass, fail with evidence, or stay idle."""

from __future__ import annotations

from typing import Any

import hashlib
import json

from harness.contract import Outcome, Permission, Projection, RecoveryAction, execution_id_for
from harness.criteria import x
from harness.criteria.base import Status
from harness.trace.record import trace_from_json, trace_to_json

from tracebuilder import (
    TraceBuilder,
    all_indexes,
    all_rows,
    assistant,
    call,
    op_view,
    session,
    tool_result,
    user,
    verdict_of,
)

W = {"path": "/repo/a.txt", "content": "x"}
RM = {"command": "rm -rf build", "description": "clean"}


def v(criterion_id, trace):
    return verdict_of(x.CRITERIA, criterion_id, trace)


def test_criteria_ids_and_stage():
    assert [c.id for c in x.CRITERIA] == ["X1", "X2", "X3", "X4", "X5", "X6"]
    assert {c.stage for c in x.CRITERIA} == {"x"}
    assert all(c.seed_clause and c.statement for c in x.CRITERIA)


def _allowed_and_denied():
    """c1 write allowed and executed; c2 Bash denied by an explicit rule; loop continues."""
    b = TraceBuilder(session("s1", rules=[("allow", "write_file"), ("deny", "Bash", "rm *", "command")]),
                     tools=[("write_file", "write"), ("Bash", "bash")])
    b.turn("s1")
    b.model("s1", [call("c1", "write_file", W)])
    row = b.executed("s1", "c1", "write_file", W)
    b.probe("tool_executed", op_view("s1", "c1", "write_file", W, outcome="not_started",
                                     execution_started=True, delivery="pending"), at=row)
    b.model("s1", [call("c2", "Bash", RM)],
            messages=[user(), assistant(call("c1", "write_file", W)), tool_result("c1", "succeeded")])
    denied = op_view("s1", "c2", "Bash", RM, permission="deny", failure_kind="permission_denied")
    b.publish(_shown("c1", "allow", "succeeded", "succeeded"))
    b.publish(_shown("c2", "deny", "not_started", "denied", ("change_rules",), reason="rm is denied"))
    b.observe(op_view("s1", "c1", "write_file", W), denied)
    return b, row


def _shown(call_id, permission, outcome, status, actions=(), reason="", session_id="s1"):
    return Projection(session_id, execution_id_for(session_id, call_id), call_id, Permission(permission),
                      Outcome(outcome), status, reason, tuple(RecoveryAction(a) for a in actions))


# --------------------------------------------------------------------------- X1


def test_x1_passes_on_independent_states():
    b, _ = _allowed_and_denied()
    verdict = v("X1", b.build())
    assert verdict.status is Status.PASS and verdict.exercised == 2


def test_x1_fails_when_a_denial_is_recorded_as_failed():
    b = TraceBuilder("s1")
    b.model("s1", [call("c2", "Bash", RM)])
    point = b.observe(op_view("s1", "c2", "Bash", RM, permission="deny", outcome="failed",
                              execution_started=False))
    verdict = v("X1", b.build())
    assert verdict.status is Status.FAIL
    assert point in all_indexes(verdict)
    assert "pre-call denial" in verdict.evidence[0].note


def test_x1_fails_when_outcome_claims_a_run_the_ledger_never_saw():
    b = TraceBuilder("s1")
    b.model("s1", [call("c1", "write_file", W)])
    point = b.observe(op_view("s1", "c1", "write_file", W, outcome="succeeded"))
    verdict = v("X1", b.build())
    assert verdict.status is Status.FAIL and point in all_indexes(verdict)


def test_x1_fails_when_a_tool_that_could_not_start_is_recorded_as_failed():
    b = TraceBuilder("s1")
    b.model("s1", [call("c1", "write_file", W)])
    b.unavailable("s1", "c1", "write_file", W)
    point = b.observe(op_view("s1", "c1", "write_file", W, outcome="failed",
                              failure_kind="transient", execution_started=False))
    verdict = v("X1", b.build())
    assert verdict.status is Status.FAIL and point in all_indexes(verdict)


def test_x1_passes_when_a_tool_that_could_not_start_stays_not_started():
    b = TraceBuilder("s1")
    b.model("s1", [call("c1", "write_file", W)])
    b.unavailable("s1", "c1", "write_file", W)
    b.observe(op_view("s1", "c1", "write_file", W, outcome="not_started", delivery="recorded",
                      failure_kind="transient", execution_started=False))
    assert v("X1", b.build()).status is Status.PASS


def test_x1_not_exercised_without_observed_operations():
    b = TraceBuilder("s1")
    b.model("s1", [call("c1", "write_file", W)])
    b.executed("s1", "c1", "write_file", W)
    assert v("X1", b.build()).status is Status.NOT_EXERCISED


# --------------------------------------------------------------------------- X2


def _stale_answer_after_another_instance(moved_on: bool) -> Any:
    """Instance 2 sends its request first (the conversation moved on by a second user
    message when ``moved_on``); instance 1's request, started earlier and held, reaches the
    world later with the first stage of the conversation and is answered c9, which
    instance 1 drops; only c1 has a record."""
    r = {"path": "/repo/a.txt"}
    b = TraceBuilder("s1", tools=[("read_file", "read")])
    b.turn("s1")
    b.instance = 2
    b.model("s1", [call("c1", "read_file", r)],
            messages=[user(), user("again")] if moved_on else [user()])
    b.executed("s1", "c1", "read_file", r)
    b.instance = 1
    b.model("s1", [call("c9", "read_file", r)], messages=[user()])
    b.model("s1", messages=[user(), user("again"), assistant(call("c1", "read_file", r)),
                            tool_result("c1")])
    b.turn_returns("s1", "completed")
    b.observe(op_view("s1", "c1", "read_file", r, outcome="succeeded"))
    return b.build()


def test_x2_a_stale_answer_sent_late_after_another_instance_moved_on_is_excused():
    """Found by generation (seed 102): a concurrent turn held after its request's start
    sends the old conversation once the other instance has finished the turn; the answer
    to that gone conversation is dropped, and no record of its call is owed."""
    verdict = v("X2", _stale_answer_after_another_instance(moved_on=True))
    assert verdict.status is not Status.FAIL, [e.note for e in verdict.evidence]


def test_x2_a_dropped_answer_the_other_instance_did_not_move_past_fails():
    """The other instance's earlier request is an older stage of the same conversation: it
    moved nothing on, so dropping c9 loses a call the model made."""
    verdict = v("X2", _stale_answer_after_another_instance(moved_on=False))
    assert verdict.status is Status.FAIL
    assert any("c9" in e.note and "no record" in e.note for e in verdict.evidence)


def test_x2_passes_when_a_duplicate_delivery_maps_to_one_record():
    b = TraceBuilder(session("s1", rules=[("allow", "write_file")]))
    b.model("s1", [call("c1", "write_file", W)])
    b.executed("s1", "c1", "write_file", W)
    b.model("s1", [call("c1", "write_file", W)])  # served again (repeat = 2)
    b.model("s1")
    b.observe(op_view("s1", "c1", "write_file", W))
    verdict = v("X2", b.build())
    assert verdict.status is Status.PASS and verdict.exercised == 1


def test_x2_fails_on_two_records_for_one_call():
    b = TraceBuilder("s1")
    b.model("s1", [call("c1", "write_file", W)])
    b.model("s1", [call("c1", "write_file", W)])
    first = op_view("s1", "c1", "write_file", W)
    second = op_view("s1", "c1", "write_file", W, execution_id="ex-other")
    point = b.observe(first, second)
    verdict = v("X2", b.build())
    assert verdict.status is Status.FAIL and point in all_indexes(verdict)
    assert any("2 operation records" in e.note for e in verdict.evidence)


def test_x2_fails_when_the_digest_is_not_over_the_emitted_args():
    b = TraceBuilder("s1")
    end = b.model("s1", [call("c1", "write_file", W)])[1]
    tampered = {"path": "/repo/a.txt", "content": "y"}
    row = b.executed("s1", "c1", "write_file", tampered)
    b.observe(op_view("s1", "c1", "write_file", tampered))
    verdict = v("X2", b.build())
    assert verdict.status is Status.FAIL
    assert end in all_indexes(verdict) and b.seq(row) in all_rows(verdict)


FLOATS = {"ratio": 1.0, "tiny": 1.5e-7, "zero": -0.0, "huge": 1e21,
          "keys": {"\U0001F600": 1, "\ue000": 2}}


def _float_args(digest: str | None):
    b = TraceBuilder(session("s1", rules=[("allow", "record")]))
    b.model("s1", [call("c1", "record", FLOATS)])
    b.executed("s1", "c1", "record", FLOATS)
    b.model("s1", [call("c1", "record", FLOATS)])  # delivered again: X2 judges the identity
    b.model("s1")
    point = b.observe(op_view("s1", "c1", "record", FLOATS, digest=digest))
    return b.build(), point


def test_x2_judges_the_args_digest_over_rfc_8785_not_another_canonical_form():
    # docs/contract.md, "Canonical JSON": the digest of args with floats and names past
    # U+FFFF is over RFC 8785 (1.0 is 1, 1.5e-7 is 1.5e-7, -0.0 is 0, UTF-16 key order);
    # the same args digested over Python's json.dumps text (the contract's old form) fail
    assert v("X2", _float_args(None)[0]).status is Status.PASS
    old = json.dumps({"args": FLOATS, "tool": "record"}, sort_keys=True, separators=(",", ":"),
                     ensure_ascii=False)
    assert "1.0" in old and "1.5e-07" in old and "-0.0" in old  # the other form indeed
    python_style = "sha256:" + hashlib.sha256(old.encode("utf-8")).hexdigest()
    trace, point = _float_args(python_style)
    verdict = v("X2", trace)
    assert verdict.status is Status.FAIL and point in all_indexes(verdict)
    assert f"args digest {python_style!r} is not" in verdict.evidence[0].note


def test_x2_fails_on_a_wrong_execution_id_and_unknown_version():
    b = TraceBuilder("s1")
    b.model("s1", [call("c1", "write_file", W)])
    point = b.observe(op_view("s1", "c1", "write_file", W, outcome="not_started",
                              execution_id="ex-made-up", permission_version=7))
    verdict = v("X2", b.build())
    notes = " ".join(e.note for e in verdict.evidence)
    assert verdict.status is Status.FAIL and "execution id" in notes and "version 7" in notes
    assert all(point in e.trace_indexes for e in verdict.evidence)


def test_x2_reports_a_bad_view_object_shared_by_several_readings_at_each_of_them():
    # successive readings of a store share view and observation objects; each reading that
    # holds a bad record is still reported (the checks remember only views that passed)
    b = TraceBuilder("s1")
    b.model("s1", [call("c1", "write_file", W)])
    bad = op_view("s1", "c1", "write_file", W, outcome="not_started", execution_id="ex-made-up")
    good = op_view("s1", "c1", "write_file", W, outcome="not_started")
    first = b.observe(bad)
    second = b.observe(good)
    third = b.observe(bad)  # the same object again, after a good one
    duplicate = op_view("s1", "c1", "write_file", W, execution_id="ex-other")
    twice = b.observe(good, duplicate)
    b.points.append(type(b.points[-1])(b.add("observed", {"label": "again"}), "again",
                                       b.points[-1].observation))  # one observation object twice
    again = b.last
    verdict = v("X2", b.build())
    by_point = {i: [e.note for e in verdict.evidence if i in e.trace_indexes]
                for i in (first, second, third, twice, again)}
    assert verdict.status is Status.FAIL
    assert any("execution id 'ex-made-up', expected" in n for n in by_point[first])
    assert any("execution id 'ex-made-up', expected" in n for n in by_point[third])
    assert not any("execution id 'ex-made-up', expected" in n for n in by_point[second])
    assert any("2 operation records" in n for n in by_point[twice])
    assert any("2 operation records" in n for n in by_point[again])


def test_x1_reads_the_ledger_up_to_each_reading_in_and_out_of_index_order():
    b = TraceBuilder(session("s1", rules=[("allow", "write_file")]), tools=[("write_file", "write")])
    b.model("s1", [call("c1", "write_file", W)])
    early = b.observe(op_view("s1", "c1", "write_file", W, outcome="not_started",
                              delivery="recorded"))
    b.executed("s1", "c1", "write_file", W)
    late = b.observe(op_view("s1", "c1", "write_file", W, outcome="not_started",
                             delivery="recorded"))
    verdict = v("X1", b.build())
    assert verdict.status is Status.FAIL
    shows = [e.trace_indexes for e in verdict.evidence if "ledger shows its execution" in e.note]
    assert shows == [(late, late - 1)] and early < late - 1  # the row came between them
    events = (type("E", (), {"index": i})() for i in (5, 3, 9))
    up_to = x._up_to(tuple(events))  # out of order: filtered, not bisected
    assert [e.index for e in up_to(4)] == [3] and [e.index for e in up_to(9)] == [5, 3, 9]
    ordered = tuple(type("E", (), {"index": i})() for i in (1, 4, 4, 8))
    assert [e.index for e in x._up_to(ordered)(4)] == [1, 4, 4]
    assert list(x._up_to(ordered)(0)) == []


def test_x2_fails_when_a_served_call_has_no_record():
    b = TraceBuilder("s1")
    end = b.model("s1", [call("c1", "write_file", W)])[1]
    b.model("s1")
    point = b.observe()
    verdict = v("X2", b.build())
    assert verdict.status is Status.FAIL and {end, point} <= all_indexes(verdict)


def test_x2_excuses_a_missing_record_after_a_crash():
    b = TraceBuilder("s1")
    b.model("s1", [call("c1", "write_file", W)])
    b.crash("after_model_stream_ended")
    b.restart()
    b.model("s1", [call("c9", "write_file", W)])
    b.model("s1", [call("c9", "write_file", W)])  # delivered twice: the hard case
    b.observe(op_view("s1", "c9", "write_file", W, outcome="not_started"))
    verdict = v("X2", b.build())
    assert verdict.status is Status.PASS and verdict.exercised == 1


def _answer_lost_a_race(*, other_instance: bool, carried: bool):
    """Instance 1's request serves c1; then a request of the same session (from another
    instance, or from instance 1 again) is sent with a conversation that does or does not
    hold c1; the final store has no record of c1."""
    b = TraceBuilder("s1")
    end = b.model("s1", [call("c1", "write_file", W)])[1]
    if other_instance:
        b.instance = 2
    messages = (user(), assistant(call("c1", "write_file", W))) if carried else (user(),)
    b.model("s1", [call("c2", "write_file", W)], messages=messages)
    point = b.observe(op_view("s1", "c2", "write_file", W))
    return b.build(), end, point


def test_x2_excuses_an_answer_that_lost_a_race_with_another_instance():
    trace, _, _ = _answer_lost_a_race(other_instance=True, carried=False)
    assert v("X2", trace).status is not Status.FAIL


def test_x2_fails_when_the_same_instance_asks_again_without_the_call():
    trace, end, point = _answer_lost_a_race(other_instance=False, carried=False)
    verdict = v("X2", trace)
    assert verdict.status is Status.FAIL and {end, point} <= all_indexes(verdict)


def test_x2_fails_when_the_other_instance_carries_the_call_it_never_recorded():
    trace, end, point = _answer_lost_a_race(other_instance=True, carried=True)
    verdict = v("X2", trace)
    assert verdict.status is Status.FAIL and {end, point} <= all_indexes(verdict)


def _second_call_behind_a_wait(answered: bool):
    """One response, two calls; the first waits for the owner, the second is not reached."""
    b = TraceBuilder("s1")
    end = b.model("s1", [call("c1", "write_file", W), call("c2", "write_file", RM)])[1]
    wait_id = b.prompt("s1", "c1", "write_file", W)
    b.turn_returns("s1", "awaiting_approval")
    if answered:
        b.answer(wait_id)
    point = b.observe(op_view("s1", "c1", "write_file", W, permission="ask", outcome="not_started",
                              delivery="pending"))
    return b.build(), end, point


def test_x2_excuses_a_call_behind_an_unanswered_wait_of_the_same_response():
    trace, _, _ = _second_call_behind_a_wait(answered=False)
    # excused, so no violation; nothing here is X2's hard case (a redelivery or a read-back
    # after a restart), so it is not exercised either
    assert v("X2", trace).status is Status.NOT_EXERCISED


def test_x2_fails_a_call_lost_after_the_wait_was_answered():
    trace, end, point = _second_call_behind_a_wait(answered=True)
    verdict = v("X2", trace)
    assert verdict.status is Status.FAIL and {end, point} <= all_indexes(verdict)
    assert "c2" in " ".join(e.note for e in verdict.evidence)


def test_x2_reads_args_from_assistant_echo_when_stream_has_no_tool_calls():
    b = TraceBuilder("s1")
    b.model("s1", [call("c1", "write_file", W)], with_tool_calls=False)
    b.executed("s1", "c1", "write_file", {"path": "/repo/a.txt", "content": "other"})
    b.model("s1", messages=[user(), assistant(call("c1", "write_file", W))])
    b.observe(op_view("s1", "c1", "write_file", W))
    assert v("X2", b.build()).status is Status.FAIL


def test_x2_not_exercised_on_an_empty_trace():
    assert v("X2", TraceBuilder("s1").build()).status is Status.NOT_EXERCISED


def _conversation(*later_messages):
    """c1 served, executed and answered; then a request carrying ``later_messages`` after
    [user, assistant(c1)]; returns (trace, that request's index)."""
    b = TraceBuilder("s1")
    b.model("s1", [call("c1", "write_file", W)])
    b.executed("s1", "c1", "write_file", W)
    b.observe(op_view("s1", "c1", "write_file", W))
    request = b.model("s1", messages=[user(), assistant(call("c1", "write_file", W)), *later_messages])[0]
    return b.build(), request


def test_x2_one_result_per_call_in_the_conversation_passes():
    trace, _ = _conversation(tool_result("c1"))
    assert v("X2", trace).status is not Status.FAIL


def test_x2_fails_when_the_model_is_told_a_call_returned_twice():
    # The recovery-refolds-projected-results mutant's shape.
    trace, request = _conversation(tool_result("c1"), tool_result("c1"))
    verdict = v("X2", trace)
    assert verdict.status is Status.FAIL and request in all_indexes(verdict)
    assert "two tool messages for call 'c1'" in verdict.evidence[0].note


def test_x2_fails_on_a_result_for_a_call_the_conversation_does_not_hold():
    trace, request = _conversation(tool_result("c1"), tool_result("c9"))
    verdict = v("X2", trace)
    assert verdict.status is Status.FAIL and request in all_indexes(verdict)
    assert "no assistant message before it emitted" in verdict.evidence[0].note


def test_x2_a_call_delivered_again_is_answered_again_after_its_second_delivery():
    c1 = call("c1", "write_file", W)
    trace, _ = _conversation(tool_result("c1"), assistant(c1), tool_result("c1"))
    assert v("X2", trace).status is not Status.FAIL


def test_x2_history_loaded_from_a_checkpoint_is_not_judged_for_its_results():
    for loaded in (True, False):
        b = TraceBuilder("s1")
        if loaded:
            b.driver("load_checkpoint", session_id="s1", fixture="v1")
            b.returned("load_checkpoint")
        old = [user("old"), tool_result("c0"), tool_result("c0")]
        b.model("s1", messages=[*old, user("continue")])
        b.model("s1", messages=[*old, user("continue"), assistant(text="done"), user("again")])
        assert (v("X2", b.build()).status is Status.FAIL) is not loaded


# --------------------------------------------------------------------------- X3


def test_x3_passes_when_the_denial_goes_back_to_the_model():
    b, _ = _allowed_and_denied()
    b.model("s1", messages=[user(), tool_result("c1"), tool_result("c2", "not_started", "permission_denied",
                                                                   "not executed: rm is denied")])
    b.turn_returns("s1", "completed")
    verdict = v("X3", b.build())
    assert verdict.status is Status.PASS and verdict.exercised == 1


def test_x3_fails_when_the_next_request_lacks_the_denial():
    b, _ = _allowed_and_denied()
    request = b.model("s1", messages=[user(), tool_result("c1")])[0]
    verdict = v("X3", b.build())
    assert verdict.status is Status.FAIL and request in all_indexes(verdict)


def test_x3_fails_when_the_denial_reaches_the_model_as_failed():
    b, _ = _allowed_and_denied()
    b.model("s1", messages=[user(), tool_result("c2", "failed", "permission_denied")])
    verdict = v("X3", b.build())
    assert verdict.status is Status.FAIL and "'failed'" in verdict.evidence[0].note


def test_x3_fails_when_the_turn_completes_at_the_denial():
    b, _ = _allowed_and_denied()
    ret = b.turn_returns("s1", "completed")
    verdict = v("X3", b.build())
    assert verdict.status is Status.FAIL and ret in all_indexes(verdict)


def _denial_told(content, *, published=True, saved_reason="rm is denied"):
    """c2 Bash denied by a rule (UI shown "rm is denied" when ``published``, the store read
    before the next request keeps ``saved_reason``), then the next request tells the model
    ``content``."""
    b = TraceBuilder(session("s1", rules=[("deny", "Bash", "rm *", "command")]), tools=[("Bash", "bash")])
    b.turn("s1")
    b.model("s1", [call("c2", "Bash", RM)])
    if published:
        b.publish(_shown("c2", "deny", "not_started", "denied", ("change_rules",), reason="rm is denied"))
    b.observe(op_view("s1", "c2", "Bash", RM, permission="deny", failure_kind="permission_denied",
                      reason=saved_reason, delivery="projected" if published else "recorded"))
    request = b.model("s1", messages=[user(), assistant(call("c2", "Bash", RM)),
                                      tool_result("c2", "not_started", "permission_denied", content)])[0]
    return b.build(), request


def test_x3_passes_when_the_model_is_told_why_in_its_own_words():
    for content in ("not executed: rm is denied", "Blocked.  rm is\ndenied -- change the rules first"):
        trace, _ = _denial_told(content)
        assert v("X3", trace).status is Status.PASS, content


def test_x3_fails_when_the_denial_reaches_the_model_without_its_reason():
    # The denial-reason-withheld-from-model mutant's shape: the UI says why, the model is
    # told only that the call did not run.
    trace, request = _denial_told("not executed")
    verdict = v("X3", trace)
    assert verdict.status is Status.FAIL and request in all_indexes(verdict)
    assert "not told why" in verdict.evidence[0].note and "rm is denied" in verdict.evidence[0].note


def test_x3_without_a_publication_the_saved_reason_must_reach_the_model():
    trace, _ = _denial_told("not executed: rm is denied", published=False)
    assert v("X3", trace).status is Status.PASS
    trace, request = _denial_told("not executed", published=False)
    verdict = v("X3", trace)
    assert verdict.status is Status.FAIL and request in all_indexes(verdict)
    assert "the host recorded" in verdict.evidence[0].note


def test_x3_with_no_reason_anywhere_the_tool_message_must_still_say_something():
    trace, _ = _denial_told("not executed", published=False, saved_reason="")
    assert v("X3", trace).status is Status.PASS  # nothing to compare with: L1.7/L5.4 judge the reason
    trace, request = _denial_told("  ", published=False, saved_reason="")
    verdict = v("X3", trace)
    assert verdict.status is Status.FAIL and request in all_indexes(verdict)


def test_x3_not_exercised_without_denials():
    b = TraceBuilder("s1")
    b.model("s1", [call("c1", "write_file", W)])
    b.executed("s1", "c1", "write_file", W)
    b.observe(op_view("s1", "c1", "write_file", W))
    assert v("X3", b.build()).status is Status.NOT_EXERCISED


# --------------------------------------------------------------------------- X4

CHARGE = {"card": "tok", "amount_cents": 999}


def _charge(b: TraceBuilder) -> None:
    b.turn("s1")
    b.model("s1", [call("c1", "charge", CHARGE)])


def test_x4_passes_after_a_crash_between_start_and_result():
    b = TraceBuilder("s1")
    _charge(b)
    b.crash("after_start_recorded", context={"tool_call_id": "c1", "session_id": "s1"})
    b.restart()
    b.observe(op_view("s1", "c1", "charge", CHARGE, outcome="unknown", execution_started=True,
                      reconciliation_required=True, delivery="projected"), label="after_restart")
    verdict = v("X4", b.build())
    assert verdict.status is Status.PASS and verdict.exercised == 1


def test_x4_passes_when_the_context_names_no_operation():
    b = TraceBuilder("s1")
    _charge(b)
    b.executed("s1", "c1", "charge", CHARGE)
    b.crash("after_tool_returned")
    b.restart()
    b.observe(op_view("s1", "c1", "charge", CHARGE, outcome="unknown", reconciliation_required=True))
    assert v("X4", b.build()).status is Status.PASS


def test_x4_fails_for_a_pre_call_denial():
    b = TraceBuilder("s1")
    _charge(b)
    b.crash("after_permission_decision")
    b.restart()
    point = b.observe(op_view("s1", "c1", "charge", CHARGE, permission="deny",
                              reconciliation_required=True), label="after_restart")
    verdict = v("X4", b.build())
    assert verdict.status is Status.FAIL and point in all_indexes(verdict)


def test_x4_fails_when_a_saved_result_becomes_unknown():
    b = TraceBuilder("s1")
    _charge(b)
    row = b.executed("s1", "c1", "charge", CHARGE)
    saved = b.probe("failpoint:after_result_saved", op_view("s1", "c1", "charge", CHARGE, delivery="recorded"))
    b.crash("after_result_saved", context={"tool_call_id": "c1"})
    b.restart()
    point = b.observe(op_view("s1", "c1", "charge", CHARGE, outcome="unknown", reconciliation_required=True),
                      label="after_restart")
    verdict = v("X4", b.build())
    assert verdict.status is Status.FAIL and {saved, point} <= all_indexes(verdict)
    assert b.seq(row) in all_rows(verdict)


def _escalation_cut_by_a_crash(crash_at: str):
    """A sandboxed attempt's failed result is saved; the approved escalation starts the
    operation again and the instance dies at ``crash_at``; after the restart it is unknown."""
    b = TraceBuilder("s1")
    _charge(b)
    b.executed("s1", "c1", "charge", CHARGE, status="error", escalation_requested=True)
    saved = b.probe("failpoint:after_result_saved", op_view(
        "s1", "c1", "charge", CHARGE, outcome="failed", execution_started=True, delivery="recorded"))
    b.crash(crash_at, context={"tool_call_id": "c1", "session_id": "s1"})
    b.restart()
    point = b.observe(op_view("s1", "c1", "charge", CHARGE, outcome="unknown", execution_started=True,
                              reconciliation_required=True), label="after_restart")
    return b.build(), saved, point


def test_x4_passes_when_a_later_attempt_is_cut_between_its_start_and_result():
    trace, _, _ = _escalation_cut_by_a_crash("after_start_recorded")
    assert v("X4", trace).status is Status.PASS


def test_x4_fails_when_a_crash_after_the_saved_result_makes_it_unknown():
    trace, saved, point = _escalation_cut_by_a_crash("after_checkpoint_saved")
    verdict = v("X4", trace)
    assert verdict.status is Status.FAIL and {saved, point} <= all_indexes(verdict)


def test_x4_fails_without_any_crash_mid_execution():
    b = TraceBuilder("s1")
    _charge(b)
    b.executed("s1", "c1", "charge", CHARGE)
    b.crash("after_result_saved", context={"tool_call_id": "c1"})
    b.restart()
    point = b.observe(op_view("s1", "c1", "charge", CHARGE, outcome="unknown", reconciliation_required=True))
    verdict = v("X4", b.build())
    assert verdict.status is Status.FAIL and point in all_indexes(verdict)


def test_x4_not_exercised_without_reconciliation():
    b = TraceBuilder("s1")
    _charge(b)
    b.observe(op_view("s1", "c1", "charge", CHARGE, permission="deny"))
    assert v("X4", b.build()).status is Status.NOT_EXERCISED


# --------------------------------------------------------------------------- X5

MIG = {"name": "0042"}


def _claims(b: TraceBuilder, started_in_probe: bool = True) -> int:
    b.model("s1", [call("c1", "run_migration", MIG)])
    row = b.executed("s1", "c1", "run_migration", MIG, output="Operation not executed: nothing was changed.")
    b.probe("tool_executed", op_view("s1", "c1", "run_migration", MIG, outcome="not_started",
                                     execution_started=started_in_probe, delivery="pending"), at=row)
    return row


def test_x5_passes_when_the_host_keeps_its_own_record():
    b = TraceBuilder("s1")
    _claims(b)
    b.observe(op_view("s1", "c1", "run_migration", MIG))
    b.model("s1", messages=[user(), tool_result("c1", "succeeded", content="Operation not executed")])
    verdict = v("X5", b.build())
    assert verdict.status is Status.PASS and verdict.exercised == 1


def test_x5_fails_when_the_store_believes_the_tool_text():
    b = TraceBuilder("s1")
    row = _claims(b)
    point = b.observe(op_view("s1", "c1", "run_migration", MIG, outcome="not_started", execution_started=False))
    verdict = v("X5", b.build())
    assert verdict.status is Status.FAIL
    assert {row, point} <= all_indexes(verdict) and b.seq(row) in all_rows(verdict)


def test_x5_fails_when_the_start_was_not_recorded_before_the_tool_ran():
    b = TraceBuilder("s1")
    row = _claims(b, started_in_probe=False)
    b.observe(op_view("s1", "c1", "run_migration", MIG))
    verdict = v("X5", b.build())
    assert verdict.status is Status.FAIL and row in all_indexes(verdict)


def test_x5_fails_when_the_model_is_told_it_did_not_start():
    b = TraceBuilder("s1")
    _claims(b)
    b.observe(op_view("s1", "c1", "run_migration", MIG))
    request = b.model("s1", messages=[user(), tool_result("c1", "not_started")])[0]
    verdict = v("X5", b.build())
    assert verdict.status is Status.FAIL and request in all_indexes(verdict)


def test_x5_not_exercised_without_claims():
    b = TraceBuilder("s1")
    b.model("s1", [call("c1", "run_migration", MIG)])
    b.executed("s1", "c1", "run_migration", MIG, output="done")
    b.observe(op_view("s1", "c1", "run_migration", MIG))
    assert v("X5", b.build()).status is Status.NOT_EXERCISED


# --------------------------------------------------------------------------- X6

STATUS = {"command": "git status"}
PUSH = {"command": "git push --force"}


def _entry_points(execute_push: bool = False, record_decision: bool = True):
    b = TraceBuilder(
        session("s1", interactive=False, rules=[
            ("allow", "terminal", "git status*", "command"),
            ("deny", "terminal", "git push*", "command"),
            ("allow", "read_file"),
        ]),
        tools=[("terminal", "terminal"), ("read_file", "read")],
    )
    b.model("s1", [call("c1", "terminal", STATUS), call("c2", "terminal", PUSH),
                   call("c3", "read_file", {"path": "/a"})])
    if record_decision:
        b.lifecycle("permission_decided", "s1", execution_id_for("s1", "c1"))
    row1 = b.executed("s1", "c1", "terminal", STATUS)
    rows = [row1]
    if execute_push:
        rows.append(b.executed("s1", "c2", "terminal", PUSH))
    rows.append(b.executed("s1", "c3", "read_file", {"path": "/a"}))
    b.probe("tool_executed", op_view("s1", "c3", "read_file", {"path": "/a"}, outcome="not_started",
                                     execution_started=True, delivery="pending"))
    b.observe(
        op_view("s1", "c1", "terminal", STATUS),
        op_view("s1", "c2", "terminal", PUSH, permission="deny"),
        op_view("s1", "c3", "read_file", {"path": "/a"}),
    )
    return b, rows


def test_x6_passes_when_entry_points_pass_the_gates():
    b, _ = _entry_points()
    verdict = v("X6", b.build())
    # the hard case is the terminal call a deny rule stops; allowed runs alone are not
    assert verdict.status is Status.PASS and verdict.exercised == 1


def test_x6_fails_when_a_terminal_call_bypasses_an_explicit_deny():
    b, rows = _entry_points(execute_push=True)
    verdict = v("X6", b.build())
    assert verdict.status is Status.FAIL
    assert rows[1] in all_indexes(verdict) and b.seq(rows[1]) in all_rows(verdict)
    assert verdict.evidence[0].note.startswith("[terminal]")


def test_x6_fails_when_no_decision_was_on_record_before_execution():
    b, rows = _entry_points(record_decision=False)
    verdict = v("X6", b.build())
    assert verdict.status is Status.FAIL and rows[0] in all_indexes(verdict)


def test_x6_not_exercised_with_only_ordinary_tools():
    b = TraceBuilder(session("s1", rules=[("allow", "read_file")]), tools=[("read_file", "read")])
    b.model("s1", [call("c3", "read_file", {"path": "/a"})])
    b.executed("s1", "c3", "read_file", {"path": "/a"})
    assert v("X6", b.build()).status is Status.NOT_EXERCISED


def test_hand_built_traces_round_trip_through_json():
    b, _ = _allowed_and_denied()
    trace = b.build()
    again = trace_from_json(json.loads(json.dumps(trace_to_json(trace))))
    assert again == trace
    assert [c.check(again).status for c in x.CRITERIA] == [c.check(trace).status for c in x.CRITERIA]


def test_x4_counts_an_interrupted_operation_that_stays_honest():
    b = TraceBuilder("s1")
    _charge(b)
    b.crash("after_permission_decision", context={"tool_call_id": "c1", "session_id": "s1"})
    b.restart()
    b.observe(op_view("s1", "c1", "charge", CHARGE, permission="deny"), label="after_restart")
    verdict = v("X4", b.build())
    assert verdict.status is Status.PASS and verdict.exercised == 1


# --------------------------------------------------------------------------- X1: delivery tied to the world


def _saved_write(b, *, delivery="projected", publish=True, publish_before_save=False, outcome="succeeded"):
    b.model("s1", [call("c1", "write_file", W)])
    row = b.executed("s1", "c1", "write_file", W, status="ok" if outcome == "succeeded" else "error",
                     error_kind=None if outcome == "succeeded" else "failed")
    pub = None
    if publish_before_save:
        pub = b.publish(_shown("c1", "allow", outcome, outcome))
        b.probe("ui_publish", op_view("s1", "c1", "write_file", W, outcome="not_started",
                                      execution_started=True, delivery="pending"))
    b.observe(op_view("s1", "c1", "write_file", W, outcome=outcome, delivery="recorded"),
              label="probe:failpoint:after_result_saved")
    if publish and not publish_before_save:
        pub = b.publish(_shown("c1", "allow", outcome, outcome, () if outcome == "succeeded" else ("edit_args",),
                               reason="" if outcome == "succeeded" else "it failed"))
        b.probe("ui_publish", op_view("s1", "c1", "write_file", W, outcome=outcome, delivery="recorded"))
    point = b.observe(op_view("s1", "c1", "write_file", W, outcome=outcome, delivery=delivery))
    return row, pub, point


def test_x1_passes_when_projected_follows_the_save_and_the_publication():
    b = TraceBuilder("s1")
    _saved_write(b)
    verdict = v("X1", b.build())
    assert verdict.status is Status.PASS and verdict.exercised == 2  # the op and the publication


def test_x1_fails_when_projected_was_never_published():
    b = TraceBuilder("s1")
    _, _, point = _saved_write(b, publish=False)
    verdict = v("X1", b.build())
    assert verdict.status is Status.FAIL and point in all_indexes(verdict)
    assert "never received" in verdict.evidence[0].note


def test_x1_fails_when_the_projection_came_before_the_save():
    b = TraceBuilder("s1")
    _, pub, _ = _saved_write(b, publish_before_save=True)
    verdict = v("X1", b.build())
    assert verdict.status is Status.FAIL and pub in all_indexes(verdict)
    assert any("before its result was saved" in e.note for e in verdict.evidence)


def test_x1_fails_when_the_saved_outcome_is_not_the_ledgers():
    b = TraceBuilder("s1")
    b.model("s1", [call("c1", "write_file", W)])
    row = b.executed("s1", "c1", "write_file", W, status="error", error_kind="failed")
    point = b.observe(op_view("s1", "c1", "write_file", W, outcome="succeeded", delivery="recorded"))
    verdict = v("X1", b.build())
    assert verdict.status is Status.FAIL and {row, point} <= all_indexes(verdict)
    assert b.seq(row) in all_rows(verdict)


def test_x1_fails_when_an_allowed_operation_is_saved_not_started_without_a_refusal():
    b = TraceBuilder("s1")
    b.model("s1", [call("c1", "write_file", W)])
    point = b.observe(op_view("s1", "c1", "write_file", W, outcome="not_started", delivery="recorded",
                              execution_started=False))
    verdict = v("X1", b.build())
    assert verdict.status is Status.FAIL and point in all_indexes(verdict)
    assert "only a pre-call denial" in verdict.evidence[0].note


def test_x1_a_store_read_mid_escalation_may_hold_the_previous_runs_result():
    b = TraceBuilder("s1", tools=[("Bash", "bash")])
    args = {"command": "make"}
    b.model("s1", [call("c1", "Bash", args)])
    b.executed("s1", "c1", "Bash", args, status="error", error_kind="permission_denied",
               escalation_requested=True)
    b.executed("s1", "c1", "Bash", args, sandboxed=False)
    b.probe("tool_executed", op_view("s1", "c1", "Bash", args, outcome="failed", delivery="recorded"))
    assert v("X1", b.build()).status is Status.PASS


# --------------------------------------------------------------------------- X6: one retry policy


def _retries(*, web_retries_failure=False, web_skips_transient=False):
    """web_fetch (web, idempotent) and status (read, idempotent) meet a transient error;
    web_post (web) fails definitely."""
    b = TraceBuilder(
        session("s1", rules=[("allow", "web_fetch"), ("allow", "status"), ("allow", "web_post")]),
        tools=[("web_fetch", "web", True), ("status", "read", True), ("web_post", "web")],
    )
    fetch, stat, post = {"url": "https://a"}, {"service": "b"}, {"url": "https://c"}
    b.model("s1", [call("e1", "web_fetch", fetch), call("e2", "status", stat), call("e3", "web_post", post)])
    rows = {}
    for cid, tool, args in (("e1", "web_fetch", fetch), ("e2", "status", stat)):
        b.lifecycle("permission_decided", "s1", execution_id_for("s1", cid))
        rows[cid] = [b.executed("s1", cid, tool, args, status="error", error_kind="transient")]
        if not (web_skips_transient and cid == "e1"):
            rows[cid].append(b.executed("s1", cid, tool, args))
    b.lifecycle("permission_decided", "s1", execution_id_for("s1", "e3"))
    rows["e3"] = [b.executed("s1", "e3", "web_post", post, status="error", error_kind="failed")]
    if web_retries_failure:
        rows["e3"].append(b.executed("s1", "e3", "web_post", post))
    b.model("s1")
    return b, rows


def test_x6_passes_when_every_kind_follows_the_one_retry_policy():
    b, _ = _retries()
    verdict = v("X6", b.build())
    assert verdict.status is Status.PASS and verdict.exercised == 2  # e1 and e3 met the policy


def test_x6_fails_when_a_web_tool_retries_a_definite_failure():
    b, rows = _retries(web_retries_failure=True)
    verdict = v("X6", b.build())
    assert verdict.status is Status.FAIL
    assert set(rows["e3"]) <= all_indexes(verdict)
    assert verdict.evidence[0].note.startswith("[web]") and "retry loop of its own" in verdict.evidence[0].note


def test_x6_fails_when_kinds_decide_the_same_situation_differently():
    b, rows = _retries(web_skips_transient=True)
    verdict = v("X6", b.build())
    assert verdict.status is Status.FAIL
    assert "two retry policies" in verdict.evidence[0].note
    assert {rows["e1"][0], rows["e2"][0]} <= all_indexes(verdict)


def test_x6_a_rerun_after_a_crash_is_not_a_retry():
    b, rows = _retries()
    b.crash("after_tool_returned", context={"session_id": "s1", "tool_call_id": "e3"})
    b.restart()
    b.executed("s1", "e3", "web_post", {"url": "https://c"})
    assert v("X6", b.build()).status is Status.PASS


# --------------------------------------------------------------------------- X3: dangling calls


def _conversation_with(*later):
    """One request whose conversation holds an assistant message with calls c1 and c2, then
    ``later`` messages; returns (trace, request index)."""
    b = TraceBuilder("s1")
    calls = [call("c1", "write_file", W), call("c2", "write_file", W)]
    request = b.model("s1", messages=(user(), assistant(*calls), *later))[0]
    return b.build(), request


def test_x3_a_call_whose_result_went_back_before_the_conversation_went_on_passes():
    trace, _ = _conversation_with(tool_result("c1"), tool_result("c2"), user("and now?"))
    assert v("X3", trace).status is not Status.FAIL
    trace, _ = _conversation_with(tool_result("c1"))  # c2 still pending: the loop asks again
    assert v("X3", trace).status is not Status.FAIL


def test_x3_fails_on_a_call_left_without_its_result_before_a_new_message():
    trace, request = _conversation_with(tool_result("c1"), user("never mind"))
    verdict = v("X3", trace)
    assert verdict.status is Status.FAIL and request in all_indexes(verdict)
    assert any("c2 without their result, followed by a user message" in e.note
               for e in verdict.evidence), verdict.evidence
    trace, request = _conversation_with(assistant(text="done"))
    verdict = v("X3", trace)
    assert verdict.status is Status.FAIL and "c1, c2" in verdict.evidence[0].note
