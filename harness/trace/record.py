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
from harness.trace.sequence_delta import common_prefix, common_suffix
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
    black_box: str = ""
    """Non-empty for an implementation judged from outside only (a real CLI: its store and
    lifecycle events are not readable): why. The criteria that need them are then
    ``not_applicable`` with this reason (:mod:`harness.criteria.outside_view`)."""
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


def trace_canonical_json(trace: Trace) -> str:
    """``canonical_json(to_json(trace))``, whole (for reading and tests: it repeats every
    store reading whole; what :func:`trace_digest` hashes is :func:`digest_pieces`, whose
    size is linear in the run's work)."""
    return canonical_json(trace_to_json(trace))


ROW_TEXT_KEPT_CHARS = 4096
"""A row whose text is longer is not kept for later readings (re-encoded if shared)."""


_DIGESTS: list[tuple[Trace, str]] = []
"""The last traces digested (the runner's scrub digests the trace the suite then asks for)."""


def _remember_digest(trace: Trace, digest: str) -> None:
    _DIGESTS.insert(0, (trace, digest))
    del _DIGESTS[2:]


def digest_and_find(trace: Trace, found: Callable[[str], bool]) -> tuple[str, bool]:
    """:func:`trace_digest` of ``trace`` and whether ``found`` holds for a piece of its
    digest text (:func:`digest_pieces`: every string of the trace is in one of its pieces at
    least once), in one pass; the digest is remembered for the trace."""
    hasher = hashlib.sha256()
    hit = False
    for piece in digest_pieces(trace):
        if not hit and found(piece):
            hit = True
        hasher.update(piece.encode())
    digest = "sha256:" + hasher.hexdigest()
    _remember_digest(trace, digest)
    return digest, hit


_TRACE_FIELDS_SORTED = tuple(sorted(_TRACE_FIELDS))
_POINT_FIELDS_SORTED = tuple(sorted(_POINT_FIELDS))


_OBSERVATION_FIELDS = tuple(f.name for f in fields(Observation))
_OBSERVATION_FIELDS_SORTED = tuple(sorted(_OBSERVATION_FIELDS))


@dataclass(slots=True)
class _RowTexts:
    """The rows' texts already encoded for one trace: by object (successive readings of a
    store share most of their rows: an implementation that reads incrementally hands back
    the same objects) and, for a flat row (:mod:`harness.trace.flat_rows`), by value (a store read
    afresh hands back new but equal rows: checkpoints, the failure table)."""

    by_object: dict[int, tuple[Any, str]] = field(default_factory=dict)
    by_value: dict[Any, str] = field(default_factory=dict)

    def text(self, row: Any) -> str:
        seen = self.by_object.get(id(row))
        if seen is not None and seen[0] is row:
            return seen[1]
        key = flat_key(row)
        text = None if key is None else self.by_value.get(key)
        if text is None:
            text = canonical_text(row)
            if len(text) > ROW_TEXT_KEPT_CHARS:
                return text  # a large row is rare in a run: kept, it could be many MB
            if key is not None:
                self.by_value[key] = text
        self.by_object[id(row)] = (row, text)
        return text

    def same(self, a: Any, b: Any) -> bool:
        """Do two rows have the same canonical text (identical ones do)?"""
        return a is b or self.text(a) == self.text(b)


_KEY_TEXTS: dict[str, str] = {}
"""The canonical text of each member name seen (a few dozen field names, asked for once per
member of every object of every trace)."""


def _key_text(name: str) -> str:
    text = _KEY_TEXTS.get(name)
    if text is None:
        text = _KEY_TEXTS[name] = canonical_json(name)
    return text


def trace_digest(trace: Trace) -> str:
    """``sha256:`` + the hash of the UTF-8 text of :func:`digest_pieces` (digest version
    :data:`DIGEST_VERSION`), fed piece by piece."""
    for held, digest in _DIGESTS:
        if held is trace:
            return digest
    return digest_and_find(trace, lambda piece: False)[0]


# --------------------------------------------------------------------------- digest, version 2

DIGEST_VERSION = 2
"""The version of the text :func:`trace_digest` hashes. Version 1 hashed the canonical
JSON of the whole trace (:func:`trace_canonical_json`), which holds every store reading
whole and every model request's whole conversation: its size grew as the square of a
session's length (about 9.7 GB at 1,000 calls). Version 2 (:func:`digest_pieces`) writes
each reading and each request's messages as the change from the one before."""

_DIGEST_HEADER = f"lifecycle-harness trace digest {DIGEST_VERSION}\n"
_UNCHANGED = '"="'


