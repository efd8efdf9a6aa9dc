"""A small scripted world for the reference implementation's unit tests (test-only).

It records everything the runtime does through the ports (model requests, classifier
requests, tool executions = the ledger, prompts, UI publications, events, failpoints) and
can misbehave on cue: scripted model endings, classifier verdicts, tool behaviours, and
actions at failpoints (crash in-process, exit the process, raise, or run a hook).
Importable from a child process too (no pytest needed).
"""

from __future__ import annotations

import json
import os
import sqlite3
from dataclasses import dataclass, field
from typing import Any, Callable

from harness.contract import (
    ApprovalPrompt,
    ChunkKind,
    ClassifierOutcome,
    ClassifierRequest,
    ClassifierVerdict,
    FailureKind,
    Failpoint,
    InjectedFault,
    LifecycleEvent,
    ModelChunk,
    ModelRequest,
    ModelStreamCancelled,
    ModelTransportError,
    Projection,
    Rule,
    RuleEffect,
    SessionConfig,
    SimulatedCrash,
    ToolCall,
    ToolInvocation,
    ToolKind,
    ToolResult,
    ToolSpec,
    ToolStatus,
    ToolUnavailable,
)

STANDARD_TOOLS = (
    ToolSpec("read_file", ToolKind.READ, idempotent=True),
    ToolSpec("write_file", ToolKind.WRITE),
    ToolSpec("Bash", ToolKind.BASH),
    ToolSpec("edit_file", ToolKind.FILE_EDIT),
    ToolSpec("fetch", ToolKind.EXTERNAL, idempotent=True),
    ToolSpec("terminal", ToolKind.TERMINAL),
    ToolSpec("web_action", ToolKind.WEB),
    ToolSpec("app_action", ToolKind.USER_APP),
)


WRITE_CALL = ToolCall("c1", "write_file", {"path": "/repo/a.txt", "content": "hello"})
"""The write whose execution the crash tests count."""


def config(session_id: str = "s1", **overrides: Any) -> SessionConfig:
    overrides.setdefault("tools", STANDARD_TOOLS)
    return SessionConfig(session_id=session_id, **overrides)


def allow(tool: str, pattern: str = "*", field_name: str = "") -> Rule:
    return Rule(RuleEffect.ALLOW, tool, pattern, field_name)


def deny(tool: str, pattern: str = "*", field_name: str = "") -> Rule:
    return Rule(RuleEffect.DENY, tool, pattern, field_name)


def ask(tool: str, pattern: str = "*", field_name: str = "") -> Rule:
    return Rule(RuleEffect.ASK, tool, pattern, field_name)


def call(call_id: str, tool: str, **args: Any) -> ToolCall:
    return ToolCall(call_id, tool, args)


@dataclass(frozen=True)
class Reply:
    """One scripted model response; ``end``: end | eof | transport_error | cancelled."""

    text: str = ""
    calls: tuple[ToolCall, ...] = ()
    end: str = "end"


class _Stream:
    def __init__(self, reply: Reply) -> None:
        chunks = [ModelChunk(ChunkKind.TEXT, text=reply.text)] if reply.text else []
        chunks += [ModelChunk(ChunkKind.TOOL_CALL, tool_call=c) for c in reply.calls]
        self._chunks = chunks
        self._end = reply.end

    def next_chunk(self) -> ModelChunk:
        if self._chunks:
            return self._chunks.pop(0)
        if self._end == "end":
            return ModelChunk(ChunkKind.END)
        if self._end == "eof":
            return ModelChunk(ChunkKind.EOF)
        if self._end == "cancelled":
            raise ModelStreamCancelled("user pressed stop")
        raise ModelTransportError("connection reset by peer")


