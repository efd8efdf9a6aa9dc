"""Facts derived from a Trace that many criteria share: pure functions, no I/O, no state.

Guarantees:

* everything here is a deterministic function of the trace it is given; nothing is cached
  across calls and nothing reads the clock, the environment or a file;
* world ground truth comes first: operations are assembled from the calls the model was
  served, the ledger rows, the prompts and the classifier requests the world received, and
  only then joined with what the implementation's durable store said (observations);
* an observation point reflects every trace event whose index is ``<= point.index``; an
  event at index ``i`` happened *before* an observation iff ``i <= point.index``;
* missing optional trace keys degrade to "unknown" (``None``/empty), never to a guess that
  could turn a violation into a pass.

The key of an operation is ``(session_id, tool_call_id)``; the identity the contract binds
to it is checked by X2, everything else joins on this key.
"""

from __future__ import annotations

import bisect
import fnmatch
import json
from enum import Enum
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from harness.contract import (
    DecisionSource,
    Mode,
    OperationView,
    Permission,
    Rule,
    RuleEffect,
    SessionConfig,
    Thresholds,
    ToolKind,
    canonical_json,
)
from harness.criteria import approval_answers
from harness.trace.identity_memo import by_identity
from harness.trace.sequence_delta import common_prefix
from harness.trace.record import Kind, ObservationPoint, Trace, TraceEvent, positions_by_kind

OpKey = tuple[str, str]
"""``(session_id, tool_call_id)``."""

TURN_METHODS = ("run_turn", "answer_approval", "answer", "concurrent_turn")
"""Driver methods whose DRIVER_RETURN carries a TurnResult."""

ANSWER_METHODS = approval_answers.EXPLICIT_METHODS

STATIC_DENY_SOURCES = (
    DecisionSource.HARD_CONSTRAINT,
    DecisionSource.CAPABILITY,
    DecisionSource.PLAN_MODE,
    DecisionSource.EXPLICIT_DENY,
)

CRASH_AFTER_START = ("after_start_recorded", "after_tool_returned")
"""Failpoints between the durable start record and the saved result: a crash there leaves
an operation that may have executed and whose result is not known."""

POST_RESULT_FAILPOINTS = (
    "after_result_saved",
    "during_checkpoint_build",
    "after_checkpoint_saved",
    "during_diagnostics_write",
    "after_projection",
)
"""Failpoints reached only after the result record was saved."""


# --------------------------------------------------------------------------- small helpers


def value(data: Any) -> str:
    """The plain value of an enum member or a string (``None`` stays ``None``)."""
    if data is None:
        return None  # type: ignore[return-value]
    if isinstance(data, Enum):  # what ``.value`` returns, without the descriptor's cost
        return data._value_
    return getattr(data, "value", data)


def parse_json_text(raw: Any) -> Any:
    """``raw`` as JSON data: a dict is returned as is, text is parsed, else ``None``."""
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, (bytes, bytearray)):
        raw = raw.decode("utf-8", "replace")
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return None
    return None


@by_identity(2)
def points(trace: Trace) -> tuple[ObservationPoint, ...]:
    """Observation points ordered by trace index (recording order kept among equals)."""
    return tuple(sorted(trace.observations, key=lambda p: p.index))


def events_between(trace: Trace, lo: int, hi: int, *kinds: str) -> tuple[TraceEvent, ...]:
    """Events with ``lo < index < hi`` (of the given kinds, or all)."""
    by_kind = positions_by_kind(trace)
    if by_kind is None:  # indexes that are not positions (a hand-built trace): scan
        return tuple(
            e for e in trace.events if lo < e.index < hi and (not kinds or e.kind in kinds)
        )
    events = trace.events
    start, stop = max(lo + 1, 0), min(max(hi, 0), len(events))
    if start >= stop:
        return ()
    if not kinds:
        return events[start:stop]
    found: list[int] = []
    for kind in dict.fromkeys(kinds):
        indexes = by_kind.get(kind, ())
        found += indexes[bisect.bisect_left(indexes, start):bisect.bisect_left(indexes, stop)]
    if len(kinds) > 1:
        found.sort()
    return tuple(events[at] for at in found)


def last_index(trace: Trace) -> int:
    return trace.events[-1].index if trace.events else -1


# --------------------------------------------------------------------------- configuration


def config(trace: Trace, session_id: str) -> SessionConfig:
    for session in trace.meta.sessions:
        if session.session_id == session_id:
            return session
    return SessionConfig(session_id=session_id, thresholds=trace.meta.thresholds)


def thresholds(trace: Trace, session_id: str) -> Thresholds:
    for session in trace.meta.sessions:
        if session.session_id == session_id:
            return session.thresholds
    return trace.meta.thresholds


def default_session(trace: Trace) -> str:
    return trace.meta.sessions[0].session_id if trace.meta.sessions else ""


def tool_spec(trace: Trace, tool: str, session_id: str | None = None):
    if session_id is not None:
        for spec in config(trace, session_id).tools:
            if spec.name == tool:
                return spec
    for spec in trace.meta.tools:
        if spec.name == tool:
            return spec
    for session in trace.meta.sessions:
        for spec in session.tools:
            if spec.name == tool:
                return spec
    return None


