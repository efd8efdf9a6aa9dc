"""Pure readings of a Trace shared by the L3, L4, L5 and M criteria.

Everything here derives facts from the world's ground truth first (ledger rows, model
requests and streams served, classifier requests answered, prompts, publications, failpoint
hits, crashes, driver calls) and reads the durable store (``trace.observations``) only where
the criterion is about what the store says. No function performs I/O, keeps state between
calls or looks at a clock. The readings many checks share are remembered per trace (by
identity, see :mod:`harness.trace.identity_memo`), which keeps them pure.

Conventions relied on (documented in ``harness/trace/record.py``):

* an operation is keyed by ``(session_id, tool_call_id)``; its execution id is
  :func:`harness.contract.execution_id_for` of that pair;
* ``DRIVER_CALL.args`` is keyed by the Runtime method's parameter names;
* ``FAILPOINT.params`` (or, failing that, the matching fault of ``meta.faults``) carries the
  parameters of a fired ``change_rules`` fault;
* ``MODEL_STREAM_END.tool_calls`` lists the calls served (when absent, a call's tool and
  args are recovered from the ledger, prompts, later model requests or the store).
"""

from __future__ import annotations

import bisect
import hashlib
import threading
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, Iterable, Iterator, Mapping

from harness.contract import (
    ApprovalWaitView,
    DecisionSource,
    Mode,
    Observation,
    OperationView,
    Rule,
    RuleEffect,
    SessionConfig,
    Thresholds,
    ToolKind,
    canonical_json,
    execution_id_for,
    from_json,
)
from harness.criteria import reading_changes
from harness.criteria.base import Evidence
from harness.trace.identity_memo import by_identity
from harness.trace.record import Kind, ObservationPoint, Trace, TraceEvent, positions_by_kind
from harness.trace.sequence_delta import common_prefix

OpKey = tuple[str, str]
"""(session_id, tool_call_id): the identity of one operation across instances."""

DURABLE_LABELS = ("after_restart", "quiescent", "final")
"""Observation labels read at rest (not in the middle of an operation)."""

TURN_METHODS = ("run_turn", "answer_approval", "concurrent_turn")


# --------------------------------------------------------------------------- sessions


def session_configs(trace: Trace) -> dict[str, SessionConfig]:
    return {config.session_id: config for config in trace.meta.sessions}


def default_session(trace: Trace) -> str:
    return trace.meta.sessions[0].session_id if trace.meta.sessions else ""


def can_approve(config: SessionConfig | None) -> bool:
    """Only an interactive session whose owner can approve may get approval waits."""
    return config is not None and config.interactive and config.owner_can_approve


def thresholds_for(trace: Trace, session_id: str) -> Thresholds:
    config = session_configs(trace).get(session_id)
    return config.thresholds if config is not None else trace.meta.thresholds


def tool_kinds(trace: Trace, session_id: str) -> dict[str, ToolKind]:
    kinds = {spec.name: spec.kind for spec in trace.meta.tools}
    config = session_configs(trace).get(session_id)
    if config is not None:
        kinds.update({spec.name: spec.kind for spec in config.tools})
    return kinds


def session_tool_names(trace: Trace, session_id: str) -> tuple[str, ...]:
    """The tools a session has at all: its own specs, else the scenario's."""
    config = session_configs(trace).get(session_id)
    if config is not None and config.tools:
        return tuple(spec.name for spec in config.tools)
    return tuple(spec.name for spec in trace.meta.tools)


def dedup_key(tool: str, args: Mapping[str, Any], kind: ToolKind | None) -> str:
    """The repeat key (L1.3/L1.4): Bash drops only ``description``; other tools keep all."""
    if kind is ToolKind.BASH or tool == "Bash":
        args = {k: v for k, v in args.items() if k != "description"}
    return canonical_json({"tool": tool, "args": dict(args)})


# --------------------------------------------------------------------------- rules


def rule_matches(rule: Rule, tool: str, args: Mapping[str, Any]) -> bool:
    """fnmatch over the tool name and over ``field`` of the args (whole canonical args when
    ``field`` is empty). A missing field is matched only by the pattern ``*``."""
    if not fnmatchcase(tool, rule.tool):
        return False
    if rule.field:
        if rule.field not in args:
            return rule.pattern == "*"
        value = args[rule.field]
        text = value if isinstance(value, str) else canonical_json(value)
    else:
        text = canonical_json(dict(args))
    return fnmatchcase(text, rule.pattern)


