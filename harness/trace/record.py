"""The Trace: everything that really happened in one scenario run, as plain frozen data.

A trace is what checkers judge. It is built by the runner and never by an implementation:

* ``events`` is one totally ordered list of what the world received and did (model requests
  served, exact classifier input, tool executions = the side-effect ledger, approval prompts,
  UI publications, failpoint hits), what the implementation emitted on its realtime event
  channel, and what the harness did (driver calls, crashes, restarts);
* ``observations`` are snapshots of the implementation's *durable* store, read back through
  ``Implementation.inspect`` at probe points (when a tool executes, when a prompt is shown,
  at failpoints) and at each quiescent point and restart;
* ``meta`` says which scenario, seed, fault plan, sessions and thresholds produced it.

Traces serialize to JSON exactly (``to_json``/``from_json`` of :mod:`harness.contract`), and
:func:`trace_digest` is stable across runs with the same seed (nothing wall-clock is kept).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Iterator

from harness.contract.canonical_text import canonical_text
from harness.trace.flat_rows import flat_key
from harness.trace.identity_memo import by_identity
from harness.contract import (
    Feature,
    Observation,
    SessionConfig,
    Thresholds,
    ToolSpec,
    canonical_json,
    from_json,
    to_json,
)


class Source:
    WORLD = "world"
    IUT = "iut"
    HARNESS = "harness"


class Kind:
    """Event kinds. ``data`` layouts are documented beside each constant."""

    # -- world (ground truth) --------------------------------------------------------
    MODEL_REQUEST = "model_request"
    """request_id, session_id, messages (Message JSON list), tools (names), script_index
    (which scripted response was served, -1 = default final answer), instance."""
    MODEL_STREAM_END = "model_stream_end"
    """request_id, how ("end" | "eof" | "transport_error" | "cancelled"), text (the text
    chunks served), tool_call_ids; tool_calls (the ToolCall JSON served, in order:
    tool_call_id, tool, args; criteria fall back to other records when it is absent)."""
    CLASSIFIER_REQUEST = "classifier_request"
    """request (ClassifierRequest JSON), raw (the exact canonical JSON the world received,
    a string; L2.2 compares its ``operation`` byte for byte with the call's canonical args),
    outcome, reason (the verdict the world answered), delay_s (virtual seconds the review
    took; L2.5 expects a ``timeout`` record when it exceeds classifier_timeout_s); review
    (the 1-based number of this review in the run, what ``[classifier].script`` keys on)."""
    TOOL_EXECUTED = "tool_executed"
    """One ledger row: ledger_seq, session_id, tool_call_id, execution_id, tool, kind, args,
    args_digest, permission_version, sandboxed, effect ("applied" | "partial" | "none"),
    status, output, error_kind, escalation_requested; also identity (the
    OperationIdentity JSON the implementation passed), invocation (1-based count of
    invocations of this tool_call_id in the run, retries and refusals included), behaviour
    (the scripted behaviour applied, "ok" by default) and, only when a file edit's
    ``expect_sha`` did not match, precondition_failed: true (the tool refused: no effect)."""
    TOOL_UNAVAILABLE = "tool_unavailable"
    """The world refused to start the tool (certainly not executed): same keys as above
    without ledger_seq/effect/status/output/error_kind/escalation_requested, plus reason."""
    APPROVAL_PROMPT = "approval_prompt"
    """wait_id, session_id, execution_id, tool_call_id, tool, args, reason."""
    UI_PUBLISH = "ui_publish"
    """projection (Projection JSON)."""
    FAILPOINT = "failpoint"
    """name, context, hit (1-based count of this name in this run), action ("none" |
    "crash" | "raise" | "delay" | "change_rules" | "cancel" | "hold"); params (the fired
    fault's parameters, e.g. session, rules, permission_version for change_rules; {} when
    nothing fired). ``context`` is the implementation's; criteria read its session_id,
    tool_call_id and execution_id when present. fault_index (position of the matching fault
    in the plan) is present when a plan fault matched; a planned ``hold`` that could not
    hold (no concurrent turn running that instance) is recorded as action "none" with params
    {planned: "hold", skipped: <why>}. A ``fail_checkpoint`` fault is recorded as "raise"."""

    # -- implementation's realtime channel --------------------------------------------
    LIFECYCLE_EVENT = "lifecycle_event"
    """event (LifecycleEvent JSON). ``event.data`` keys criteria read: status
    (ModelRequestStatus) on model_request_ended, outcome (Outcome) on result_saved, status
    (TurnStatus) on turn_ended."""

    # -- harness ----------------------------------------------------------------------
    DRIVER_CALL = "driver_call"
    """method, args (a JSON object keyed by the Runtime method's parameter names, e.g.
    update_rules: session_id, rules (Rule JSON list), permission_version; answer_approval:
    wait_id (the resolved id, never "next"), approve; run_turn: session_id, user_text;
    cancel: session_id; concurrent_turn: session_id, user_text, hold_at; recover: {};
    load_checkpoint: session_id, fixture (the declared fixture's name) and expected_messages
    (Message JSON list the fixture holds, from the fixture's manifest; L1.6 looks for them
    in the next model request of the session; without them it only checks that the
    request carries history from before the turn)), fixture_content (what the harness itself
    read from the bytes it passed, see harness.scenarios.checkpoint_fixture: format_version, messages,
    failure_entries; null when the fixture is in no documented layout, L1.6 then judges on
    expected_messages); load_checkpoint also carries path (the
    declared fixture path), size_bytes and sha256 of the bytes passed. Other methods: open
    (Implementation.open; args {}, the data dir is never recorded; concurrent_with: A's
    instance number when it opens instance B of a concurrent turn), open_session: config
    (SessionConfig JSON), close: {}. A concurrent_turn is two calls with method
    "concurrent_turn": role "A" (instance A) and role "B" (instance B, with held: whether A
    was held), each ended by its own DRIVER_RETURN/RAISED. Optional keys beside method/args:
    via_failpoint (a re-entrant update_rules/cancel made by a change_rules/cancel fault from
    inside the implementation's call at that failpoint), skipped (<why>: no driver call was
    made, e.g. ``answer`` with no prompt waiting or an undeclared fixture; a DRIVER_RETURN
    with result null and the same skipped follows at once)."""
    DRIVER_RETURN = "driver_return"
    """method, result (JSON of the return value: TurnResult for run_turn/answer_approval/
    concurrent_turn, RecoveryReport for recover, null for open/close/...)."""
    DRIVER_RAISED = "driver_raised"
    """method, exception (class name), message, expected (bool: an injected world error
    propagated as the contract asks: a ModelTransportError, ModelStreamCancelled or
    InjectedFault the world raised into this instance during this call). Method "inspect"
    (with label: the observation being read) when Implementation.inspect failed."""
    CRASH = "crash"
    """failpoint, mode ("in_process" | "process"); swallowed: true when the implementation
    caught the SimulatedCrash and carried on (a defect; the run reports an error). The
    event's instance is the one that died; nothing it does afterwards is recorded."""
    RESTART = "restart"
    """instance (new instance number)."""
    HANG = "hang"
    """method, limit_s (wall-clock seconds; method may be "inspect")."""
    OBSERVED = "observed"
    """label, observation_index (into Trace.observations). Recorded right after the store
    was read; the ObservationPoint's index is the event just before this one."""


@dataclass(frozen=True, slots=True)
class TraceEvent:
    index: int
    source: str
    kind: str
    instance: int
    data: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ObservationPoint:
    index: int
    """Index of the trace event at (just after) which the store was read."""
    label: str
    """"quiescent", "after_restart", "final", "observe" / "observe:<label>" (an ``observe``
    step), or "probe:<what>" (tool_executed, approval_prompt, ui_publish, failpoint:<name>). "after_restart" is read after
    ``recover()`` returned; a probe is read while the world handles the event it names
    (its ``index`` is that event's)."""
    observation: Observation


@dataclass(frozen=True, slots=True)
class FaultSpec:
    """One fault of a plan, as recorded in the trace (see harness.faults.plan for semantics)."""

    failpoint: str
    action: str
    hits: str = "1"
    """fail-rs-like sequence, e.g. "1" (first hit), "2*off->crash" style is normalized to
    the hit numbers it fires on, e.g. "3"."""
    params: dict[str, Any] = field(default_factory=dict)
    optional: bool = False
    """True when the scenario lets this fault not fire (``optional = true``); a required
    fault that does not fire makes the run an error (see ``harness.criteria.fault_coverage``)."""


@dataclass(frozen=True, slots=True)
class TraceMeta:
    scenario_id: str
    stage: str
    seed: int
    implementation: str
    features: tuple[Feature, ...]
    thresholds: Thresholds
    sessions: tuple[SessionConfig, ...]
    tools: tuple[ToolSpec, ...]
    faults: tuple[FaultSpec, ...]
    crash_mode: str = "in_process"
    dangerous_markers: tuple[str, ...] = ()
    """Substrings the scripted classifier treats as risky anywhere in an operation."""
    tags: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Trace:
    meta: TraceMeta
    events: tuple[TraceEvent, ...]
    observations: tuple[ObservationPoint, ...]
    completed: bool = True
    """False when the run was cut short (hang, implementation error, harness limit)."""
    error: str = ""

    # -- helpers for checkers (pure) ---------------------------------------------------

    def of_kind(self, *kinds: str) -> Iterator[TraceEvent]:
        """The events of these kinds, in trace order (from an index built once per trace:
        checkers ask this hundreds of times of the same trace)."""
        by_kind = _events_by_kind(self)
        if len(kinds) == 1:
            return iter(by_kind.get(kinds[0], ()))
        groups = [by_kind[kind] for kind in dict.fromkeys(kinds) if kind in by_kind]
        if len(groups) == 1:
            return iter(groups[0])
        events = self.events
        return (events[at] for at in sorted(
            at for kind in dict.fromkeys(kinds) for at in _positions_by_kind(self).get(kind, ())))

    def ledger(self) -> tuple[TraceEvent, ...]:
        """Every real tool execution, in order (the side-effect ledger)."""
        return tuple(self.of_kind(Kind.TOOL_EXECUTED))

    def lifecycle_events(self) -> Iterator[tuple[TraceEvent, dict[str, Any]]]:
        for event in self.of_kind(Kind.LIFECYCLE_EVENT):
            yield event, event.data["event"]

    def final_observation(self) -> Observation | None:
        return self.observations[-1].observation if self.observations else None

    def observations_labelled(self, prefix: str) -> tuple[ObservationPoint, ...]:
        return tuple(point for point in self.observations if point.label.startswith(prefix))

    def crashes(self) -> tuple[TraceEvent, ...]:
        return tuple(self.of_kind(Kind.CRASH))


_TRACE_FIELDS = tuple(f.name for f in fields(Trace))
_POINT_FIELDS = tuple(f.name for f in fields(ObservationPoint))
_EVENT_FIELDS_SORTED = tuple(sorted(f.name for f in fields(TraceEvent)))


@by_identity(4)
def _positions_by_kind(trace: Trace) -> dict[str, tuple[int, ...]]:
    grouped: dict[str, list[int]] = {}
    for at, event in enumerate(trace.events):
        grouped.setdefault(event.kind, []).append(at)
    return {kind: tuple(positions) for kind, positions in grouped.items()}


def positions_by_kind(trace: Trace) -> dict[str, tuple[int, ...]] | None:
    """Per event kind, its events' positions in the trace, in order, when every event's index
    is its position (as the runner records them: a position found is then an index, and the
    events between two indexes are a slice of ``trace.events``); None for a trace whose
    indexes are not (a hand-built one), which its readers scan instead. Built once per trace."""
    return _positions_by_kind(trace) if _indexed_by_position(trace) else None


@by_identity(4)
def _indexed_by_position(trace: Trace) -> bool:
    return all(event.index == at for at, event in enumerate(trace.events))


@by_identity(4)
def _events_by_kind(trace: Trace) -> dict[str, tuple[TraceEvent, ...]]:
    events = trace.events
    return {kind: tuple(events[at] for at in positions)
            for kind, positions in _positions_by_kind(trace).items()}


def trace_to_json(trace: Trace) -> dict[str, Any]:
    return to_json(trace)


def trace_from_json(data: dict[str, Any]) -> Trace:
    return from_json(Trace, data)


@by_identity(2)  # the tests and callers that want the text itself
def trace_canonical_json(trace: Trace) -> str:
    """``canonical_json(to_json(trace))`` (what :func:`trace_digest` hashes): the pieces of
    :func:`trace_text_pieces` joined once."""
    return "".join([piece for piece, _ in trace_text_pieces(trace)])


def trace_text_pieces(trace: Trace) -> Iterator[tuple[str, bool]]:
    """The canonical text of ``trace`` in pieces, in order, each with whether it is *fresh*:
    text encoded here for the first time rather than a repeat of an earlier piece (a store
    row or a conversation message met again, an observation shared by several points).

    Every JSON string of the text lies whole inside one piece (a piece is the text of whole
    values, or punctuation and member names), so a search for a string's content may look at
    the fresh pieces alone: a repeated piece is a copy of a fresh one. The text repeats each
    store reading (a long session's readings hold all its rows) and each request's whole
    conversation, so it grows as the square of a session's length; the pieces do not: what
    is kept while they are produced is each distinct row's and message's text and the last
    reading's, never the whole text."""
    rows = _RowTexts()
    last: list[tuple[Observation, str]] = []
    messages = _MessageTexts()
    for at, name in enumerate(_TRACE_FIELDS_SORTED):
        yield ("," if at else "{") + _key_text(name) + ":", False
        value = getattr(trace, name)
        if name == "observations":
            yield from _observation_pieces(value, rows, last)
        elif name == "events":
            yield from _event_pieces(value, messages)
        else:
            yield canonical_text(value), True
    yield "}", False


def _observation_pieces(points: Any, rows: "_RowTexts", last: list[tuple[Observation, str]]
                        ) -> Iterator[tuple[str, bool]]:
    if type(points) is not tuple:
        yield canonical_text(points), True
        return
    yield "[", False
    for number, point in enumerate(points):
        if type(point) is not ObservationPoint:
            yield ("," if number else "") + canonical_text(point), True
            continue
        for at, name in enumerate(_POINT_FIELDS_SORTED):
            opening = ("," if number else "") + "{" if at == 0 else ","
            yield opening + _key_text(name) + ":", False
            value = getattr(point, name)
            if name != "observation":
                yield canonical_text(value), True
                continue
            if last and last[0][0] is value:  # the same reading as the point before
                yield last[0][1], False
                continue
            text, fresh = _canonical_observation(value, rows)
            last[:] = [(value, text)]
            yield text, fresh
        yield "}", False
    yield "]", False


def _event_pieces(events: Any, messages: "_MessageTexts") -> Iterator[tuple[str, bool]]:
    """The events' text, each event whole except a list of objects in its data (a model
    request's conversation), whose members are encoded once per object (the world records
    one object per message, shared by every request that carries it)."""
    if type(events) is not tuple:
        yield canonical_text(events), True
        return
    yield "[", False
    for number, event in enumerate(events):
        comma = "," if number else ""
        data = getattr(event, "data", None) if type(event) is TraceEvent else None
        if type(data) is not dict or not _plain_keys(data) or not any(
                type(item) is list and item and type(item[0]) is dict for item in data.values()):
            yield comma + canonical_text(event), True
            continue
        for at, name in enumerate(_EVENT_FIELDS_SORTED):
            opening = (comma + "{") if at == 0 else ","
            yield opening + _key_text(name) + ":", False
            if name != "data":
                yield canonical_text(getattr(event, name)), True
                continue
            for position, key in enumerate(sorted(data)):
                yield ("," if position else "{") + _key_text(key) + ":", True
                item = data[key]
                if type(item) is list and item and type(item[0]) is dict:
                    yield from messages.pieces(item)
                else:
                    yield canonical_text(item), True
            yield "}", False
        yield "}", False
    yield "]", False


def _plain_keys(data: dict[Any, Any]) -> bool:
    """Keys the canonical text writes as they are, in the order ``sorted`` gives: ASCII
    strings (the trace's own member names), so the members may be written one by one."""
    return all(type(key) is str and key.isascii() for key in data)


@dataclass(slots=True)
class _MessageTexts:
    """Objects of a list already encoded in this text, by object (held, so an id is never
    reused while it is a key)."""

    by_object: dict[int, tuple[Any, str]] = field(default_factory=dict)

    def pieces(self, items: list[Any]) -> Iterator[tuple[str, bool]]:
        yield "[", False
        for position, item in enumerate(items):
            if position:
                yield ",", False
            seen = self.by_object.get(id(item))
            if seen is not None and seen[0] is item:
                yield seen[1], False
                continue
            text = canonical_text(item)
            if type(item) is dict:
                self.by_object[id(item)] = (item, text)
            yield text, True
        yield "]", False


_TRACE_FIELDS_SORTED = tuple(sorted(_TRACE_FIELDS))
_POINT_FIELDS_SORTED = tuple(sorted(_POINT_FIELDS))


_OBSERVATION_FIELDS = tuple(f.name for f in fields(Observation))


@dataclass(slots=True)
class _RowTexts:
    """The rows' texts already encoded for one trace: by object (successive readings of a
    store share most of their rows: an implementation that reads incrementally hands back
    the same objects) and, for a flat row (:mod:`harness.trace.flat_rows`), by value (a store read
    afresh hands back new but equal rows: checkpoints, the failure table)."""

    by_object: dict[int, tuple[Any, str]] = field(default_factory=dict)
    by_value: dict[Any, str] = field(default_factory=dict)
    by_field: dict[str, tuple[tuple[Any, ...], str]] = field(default_factory=dict)
    """Per field, the last reading's tuple of rows and its text: an implementation that
    keeps the parts of its store that did not change hands back the very same tuple in the
    next reading. Only the last one is kept: a long session's readings each hold a new
    tuple of all its rows, and keeping every one's text would keep the whole text."""
    fresh: bool = False
    """Set when :meth:`text` encoded a row for the first time (read and reset by the
    caller)."""

    def text(self, row: Any) -> str:
        seen = self.by_object.get(id(row))
        if seen is not None and seen[0] is row:
            return seen[1]
        key = flat_key(row)
        text = None if key is None else self.by_value.get(key)
        if text is None:
            text = canonical_text(row)
            self.fresh = True
            if key is not None:
                self.by_value[key] = text
        self.by_object[id(row)] = (row, text)
        return text


def _canonical_observation(observation: Observation, rows: _RowTexts) -> tuple[str, bool]:
    """``canonical_json(to_json(observation))``, each row's text taken from ``rows``, and
    whether any of it was encoded here for the first time (see :func:`trace_text_pieces`)."""
    if type(observation) is not Observation:
        return canonical_text(observation), True
    members = {}
    rows.fresh = False
    fresh = False
    for name in _OBSERVATION_FIELDS:
        value = getattr(observation, name)
        if type(value) is not tuple:
            members[name] = canonical_text(value)
            fresh = fresh or type(value) is not int  # a count's text holds no string
            continue
        seen = rows.by_field.get(name)
        if seen is not None and seen[0] is value:
            members[name] = seen[1]
            continue
        text = "[" + ",".join([rows.text(row) for row in value]) + "]"
        rows.by_field[name] = (value, text)
        members[name] = text
    return _canonical_object(members), fresh or rows.fresh


def _canonical_object(members: dict[str, str]) -> str:
    return "{" + ",".join(f"{_key_text(name)}:{members[name]}"
                          for name in sorted(members)) + "}"


_KEY_TEXTS: dict[str, str] = {}
"""The canonical text of each member name seen (a few dozen field names, asked for once per
member of every object of every trace)."""


def _key_text(name: str) -> str:
    text = _KEY_TEXTS.get(name)
    if text is None:
        text = _KEY_TEXTS[name] = canonical_json(name)
    return text


_DIGESTS: list[tuple[Trace, str]] = []
"""The last few traces digested, with their digests (the runner digests a trace as it
scrubs it, the suite and the campaigns ask again for the same trace)."""
_DIGESTS_KEPT = 4
_HASH_BATCH = 1 << 20


def trace_digest(trace: Trace) -> str:
    """``sha256`` of :func:`trace_canonical_json`, hashed piece by piece (the text itself is
    never built: see :func:`trace_text_pieces`)."""
    return digest_pieces(trace, lambda piece, fresh: None)


def digest_pieces(trace: Trace, visit: Callable[[str, bool], None]) -> str:
    """:func:`trace_digest`, calling ``visit(piece, fresh)`` on every piece of the text in
    order when it is computed here (a digest remembered from an earlier call visits
    nothing and is returned as it was)."""
    for held, digest in _DIGESTS:
        if held is trace:
            return digest
    hasher = hashlib.sha256()
    batch: list[str] = []
    size = 0
    for piece, fresh in trace_text_pieces(trace):
        visit(piece, fresh)
        batch.append(piece)
        size += len(piece)
        if size >= _HASH_BATCH:
            hasher.update("".join(batch).encode())
            batch.clear()
            size = 0
    hasher.update("".join(batch).encode())
    digest = "sha256:" + hasher.hexdigest()
    _DIGESTS.insert(0, (trace, digest))
    del _DIGESTS[_DIGESTS_KEPT:]
    return digest