def tool_kind(trace: Trace, tool: str, session_id: str | None = None) -> str | None:
    """The declared kind of a tool (``ToolKind`` value), or ``None`` when undeclared."""
    spec = tool_spec(trace, tool, session_id)
    if spec is not None:
        return value(spec.kind)
    for row in trace.ledger():
        if row.data.get("tool") == tool and row.data.get("kind"):
            return str(row.data["kind"])
    return None


def is_idempotent(trace: Trace, tool: str, session_id: str | None = None) -> bool:
    spec = tool_spec(trace, tool, session_id)
    return bool(spec is not None and spec.idempotent)


def is_bash(trace: Trace, tool: str, session_id: str | None = None) -> bool:
    """Bash is the tool named ``Bash`` or any tool declared with kind ``bash``."""
    return tool == "Bash" or tool_kind(trace, tool, session_id) == ToolKind.BASH.value


@by_identity(2)
def _answers(trace: Trace) -> dict[Any, Any]:
    """A per-trace memo for questions the checks ask of one trace many times over (the
    repeat checks compare every pair of operations): filled by the functions below, each
    under its own key, with answers that are pure functions of the trace and the key."""
    return {}


def expected_dedup_key(trace: Trace, session_id: str, tool: str, args: dict[str, Any]) -> str:
    """The repeat/dedup key the failure policy defines (L1.3–L1.5), as canonical text.

    Bash: the complete args without ``description`` and nothing else removed; every other
    tool: all args. No normalisation of any text."""
    # Keyed by the args object (kept alive in the entry, so its id stays its own): the
    # operations' args are shared, read-only values of the trace's readings.
    memo = _answers(trace)
    key = ("dedup_key", session_id, tool, id(args))
    found = memo.get(key)
    if found is not None and found[0] is args:
        return found[1]
    answer = _expected_dedup_key(trace, session_id, tool, args)
    memo[key] = (args, answer)
    return answer


def _expected_dedup_key(trace: Trace, session_id: str, tool: str, args: dict[str, Any]) -> str:
    kept = dict(args)
    if is_bash(trace, tool, session_id):
        kept.pop("description", None)
    return canonical_json({"tool": tool, "args": kept})


# --------------------------------------------------------------------------- rules in force


@dataclass(frozen=True, slots=True)
class RuleState:
    """The rules of one session in force from trace index ``start`` (exclusive) on."""

    start: int
    rules: tuple[Rule, ...]
    permission_version: int
    cause: str
    """"config", "update_rules" or "change_rules"."""


def parse_rule(data: Any) -> Rule:
    if isinstance(data, Rule):
        return data
    return Rule(
        effect=RuleEffect(value(data["effect"])),
        tool=str(data["tool"]),
        pattern=str(data.get("pattern", "*")),
        field=str(data.get("field", "")),
    )


def driver_args(event: TraceEvent) -> dict[str, Any]:
    args = event.data.get("args")
    return args if isinstance(args, dict) else {}


def arg_session(args: dict[str, Any], fallback: str = "") -> str:
    return str(args.get("session_id", args.get("session", fallback)) or fallback)


def fault_params(trace: Trace, event: TraceEvent) -> dict[str, Any]:
    """The parameters of the fault that fired at a FAILPOINT event.

    Taken from the event's ``params`` when the runner recorded them, else from the single
    fault of the plan with the same failpoint and action (the first when several)."""
    params = event.data.get("params")
    if isinstance(params, dict):
        return params
    name, action = event.data.get("name"), event.data.get("action")
    candidates = [f for f in trace.meta.faults if f.failpoint == name and f.action == action]
    hit = str(event.data.get("hit", ""))
    for fault in candidates:
        if fault.hits == hit:
            return dict(fault.params)
    return dict(candidates[0].params) if candidates else {}


def _rules_or(data: Any, previous: tuple[Rule, ...]) -> tuple[Rule, ...]:
    if data is None:
        return previous
    return tuple(parse_rule(r) for r in data)


def rule_timeline(trace: Trace, session_id: str) -> tuple[RuleState, ...]:
    """Config rules, then every ``update_rules`` driver call and ``change_rules`` fault."""
    memo = _answers(trace)
    key = ("rule_timeline", session_id)
    found = memo.get(key)
    if found is None:
        found = memo[key] = _rule_timeline(trace, session_id)
    return found


def _rule_timeline(trace: Trace, session_id: str) -> tuple[RuleState, ...]:
    cfg = config(trace, session_id)
    states = [RuleState(-1, tuple(cfg.rules), cfg.permission_version, "config")]
    first = default_session(trace)
    for event in trace.events:
        if (
            event.kind == Kind.DRIVER_CALL
            and event.data.get("method") == "update_rules"
            and not event.data.get("skipped")
        ):
            args = driver_args(event)
            if arg_session(args, first) != session_id:
                continue
            rules = _rules_or(args.get("rules"), states[-1].rules)
            version = int(args.get("permission_version") or states[-1].permission_version + 1)
            states.append(RuleState(event.index, rules, version, "update_rules"))
        elif event.kind == Kind.FAILPOINT and event.data.get("action") == "change_rules":
            params = fault_params(trace, event)
            if arg_session(params, first) != session_id:
                continue
            rules = _rules_or(params.get("rules"), states[-1].rules)
            version = int(params.get("permission_version") or states[-1].permission_version + 1)
            states.append(RuleState(event.index, rules, version, "change_rules"))
    return tuple(states)


