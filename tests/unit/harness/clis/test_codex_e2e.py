"""The Codex CLI under the black-box driver, end to end (real binary, scripted world).

Skipped, with the npm command that installs it, when ``codex`` is not on PATH (or at
``$LH_CLI_PATH``). What Codex did is recorded in docs/real-systems.md; these tests keep that
table true (helpers: tests/unit/harness/cli_cases.py).
"""

from __future__ import annotations

import pytest

from cli_cases import ledger, load_or_skip, prompts, requests, run, stream_ends, tool_message

pytestmark = pytest.mark.process


@pytest.fixture(scope="module")
def codex():
    return load_or_skip("codex")


def test_crash_mid_tool_then_resume_keeps_the_call_as_aborted(codex):
    trace, statuses = run(codex, "l4/crash_after_tool_returned.toml")
    assert ledger(trace) == ["c1"]  # the effect happened once, never again
    assert [e.data["mode"] for e in trace.crashes()] == ["process"]
    after = requests(trace)[-1]
    assert after.instance == 1  # thread/resume in a new app-server
    assert tool_message(after, "c1")["content"] == "aborted"
    assert statuses["L4.3"] == "passed"


def test_approval_accepted_runs_the_call_once(codex):
    trace, _ = run(codex, "l3/answer_neighbours.toml", "approve-true.timing-at-once")
    assert prompts(trace) == 1
    assert ledger(trace) == ["c1"]


def test_approval_declined_runs_nothing_and_the_model_is_told(codex):
    trace, statuses = run(codex, "l3/answer_neighbours.toml", "approve-false.timing-at-once")
    assert ledger(trace) == []
    assert "rejected by user" in tool_message(requests(trace)[-1], "c1")["content"]
    assert statuses["X3"] == "passed"


def test_repeated_declines_the_session_goes_on(codex):
    trace, statuses = run(codex, "cli/repeated_refusals.toml")
    assert ledger(trace) == []
    assert prompts(trace) == 3
    assert statuses["X3"] == "passed"


def test_a_forbidden_rule_is_never_prompted_and_never_runs(codex):
    trace, statuses = run(codex, "cli/deny_rule.toml")
    assert ledger(trace) == ["c2"]
    assert prompts(trace) == 0
    assert "policy forbids" in tool_message(requests(trace)[-1], "c1")["content"]
    assert statuses["L3.4"] == "passed" and statuses["X3"] == "passed"


def test_stream_cut_before_a_complete_tool_call_keeps_the_partial_text(codex):
    trace, statuses = run(codex, "m/eof_with_partial_text.toml")
    assert ledger(trace) == []
    assert stream_ends(trace)[0] == "eof"
    assert statuses["M5"] == "failed"  # the partial text comes back as a complete answer


def test_stream_cut_after_a_complete_tool_call_runs_the_call(codex):
    trace, statuses = run(codex, "m/unfinished_stream_calls.toml",
                          "ending-eof.then-next_turn.answer-text")
    assert stream_ends(trace)[0] == "eof"
    assert ledger(trace) == ["c1"]  # a call of a stream that never completed was run
    assert statuses["M5"] == "failed"


def test_a_transport_error_is_retried_and_swallowed(codex):
    trace, statuses = run(codex, "m/transport_error.toml")
    assert "transport_error" in stream_ends(trace)
    assert statuses["M3"] == "failed"  # the turn ends normally after Codex's own retry