@dataclass
class FakeWorld:
    replies: dict[str, list[Reply]] = field(default_factory=dict)
    verdicts: list[ClassifierOutcome] = field(default_factory=list)
    """Scripted verdicts, in review order; afterwards ``dangerous`` markers decide."""
    dangerous: tuple[str, ...] = ("rm -rf",)
    review_delay_s: float = 0.0
    review_hook: Callable[[ClassifierRequest], None] | None = None
    tool_behaviour: dict[str, list[str]] = field(default_factory=dict)
    """Per tool_call_id, behaviours consumed per invocation: ok, fail, param_error,
    transient, unavailable, unknown, escalate, claims_not_executed, raise."""
    crash_at: str = ""
    crash_hit: int = 1
    exit_at: str = ""
    """Failpoint at which the whole process exits with status 137 (process tests)."""
    raise_at: dict[str, int] = field(default_factory=dict)
    """Failpoint name -> hit number at which an InjectedFault is raised."""
    hooks: dict[str, Callable[[dict[str, Any]], None]] = field(default_factory=dict)
    ledger_path: str = ""
    publish_error: bool = False
    execute_hook: Callable[[ToolInvocation], None] | None = None
    """Called before a tool runs (e.g. to read the store at that moment)."""
    prompt_hook: Callable[[ApprovalPrompt], None] | None = None

    def __post_init__(self) -> None:
        self.clock = 0.0
        self.requests: list[ModelRequest] = []
        self.reviews: list[ClassifierRequest] = []
        self.ledger: list[ToolInvocation] = []
        self.unavailable: list[ToolInvocation] = []
        self.prompts: list[ApprovalPrompt] = []
        self.ui: list[Projection] = []
        self.events: list[LifecycleEvent] = []
        self.failpoints: list[tuple[str, dict[str, Any]]] = []
        self._served: dict[str, int] = {}
        self._hits: dict[str, int] = {}

    # -- ports -------------------------------------------------------------------------

    def open_model_stream(self, request: ModelRequest) -> _Stream:
        self.requests.append(request)
        script = self.replies.get(request.session_id, [])
        index = self._served.get(request.session_id, 0)
        self._served[request.session_id] = index + 1
        return _Stream(script[index] if index < len(script) else Reply("done."))

    def review(self, request: ClassifierRequest) -> ClassifierVerdict:
        self.reviews.append(request)
        self.clock += self.review_delay_s
        if self.review_hook is not None:
            self.review_hook(request)
        if self.verdicts:
            return ClassifierVerdict(self.verdicts.pop(0), "scripted")
        if any(marker in request.operation for marker in self.dangerous):
            return ClassifierVerdict(ClassifierOutcome.RISK_DENY, "dangerous marker")
        return ClassifierVerdict(ClassifierOutcome.ALLOW)

    def execute_tool(self, invocation: ToolInvocation) -> ToolResult:
        if self.execute_hook is not None:
            self.execute_hook(invocation)
        plan = self.tool_behaviour.get(invocation.identity.tool_call_id, [])
        behaviour = plan.pop(0) if plan else "ok"
        if behaviour == "unavailable":
            self.unavailable.append(invocation)
            raise ToolUnavailable("host has no free worker")
        self.ledger.append(invocation)
        if self.ledger_path:
            with open(self.ledger_path, "a", encoding="utf-8") as ledger:
                ledger.write(json.dumps({"execution_id": invocation.identity.execution_id,
                                         "tool": invocation.tool, "args": invocation.args}) + "\n")
        if behaviour == "raise":
            raise InjectedFault("tool host lost the connection")
        return {
            "ok": ToolResult(ToolStatus.OK, f"{invocation.tool} done"),
            "claims_not_executed": ToolResult(ToolStatus.OK, "NOT EXECUTED (nothing happened)"),
            "fail": ToolResult(ToolStatus.ERROR, "exit status 1", FailureKind.FAILED),
            "param_error": ToolResult(ToolStatus.ERROR, "missing path", FailureKind.PARAM_ERROR),
            "transient": ToolResult(ToolStatus.ERROR, "try again", FailureKind.TRANSIENT),
            "unknown": ToolResult(ToolStatus.ERROR, "timed out", FailureKind.UNKNOWN),
            "escalate": ToolResult(ToolStatus.ERROR, "sandbox denied write", FailureKind.PERMISSION_DENIED,
                                   escalation_requested=True),
        }[behaviour]

    def prompt_approval(self, prompt: ApprovalPrompt) -> None:
        self.prompts.append(prompt)
        if self.prompt_hook is not None:
            self.prompt_hook(prompt)

    def publish(self, projection: Projection) -> None:
        if self.publish_error:
            raise InjectedFault("UI socket closed")
        self.ui.append(projection)

    def now(self) -> float:
        return self.clock

    def emit(self, event: LifecycleEvent) -> None:
        self.events.append(event)

    def failpoint(self, name: Failpoint, context: dict[str, Any]) -> None:
        self.failpoints.append((name.value, context))
        hit = self._hits[name.value] = self._hits.get(name.value, 0) + 1
        if name.value == self.exit_at:
            os._exit(137)  # a real crash: no finally, no atexit, no flush of anything
        if name.value == self.crash_at and hit == self.crash_hit:
            raise SimulatedCrash(name.value)
        if self.raise_at.get(name.value) == hit:
            raise InjectedFault(f"injected at {name.value}")
        hook = self.hooks.get(name.value)
        if hook is not None:
            hook(context)

    # -- helpers for assertions ----------------------------------------------------------

    def event_types(self) -> list[str]:
        return [event.type.value for event in self.events]

    def executed(self, tool_call_id: str) -> int:
        return sum(1 for inv in self.ledger if inv.identity.tool_call_id == tool_call_id)

    def hit_names(self) -> list[str]:
        return [name for name, _ in self.failpoints]


def version_1_store(path: str) -> sqlite3.Connection:
    """An open connection to a new store at ``path`` with schema version 1's layout, as a
    store written before any migration would be (the caller adds rows, then closes it)."""
    from reference_impl.store import _MIGRATIONS, _statements

    old = sqlite3.connect(path, isolation_level=None)
    for statement in _statements(_MIGRATIONS[0]):
        old.execute(statement)
    old.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    old.execute("INSERT INTO schema_version VALUES (1)")
    return old