def rules_at(trace: Trace, session_id: str, index: int) -> RuleState:
    """The rules in force for an event at ``index`` (changes at earlier indexes applied)."""
    current = None
    for state in rule_timeline(trace, session_id):
        if state.start < index:
            current = state
    assert current is not None
    return current


def rules_for_version(trace: Trace, session_id: str, version: int) -> RuleState | None:
    found = None
    for state in rule_timeline(trace, session_id):
        if state.permission_version == version:
            found = state
    return found


def versions(trace: Trace, session_id: str) -> frozenset[int]:
    return frozenset(s.permission_version for s in rule_timeline(trace, session_id))


def rule_changes_between(trace: Trace, session_id: str, lo: int, hi: int) -> tuple[RuleState, ...]:
    """Rule changes of a session taking effect strictly between ``lo`` and ``hi``."""
    return tuple(
        s for s in rule_timeline(trace, session_id) if s.cause != "config" and lo < s.start < hi
    )


# --------------------------------------------------------------------------- precedence


@dataclass(frozen=True, slots=True)
class Decision:
    """What the static precedence says; ``permission is None`` means "classifier decides"."""

    permission: Permission | None
    source: DecisionSource


def rule_matches(rule: Rule, tool: str, args: dict[str, Any]) -> bool:
    if not fnmatch.fnmatchcase(tool, rule.tool):
        return False
    if rule.field:
        if rule.field not in args:
            return rule.pattern == "*"
        raw = args[rule.field]
        subject = raw if isinstance(raw, str) else canonical_json(raw)
    else:
        subject = canonical_json(args)
    return fnmatch.fnmatchcase(subject, rule.pattern)


def static_decision(
    cfg: SessionConfig, rules: Iterable[Rule], tool: str, args: dict[str, Any], kind: str | None
) -> Decision:
    """The first matching layer of the precedence (docs/lifecycle.md, L2.1)."""
    rules = tuple(rules)
    if any(rule_matches(r, tool, args) for r in cfg.hard_constraints):
        return Decision(Permission.DENY, DecisionSource.HARD_CONSTRAINT)
    if cfg.capabilities and tool not in cfg.capabilities:
        return Decision(Permission.DENY, DecisionSource.CAPABILITY)
    if value(cfg.mode) == Mode.PLAN.value and kind != ToolKind.READ.value:
        return Decision(Permission.DENY, DecisionSource.PLAN_MODE)
    if any(value(r.effect) == "deny" and rule_matches(r, tool, args) for r in rules):
        return Decision(Permission.DENY, DecisionSource.EXPLICIT_DENY)
    if any(value(r.effect) == "ask" and rule_matches(r, tool, args) for r in rules):
        return Decision(Permission.ASK, DecisionSource.ASK_RULE)
    if any(value(r.effect) == "allow" and rule_matches(r, tool, args) for r in rules):
        return Decision(Permission.ALLOW, DecisionSource.EXACT_GRANT)
    if value(cfg.mode) == Mode.AUTO.value:
        return Decision(None, DecisionSource.CLASSIFIER)
    if cfg.interactive and cfg.owner_can_approve:
        return Decision(Permission.ASK, DecisionSource.DEFAULT_ASK)
    return Decision(Permission.DENY, DecisionSource.DEFAULT_DENY)


def decision_at(trace: Trace, op: "Op", index: int) -> Decision:
    """The static decision for ``op`` under the rules in force at ``index``."""
    state = rules_at(trace, op.session_id, index)
    return static_decision(
        config(trace, op.session_id), state.rules, op.tool, op.args, tool_kind(trace, op.tool, op.session_id)
    )


def decision_for_version(trace: Trace, op: "Op", version: int) -> Decision | None:
    state = rules_for_version(trace, op.session_id, version)
    if state is None:
        return None
    return static_decision(
        config(trace, op.session_id), state.rules, op.tool, op.args, tool_kind(trace, op.tool, op.session_id)
    )


# --------------------------------------------------------------------------- model traffic


def request_sessions(trace: Trace) -> dict[str, str]:
    return {
        str(e.data.get("request_id")): str(e.data.get("session_id"))
        for e in trace.of_kind(Kind.MODEL_REQUEST)
    }


def model_requests(trace: Trace, session_id: str | None = None) -> tuple[TraceEvent, ...]:
    return tuple(
        e
        for e in trace.of_kind(Kind.MODEL_REQUEST)
        if session_id is None or e.data.get("session_id") == session_id
    )


def next_model_request(trace: Trace, session_id: str, after: int) -> TraceEvent | None:
    """The session's first model request the world received after ``after`` whose request
    had not started by then: a request an instance started earlier and was held before
    sending (a concurrent turn held at ``after_model_request_started``) carries the
    conversation as it was then, and cannot carry what happened since (found by generation)."""
    started = _requests_started_at(trace)
    for event in model_requests(trace, session_id):
        if event.index > after and started.get(str(event.data.get("request_id", "")),
                                               event.index) > after:
            return event
    return None


