"""Claude Code under the black-box driver, end to end (real binary, scripted world).

Skipped, with the npm command that installs it, when ``claude`` is not on PATH (or at
``$LH_CLI_PATH``). Each case runs one scenario through the suite and asserts on what the
world saw (ledger rows, prompts, requests) and on the criteria judged from outside; every
other criterion must be ``not_applicable`` with the black-box reason. What Claude Code did
is recorded in docs/real-systems.md; these tests keep that table true.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import clis
from harness.running.runner import run_scenario
from harness.running.suite import run_suite
from harness.scenarios.loader import discover
from harness.trace.record import Kind

ROOT = Path(__file__).resolve().parents[4]
HERE = Path(__file__).resolve().parent
SPEC = "cli:claude-code"
TIME_LIMIT_S = 120.0
OUTSIDE = {"X3", "L1.8", "L3.4", "L4.3", "M3", "M4", "M5"}

pytestmark = pytest.mark.process


def _scenario(relative: str, variant: str = ""):
    base = HERE / "scenarios" if relative.startswith("cli/") else ROOT / "scenarios"
    path = base / relative.removeprefix("cli/")
    found = [s for s in discover([path]) if not variant or s.variant == variant]
    assert len(found) == 1, [s.id for s in found]
    return found[0]


@pytest.fixture(scope="module")
def claude():
    info = next(i for i in clis.available() if i.name == "claude-code")
    if not info.installed:
        pytest.skip(info.missing_reason)
    return clis.load("claude-code")


def _run(implementation, relative: str, variant: str = ""):
    traces = []

    def runner(impl, scenario, seed, **kwargs):
        run = run_scenario(impl, scenario, seed, **{**kwargs, "time_limit_s": TIME_LIMIT_S})
        traces.append(run)
        return run

    result = run_suite(implementation, [_scenario(relative, variant)], 0, runner=runner,
                       impl_spec=SPEC)
    (run,) = traces
    assert run.error == "", run.error
    statuses = {c.id: str(c.status) for c in result.criteria}
    for criterion in result.criteria:
        if criterion.id not in OUTSIDE:
            assert str(criterion.status) in ("not_applicable", "not_selected"), criterion.id
    return run.trace, statuses


def _ledger(trace) -> list[str]:
    return [e.data["tool_call_id"] for e in trace.of_kind(Kind.TOOL_EXECUTED)]


def _requests(trace):
    return list(trace.of_kind(Kind.MODEL_REQUEST))


def test_crash_mid_tool_then_resume_does_not_rerun_but_drops_the_call(claude):
    trace, statuses = _run(claude, "l4/crash_after_tool_returned.toml")
    assert _ledger(trace) == ["c1"]  # the effect happened once, never again
    assert [e.data["mode"] for e in trace.crashes()] == ["process"]
    after = _requests(trace)[-1]
    assert after.instance == 1
    assert not any(m["role"] == "tool" for m in after.data["messages"])
    assert statuses["L4.3"] == "failed"  # the model is never told c1 may have run


def test_approval_accepted_runs_the_call_once(claude):
    trace, statuses = _run(claude, "l3/answer_neighbours.toml", "approve-true.timing-at-once")
    assert len(list(trace.of_kind(Kind.APPROVAL_PROMPT))) == 1
    assert _ledger(trace) == ["c1"]


def test_approval_refused_runs_nothing_and_the_model_is_told(claude):
    trace, statuses = _run(claude, "l3/answer_neighbours.toml", "approve-false.timing-at-once")
    assert _ledger(trace) == []
    last = _requests(trace)[-1]
    assert any(m["role"] == "tool" and m["tool_call_id"] == "c1" for m in last.data["messages"])
    assert statuses["X3"] == "passed"


def test_repeated_refusals_the_session_goes_on(claude):
    trace, statuses = _run(claude, "cli/repeated_refusals.toml")
    assert _ledger(trace) == []
    assert len(list(trace.of_kind(Kind.APPROVAL_PROMPT))) == 3
    assert statuses["X3"] == "passed"


def test_a_deny_rule_is_never_prompted_and_never_runs(claude):
    trace, statuses = _run(claude, "cli/deny_rule.toml")
    assert _ledger(trace) == ["c2"]
    assert list(trace.of_kind(Kind.APPROVAL_PROMPT)) == []
    assert statuses["L3.4"] == "passed" and statuses["X3"] == "passed"


def test_stream_cut_before_a_complete_tool_call_keeps_the_partial_text(claude):
    trace, statuses = _run(claude, "m/eof_with_partial_text.toml")
    assert _ledger(trace) == []
    assert statuses["M5"] == "failed"  # the partial text comes back as a complete answer


def test_stream_cut_after_a_complete_tool_call_runs_the_call(claude):
    trace, statuses = _run(claude, "m/unfinished_stream_calls.toml",
                           "ending-eof.then-next_turn.answer-text")
    ends = [e.data["how"] for e in trace.of_kind(Kind.MODEL_STREAM_END)]
    assert ends[0] == "eof"
    assert _ledger(trace) == ["c1"]  # a call of a stream that never finished was run
    assert statuses["M5"] == "failed"