@dataclass(frozen=True, slots=True)
class RuleState:
    """The permission rules of one session in force at one point of the trace."""

    session_id: str
    permission_version: int
    rules: tuple[Rule, ...]
    hard_constraints: tuple[Rule, ...]
    capabilities: tuple[str, ...]
    mode: Mode
    kinds: tuple[tuple[str, ToolKind], ...] = ()

    def kind(self, tool: str) -> ToolKind | None:
        return dict(self.kinds).get(tool)

    def denied_outright(self, tool: str) -> DecisionSource | None:
        """Why ``tool`` is denied for every call (so it must not be visible), or None."""
        for rule in self.hard_constraints:
            if rule.effect is RuleEffect.DENY and rule.pattern == "*" and fnmatchcase(tool, rule.tool):
                return DecisionSource.HARD_CONSTRAINT
        if self.capabilities and tool not in self.capabilities:
            return DecisionSource.CAPABILITY
        if self.mode is Mode.PLAN and self.kind(tool) is not ToolKind.READ:
            return DecisionSource.PLAN_MODE
        for rule in self.rules:
            if rule.effect is RuleEffect.DENY and rule.pattern == "*" and fnmatchcase(tool, rule.tool):
                return DecisionSource.EXPLICIT_DENY
        return None

    def denial_for(self, tool: str, args: Mapping[str, Any]) -> DecisionSource | None:
        """The layer above the classifier that denies this exact call, or None (L2.1)."""
        for rule in self.hard_constraints:
            if rule.effect is RuleEffect.DENY and rule_matches(rule, tool, args):
                return DecisionSource.HARD_CONSTRAINT
        if self.capabilities and tool not in self.capabilities:
            return DecisionSource.CAPABILITY
        if self.mode is Mode.PLAN and self.kind(tool) is not ToolKind.READ:
            return DecisionSource.PLAN_MODE
        for rule in self.rules:
            if rule.effect is RuleEffect.DENY and rule_matches(rule, tool, args):
                return DecisionSource.EXPLICIT_DENY
        return None

    def asks(self, tool: str, args: Mapping[str, Any]) -> bool:
        """An ask rule (not overridden by a deny above it) sends this call to a human."""
        if self.denial_for(tool, args) is not None:
            return False
        return any(r.effect is RuleEffect.ASK and rule_matches(r, tool, args) for r in self.rules)


@dataclass(frozen=True, slots=True)
class RuleChange:
    index: int
    session_id: str
    rules: tuple[Rule, ...] | None
    permission_version: int | None
    via: str


def _rules_from(data: Any) -> tuple[Rule, ...] | None:
    if data is None:
        return None
    return tuple(rule if isinstance(rule, Rule) else from_json(Rule, rule) for rule in data)


def _fault_params(trace: Trace, event: TraceEvent) -> dict[str, Any]:
    params = event.data.get("params")
    if params:
        return dict(params)
    name, hit = event.data.get("name"), event.data.get("hit")
    specs = [f for f in trace.meta.faults if f.failpoint == name and f.action == event.data.get("action")]
    for spec in specs:
        if spec.hits.strip() == str(hit):
            return dict(spec.params)
    return dict(specs[0].params) if specs else {}


def _applied_by_driver_call(events: tuple[TraceEvent, ...], pos: int) -> bool:
    name = events[pos].data.get("name")
    for later in events[pos + 1:]:
        if later.kind == Kind.FAILPOINT:
            return False
        if later.kind == Kind.DRIVER_CALL:
            return later.data.get("method") == "update_rules" and later.data.get("via_failpoint") == name
    return False


@by_identity(2)
def rule_changes(trace: Trace) -> tuple[RuleChange, ...]:
    """Every rule/version change: ``update_rules`` driver calls and ``change_rules`` faults."""
    changes = []
    events = trace.events
    for pos, event in enumerate(events):
        if event.kind == Kind.DRIVER_CALL and event.data.get("method") == "update_rules":
            args = event.data.get("args") or {}
            session = args.get("session_id", args.get("session", default_session(trace)))
            changes.append(
                RuleChange(event.index, session, _rules_from(args.get("rules")),
                           args.get("permission_version"), "update_rules")
            )
        elif event.kind == Kind.FAILPOINT and event.data.get("action") == "change_rules":
            if _applied_by_driver_call(events, pos):
                continue  # the runner recorded the change as a re-entrant update_rules call
            params = _fault_params(trace, event)
            session = params.get("session_id", params.get("session", default_session(trace)))
            changes.append(
                RuleChange(event.index, session, _rules_from(params.get("rules")),
                           params.get("permission_version"), "change_rules")
            )
    return tuple(changes)


def rules_in_force(
    trace: Trace, session_id: str, index: int, changes: tuple[RuleChange, ...] | None = None
) -> RuleState:
    """The session's rules for anything the world saw after event ``index - 1``."""
    config = session_configs(trace).get(session_id) or SessionConfig(session_id)
    rules, version = config.rules, config.permission_version
    for change in rule_changes(trace) if changes is None else changes:
        if change.session_id == session_id and change.index < index:
            if change.rules is not None:
                rules = change.rules
            # the caller numbers the versions; a change that names none bumps it
            version = change.permission_version if change.permission_version is not None else version + 1
    return RuleState(
        session_id, version, rules, config.hard_constraints, config.capabilities, config.mode,
        tuple(sorted(tool_kinds(trace, session_id).items())),
    )


def version_at(
    trace: Trace, session_id: str, index: int, changes: tuple[RuleChange, ...] | None = None
) -> int:
    return rules_in_force(trace, session_id, index, changes).permission_version


# --------------------------------------------------------------------------- model requests


def model_requests(trace: Trace) -> tuple[TraceEvent, ...]:
    return tuple(trace.of_kind(Kind.MODEL_REQUEST))


