"""Build :class:`harness.trace.record.Trace` values by hand, for unit tests of pure criteria.

Shared by the criteria tests of every stage. Usage::

    from tracebuilder import TraceBuilder, call, op_view, tool_result, user

    b = TraceBuilder("s1", tools=[("write_file", "write")])
    b.turn("s1")                                       # DRIVER_CALL run_turn
    b.model("s1", [call("c1", "write_file", {"path": "/a", "content": "x"})])
    row = b.executed("s1", "c1", "write_file", {"path": "/a", "content": "x"})
    b.observe(op_view("s1", "c1", "write_file", {"path": "/a", "content": "x"}))
    b.model("s1", messages=[user("go"), tool_result("c1", "succeeded")])
    b.turn_returns("s1", "completed")                  # DRIVER_RETURN with a TurnResult
    trace = b.build()

Rules of the builder:

* every ``add``-like method appends one event with the next index and returns that index
  (``b.last`` is the index of the newest event); sources follow the kind (world, iut,
  harness) and ``instance`` is the current one (``restart()`` bumps it);
* ``observe(...)`` appends an OBSERVED event and an observation point; the point's index is
  the OBSERVED event's own index unless ``at=`` names an earlier event (probes: a probe is
  read while the world handles the event it names, so ``at`` is that event's index);
* data layouts are those documented in :mod:`harness.trace.record`; keyword arguments not named
  by a helper are copied into the event's ``data`` unchanged (``**extra``), so a test can
  add or omit any key;
* nothing here checks anything: a builder can make inconsistent traces on purpose.
"""

from __future__ import annotations

import itertools
from typing import Any, Iterable, Sequence

from harness.contract import (
    ClassifierOutcome,
    ClassifierRequest,
    DecisionSource,
    Delivery,
    EventType,
    FailureKind,
    Feature,
    LifecycleEvent,
    Message,
    Mode,
    Observation,
    OperationIdentity,
    OperationView,
    Outcome,
    Permission,
    Projection,
    RecoveryAction,
    Rule,
    RuleEffect,
    SessionConfig,
    Thresholds,
    ToolCall,
    ToolKind,
    ToolSpec,
    TurnStatus,
    args_digest,
    canonical_json,
    execution_id_for,
    to_json,
)
from harness.trace.record import (
    FaultSpec,
    Kind,
    ObservationPoint,
    Source,
    Trace,
    TraceEvent,
    TraceMeta,
)

ALL_FEATURES = tuple(Feature)

_WORLD_KINDS = {
    Kind.MODEL_REQUEST, Kind.MODEL_STREAM_END, Kind.CLASSIFIER_REQUEST, Kind.TOOL_EXECUTED,
    Kind.TOOL_UNAVAILABLE, Kind.APPROVAL_PROMPT, Kind.UI_PUBLISH, Kind.FAILPOINT,
}


# --------------------------------------------------------------------------- small values


def call(tool_call_id: str, tool: str, args: dict[str, Any] | None = None) -> ToolCall:
    return ToolCall(tool_call_id, tool, dict(args or {}))


def rule(effect: str, tool: str, pattern: str = "*", field: str = "") -> Rule:
    return Rule(RuleEffect(effect), tool, pattern, field)


def user(text: str = "go") -> Message:
    return Message(role="user", content=text)


def assistant(*calls: ToolCall, text: str = "") -> Message:
    return Message(role="assistant", content=text, tool_calls=tuple(calls))


def tool_result(
    tool_call_id: str,
    outcome: str | Outcome = Outcome.SUCCEEDED,
    failure_kind: str | FailureKind | None = None,
    content: str = "",
) -> Message:
    return Message(
        role="tool",
        content=content,
        tool_call_id=tool_call_id,
        outcome=Outcome(outcome),
        failure_kind=FailureKind(failure_kind) if failure_kind is not None else None,
    )


