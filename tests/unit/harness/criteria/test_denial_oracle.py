"""The denial oracle on hand-built traces: counts per (session, version) after each event,
what a crash keeps, what faults leave alone, and the fallback findings with the broken rule
that explains each."""

from __future__ import annotations

from harness.contract import (
    Mode,
    Observation,
    Outcome,
    Rule,
    RuleEffect,
    SessionConfig,
    ToolCall,
    ToolKind,
    ToolSpec,
)
from harness.criteria import denial_oracle as o
from harness.criteria import trace_readings as s

try:
    from .lbuilder import TB, counters, tool_msg
except ImportError:  # collected without a package
    from lbuilder import TB, counters, tool_msg

BASH = (ToolSpec("Bash", ToolKind.BASH),)
AUTO = SessionConfig("s1", mode=Mode.AUTO)


def bash(call_id, command=None):
    return ToolCall(call_id, "Bash", {"command": command or f"rm -rf /{call_id}", "description": call_id})


def deny(tb, call, outcome="risk_deny"):
    tb.respond("s1", (call,))
    return tb.review("s1", "Bash", call.args, outcome)


def expected_at_end(tb, rules=o.REAL):
    tb.observe("quiescent", Observation(denial_counters=(counters("s1", 1, 0, 0),)))
    result = o.replay(tb.build(), rules)
    point, snapshot = result.snapshots[-1]
    return result.expected(snapshot, "s1", 1)


def test_risk_denials_count_once_each_and_an_allow_resets_only_the_streak():
    tb = TB(AUTO, tools=BASH)
    deny(tb, bash("d1"))
    deny(tb, bash("d2"))
    assert expected_at_end(tb) == {(2, 2)}
    deny(tb, bash("ok"), outcome="allow")
    assert expected_at_end(tb) == {(0, 2)}


def test_classifier_faults_change_nothing_but_the_fault_lens_counts_them():
    tb = TB(AUTO, tools=BASH)
    deny(tb, bash("d1"))
    for outcome in ("timeout", "service_error", "cancelled"):
        deny(tb, bash(f"f-{outcome}"), outcome=outcome)
    assert expected_at_end(tb) == {(1, 1)}
    assert expected_at_end(tb, o.CounterRules(faults_count=True)) == {(4, 4)}


def test_a_crash_right_after_the_decision_keeps_the_count_and_the_crash_lens_loses_it():
    tb = TB(AUTO, tools=BASH)
    deny(tb, bash("d1"))
    tb.failpoint("after_permission_decision", "crash")
    tb.crash("after_permission_decision")
    tb.restart()
    deny(tb, bash("d2"))
    assert expected_at_end(tb) == {(2, 2)}
    assert expected_at_end(tb, o.CounterRules(crash_loses=True)) == {(1, 1)}


def test_a_crash_before_the_decision_was_recorded_keeps_both_readings():
    tb = TB(AUTO, tools=BASH)
    deny(tb, bash("d1"))
    tb.failpoint("during_classifier_review", "crash")
    tb.crash("during_classifier_review")
    tb.restart()
    assert expected_at_end(tb) == {(0, 0), (1, 1)}


def test_a_replayed_review_of_the_same_identity_does_not_count_again():
    tb = TB(AUTO, tools=BASH)
    call = bash("d1")
    deny(tb, call)
    tb.review("s1", "Bash", call.args, "risk_deny")
    assert expected_at_end(tb) == {(1, 1)}
    assert expected_at_end(tb, o.CounterRules(dedupe=False)) == {(2, 2)}


def test_needs_review_only_when_no_rule_decides_in_auto_mode():
    state = s.RuleState("s1", 1, (Rule(RuleEffect.ASK, "ask_me"), Rule(RuleEffect.ALLOW, "grant"),
                                  Rule(RuleEffect.DENY, "never")), (), (), Mode.AUTO)
    assert o.needs_review(state, "Bash", {"command": "ls"})
    assert not o.needs_review(state, "ask_me", {})
    assert not o.needs_review(state, "grant", {})
    assert not o.needs_review(state, "never", {})
    default = s.RuleState("s1", 1, (), (), (), Mode.DEFAULT)
    assert not o.needs_review(default, "Bash", {"command": "ls"})


def _findings(tb):
    trace = tb.build()
    return o.fallback_findings(trace, o.counter_replays(trace))


def test_a_review_after_the_threshold_is_a_missing_fallback():
    tb = TB(AUTO, tools=BASH)
    for i in (1, 2, 3):
        deny(tb, bash(f"d{i}"))
    index = deny(tb, bash("d4"))
    (finding,) = _findings(tb)
    assert (finding.kind, finding.moment.index, finding.moment.tool_call_id) == ("missing", index, "d4")


def test_a_denial_without_review_or_wait_after_the_threshold_is_a_silent_fallback():
    tb = TB(AUTO, tools=BASH)
    for i in (1, 2, 3):
        deny(tb, bash(f"d{i}"))
    call = bash("d4")
    tb.respond("s1", (call,))
    at = len(tb.events) - 1
    tb.respond("s1", (), text="ok", messages=(tool_msg(call, Outcome.NOT_STARTED, "denied"),))
    (finding,) = _findings(tb)
    assert (finding.kind, finding.moment.index, finding.explained_by) == ("silent", at, ())


def test_the_same_call_prompted_is_no_finding_and_one_not_yet_answered_is_not_silent():
    tb = TB(AUTO, tools=BASH)
    for i in (1, 2, 3):
        deny(tb, bash(f"d{i}"))
    tb.respond("s1", (bash("d4"),))
    tb.prompt("s1", bash("d4"))
    tb.respond("s1", (bash("d5"),))  # its fate never reached the model: not judged silent
    assert _findings(tb) == ()


def test_an_early_prompt_after_a_fault_is_explained_by_the_fault_lens():
    tb = TB(AUTO, tools=BASH)
    deny(tb, bash("d1"))
    deny(tb, bash("d2"))
    deny(tb, bash("f1"), outcome="service_error")
    tb.respond("s1", (bash("d3"),))
    index, _ = tb.prompt("s1", bash("d3"))
    (finding,) = _findings(tb)
    assert finding.kind == "early" and finding.moment.index == index
    assert o.CounterRules(faults_count=True) in finding.explained_by


def test_a_non_interactive_session_has_no_fallback_findings():
    tb = TB(SessionConfig("s1", mode=Mode.AUTO, interactive=False), tools=BASH)
    for i in (1, 2, 3, 4):
        deny(tb, bash(f"d{i}"))
    assert _findings(tb) == ()


def test_a_denial_only_published_to_the_ui_is_silent_too():
    from harness.contract import Permission, Projection
    tb = TB(AUTO, tools=BASH)
    for i in (1, 2, 3):
        deny(tb, bash(f"d{i}"))
    call = bash("d4")
    tb.respond("s1", (call,))
    tb.publish(Projection("s1", "x", "d4", Permission.DENY, Outcome.NOT_STARTED, "denied", "", ()))
    (finding,) = _findings(tb)
    assert finding.kind == "silent" and finding.moment.tool_call_id == "d4"
