"""answer_provenance on hand-built traces: what counts as the world's answer, and where."""

from __future__ import annotations

from harness.contract import Message, ToolCall, to_json
from harness.criteria import answer_provenance as P

try:
    from .lbuilder import TB, USER, assistant
except ImportError:  # collected without a package
    from lbuilder import TB, USER, assistant

W = ToolCall("c1", "write_file", {"path": "/repo/a", "content": "x"})


def _served(how="end", text="hi", calls=(W,)):
    tb = TB()
    rid = tb.request("s1", (USER,))
    tb.stream_end(rid, how, text, calls)
    trace = tb.build()
    end = trace.events[-1]
    return P.ServedAnswer(trace.events[0], end, how, text, tuple(end.data["tool_calls"]))


def _json(message):
    return to_json(message)


def test_a_complete_answer_is_its_text_and_its_calls_exactly():
    served = _served()
    assert P.answers(_json(assistant((W,), content="hi")), served)
    assert P.answers(_json(assistant((W,), content="hi\n")), served)  # trimmed or not
    assert not P.answers(_json(assistant((W,), content="hi there")), served)  # the text as served
    assert not P.answers(_json(assistant((), content="hi")), served)  # a call dropped
    assert P.answers(_json(assistant((W,), content="")), served)  # the calls say which answer
    assert not P.answers(_json(assistant((), content="")), _served(calls=()))  # "" is not "hi"
    other = ToolCall("c1", "write_file", {"path": "/repo/a", "content": "y"})
    assert not P.answers(_json(assistant((other,), content="hi")), served)  # args rewritten
    assert not P.answers(_json(Message("user", "hi")), served)


def test_a_partial_is_the_served_text_marked_incomplete_with_some_of_its_calls():
    eof = _served(how="eof")
    assert P.answers(_json(assistant((), content="hi", incomplete=True)), eof)
    assert P.answers(_json(assistant((W,), content="hi", incomplete=True)), eof)
    assert not P.answers(_json(assistant((), content="hi")), eof)  # an EOF is no complete answer
    assert not P.answers(_json(assistant((), content="h", incomplete=True)), eof)


def test_an_older_trace_without_served_calls_compares_their_ids():
    for carried, sourced in (((W,), True), ((ToolCall("c2", "write_file", {}),), False)):
        tb = TB()
        rid = tb.request("s1", (USER,))
        tb.add("model_stream_end", {"request_id": rid, "how": "end", "text": "", "tool_call_ids": ["c1"]})
        tb.request("s1", (USER, assistant(carried), Message("tool", "ok", tool_call_id="c1")))
        assert (P.provenance(tb.build()).unsourced == ()) is sourced


def test_moved_on_names_the_request_that_went_on_without_the_answer():
    tb = TB()
    r1 = tb.request("s1", (USER,), instance=1)
    tb.stream_end(r1, "end", calls=(W,), instance=1)
    later = len(tb.events)
    tb.request("s1", (USER, USER), instance=2)
    found = P.provenance(tb.build())
    assert [(a.request.index, r.index) for a, r in found.moved_on] == [(0, later)]
    assert found.unsourced == ()


def test_another_session_answer_is_no_source():
    tb = TB()
    r1 = tb.request("s2", (USER,))
    tb.stream_end(r1, "end", text="hi")
    tb.request("s1", (USER, assistant(content="hi"), Message("user", "more")))
    found = P.provenance(tb.build())
    assert [u.position for u in found.unsourced] == [1]


def test_imported_lengths_are_the_prefix_shared_with_the_first_request_after_the_load():
    tb = TB()
    tb.request("s1", (USER,))
    tb.call("load_checkpoint", session_id="s1", fixture="v1")
    tb.ret("load_checkpoint")
    old = (Message("user", "old"), assistant(content="old answer"))
    first = len(tb.events)
    tb.request("s1", old + (Message("user", "continue"),))
    second = len(tb.events)
    tb.request("s1", old + (Message("user", "continue"), assistant(content="x")))
    lengths = P.imported_lengths(tb.build())
    assert lengths == {0: 0, first: 3, second: 3}
