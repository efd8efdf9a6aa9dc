"""indented_json: the very text of json.dumps(indent=2, sort_keys=True, ensure_ascii=False),
for plain values (the fast path) and for anything else (handed to json.dumps)."""

from __future__ import annotations

import enum
import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.report import indented_json
from harness.report.indented_json import dumps_indented


def _reference(value):
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


def _outcome(encode, value):
    try:
        return ("text", encode(value))
    except Exception as exc:  # noqa: BLE001 - the same failure is part of "the same"
        return (type(exc).__name__, str(exc))


_scalars = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True)
            | st.text())
_plain = st.recursive(
    _scalars,
    lambda children: (st.lists(children, max_size=4)
                      | st.lists(children, max_size=3).map(tuple)
                      | st.dictionaries(st.text(max_size=6), children, max_size=4)),
    max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(_plain)
def test_the_text_is_json_dumps_text(value):
    assert dumps_indented(value) == _reference(value)


class _Colour(enum.IntEnum):
    RED = 1


class _Name(str):
    pass


def test_values_off_the_fast_path_are_handed_to_json_dumps(monkeypatch):
    odd = [{"a": _Colour.RED}, {"b": _Name("x")}, {1: "int key"}, {True: 1}, {1: "x", "s": 2},
           [math.inf, -math.inf], {"n": math.nan}, {"deep": [{"x": (1, 2.5, None)}]}]
    for value in odd:
        assert _outcome(dumps_indented, value) == _outcome(_reference, value)
    assert _outcome(dumps_indented, {1: "x", "s": 2})[0] == "TypeError"  # as json.dumps
    calls = []
    original = json.dumps
    monkeypatch.setattr(indented_json.json, "dumps",
                        lambda *a, **k: calls.append(a) or original(*a, **k))
    dumps_indented({"k": [1, {"x": "y"}]})  # plain: no call
    dumps_indented({"k": _Colour.RED})  # an IntEnum: json.dumps writes it
    assert len(calls) == 1
