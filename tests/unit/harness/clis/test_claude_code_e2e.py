"""Claude Code under the black-box driver, end to end (real binary, scripted world).

Skipped, with the npm command that installs it, when ``claude`` is not on PATH (or at
``$LH_CLI_PATH``). What Claude Code did is recorded in docs/real-systems.md; these tests
keep that table true (helpers: tests/unit/harness/cli_cases.py).
"""

from __future__ import annotations

import pytest

from cli_cases import ledger, load_or_skip, prompts, requests, run, stream_ends, tool_message

pytestmark = pytest.mark.process


@pytest.fixture(scope="module")
def claude():
    return load_or_skip("claude-code")


def test_crash_mid_tool_then_resume_does_not_rerun_but_drops_the_call(claude):
    trace, statuses = run(claude, "l4/crash_after_tool_returned.toml")
    assert ledger(trace) == ["c1"]  # the effect happened once, never again
    assert [e.data["mode"] for e in trace.crashes()] == ["process"]
    after = requests(trace)[-1]
    assert after.instance == 1
    assert not any(m["role"] == "tool" for m in after.data["messages"])
    assert statuses["L4.3"] == "failed"  # the model is never told c1 may have run


def test_approval_accepted_runs_the_call_once(claude):
    trace, _ = run(claude, "l3/answer_neighbours.toml", "approve-true.timing-at-once")
    assert prompts(trace) == 1
    assert ledger(trace) == ["c1"]


def test_approval_refused_runs_nothing_and_the_model_is_told(claude):
    trace, statuses = run(claude, "l3/answer_neighbours.toml", "approve-false.timing-at-once")
    assert ledger(trace) == []
    assert tool_message(requests(trace)[-1], "c1") is not None
    assert statuses["X3"] == "passed"


def test_repeated_refusals_the_session_goes_on(claude):
    trace, statuses = run(claude, "cli/repeated_refusals.toml")
    assert ledger(trace) == []
    assert prompts(trace) == 3
    assert statuses["X3"] == "passed"


def test_a_deny_rule_is_never_prompted_and_never_runs(claude):
    trace, statuses = run(claude, "cli/deny_rule.toml")
    assert ledger(trace) == ["c2"]
    assert prompts(trace) == 0
    assert statuses["L3.4"] == "passed" and statuses["X3"] == "passed"


def test_stream_cut_before_a_complete_tool_call_keeps_the_partial_text(claude):
    trace, statuses = run(claude, "m/eof_with_partial_text.toml")
    assert ledger(trace) == []
    assert statuses["M5"] == "failed"  # the partial text comes back as a complete answer


def test_stream_cut_after_a_complete_tool_call_runs_the_call(claude):
    trace, statuses = run(claude, "m/unfinished_stream_calls.toml",
                          "ending-eof.then-next_turn.answer-text")
    assert stream_ends(trace)[0] == "eof"
    assert ledger(trace) == ["c1"]  # a call of a stream that never finished was run
    assert statuses["M5"] == "failed"
