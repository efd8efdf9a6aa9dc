"""Remember a pure function's result for the last few objects it was given, by identity.

The traces, operations and observations the criteria read are immutable values that are
asked the same questions many times in a row (55 criteria judge one trace; several oracles
share one index of it). Hashing them is impossible (they hold dicts) or as costly as the
answer, so the memo keys on identity instead.

Guarantees: the function's result is returned only for the very object it was computed
from — the memo holds that object, so a recycled ``id()`` never matches a new one — and at
most ``size`` objects (with their results) are kept alive; the function must be pure, and
its result must not be mutated by callers (return tuples, frozensets or read-only mappings).
Thread-safe enough for pure functions: a race computes the same answer twice.
"""

from __future__ import annotations

from typing import Callable, TypeVar

_A = TypeVar("_A")
_R = TypeVar("_R")


def by_identity(size: int = 1) -> Callable[[Callable[[_A], _R]], Callable[[_A], _R]]:
    """Decorator: remember ``compute(obj)`` for the last ``size`` distinct ``obj``."""
    assert size >= 1, "the memo needs room for one object"

    def decorate(compute: Callable[[_A], _R]) -> Callable[[_A], _R]:
        kept: list[tuple[_A, _R]] = []

        def remembered(obj: _A) -> _R:
            for held, result in kept:
                if held is obj:
                    return result
            result = compute(obj)
            kept.insert(0, (obj, result))
            del kept[size:]
            return result

        remembered.__name__ = compute.__name__
        remembered.__qualname__ = compute.__qualname__
        remembered.__doc__ = compute.__doc__
        remembered.__wrapped__ = compute  # type: ignore[attr-defined]
        return remembered

    return decorate