def digest_pieces(trace: Trace) -> Iterator[str]:
    """The text :func:`trace_digest` hashes (version :data:`DIGEST_VERSION`), in pieces.

    It is the canonical JSON of the trace (sorted members, as :func:`trace_canonical_json`)
    after a header line, except for two things written as changes, so its size is linear
    in what the run did:

    * a point's ``observation`` is ``"="`` when its content equals the previous point's
      (the first point's previous is the empty :class:`Observation`), else an object with
      each member: ``"="`` for a part (a tuple of rows) whose content is unchanged, else
      ``[kept, kept_at_end, [rows...]]`` — the first ``kept`` and the last ``kept_at_end``
      rows of the previous reading's part (each as long as it can be, the head first) with
      the rows written between them —, and ``{"value": <its text>}`` for any other member
      that changed; a value that is
      not an :class:`Observation` is ``{"value": <its text>}`` (and the next point's
      previous is the empty one);
    * a ``model_request`` event's ``messages`` list is ``{"kept": k, "added": [...]}``: the
      first ``k`` messages of the previous model request's list (the longest such head),
      then the ones written; a ``messages`` that is not a list is ``{"value": ...}``.

    Each change can be undone given the previous value, so two traces with equal digests
    are equal in content (up to hash collisions); and since rows and messages are compared
    by their canonical text (identical objects being the shortcut), the text depends only on
    the trace's content, never on which objects a run happened to share."""
    rows = _RowTexts()
    messages = _ValueTexts()
    yield _DIGEST_HEADER
    for at, name in enumerate(_TRACE_FIELDS_SORTED):
        yield "," if at else "{"
        yield _key_text(name)
        yield ":"
        value = getattr(trace, name)
        if name == "events" and type(value) is tuple:
            yield "["
            previous_messages: list[Any] = []
            for number, event in enumerate(value):
                if number:
                    yield ","
                data = event.data
                if event.kind != Kind.MODEL_REQUEST or type(data) is not dict \
                        or "messages" not in data:
                    yield canonical_text(event)
                    continue
                sent = data["messages"]
                if type(sent) is list:
                    kept = common_prefix(previous_messages, sent, messages.same)
                    change: dict[str, Any] = {"kept": kept, "added": sent[kept:]}
                    previous_messages = sent
                else:
                    change = {"value": sent}
                yield canonical_text(TraceEvent(event.index, event.source, event.kind,
                                                event.instance, {**data, "messages": change}))
            yield "]"
            continue
        if name != "observations":
            yield canonical_text(value)
            continue
        yield "["
        previous: Observation = _EMPTY_OBSERVATION
        for number, point in enumerate(value):
            if number:
                yield ","
            for field_at, field_name in enumerate(_POINT_FIELDS_SORTED):
                yield "," if field_at else "{"
                yield _key_text(field_name)
                yield ":"
                member = getattr(point, field_name)
                if field_name != "observation":
                    yield canonical_text(member)
                    continue
                if member is previous:
                    yield _UNCHANGED
                    continue
                if type(member) is not Observation:
                    yield '{"value":'
                    yield canonical_text(member)
                    yield "}"
                    previous = _EMPTY_OBSERVATION
                    continue
                yield from _observation_change(previous, member, rows)
                previous = member
            yield "}"
        yield "]"
    yield "}"


_EMPTY_OBSERVATION = Observation()


def _observation_change(previous: Observation, current: Observation,
                        rows: "_RowTexts") -> Iterator[str]:
    """``current`` written against ``previous`` (see :func:`digest_pieces`)."""
    members: list[str] = []
    changed = False
    for name in _OBSERVATION_FIELDS_SORTED:
        before, now = getattr(previous, name), getattr(current, name)
        if now is before:
            members.append(_UNCHANGED)
            continue
        if isinstance(now, (tuple, list)) and isinstance(before, (tuple, list)):
            kept = common_prefix(before, now, rows.same)
            kept_at_end = common_suffix(before, now, min(len(before), len(now)) - kept,
                                        rows.same)
            if kept + kept_at_end == len(before) == len(now):
                members.append(_UNCHANGED)
                continue
            written = ",".join([rows.text(row) for row in now[kept:len(now) - kept_at_end]])
            members.append(f"[{kept},{kept_at_end},[{written}]]")
            changed = True
            continue
        text = canonical_text(now)
        if not isinstance(before, (tuple, list)) and not isinstance(now, (tuple, list)) \
                and text == canonical_text(before):
            members.append(_UNCHANGED)
            continue
        members.append(f'{{"value":{text}}}')
        changed = True
    if not changed:
        yield _UNCHANGED
        return
    yield "{"
    for at, (name, text) in enumerate(zip(_OBSERVATION_FIELDS_SORTED, members)):
        if at:
            yield ","
        yield _key_text(name)
        yield ":"
        yield text
    yield "}"


class _ValueTexts:
    """The canonical text of JSON values (a request's messages), by object, for the objects
    of the previous request and this one (a session's conversation repeats them)."""

    def __init__(self) -> None:
        self._before: dict[int, tuple[Any, str]] = {}
        self._now: dict[int, tuple[Any, str]] = {}
        self._size = 0

    def text(self, value: Any) -> str:
        seen = self._now.get(id(value)) or self._before.get(id(value))
        if seen is None or seen[0] is not value:
            seen = (value, canonical_text(value))
            self._size += 1
            if self._size > 2 * VALUE_TEXTS_KEPT:  # keep the latest ones only
                self._before, self._now, self._size = self._now, {}, 0
        self._now[id(value)] = seen
        return seen[1]

    def same(self, a: Any, b: Any) -> bool:
        return a is b or self.text(a) == self.text(b)


VALUE_TEXTS_KEPT = 100_000
"""Messages whose text :class:`_ValueTexts` keeps (about a long conversation's worth)."""
