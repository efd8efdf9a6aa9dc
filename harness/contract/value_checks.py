"""Check that a value an in-process implementation hands the harness is of the contract's types.

An out-of-process implementation's values are decoded from the wire against the protocol's
schema, so a wrong shape is an error that names the method and the field. This module gives
in-process values (``python:MODULE:FACTORY``) the same treatment, without a round trip:

* :func:`value_problem` walks a value against a type of :mod:`harness.contract` (dataclasses,
  enums, ``tuple[X, ...]``, ``Sequence[X]`` (a tuple or a read-only sequence, not a list),
  ``dict[str, X]``, ``X | None``, plain scalars, ``Any`` = JSON
  data) and returns ``""`` or one sentence naming the first field that is wrong, its path, what
  it is and what was expected, e.g. ``run_turn returned str, expected TurnResult
  (harness/contract/vocabulary.py)``;
* :func:`driver_result_problem` does that for a driver method's return value, with the result
  types read from :class:`harness.contract.Runtime`'s annotations (``open`` must return an
  object with every ``Runtime`` method); methods annotated ``-> None`` are not checked (the
  wire protocol drops their results too);
* a StrEnum field may hold the member or its exact value (they compare equal), an ``int`` is
  a ``float``; everything else is exact: a list is not a tuple, a set is never JSON data;
* JSON data is also held to what canonical JSON (RFC 8785) has a text for: no integer past
  ``±SAFE_INTEGER_MAX``, no NaN or infinity, no lone surrogate (a digest over it could not
  be computed, nor agreed on by an implementation in another language).

Pure functions; nothing here raises on a bad value (only on a type the contract does not use).
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import types
import typing
from typing import Any

from harness.contract import SAFE_INTEGER_MAX, Runtime, canonical_json_problem

WHERE = "harness/contract/vocabulary.py"
RUNTIME_METHODS: tuple[str, ...] = tuple(
    name for name, member in vars(Runtime).items()
    if callable(member) and not name.startswith("_"))
"""The driver methods every runtime ``open()`` returns must have."""

_HINTS: dict[Any, dict[str, Any]] = {}
_DRIVER_ALIASES = {"concurrent_turn": "run_turn"}
"""Trace method names that are a Runtime method under another name."""


def _hints(owner: Any) -> dict[str, Any]:
    hints = _HINTS.get(owner)
    if hints is None:
        hints = typing.get_type_hints(owner)
        _HINTS[owner] = hints
    return hints


_FIELDS: dict[type, tuple[tuple[str, Any, type | None], ...]] = {}


def _fields(cls: type) -> tuple[tuple[str, Any, type | None], ...]:
    """(name, type hint, the one exact type that is always right for it, if there is one)."""
    fields = _FIELDS.get(cls)
    if fields is None:
        hints = _hints(cls)
        fields = tuple(
            (f.name, hints[f.name],
             hints[f.name] if hints[f.name] in (str, int, bool, float)
             or (isinstance(hints[f.name], type) and issubclass(hints[f.name], enum.Enum))
             else None)
            for f in dataclasses.fields(cls))
        _FIELDS[cls] = fields
    return fields


def driver_result_type(method: str) -> Any:
    """The annotated return type of a Runtime method (``None`` when it returns nothing)."""
    name = _DRIVER_ALIASES.get(method, method)
    fn = getattr(Runtime, name, None)
    if fn is None:
        return None
    kind = _hints(fn).get("return")
    return None if kind is type(None) else kind


def type_name(kind: Any) -> str:
    if kind is Any:
        return "JSON data"
    if kind is None or kind is type(None):
        return "None"
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(option) for option in typing.get_args(kind))
    if origin is tuple:
        args = typing.get_args(kind)
        return f"tuple[{type_name(args[0]) if args else 'Any'}, ...]"
    if origin is dict:
        args = typing.get_args(kind)
        return f"dict[str, {type_name(args[1]) if args else 'Any'}]"
    if origin is collections.abc.Sequence:
        args = typing.get_args(kind)
        return f"a read-only sequence of {type_name(args[0]) if args else 'Any'}"
    return getattr(kind, "__name__", repr(kind))


def read_only_sequence(value: Any) -> bool:
    """May ``value`` stand for a contract ``Sequence`` field: a tuple or any read-only
    sequence (a view of a log), never text, bytes or a list (which the runtime could change
    afterwards)?"""
    return isinstance(value, collections.abc.Sequence) and not isinstance(
        value, (str, bytes, bytearray, memoryview, list))


def _what(value: Any) -> str:
    if value is None:
        return "None"
    return type(value).__name__


_CANONICAL = ("JSON data canonical JSON has a text for (RFC 8785: integers within "
              f"\u00b1{SAFE_INTEGER_MAX}, finite numbers, no lone surrogate; docs/contract.md)")
"""The expectation named when a JSON value is of a JSON type but outside RFC 8785's domain."""


