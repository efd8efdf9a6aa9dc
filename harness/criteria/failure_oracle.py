"""What the failure policy demands, computed from the failures the world observed.

Pure functions over a trace; nothing here trusts what the implementation says about its
table. Guarantees:

* :func:`failure_events` lists one failure per operation, in world order, from the world's
  own records: its last ledger row ending in an error (the tool's ``error_kind``, or
  ``permission_denied`` for an escalation request), a last attempt the world refused to
  start (``tool_unavailable``: transient), or a served call that never ran and was denied
  (the store's pre-call denial, a classifier risk denial the world answered, or a static
  deny layer the harness recomputes from the rules in force);
* :func:`dedup_key` is the key the policy defines: Bash without ``description`` only,
  every other tool all args, no normalisation (L1.3–L1.5);
* :func:`table_model` replays those failures (and any checkpoint the harness loaded, read
  from the fixture bytes) through a recent-failure table of the fixed capacity
  :data:`FAILURE_TABLE_CAPACITY` (16), the least recently failed key evicted first: which
  keys it must hold after each event and which evictions happened (L1.1, L1.2);
* :func:`counted_failures` says which earlier failures count toward an operation's repeat
  limit (same session, tool and key, a strict failure under the same permission version,
  since the key last succeeded): at ``failure_repeat_limit`` of them the call is refused
  without running.

Only ledger failures are *certain* entries of the table (the tool ran and failed); denials
and unavailable tools are *possible* ones (the design leaves their place in the table to the
implementation), so cross-checks use certain failures as a lower bound and all of them as
the set an entry may come from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.contract import FAILURE_TABLE_CAPACITY, DecisionSource, Outcome, Permission
from harness.criteria import facts as F
from harness.trace.record import Kind, Trace, TraceEvent

STRICT_FAILURE_KINDS = ("failed", "param_error")
"""Executed failures that certainly count toward the repeat limit."""

STRICT_DENIAL_SOURCES = (
    DecisionSource.HARD_CONSTRAINT.value,
    DecisionSource.CAPABILITY.value,
    DecisionSource.PLAN_MODE.value,
    DecisionSource.EXPLICIT_DENY.value,
    DecisionSource.DEFAULT_DENY.value,
    DecisionSource.REPEAT_GUARD.value,
)
"""Denials that certainly count toward the repeat limit (classifier risk denials do not:
L3.9; cancellations and missing verdicts are not failures of the call)."""


@dataclass(frozen=True, slots=True)
class FailureEvent:
    index: int
    """The trace event at which the world saw the failure."""
    session_id: str
    tool_call_id: str
    tool: str
    key: str
    kind: str
    source: str
    """"ledger" (certain), "unavailable" or "denial" (possible table entries)."""
    permission_version: int
    ledger_seq: int | None = None

    @property
    def certain(self) -> bool:
        return self.source == "ledger"


@dataclass(frozen=True, slots=True)
class Eviction:
    index: int
    """The index of the failure event that pushed ``key`` out."""
    session_id: str
    key: str
    by: str
    """The key whose failure evicted it."""
    by_call: str = ""
    """The tool_call_id of that failure."""


@dataclass(frozen=True, slots=True)
class LoadedTable:
    """Failure entries the harness itself read from a checkpoint fixture it loaded."""

    index: int
    session_id: str
    entries: tuple[dict[str, Any], ...]


@dataclass(frozen=True, slots=True)
class TableModel:
    events: tuple[FailureEvent, ...]
    evictions: tuple[Eviction, ...]
    loads: tuple[LoadedTable, ...]
    snapshots: tuple[tuple[int, str, tuple[str, ...]], ...]
    """(index, session, keys held after that event, oldest first), one per table change."""

    def keys_at(self, session_id: str, index: int) -> tuple[str, ...]:
        """The keys the table must hold after every event before ``index``."""
        held: tuple[str, ...] = ()
        for at, session, keys in self.snapshots:
            if at < index and session == session_id:
                held = keys
        return held

    def distinct_keys(self, session_id: str) -> frozenset[str]:
        return frozenset(e.key for e in self.events if e.session_id == session_id)

    def sessions(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(e.session_id for e in self.events))


def dedup_key(trace: Trace, session_id: str, tool: str, args: dict[str, Any]) -> str:
    return F.expected_dedup_key(trace, session_id, tool, args)


def fixture_key(entry: dict[str, Any]) -> str:
    """A loaded entry's place in the model (its own key is opaque to the harness)."""
    return "fixture:" + str(entry.get("dedup_key", entry.get("last_execution_id", "")))


def _version(trace: Trace, op: F.Op, row: TraceEvent | None, at: int) -> int:
    if row is not None and isinstance(row.data.get("permission_version"), int):
        return int(row.data["permission_version"])
    return F.rules_at(trace, op.session_id, at).permission_version


def _denied_at(trace: Trace, op: F.Op, revs) -> int | None:
    """Where a served call that never ran was denied, or None."""
    if not op.served:
        return None
    served_at = op.served[0].end_index
    # Dated where the store first shows the denial, not where the call was served: calls of
    # one response are served together and decided one after another (found by generation:
    # sixteen denials dated before the executed failure that came first seemed never to
    # have evicted it).
    shown = next((point.index for point, view in op.views
                  if F.value(view.permission) == Permission.DENY.value), served_at)
    if F.pre_call_denied(op) and F.value(op.latest.decided_by) != DecisionSource.CANCELLATION.value:
        return shown
    for review in F.reviews_of(revs, op.key):
        if F.effective_outcome(trace, review) == "risk_deny":
            return review.event.index
    if F.decision_at(trace, op, served_at).permission is Permission.DENY:
        return shown
    return None


