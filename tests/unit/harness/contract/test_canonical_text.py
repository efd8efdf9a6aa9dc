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


_wide_text = st.text(st.sampled_from("aZ~\u00e9\u20ac\ufb01\uffff\U00010000\U0001f600"),
                     max_size=3)
"""Characters whose code point order and UTF-16 unit order differ (an astral character sorts
before U+E000..U+FFFF by units), plus ASCII and Latin-1 neighbours."""
_lone_surrogates = st.sampled_from(["\ud800", "a\udfff", "\udc00b"])

_keys = (st.text(max_size=3) | _wide_text | st.integers(-2, 2) | st.booleans() | st.none()
         | st.builds(_Label, st.text(max_size=2)) | st.sampled_from(list(c.Outcome)))
_leaves = (
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5)
    | _wide_text | _lone_surrogates | st.integers(-2**53 - 2, -2**53 + 2)
    | st.integers(2**53 - 2, 2**53 + 2) | st.sampled_from([1.0, 1e-7, 1e21, 1e-6, 123e20, -0.0])
    | st.sampled_from(list(c.Outcome)) | st.sampled_from(list(c.FailureKind))
    | st.builds(_Label, st.text(max_size=3)) | st.builds(_Count, st.integers(-3, 3))
)
_values = st.recursive(
    _leaves,
    lambda inner: (
        st.lists(inner, max_size=3) | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=3), inner, max_size=3)
        | st.dictionaries(_wide_text, inner, max_size=4)
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
        (), [], {}, "", 0, -0.0, 1e300, _Count(3), _Label("\n"), 1.0, 30.0, 1e-7, 2**53 - 1,
        {"\U0001f600": 1, "\ufb01": 2, "a": [1.5, {"\U00010000": None, "\uffff": 0.0}]},
        c.Thresholds(), c.SessionConfig("s1"), 2**53, 53401225956765130, [-(2**53)],
    ]
    for value in values:
        assert canonical_text(value) == c.canonical_json(c.to_json(value)), value


def test_what_rfc_8785_refuses_is_refused_the_same_way():
    refused = [math.inf, -math.inf, math.nan, 2**53 + 1, -(2**53) - 1, 2**60, "\ud800",
               {"k": "a\udfffb"}, {"\udc00": 1}, [1, {"n": 2**64}],
               c.ToolCall("c1", "t", {"n": 2**53 + 1})]
    for value in refused:
        assert _actual(value) is c.CanonicalJsonError, value
        assert _expected(value) is c.CanonicalJsonError, value
    with pytest.raises(c.CanonicalJsonError, match=r"\$\.args\.n: the integer 9007199254740993"):
        canonical_text(c.ToolCall("c1", "t", {"n": 2**53 + 1}))
    with pytest.raises(c.CanonicalJsonError, match=r"lone surrogate U\+D800"):
        canonical_text(c.Message("user", "hi \ud800"))


def test_what_to_json_refuses_is_refused_every_time():
    for _ in range(2):  # a refusal is not kept as the type's text
        with pytest.raises(c.ContractError, match="cannot encode object"):
            canonical_text([object()])
    with pytest.raises(c.ContractError):
        canonical_text(c.Message)  # a dataclass type is not a value
