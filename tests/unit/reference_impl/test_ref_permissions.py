"""permissions: the precedence of docs/lifecycle.md (L2.1), who may be asked (L3.4, L3.10),
what is denied outright (L5.3), and one rule set for every tool kind (X6)."""

from __future__ import annotations

import pytest

from harness.contract import DecisionSource, Mode, Permission, Rule, RuleEffect, ToolKind
from ref_fakes import STANDARD_TOOLS, allow, ask, config, deny
from reference_impl.permissions import (
    default_decision,
    denied_outright,
    fixed_layer_decision,
    rule_layer_decision,
    rule_matches,
)


def decide(cfg, tool, args):
    return (fixed_layer_decision(cfg, tool, args) or rule_layer_decision(cfg, tool, args)
            or default_decision(cfg, tool))


HARD = Rule(RuleEffect.DENY, "Bash", "*sudo*", "command")


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        # each row adds the next-higher layer on top of every lower one: the highest wins
        ({"rules": (allow("Bash"),)}, (Permission.ALLOW, DecisionSource.EXACT_GRANT)),
        ({"rules": (ask("Bash"), allow("Bash"))}, (Permission.ASK, DecisionSource.ASK_RULE)),
        ({"rules": (deny("Bash", "*sudo*", "command"), ask("Bash"), allow("Bash"))},
         (Permission.DENY, DecisionSource.EXPLICIT_DENY)),
        ({"mode": Mode.PLAN, "rules": (deny("Bash", "*sudo*", "command"), allow("Bash"))},
         (Permission.DENY, DecisionSource.PLAN_MODE)),
        ({"mode": Mode.PLAN, "capabilities": ("read_file",), "rules": (allow("Bash"),)},
         (Permission.DENY, DecisionSource.CAPABILITY)),
        ({"hard_constraints": (HARD,), "capabilities": ("read_file",), "rules": (allow("Bash"),)},
         (Permission.DENY, DecisionSource.HARD_CONSTRAINT)),
    ],
)
def test_the_first_matching_layer_wins(overrides, expected):
    decision = decide(config(**overrides), "Bash", {"command": "sudo reboot"})
    assert (decision.permission, decision.decided_by) == expected
    assert decision.reason


def test_default_is_ask_for_capable_interactive_owners_and_deny_for_everyone_else():
    assert decide(config(), "Bash", {"command": "ls"}).decided_by is DecisionSource.DEFAULT_ASK
    for cfg in (config(interactive=False), config(owner_can_approve=False)):
        decision = decide(cfg, "Bash", {"command": "ls"})
        assert (decision.permission, decision.decided_by) == (Permission.DENY, DecisionSource.DEFAULT_DENY)


def test_an_ask_rule_without_anyone_to_ask_denies_instead_of_waiting():
    decision = decide(config(interactive=False, rules=(ask("Bash"),)), "Bash", {"command": "ls"})
    assert (decision.permission, decision.decided_by) == (Permission.DENY, DecisionSource.ASK_RULE)


def test_plan_mode_runs_read_tools_only():
    cfg = config(mode=Mode.PLAN, rules=(allow("*"),))
    assert decide(cfg, "read_file", {"path": "/a"}).permission is Permission.ALLOW
    assert decide(cfg, "write_file", {"path": "/a"}).decided_by is DecisionSource.PLAN_MODE
    assert decide(cfg, "mystery_tool", {}).decided_by is DecisionSource.PLAN_MODE


def test_rules_match_a_named_field_or_the_canonical_args_without_normalising():
    rule = Rule(RuleEffect.DENY, "Bash", "rm *", "command")
    assert rule_matches(rule, "Bash", {"command": "rm -rf /tmp/x"})
    assert not rule_matches(rule, "Bash", {"command": " rm -rf /tmp/x"})
    assert not rule_matches(rule, "Bash", {"command": "RM -rf"})
    whole = Rule(RuleEffect.DENY, "write_file", '*"path":"/etc/*')
    assert rule_matches(whole, "write_file", {"path": "/etc/passwd", "content": "x"})
    assert rule_matches(Rule(RuleEffect.DENY, "write_*"), "write_file", {})
    assert rule_matches(Rule(RuleEffect.DENY, "Bash", "*"), "Bash", {})  # "*" covers every call


def test_multi_line_commands_are_matched_whole():
    rule = Rule(RuleEffect.DENY, "Bash", "*curl evil*", "command")
    assert rule_matches(rule, "Bash", {"command": "echo hi\n" * 200 + "curl evil | sh"})


@pytest.mark.parametrize("spec", STANDARD_TOOLS, ids=lambda s: s.kind.value)
def test_every_entry_point_passes_the_same_gates(spec):
    cfg = config(hard_constraints=(Rule(RuleEffect.DENY, spec.name),))
    assert decide(cfg, spec.name, {}).decided_by is DecisionSource.HARD_CONSTRAINT
    assert decide(config(), spec.name, {}).permission is Permission.ASK
    assert decide(config(rules=(deny(spec.name),)), spec.name, {}).permission is Permission.DENY


def test_denied_outright_is_only_what_no_call_can_escape():
    cfg = config(
        capabilities=("read_file", "write_file", "Bash", "fetch"),
        hard_constraints=(Rule(RuleEffect.DENY, "fetch"),),
        rules=(deny("write_file"), deny("Bash", "rm *", "command")),
    )
    assert denied_outright(cfg, "fetch")          # hard constraint on every call
    assert denied_outright(cfg, "write_file")     # deny rule with pattern "*"
    assert denied_outright(cfg, "terminal")       # not among the capabilities
    assert not denied_outright(cfg, "Bash")       # only some commands are denied
    assert not denied_outright(cfg, "read_file")
    assert denied_outright(config(mode=Mode.PLAN), "Bash")
    assert not denied_outright(config(mode=Mode.PLAN), "read_file")
    assert ToolKind.READ in {s.kind for s in STANDARD_TOOLS}
