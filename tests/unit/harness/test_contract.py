"""Contract values round-trip exactly through JSON; digests and identities are stable."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness import contract as c


def _roundtrip(cls, value):
    data = json.loads(json.dumps(c.to_json(value)))
    return c.from_json(cls, data)


def test_observation_roundtrip_is_exact():
    identity = c.OperationIdentity("ex-1", "call-1", c.args_digest("Bash", {"command": "ls"}), 3)
    op = c.OperationView(
        session_id="s1", identity=identity, tool="Bash", args={"command": "ls", "n": [1, 2]},
        dedup_key="k", permission=c.Permission.DENY, decided_by=c.DecisionSource.CLASSIFIER,
        outcome=c.Outcome.NOT_STARTED, delivery=c.Delivery.PROJECTED, execution_started=False,
        failure_kind=c.FailureKind.PERMISSION_DENIED, reason="risky",
        recovery_actions=(c.RecoveryAction.CHANGE_RULES,), reconciliation_required=False,
        classifier_outcome=c.ClassifierOutcome.RISK_DENY, result_digest=None, attempts=0,
    )
    obs = c.Observation(
        operations=(op,),
        checkpoints=(c.CheckpointView("s1", 3, 7, 16, 1024, "ex-1"),),
        model_requests=(c.ModelRequestView("r1", "s1", 1, 1, c.ModelRequestStatus.INCOMPLETE, "par", True),),
    )
    assert _roundtrip(c.Observation, obs) == obs


def test_session_config_roundtrip_keeps_nested_values():
    config = c.SessionConfig(
        session_id="s", mode=c.Mode.AUTO, rules=(c.Rule(c.RuleEffect.DENY, "Bash", "rm *", "command"),),
        tools=(c.ToolSpec("Bash", c.ToolKind.BASH),), thresholds=c.Thresholds(failure_table_capacity=4),
    )
    assert _roundtrip(c.SessionConfig, config) == config


def test_from_json_names_the_bad_field_and_the_valid_choices():
    with pytest.raises(c.ContractError, match=r"\$\.mode: 'fast' is not a Mode \(default, auto, plan\)"):
        c.from_json(c.SessionConfig, {"session_id": "s", "mode": "fast"})
    with pytest.raises(c.ContractError, match="unknown field"):
        c.from_json(c.ToolCall, {"tool_call_id": "a", "tool": "t", "args": {}, "extra": 1})


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=10,
)


@given(st.text(), st.dictionaries(st.text(), json_values, max_size=4))
def test_args_digest_ignores_key_order_and_roundtrips(tool, args):
    reordered = dict(reversed(list(args.items())))
    assert c.args_digest(tool, args) == c.args_digest(tool, reordered)
    call = c.ToolCall("id", tool, args)
    assert _roundtrip(c.ToolCall, call) == call


def test_execution_id_is_bound_to_session_and_call():
    assert c.execution_id_for("s", "a") == c.execution_id_for("s", "a")
    assert c.execution_id_for("s", "a") != c.execution_id_for("t", "a")


def test_projection_never_offers_retry_for_unknown_or_denied():
    for decided_by in c.DecisionSource:
        _, actions = c.expected_projection(
            c.Permission.DENY, c.Outcome.NOT_STARTED, decided_by, None, False, False)
        assert c.RecoveryAction.RETRY not in actions
    _, actions = c.expected_projection(
        c.Permission.ALLOW, c.Outcome.UNKNOWN, c.DecisionSource.EXACT_GRANT, c.FailureKind.UNKNOWN, True, False)
    assert actions == (c.RecoveryAction.RECONCILE,)