@by_identity(2)
def _requests_started_at(trace: Trace) -> Mapping[str, int]:
    """Request id -> the index of its first ``after_model_request_started`` hit."""
    found: dict[str, int] = {}
    for event in trace.of_kind(Kind.FAILPOINT):
        if event.data.get("name") == "after_model_request_started":
            found.setdefault(str((event.data.get("context") or {}).get("request_id", "")), event.index)
    return MappingProxyType(found)


def tool_message(request: TraceEvent, tool_call_id: str) -> dict[str, Any] | None:
    """The last ``tool`` message of a model request answering ``tool_call_id``."""
    found = None
    for message in request.data.get("messages", ()):
        if message.get("role") == "tool" and message.get("tool_call_id") == tool_call_id:
            found = message
    return found


@dataclass(frozen=True, slots=True, eq=False)
class ServedCall:
    """A tool call the world's model served in a stream."""

    session_id: str
    tool_call_id: str
    tool: str | None
    args: dict[str, Any] | None
    request_id: str
    request_index: int
    end_index: int
    how: str


def _assistant_calls(trace: Trace) -> dict[OpKey, dict[str, Any]]:
    """Tool calls as later requests echo them in assistant messages (a fallback source)."""
    found: dict[OpKey, dict[str, Any]] = {}
    for request in trace.of_kind(Kind.MODEL_REQUEST):
        session = str(request.data.get("session_id"))
        for message in request.data.get("messages", ()):
            for call in message.get("tool_calls", ()) or ():
                found.setdefault((session, str(call.get("tool_call_id"))), call)
    return found


@by_identity(2)
def served_calls(trace: Trace) -> tuple[ServedCall, ...]:
    """Every call served by a stream, in serving order (a call served twice appears twice)."""
    sessions = request_sessions(trace)
    request_index = {
        str(e.data.get("request_id")): e.index for e in trace.of_kind(Kind.MODEL_REQUEST)
    }
    echoed = _assistant_calls(trace)
    served: list[ServedCall] = []
    for end in trace.of_kind(Kind.MODEL_STREAM_END):
        request_id = str(end.data.get("request_id"))
        session = str(end.data.get("session_id") or sessions.get(request_id, ""))
        calls = end.data.get("tool_calls")
        if isinstance(calls, list) and calls:
            entries = [(str(c.get("tool_call_id")), c.get("tool"), c.get("args")) for c in calls]
        else:
            entries = []
            for call_id in end.data.get("tool_call_ids", ()) or ():
                echo = echoed.get((session, str(call_id)), {})
                entries.append((str(call_id), echo.get("tool"), echo.get("args")))
        for call_id, tool, args in entries:
            served.append(
                ServedCall(
                    session_id=session,
                    tool_call_id=call_id,
                    tool=tool,
                    args=args if isinstance(args, dict) else None,
                    request_id=request_id,
                    request_index=request_index.get(request_id, end.index),
                    end_index=end.index,
                    how=str(end.data.get("how", "end")),
                )
            )
    return tuple(served)


def turn_returns(trace: Trace) -> tuple[tuple[TraceEvent, str, str], ...]:
    """``(event, session_id, status)`` of every driver return carrying a TurnResult."""
    found = []
    for event in trace.of_kind(Kind.DRIVER_RETURN):
        result = event.data.get("result")
        if isinstance(result, dict) and "status" in result and "session_id" in result:
            found.append((event, str(result["session_id"]), str(result["status"])))
    return tuple(found)


# --------------------------------------------------------------------------- operations


@dataclass(frozen=True, slots=True)
class ViewRun:
    """A run of consecutive readings (``points[start:stop]`` of :func:`points`) that all
    hold the very same view object of one operation."""

    view: OperationView
    start: int
    stop: int


class ViewPairs(Sequence[tuple[ObservationPoint, OperationView]]):
    """An operation's ``(reading, view)`` pairs, in reading order, held as runs of readings
    sharing one view object (:class:`ViewRun`): a store reading holds every operation, so a
    session of N calls has about N² pairs but only a few runs per operation. It reads as
    the tuple of pairs it stands for (iteration, ``len``, indexing, truth); the checks that
    would walk every pair walk :attr:`runs` instead and judge a run once where their answer
    depends only on the view and on the operation's own events."""

    __slots__ = ("runs", "_points", "_ends", "_len")

    def __init__(self, all_points: tuple[ObservationPoint, ...], runs: tuple[ViewRun, ...]) -> None:
        self.runs = runs
        self._points = all_points
        ends, total = [], 0
        for run in runs:
            total += run.stop - run.start
            ends.append(total)
        self._ends = ends
        self._len = total

    def points_of(self, run: ViewRun) -> tuple[ObservationPoint, ...]:
        """The readings of one run, in order."""
        return self._points[run.start:run.stop]

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def __iter__(self) -> Iterator[tuple[ObservationPoint, OperationView]]:
        all_points = self._points
        for run in self.runs:
            view = run.view
            for at in range(run.start, run.stop):
                yield all_points[at], view

    def __getitem__(self, at: Any) -> Any:
        if isinstance(at, slice):
            return tuple(self)[at]
        if at < 0:
            at += self._len
        if not 0 <= at < self._len:
            raise IndexError("view pair index out of range")
        number = bisect.bisect_right(self._ends, at)
        run = self.runs[number]
        before = self._ends[number - 1] if number else 0
        return self._points[run.start + at - before], run.view

    def __repr__(self) -> str:
        return f"ViewPairs({len(self.runs)} runs, {self._len} pairs)"


