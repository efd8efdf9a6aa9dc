"""Contract values from wire JSON, with one decoder per type found once (the protocol's hot path).

Every message of process mode carries contract values both ways, and
:func:`harness.contract.from_json` works out how to decode a type again at every value of it
(``typing.get_origin``, ``dataclasses.is_dataclass``, the type hints, a path text per
field): about a third of each side's protocol work. :func:`decoder_for` looks at a type once
and keeps a plain function for it.

Guarantee: ``decoder_for(kind)(data, where)`` has exactly the outcome of
``from_json(kind, data, where)``. The fast path only accepts data in the exact JSON shapes
(``dict``, ``list``, ``str``, ``int``, ``float``, ``bool``, ``None``; an ``int`` for a
``float`` becomes a float, as there) and builds the same values the same way (dataclasses
through their constructor, enum members through their value table, tuples and dicts anew);
on anything else, and on any error, it hands the whole value to ``from_json``, which then
gives the value or raises its own error, word for word. Being stricter than ``from_json`` can
therefore only cost time, never change a result. Imports: :mod:`harness.contract` and the
standard library only (servers import this through :mod:`harness.remote.protocol`).
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import types
import typing
from typing import Any, Callable

from harness.contract import from_json, type_hints

Decoder = Callable[[Any, str], Any]
_Fast = Callable[[Any], Any]

_DECODERS: dict[Any, Decoder] = {}
_FAST: dict[Any, _Fast] = {}


class _Declined(Exception):
    """The fast path does not take this value: ``from_json`` decides."""


def decoder_for(kind: Any) -> Decoder:
    """``decode(data, where)`` for values of ``kind`` (see the module guarantee)."""
    decode = _DECODERS.get(kind)
    if decode is None:
        fast = _fast_for(kind)

        def decode(data: Any, where: str = "$") -> Any:
            try:
                return fast(data)
            except Exception:  # noqa: BLE001 - from_json decides, and raises its own error
                return from_json(kind, data, where)

        _DECODERS[kind] = decode
    return decode


def _fast_for(kind: Any) -> _Fast:
    fast = _FAST.get(kind)
    if fast is None:
        built: list[_Fast] = []
        # A placeholder while the type's own fields are built (a type that contains itself).
        _FAST[kind] = lambda data: built[0](data)
        try:
            fast = _build(kind)
        except Exception:  # noqa: BLE001 - a type we cannot plan for: from_json every time
            fast = _decline
        built.append(fast)
        _FAST[kind] = fast
    return fast


def _decline(data: Any) -> Any:
    raise _Declined


def _as_is(data: Any) -> Any:
    return data


def _build(kind: Any) -> _Fast:
    if kind is Any:
        return _as_is
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        return _optional(kind)
    if origin is tuple or origin is collections.abc.Sequence:  # a Sequence decodes to a tuple
        args = typing.get_args(kind)
        return _tuple_of(args[0] if args else Any)
    if origin is dict or kind is dict:
        args = typing.get_args(kind)
        return _dict_of(args[1] if args else Any)
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return _enum(kind)
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        return _dataclass(kind)
    scalar = _SCALARS.get(kind)
    return scalar if scalar is not None else _decline


def _optional(kind: Any) -> _Fast:
    options = typing.get_args(kind)
    others = [option for option in options if option is not type(None)]
    if len(others) != 1:
        return _decline  # several variants: from_json tries them in order
    inner = _fast_for(others[0])
    if len(others) == len(options):
        return inner

    def optional(data: Any) -> Any:
        return None if data is None else inner(data)

    return optional


def _tuple_of(item_kind: Any) -> _Fast:
    if item_kind is Any:
        def any_items(data: Any) -> tuple[Any, ...]:
            if type(data) is not list:
                raise _Declined
            return tuple(data)

        return any_items
    item = _fast_for(item_kind)

    def items(data: Any) -> tuple[Any, ...]:
        if type(data) is not list:
            raise _Declined
        return tuple([item(value) for value in data])

    return items


def _dict_of(value_kind: Any) -> _Fast:
    if value_kind is Any:
        def any_values(data: Any) -> dict[str, Any]:
            if type(data) is not dict:
                raise _Declined
            return dict(data)

        return any_values
    value_of = _fast_for(value_kind)

    def values(data: Any) -> dict[str, Any]:
        if type(data) is not dict:
            raise _Declined
        return {key: value_of(value) for key, value in data.items()}

    return values


def _enum(kind: type[enum.Enum]) -> _Fast:
    # Enum(value) looks the value up in this very table first; what it misses (unhashable
    # values, aliases found by search, _missing_ hooks) goes to from_json.
    members = kind._value2member_map_

    def member(data: Any) -> Any:
        return members[data]

    return member


def _dataclass(kind: type) -> _Fast:
    # from_json's own cache of the hints: filled here, it serves from_json's later calls too
    # (in a fork template, for every instance forked from it).
    hints = type_hints(kind)
    fields = {field.name: _fast_for(hints[field.name]) for field in dataclasses.fields(kind)}

    def instance(data: Any) -> Any:
        if type(data) is not dict:
            raise _Declined
        # An unknown name is a KeyError: from_json names it.
        return kind(**{name: fields[name](value) for name, value in data.items()})

    return instance


def _exact(kind: type) -> _Fast:
    def scalar(data: Any) -> Any:
        if type(data) is not kind:
            raise _Declined
        return data

    return scalar


def _float(data: Any) -> float:
    kind = type(data)
    if kind is float:
        return data
    if kind is int:
        return float(data)
    raise _Declined


_SCALARS: dict[Any, _Fast] = {str: _exact(str), int: _exact(int), bool: _exact(bool),
                              float: _float}
