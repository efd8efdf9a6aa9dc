"""Did the planned faults and holds happen? A pure judgement over a trace's world events.

A fault or hold that never happened tests nothing: the scenario's criteria would count as
exercised by a run that never left the happy path. :func:`unfired` lists what a run planned
but the world never carried out; the runner turns a non-empty list into a run error
(scenario status ``error``, the gate fails).

What "fired" means, per fault of ``trace.meta.faults`` (index ``i``), read from the world's
``FAILPOINT`` events (the world records the fault it applies as ``fault_index``):

* on a hit ``h``: a ``FAILPOINT`` event of the fault's failpoint with ``hit == h`` and
  ``fault_index == i`` whose recorded ``action`` is the fault's action (``crash``,
  ``raise``, ``delay``, ``hold``): the world carried the action out there. A planned hold
  outside a concurrent turn is recorded with action ``none`` (``params.skipped``): it did
  not fire. ``change_rules`` and ``cancel`` fire only when the runner's re-entrant call
  followed (a ``DRIVER_CALL`` of that instance with ``via_failpoint`` the failpoint, before
  that instance's next failpoint): reaching the failpoint while no runtime of the instance
  could take the call applies nothing. A dead instance never reaches a failpoint (the world
  refuses its calls before counting the hit), so a hit counts only for a live instance;
* a required fault fires on every hit it lists (``"1,3"``: hits 1 and 3) and at least once
  in its ``N+`` range (``"3+"``: some hit from the third on);
* an ``optional`` fault may not fire at all (nothing is reported for it).

Per ``concurrent_turn`` (role A's ``DRIVER_CALL``): the hold engaged when a ``FAILPOINT``
event of A's instance with action ``hold`` lies between A's call and B's; otherwise the two
turns ran one after the other and the step tested no concurrency. A step marked optional
(its call's ``args.optional``), or whose hold comes only from planned ``hold`` faults that
are all optional, is exempt.

Each :class:`Unfired` names the fault (index and rendered text) or the step, its failpoint,
how many hits of that failpoint the run reached, and the likely cause.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from harness.faults.plan import Action, Fault, from_spec, render
from harness.trace.record import Kind, Source, Trace, TraceEvent

FAULT_FIRED = "fault-fired"
"""The kill-matrix label of this judgement: a mutant expected to be caught by it is caught
when some scenario errors because a planned fault or hold of it did not happen."""

REENTRANT_ACTIONS = frozenset({Action.CHANGE_RULES, Action.CANCEL})
"""Actions the runner carries out by calling the live runtime from inside the failpoint."""


@dataclass(frozen=True, slots=True)
class Unfired:
    """One planned fault (``fault_index`` >= 0) or concurrent_turn hold (``fault_index`` -1)
    that did not happen as planned."""

    fault_index: int
    what: str
    """The rendered fault (``fault 1: after_result_saved, hit #1 -> crash (...)``) or the
    step (``concurrent_turn #1 (hold at after_prepare)``)."""
    failpoint: str
    hits_reached: int
    """How many hits of ``failpoint`` the run reached (all instances)."""
    cause: str

    def message(self) -> str:
        return (f"{self.what}: did not fire ({self.cause}; {self.failpoint} reached "
                f"{self.hits_reached} time(s))")


def unfired(trace: Trace) -> tuple[Unfired, ...]:
    """Every required fault and concurrent_turn hold of ``trace`` that did not happen."""
    events = trace.events
    points = [e for e in events if e.kind == Kind.FAILPOINT]
    faults = tuple(from_spec(spec) for spec in trace.meta.faults)
    lines = render(faults)
    found: list[Unfired] = []
    for index, fault in enumerate(faults):
        if fault.optional:
            continue
        cause = _fault_missing(fault, index, points, events)
        if cause:
            found.append(Unfired(index, lines[index], fault.failpoint.value,
                                 _reached(points, fault.failpoint.value), cause))
    found.extend(_holds_missing(faults, points, events))
    return tuple(found)


def messages(trace: Trace) -> tuple[str, ...]:
    """:func:`unfired` as one line each, for a run's error."""
    return tuple(item.message() for item in unfired(trace))


# --------------------------------------------------------------------------- faults


def _reached(points: Sequence[TraceEvent], failpoint: str) -> int:
    return max((int(e.data.get("hit", 0)) for e in points if e.data.get("name") == failpoint),
               default=0)


def _fired(event: TraceEvent, fault: Fault, events: Sequence[TraceEvent]) -> bool:
    if event.data.get("action") != fault.action.value:
        return False
    if fault.action not in REENTRANT_ACTIONS:
        return True
    for later in events[event.index + 1:]:
        if later.instance != event.instance:
            continue
        if later.kind == Kind.FAILPOINT:
            return False
        if (later.kind == Kind.DRIVER_CALL and later.source == Source.HARNESS
                and later.data.get("via_failpoint") == fault.failpoint.value):
            return True
    return False


def _fault_missing(fault: Fault, index: int, points: Sequence[TraceEvent],
                   events: Sequence[TraceEvent]) -> str:
    """Why the fault did not fire as planned, or "" when it did."""
    name = fault.failpoint.value
    reached = _reached(points, name)
    mine = {int(e.data.get("hit", 0)): e for e in points
            if e.data.get("name") == name and e.data.get("fault_index") == index}
    fired = {hit for hit, e in mine.items() if _fired(e, fault, events)}
    schedule = fault.schedule
    listed = [h for h in schedule.hits if schedule.from_hit is None or h < schedule.from_hit]
    for hit in listed:
        if hit not in fired:
            return _why(fault, hit, reached, mine.get(hit))
    if schedule.from_hit is not None and not any(h >= schedule.from_hit for h in fired):
        later = [mine[h] for h in sorted(mine) if h >= schedule.from_hit]
        return _why(fault, schedule.from_hit, reached, later[0] if later else None)
    return ""


def _why(fault: Fault, hit: int, reached: int, event: TraceEvent | None) -> str:
    if reached == 0:
        return ("failpoint never reached: the scenario's steps never lead there, or the "
                "implementation does not call this failpoint on this path")
    if event is None:
        return f"reached only {reached} time(s), so hit #{hit} never came"
    skipped = event.data.get("params", {}).get("skipped")
    if skipped:
        return f"hold skipped on hit #{hit}: {skipped}"
    if fault.action in REENTRANT_ACTIONS:
        return (f"hit #{hit} was reached by instance {event.instance}, but no re-entrant "
                f"{'update_rules' if fault.action is Action.CHANGE_RULES else 'cancel'} call "
                "followed (the instance had no live runtime to call, e.g. during open, or "
                "the rule change was refused)")
    return (f"hit #{hit} was reached but the world recorded action "
            f"{event.data.get('action')!r}, not {fault.action.value!r}")


# --------------------------------------------------------------------------- holds


def _holds_missing(faults: Sequence[Fault], points: Sequence[TraceEvent],
                   events: Sequence[TraceEvent]) -> list[Unfired]:
    holds = [f for f in faults if f.action is Action.HOLD]
    found = []
    number = 0
    for position, call in enumerate(events):
        if not (call.kind == Kind.DRIVER_CALL and call.data.get("method") == "concurrent_turn"
                and call.data.get("args", {}).get("role") == "A"):
            continue
        number += 1
        hold_at = str(call.data["args"].get("hold_at") or "")
        planned = [f for f in holds if f.failpoint.value == hold_at]
        if call.data["args"].get("optional") or (planned and all(f.optional for f in planned)):
            continue
        end = next((e.index for e in events[position + 1:]
                    if e.kind == Kind.DRIVER_CALL and e.data.get("method") == "concurrent_turn"
                    and e.data.get("args", {}).get("role") == "B"), len(events))
        window = [e for e in points
                  if call.index < e.index < end and e.instance == call.instance]
        if any(e.data.get("action") == Action.HOLD.value for e in window):
            continue
        at_hold = [e for e in window if e.data.get("name") == hold_at]
        if not at_hold:
            cause = (f"hold skipped: instance A's turn never reached {hold_at}, so the second "
                     "instance ran after it, not concurrently")
        else:
            cause = (f"hold skipped: instance A reached {hold_at} {len(at_hold)} time(s) in "
                     "its turn but on no hit the planned hold fires on")
        found.append(Unfired(-1, f"concurrent_turn #{number} (hold at {hold_at or '?'})",
                             hold_at, _reached(points, hold_at), cause))
    return found