def _view_runs(all_points: tuple[ObservationPoint, ...]) -> dict[OpKey, list[ViewRun]]:
    """Each operation's runs of readings with the same view (first sighting order), in time
    linear in what changed between readings: a reading whose ``operations`` are the very
    tuple of the reading before changes nothing, and of a changed one only the rows past
    the head it shares (the same objects, found in C) are looked at. An operation's view in
    a reading is the first row with its key (duplicates are X2's business)."""
    runs: dict[OpKey, list[ViewRun]] = {}
    open_runs: dict[OpKey, tuple[OperationView, int]] = {}  # key -> (view, start)
    first_at: dict[OpKey, int] = {}  # key -> its first position in the previous reading
    before: Any = ()

    def close(key: OpKey, view: OperationView, start: int, stop: int) -> None:
        runs.setdefault(key, []).append(ViewRun(view, start, stop))

    for number, point in enumerate(all_points):
        now = point.observation.operations
        if now is before:
            continue
        kept = common_prefix(before, now)
        dropped: dict[OpKey, tuple[OperationView, int]] = {}
        for at in range(kept, len(before)):
            row = before[at]
            key = (row.session_id, row.identity.tool_call_id)
            if first_at.get(key) == at:
                del first_at[key]
                dropped[key] = open_runs.pop(key)
        for at in range(kept, len(now)):
            row = now[at]
            key = (row.session_id, row.identity.tool_call_id)
            if key in first_at:
                continue
            first_at[key] = at
            ended = dropped.pop(key, None)
            if ended is not None:
                if ended[0] is row:
                    open_runs[key] = ended
                    continue
                close(key, ended[0], ended[1], number)
            elif key not in runs:
                runs[key] = []  # first sighting: its place in the order
            open_runs[key] = (row, number)
        for key, (view, start) in dropped.items():
            close(key, view, start, number)
        before = now
    for key, (view, start) in open_runs.items():
        close(key, view, start, len(all_points))
    return runs


@dataclass(frozen=True, slots=True, eq=False)
class Op:
    """One operation as the world saw it, joined with what the store said about it."""

    session_id: str
    tool_call_id: str
    tool: str
    args: dict[str, Any]
    args_source: str
    """"served" (the model's call), "ledger" (what executed), "observed" (store's word)."""
    served: tuple[ServedCall, ...]
    rows: tuple[TraceEvent, ...]
    """TOOL_EXECUTED ledger rows of this operation, in order."""
    unavailable: tuple[TraceEvent, ...]
    prompts: tuple[TraceEvent, ...]
    views: Sequence[tuple[ObservationPoint, OperationView]]
    """Every reading that held it, with its view there, in reading order (a
    :class:`ViewPairs`: walk its ``runs`` rather than every pair where the answer allows)."""
    first_seen: int = field(init=False, repr=False)
    """The trace index of its first sighting (-1: none); computed once, since the repeat
    checks compare it for every pair of operations."""
    first_stored: int = field(init=False, repr=False)
    """The trace index of the first reading of the store that held it (-1: none)."""

    def __post_init__(self) -> None:
        candidates = [s.end_index for s in self.served]
        candidates += [r.index for r in self.rows] + [u.index for u in self.unavailable]
        stored = _first_index(self.views)
        if stored >= 0:
            candidates.append(stored)
        object.__setattr__(self, "first_seen", min(candidates) if candidates else -1)
        object.__setattr__(self, "first_stored", stored)

    def precedes(self, other: "Op") -> bool:
        """Was this operation handled before ``other``? Calls of one response are seen at
        the same moment (their stream's end) and the contract leaves free the order in which
        an implementation takes them up, so between those the one the store held first came
        first (found by generation: two equal calls in one response, the second refused by
        the repeat guard on the first's denial, were both counted as first)."""
        if self.first_seen != other.first_seen:
            return self.first_seen < other.first_seen
        mine = self.first_stored if self.first_stored >= 0 else float("inf")
        theirs = other.first_stored if other.first_stored >= 0 else float("inf")
        return mine < theirs

    @property
    def key(self) -> OpKey:
        return (self.session_id, self.tool_call_id)

    @property
    def latest(self) -> OperationView | None:
        return self.views[-1][1] if self.views else None

    @property
    def latest_point(self) -> ObservationPoint | None:
        return self.views[-1][0] if self.views else None

    def view_at(self, index: int) -> tuple[ObservationPoint, OperationView] | None:
        """The latest view taken at or before ``index``."""
        views = self.views
        if isinstance(views, ViewPairs):  # readings in index order: the last run reaching it
            for run in reversed(views.runs):
                run_points = views.points_of(run)
                if run_points[0].index <= index:
                    at = bisect.bisect_right(run_points, index, key=_point_index) - 1
                    return run_points[at], run.view
            return None
        found = None
        for point, view in views:
            if point.index <= index:
                found = (point, view)
        return found

    @property
    def ledger_seqs(self) -> tuple[int, ...]:
        return tuple(int(r.data.get("ledger_seq", -1)) for r in self.rows)

