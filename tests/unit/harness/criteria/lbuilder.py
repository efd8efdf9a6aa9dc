"""A minimal hand-built Trace builder for the L3, L4, L5 and M criteria tests.

Each method appends one event (world, implementation or harness) with the ``data`` layout
documented in ``harness/trace/record.py`` and returns its index; ``observe`` adds a snapshot of the
store read at (just after) the last event. Value helpers build store views with defaults.
"""

from __future__ import annotations

from typing import Any

from harness.contract import (
    ApprovalWaitView,
    ClassifierRequest,
    DecisionSource,
    Delivery,
    DenialCounterView,
    Feature,
    FailureKind,
    Message,
    Mode,
    ModelRequestStatus,
    ModelRequestView,
    Observation,
    OperationIdentity,
    OperationView,
    Outcome,
    Permission,
    Projection,
    RecoveryAction,
    Rule,
    SessionConfig,
    SessionView,
    Thresholds,
    ToolCall,
    ToolKind,
    ToolSpec,
    TurnStatus,
    WaitStatus,
    args_digest,
    canonical_json,
    execution_id_for,
    expected_projection,
    result_digest,
    to_json,
)
from harness.trace.record import FaultSpec, Kind, ObservationPoint, Source, Trace, TraceEvent, TraceMeta

ALL_FEATURES = tuple(Feature)


def xid(tool_call_id: str, session: str = "s1") -> str:
    return execution_id_for(session, tool_call_id)