def failure_events(trace: Trace, ops: dict[F.OpKey, F.Op] | None = None) -> tuple[FailureEvent, ...]:
    ops = F.operations(trace) if ops is None else ops
    revs = F.reviews(trace, ops)
    found: list[FailureEvent] = []
    for op in ops.values():
        key = dedup_key(trace, op.session_id, op.tool, op.args)
        attempts = sorted([*op.rows, *op.unavailable], key=lambda e: e.index)
        if attempts:
            last = attempts[-1]
            if last.kind == Kind.TOOL_UNAVAILABLE:
                found.append(FailureEvent(last.index, op.session_id, op.tool_call_id, op.tool, key,
                                          "transient", "unavailable", _version(trace, op, None, last.index)))
            elif last.data.get("status") == "error":
                kind = ("permission_denied" if last.data.get("escalation_requested")
                        else str(last.data.get("error_kind") or "failed"))
                found.append(FailureEvent(last.index, op.session_id, op.tool_call_id, op.tool, key, kind,
                                          "ledger", _version(trace, op, last, last.index),
                                          int(last.data.get("ledger_seq", -1))))
            continue
        at = _denied_at(trace, op, revs)
        if at is not None:
            found.append(FailureEvent(at, op.session_id, op.tool_call_id, op.tool, key, "permission_denied",
                                      "denial", _version(trace, op, None, at)))
    return tuple(sorted(found, key=lambda e: (e.index, e.session_id, e.tool_call_id)))


def loaded_tables(trace: Trace) -> tuple[LoadedTable, ...]:
    """Failure entries of every checkpoint fixture the harness loaded and could read."""
    found = []
    for call in trace.of_kind(Kind.DRIVER_CALL):
        if call.data.get("method") != "load_checkpoint" or call.data.get("skipped"):
            continue
        args = F.driver_args(call)
        content = args.get("fixture_content")
        if not isinstance(content, dict) or not isinstance(content.get("failure_entries"), list):
            continue
        entries = tuple(e for e in content["failure_entries"] if isinstance(e, dict))
        found.append(LoadedTable(call.index, F.arg_session(args, F.default_session(trace)), entries))
    return tuple(found)


def table_model(trace: Trace, ops: dict[F.OpKey, F.Op] | None = None) -> TableModel:
    events = failure_events(trace, ops)
    loads = loaded_tables(trace)
    tables: dict[str, list[str]] = {}
    evictions: list[Eviction] = []
    snapshots: list[tuple[int, str, tuple[str, ...]]] = []
    steps: list[tuple[int, Any]] = [(e.index, e) for e in events] + [(lt.index, lt) for lt in loads]
    for _, step in sorted(steps, key=lambda s: s[0]):
        if isinstance(step, LoadedTable):
            # A loaded checkpoint replaces the table; only the most recent entries fit.
            kept = [fixture_key(e) for e in step.entries][-FAILURE_TABLE_CAPACITY:]
            tables[step.session_id] = list(dict.fromkeys(kept))
            snapshots.append((step.index, step.session_id, tuple(tables[step.session_id])))
            continue
        table = tables.setdefault(step.session_id, [])
        if step.key in table:
            table.remove(step.key)
        table.append(step.key)
        while len(table) > FAILURE_TABLE_CAPACITY:
            evictions.append(Eviction(step.index, step.session_id, table.pop(0), step.key, step.tool_call_id))
        snapshots.append((step.index, step.session_id, tuple(table)))
    return TableModel(events, tuple(evictions), loads, tuple(snapshots))


# --------------------------------------------------------------------------- repeat judgement


def succeeded(op: F.Op) -> bool:
    rows = F.attempt_rows(op)
    if rows:
        return rows[-1].data.get("status") == "ok"
    view = op.latest
    return view is not None and F.value(view.outcome) == Outcome.SUCCEEDED.value


def strict_failure(op: F.Op) -> bool:
    """A failure that certainly consumes the repeat budget: an executed ``failed`` or
    ``param_error``, or a denial by a rule layer, the default or the guard itself."""
    rows = F.attempt_rows(op)
    if rows:
        last = rows[-1]
        return (last.data.get("status") == "error" and not last.data.get("escalation_requested")
                and last.data.get("error_kind") in STRICT_FAILURE_KINDS)
    return F.pre_call_denied(op) and F.value(op.latest.decided_by) in STRICT_DENIAL_SOURCES


def counted_failures(trace: Trace, prior: list[F.Op], op: F.Op) -> list[F.Op]:
    """The earlier operations that count toward ``op``'s repeat limit."""
    if op.latest is None:
        return []
    my_key = dedup_key(trace, op.session_id, op.tool, op.args)
    version = op.latest.identity.permission_version
    counted: list[F.Op] = []
    for p in prior:
        if (p.session_id != op.session_id or p.tool != op.tool or not p.precedes(op)
                or p.latest is None or dedup_key(trace, p.session_id, p.tool, p.args) != my_key):
            continue
        if succeeded(p):
            counted = []
        elif p.latest.identity.permission_version == version and strict_failure(p):
            counted.append(p)
    return counted


def must_refuse(trace: Trace, prior: list[F.Op], op: F.Op) -> list[F.Op]:
    """The failures that oblige the runtime to refuse ``op`` without running it (empty when
    it may run)."""
    counted = counted_failures(trace, prior, op)
    limit = F.thresholds(trace, op.session_id).failure_repeat_limit
    return counted if len(counted) >= limit else []
