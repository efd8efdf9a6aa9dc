"""How one sequence differs from the one before it, in time linear in what changed.

A run's successive store readings (and a session's successive model requests) are long
sequences that mostly repeat the previous one: the same row objects in the same places,
a row or two added or replaced. Walking every element of every reading in Python made the
harness quadratic in a session's length; these helpers find where two sequences stop
being *the very same objects* in C (``map(operator.is_, ...)``), and only then look at
elements one by one.

Guarantees: :func:`common_prefix` and :func:`common_suffix` return the longest run of
elements, from the start or from the end, for which ``same(a, b)`` holds — where ``same``
must hold for identical objects (it is not called for them) — so their answer depends on
the sequences' contents as ``same`` judges them, never on which objects happen to be
shared. Pure functions; nothing is kept.
"""

from __future__ import annotations

import operator
from itertools import islice
from typing import Any, Callable, Sequence

Same = Callable[[Any, Any], bool]


def _identical_from(a: Sequence[Any], b: Sequence[Any], start: int, stop: int) -> int:
    """The first position in ``[start, stop)`` where ``a`` and ``b`` hold different objects
    (``stop`` when none), found in C."""
    if start >= stop:
        return stop
    flags = bytes(map(operator.is_, islice(a, start, stop), islice(b, start, stop)))
    found = flags.find(0)
    return stop if found < 0 else start + found


def common_prefix(a: Sequence[Any], b: Sequence[Any], same: Same | None = None) -> int:
    """How many leading elements of ``a`` and ``b`` are the same (identical objects, or
    ``same`` of the two when given)."""
    stop = min(len(a), len(b))
    at = _identical_from(a, b, 0, stop)
    if same is None:
        return at
    while at < stop and same(a[at], b[at]):
        at = _identical_from(a, b, at + 1, stop)
    return at


def common_suffix(a: Sequence[Any], b: Sequence[Any], limit: int,
                  same: Same | None = None) -> int:
    """How many trailing elements of ``a`` and ``b`` are the same (as :func:`common_prefix`),
    at most ``limit``."""
    stop = min(len(a), len(b), max(limit, 0))
    if not stop:
        return 0
    # the reversed tails as sequences of their own, compared from their start
    ra, rb = a[len(a) - stop:][::-1], b[len(b) - stop:][::-1]
    return common_prefix(ra, rb, same)
