"""canonical_text is canonical_json(to_json(value)) character for character, and refuses what
to_json refuses."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness import contract as c
from harness.contract.canonical_text import canonical_text


class _Label(str):
    """A str subclass that is not an enum: encoded as the string it is."""


class _Count(int):
    """An int subclass that is not an enum."""


_keys = (st.text(max_size=3) | st.integers(-2, 2) | st.booleans() | st.none()
         | st.builds(_Label, st.text(max_size=2)) | st.sampled_from(list(c.Outcome)))
_leaves = (
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5)
    | st.sampled_from(list(c.Outcome)) | st.sampled_from(list(c.FailureKind))
    | st.builds(_Label, st.text(max_size=3)) | st.builds(_Count, st.integers(-3, 3))
)
_values = st.recursive(
    _leaves,
    lambda inner: (
        st.lists(inner, max_size=3) | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=3), inner, max_size=3)
        | st.dictionaries(_keys, inner, max_size=3)
        | st.builds(c.ToolCall, st.text(max_size=4), st.text(max_size=4),
                    st.dictionaries(st.text(max_size=3), inner, max_size=2))
        | st.builds(c.Message, st.sampled_from(["user", "assistant", "tool"]),
                    st.text(max_size=5), tool_call_id=st.text(max_size=3),
                    outcome=st.none() | st.sampled_from(list(c.Outcome)))
        | st.builds(c.CheckpointView, st.text(max_size=3), st.integers(0, 3), st.integers(0, 9),
                    st.integers(0, 4), st.integers(0, 999), st.none() | st.text(max_size=3))
    ),
    max_leaves=14,
)


def _expected(value):
    try:
        return c.canonical_json(c.to_json(value))
    except (c.ContractError, TypeError, ValueError) as exc:
        return type(exc)


def _actual(value):
    try:
        return canonical_text(value)
    except (c.ContractError, TypeError, ValueError) as exc:
        return type(exc)


@given(_values)
def test_the_text_is_canonical_json_of_to_json(value):
    assert _actual(value) == _expected(value)


def test_rows_events_and_odd_values_have_the_same_text():
    identity = c.OperationIdentity("e1", "t1", "sha256:ab", 2)
    values = [
        c.OperationView(session_id="s1", identity=identity, tool="write_file",
                        args={"path": "a\u2028\"b", "n": [1, 2.5, None, True]},
                        dedup_key="k", permission=list(c.Permission)[0],
                        decided_by=list(c.DecisionSource)[0], outcome=list(c.Outcome)[0],
                        delivery=list(c.Delivery)[0], execution_started=True,
                        failure_kind=None, reason="r", recovery_actions=tuple(c.RecoveryAction),
                        reconciliation_required=False,
                        classifier_outcome=list(c.ClassifierOutcome)[0], result_digest=None,
                        attempts=1),
        {"event": {"type": "turn_ended", "data": {"status": "completed"}}, "": [], "é": {}},
        {1: "one", None: "none"}, {True: "yes"}, {c.Outcome.SUCCEEDED: 1}, {_Label("x"): 1},
        (), [], {}, "", 0, -0.0, 1e300, math.inf, -math.inf, math.nan, _Count(3), _Label("\n"),
    ]
    for value in values:
        assert canonical_text(value) == c.canonical_json(c.to_json(value)), value


def test_what_to_json_refuses_is_refused_every_time():
    for _ in range(2):  # a refusal is not kept as the type's text
        with pytest.raises(c.ContractError, match="cannot encode object"):
            canonical_text([object()])
    with pytest.raises(c.ContractError):
        canonical_text(c.Message)  # a dataclass type is not a value