@by_identity(2)  # some thirty checks ask for the same trace's operations in a row
def operations(trace: Trace) -> Mapping[OpKey, Op]:
    """Every operation the trace knows of, keyed ``(session, call id)``, by first sighting
    (read-only: it is shared by every check of the trace)."""
    served: dict[OpKey, list[ServedCall]] = {}
    for call in served_calls(trace):
        served.setdefault((call.session_id, call.tool_call_id), []).append(call)
    rows: dict[OpKey, list[TraceEvent]] = {}
    for row in trace.ledger():
        rows.setdefault((str(row.data.get("session_id")), str(row.data.get("tool_call_id"))), []).append(row)
    unavailable: dict[OpKey, list[TraceEvent]] = {}
    for event in trace.of_kind(Kind.TOOL_UNAVAILABLE):
        key = (str(event.data.get("session_id")), str(event.data.get("tool_call_id")))
        unavailable.setdefault(key, []).append(event)
    prompts: dict[OpKey, list[TraceEvent]] = {}
    for event in trace.of_kind(Kind.APPROVAL_PROMPT):
        key = (str(event.data.get("session_id")), str(event.data.get("tool_call_id")))
        prompts.setdefault(key, []).append(event)
    all_points = points(trace)
    views = {key: ViewPairs(all_points, tuple(found))
             for key, found in _view_runs(all_points).items()}

    keys = list(dict.fromkeys([*served, *rows, *unavailable, *prompts, *views]))
    ops: dict[OpKey, Op] = {}
    for key in keys:
        tool, args, source = None, None, "observed"
        for call in served.get(key, ()):
            if call.args is not None and call.tool is not None:
                tool, args, source = call.tool, call.args, "served"
                break
        if args is None and key in rows:
            tool, args, source = rows[key][0].data.get("tool"), rows[key][0].data.get("args"), "ledger"
        if args is None and key in views:
            tool, args, source = views[key][-1][1].tool, views[key][-1][1].args, "observed"
        if args is None and key in prompts:
            tool, args, source = prompts[key][0].data.get("tool"), prompts[key][0].data.get("args"), "observed"
        if args is None and key in unavailable:
            tool, args, source = unavailable[key][0].data.get("tool"), unavailable[key][0].data.get("args"), "ledger"
        if tool is None:
            for call in served.get(key, ()):
                tool = call.tool or tool
        ops[key] = Op(
            session_id=key[0],
            tool_call_id=key[1],
            tool=str(tool or ""),
            args=dict(args or {}),
            args_source=source,
            served=tuple(served.get(key, ())),
            rows=tuple(rows.get(key, ())),
            unavailable=tuple(unavailable.get(key, ())),
            prompts=tuple(prompts.get(key, ())),
            views=views.get(key) or _NO_VIEWS,
        )
    return MappingProxyType(dict(sorted(ops.items(),
                                        key=lambda item: (item[1].first_seen, item[0]))))


_NO_VIEWS = ViewPairs((), ())


def distinct_views(op: Op) -> tuple[OperationView, ...]:
    """The operation's views, one per run of readings sharing it (what a question about the
    views alone needs, not one per reading)."""
    views = op.views
    if isinstance(views, ViewPairs):
        return tuple(run.view for run in views.runs)
    return tuple(view for _, view in views)


def pairs_where(op: Op, keep: Callable[[OperationView], bool]
                ) -> tuple[tuple[ObservationPoint, OperationView], ...]:
    """``tuple((p, v) for p, v in op.views if keep(v))``, asking ``keep`` once per run."""
    views = op.views
    if not isinstance(views, ViewPairs):
        return tuple((p, v) for p, v in views if keep(v))
    return tuple((point, run.view) for run in views.runs if keep(run.view)
                 for point in views.points_of(run))


def last_read_index(op: Op) -> int:
    """The trace index of the latest reading that held the operation (-1: none)."""
    return op.views[-1][0].index if op.views else -1


def _point_index(point: ObservationPoint) -> int:
    return point.index


def _first_index(views: Sequence[tuple[ObservationPoint, OperationView]]) -> int:
    """The smallest trace index among the readings (-1: none)."""
    if isinstance(views, ViewPairs):
        return min((views.points_of(run)[0].index for run in views.runs), default=-1)
    return min((point.index for point, _ in views), default=-1)


def is_escalation_retry(op: Op, row: TraceEvent) -> bool:
    """A row run without sandbox after an earlier row of the same op asked for escalation."""
    if row.data.get("sandboxed", True):
        return False
    return any(r.index < row.index and r.data.get("escalation_requested") for r in op.rows)


def attempt_rows(op: Op) -> tuple[TraceEvent, ...]:
    """Ledger rows that are attempts of the operation itself (escalation retries excluded)."""
    return tuple(r for r in op.rows if not is_escalation_retry(op, r))