def request_sessions(trace: Trace) -> dict[str, str]:
    return {e.data.get("request_id", ""): e.data.get("session_id", "") for e in model_requests(trace)}


def stream_ends(trace: Trace) -> tuple[TraceEvent, ...]:
    return tuple(trace.of_kind(Kind.MODEL_STREAM_END))


def request_instance(event: TraceEvent) -> int:
    """The instance that sent a model request (its data says so; else the event's)."""
    value = event.data.get("instance")
    return value if isinstance(value, int) else event.instance


def messages_key(event: TraceEvent) -> str:
    """A key equal for two requests exactly when their messages have the same canonical
    JSON (a SHA-256 of that text, with its length): a session's requests repeat the
    conversation so far, so the text of a request that carries the very message objects of
    the session's previous one is hashed on from where that one ended."""
    return _MESSAGES_KEYS.key(event)


class _MessagesKeys:
    """:func:`messages_key`, hashed on from the previous request of the same session."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._latest: dict[Any, tuple[list[Any], Any, int]] = {}
        """Per session: the latest request's messages (held), the hash of "[" and their texts
        joined with ",", and that text's length."""

    def key(self, event: TraceEvent) -> str:
        messages = event.data.get("messages", [])
        if type(messages) is not list:
            return canonical_json(messages)
        session = repr(event.data.get("session_id"))
        with self._lock:
            latest = self._latest.get(session)
        if latest is not None and len(latest[0]) <= len(messages) \
                and common_prefix(latest[0], messages) == len(latest[0]):
            running, size, start = latest[1].copy(), latest[2], len(latest[0])
        else:
            running, size, start = hashlib.sha256(b"["), 1, 0
        for at in range(start, len(messages)):
            text = (("," if at else "") + canonical_json(messages[at])).encode()
            running.update(text)
            size += len(text)
        with self._lock:
            if len(self._latest) > 64:
                self._latest.clear()
            self._latest[session] = (messages, running.copy(), size)
        running.update(b"]")
        return f"{size + 1}:{running.hexdigest()}"


_MESSAGES_KEYS = _MessagesKeys()


def tool_message(request: TraceEvent, tool_call_id: str) -> dict[str, Any] | None:
    for message in request.data.get("messages", []):
        if message.get("role") == "tool" and message.get("tool_call_id") == tool_call_id:
            return message
    return None


def request_rule_states(
    trace: Trace, request: TraceEvent, changes: tuple[RuleChange, ...] | None = None
) -> tuple[RuleState, ...]:
    """The rules a model request may have been built under: those in force when its
    preparation began (its ``before_model_request`` hit) and those in force when the world
    received it. A change landing in between may apply from the next request."""
    session = str(request.data.get("session_id", ""))
    by_sender, hits_by_instance = _request_neighbours(trace)
    sent = by_sender.get((session, request_instance(request)), [])
    at = bisect.bisect_left(sent, request.index)
    previous = sent[at - 1] if at else -1
    hits = []
    indexes, events = hits_by_instance.get(request.instance, ((), ()))
    for at in range(bisect.bisect_right(indexes, previous), len(indexes)):
        if indexes[at] >= request.index:
            break
        if (events[at].data.get("context") or {}).get("session_id", session) == session:
            hits.append(indexes[at])
            break  # the first one is all that is read
    states = [rules_in_force(trace, session, request.index, changes)]
    if hits:
        earlier = rules_in_force(trace, session, hits[0], changes)
        if earlier != states[0]:
            states.insert(0, earlier)
    return tuple(states)


@by_identity(2)
def _request_neighbours(trace: Trace) -> tuple[dict[tuple[Any, int], list[int]],
                                              dict[int, tuple[list[int], list[TraceEvent]]]]:
    """The model requests' indexes by (session id, sending instance), and the
    ``before_model_request`` hits' indexes and events by instance, in trace order (what
    :func:`request_rule_states` looks between)."""
    by_sender: dict[tuple[Any, int], list[int]] = {}
    for event in sorted(model_requests(trace), key=lambda e: e.index):
        by_sender.setdefault((event.data.get("session_id"), request_instance(event)), []).append(
            event.index)
    hits: dict[int, tuple[list[int], list[TraceEvent]]] = {}
    for event in sorted(trace.of_kind(Kind.FAILPOINT), key=lambda e: e.index):
        if event.data.get("name") == "before_model_request":
            indexes, events = hits.setdefault(event.instance, ([], []))
            indexes.append(event.index)
            events.append(event)
    return by_sender, hits


def op_failpoint_before(trace: Trace, key: OpKey, names: Iterable[str], index: int) -> TraceEvent | None:
    """The last hit (before event ``index``) of one of the named failpoints whose context
    names the operation."""
    wanted = tuple(names)
    execution_id = execution_id_for(*key)
    found = None
    for event in trace.of_kind(Kind.FAILPOINT):
        if event.index >= index:
            break
        if event.data.get("name") not in wanted:
            continue
        context = event.data.get("context") or {}
        if context.get("execution_id") == execution_id or (context.get("session_id"), context.get("tool_call_id")) == key:
            found = event
    return found


