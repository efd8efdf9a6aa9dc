"""Contract values round-trip exactly through JSON; digests and identities are stable."""

import collections.abc
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
    # the JSON canonical JSON (RFC 8785) has a text for: integers a double keeps exactly
    st.none() | st.booleans() | st.integers(-c.SAFE_INTEGER_MAX, c.SAFE_INTEGER_MAX)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
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


def _spec_to_json(value):
    """What ``to_json`` is specified to return, written the plain way (no per-type cache)."""
    import dataclasses
    import enum

    if type(value) in (str, int, float, bool, type(None)):
        return value
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _spec_to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(key): _spec_to_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_spec_to_json(item) for item in value]
    if isinstance(value, (str, int, float, bool)):
        return value
    raise c.ContractError("not contract data")


class _Label(str):
    """A str subclass that is not an enum: encoded as the string it is."""


_contract_leaves = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5)
    | st.sampled_from(list(c.Outcome)) | st.sampled_from(list(c.FailureKind))
    | st.builds(_Label, st.text(max_size=3))
)
_contract_values = st.recursive(
    _contract_leaves,
    lambda inner: (
        st.lists(inner, max_size=3) | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=3) | st.integers(), inner, max_size=3)
        | st.builds(c.ToolCall, st.text(max_size=4), st.text(max_size=4),
                    st.dictionaries(st.text(max_size=3), inner, max_size=2))
        | st.builds(c.Message, st.sampled_from(["user", "assistant", "tool"]),
                    st.text(max_size=5), tool_call_id=st.text(max_size=3),
                    outcome=st.none() | st.sampled_from(list(c.Outcome)))
    ),
    max_leaves=12,
)


@given(_contract_values)
def test_to_json_gives_what_the_plain_definition_gives(value):
    # to_json keeps one encoder per exact type: the first value of a type decides how every
    # later one is encoded, so a mix of types, subclasses and nesting must not change it.
    assert c.to_json(value) == _spec_to_json(value)
    assert json.dumps(c.to_json(value), sort_keys=True) == json.dumps(_spec_to_json(value),
                                                                      sort_keys=True)


def test_to_json_refuses_what_is_not_contract_data_every_time():
    for _ in range(2):  # the refusal is not cached as an encoder
        with pytest.raises(c.ContractError, match="cannot encode object as contract JSON"):
            c.to_json(object())
    with pytest.raises(c.ContractError, match="cannot encode set"):
        c.to_json({"a": {1, 2}})


class _ReadOnlyMessages(collections.abc.Sequence):
    """A read-only sequence that is not a tuple (what a runtime may hand a model request)."""

    def __init__(self, items):
        self._items = list(items)

    def __len__(self):
        return len(self._items)

    def __getitem__(self, index):
        return self._items[index]


def test_a_model_request_may_carry_any_read_only_sequence_and_decodes_to_a_tuple():
    messages = (c.Message("user", "hi"), c.Message("assistant", "", tool_calls=(
        c.ToolCall("call-1", "write_file", {"path": "a"}),)))
    as_tuple = c.ModelRequest("r1", "s", messages, ("write_file",))
    as_view = c.ModelRequest("r1", "s", _ReadOnlyMessages(messages), ("write_file",))
    assert c.to_json(as_view) == c.to_json(as_tuple)
    decoded = c.from_json(c.ModelRequest, c.to_json(as_view))
    assert decoded == as_tuple and type(decoded.messages) is tuple
    with pytest.raises(c.ContractError, match=r"\$\.messages: expected a list"):
        c.from_json(c.ModelRequest, {**c.to_json(as_tuple), "messages": "hi"})


def test_bytes_are_still_not_contract_data():
    for value in (b"ab", bytearray(b"ab"), memoryview(b"ab")):
        with pytest.raises(c.ContractError, match="cannot encode"):
            c.to_json(value)
