"""How much an implementation under test may make the harness hold (documented maxima).

Guarantees: :class:`Limits` names every bound the harness puts on what an implementation
sends it (line length on the wire, JSON nesting depth, inspect answers, messages read ahead
of the harness's answers, world events per scenario, bytes per scenario); :func:`current_limits` gives the
defaults overridden by ``$LIFECYCLE_HARNESS_LIMITS`` (``name=value`` pairs separated by
commas, sizes with an optional ``KiB``/``MiB``/``GiB`` suffix, e.g.
``LIFECYCLE_HARNESS_LIMITS="line_bytes=1MiB,events_per_scenario=5000"``). An unknown name or a
bad value is a :class:`~harness.contract.errors.UsageError` (exit 2) naming it. Past a limit the
implementation fails (a scenario error, exit 1) with a :class:`LimitExceeded` message naming
the limit, its value, how much was sent and how to raise it. Imports nothing of the harness
but :mod:`harness.contract.errors` lazily, so the world and the wire codec can both use it.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass

LIMITS_ENV = "LIFECYCLE_HARNESS_LIMITS"

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB


@dataclass(frozen=True, slots=True)
class Limits:
    line_bytes: int = 8 * MiB
    """One message line on the wire (any method but ``inspect``)."""
    inspect_bytes: int = 32 * MiB
    """One ``inspect`` answer (the observation of the durable store)."""
    json_depth: int = 200
    """Nesting depth of arrays and objects in one message."""
    unanswered_messages: int = 256
    """Messages an implementation may send ahead of the harness's answers (the protocol is
    strictly nested: a well-behaved one has at most one request unanswered)."""
    events_per_scenario: int = 10_000
    """Events the implementation makes the world record in one scenario run (the bundled
    suite's largest run records under 1,500)."""
    scenario_bytes: int = 64 * MiB
    """Bytes of protocol lines an out-of-process implementation sends the harness in one
    scenario run: port requests, driver results and ``inspect`` answers of all its
    processes on that run's data dir together (the bundled suite's largest run brings in
    well under 1 MiB). What a scenario can make the harness hold is bounded by bytes, not
    only by counts."""

    def describe(self, name: str) -> str:
        """``name=value`` as a user would write it, for messages."""
        return f"{name}={_human(getattr(self, name)) if name.endswith('_bytes') else getattr(self, name)}"


DEFAULT_LIMITS = Limits()
_FIELDS = {field.name for field in dataclasses.fields(Limits)}
_SIZE = re.compile(r"^\s*(\d+)\s*(b|kib|kb|k|mib|mb|m|gib|gb|g)?\s*$", re.IGNORECASE)
_UNITS = {None: 1, "b": 1, "k": KiB, "kb": KiB, "kib": KiB, "m": MiB, "mb": MiB, "mib": MiB,
          "g": GiB, "gb": GiB, "gib": GiB}


class LimitExceeded(BaseException):
    """The implementation went past one of the :class:`Limits`.

    A ``BaseException`` (like ``SimulatedCrash``) so an implementation's ``except Exception``
    cannot swallow it: it ends the driver call it happened in, and the run reports it."""

    def __init__(self, limit: str, value: int, sent: str, what: str) -> None:
        unit = _human(value) if limit.endswith("_bytes") else str(value)
        super().__init__(
            f"{what}: {sent}, past the limit {limit}={unit}; raise it with "
            f"{LIMITS_ENV}=\"{limit}=...\" if the implementation really needs more")
        self.limit = limit
        self.value = value


def _human(size: int) -> str:
    for unit, name in ((GiB, "GiB"), (MiB, "MiB"), (KiB, "KiB")):
        if size >= unit and size % unit == 0:
            return f"{size // unit}{name}"
    return f"{size}B" if size < KiB else f"{size / MiB:.1f}MiB"


def human_bytes(size: int) -> str:
    """A byte count for messages (``"8MiB"``, ``"1.5MiB"``, ``"300B"``)."""
    return _human(size)


def parse_limits(text: str, base: Limits = DEFAULT_LIMITS) -> Limits:
    """``base`` with the ``name=value`` pairs of ``text`` applied (see the module doc)."""
    from harness.contract.errors import UsageError

    changes: dict[str, int] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep or name not in _FIELDS:
            raise UsageError(f"{LIMITS_ENV}: {part!r} is not name=value with a known name; "
                             f"known: {', '.join(sorted(_FIELDS))}")
        match = _SIZE.match(value)
        if match is None:
            raise UsageError(f"{LIMITS_ENV}: {name}={value!r} is not a number (sizes may end in "
                             "KiB, MiB or GiB)")
        number = int(match.group(1)) * _UNITS[(match.group(2) or "").lower() or None]
        if number <= 0:
            raise UsageError(f"{LIMITS_ENV}: {name} must be positive")
        changes[name] = number
    return dataclasses.replace(base, **changes)


def current_limits() -> Limits:
    """The defaults overridden by ``$LIFECYCLE_HARNESS_LIMITS``."""
    text = os.environ.get(LIMITS_ENV, "")
    return parse_limits(text) if text.strip() else DEFAULT_LIMITS