def start_recorded_before(trace: Trace, key: OpKey, index: int) -> bool:
    """Did the implementation report (failpoint hit, event or store) that the operation's
    start was recorded before event ``index``?"""
    execution_id = execution_id_for(*key)
    for event in trace.events:
        if event.index >= index:
            break
        if event.kind == Kind.FAILPOINT and event.data.get("name") in ("after_start_recorded", "after_tool_returned"):
            context = event.data.get("context") or {}
            if context.get("execution_id") == execution_id or (
                    context.get("session_id"), context.get("tool_call_id")) == key:
                return True
        if event.kind == Kind.LIFECYCLE_EVENT:
            payload = event.data.get("event") or {}
            if payload.get("type") == "execution_started" and payload.get("execution_id") == execution_id:
                return True
    for point in trace.observations:
        if point.index < index:
            op = find_op(point.observation, key)
            if op is not None and op.execution_started:
                return True
    return False


def first_request_after(trace: Trace, session_id: str, index: int) -> TraceEvent | None:
    for event in model_requests(trace):
        if event.index > index and event.data.get("session_id") == session_id:
            return event
    return None


# --------------------------------------------------------------------------- emitted calls


@dataclass(frozen=True, slots=True)
class EmittedCall:
    """One tool call the world served inside a model response."""

    index: int
    session_id: str
    request_id: str
    tool_call_id: str
    tool: str | None
    args: dict[str, Any] | None
    instance: int

    @property
    def key(self) -> OpKey:
        return (self.session_id, self.tool_call_id)


@by_identity(2)
def _call_catalogue(trace: Trace) -> dict[OpKey, tuple[str, dict[str, Any]]]:
    """(session, tool_call_id) -> (tool, args), world records first, the store last."""
    found: dict[OpKey, tuple[str, dict[str, Any]]] = {}
    sessions = request_sessions(trace)

    def put(key: OpKey, tool: Any, args: Any) -> None:
        if key not in found and isinstance(tool, str) and isinstance(args, dict):
            found[key] = (tool, args)

    for event in stream_ends(trace):
        session = sessions.get(event.data.get("request_id", ""), "")
        for call in event.data.get("tool_calls") or ():
            put((session, call.get("tool_call_id", "")), call.get("tool"), call.get("args"))
    for event in trace.of_kind(Kind.TOOL_EXECUTED, Kind.TOOL_UNAVAILABLE, Kind.APPROVAL_PROMPT):
        d = event.data
        put((d.get("session_id", ""), d.get("tool_call_id", "")), d.get("tool"), d.get("args"))
    # the messages and rows each request and reading adds (the others were put already)
    for event, _, message in reading_changes.new_messages(trace):
        for call in message.get("tool_calls") or ():
            put((event.data.get("session_id", ""), call.get("tool_call_id", "")),
                call.get("tool"), call.get("args"))
    for _, op in reading_changes.new_rows(trace):
        put((op.session_id, op.identity.tool_call_id), op.tool, op.args)
    return found


@by_identity(2)
def emitted_calls(trace: Trace) -> tuple[EmittedCall, ...]:
    """Every tool call served by the world, in order (a duplicate delivery appears twice)."""
    sessions = request_sessions(trace)
    catalogue = _call_catalogue(trace)
    calls = []
    for event in stream_ends(trace):
        request_id = event.data.get("request_id", "")
        session = sessions.get(request_id, "")
        served = event.data.get("tool_calls")
        ids = [c.get("tool_call_id", "") for c in served] if served else list(event.data.get("tool_call_ids") or ())
        for tool_call_id in ids:
            tool, args = catalogue.get((session, tool_call_id), (None, None))
            calls.append(EmittedCall(event.index, session, request_id, tool_call_id, tool, args, event.instance))
    return tuple(calls)


def first_emissions(trace: Trace) -> dict[OpKey, EmittedCall]:
    first: dict[OpKey, EmittedCall] = {}
    for call in emitted_calls(trace):
        first.setdefault(call.key, call)
    return first


def key_for_execution_id(trace: Trace, execution_id: str) -> OpKey | None:
    """Find the operation of an execution id among calls, ledger rows, prompts and store:
    first a key whose formula gives it, then a ledger row or prompt that names it, then the
    store's word."""
    if not execution_id:
        return None
    by_formula, named, stored = _execution_id_index(trace)
    return by_formula.get(execution_id) or named.get(execution_id) or stored.get(execution_id)


