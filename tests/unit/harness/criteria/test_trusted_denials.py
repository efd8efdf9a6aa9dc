"""trusted_denials: only a denial the harness witnessed for the exact call counts."""

from __future__ import annotations

from harness.contract import Rule, RuleEffect, SessionConfig, ToolCall
from harness.criteria.trusted_denials import denials_of_other_calls, trusted_denial

try:
    from .lbuilder import TB
except ImportError:  # collected without a package
    from lbuilder import TB

W = ToolCall("c1", "write_file", {"path": "/repo/a", "content": "x"})
OTHER = ToolCall("c2", "write_file", {"path": "/repo/b", "content": "x"})
KEY = ("s1", "c1")


def _served(*sessions):
    tb = TB(*sessions)
    tb.respond("s1", (W, OTHER))
    return tb


def test_nothing_witnessed_means_no_trusted_denial():
    tb = _served()
    assert trusted_denial(tb.build(), KEY, 10_000) is None


def test_a_rule_in_force_denying_the_exact_arguments():
    tb = _served(SessionConfig("s1", rules=(Rule(RuleEffect.DENY, "write_file", "/repo/a", "path"),)))
    assert trusted_denial(tb.build(), KEY, 10_000) is not None
    assert trusted_denial(tb.build(), ("s1", "c2"), 10_000) is None


def test_a_later_rule_change_counts_only_before_the_bound():
    tb = _served()
    change = tb.update_rules("s1", (Rule(RuleEffect.DENY, "write_file", "/repo/a", "path"),), 2)
    trace = tb.build()
    assert trusted_denial(trace, KEY, change) is None
    assert trusted_denial(trace, KEY, 10_000) == change


def test_a_classifier_verdict_counts_for_the_reviewed_call_only():
    tb = _served()
    review = tb.review("s1", "write_file", OTHER.args, "risk_deny")
    trace = tb.build()
    assert trusted_denial(trace, KEY, 10_000) is None
    assert trusted_denial(trace, ("s1", "c2"), 10_000) == review
    assert denials_of_other_calls(trace, KEY, 10_000) == (("s1", "c2"),)


def test_a_rejected_prompt_for_the_exact_call():
    tb = _served()
    _, wait_id = tb.prompt("s1", W)
    answer = tb.call("answer_approval", wait_id=wait_id, approve=False)
    assert trusted_denial(tb.build(), KEY, 10_000) == answer


def test_an_approved_prompt_is_no_denial():
    tb = _served()
    _, wait_id = tb.prompt("s1", W)
    tb.call("answer_approval", wait_id=wait_id, approve=True)
    assert trusted_denial(tb.build(), KEY, 10_000) is None
