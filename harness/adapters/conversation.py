"""What both adapters share: the conversation as plain JSON messages, one model call through
the world, one tool call through the world, and the contract's view of a library's store.

Messages are plain dicts (so each library persists them with its own serializer, unchanged):

* ``{"role": "user", "content": str}``
* ``{"role": "assistant", "content": str, "tool_calls": [{"id", "tool", "args"}],
  "request_id": str}``
* ``{"role": "tool", "tool_call_id": str, "tool": str, "status": "ok"|"error",
  "content": str, "error_kind": str|None, "started": bool}`` (``started`` is false when
  the host refused to start the tool, ``ToolUnavailable``: the tool node knows it and keeps
  it in the message it returns, as an application's tool node would)

Guarantees: :func:`observation` describes only what the library's store holds (the
conversation of each session and the results it saved); a lifecycle fact the library does
not record (a permission decision, an execution start, a model request record, a UI
projection) is not invented: it is reported the way the contract reads "absent"
(``execution_started`` only once a result exists, no model request views, no projections),
so the criteria that need it fail on evidence instead of passing on the adapter's word.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from harness.contract import (
    ChunkKind,
    CheckpointView,
    DecisionSource,
    Delivery,
    Failpoint,
    FailureKind,
    Message,
    ModelRequest,
    Observation,
    OperationIdentity,
    OperationView,
    Outcome,
    Permission,
    SessionConfig,
    SessionView,
    ToolCall,
    ToolInvocation,
    ToolStatus,
    ToolUnavailable,
    TurnStatus,
    World,
    WorldError,
    args_digest,
    execution_id_for,
    result_digest,
)

class NotOffered(Exception):
    """The library has no such concept (an approval, a checkpoint import): the contract's
    call cannot be honoured. It crosses the wire as itself, so the report names it."""


NO_PERMISSION_LAYER = "the library has no permission layer: every call the model makes runs"


def user_message(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def model_request_id(session_id: str, messages: list[dict[str, Any]]) -> str:
    """Deterministic: the n-th assistant reply of a session is request ``n``."""
    replies = sum(1 for m in messages if m["role"] == "assistant")
    return f"{session_id}:model:{replies + 1}"


def call_model(world: World, config: SessionConfig,
               messages: list[dict[str, Any]]) -> dict[str, Any]:
    """Ask the world's model once; the assistant message it answered (tool calls included).

    The failpoints around a model request are called where the contract puts them; the
    libraries keep no record of a model request, which the harness then reports."""
    session_id = config.session_id
    request_id = model_request_id(session_id, messages)
    world.failpoint(Failpoint.BEFORE_MODEL_REQUEST, {"session_id": session_id})
    world.failpoint(Failpoint.AFTER_MODEL_REQUEST_STARTED,
                    {"session_id": session_id, "request_id": request_id})
    stream = world.open_model_stream(ModelRequest(
        request_id=request_id, session_id=session_id,
        messages=tuple(_contract_message(m) for m in messages),
        tools=tuple(spec.name for spec in config.tools)))
    text: list[str] = []
    tool_calls: list[dict[str, Any]] = []
    while True:
        chunk = stream.next_chunk()
        if chunk.kind is ChunkKind.TEXT:
            text.append(chunk.text)
        elif chunk.kind is ChunkKind.TOOL_CALL and chunk.tool_call is not None:
            call = chunk.tool_call
            tool_calls.append({"id": call.tool_call_id, "tool": call.tool, "args": call.args})
        else:  # END or EOF: the libraries keep whatever arrived
            break
    world.failpoint(Failpoint.AFTER_MODEL_STREAM_ENDED,
                    {"session_id": session_id, "request_id": request_id})
    return {"role": "assistant", "content": "".join(text), "tool_calls": tool_calls,
            "request_id": request_id}


def operation_context(session_id: str, tool_call_id: str) -> dict[str, str]:
    return {"session_id": session_id, "tool_call_id": tool_call_id,
            "execution_id": execution_id_for(session_id, tool_call_id)}


def run_tool(world: World, config: SessionConfig, call: Mapping[str, Any],
             prepared: bool = False) -> dict[str, Any]:
    """Run one tool call through the world; the tool message (a world refusal becomes an
    error message, as LangGraph's ToolNode and a DBOS step body would report it).
    ``prepared``: the caller already called ``after_prepare`` where its library prepares
    the call (before a permission layer the library has)."""
    session_id = config.session_id
    context = operation_context(session_id, call["id"])
    if not prepared:
        world.failpoint(Failpoint.AFTER_PREPARE, context)
    world.failpoint(Failpoint.AFTER_START_RECORDED, context)
    invocation = ToolInvocation(
        identity=OperationIdentity(
            execution_id=context["execution_id"], tool_call_id=call["id"],
            args_digest=args_digest(call["tool"], call["args"]),
            permission_version=config.permission_version),
        session_id=session_id, tool=call["tool"], args=dict(call["args"]))
    started = True
    try:
        result = world.execute_tool(invocation)
        status, output = result.status.value, result.output
        error_kind = result.error_kind.value if result.error_kind else None
    except ToolUnavailable as exc:
        status, output, error_kind = ToolStatus.ERROR.value, str(exc), FailureKind.TRANSIENT.value
        started = False
    except WorldError as exc:
        status, output, error_kind = ToolStatus.ERROR.value, str(exc), None
    world.failpoint(Failpoint.AFTER_TOOL_RETURNED, context)
    return {"role": "tool", "tool_call_id": call["id"], "tool": call["tool"],
            "status": status, "content": output, "error_kind": error_kind, "started": started}


def tool_results(messages: Iterable[Any]) -> list[dict[str, Any]]:
    return [m for m in messages
            if isinstance(m, dict) and m.get("role") == "tool" and "tool_call_id" in m]


def _outcome(result: Mapping[str, Any]) -> Outcome:
    if not result.get("started", True):
        return Outcome.NOT_STARTED
    return Outcome.SUCCEEDED if result["status"] == ToolStatus.OK.value else Outcome.FAILED


def _contract_message(message: Mapping[str, Any]) -> Message:
    role = message["role"]
    if role == "assistant":
        return Message(role=role, content=message.get("content", ""), tool_calls=tuple(
            ToolCall(c["id"], c["tool"], dict(c["args"])) for c in message["tool_calls"]))
    if role == "tool":
        failed = message["status"] != ToolStatus.OK.value
        kind = message.get("error_kind")
        return Message(role=role, content=message["content"],
                       tool_call_id=message["tool_call_id"],
                       outcome=_outcome(message),
                       failure_kind=FailureKind(kind) if kind else (
                           FailureKind.FAILED if failed else None))
    return Message(role=role, content=message.get("content", ""))


@dataclass(frozen=True, slots=True)
class SessionStore:
    """What one session's store holds, as the library persisted it."""

    config: SessionConfig
    messages: tuple[dict[str, Any], ...]
    """The conversation in the latest durable checkpoint / step log."""
    saved_results: tuple[dict[str, Any], ...]
    """Tool messages saved by the library but not yet in ``messages`` (LangGraph's pending
    writes of an unfinished step)."""
    checkpoint_sequence: int
    """The library's step counter of the latest checkpoint; -1 when it has no checkpoint."""
    checkpoint_size_bytes: int
    running: bool
    """The library would resume this session's turn on recovery."""


def observation(sessions: Iterable[SessionStore]) -> Observation:
    """The contract's view of what the libraries saved (see the module docstring)."""
    session_views: list[SessionView] = []
    operations: list[OperationView] = []
    checkpoints: list[CheckpointView] = []
    results_count = 0
    for store in sessions:
        config = store.config
        sid = config.session_id
        folded = {m["tool_call_id"]: m for m in tool_results(store.messages)}
        saved = dict(folded)
        saved.update({m["tool_call_id"]: m for m in store.saved_results})
        results_count += len(saved)
        for message in store.messages:
            if message.get("role") != "assistant":
                continue
            for call in message.get("tool_calls", ()):
                operations.append(_operation(config, call, saved.get(call["id"])))
        last_folded = ""
        for message in store.messages:
            if message.get("role") == "tool":
                last_folded = execution_id_for(sid, message["tool_call_id"])
        if store.checkpoint_sequence >= 0:
            checkpoints.append(CheckpointView(
                session_id=sid, format_version=1, sequence=store.checkpoint_sequence,
                failure_entries=0, size_bytes=store.checkpoint_size_bytes,
                last_execution_id=last_folded))
        session_views.append(SessionView(
            session_id=sid, turn_status=_turn_status(store), mode=config.mode,
            permission_version=config.permission_version, interactive=config.interactive))
    return Observation(sessions=tuple(session_views), operations=tuple(operations),
                       checkpoints=tuple(checkpoints), result_records=results_count)


def _turn_status(store: SessionStore) -> TurnStatus:
    if store.running:
        return TurnStatus.RUNNING
    if not store.messages:
        return TurnStatus.IDLE
    return TurnStatus.COMPLETED


def _operation(config: SessionConfig, call: Mapping[str, Any],
               result: Mapping[str, Any] | None) -> OperationView:
    sid = config.session_id
    identity = OperationIdentity(
        execution_id=execution_id_for(sid, call["id"]), tool_call_id=call["id"],
        args_digest=args_digest(call["tool"], call["args"]),
        permission_version=config.permission_version)
    started = result is not None and result.get("started", True)
    if result is None:
        outcome, kind, digest = Outcome.NOT_STARTED, None, None
    else:
        outcome = _outcome(result)
        ok = outcome is Outcome.SUCCEEDED
        kind = None if ok else FailureKind(result.get("error_kind") or FailureKind.FAILED.value)
        digest = result_digest(result["status"], result["content"]) if started else None
    return OperationView(
        session_id=sid, identity=identity, tool=call["tool"], args=dict(call["args"]),
        dedup_key=identity.args_digest, permission=Permission.ALLOW,
        decided_by=DecisionSource.EXACT_GRANT, outcome=outcome,
        delivery=Delivery.PENDING if result is None else Delivery.RECORDED,
        execution_started=started, failure_kind=kind, reason=NO_PERMISSION_LAYER,
        recovery_actions=(), reconciliation_required=False, classifier_outcome=None,
        result_digest=digest, attempts=0 if result is None else 1)


def read_sessions(database: Path, configs: Mapping[str, SessionConfig],
                  session: Callable[[sqlite3.Connection, SessionConfig], SessionStore],
                  ) -> Iterator[SessionStore]:
    """Each configured session as ``session`` reads it from the library's SQLite store
    (read-only); an empty store for each while the library has not created its file."""
    if not database.exists():
        for config in configs.values():
            yield SessionStore(config, (), (), -1, 0, False)
        return
    connection = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    try:
        for config in configs.values():
            yield session(connection, config)
    finally:
        connection.close()