class TB:
    def __init__(
        self,
        *sessions: SessionConfig,
        tools: tuple[ToolSpec, ...] = (ToolSpec("write_file", ToolKind.WRITE), ToolSpec("read_file", ToolKind.READ)),
        faults: tuple[FaultSpec, ...] = (),
        features: tuple[Feature, ...] = ALL_FEATURES,
    ) -> None:
        self.sessions = sessions or (SessionConfig("s1"),)
        self.tools = tools
        self.faults = faults
        self.features = features
        self.events: list[TraceEvent] = []
        self.points: list[ObservationPoint] = []
        self.instance = 1
        self._req = 0
        self._seq = 0
        self._wait = 0

    # -- plumbing --------------------------------------------------------------------
    def add(self, kind: str, data: dict[str, Any], source: str = Source.WORLD, instance: int | None = None) -> int:
        index = len(self.events)
        self.events.append(TraceEvent(index, source, kind, self.instance if instance is None else instance, data))
        return index

    def observe(self, label: str, obs: Observation, at: int | None = None) -> int:
        index = len(self.events) - 1 if at is None else at
        self.points.append(ObservationPoint(index, label, obs))
        return index

    def build(self, completed: bool = True) -> Trace:
        meta = TraceMeta("t", "l3", 7, "iut", self.features, Thresholds(), self.sessions, self.tools, self.faults)
        return Trace(meta, tuple(self.events), tuple(self.points), completed)

    # -- world -------------------------------------------------------------------------
    def request(self, session: str = "s1", messages: tuple[Message, ...] = (), tools: tuple[str, ...] = (),
                request_id: str | None = None, instance: int | None = None) -> str:
        self._req += 1
        rid = request_id or f"r{self._req}"
        self.add(Kind.MODEL_REQUEST, {
            "request_id": rid, "session_id": session, "messages": to_json(messages),
            "tools": list(tools), "script_index": 0, "instance": instance or self.instance,
        }, instance=instance)
        return rid

    def stream_end(self, request_id: str, how: str = "end", text: str = "",
                   calls: tuple[ToolCall, ...] = (), instance: int | None = None) -> int:
        return self.add(Kind.MODEL_STREAM_END, {
            "request_id": request_id, "how": how, "text": text,
            "tool_call_ids": [c.tool_call_id for c in calls], "tool_calls": to_json(calls),
        }, instance=instance)

    def respond(self, session: str = "s1", calls: tuple[ToolCall, ...] = (), how: str = "end", text: str = "",
                messages: tuple[Message, ...] = (), tools: tuple[str, ...] = (), instance: int | None = None) -> str:
        rid = self.request(session, messages, tools, instance=instance)
        self.stream_end(rid, how, text, calls, instance=instance)
        return rid

    def review(self, session: str, tool: str, args: dict[str, Any], outcome: str, instance: int | None = None) -> int:
        request = ClassifierRequest(session, tool, canonical_json(args), "/repo", "workspace-write", "")
        return self.add(Kind.CLASSIFIER_REQUEST, {
            "request": to_json(request), "raw": canonical_json(to_json(request)), "outcome": outcome,
            "reason": "", "delay_s": 0.0,
        }, instance=instance)

    def executed(self, session: str, call: ToolCall, status: str = "ok", output: str = "done",
                 error_kind: str | None = None, version: int = 1, escalation: bool = False,
                 instance: int | None = None) -> int:
        self._seq += 1
        return self.add(Kind.TOOL_EXECUTED, {
            "ledger_seq": self._seq, "session_id": session, "tool_call_id": call.tool_call_id,
            "execution_id": xid(call.tool_call_id, session), "tool": call.tool, "kind": "write",
            "args": call.args, "args_digest": args_digest(call.tool, call.args), "permission_version": version,
            "sandboxed": True, "effect": "applied" if status == "ok" else "none", "status": status,
            "output": output, "error_kind": error_kind, "escalation_requested": escalation,
        }, instance=instance)

    def prompt(self, session: str, call: ToolCall, wait_id: str | None = None) -> tuple[int, str]:
        self._wait += 1
        wid = wait_id or f"w{self._wait}"
        index = self.add(Kind.APPROVAL_PROMPT, {
            "wait_id": wid, "session_id": session, "execution_id": xid(call.tool_call_id, session),
            "tool_call_id": call.tool_call_id, "tool": call.tool, "args": call.args, "reason": "ask",
        })
        return index, wid

    def publish(self, projection: Projection) -> int:
        return self.add(Kind.UI_PUBLISH, {"projection": to_json(projection)})

    def failpoint(self, name: str, action: str = "none", context: dict[str, Any] | None = None,
                  params: dict[str, Any] | None = None, hit: int = 1) -> int:
        return self.add(Kind.FAILPOINT, {"name": name, "context": context or {}, "hit": hit, "action": action,
                                         "params": params or {}})

    # -- implementation ----------------------------------------------------------------
    def emit(self, type_: str, session: str = "s1", execution_id: str = "", request_id: str = "",
             **data: Any) -> int:
        return self.add(Kind.LIFECYCLE_EVENT, {"event": {
            "type": type_, "session_id": session, "execution_id": execution_id, "request_id": request_id,
            "data": data}}, source=Source.IUT)

    # -- harness -----------------------------------------------------------------------
    def call(self, method: str, **args: Any) -> int:
        return self.add(Kind.DRIVER_CALL, {"method": method, "args": args}, source=Source.HARNESS)

    def ret(self, method: str, result: Any = None) -> int:
        return self.add(Kind.DRIVER_RETURN, {"method": method, "result": result}, source=Source.HARNESS)

    def raised(self, method: str, exception: str, expected: bool = True) -> int:
        return self.add(Kind.DRIVER_RAISED, {"method": method, "exception": exception, "message": "",
                                             "expected": expected}, source=Source.HARNESS)

    def crash(self, failpoint: str) -> int:
        return self.add(Kind.CRASH, {"failpoint": failpoint, "mode": "in_process"}, source=Source.HARNESS)

    def restart(self) -> int:
        self.instance += 1
        return self.add(Kind.RESTART, {"instance": self.instance}, source=Source.HARNESS)

    def update_rules(self, session: str, rules: tuple[Rule, ...], version: int) -> int:
        index = self.call("update_rules", session_id=session, rules=to_json(rules), permission_version=version)
        self.ret("update_rules")
        return index