@by_identity(2)  # one index per trace instead of a scan per question
def _execution_id_index(trace: Trace) -> tuple[dict[str, OpKey], dict[str, OpKey],
                                               dict[str, OpKey]]:
    """Three lookups, each keeping the first key in trace order (see key_for_execution_id)."""
    by_formula: dict[str, OpKey] = {}
    named: dict[str, OpKey] = {}
    stored: dict[str, OpKey] = {}
    candidates: list[OpKey] = [c.key for c in emitted_calls(trace)]
    recorded = tuple(trace.of_kind(Kind.TOOL_EXECUTED, Kind.TOOL_UNAVAILABLE,
                                   Kind.APPROVAL_PROMPT))
    for event in recorded:
        candidates.append((event.data.get("session_id", ""), event.data.get("tool_call_id", "")))
    # Successive readings share observation and view objects: one read again adds nothing
    # (only the first sighting of a key counts), so each object is read once.
    views = _distinct_views(trace)
    for op in views:
        candidates.append((op.session_id, op.identity.tool_call_id))
    for key in dict.fromkeys(candidates):
        by_formula.setdefault(execution_id_for(*key), key)
    for event in recorded:
        named.setdefault(event.data.get("execution_id"),
                         (event.data.get("session_id", ""), event.data.get("tool_call_id", "")))
    for op in views:
        stored.setdefault(op.identity.execution_id, (op.session_id, op.identity.tool_call_id))
    return by_formula, named, stored


def _distinct_views(trace: Trace) -> list[Any]:
    """The operation views of every observation in recording order, each object once (its
    first sighting)."""
    seen_observations: set[int] = set()
    seen_views: set[int] = set()
    views = []
    for point in trace.observations:
        observation = point.observation
        if id(observation) in seen_observations:
            continue
        seen_observations.add(id(observation))
        for op in observation.operations:
            if id(op) not in seen_views:
                seen_views.add(id(op))
                views.append(op)
    return views


# --------------------------------------------------------------------------- classifier


@dataclass(frozen=True, slots=True)
class Review:
    """One classifier request the world answered, attributed to the call it reviews. Its
    ``outcome`` is what the implementation must act on: the world's verdict, or ``timeout``
    when the verdict took longer than ``classifier_timeout_s`` of world time."""

    index: int
    session_id: str
    tool: str
    operation: str
    outcome: str
    tool_call_id: str | None
    """None when no served call has these exact arguments (cannot be attributed)."""
    permission_version: int
    instance: int

    @property
    def identity(self) -> str:
        """Operation identity (tool call id + version); unattributed reviews stand alone."""
        if self.tool_call_id is None:
            return f"?{self.index}"
        return f"{self.tool_call_id}@{self.permission_version}"


def _operation_forms(args: Mapping[str, Any]) -> set[str]:
    return {canonical_json(dict(args)), canonical_json({k: v for k, v in args.items() if k != "description"})}


def reviews(trace: Trace) -> tuple[Review, ...]:
    """Classifier requests attributed to calls.

    A request is attributed to a served call of the same session and tool whose canonical
    arguments (with or without a Bash ``description``) equal the reviewed operation: the
    most recently served such call; when one response holds several, the first of them not
    yet reviewed since the last crash/restart.
    """
    calls = emitted_calls(trace)
    changes = rule_changes(trace)
    seen_in_epoch: set[tuple[str, str]] = set()
    out = []
    for event in trace.events:
        if event.kind in (Kind.CRASH, Kind.RESTART):
            seen_in_epoch.clear()
            continue
        if event.kind != Kind.CLASSIFIER_REQUEST:
            continue
        request = event.data.get("request") or {}
        session = request.get("session_id", "")
        tool = request.get("tool", "")
        operation = request.get("operation", "")
        matching = [
            c for c in calls
            if c.index < event.index and c.session_id == session and c.tool == tool
            and c.args is not None and operation in _operation_forms(c.args)
        ]
        tool_call_id = None
        if matching:
            latest = max(c.index for c in matching)
            group = [c for c in matching if c.index == latest]
            fresh = [c for c in group if (session, c.tool_call_id) not in seen_in_epoch]
            tool_call_id = (fresh or group[-1:])[0].tool_call_id
            seen_in_epoch.add((session, tool_call_id))
        outcome = str(event.data.get("outcome", ""))
        delay = event.data.get("delay_s") or 0.0
        if isinstance(delay, (int, float)) and delay > thresholds_for(trace, session).classifier_timeout_s:
            outcome = "timeout"  # the verdict came too late: the implementation must record a timeout
        out.append(
            Review(event.index, session, tool, operation, outcome,
                   tool_call_id, version_at(trace, session, event.index, changes), event.instance)
        )
    return tuple(out)


FAULT_OUTCOMES = ("timeout", "service_error", "cancelled", "no_verdict_oversize")


# --------------------------------------------------------------------------- ledger


def ledger_key(event: TraceEvent) -> OpKey:
    return (event.data.get("session_id", ""), event.data.get("tool_call_id", ""))


def ledger_rows_for(trace: Trace, key: OpKey) -> tuple[TraceEvent, ...]:
    """The ledger rows of one operation, in order (from an index built once per trace)."""
    try:
        return _ledger_by_key(trace).get(key, ())
    except TypeError:  # a key that cannot be hashed (data a hand-built trace holds)
        return tuple(e for e in trace.ledger() if ledger_key(e) == key)


@by_identity(2)
def _ledger_by_key(trace: Trace) -> dict[Any, tuple[TraceEvent, ...]]:
    grouped: dict[Any, list[TraceEvent]] = {}
    unhashable: list[TraceEvent] = []
    for event in trace.ledger():
        try:
            grouped.setdefault(ledger_key(event), []).append(event)
        except TypeError:
            unhashable.append(event)
    if unhashable:
        raise TypeError("a ledger row's key cannot be hashed")  # scanned instead
    return {key: tuple(rows) for key, rows in grouped.items()}


