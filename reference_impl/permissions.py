"""The permission precedence (docs/lifecycle.md, L2.1), as pure functions of the rules.

Guarantees: the first matching layer wins, in this order, and no lower layer can lift a
higher one:

    hard constraints > identity capabilities > plan mode > explicit deny
        > ask rule > exact grant > (classifier, decided elsewhere) > default ask / deny

A rule matches when its ``tool`` fnmatches the tool name and its ``pattern`` fnmatches the
named ``field`` of the arguments (the canonical JSON of all arguments when ``field`` is
empty). Matching is case-sensitive and never normalises text. Nothing here reads the store
or calls the world; the classifier, the repeat guard and waits live in their own modules.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from harness.contract import (
    ClassifierOutcome,
    DecisionSource,
    Mode,
    Permission,
    Rule,
    RuleEffect,
    SessionConfig,
    ToolKind,
    canonical_json,
)


@dataclass(frozen=True, slots=True)
class Decision:
    permission: Permission
    decided_by: DecisionSource
    reason: str
    classifier_outcome: ClassifierOutcome | None = None
    fallback: str = ""
    """Which denial threshold sent this operation to a human ("" when none)."""
    counts_as_risk_denial: bool = False
    """True only for a valid classifier ``risk_deny`` (the denial counters count it)."""


def rule_matches(rule: Rule, tool: str, args: dict[str, Any]) -> bool:
    if not fnmatchcase(tool, rule.tool):
        return False
    if rule.pattern == "*":  # matches any subject (fnmatch's "*" spans newlines too)
        return True
    return fnmatchcase(_rule_subject(rule, args), rule.pattern)


def _rule_subject(rule: Rule, args: dict[str, Any]) -> str:
    if not rule.field:
        return canonical_json(args)
    value = args.get(rule.field, "")
    return value if isinstance(value, str) else canonical_json(value)


def owner_can_answer(config: SessionConfig) -> bool:
    """Only capable interactive owners get approval waits (L3.10)."""
    return config.interactive and config.owner_can_approve


def tool_kind(config: SessionConfig, tool: str) -> ToolKind | None:
    for spec in config.tools:
        if spec.name == tool:
            return spec.kind
    return None


def fixed_layer_decision(config: SessionConfig, tool: str, args: dict[str, Any]) -> Decision | None:
    """The layers nothing can lift: hard constraints, capabilities, plan mode, explicit deny."""
    for rule in config.hard_constraints:
        if rule_matches(rule, tool, args):
            return Decision(
                Permission.DENY,
                DecisionSource.HARD_CONSTRAINT,
                f"hard constraint forbids {tool} matching {rule.pattern!r}"
                + (f" on {rule.field!r}" if rule.field else ""),
            )
    if config.capabilities and tool not in config.capabilities:
        return Decision(
            Permission.DENY,
            DecisionSource.CAPABILITY,
            f"the owner's identity may not use {tool}",
        )
    if config.mode is Mode.PLAN and tool_kind(config, tool) is not ToolKind.READ:
        return Decision(
            Permission.DENY,
            DecisionSource.PLAN_MODE,
            f"plan mode runs read-only tools only; {tool} is not one",
        )
    for rule in config.rules:
        if rule.effect is RuleEffect.DENY and rule_matches(rule, tool, args):
            return Decision(
                Permission.DENY,
                DecisionSource.EXPLICIT_DENY,
                f"deny rule {rule.tool}:{rule.pattern!r} matches; change the rules to allow it",
            )
    return None


def rule_layer_decision(config: SessionConfig, tool: str, args: dict[str, Any]) -> Decision | None:
    """Ask rules, then exact grants (which need no classifier)."""
    for rule in config.rules:
        if rule.effect is RuleEffect.ASK and rule_matches(rule, tool, args):
            if owner_can_answer(config):
                return Decision(
                    Permission.ASK,
                    DecisionSource.ASK_RULE,
                    f"ask rule {rule.tool}:{rule.pattern!r} requires the owner's approval",
                )
            return Decision(
                Permission.DENY,
                DecisionSource.ASK_RULE,
                f"ask rule {rule.tool}:{rule.pattern!r} requires an approval that no one "
                "in this session can give",
            )
    for rule in config.rules:
        if rule.effect is RuleEffect.ALLOW and rule_matches(rule, tool, args):
            return Decision(
                Permission.ALLOW,
                DecisionSource.EXACT_GRANT,
                f"allow rule {rule.tool}:{rule.pattern!r} grants it",
            )
    return None


def default_decision(config: SessionConfig, tool: str) -> Decision:
    if owner_can_answer(config):
        return Decision(
            Permission.ASK, DecisionSource.DEFAULT_ASK, f"no rule covers {tool}; asking the owner"
        )
    return Decision(
        Permission.DENY,
        DecisionSource.DEFAULT_DENY,
        f"no rule allows {tool} and no one in this session can approve it",
    )


def denied_outright(config: SessionConfig, tool: str) -> bool:
    """True when no call of ``tool`` can ever run under the rules in force (L5.3)."""
    if any(_covers_every_call(rule, tool) for rule in config.hard_constraints):
        return True
    if config.capabilities and tool not in config.capabilities:
        return True
    if config.mode is Mode.PLAN and tool_kind(config, tool) is not ToolKind.READ:
        return True
    return any(
        rule.effect is RuleEffect.DENY and _covers_every_call(rule, tool) for rule in config.rules
    )


def _covers_every_call(rule: Rule, tool: str) -> bool:
    return rule.pattern == "*" and fnmatchcase(tool, rule.tool)