# --------------------------------------------------------------------------- store views


def op(call: ToolCall, session: str = "s1", *, permission: Permission = Permission.ALLOW,
       decided_by: DecisionSource = DecisionSource.EXACT_GRANT, outcome: Outcome = Outcome.SUCCEEDED,
       delivery: Delivery = Delivery.PROJECTED, started: bool | None = None,
       failure_kind: FailureKind | None = None, reason: str = "", reconcile: bool = False,
       classifier: Any = None, digest: str | None = "", version: int = 1, attempts: int | None = None,
       status: str = "ok", output: str = "done", actions: tuple[RecoveryAction, ...] | None = None) -> OperationView:
    if started is None:
        started = outcome is not Outcome.NOT_STARTED
    if digest == "":
        digest = result_digest(status, output) if outcome in (Outcome.SUCCEEDED, Outcome.FAILED) else None
    if actions is None:
        actions = expected_projection(permission, outcome, decided_by, failure_kind, reconcile, False)[1]
    identity = OperationIdentity(xid(call.tool_call_id, session), call.tool_call_id,
                                 args_digest(call.tool, call.args), version)
    return OperationView(
        session_id=session, identity=identity, tool=call.tool, args=call.args, dedup_key="k",
        permission=permission, decided_by=decided_by, outcome=outcome, delivery=delivery,
        execution_started=started, failure_kind=failure_kind, reason=reason, recovery_actions=actions,
        reconciliation_required=reconcile, classifier_outcome=classifier, result_digest=digest,
        attempts=(1 if started else 0) if attempts is None else attempts,
    )


def denied(call: ToolCall, session: str = "s1", decided_by: DecisionSource = DecisionSource.CLASSIFIER,
           **kw: Any) -> OperationView:
    return op(call, session, permission=Permission.DENY, decided_by=decided_by, outcome=Outcome.NOT_STARTED,
              failure_kind=FailureKind.PERMISSION_DENIED, reason="denied", **kw)


def wait(wait_id: str, call: ToolCall, session: str = "s1", status: WaitStatus = WaitStatus.PENDING,
         applied: bool = False) -> ApprovalWaitView:
    return ApprovalWaitView(wait_id, session, xid(call.tool_call_id, session), call.tool_call_id, "ask",
                            status, applied)


def counters(session: str, version: int, consecutive: int, cumulative: int) -> DenialCounterView:
    return DenialCounterView(session, version, consecutive, cumulative)


def projection_of(view: OperationView, wait_pending: bool = False, **overrides: Any) -> Projection:
    status, actions = expected_projection(view.permission, view.outcome, view.decided_by, view.failure_kind,
                                          view.reconciliation_required, wait_pending)
    values = dict(session_id=view.session_id, execution_id=view.identity.execution_id,
                  tool_call_id=view.identity.tool_call_id, permission=view.permission, outcome=view.outcome,
                  status=status, reason=view.reason, recovery_actions=actions)
    values.update(overrides)
    return Projection(**values)


def request_view(request_id: str, session: str = "s1", status: ModelRequestStatus | None = ModelRequestStatus.COMPLETED,
                 partial: str = "", incomplete: bool = False, starts: int = 1, ends: int = 1) -> ModelRequestView:
    return ModelRequestView(request_id, session, starts, ends, status, partial, incomplete)


def session_view(session: str = "s1", status: TurnStatus = TurnStatus.COMPLETED, version: int = 1,
                 mode: Mode = Mode.DEFAULT, interactive: bool = True) -> SessionView:
    return SessionView(session, status, version, mode, interactive)


def tool_msg(call: ToolCall, outcome: Outcome, content: str = "done") -> Message:
    return Message("tool", content, tool_call_id=call.tool_call_id, outcome=outcome)


def assistant(calls: tuple[ToolCall, ...] = (), content: str = "", incomplete: bool = False) -> Message:
    return Message("assistant", content, tool_calls=calls, incomplete=incomplete)


USER = Message("user", "go")