def last_row_before(trace: Trace, key: OpKey, index: int) -> TraceEvent | None:
    rows = [e for e in ledger_rows_for(trace, key) if e.index < index]
    return rows[-1] if rows else None


def retry_justified(previous: TraceEvent) -> bool:
    """A second ledger row of one operation is legitimate only as an automatic retry of a
    transient error (L1.8) or an approved escalation (L2.11)."""
    return previous.data.get("error_kind") == "transient" or bool(previous.data.get("escalation_requested"))


def reexecutions(trace: Trace) -> tuple[tuple[TraceEvent, TraceEvent], ...]:
    """(earlier row, repeated row) for every unjustified repeated execution of an identity."""
    last: dict[OpKey, TraceEvent] = {}
    out = []
    for row in trace.ledger():
        key = ledger_key(row)
        if key in last and not retry_justified(last[key]):
            out.append((last[key], row))
        last[key] = row
    return tuple(out)


def expected_outcome(row: TraceEvent) -> str:
    return "succeeded" if row.data.get("status") == "ok" else "failed"


# --------------------------------------------------------------------------- observations


def find_op(obs: Observation, key: OpKey) -> OperationView | None:
    """``obs.operation(call id, session)``: the first record of the call in the reading,
    from an index kept up to date as the readings change (:class:`_FirstRecords`)."""
    operations = obs.operations
    if type(operations) is not tuple or type(obs) is not Observation or key[0] is None:
        return obs.operation(key[1], key[0])
    return _FIRST_RECORDS.find(operations, key)


