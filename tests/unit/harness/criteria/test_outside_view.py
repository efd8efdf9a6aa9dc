"""X3 judged from outside (:func:`harness.criteria.outside_view.check_x3_outside`), on
hand-built traces: a refusal that reached an open question is reported to the model; an
answer that reached none (a second answer to the same wait, or one after the model was
already handed the call's result, as a restart that lost the question does) owes nothing."""

from __future__ import annotations

from tracebuilder import TraceBuilder, all_indexes, assistant, call, tool_result, user

from harness.criteria.outside_view import check_x3_outside

ARGS = {"command": "rm -rf build"}
C1 = call("c1", "Bash", ARGS)


def asked() -> tuple[TraceBuilder, str]:
    """A turn whose model answer asks for c1, and the prompt of its wait."""
    b = TraceBuilder("s1", tools=[("Bash", "bash")])
    b.turn("s1")
    b.model("s1", [C1])
    return b, b.prompt("s1", "c1", "Bash", ARGS)


def told() -> list:
    return [user(), assistant(C1), tool_result("c1", "not_started", "permission_denied")]


def test_a_refusal_the_next_request_reports_passes():
    b, wait = asked()
    b.answer(wait, approve=False)
    b.model("s1", messages=told())
    b.turn_returns("s1", "completed")
    verdict = check_x3_outside(b.build())
    assert str(verdict.status) == "pass"


def test_a_refusal_the_next_request_leaves_out_fails():
    b, wait = asked()
    b.answer(wait, approve=False)
    at = b.last
    b.model("s1", messages=[user(), assistant(C1)])
    b.turn_returns("s1", "completed")
    verdict = check_x3_outside(b.build())
    assert str(verdict.status) == "fail"
    assert at in all_indexes(verdict)


def test_a_refusal_followed_by_a_completed_turn_and_no_request_fails():
    b, wait = asked()
    b.answer(wait, approve=False)
    b.turn_returns("s1", "completed")
    assert str(check_x3_outside(b.build()).status) == "fail"


def test_a_second_answer_to_the_same_wait_owes_nothing():
    b, wait = asked()
    b.answer(wait, approve=False)
    b.model("s1", messages=told())
    b.turn_returns("s1", "completed")
    b.answer(wait, approve=False)  # the harness answers twice on purpose
    b.turn_returns("s1", "completed", method="answer_approval")
    assert str(check_x3_outside(b.build()).status) == "pass"


def test_an_answer_after_the_model_was_handed_the_result_owes_nothing():
    b, wait = asked()
    b.crash("after_prompt")
    b.restart()
    b.turn("s1", "continue")
    b.model("s1", messages=[user(), assistant(C1), tool_result("c1", "not_started"),
                            user("continue")])
    b.turn_returns("s1", "completed")
    b.answer(wait, approve=False)  # the question was lost with the killed process
    b.turn_returns("s1", "completed", method="answer_approval")
    assert str(check_x3_outside(b.build()).status) == "not_exercised"


def test_a_refusal_after_a_restart_with_the_call_still_open_is_judged():
    b, wait = asked()
    b.crash("after_prompt")
    b.restart()
    b.answer(wait, approve=False)  # no request settled c1 yet: the question may be open
    b.turn_returns("s1", "completed", method="answer_approval")
    assert str(check_x3_outside(b.build()).status) == "fail"
