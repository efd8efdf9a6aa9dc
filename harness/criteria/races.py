"""Concurrent duplicate deliveries: when did two instances really race for one operation?

A ``concurrent_turn`` is recorded as two driver calls (role A, role B; see
``harness/trace/record.py``). It only tests anything when the race really happened:

* the hold engaged: instance A hit a failpoint the world answered with action ``hold``
  inside A's call, before B's call began, and B's call records ``held: true``;
* A was held *in* the operation: the hold's context names it (or A hit a failpoint naming it
  earlier in its call), and its result was not saved yet at the hold (the store read at the
  hold shows no saved result; without that reading, the ledger shows no execution yet);
* B reached the same operation while A was held: B hit a failpoint naming it during its
  call, or the world served B a model response carrying that very call.

Anything less (a hold that never engaged, a hold before A saw the call, a hold after the
result was saved) is two turns in sequence, which tests nothing about a claim. Pure
functions over a Trace; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.contract import Delivery
from harness.criteria import trace_readings as s
from harness.trace.record import Kind, Trace, TraceEvent


@dataclass(frozen=True, slots=True)
class ConcurrentTurn:
    """One ``concurrent_turn`` step: A's call, B's call (None when B never ran) and the hold."""

    session_id: str
    a: s.DriverSpan
    b: s.DriverSpan | None
    hold: TraceEvent | None
    """A's failpoint hit answered with ``hold`` (None: the hold never engaged)."""

    @property
    def engaged(self) -> bool:
        return self.hold is not None and self.b is not None and bool(self.b.args.get("held"))

    @property
    def end(self) -> int | None:
        ends = [span.end_index for span in (self.a, self.b) if span is not None]
        return None if None in ends else max(ends)


def concurrent_turns(trace: Trace) -> tuple[ConcurrentTurn, ...]:
    spans = [sp for sp in s.driver_spans(trace) if sp.method == "concurrent_turn"]
    out = []
    for a in spans:
        if a.args.get("role", "A") != "A":
            continue
        a_end = a.end_index if a.end_index is not None else len(trace.events)
        b = next((sp for sp in spans if sp.args.get("role") == "B" and a.index < sp.index < a_end), None)
        stop = b.index if b is not None else a_end
        hold = next((e for e in trace.of_kind(Kind.FAILPOINT) if a.index < e.index < stop
                     and e.instance == a.instance and e.data.get("action") == "hold"), None)
        session = str(a.args.get("session_id") or s.default_session(trace))
        out.append(ConcurrentTurn(session, a, b, hold))
    return tuple(out)


def raced_operations(trace: Trace, turn: ConcurrentTurn) -> tuple[s.OpKey, ...]:
    """The operations both instances reached while A was held with no result saved."""
    if not turn.engaged:
        return ()
    assert turn.hold is not None and turn.b is not None
    b_end = turn.b.end_index if turn.b.end_index is not None else len(trace.events)
    candidates = {c.key for c in s.emitted_calls(trace) if turn.a.index < c.index < b_end
                  and c.session_id == turn.session_id}
    out = []
    for key in sorted(candidates):
        if not s.op_hits(trace, key, instance=turn.a.instance, after=turn.a.index, before=turn.hold.index + 1):
            continue  # A was held before it reached this operation
        if _result_saved_at_hold(trace, turn.hold, key):
            continue  # nothing left to race for
        reached_by_b = s.op_hits(trace, key, instance=turn.b.instance, after=turn.b.index, before=b_end) or any(
            c.key == key and c.instance == turn.b.instance and turn.b.index < c.index < b_end
            for c in s.emitted_calls(trace))
        if reached_by_b:
            out.append(key)
    return tuple(out)


def _result_saved_at_hold(trace: Trace, hold: TraceEvent, key: s.OpKey) -> bool:
    probe = s.failpoint_probe(trace, hold)
    if probe is not None:
        op = s.find_op(probe.observation, key)
        return op is not None and op.delivery is not Delivery.PENDING
    return s.last_row_before(trace, key, hold.index) is not None