def pre_call_denied(op: Op) -> bool:
    """Stored as denied and not started, and the ledger shows no execution at all."""
    view = op.latest
    return (
        view is not None
        and not op.rows
        and value(view.permission) == Permission.DENY.value
        and value(view.outcome) == "not_started"
    )


# --------------------------------------------------------------------------- approvals


def answers(trace: Trace) -> Mapping[str, "approval_answers.Answer"]:
    """The answer that took effect per wait id: an ``answer_approval`` call or a new message
    in the wait's session (:mod:`harness.criteria.approval_answers`)."""
    return approval_answers.first_answers(trace)


def approval_between(trace: Trace, op: Op, lo: int, hi: int) -> tuple[TraceEvent, TraceEvent] | None:
    """A prompt for ``op`` shown after ``lo`` and approved by an answer before ``hi``."""
    answered = answers(trace)
    for prompt in op.prompts:
        if not lo < prompt.index < hi:
            continue
        answer = answered.get(str(prompt.data.get("wait_id")))
        if answer is not None and answer.index < hi and answer.approve:
            return (prompt, answer.event)
    return None


# --------------------------------------------------------------------------- classifier


@dataclass(frozen=True, slots=True, eq=False)
class Review:
    """One classifier request the world received and what it answered."""

    event: TraceEvent
    session_id: str
    tool: str
    operation: str | None
    """The ``operation`` text from ``raw`` (the bytes the world received)."""
    request: dict[str, Any]
    raw: Any
    outcome: str
    delay_s: float
    op_key: OpKey | None
    """The operation reviewed, when it can be told (see :func:`reviews`)."""


def _review_context(trace: Trace, review_index: int, next_review: int) -> dict[str, Any]:
    for event in trace.of_kind(Kind.FAILPOINT):
        if (
            review_index < event.index < next_review
            and event.data.get("name") == "during_classifier_review"
            and isinstance(event.data.get("context"), dict)
        ):
            return event.data["context"]
    return {}


def reviews(trace: Trace, ops: dict[OpKey, Op] | None = None) -> tuple[Review, ...]:
    """Every CLASSIFIER_REQUEST, linked to the operation it reviewed.

    Link: the ``tool_call_id``/``execution_id`` in the context of the
    ``during_classifier_review`` failpoint of that review when present; otherwise the
    earliest-served operation of that session and tool whose canonical args equal the
    reviewed ``operation`` and that no earlier review was linked to (else the latest such).
    An operation text equal to no call's args stays unlinked (L2.2 reports it)."""
    ops = operations(trace) if ops is None else ops
    events = list(trace.of_kind(Kind.CLASSIFIER_REQUEST))
    linked: set[OpKey] = set()
    found: list[Review] = []
    for position, event in enumerate(events):
        request = event.data.get("request") if isinstance(event.data.get("request"), dict) else {}
        raw = parse_json_text(event.data.get("raw"))
        operation = None
        if isinstance(raw, dict) and isinstance(raw.get("operation"), str):
            operation = raw["operation"]
        elif isinstance(request.get("operation"), str):
            operation = request["operation"]
        source = raw if isinstance(raw, dict) else request
        session = str(source.get("session_id", request.get("session_id", "")))
        tool = str(source.get("tool", request.get("tool", "")))
        next_index = events[position + 1].index if position + 1 < len(events) else last_index(trace) + 1
        context = _review_context(trace, event.index, next_index)
        key: OpKey | None = None
        call_id = context.get("tool_call_id")
        execution_id = context.get("execution_id")
        for op in ops.values():
            if op.session_id != session:
                continue
            if call_id is not None and op.tool_call_id == str(call_id):
                key = op.key
            elif call_id is None and execution_id is not None and op.latest is not None and op.latest.identity.execution_id == execution_id:
                key = op.key
        if key is None and operation is not None:
            candidates = [
                op
                for op in ops.values()
                if op.session_id == session
                and op.tool == tool
                and canonical_json(op.args) == operation
                and op.first_seen < event.index
            ]
            fresh = [op for op in candidates if op.key not in linked]
            if fresh:
                key = fresh[0].key
            elif candidates:
                key = candidates[-1].key
        if key is not None:
            linked.add(key)
        found.append(
            Review(
                event=event,
                session_id=session,
                tool=tool,
                operation=operation,
                request=request,
                raw=event.data.get("raw"),
                outcome=str(event.data.get("outcome", "")),
                delay_s=float(event.data.get("delay_s", 0.0) or 0.0),
                op_key=key,
            )
        )
    return tuple(found)


def effective_outcome(trace: Trace, review: Review) -> str:
    """What the implementation should record for a review: a verdict slower than the
    session's ``classifier_timeout_s`` is a timeout whatever it said."""
    limit = thresholds(trace, review.session_id).classifier_timeout_s
    if review.delay_s > limit:
        return "timeout"
    return review.outcome


def reviews_of(all_reviews: Iterable[Review], key: OpKey) -> tuple[Review, ...]:
    return tuple(r for r in all_reviews if r.op_key == key)


