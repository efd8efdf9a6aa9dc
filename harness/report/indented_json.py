"""The text of ``json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)``, faster.

Guarantees: :func:`dumps_indented` returns exactly that text for every value (a hypothesis
test compares them). Values made only of dicts with ``str`` keys, lists, tuples, ``str``,
``int``, finite ``float``, ``bool`` and ``None`` (exact types: what ``to_json`` hands out)
are encoded by appending pieces to one list (the standard library's indented encoding is a
pure-Python generator per value, about 2.4x slower on a suite's report.json); anything else
(a subclass, a non-finite float, a non-``str`` key) is handed to ``json.dumps`` whole.
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring
from typing import Any

_INDENT = "  "


class _NotPlain(Exception):
    """A value the fast path does not encode exactly as ``json.dumps`` would."""


def dumps_indented(value: Any) -> str:
    try:
        return _plain(value)
    except (_NotPlain, RecursionError):
        return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


def _plain(value: Any) -> str:
    pieces: list[str] = []
    put = pieces.append
    float_repr = float.__repr__
    int_repr = int.__repr__
    infinite = float("inf")

    def encode(item: Any, level: int) -> None:
        kind = type(item)
        if kind is str:
            put(encode_basestring(item))
        elif kind is dict:
            if not item:
                put("{}")
                return
            if any(type(key) is not str for key in item):
                raise _NotPlain  # json.dumps turns such keys into text its own way
            inner = "\n" + _INDENT * (level + 1)
            put("{")
            separator = inner
            for key in sorted(item):
                put(separator)
                separator = "," + inner
                put(encode_basestring(key))
                put(": ")
                encode(item[key], level + 1)
            put("\n" + _INDENT * level + "}")
        elif kind is list or kind is tuple:
            if not item:
                put("[]")
                return
            inner = "\n" + _INDENT * (level + 1)
            put("[")
            separator = inner
            for element in item:
                put(separator)
                separator = "," + inner
                encode(element, level + 1)
            put("\n" + _INDENT * level + "]")
        elif item is None:
            put("null")
        elif item is True:
            put("true")
        elif item is False:
            put("false")
        elif kind is int:
            put(int_repr(item))
        elif kind is float and item == item and -infinite < item < infinite:
            put(float_repr(item))
        else:
            raise _NotPlain

    encode(value, 0)
    return "".join(pieces)
