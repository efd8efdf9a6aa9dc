"""The canonical JSON (RFC 8785) text of a contract value, built without the JSON data in
between.

Guarantees: :func:`canonical_text` returns ``canonical_json(to_json(value))`` character for
character (a hypothesis test compares them over mixed, nested contract values, floats and
astral keys included) and refuses what either refuses (``to_json``: a type it cannot
encode; ``canonical_json``: what RFC 8785 has no text for, with a
:class:`~harness.contract.vocabulary.CanonicalJsonError`). It is the trace's encoder (:mod:`harness.trace.record`): a trace repeats
thousands of frozen rows (store readings) and events, and building each one's JSON
dictionary only to encode and drop it was most of the canonical text's cost.

How: one text function per exact type, found at the first value of that type and kept (as
``to_json`` keeps one encoder per exact type). A ``str``, ``bool`` or ``None`` is the text
the canonical encoder gives it (JSON's own C string function: RFC 8785 escapes exactly as
it does); an ``int`` within ``±SAFE_INTEGER_MAX`` is ``int.__repr__``; a dataclass is its
fields in sorted name order (ASCII names: code points and UTF-16 units sort them alike),
each field's value through these functions; a tuple or list is its items' texts; a
dictionary whose keys are all ASCII strings is its members in sorted key order; an enum
member is the canonical text of its value (``to_json`` hands the value to the encoder as it
is). Anything else (a float, which RFC 8785 writes as ECMAScript does; a longer integer; a
dictionary with a non-ASCII key, which may sort by UTF-16 units otherwise than by code
points, or with another key, which ``to_json`` turns into a string; subclasses of the plain
types) goes the general way, ``canonical_json(to_json(value))``. A lone surrogate, which the
C string function would copy, is refused once per call on the whole text (an ASCII text has
none, and saying so costs nothing).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import re
from typing import Any, Callable

from harness.contract import (
    SAFE_INTEGER_MAX,
    CanonicalJsonError,
    canonical_json,
    canonical_json_problem,
    to_json,
)

_STRING = json.encoder.encode_basestring
"""What the canonical encoder (``ensure_ascii=False``) makes of a ``str``."""


_SURROGATE = re.compile("[\\ud800-\\udfff]")


def canonical_text(value: Any) -> str:
    """``canonical_json(to_json(value))`` (see the module doc)."""
    try:
        text = _text(value)
    except CanonicalJsonError as exc:
        raise _refusal(value, str(exc)) from None  # said again with the path in the whole value
    if not text.isascii() and _SURROGATE.search(text):
        raise _refusal(value, "a lone surrogate")
    return text


def _refusal(value: Any, otherwise: str) -> CanonicalJsonError:
    problem = canonical_json_problem(to_json(value))
    return CanonicalJsonError(f"no canonical JSON (RFC 8785) for this value: "
                              f"{problem}" if problem else otherwise)


def _text(value: Any) -> str:
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


def _integer(value: int) -> str:
    if -SAFE_INTEGER_MAX <= value <= SAFE_INTEGER_MAX:
        return int.__repr__(value)
    return _general(value)  # refused, with the general way's message


def _sequence(value: Any) -> str:
    return "[" + ",".join([_text(item) for item in value]) + "]"


def _mapping(value: dict[Any, Any]) -> str:
    for key in value:
        # another type: to_json makes a string of it; non-ASCII: maybe another order
        if type(key) is not str or not key.isascii():
            return _general(value)
    return "{" + ",".join([_STRING(key) + ":" + _text(value[key])
                           for key in sorted(value)]) + "}"


def _enum_member(value: enum.Enum) -> str:
    plain = value.value
    return _STRING(plain) if type(plain) is str else canonical_json(plain)


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
            parts.append(key + (text_of(item) if text_of is not None else _text(item)))
        return "{" + ",".join(parts) + "}"

    return text


_TEXTS: dict[type, Callable[[Any], str]] = {
    str: _STRING, int: _integer, bool: _boolean, type(None): _null,
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
