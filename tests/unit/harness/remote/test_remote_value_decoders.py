"""harness.remote.value_decoders: the same outcome as from_json, value for value and error for
error, for every type the protocol carries (well-formed values and damaged ones)."""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import functools
import typing
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import harness.contract as c
from harness.remote import protocol as p
from harness.remote.value_decoders import decoder_for

WIRE_TYPES = sorted({param.type for method in (*p.DRIVER_METHODS.values(),
                                                *p.PORT_METHODS.values())
                     for param in method.params if param.type is not bytes}
                    | {method.result for method in (*p.DRIVER_METHODS.values(),
                                                    *p.PORT_METHODS.values())
                       if method.result is not None}
                    | {c.Observation}, key=repr)

json_scalars = st.none() | st.booleans() | st.integers(-5, 5) | st.floats(-2, 2) \
    | st.text(max_size=4)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=4), inner, max_size=3),
                           max_leaves=6)


@functools.cache  # built once per type: every example of every test draws from the same one
def values_of(kind: Any) -> st.SearchStrategy[Any]:
    """Contract values of ``kind`` (what an implementation or the harness would send)."""
    if kind is Any:
        return json_values
    origin = typing.get_origin(kind)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType")):
        return st.one_of(*[st.none() if option is type(None) else values_of(option)
                           for option in typing.get_args(kind)])
    if origin is tuple or origin is collections.abc.Sequence:
        return st.lists(values_of(typing.get_args(kind)[0]), max_size=2).map(tuple)
    if origin is dict or kind is dict:
        return st.dictionaries(st.text(max_size=4), json_values, max_size=2)
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return st.sampled_from(list(kind))
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        hints = typing.get_type_hints(kind)
        return st.builds(kind, **{field.name: st.deferred(lambda h=hints[field.name]: values_of(h))
                                  for field in dataclasses.fields(kind)})
    return {str: st.text(max_size=4), int: st.integers(-3, 3), bool: st.booleans(),
            float: st.floats(allow_nan=False, allow_infinity=False)
            | st.integers(-3, 3).map(float)}[kind]


def outcome(decode: Any, kind: Any, data: Any) -> tuple[str, Any]:
    try:
        value = decode(kind, data)
    except Exception as exc:  # noqa: BLE001 - the outcome compared is the exception itself
        return "raised", (type(exc), str(exc))
    return "value", (value, _types(value))


def _types(value: Any) -> Any:
    """The exact types inside a value: equality alone takes 1 == 1.0 == True."""
    if isinstance(value, (tuple, list)):
        return (type(value), tuple(_types(item) for item in value))
    if isinstance(value, dict):
        return (type(value), tuple((key, _types(item)) for key, item in value.items()))
    if dataclasses.is_dataclass(value):
        return (type(value), tuple(_types(getattr(value, f.name))
                                   for f in dataclasses.fields(value)))
    return type(value)


def fast(kind: Any, data: Any) -> Any:
    return decoder_for(kind)(data, "params.x")


def plain(kind: Any, data: Any) -> Any:
    return c.from_json(kind, data, "params.x")


@st.composite
def damaged(draw: st.DrawFn, data: Any) -> Any:
    """``data`` with one place changed: a value replaced, a member dropped or added."""
    if isinstance(data, dict) and data and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(data)))
        action = draw(st.sampled_from(["deeper", "replace", "drop", "add"]))
        copy = dict(data)
        if action == "deeper":
            copy[key] = draw(damaged(copy[key]))
        elif action == "replace":
            copy[key] = draw(json_values)
        elif action == "drop":
            del copy[key]
        else:
            copy[draw(st.text(max_size=4))] = draw(json_values)
        return copy
    if isinstance(data, list) and data and draw(st.booleans()):
        index = draw(st.integers(0, len(data) - 1))
        copy = list(data)
        copy[index] = draw(damaged(copy[index]) | json_values)
        return copy
    return draw(json_values)


@pytest.mark.parametrize("kind", WIRE_TYPES, ids=repr)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_well_formed_values_decode_as_from_json_decodes_them(kind: Any, data: Any) -> None:
    value = data.draw(values_of(kind))
    encoded = c.to_json(value)
    assert outcome(fast, kind, encoded) == outcome(plain, kind, encoded)
    assert fast(kind, encoded) == value


@pytest.mark.parametrize("kind", WIRE_TYPES, ids=repr)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_damaged_values_get_from_json_s_value_or_its_error(kind: Any, data: Any) -> None:
    encoded = data.draw(damaged(c.to_json(data.draw(values_of(kind)))))
    assert outcome(fast, kind, encoded) == outcome(plain, kind, encoded)


def test_what_json_never_gives_still_gets_from_json_s_answer() -> None:
    # Not the exact JSON shapes: the fast path declines, from_json decides.
    rule = {"tool": "Bash", "permission": "allow"}
    for kind, data in [(str, True), (int, True), (float, True), (float, 2), (bool, 1),
                       (tuple[str, ...], ("a",)), (dict[str, Any], [("a", 1)]),
                       (c.Mode, "turbo"), (c.Mode, ["unhashable"]), (c.Rule, rule),
                       (c.Outcome | None, None), (int | str, 3), (type(None), None)]:
        assert outcome(fast, kind, data) == outcome(plain, kind, data), (kind, data)


def test_an_error_names_the_path_as_from_json_does() -> None:
    with pytest.raises(c.ContractError, match=r"params\.x\.mode: 'turbo' is not a Mode"):
        fast(c.SessionConfig, {**c.to_json(c.SessionConfig("s1")), "mode": "turbo"})