def session(session_id: str = "s1", **fields: Any) -> SessionConfig:
    """A SessionConfig; ``rules``/``hard_constraints`` may be ``rule(...)`` values or tuples
    ``(effect, tool[, pattern[, field]])``; ``mode`` may be a string."""
    for name in ("rules", "hard_constraints"):
        if name in fields:
            fields[name] = tuple(r if isinstance(r, Rule) else rule(*r) for r in fields[name])
    if "mode" in fields:
        fields["mode"] = Mode(fields["mode"])
    if "tools" in fields:
        fields["tools"] = tuple(_spec(t) for t in fields["tools"])
    if "capabilities" in fields:
        fields["capabilities"] = tuple(fields["capabilities"])
    if isinstance(fields.get("thresholds"), dict):
        fields["thresholds"] = Thresholds(**fields["thresholds"])
    return SessionConfig(session_id=session_id, **fields)


def _spec(tool: Any) -> ToolSpec:
    if isinstance(tool, ToolSpec):
        return tool
    name, kind, *rest = tool
    return ToolSpec(name, ToolKind(kind), idempotent=bool(rest[0]) if rest else False)


def dedup_key_for(tool: str, args: dict[str, Any]) -> str:
    """The key a correct implementation would derive (Bash drops ``description`` only)."""
    kept = {k: v for k, v in args.items() if not (tool == "Bash" and k == "description")}
    return canonical_json({"tool": tool, "args": kept})


_DEFAULT_SOURCE = {
    "allow": DecisionSource.EXACT_GRANT,
    "deny": DecisionSource.EXPLICIT_DENY,
    "ask": DecisionSource.DEFAULT_ASK,
}


def op_view(
    session_id: str,
    tool_call_id: str,
    tool: str,
    args: dict[str, Any] | None = None,
    *,
    permission: str = "allow",
    decided_by: str | None = None,
    outcome: str | None = None,
    delivery: str = "projected",
    execution_started: bool | None = None,
    failure_kind: str | None = None,
    reason: str = "",
    recovery_actions: Iterable[str] = (),
    reconciliation_required: bool = False,
    classifier_outcome: str | None = None,
    result_digest: str | None = None,
    attempts: int | None = None,
    permission_version: int = 1,
    dedup_key: str | None = None,
    execution_id: str | None = None,
    digest: str | None = None,
) -> OperationView:
    """An OperationView with a correct identity and consistent defaults:
    allow → succeeded/started, deny or ask → not_started; decided_by from the permission."""
    args = dict(args or {})
    if outcome is None:
        outcome = "succeeded" if permission == "allow" else "not_started"
    if execution_started is None:
        execution_started = outcome != "not_started"
    if attempts is None:
        attempts = 1 if execution_started else 0
    return OperationView(
        session_id=session_id,
        identity=OperationIdentity(
            execution_id or execution_id_for(session_id, tool_call_id),
            tool_call_id,
            digest or args_digest(tool, args),
            permission_version,
        ),
        tool=tool,
        args=args,
        dedup_key=dedup_key if dedup_key is not None else dedup_key_for(tool, args),
        permission=Permission(permission),
        decided_by=DecisionSource(decided_by) if decided_by else _DEFAULT_SOURCE[permission],
        outcome=Outcome(outcome),
        delivery=Delivery(delivery),
        execution_started=execution_started,
        failure_kind=FailureKind(failure_kind) if failure_kind else None,
        reason=reason,
        recovery_actions=tuple(RecoveryAction(a) for a in recovery_actions),
        reconciliation_required=reconciliation_required,
        classifier_outcome=ClassifierOutcome(classifier_outcome) if classifier_outcome else None,
        result_digest=result_digest,
        attempts=attempts,
    )


# --------------------------------------------------------------------------- the builder