class _FirstRecords:
    """Each call's first record in the latest ``operations`` asked about, updated from the
    rows past the head it shares with the one asked before (readings are asked about
    mostly in trace order, and each changes a row or two)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: tuple[Any, ...] = ()
        self._first: dict[OpKey, int] = {}

    def find(self, rows: tuple[Any, ...], key: OpKey) -> OperationView | None:
        with self._lock:
            if rows is not self._rows:
                kept = common_prefix(self._rows, rows)
                first = self._first
                for at in range(kept, len(self._rows)):
                    view = self._rows[at]
                    found = (view.session_id, view.identity.tool_call_id)
                    if first.get(found) == at:
                        del first[found]
                for at in range(kept, len(rows)):
                    view = rows[at]
                    first.setdefault((view.session_id, view.identity.tool_call_id), at)
                self._rows = rows
            at = self._first.get(key)
            return None if at is None else rows[at]


_FIRST_RECORDS = _FirstRecords()


def ops_for(obs: Observation, key: OpKey) -> tuple[OperationView, ...]:
    return tuple(op for op in obs.operations if (op.session_id, op.identity.tool_call_id) == key)


def find_op_by_execution_id(obs: Observation, execution_id: str) -> OperationView | None:
    for op in obs.operations:
        if op.identity.execution_id == execution_id:
            return op
    return None


def find_wait(obs: Observation, wait_id: str) -> ApprovalWaitView | None:
    for wait in obs.approval_waits:
        if wait.wait_id == wait_id:
            return wait
    return None


def probe_for(trace: Trace, event: TraceEvent, label: str) -> ObservationPoint | None:
    """The probe read while the world handled ``event`` (same index, or the first one
    labelled so after it and before the next event of the same kind)."""
    by_kind = positions_by_kind(trace)
    labelled = _points_by_label(trace).get(label, ((), ()))
    if by_kind is not None and labelled is not None:
        # found by bisection: the events' indexes are their positions, and this label's
        # points were recorded in index order
        same_kind = by_kind.get(event.kind, ())
        after = bisect.bisect_right(same_kind, event.index)
        bound = same_kind[after] if after < len(same_kind) else None
        indexes, found = labelled
        at = bisect.bisect_left(indexes, event.index)
        if at == len(found):
            return None
        point = found[at]
        return None if bound is not None and point.index >= bound else point
    later_same_kind = [e.index for e in trace.events if e.kind == event.kind and e.index > event.index]
    bound = later_same_kind[0] if later_same_kind else None
    for point in trace.observations:
        if point.label != label or point.index < event.index:
            continue
        if bound is not None and point.index >= bound:
            return None
        return point
    return None


@by_identity(2)
def _points_by_label(trace: Trace) -> dict[str, tuple[tuple[int, ...], tuple[ObservationPoint, ...]] | None]:
    """Per label, its points' indexes and the points, in recording order; None for a label
    whose points were not recorded in index order (then :func:`probe_for` scans)."""
    grouped: dict[str, list[ObservationPoint]] = {}
    for point in trace.observations:
        grouped.setdefault(point.label, []).append(point)
    found: dict[str, tuple[tuple[int, ...], tuple[ObservationPoint, ...]] | None] = {}
    for label, group in grouped.items():
        indexes = tuple(point.index for point in group)
        ordered = all(a <= b for a, b in zip(indexes, indexes[1:]))
        found[label] = (indexes, tuple(group)) if ordered else None
    return found


def durable_points_after(trace: Trace, index: int, labels: Iterable[str] = DURABLE_LABELS) -> tuple[ObservationPoint, ...]:
    """Points at rest read after event ``index`` (a point at ``index`` was read just after
    it); "final" only when the run completed."""
    wanted = tuple(labels)
    return tuple(p for p in trace.observations if p.index >= index and p.label in wanted
                 and (p.label != "final" or trace.completed))


def last_point_before(trace: Trace, index: int) -> ObservationPoint | None:
    points = [p for p in trace.observations if p.index < index]
    return points[-1] if points else None


def final_point(trace: Trace) -> ObservationPoint | None:
    finals = [p for p in trace.observations if p.label == "final"]
    if finals:
        return finals[-1]
    return trace.observations[-1] if trace.observations else None


# --------------------------------------------------------------------------- harness events


@dataclass(frozen=True, slots=True)
class DriverSpan:
    """One driver call and how it ended ("return", "raised", "crash" or "open")."""

    index: int
    method: str
    args: dict[str, Any]
    instance: int
    end_index: int | None = None
    end_kind: str = "open"
    end_data: dict[str, Any] = field(default_factory=dict)
    via_failpoint: str = ""
    """Set for a call the harness made from inside a failpoint (re-entrant fault action)."""

    def contains(self, index: int) -> bool:
        return self.index < index and (self.end_index is None or index < self.end_index)


@by_identity(2)  # asked by six checks of the same trace in a row (read-only: shared)
def driver_spans(trace: Trace) -> tuple[DriverSpan, ...]:
    spans: list[DriverSpan] = []
    open_spans: list[int] = []
    for event in trace.events:
        if event.kind == Kind.DRIVER_CALL:
            spans.append(DriverSpan(event.index, str(event.data.get("method", "")),
                                    dict(event.data.get("args") or {}), event.instance,
                                    via_failpoint=str(event.data.get("via_failpoint") or "")))
            open_spans.append(len(spans) - 1)
        elif event.kind in (Kind.DRIVER_RETURN, Kind.DRIVER_RAISED):
            method = event.data.get("method")
            for pos in reversed(open_spans):
                if spans[pos].method == method:
                    open_spans.remove(pos)
                    s = spans[pos]
                    end = "return" if event.kind == Kind.DRIVER_RETURN else "raised"
                    spans[pos] = DriverSpan(s.index, s.method, s.args, s.instance, event.index, end,
                                            dict(event.data), s.via_failpoint)
                    break
        elif event.kind == Kind.CRASH:
            for pos in open_spans:
                s = spans[pos]
                spans[pos] = DriverSpan(s.index, s.method, s.args, s.instance, event.index, "crash",
                                        dict(event.data), s.via_failpoint)
            open_spans.clear()
    return tuple(spans)


def innermost_span(spans: Iterable[DriverSpan], index: int, methods: Iterable[str] | None = None) -> DriverSpan | None:
    wanted = tuple(methods) if methods is not None else None
    best = None
    for span in spans:
        if span.contains(index) and (wanted is None or span.method in wanted):
            if best is None or span.index > best.index:
                best = span
    return best


def cancelled(trace: Trace, session_id: str, after: int = -1, before: int | None = None) -> bool:
    """Did the harness cancel the session (driver ``cancel`` call) after event ``after`` (and
    before event ``before``, when given)?"""
    return any(
        e.index > after and (before is None or e.index < before) and e.data.get("method") == "cancel"
        and (e.data.get("args") or {}).get("session_id", session_id) == session_id
        for e in trace.of_kind(Kind.DRIVER_CALL)
    )


def lifecycle_of(trace: Trace, *types: str) -> Iterator[tuple[TraceEvent, dict[str, Any]]]:
    for event, payload in trace.lifecycle_events():
        if payload.get("type") in types:
            yield event, payload


@dataclass(frozen=True, slots=True)
class CrashAt:
    """A crash at a failpoint, with the failpoint hit and the restart that followed."""

    index: int
    failpoint: str
    failpoint_event: TraceEvent | None
    instance: int
    restart_index: int | None


def crashes_at(trace: Trace, *failpoints: str) -> tuple[CrashAt, ...]:
    out = []
    for crash in trace.crashes():
        name = crash.data.get("failpoint", "")
        if name not in failpoints:
            continue
        hits = [e for e in trace.of_kind(Kind.FAILPOINT) if e.index < crash.index and e.data.get("name") == name]
        firing = [e for e in hits if e.data.get("action") == "crash"] or hits
        hit = firing[-1] if firing else None
        restarts = [e.index for e in trace.of_kind(Kind.RESTART) if e.index > crash.index]
        instance = hit.instance if hit is not None else crash.instance
        out.append(CrashAt(crash.index, name, hit, instance, restarts[0] if restarts else None))
    return tuple(out)


def op_from_context(trace: Trace, event: TraceEvent | None) -> OpKey | None:
    """The operation a failpoint hit names in its context (session + call, or execution id)."""
    if event is None:
        return None
    context = event.data.get("context") or {}
    session, tool_call_id = context.get("session_id"), context.get("tool_call_id")
    if session and tool_call_id:
        return (str(session), str(tool_call_id))
    return key_for_execution_id(trace, str(context.get("execution_id", "")))


def last_row_of_instance(trace: Trace, index: int, instance: int, since: int = -1) -> TraceEvent | None:
    rows = [e for e in trace.ledger() if since < e.index < index and e.instance == instance]
    return rows[-1] if rows else None


def crash_between(trace: Trace, start: int, stop: int) -> bool:
    return any(start < e.index < stop for e in trace.of_kind(Kind.CRASH, Kind.RESTART))


@dataclass(frozen=True, slots=True)
class Interruption:
    """A crash, or an injected exception that escaped the driver call: the harness, not the
    implementation, cut the work short at ``index``."""

    index: int
    session_id: str
    """The session the failpoint context names ("" when unknown)."""
    tool_call_id: str
    execution_id: str
    kind: str  # "crash" | "raise"


@by_identity(2)
def interruptions(trace: Trace) -> tuple[Interruption, ...]:
    out = []
    events = trace.events
    pending_hit: TraceEvent | None = None
    for pos, event in enumerate(events):
        if event.kind == Kind.FAILPOINT and event.data.get("action") == "crash":
            pending_hit = event
        elif event.kind == Kind.CRASH:
            source = pending_hit if pending_hit is not None else event
            context = source.data.get("context") or {} if source is pending_hit else {}
            out.append(Interruption(source.index, str(context.get("session_id", "")),
                                    str(context.get("tool_call_id", "")), str(context.get("execution_id", "")),
                                    "crash"))
            pending_hit = None
        elif event.kind == Kind.FAILPOINT and event.data.get("action") == "raise":
            for later in events[pos + 1:]:
                if later.kind == Kind.DRIVER_CALL:
                    break
                if later.kind == Kind.DRIVER_RAISED and later.data.get("exception") == "InjectedFault":
                    context = event.data.get("context") or {}
                    out.append(Interruption(event.index, str(context.get("session_id", "")),
                                            str(context.get("tool_call_id", "")),
                                            str(context.get("execution_id", "")), "raise"))
                    break
    return tuple(sorted(out, key=lambda i: i.index))


def first_interruption(trace: Trace, start: int, stop: int | None) -> Interruption | None:
    """The first crash or escaped injected exception after ``start`` and before ``stop``."""
    return next((i for i in interruptions(trace)
                 if start < i.index and (stop is None or i.index < stop)), None)


def recovery_after(trace: Trace, index: int) -> DriverSpan | None:
    """The first ``recover()`` that returned, called after event ``index``: from then on the
    implementation has had its chance to close what an interruption before it left open
    (a crashed instance nobody restarted never gets one)."""
    return next((span for span in driver_spans(trace)
                 if span.method == "recover" and span.index > index and span.end_kind == "return"),
                None)


def interrupted_between(trace: Trace, start: int, stop: int | None, session_id: str | None = None) -> bool:
    """Was work cut short (crash or escaped injected exception) after ``start`` and before
    ``stop``, in ``session_id`` when given (an interruption naming no session counts)?"""
    return any(
        start < i.index and (stop is None or i.index < stop)
        and (session_id is None or i.session_id in ("", session_id))
        for i in interruptions(trace)
    )


# --------------------------------------------------------------------------- evidence


def ev(note: str, *indexes: int, rows: Iterable[TraceEvent] = ()) -> Evidence:
    return Evidence(
        note,
        tuple(sorted({i for i in indexes if i is not None})),
        tuple(r.data.get("ledger_seq", -1) for r in rows),
    )


# --------------------------------------------------------------------------- failpoint hits of one operation


def names_op(event: TraceEvent, key: OpKey) -> bool:
    """Does a failpoint hit's context name the operation (session + call, or execution id)?"""
    context = event.data.get("context") or {}
    if context.get("execution_id") == execution_id_for(*key):
        return True
    return (context.get("session_id"), context.get("tool_call_id")) == key


def op_hits(trace: Trace, key: OpKey, *, instance: int | None = None, after: int = -1,
            before: int | None = None) -> tuple[TraceEvent, ...]:
    """Failpoint hits whose context names the operation, optionally of one instance and
    strictly between two event indexes."""
    return tuple(
        e for e in trace.of_kind(Kind.FAILPOINT)
        if after < e.index and (before is None or e.index < before)
        and (instance is None or e.instance == instance) and names_op(e, key)
    )


def failpoint_probe(trace: Trace, hit: TraceEvent) -> ObservationPoint | None:
    """The store as read while the world handled this failpoint hit."""
    return probe_for(trace, hit, f"probe:failpoint:{hit.data.get('name', '')}")


def op_at_hit(trace: Trace, hit: TraceEvent | None, key: OpKey) -> OperationView | None:
    """The operation as the store held it at a failpoint hit (None without a probe or record)."""
    if hit is None:
        return None
    probe = failpoint_probe(trace, hit)
    return find_op(probe.observation, key) if probe is not None else None