def classifier_allowed_between(all_reviews: Iterable[Review], trace: Trace, key: OpKey, lo: int, hi: int) -> Review | None:
    for review in all_reviews:
        if review.op_key == key and lo < review.event.index < hi and effective_outcome(trace, review) == "allow":
            return review
    return None


# --------------------------------------------------------------------------- authorization


@dataclass(frozen=True, slots=True)
class Authorization:
    ok: bool
    how: str
    decision: Decision


def authorization(trace: Trace, op: Op, at: int, all_reviews: Iterable[Review]) -> Authorization:
    """Was running ``op`` at index ``at`` authorized by the precedence in force then?

    Static deny layers: never. Ask (rule or default): only with an approval of this very
    operation before ``at``. Classifier layer: an explicit, timely ``allow`` for this
    operation before ``at``, or an approval. Exact grant: yes."""
    decision = decision_at(trace, op, at)
    approval = approval_between(trace, op, -1, at)
    if decision.permission is Permission.DENY:
        return Authorization(False, f"denied by {decision.source.value}", decision)
    if decision.permission is Permission.ALLOW:
        return Authorization(True, "exact grant", decision)
    if decision.permission is Permission.ASK:
        if approval:
            return Authorization(True, "approved", decision)
        return Authorization(False, f"{decision.source.value} requires an approval, none was given", decision)
    if classifier_allowed_between(all_reviews, trace, op.key, -1, at) is not None:
        return Authorization(True, "classifier allow", decision)
    if approval:
        return Authorization(True, "approved (fallback)", decision)
    return Authorization(False, "classifier layer: no explicit allow and no approval", decision)


# --------------------------------------------------------------------------- crashes


@by_identity(2)
def crash_points(trace: Trace) -> tuple[tuple[TraceEvent, str, dict[str, Any]], ...]:
    """``(crash event, failpoint name, context of the failpoint hit that crashed)``."""
    found = []
    for crash in trace.crashes():
        name = str(crash.data.get("failpoint", ""))
        context: dict[str, Any] = {}
        for event in trace.of_kind(Kind.FAILPOINT):
            if event.index < crash.index and event.data.get("name") == name:
                ctx = event.data.get("context")
                context = ctx if isinstance(ctx, dict) else {}
        found.append((crash, name, context))
    return tuple(found)


def context_names_op(context: dict[str, Any], op: Op) -> bool | None:
    """Does a failpoint context name ``op``? ``None`` when it names no operation at all."""
    call_id = context.get("tool_call_id")
    execution_id = context.get("execution_id")
    session = context.get("session_id")
    if call_id is not None:
        return str(call_id) == op.tool_call_id and (session is None or session == op.session_id)
    if execution_id is not None:
        ids = {v.identity.execution_id for v in distinct_views(op)}
        return execution_id in ids
    if session is not None and session != op.session_id:
        return False
    return None


def crashed_mid_execution(trace: Trace, op: Op, ops: dict[OpKey, Op]) -> TraceEvent | None:
    """A crash between this op's durable start and its saved result, if the trace has one.

    A crash at ``after_start_recorded``/``after_tool_returned`` counts when its failpoint
    context names this op, or names no op and this op was the last one started or served
    in that session before the crash."""
    for crash, name, context in crash_points(trace):
        if name not in CRASH_AFTER_START:
            continue
        named = context_names_op(context, op)
        if named:
            return crash
        if named is None and op.first_seen < crash.index:
            # no operation named: attribute to the latest operation seen before the crash
            others = [
                o for o in ops.values() if o.session_id == op.session_id and o.first_seen < crash.index
            ]
            if others and max(others, key=lambda o: o.first_seen).key == op.key:
                return crash
    return None


# --------------------------------------------------------------------------- evidence helpers


def op_indexes(op: Op) -> tuple[int, ...]:
    indexes = [s.end_index for s in op.served[:1]] + [r.index for r in op.rows]
    if op.latest_point is not None:
        indexes.append(op.latest_point.index)
    return tuple(dict.fromkeys(indexes))


def describe(op: Op) -> str:
    return f"{op.session_id}/{op.tool_call_id} ({op.tool})"


def never_decided(trace: Trace, op: Op) -> bool:
    """Did the instance die right after preparing ``op`` (a crash at ``after_prepare`` whose
    context names it) with nobody taking it up again (no later failpoint hit naming it, no
    prompt, no tool attempt) and nothing saved for it? Then no permission decision was ever
    taken: the stored permission is only what the record holds before one (a crashed
    instance B of a concurrent turn gets no recovery), and there is no decision to judge.
    A recovery that should have taken it up and did not is L4.8's failure
    (:mod:`harness.criteria.prepared_calls`), not a decision L2.2 or L1.7 could judge."""
    view = op.latest
    if view is None or value(view.delivery) != "pending" or value(view.outcome) != "not_started":
        return False
    for crash, name, context in crash_points(trace):
        if name != "after_prepare" or not context_names_op(context, op):
            continue
        taken_up = any(
            context_names_op(e.data.get("context") or {}, op)
            for e in events_between(trace, crash.index, last_index(trace) + 1, Kind.FAILPOINT)
        ) or any(e.index > crash.index for e in (*op.prompts, *op.rows, *op.unavailable))
        if not taken_up:
            return True
    return False