def _json_problem(value: Any, path: str) -> tuple[str, Any, Any] | None:
    kind = type(value)
    if value is None or kind is bool:
        return None
    if kind is str:
        return None if value.isascii() or not canonical_json_problem(value) else (
            path, value, _CANONICAL)
    if kind is int or kind is float:
        return None if not canonical_json_problem(value) else (path, value, _CANONICAL)
    if type(value) in (list, tuple):
        for i, item in enumerate(value):
            found = _json_problem(item, f"{path}[{i}]")
            if found:
                return found
        return None
    if type(value) is dict:
        for key, item in value.items():
            if type(key) is not str:
                return (f"{path} key {key!r}", key, str)
            found = _json_problem(item, f"{path}[{key!r}]")
            if found:
                return found
        return None
    if isinstance(value, enum.Enum) and isinstance(value, (str, int)):
        return None  # a contract enum member is JSON (its value)
    return (path, value, Any)


def _find(kind: Any, value: Any, path: str) -> tuple[str, Any, Any] | None:
    """The first (path, value, expected type) that does not fit, or None."""
    if kind is Any:
        return _json_problem(value, path)
    if kind is None or kind is type(None):
        return None if value is None else (path, value, kind)
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(kind)
        if value is None:
            return None if type(None) in options else (path, value, kind)
        deepest: tuple[str, Any, Any] | None = None
        for option in options:
            if option is type(None):
                continue
            found = _find(option, value, path)
            if found is None:
                return None
            if found[0] != path:
                deepest = found  # the right type with a wrong field says more
        return deepest or (path, value, kind)
    if origin is tuple or origin is collections.abc.Sequence:
        if type(value) is not tuple and (origin is tuple or not read_only_sequence(value)):
            return (path, value, kind)
        args = typing.get_args(kind)
        item_kind = args[0] if args else Any
        for i, item in enumerate(value):
            found = _find(item_kind, item, f"{path}[{i}]")
            if found:
                return found
        return None
    if origin is dict or kind is dict:
        if type(value) is not dict:
            return (path, value, kind)
        args = typing.get_args(kind)
        item_kind = args[1] if args else Any
        for key, item in value.items():
            if type(key) is not str:
                return (f"{path} key {key!r}", key, str)
            found = _find(item_kind, item, f"{path}[{key!r}]")
            if found:
                return found
        return None
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        if isinstance(value, kind):
            return None
        if type(value) is str and value in kind._value2member_map_:
            return None
        return (path, value, kind)
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        if not isinstance(value, kind):
            return (path, value, kind)
        for name, hint, exact in _fields(kind):
            item = getattr(value, name, None)
            if exact is not None and type(item) is exact:
                continue  # the common case, without a call per field (probes are frequent)
            found = _find(hint, item, f"{path}.{name}")
            if found:
                return found
        return None
    if kind is float:
        return None if type(value) in (int, float) else (path, value, kind)
    if kind is int:
        return None if type(value) is int else (path, value, kind)
    if kind is bool:
        return None if type(value) is bool else (path, value, kind)
    if kind is str:
        return None if isinstance(value, str) else (path, value, kind)
    raise TypeError(f"contract_check: no rule for {kind!r}")


def value_problem(kind: Any, value: Any, what: str) -> str:
    """``""`` if ``value`` is a ``kind`` all the way down, else one sentence beginning with
    ``what`` (e.g. ``"inspect returned"``) naming the first field that is wrong."""
    found = _find(kind, value, "")
    if found is None:
        return ""
    path, bad, expected = found
    expected_text = f"expected {type_name(expected)} ({WHERE})"
    if not path:
        return f"{what} {_what(bad)}, {expected_text}"
    if expected is Any:
        expected_text = f"expected JSON data: str, int, float, bool, None, list, dict ({WHERE})"
    elif expected is _CANONICAL:
        expected_text = f"expected {_CANONICAL}"
    owner = type_name(kind)
    article = "an" if owner[:1] in "AEIOU" else "a"
    shown = repr(bad) if isinstance(bad, str) and len(bad) <= 40 else _what(bad)
    if expected is _CANONICAL and not isinstance(bad, str):
        shown = f"{_what(bad)} {bad!r}"
    return f"{what} {article} {owner} whose {path.lstrip('.')} is {shown}, {expected_text}"


def driver_result_problem(method: str, value: Any) -> str:
    """``""`` if what a driver call returned is what :class:`~harness.contract.Runtime` (or,
    for ``open``, :class:`~harness.contract.Implementation`) promises, else why not."""
    if method == "open":
        missing = [name for name in RUNTIME_METHODS if not callable(getattr(value, name, None))]
        if not missing:
            return ""
        if value is None or len(missing) == len(RUNTIME_METHODS):
            return (f"open returned {_what(value)}, expected a Runtime ({WHERE}: an object "
                    f"with {', '.join(RUNTIME_METHODS)})")
        return (f"open returned {_what(value)}, which is not a Runtime ({WHERE}): missing "
                f"method(s) {', '.join(missing)}")
    kind = driver_result_type(method)
    if kind is None:
        return ""
    return value_problem(kind, value, f"{method} returned")


class ContractViolation(Exception):
    """A value an implementation handed over is not of the contract's types (the message is
    a :func:`value_problem` sentence)."""
