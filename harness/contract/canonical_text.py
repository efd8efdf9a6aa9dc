"""The canonical JSON text of a contract value, built without the JSON data in between.

Guarantees: :func:`canonical_text` returns ``canonical_json(to_json(value))`` character for
character (a hypothesis test compares them over mixed, nested contract values) and refuses
what ``to_json`` refuses. It is the trace's encoder (:mod:`harness.trace.record`): a trace repeats
thousands of frozen rows (store readings) and events, and building each one's JSON
dictionary only to encode and drop it was most of the canonical text's cost.

How: one text function per exact type, found at the first value of that type and kept (as
``to_json`` keeps one encoder per exact type). A ``str``, ``int``, ``bool`` or ``None`` is
the text the canonical encoder gives it (its own C string function, ``int.__repr__``); a
dataclass is its fields in sorted name order (what ``sort_keys`` does with the dictionary
``to_json`` makes of it), each field's value through these functions; a tuple or list is
its items' texts; a dictionary whose keys are all exact strings is its members in sorted key
order; an enum member is the encoder's text of its value (``to_json`` hands the value to the
encoder as it is). Anything else (a dictionary with another key, which ``to_json`` turns
into a string; floats; subclasses of the plain types) goes the general way, encoded whole.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Any, Callable

from harness.contract import canonical_json, to_json

_STRING = json.encoder.encode_basestring
"""What the canonical encoder (``ensure_ascii=False``) makes of a ``str``."""


def canonical_text(value: Any) -> str:
    """``canonical_json(to_json(value))`` (see the module doc)."""
    text_of = _TEXTS.get(type(value))
    if text_of is None:
        text_of = _text_function(value)
    return text_of(value)


def _general(value: Any) -> str:
    return canonical_json(to_json(value))


def _boolean(value: bool) -> str:
    return "true" if value else "false"


def _null(_: None) -> str:
    return "null"


def _sequence(value: Any) -> str:
    return "[" + ",".join([canonical_text(item) for item in value]) + "]"


def _mapping(value: dict[Any, Any]) -> str:
    for key in value:
        if type(key) is not str:  # to_json makes a string of it: the general way
            return _general(value)
    return "{" + ",".join([_STRING(key) + ":" + canonical_text(value[key])
                           for key in sorted(value)]) + "}"


def _enum_member(value: enum.Enum) -> str:
    return canonical_json(value.value)


def _dataclass(kind: type) -> Callable[[Any], str]:
    names = tuple(sorted(field.name for field in dataclasses.fields(kind)))
    keys = tuple(_STRING(name) + ":" for name in names)
    members = tuple(zip(keys, names))
    texts = _TEXTS

    def text(value: Any) -> str:
        parts = []
        for key, name in members:
            item = getattr(value, name)
            text_of = texts.get(type(item))
            parts.append(key + (text_of(item) if text_of is not None else canonical_text(item)))
        return "{" + ",".join(parts) + "}"

    return text


_TEXTS: dict[type, Callable[[Any], str]] = {
    str: _STRING, int: int.__repr__, bool: _boolean, type(None): _null,
    tuple: _sequence, list: _sequence, dict: _mapping, float: _general,
}


def _text_function(value: Any) -> Callable[[Any], str]:
    """The first value of its exact type: find its text function, keep it."""
    kind = type(value)
    if isinstance(value, enum.Enum):
        text_of: Callable[[Any], str] = _enum_member
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        text_of = _dataclass(kind)
    else:
        # subclasses of the plain types and containers, and what to_json refuses (it raises
        # the same error every time: the general way is kept for the type, never an error)
        text_of = _general
    _TEXTS[kind] = text_of
    return text_of
