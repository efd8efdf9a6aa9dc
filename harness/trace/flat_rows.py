"""The value key of a *flat* row: equal keys mean the rows have the same text and types.

A store read afresh hands back new row objects equal to the ones read before (checkpoint
and failure-table rows are rebuilt at every reading), so what is computed once per row
object (its canonical text, its contract check) is computed again and again for equal
rows. For a frozen dataclass whose every field holds a ``str``, ``int``, ``bool``, ``None``
or an enum member, :func:`flat_key` gives ``(type, field values, field types)``: two rows
with equal keys have fields of exactly the same types with equal values, and for those
types equal values have the same JSON text and pass or fail the same type check (an enum
member equals only itself within its class). Anything else gets ``None``: floats
(``0.0 == -0.0``, different texts), containers (equal ones may mix ``1`` and ``True``),
mutable or non-dataclass rows, subclasses of the scalar types.
"""

from __future__ import annotations

import dataclasses
import enum
import operator
from typing import Any, Callable

FlatKey = tuple[type, tuple[Any, ...], tuple[type, ...]]

_SCALARS = (str, int, bool, type(None))
_READERS: dict[type, Callable[[Any], tuple[Any, ...]] | None] = {}
_FLAT_TYPES: dict[tuple[type, ...], bool] = {}


def flat_key(row: Any) -> FlatKey | None:
    """``(type(row), its field values, their types)`` for a flat frozen dataclass row, else
    None (see the module docstring)."""
    kind = type(row)
    try:
        read = _READERS[kind]
    except KeyError:
        read = _READERS[kind] = _reader(kind)
    if read is None:
        return None
    values = read(row)
    types = tuple(map(type, values))
    flat = _FLAT_TYPES.get(types)
    if flat is None:
        flat = _FLAT_TYPES[types] = all(t in _SCALARS or issubclass(t, enum.Enum)
                                        for t in types)
    return (kind, values, types) if flat else None


def _reader(kind: type) -> Callable[[Any], tuple[Any, ...]] | None:
    """The field values of a frozen dataclass as a tuple, read in C; None for other types."""
    params = getattr(kind, "__dataclass_params__", None)
    if params is None or not params.frozen or issubclass(kind, enum.Enum):
        return None
    names = tuple(f.name for f in dataclasses.fields(kind))
    if len(names) < 2:
        return None  # attrgetter of one name gives the value itself, not a tuple
    return operator.attrgetter(*names)
