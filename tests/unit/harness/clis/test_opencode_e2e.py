"""OpenCode under the black-box driver, end to end (real binary, scripted world).

Skipped, with the npm command that installs it, when ``opencode`` is not on PATH (or at
``$LH_CLI_PATH``). OpenCode starts slowly (a 185 MB binary; 5-20 s per server on two shared
cores), so each case takes tens of seconds. What OpenCode did is recorded in
docs/real-systems.md; these tests keep that table true (helpers:
tests/unit/harness/cli_cases.py).
"""

from __future__ import annotations

import pytest

from cli_cases import ledger, load_or_skip, prompts, requests, run, stream_ends, tool_message

pytestmark = pytest.mark.process


@pytest.fixture(scope="module")
def opencode():
    return load_or_skip("opencode")


def test_crash_mid_tool_then_resume_marks_the_call_interrupted(opencode):
    trace, statuses = run(opencode, "l4/crash_after_tool_returned.toml")
    assert ledger(trace) == ["c1"]  # the effect happened once, never again
    assert [e.data["mode"] for e in trace.crashes()] == ["process"]
    after = requests(trace)[-1]
    assert after.instance == 1  # a new server, the noted session prompted
    assert tool_message(after, "c1")["content"] == "[Tool execution was interrupted]"
    assert statuses["L4.3"] == "passed"


def test_approval_accepted_runs_the_call_once(opencode):
    trace, _ = run(opencode, "l3/answer_neighbours.toml", "approve-true.timing-at-once")
    assert prompts(trace) == 1
    assert ledger(trace) == ["c1"]


def test_approval_rejected_runs_nothing_and_stops_the_turn_untold(opencode):
    trace, statuses = run(opencode, "l3/answer_neighbours.toml", "approve-false.timing-at-once")
    assert ledger(trace) == []
    assert len(requests(trace)) == 1  # the loop stops: no request tells the model
    assert statuses["X3"] == "failed"


def test_repeated_rejections_the_first_one_ends_the_turn(opencode):
    trace, statuses = run(opencode, "cli/repeated_refusals.toml")
    assert ledger(trace) == []
    assert prompts(trace) == 1  # the two later answers find no question waiting
    assert statuses["X3"] == "failed"


def test_a_deny_rule_is_never_prompted_and_never_runs(opencode):
    trace, statuses = run(opencode, "cli/deny_rule.toml")
    assert ledger(trace) == ["c2"]
    assert prompts(trace) == 0
    assert "prevents you from using" in tool_message(requests(trace)[-1], "c1")["content"]
    assert statuses["L3.4"] == "passed" and statuses["X3"] == "passed"


def test_stream_cut_before_a_complete_tool_call_keeps_the_partial_text(opencode):
    trace, statuses = run(opencode, "m/eof_with_partial_text.toml")
    assert ledger(trace) == []
    assert stream_ends(trace)[0] == "eof"
    assert statuses["M5"] == "failed"  # the partial text comes back as a complete answer


def test_stream_cut_after_a_complete_tool_call_runs_the_call(opencode):
    trace, statuses = run(opencode, "m/unfinished_stream_calls.toml",
                          "ending-eof.then-next_turn.answer-text")
    assert stream_ends(trace)[0] == "eof"
    assert ledger(trace) == ["c1"]  # a call of a stream that never finished was run
    assert statuses["M5"] == "failed"
