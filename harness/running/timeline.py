"""A failing scenario's timeline: what each implementation instance did, as plain data.

Guarantees of :func:`build_timeline` (a pure function of the trace): one entry per event a
reader needs to follow the story, in trace order, each in the lane of the instance it
belongs to: driver calls and what they raised, crashes, restarts, hangs, failpoints where a
fault fired, model requests, approval prompts, and the world's ledger rows (``tool_executed``,
with their ``ledger_seq``), refused starts (``tool_unavailable``) and UI publications; every
cited event is kept whatever its kind. The result stays within :data:`ENTRIES_MAX` entries:
routine entries (driver calls and returns, model requests, prompts) go first, and the number
left out is recorded; crashes, restarts, hangs, fired faults, ledger rows, UI publications and
cited events are never dropped for routine ones.
"""

from __future__ import annotations

from typing import Iterable

from harness.report.result import Timeline, TimelineEntry
from harness.trace.record import Kind, Trace, TraceEvent
from harness.trace.lines import compact, render_event

ENTRIES_MAX = 400
LABEL_CHARS_MAX = 120

_KEY_KINDS = frozenset({
    Kind.CRASH, Kind.RESTART, Kind.HANG, Kind.TOOL_EXECUTED, Kind.TOOL_UNAVAILABLE,
    Kind.UI_PUBLISH,
})
_ROUTINE_KINDS = frozenset({
    Kind.DRIVER_CALL, Kind.DRIVER_RAISED, Kind.MODEL_REQUEST, Kind.APPROVAL_PROMPT,
})


def _short(text: str) -> str:
    return text if len(text) <= LABEL_CHARS_MAX else text[: LABEL_CHARS_MAX - 1] + "…"


def _label(event: TraceEvent) -> str:
    data = event.data
    kind = event.kind
    if kind == Kind.DRIVER_CALL:
        role = f" ({data['role']})" if "role" in data else ""
        return f"{data.get('method', '?')}{role}"
    if kind == Kind.DRIVER_RAISED:
        return f"{data.get('method', '?')} raised {data.get('exception', '?')}"
    if kind == Kind.CRASH:
        return f"CRASH at {data.get('failpoint', '?')}"
    if kind == Kind.RESTART:
        return f"restart as i{data.get('instance', event.instance)}"
    if kind == Kind.HANG:
        return f"HANG in {data.get('method', '?')}"
    if kind == Kind.FAILPOINT:
        return f"fault {data.get('action', '?')} at {data.get('name', '?')} (hit {data.get('hit', '?')})"
    if kind == Kind.MODEL_REQUEST:
        return f"model request {data.get('request_id', '?')}"
    if kind == Kind.APPROVAL_PROMPT:
        return f"approval prompt {data.get('wait_id', '?')} for {data.get('tool', '?')}"
    if kind == Kind.TOOL_EXECUTED:
        return (f"#{data.get('ledger_seq', '?')} {data.get('tool', '?')} "
                f"{data.get('tool_call_id', '?')}: {data.get('status', '?')}, "
                f"effect {data.get('effect', '?')}")
    if kind == Kind.TOOL_UNAVAILABLE:
        return f"{data.get('tool', '?')} {data.get('tool_call_id', '?')}: not started ({data.get('reason', '?')})"
    if kind == Kind.UI_PUBLISH:
        projection = data.get("projection") or {}
        actions = ",".join(projection.get("recovery_actions") or ()) or "no actions"
        return (f"{projection.get('tool_call_id', '?')}: {projection.get('status', '?')} "
                f"({actions})")
    return f"{kind} {compact(data, LABEL_CHARS_MAX)}"


def _wanted(event: TraceEvent, cited: set[int]) -> bool:
    if event.index in cited or event.kind in _KEY_KINDS or event.kind in _ROUTINE_KINDS:
        return True
    return event.kind == Kind.FAILPOINT and event.data.get("action", "none") != "none"


def _routine(entry: TimelineEntry, cited: set[int]) -> bool:
    return entry.index not in cited and entry.kind in _ROUTINE_KINDS


def build_timeline(trace: Trace, cited: Iterable[int] = ()) -> Timeline:
    """The timeline of ``trace`` keeping every event in ``cited`` (trace indexes)."""
    cited_set = set(cited)
    entries = [
        TimelineEntry(
            index=event.index,
            instance=event.instance,
            kind=event.kind,
            label=_short(_label(event)),
            ledger_seq=int(event.data.get("ledger_seq", 0) or 0)
            if event.kind == Kind.TOOL_EXECUTED else 0,
        )
        for event in trace.events
        if _wanted(event, cited_set)
    ]
    left_out = 0
    if len(entries) > ENTRIES_MAX:
        routine = [i for i, entry in enumerate(entries) if _routine(entry, cited_set)]
        excess = len(entries) - ENTRIES_MAX
        drop = set(routine[len(routine) - min(excess, len(routine)):])  # keep the early story
        entries = [entry for i, entry in enumerate(entries) if i not in drop]
        left_out = len(drop)
        if len(entries) > ENTRIES_MAX:  # only key events left: keep the first ones
            left_out += len(entries) - ENTRIES_MAX
            entries = entries[:ENTRIES_MAX]
    instances = tuple(sorted({event.instance for event in trace.events}))
    return Timeline(instances=instances, entries=tuple(entries), left_out=left_out)


def injected_failpoints(trace: Trace) -> tuple[str, ...]:
    """Failpoints where a planned fault fired (action other than ``none``), sorted."""
    return tuple(sorted({
        str(event.data.get("name", "")) for event in trace.of_kind(Kind.FAILPOINT)
        if event.data.get("action", "none") != "none" and event.data.get("name")
    }))


def cited_ledger_rows(trace: Trace, ledger_seqs: Iterable[int]) -> tuple[str, ...]:
    """Each cited ledger row (a ``tool_executed`` event by its ``ledger_seq``) rendered in
    full on one line, in ledger order; a cited number with no row says so."""
    wanted = sorted(set(ledger_seqs))
    rows = {event.data.get("ledger_seq"): event for event in trace.of_kind(Kind.TOOL_EXECUTED)}
    return tuple(
        render_event(rows[seq], width=None) if seq in rows
        else f"ledger row {seq}: not in the trace's ledger"
        for seq in wanted
    )