class TraceBuilder:
    """Append events and observations; ``build()`` returns the frozen Trace."""

    def __init__(
        self,
        *sessions: str | SessionConfig,
        tools: Sequence[Any] = (),
        features: Sequence[Feature] = ALL_FEATURES,
        thresholds: Thresholds = Thresholds(),
        dangerous_markers: Sequence[str] = (),
        faults: Sequence[FaultSpec] = (),
        scenario_id: str = "hand-built",
        stage: str = "unit",
        seed: int = 0,
        implementation: str = "hand-built",
        crash_mode: str = "in_process",
        tags: Sequence[str] = (),
    ) -> None:
        configs = [s if isinstance(s, SessionConfig) else session(s) for s in (sessions or ("s1",))]
        self.sessions = list(configs)
        self.tools = [_spec(t) for t in tools]
        self.features = tuple(features)
        self.thresholds = thresholds
        self.dangerous_markers = tuple(dangerous_markers)
        self.faults = list(faults)
        self.scenario_id, self.stage, self.seed = scenario_id, stage, seed
        self.implementation, self.crash_mode, self.tags = implementation, crash_mode, tuple(tags)
        self.events: list[TraceEvent] = []
        self.points: list[ObservationPoint] = []
        self.instance = 1
        self._request_ids = itertools.count(1)
        self._wait_ids = itertools.count(1)
        self._ledger_seq = itertools.count(1)
        self._hits: dict[str, int] = {}

    # -- generic -----------------------------------------------------------------------

    @property
    def last(self) -> int:
        return self.events[-1].index if self.events else -1

    def add(self, kind: str, data: dict[str, Any] | None = None, *, source: str | None = None,
            instance: int | None = None) -> int:
        """Append one event of any kind with the given data; returns its index."""
        if source is None:
            source = (Source.WORLD if kind in _WORLD_KINDS
                      else Source.IUT if kind == Kind.LIFECYCLE_EVENT else Source.HARNESS)
        index = len(self.events)
        self.events.append(TraceEvent(index, source, kind,
                                      self.instance if instance is None else instance,
                                      dict(data or {})))
        return index

    # -- world ---------------------------------------------------------------------------

    def model_request(self, session: str = "s1", messages: Sequence[Message] = (),
                      tools: Sequence[str] = (), request_id: str | None = None,
                      script_index: int = 0, **extra: Any) -> str:
        """MODEL_REQUEST; returns the request id (its index is ``b.last``)."""
        request_id = request_id or f"r{next(self._request_ids)}"
        messages = tuple(messages) or (user(),)
        self.add(Kind.MODEL_REQUEST, {
            "request_id": request_id, "session_id": session, "messages": to_json(messages),
            "tools": list(tools), "script_index": script_index, "instance": self.instance,
            **extra,
        })
        return request_id

    def stream_end(self, request_id: str, calls: Sequence[ToolCall] = (), how: str = "end",
                   text: str = "", with_tool_calls: bool = True, **extra: Any) -> int:
        """MODEL_STREAM_END serving ``calls`` (``with_tool_calls=False`` leaves out the
        ``tool_calls`` key, keeping only ``tool_call_ids``, as older worlds did)."""
        data: dict[str, Any] = {"request_id": request_id, "how": how, "text": text,
                                "tool_call_ids": [c.tool_call_id for c in calls]}
        if with_tool_calls:
            data["tool_calls"] = to_json(tuple(calls))
        data.update(extra)
        return self.add(Kind.MODEL_STREAM_END, data)

    def model(self, session: str = "s1", calls: Sequence[ToolCall] = (), *,
              messages: Sequence[Message] = (), how: str = "end", text: str = "",
              tools: Sequence[str] = (), with_tool_calls: bool = True) -> tuple[int, int]:
        """A model request and its stream end; returns ``(request index, end index)``."""
        request_id = self.model_request(session, messages, tools)
        request_index = self.last
        end = self.stream_end(request_id, calls, how, text, with_tool_calls)
        return request_index, end

    def classifier(self, session: str, tool: str, args: dict[str, Any], outcome: str = "allow",
                   *, operation: str | None = None, delay_s: float = 0.0, reason: str = "",
                   trusted_cwd: str = "/repo", permission_scope: str = "workspace-write",
                   user_requirements: str = "", untrusted_description: str | None = None,
                   untrusted_context: str = "", raw: Any = None, **extra: Any) -> int:
        """CLASSIFIER_REQUEST; ``operation`` defaults to the canonical args (what a correct
        implementation sends), ``raw`` to the canonical JSON of the whole request."""
        if untrusted_description is None:
            untrusted_description = str(args.get("description", ""))
        request = ClassifierRequest(
            session_id=session, tool=tool,
            operation=canonical_json(args) if operation is None else operation,
            trusted_cwd=trusted_cwd, permission_scope=permission_scope,
            user_requirements=user_requirements, untrusted_description=untrusted_description,
            untrusted_context=untrusted_context,
        )
        return self.add(Kind.CLASSIFIER_REQUEST, {
            "request": to_json(request),
            "raw": canonical_json(to_json(request)) if raw is None else raw,
            "outcome": outcome, "reason": reason, "delay_s": delay_s, **extra,
        })

    def _row(self, session: str, call_id: str, tool: str, args: dict[str, Any],
             permission_version: int, sandboxed: bool, kind: str | None) -> dict[str, Any]:
        if kind is None:
            kind = next((t.kind.value for t in self.tools if t.name == tool), "")
        return {
            "session_id": session, "tool_call_id": call_id,
            "execution_id": execution_id_for(session, call_id), "tool": tool, "kind": kind,
            "args": dict(args), "args_digest": args_digest(tool, args),
            "permission_version": permission_version, "sandboxed": sandboxed,
        }

    def executed(self, session: str, call_id: str, tool: str, args: dict[str, Any], *,
                 status: str = "ok", output: str = "", error_kind: str | None = None,
                 sandboxed: bool = True, effect: str | None = None,
                 escalation_requested: bool = False, permission_version: int = 1,
                 kind: str | None = None, **extra: Any) -> int:
        """One ledger row (TOOL_EXECUTED) with the next ledger_seq (``b.seq(index)``)."""
        row = {"ledger_seq": next(self._ledger_seq),
               **self._row(session, call_id, tool, args, permission_version, sandboxed, kind),
               "effect": effect or ("applied" if status == "ok" else "none"),
               "status": status, "output": output, "error_kind": error_kind,
               "escalation_requested": escalation_requested, **extra}
        return self.add(Kind.TOOL_EXECUTED, row)

    def seq(self, index: int) -> int:
        """The ledger_seq of the TOOL_EXECUTED event at ``index``."""
        return int(self.events[index].data["ledger_seq"])

    def unavailable(self, session: str, call_id: str, tool: str, args: dict[str, Any], *,
                    permission_version: int = 1, sandboxed: bool = True, **extra: Any) -> int:
        return self.add(Kind.TOOL_UNAVAILABLE, {
            **self._row(session, call_id, tool, args, permission_version, sandboxed, None),
            "reason": "the host could not start the tool", **extra})

    def prompt(self, session: str, call_id: str, tool: str, args: dict[str, Any], *,
               wait_id: str | None = None, reason: str = "approval needed", **extra: Any) -> str:
        """APPROVAL_PROMPT; returns the wait id (its index is ``b.last``)."""
        wait_id = wait_id or f"w{next(self._wait_ids)}"
        self.add(Kind.APPROVAL_PROMPT, {
            "wait_id": wait_id, "session_id": session,
            "execution_id": execution_id_for(session, call_id), "tool_call_id": call_id,
            "tool": tool, "args": dict(args), "reason": reason, **extra})
        return wait_id

    def publish(self, projection: Projection) -> int:
        return self.add(Kind.UI_PUBLISH, {"projection": to_json(projection)})

    def failpoint(self, name: str, action: str = "none", context: dict[str, Any] | None = None,
                  params: dict[str, Any] | None = None, hit: int | None = None) -> int:
        if hit is None:
            hit = self._hits.get(name, 0) + 1
        self._hits[name] = hit
        return self.add(Kind.FAILPOINT, {"name": name, "context": dict(context or {}),
                                         "hit": hit, "action": action,
                                         "params": dict(params or {})})

    # -- implementation's channel --------------------------------------------------------

    def lifecycle(self, type: str | EventType, session: str, execution_id: str = "",
                  request_id: str = "", **data: Any) -> int:
        event = LifecycleEvent(EventType(type), session, execution_id, request_id, dict(data))
        return self.add(Kind.LIFECYCLE_EVENT, {"event": to_json(event)})

    # -- harness -------------------------------------------------------------------------

    def driver(self, method: str, **args: Any) -> int:
        return self.add(Kind.DRIVER_CALL, {"method": method, "args": to_json(args)})

    def returned(self, method: str, result: Any = None) -> int:
        return self.add(Kind.DRIVER_RETURN, {"method": method, "result": to_json(result)})

    def raised(self, method: str, exception: str, message: str = "", expected: bool = False) -> int:
        return self.add(Kind.DRIVER_RAISED, {"method": method, "exception": exception,
                                             "message": message, "expected": expected})

    def turn(self, session: str = "s1", text: str = "go") -> int:
        return self.driver("run_turn", session_id=session, user_text=text)

    def turn_returns(self, session: str = "s1", status: str = "completed",
                     method: str = "run_turn", final_text: str = "") -> int:
        return self.returned(method, {"session_id": session, "status": TurnStatus(status).value,
                                      "final_text": final_text})

    def answer(self, wait_id: str, approve: bool = True) -> int:
        return self.driver("answer_approval", wait_id=wait_id, approve=approve)

    def update_rules(self, session: str, rules: Sequence[Any], permission_version: int) -> int:
        rules = tuple(r if isinstance(r, Rule) else rule(*r) for r in rules)
        return self.driver("update_rules", session_id=session, rules=rules,
                           permission_version=permission_version)

    def cancel(self, session: str = "s1") -> int:
        return self.driver("cancel", session_id=session)

    def crash(self, failpoint: str, *, context: dict[str, Any] | None = None,
              mode: str = "in_process", with_failpoint: bool = True) -> int:
        """A FAILPOINT hit with action crash (unless ``with_failpoint=False``), then CRASH."""
        if with_failpoint:
            self.failpoint(failpoint, "crash", context)
        return self.add(Kind.CRASH, {"failpoint": failpoint, "mode": mode})

    def restart(self) -> int:
        self.instance += 1
        return self.add(Kind.RESTART, {"instance": self.instance})

    def hang(self, method: str, limit_s: float = 20.0) -> int:
        return self.add(Kind.HANG, {"method": method, "limit_s": limit_s})

    # -- observations ----------------------------------------------------------------------

    def observe(self, *operations: OperationView, label: str = "quiescent", at: int | None = None,
                **fields: Any) -> int:
        """Snapshot of the durable store: OBSERVED event + observation point.

        ``fields`` are other Observation fields (sessions, approval_waits, denial_counters,
        failure_table, checkpoints, projections, model_requests, failure_events_logged,
        result_records); tuples or lists are accepted. Returns the point's index."""
        for name, value in list(fields.items()):
            if isinstance(value, list):
                fields[name] = tuple(value)
        observation = Observation(operations=tuple(operations), **fields)
        event_index = self.add(Kind.OBSERVED, {"label": label,
                                               "observation_index": len(self.points)})
        index = event_index if at is None else at
        self.points.append(ObservationPoint(index, label, observation))
        return index

    def probe(self, what: str, *operations: OperationView, at: int | None = None, **fields: Any) -> int:
        """A probe observation read while the world handled the event at ``at`` (default:
        the newest event)."""
        return self.observe(*operations, label=f"probe:{what}",
                            at=self.last if at is None else at, **fields)

    # -- result ----------------------------------------------------------------------------

    def build(self, completed: bool = True, error: str = "") -> Trace:
        meta = TraceMeta(
            scenario_id=self.scenario_id, stage=self.stage, seed=self.seed,
            implementation=self.implementation, features=self.features,
            thresholds=self.thresholds, sessions=tuple(self.sessions), tools=tuple(self.tools),
            faults=tuple(self.faults), crash_mode=self.crash_mode,
            dangerous_markers=self.dangerous_markers, tags=self.tags,
        )
        return Trace(meta, tuple(self.events), tuple(self.points), completed, error)


# --------------------------------------------------------------------------- judging


def verdict_of(criteria: Sequence[Any], criterion_id: str, trace: Trace):
    """Run one criterion of ``criteria`` (a stage's CRITERIA) on ``trace`` via run_check."""
    from harness.criteria.base import run_check

    for criterion in criteria:
        if criterion.id == criterion_id:
            return run_check(criterion, trace)
    raise KeyError(criterion_id)


def all_indexes(verdict) -> set[int]:
    """Every trace index named by a verdict's evidence."""
    return {i for e in verdict.evidence for i in e.trace_indexes}


def all_rows(verdict) -> set[int]:
    return {r for e in verdict.evidence for r in e.ledger_rows}
