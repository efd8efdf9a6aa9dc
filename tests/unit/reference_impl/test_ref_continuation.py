"""continuation: the conversation is the latest checkpoint; pending calls and the next step
are derived from it alone; folding saved results is ordered and idempotent (L4.1, L4.5)."""

from __future__ import annotations

from harness.contract import Message, Outcome, ToolCall, execution_id_for
from reference_impl import continuation
from reference_impl.continuation import StepKind, next_step, pending_tool_calls
from reference_impl.store import Store

A = ToolCall("a", "read_file", {"path": "/a"})
B = ToolCall("b", "read_file", {"path": "/b"})


def _tool(call_id):
    return Message("tool", "ok", tool_call_id=call_id, outcome=Outcome.SUCCEEDED)


def test_pending_calls_are_the_unanswered_calls_of_the_last_assistant_message():
    asked = (Message("user", "go"), Message("assistant", "", tool_calls=(A, B, A)))
    assert pending_tool_calls(asked) == (A, B)  # a duplicate call is one call
    assert pending_tool_calls(asked + (_tool("a"),)) == (B,)
    assert pending_tool_calls(asked + (Message("user", "never mind"),)) == ()


def test_the_next_step_follows_from_the_conversation():
    assert next_step(()).kind is StepKind.ASK_MODEL
    assert next_step((Message("user", "go"),)).kind is StepKind.ASK_MODEL
    asked = (Message("user", "go"), Message("assistant", "", tool_calls=(A,)))
    assert next_step(asked) == continuation.NextStep(StepKind.RUN_CALL, call=A)
    assert next_step(asked + (_tool("a"),)).kind is StepKind.ASK_MODEL
    done = next_step((Message("user", "go"), Message("assistant", "hi")))
    assert (done.kind, done.final_text, done.incomplete) == (StepKind.DONE, "hi", False)
    partial = next_step((Message("user", "go"), Message("assistant", "h", incomplete=True)))
    assert (partial.kind, partial.incomplete) == (StepKind.DONE, True)


def test_folding_adds_saved_results_in_call_order_once():
    store = Store.open_file(":memory:")
    with store.transaction() as conn:
        conn.execute("INSERT INTO sessions (session_id, config_json, rules_json,"
                     " permission_version, turn_status) VALUES ('s', '{}', '[]', 1, 'running')")
        asked = (Message("user", "go"), Message("assistant", "", tool_calls=(A, B)))
        continuation.save(conn, "s", asked, last_execution_id=None, reason="test", now=0.0)
        _insert_result(conn, "b")  # b has a result, a does not: nothing may be folded yet
        assert continuation.fold_results(conn, "s", reason="test", now=0.0).sequence is None
        _insert_result(conn, "a")
        fold = continuation.fold_results(conn, "s", reason="test", now=0.0)
        assert fold.sequence == 2 and len(fold.execution_ids) == 2
        assert [m.tool_call_id for m in continuation.messages(conn, "s")[-2:]] == ["a", "b"]
        assert continuation.fold_results(conn, "s", reason="test", now=0.0).sequence is None
    store.close()


def _insert_result(conn, call_id):
    conn.execute(
        "INSERT INTO result_records (execution_id, session_id, tool_call_id, args_digest,"
        " permission_version, outcome, failure_kind, execution_started, reconciliation_required,"
        " result_digest, reason, output, attempts, recorded_at)"
        " VALUES (?, 's', ?, 'd', 1, 'succeeded', NULL, 1, 0, NULL, '', 'ok', 1, 0)",
        (execution_id_for("s", call_id), call_id),
    )


def test_a_conversation_view_stays_what_it_was_while_its_log_grows():
    store = Store.open_file(":memory:")
    with store.transaction() as conn:
        conn.execute("INSERT INTO sessions (session_id, config_json, rules_json,"
                     " permission_version, turn_status) VALUES ('s', '{}', '[]', 1, 'running')")
        continuation.save(conn, "s", (Message("user", "go"),), last_execution_id=None,
                          reason="test", now=0.0)
        first = continuation.state(conn, "s")
        view = first.conversation
        continuation.append(conn, "s", Message("assistant", "", tool_calls=(A,)),
                            reason="test", now=0.0)
        later = continuation.state(conn, "s")
        assert later.log is first.log  # the append extended the shared log...
        assert len(view) == 1 and tuple(view) == (Message("user", "go"),)  # ...not the view
        assert view == (Message("user", "go"),) and view != later.messages
        assert later.conversation == later.messages and list(later.conversation[-1:]) == [
            Message("assistant", "", tool_calls=(A,))]
        assert later.conversation[-1] == later.messages[-1] and hash(view) == hash(tuple(view))
        for index in (1, -2):
            try:
                view[index]
            except IndexError:
                pass
            else:
                raise AssertionError(f"view[{index}] of a one-message view did not raise")
        # extending an older state copies the log: the later view keeps its messages
        branched, texts = first.extended((Message("user", "again"),), ['{"again"}'])
        assert branched is not first.log and branched[1] == Message("user", "again")
        assert texts is not first.texts and texts[1:] == ['{"again"}']  # its own, aligned
        assert tuple(later.conversation) == later.messages and len(later.conversation) == 2
    store.close()
