"""Trace lines: one line per event, excerpts around the first evidence index."""

from __future__ import annotations

from suite_fakes import FakeScenario, make_trace

from harness.trace.record import TraceEvent
from harness.trace.lines import compact, excerpt, render_event, render_trace

TRACE = make_trace(FakeScenario("t", marks=tuple(f"m{i}" for i in range(10))), 1)


def test_render_event_is_one_line_with_index_source_kind_and_data():
    event = TraceEvent(12, "world", "tool_executed", 2, {"b": "x\ny", "a": 1})
    assert render_event(event) == '    12 world   tool_executed        i2 {"a":1,"b":"x\\ny"}'
    assert len(render_trace(TRACE)) == len(TRACE.events)


def test_compact_cuts_long_data():
    assert compact({"k": "x" * 500}, width=20) == '{"k":"xxxxxxxxxxxxx…'
    assert len(compact({"k": "x" * 500}, width=None)) == 508


def test_excerpt_centres_on_the_first_index_and_marks_evidence():
    lines = excerpt(TRACE, (5, 6), radius=2)
    assert [line[:6] for line in lines] == ["     3", "     4", ">    5", ">    6", "     7"]
    assert len(excerpt(TRACE, (0,), radius=3)) == 4
    assert excerpt(TRACE, ()) == () and excerpt(TRACE, (999,)) == ()
    assert excerpt(TRACE, (999, 2), radius=0)[0].startswith(">    2")
