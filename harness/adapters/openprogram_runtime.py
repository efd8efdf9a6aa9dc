"""OpenProgram under the contract: its agent loop, permission gate, rules, auto classifier and
approval questions, with the world as its model provider.

OpenProgram (PyPI ``openprogram``, source ``Fzkuji/OpenProgram``) is the system the seed's
lifecycle design was written for. This adapter runs its real code in the server process:

* ``openprogram.agent.agent_loop.agent_loop`` drives each turn; the model it calls is served
  by :class:`WorldProvider`, registered in OpenProgram's own API-provider registry
  (``register_api_provider``) for the API of the session's model, so every model request goes
  through OpenProgram's provider path to the world's scripted model;
* each scenario tool is an ``AgentTool`` wrapped by OpenProgram's own gate
  (``wrap_with_approval``: hard constraints, authority, the permission rules of
  ``openprogram.programs.permission_rule``, bypass, the auto mode and its classifier, the
  approval questions); the tool body runs the world's tool (``conversation.run_tool``, with
  the failpoints around it);
* the auto classifier (``_auto_classifier.auto_classify_tool``, where the installed
  OpenProgram has one) asks the model ``anthropic/claude-haiku-4-5-20251001``; the adapter
  enables that model as a user does (``ENABLED_MODELS``) with its API served by the world:
  the classifier's prompt reaches ``World.review`` as the operation text exactly as
  OpenProgram wrote it, and the world's verdict comes back as the JSON it expects;
* an approval question is shown through OpenProgram's ``QuestionTransport`` seam (the
  default transport is replaced by one that prompts the world's owner); the release 0.5.0
  posts an ``approval_request`` event instead, and the adapter prompts from it; answers go
  to OpenProgram's registry (``resolve``).

Capabilities are detected, not assumed (:func:`capabilities`): the PyPI release 0.5.0 has no
auto classifier and no permission rules (its auto mode asks for ``bash`` and runs the rest),
so the classifier criteria are n/a there with the reason (:func:`not_applicable`).

What is not driven: OpenProgram's session store (the dispatcher's ``SessionDB``). The adapter
keeps each session as the dispatcher does around a turn: the user message and a ``running``
placeholder when the turn starts, each assistant and tool-result message as the loop ends it,
the terminal status when the turn ends (``_turn_lifecycle``'s placeholder and status flip),
one JSON file per session written atomically; a turn a crash cut stays ``running`` and recovery marks it ``interrupted``
without resuming it (``reconcile_interrupted_runs``). The pending question registry is
OpenProgram's own, in memory: a restart loses it. The store criteria this stand-in would be
judged on instead of OpenProgram are n/a with that reason. OpenProgram runs one worker per
store: a second live instance on a data dir is refused (``multi_instance`` stays n/a).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import fcntl
import importlib.util
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from harness.adapters import session_configs
from harness.adapters.conversation import NotOffered, operation_context, run_tool
from harness.adapters.serialized_world import SerializedWorld
from harness.contract import (
    ApprovalPrompt,
    ChunkKind,
    ClassifierOutcome,
    ClassifierRequest,
    DecisionSource,
    Delivery,
    Failpoint,
    FailureKind,
    ImplementationInfo,
    Message,
    Mode,
    ModelRequest,
    Observation,
    OperationIdentity,
    OperationView,
    Outcome,
    Permission,
    RecoveryReport,
    Rule,
    SessionConfig,
    SessionView,
    ToolCall as ContractToolCall,
    ToolKind,
    ToolStatus,
    TurnResult,
    TurnStatus,
    World,
    args_digest,
    canonical_json,
    execution_id_for,
    result_digest,
)

WORLD_API = "harness-world"
CLASSIFIER_PROVIDER, CLASSIFIER_MODEL = "anthropic", "claude-haiku-4-5-20251001"
CLASSIFIER_PROMPT_MARK = "工具执行安全分类器"
"""The classifier's system prompt says it is a "tool execution safety classifier": the one
caller of the model that does."""
STORE = "openprogram-sessions"
LOCK = "openprogram.lock"
HOME = "openprogram-home"
SHELL_TOOL = "bash"
"""OpenProgram's shell tool (its gate and rules know it by this name); the scenarios' Bash."""


@dataclass(frozen=True, slots=True)
class Capabilities:
    version: str
    gate_module: str
    classifier: bool
    """``openprogram.agent.internals._auto_classifier`` exists: auto mode reviews with it."""
    rules: bool
    """``openprogram.programs.permission_rule`` exists: allow/ask/deny rules are honoured."""
    questions: bool
    """Approvals are questions of the unified ``QuestionRegistry`` (else ``ApprovalRegistry``)."""


def _has(module: str) -> bool:
    """Whether the installed OpenProgram has ``module``, read from its files: finding a
    submodule's spec would import its parent packages (``openprogram.agent`` alone takes
    seconds), and the harness asks this without loading OpenProgram."""
    top, _, rest = module.partition(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ModuleNotFoundError, ValueError):
        return False
    if spec is None or not spec.submodule_search_locations:
        return False
    for root in spec.submodule_search_locations:
        base = Path(root).joinpath(*rest.split(".")) if rest else Path(root)
        if base.with_suffix(".py").is_file() or (base / "__init__.py").is_file():
            return True
    return False


def capabilities() -> Capabilities:
    """What the installed OpenProgram offers, found without importing it."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = version("openprogram")
    except PackageNotFoundError:
        installed = "not installed"
    source_layout = _has("openprogram.agent.internals._approval")
    return Capabilities(
        version=installed,
        gate_module=("openprogram.agent.internals._approval" if source_layout
                     else "openprogram.agent._approval"),
        classifier=_has("openprogram.agent.internals._auto_classifier"),
        rules=_has("openprogram.programs.permission_rule"),
        questions=_has("openprogram.agent.questions"),
    )


LAZY_IMPORTS = (
    "openprogram.agent.job.runner",
    "openprogram.agent.session_db",
    "openprogram.auth.pool",
    "openprogram.cli.parser",
    "openprogram.cli.commands",
    "openprogram.cli.setup_sections.wizard",
    "openprogram.context.cache_aware_microcompact",
    "openprogram.context.system_prompt_node",
    "openprogram.context.tool_snapshot_node",
    "openprogram.memory.local_backend",
    "openprogram.memory.retrieval.bm25",
    "openprogram.providers.register",
    "openprogram.providers.initialization",
    "openprogram.providers.recording",
    "openprogram.providers.utils.stream_retry",
    "openprogram.providers.utils.failover",
    "openprogram.setup",
    "openprogram.store.session.session_store",
    "openprogram.usage",
)
"""Modules an instance imported lazily during its first turn (measured on 0.7.1: 84 modules,
17 s of imports per instance, chiefly the built-in providers' registration and the CLI's
parser); the fork template imports them once."""


def preload() -> tuple[str, ...]:
    """What every instance imports, imported once by the fork template (OpenProgram's
    ``openprogram.programs`` alone takes seconds: the gate reaches it through the rules)."""
    caps = capabilities()
    modules = ["openprogram.agent.agent_loop", "openprogram.agent.types",
               "openprogram.providers.api_registry", caps.gate_module]
    for optional in ("openprogram.providers.enabled_models", "openprogram.providers.stream",
                     "openprogram.agent.dispatcher.types",
                     "openprogram.programs.permission_rule", "openprogram.agent.authority",
                     "openprogram.agent.questions",
                     "openprogram.agent.internals._auto_classifier",
                     "openprogram.functions._runtime", *LAZY_IMPORTS):
        if _has(optional):
            modules.append(optional)
    return tuple(modules)


STORE_NOT_DRIVEN = (
    "OpenProgram's session store (the dispatcher's SessionDB) is not driven by this adapter: "
    "it keeps each turn as the dispatcher does at turn start and end, so a verdict here would "
    "judge that stand-in, not OpenProgram")
EVENTS_NOT_TRANSLATED = (
    "OpenProgram publishes its own events (its event layer: tool.before, question.asked...); "
    "this adapter does not translate them into the world's lifecycle events, so a verdict "
    "on those events would judge the adapter, not OpenProgram")


def not_applicable(caps: Capabilities) -> dict[str, str]:
    """Criterion id -> why the adapter cannot judge OpenProgram on it."""
    table = {criterion: STORE_NOT_DRIVEN for criterion in (
        "L4.1", "L4.2", "L4.4", "L4.5", "L4.7", "L4.8")}
    table.update({criterion: EVENTS_NOT_TRANSLATED for criterion in ("M1", "M2", "L5.5")})
    if not caps.classifier:
        why = (f"openprogram {caps.version} has no auto classifier "
               "(openprogram.agent.internals._auto_classifier is absent; its auto mode asks "
               "for bash and runs every other tool): ")
        for criterion, what in (
                ("L2.5", "no classifier outcome is ever recorded"),
                ("L2.6", "no review verdict comes before anything"),
                ("L2.7", "no review can be cancelled"),
                ("L2.8", "no review can be voided by a rule change"),
                ("L3.1", "no classifier risk denial counts toward a fallback"),
                ("L3.5", "there are no denial counters to reset"),
                ("L3.6", "there are no denial counters to isolate"),
                ("L3.7", "no risk denial is counted"),
                ("L3.8", "no classifier fault can happen"),
                ("L3.9", "no risk denial can be told from an execution failure")):
            table[criterion] = why + what
    return table


# --------------------------------------------------------------------------- the provider


def _assistant(model: Any, content: list, stop_reason: str, error: str | None = None) -> Any:
    from openprogram.providers.types import AssistantMessage

    return AssistantMessage(content=content, api=model.api, provider=model.provider,
                            model=model.id, stop_reason=stop_reason, error_message=error,
                            timestamp=0)


class WorldProvider:
    """An OpenProgram ``ApiProvider`` whose model is the world's: a turn's request goes to
    the world's scripted model stream, the classifier's to ``World.review``."""

    requires_credentials = False

    def __init__(self, runtime: "OpenProgramRuntime") -> None:
        self.runtime = runtime

    def stream(self, model: Any, context: Any, options: Any = None) -> Any:
        return self.stream_simple(model, context, options)

    async def stream_simple(self, model: Any, context: Any, options: Any = None) -> Any:
        from openprogram.providers.types import EventDone, EventError, EventStart

        if CLASSIFIER_PROMPT_MARK in (context.system_prompt or ""):
            message = await asyncio.to_thread(self.runtime.classify, model, context)
        else:
            message = await asyncio.to_thread(self.runtime.ask_model, model, context)
        yield EventStart(partial=message)
        if message.stop_reason == "error":
            yield EventError(reason="error", error=message)
        else:
            yield EventDone(reason=message.stop_reason, message=message)


# --------------------------------------------------------------------------- messages


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(getattr(block, "text", "") or "" for block in content or ())


def _plain(message: Any) -> dict[str, Any]:
    """An OpenProgram AgentMessage as the JSON the adapter keeps."""
    from openprogram.providers.types import ToolCall

    role = getattr(message, "role", "")
    if role == "assistant":
        return {"role": "assistant", "content": _text_of(
            [b for b in message.content if not isinstance(b, ToolCall)]),
            "tool_calls": [{"id": b.id, "tool": b.name, "args": dict(b.arguments)}
                           for b in message.content if isinstance(b, ToolCall)],
            "stop_reason": message.stop_reason}
    if role == "toolResult":
        details = message.details if isinstance(message.details, dict) else {}
        return {"role": "tool", "tool_call_id": message.tool_call_id,
                "tool": message.tool_name, "content": _text_of(message.content),
                "is_error": bool(message.is_error), "denied": bool(details.get("denied")),
                "reason_code": details.get("reason_code", ""),
                "ran": bool(details.get("harness_ran")),
                "allowed_by": details.get("harness_allowed_by") or "",
                "status": details.get("harness_status", ""),
                "error_kind": details.get("harness_error_kind")}
    return {"role": "user", "content": _text_of(getattr(message, "content", ""))}


DENIED_BY = {
    "PERMISSION_RULE_DENY": DecisionSource.EXPLICIT_DENY,
    "HARD_CONSTRAINT_DENIED": DecisionSource.HARD_CONSTRAINT,
    "AUTO_RISK_DENY": DecisionSource.CLASSIFIER,
    "AUTO_CLASSIFIER_DENY": DecisionSource.CLASSIFIER,
    "APPROVAL_DENIED": DecisionSource.APPROVAL,
    "APPROVAL_LOCAL_OWNER_REQUIRED": DecisionSource.DEFAULT_DENY,
    "APPROVAL_UNAVAILABLE_NON_INTERACTIVE": DecisionSource.DEFAULT_DENY,
}


# --------------------------------------------------------------------------- the runtime


class _DaemonThreads(concurrent.futures.ThreadPoolExecutor):
    """The loop's executor (``asyncio.to_thread``): one daemon thread per call. OpenProgram
    waits for an approval on such a thread (up to five minutes of real time); a pool's
    threads are joined when the process exits, so an instance closed while a question was
    still open would not exit until that wait ran out."""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as exc:  # handed to the awaiting coroutine
                future.set_exception(exc)

        threading.Thread(target=run, daemon=True, name="openprogram-call").start()
        return future


class _Question:
    def __init__(self, wait_id: str, session_id: str) -> None:
        self.wait_id = wait_id
        self.session_id = session_id


class OpenProgramRuntime:
    """One OpenProgram process over one data dir (a :class:`harness.contract.Runtime`)."""

    def __init__(self, data_dir: str, world: World, caps: Capabilities) -> None:
        # OpenProgram runs one worker per store ("currently single-process", its
        # _turn_lifecycle says): a second live instance on the data dir is refused, the
        # contract's documented way out; the lock dies with the process (a SIGKILL too)
        self.lock_file = open(Path(data_dir) / LOCK, "a+b")  # noqa: SIM115 (held for life)
        try:
            fcntl.flock(self.lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.lock_file.close()
            raise NotOffered(f"open({data_dir!r}): another OpenProgram instance is live on this "
                             "data dir; OpenProgram runs one worker per store") from None
        os.environ["HOME"] = str(Path(data_dir) / HOME)  # OpenProgram's state dir
        Path(os.environ["HOME"]).mkdir(parents=True, exist_ok=True)
        self.data_dir = data_dir
        self.caps = caps
        self.world = SerializedWorld(world)
        self.configs = session_configs.load_all(data_dir)
        self.lock = threading.Condition()
        self.questions: dict[str, _Question] = {}
        self.answers: dict[str, dict[str, str]] = {}  # session -> tool_call_id -> how allowed
        self.current: dict[str, Any] = {}  # the turn in progress: session, call, request no.
        self.futures: dict[str, concurrent.futures.Future] = {}  # session -> its running turn
        self.answered: dict[str, str] = {}  # wait id -> session, once answered
        self.allowed_by: dict[str, str] = {}  # call id -> the layer seen letting it run
        self.asked_for: dict[str, str] = {}  # wait id -> call id
        self.loop = asyncio.new_event_loop()
        self.loop.set_default_executor(_DaemonThreads(max_workers=1))
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True,
                                       name="openprogram-loop")
        self.thread.start()
        self._install()

    # ---------------------------------------------------------------- OpenProgram's seams

    def _install(self) -> None:
        from openprogram.providers.api_registry import register_api_provider
        from openprogram.providers.types import Model

        provider = WorldProvider(self)
        register_api_provider(WORLD_API, provider)
        self.model = Model(id="world-model", name="the world's scripted model", api=WORLD_API,
                           provider="harness", base_url="http://world.invalid")
        if self.caps.classifier:  # the classifier's model, enabled as a user enables it
            from openprogram.providers.enabled_models import ENABLED_MODELS

            ENABLED_MODELS[f"{CLASSIFIER_PROVIDER}/{CLASSIFIER_MODEL}"] = Model(
                id=CLASSIFIER_MODEL, name="classifier (the world's)", api=WORLD_API,
                provider=CLASSIFIER_PROVIDER, base_url="http://world.invalid")
        if self.caps.questions:
            import openprogram.agent.questions as questions

            runtime = self

            class OwnerTransport(questions.QuestionTransport):
                """OpenProgram's question seam, shown to the world's owner."""

                def publish(self, data: dict) -> None:
                    runtime.asked(str(data.get("id")), str(data.get("session_id", "")),
                                  str(data.get("tool", "")), data.get("args") or {})

                def retract(self, qid: str) -> None:
                    runtime.closed(qid)

            questions._default_transport = OwnerTransport()

    def asked(self, wait_id: str, session_id: str, tool: str, args: dict) -> None:
        call_id = self.current.get("call_id", "")
        name = self._scenario_tool(session_id, tool.split(":")[0])
        self.world.prompt_approval(ApprovalPrompt(
            wait_id=wait_id, session_id=session_id,
            execution_id=execution_id_for(session_id, call_id), tool_call_id=call_id,
            tool=name, args=dict(args), reason=f"OpenProgram asks: 允许执行 {tool}？"))
        self.asked_for[wait_id] = call_id
        with self.lock:
            self.questions[wait_id] = _Question(wait_id, session_id)
            self.lock.notify_all()

    def closed(self, wait_id: str) -> None:
        with self.lock:
            self.questions.pop(wait_id, None)
            self.lock.notify_all()

    # ---------------------------------------------------------------- model and classifier

    def ask_model(self, model: Any, context: Any) -> Any:
        from openprogram.providers.types import TextContent, ToolCall

        session_id = self.current["session_id"]
        self.current["requests"] = self.current.get("requests", 0) + 1
        request_id = f"{session_id}:model:{self.current['turn']}.{self.current['requests']}"
        self.world.failpoint(Failpoint.BEFORE_MODEL_REQUEST, {"session_id": session_id})
        self.world.failpoint(Failpoint.AFTER_MODEL_REQUEST_STARTED,
                             {"session_id": session_id, "request_id": request_id})
        config = self.configs[session_id]
        stream = self.world.open_model_stream(ModelRequest(
            request_id=request_id, session_id=session_id,
            messages=tuple(_contract_message(m, lambda n: self._scenario_tool(session_id, n))
                           for m in context.messages),
            tools=tuple(self._scenario_tool(session_id, t.name) for t in context.tools or ())
            if context.tools else tuple(spec.name for spec in config.tools)))
        content: list = []
        text: list[str] = []
        stop, error = "stop", None
        try:
            while True:
                chunk = stream.next_chunk()
                if chunk.kind is ChunkKind.TEXT:
                    text.append(chunk.text)
                elif chunk.kind is ChunkKind.TOOL_CALL and chunk.tool_call is not None:
                    call = chunk.tool_call
                    content.append(ToolCall(id=call.tool_call_id,
                                            name=self._openprogram_tool(session_id, call.tool),
                                            arguments=dict(call.args)))
                elif chunk.kind is ChunkKind.EOF:
                    stop, error = "error", "the model stream ended without a terminal event"
                    break
                else:
                    break
        except Exception as exc:  # a transport error: OpenProgram sees a failed request
            stop, error = "error", f"{type(exc).__name__}: {exc}"
        self.world.failpoint(Failpoint.AFTER_MODEL_STREAM_ENDED,
                             {"session_id": session_id, "request_id": request_id})
        if text:
            content.insert(0, TextContent(text="".join(text)))
        if stop != "error" and any(isinstance(b, ToolCall) for b in content):
            stop = "toolUse"
        return _assistant(model, content, stop, error)

    def classify(self, model: Any, context: Any) -> Any:
        """OpenProgram's classifier prompt, as it wrote it, reviewed by the world."""
        from openprogram.providers.types import TextContent

        session_id = self.current["session_id"]
        prompt = _text_of(context.messages[0].content) if context.messages else ""
        tool = operation = ""
        for line in prompt.splitlines():
            if line.startswith("工具："):
                tool = line[len("工具："):]
            elif line.startswith("参数："):
                operation = line[len("参数："):]
        try:  # complete JSON: the same arguments, spelt canonically (OpenProgram's
            # json.dumps puts spaces after separators; the bytes it saw are the same args)
            operation = canonical_json(json.loads(operation))
        except ValueError:  # cut short (its [:800]): passed on exactly as it was cut
            pass
        # OpenProgram's prompt carries the tool and the arguments only: no trusted working
        # directory, permission scope or task context reaches its classifier
        verdict = self.world.review(ClassifierRequest(
            session_id=session_id, tool=self._scenario_tool(session_id, tool),
            operation=operation, trusted_cwd="", permission_scope="", user_requirements=""))
        if verdict.outcome is ClassifierOutcome.ALLOW:
            self.allowed_by[self.current.get("call_id", "")] = DecisionSource.CLASSIFIER.value
        if verdict.outcome is ClassifierOutcome.ALLOW:
            answer = {"safe": True, "reason": verdict.reason or "allowed"}
        elif verdict.outcome is ClassifierOutcome.RISK_DENY:
            answer = {"safe": False, "reason": verdict.reason or "risky"}
        else:  # no verdict: the request fails, OpenProgram blocks (fail-safe)
            return _assistant(model, [], "error", f"classifier {verdict.outcome.value}")
        return _assistant(model, [TextContent(text=json.dumps(answer, ensure_ascii=False))],
                          "stop")

    # ---------------------------------------------------------------- tools

    def _openprogram_tool(self, session_id: str, name: str) -> str:
        config = self.configs.get(session_id)
        spec = next((t for t in (config.tools if config else ()) if t.name == name), None)
        if name == "Bash" or (spec is not None and spec.kind is ToolKind.BASH):
            return SHELL_TOOL
        return name

    def _scenario_tool(self, session_id: str, name: str) -> str:
        if name != SHELL_TOOL:
            return name
        config = self.configs.get(session_id)
        for spec in config.tools if config else ():
            if spec.name == "Bash" or spec.kind is ToolKind.BASH:
                return spec.name
        return "Bash"

    def _tools(self, config: SessionConfig, request: Any, on_event: Any) -> list:
        import importlib

        from openprogram.agent.types import AgentTool, AgentToolResult
        from openprogram.providers.types import TextContent

        gate = importlib.import_module(self.caps.gate_module)
        tools = []
        for spec in config.tools:
            if config.capabilities and spec.name not in config.capabilities:
                continue  # the owner's identity may not use it: not offered to the model

            def execute(call_id, args, cancel, on_update, _name=spec.name):  # noqa: ANN001
                async def body():
                    message = await asyncio.to_thread(
                        run_tool, self.world, config, {"id": call_id, "tool": _name,
                                                       "args": dict(args)}, True)
                    return AgentToolResult(
                        content=[TextContent(text=message["content"])],
                        details={"harness_allowed_by": self.allowed_by.get(call_id, ""),
                                 "harness_ran": message["started"],
                                 "harness_status": message["status"],
                                 "harness_error_kind": message["error_kind"]},
                        is_error=message["status"] != ToolStatus.OK.value)
                self.current["call_id"] = call_id
                return body()

            name = self._openprogram_tool(config.session_id, spec.name)
            agent_tool = AgentTool(name=name, description=spec.description or spec.name,
                                   parameters={"type": "object"}, label=spec.name,
                                   execute=execute)
            gated = gate.wrap_with_approval(agent_tool, request, on_event)

            async def announce(call_id, args, cancel, on_update, _gated=gated):  # noqa: ANN001
                # the loop has prepared the call (its tool_execution_start): the point
                # before OpenProgram's gate decides anything about it
                self.current["call_id"] = call_id  # the call a question is about
                await asyncio.to_thread(self.world.failpoint, Failpoint.AFTER_PREPARE,
                                        operation_context(config.session_id, call_id))
                return await _gated.execute(call_id, args, cancel, on_update)

            tools.append(AgentTool(name=name, description=gated.description,
                                   parameters=gated.parameters, label=gated.label,
                                   execute=announce))
        return tools

    def _request(self, config: SessionConfig) -> Any:
        from openprogram.agent.dispatcher.types import TurnRequest

        mode = {Mode.AUTO: "auto", Mode.PLAN: "plan"}.get(config.mode, "ask")
        extra: dict[str, Any] = {}
        if self.caps.rules:
            extra["permission_rules"] = _rules(config)
        if _has("openprogram.agent.authority"):
            from openprogram.agent.authority import local_owner_authority

            extra.update(local_owner_authority())
            if not (config.interactive and config.owner_can_approve):
                extra["interaction"] = "non_interactive"
        return TurnRequest(session_id=config.session_id, user_text="", agent_id="main",
                           source="tui", permission_mode=mode, **extra)

    # ---------------------------------------------------------------- turns

    def _messages_path(self, session_id: str) -> Path:
        return Path(self.data_dir) / STORE / f"{session_id.encode('utf-8').hex()}.json"

    def _load(self, session_id: str) -> dict[str, Any]:
        path = self._messages_path(session_id)
        if not path.exists():
            return {"messages": [], "status": "idle", "turns": 0}
        return json.loads(path.read_text(encoding="utf-8"))

    def _save(self, session_id: str, state: dict[str, Any]) -> None:
        path = self._messages_path(session_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(".tmp")
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(state, handle, sort_keys=True, ensure_ascii=False)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)

    async def _turn(self, session_id: str, text: str) -> dict[str, Any]:
        from openprogram.agent.agent_loop import agent_loop
        from openprogram.agent.types import AgentContext, AgentLoopConfig
        from openprogram.providers.types import UserMessage

        config = self.configs[session_id]
        state = self._load(session_id)
        history = [_openprogram_message(m, self.model) for m in state["messages"]
                   if m["role"] in ("user", "assistant", "tool")]
        state["messages"].append({"role": "user", "content": text})
        state["status"] = "running"  # the dispatcher's placeholder
        state["turns"] += 1
        self._save(session_id, state)
        self.current = {"session_id": session_id, "turn": state["turns"], "requests": 0}
        events: list[dict] = []
        request = self._request(config)

        def on_event(event: dict) -> None:  # the release posts its approval requests here
            events.append(event)
            if event.get("type") == "approval_request":
                data = event.get("data") or {}
                self.asked(str(data.get("request_id")), session_id, str(data.get("tool", "")),
                           data.get("args") or {})

        tools = self._tools(config, request, on_event)
        loop_config = AgentLoopConfig(model=self.model, convert_to_llm=_for_llm)
        stream = agent_loop([UserMessage(content=text, timestamp=0)],
                            AgentContext(system_prompt="", messages=history, tools=tools),
                            loop_config)
        async for event in stream:  # each message as it ends, as the dispatcher persists
            message = getattr(event, "message", None)
            if getattr(event, "type", "") == "message_end" and getattr(
                    message, "role", "") in ("assistant", "toolResult"):
                state["messages"].append(_plain(message))
                self._save(session_id, state)
        await stream.result()
        last = state["messages"][-1]
        state["status"] = ("failed" if last.get("stop_reason") == "error" else "completed")
        self._save(session_id, state)  # the dispatcher's step-5 persist
        return state

    def _drive(self, session_id: str, future: Any) -> TurnResult:
        with self.world.admitting(), self.lock:
            self.lock.wait_for(lambda: future.done() or any(
                q.session_id == session_id for q in self.questions.values()), timeout=None)
        if not future.done():
            return TurnResult(session_id=session_id, status=TurnStatus.AWAITING_APPROVAL)
        state = future.result()
        replies = [m for m in state["messages"] if m["role"] == "assistant"]
        status = TurnStatus.FAILED if state["status"] == "failed" else TurnStatus.COMPLETED
        return TurnResult(session_id=session_id, status=status,
                          final_text=replies[-1]["content"] if replies else "")

    def _watch(self, future: Any) -> None:
        def done(_: Any) -> None:
            with self.lock:
                self.lock.notify_all()
        future.add_done_callback(done)

    def open_session(self, config: SessionConfig) -> None:
        session_configs.save(self.data_dir, config)
        self.configs[config.session_id] = config

    def run_turn(self, session_id: str, user_text: str) -> TurnResult:
        future = asyncio.run_coroutine_threadsafe(self._turn(session_id, user_text), self.loop)
        self._watch(future)
        self.futures[session_id] = future
        return self._drive(session_id, future)

    def answer_approval(self, wait_id: str, approve: bool) -> TurnResult:
        with self.lock:
            question = self.questions.pop(wait_id, None)
        if question is None and wait_id in self.answered:
            # answered before: OpenProgram's registry ignores it (resolve returns False) and
            # nothing is driven
            self._resolve(wait_id, approve)
            return self._drive(self.answered[wait_id], self.futures[self.answered[wait_id]])
        if question is None:
            raise NotOffered(f"answer_approval({wait_id!r}): OpenProgram has no such pending "
                             "question (its registry is in memory: a restart loses it)")
        self.answered[wait_id] = question.session_id
        if approve:
            self.allowed_by[self.asked_for.get(wait_id, "")] = DecisionSource.APPROVAL.value
        self._resolve(wait_id, approve)
        return self._drive(question.session_id, self.futures[question.session_id])

    def _resolve(self, wait_id: str, approve: bool) -> bool:
        """Answer through OpenProgram's registry (False: it held no such question)."""
        if self.caps.questions:
            from openprogram.agent.questions import get_question_registry

            return get_question_registry().resolve(
                wait_id, "answered" if approve else "declined", "允许" if approve else None)
        import importlib

        return importlib.import_module(self.caps.gate_module).approval_registry().resolve(
            wait_id, approve)

    def update_rules(self, session_id: str, rules: tuple[Rule, ...],
                     permission_version: int) -> None:
        from dataclasses import replace

        self.open_session(replace(self.configs[session_id], rules=tuple(rules),
                                  permission_version=permission_version))

    def cancel(self, session_id: str) -> None:
        """OpenProgram cancels through the dispatcher's run control, not driven here."""

    def recover(self) -> RecoveryReport:
        for session_id in sorted(self.configs):
            state = self._load(session_id)
            if state["status"] == "running":  # reconcile_interrupted_runs
                state["status"] = "interrupted"
                self._save(session_id, state)
        return RecoveryReport()

    def load_checkpoint(self, session_id: str, data: bytes) -> None:
        raise NotOffered("load_checkpoint: OpenProgram has no import of another runtime's "
                         "checkpoints")

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.lock_file.close()  # the store is free for the next instance


def _rules(config: SessionConfig) -> Any:
    """The session's rules in OpenProgram's syntax (``Tool`` or ``Tool(pattern)``); hard
    constraints become deny rules (OpenProgram's own hard constraints are fixed in code)."""
    buckets: dict[str, list[str]] = {"allow": [], "ask": [], "deny": []}
    for rule in (*config.hard_constraints, *config.rules):
        tool = SHELL_TOOL if rule.tool == "Bash" else rule.tool
        text = tool if rule.pattern == "*" else f"{tool}({rule.pattern})"
        effect = "deny" if rule in config.hard_constraints else str(rule.effect.value)
        buckets.setdefault(effect, []).append(text)
    return SimpleNamespace(**buckets)


def _for_llm(messages: list) -> list:
    return [m for m in messages if getattr(m, "role", None) in ("user", "assistant",
                                                                  "toolResult")]


def _openprogram_message(message: dict[str, Any], model: Any) -> Any:
    from openprogram.providers.types import (
        TextContent,
        ToolCall,
        ToolResultMessage,
        UserMessage,
    )

    if message["role"] == "assistant":
        content: list = [TextContent(text=message["content"])] if message["content"] else []
        content += [ToolCall(id=c["id"], name=SHELL_TOOL if c["tool"] == "Bash" else c["tool"],
                             arguments=c["args"]) for c in message["tool_calls"]]
        return _assistant(model, content, message.get("stop_reason") or "stop")
    if message["role"] == "tool":
        # the details the result was saved with, so the conversation the model is sent
        # again on the next turn is the one it was sent before
        details = {"denied": message["denied"], "reason_code": message["reason_code"],
                   "harness_ran": message["ran"], "harness_status": message["status"],
                   "harness_error_kind": message["error_kind"],
                   "harness_allowed_by": message.get("allowed_by", "")}
        return ToolResultMessage(tool_call_id=message["tool_call_id"],
                                 tool_name=message["tool"],
                                 content=[TextContent(text=message["content"])],
                                 details=details, is_error=message["is_error"], timestamp=0)
    return UserMessage(content=message["content"], timestamp=0)


def _contract_message(message: Any, scenario_tool: Any) -> Message:
    """An OpenProgram message as the contract's, tools under the scenario's names."""
    from openprogram.providers.types import ToolCall

    role = getattr(message, "role", "")
    if role == "assistant":
        return Message(role="assistant", content=_text_of(
            [b for b in message.content if not isinstance(b, ToolCall)]),
            tool_calls=tuple(ContractToolCall(b.id, scenario_tool(b.name), dict(b.arguments))
                             for b in message.content if isinstance(b, ToolCall)))
    if role == "toolResult":
        details = message.details if isinstance(message.details, dict) else {}
        ran = bool(details.get("harness_ran"))
        failed = bool(message.is_error)
        return Message(role="tool", content=_text_of(message.content),
                       tool_call_id=message.tool_call_id,
                       outcome=(Outcome.NOT_STARTED if not ran else
                                Outcome.FAILED if failed else Outcome.SUCCEEDED),
                       failure_kind=(FailureKind.PERMISSION_DENIED if details.get("denied")
                                     else FailureKind.FAILED if failed else None))
    return Message(role="user", content=_text_of(getattr(message, "content", "")))


# --------------------------------------------------------------------------- the store


def read_observation(data_dir: str) -> Observation:
    """The contract's view of the sessions the adapter kept (see the module docstring)."""
    configs = session_configs.load_all(data_dir)
    sessions, operations = [], []
    results = 0
    for session_id, config in configs.items():
        path = Path(data_dir) / STORE / f"{session_id.encode('utf-8').hex()}.json"
        state = (json.loads(path.read_text(encoding="utf-8")) if path.exists()
                 else {"messages": [], "status": "idle"})
        found = {m["tool_call_id"]: m for m in state["messages"] if m["role"] == "tool"}
        for message in state["messages"]:
            for call in message.get("tool_calls", ()) if message["role"] == "assistant" else ():
                tool = next((t.name for t in config.tools if call["tool"] == SHELL_TOOL
                             and (t.name == "Bash" or t.kind is ToolKind.BASH)), call["tool"])
                result = found.get(call["id"])
                results += result is not None and result["ran"]
                operations.append(_operation(config, tool, call, result))
        status = {"running": TurnStatus.RUNNING, "completed": TurnStatus.COMPLETED,
                  "failed": TurnStatus.FAILED, "interrupted": TurnStatus.INCOMPLETE
                  }.get(state["status"], TurnStatus.IDLE)
        sessions.append(SessionView(session_id=session_id, turn_status=status, mode=config.mode,
                                    permission_version=config.permission_version,
                                    interactive=config.interactive))
    return Observation(sessions=tuple(sessions), operations=tuple(operations),
                       result_records=results)


def _operation(config: SessionConfig, tool: str, call: dict[str, Any],
               result: dict[str, Any] | None) -> OperationView:
    sid = config.session_id
    identity = OperationIdentity(
        execution_id=execution_id_for(sid, call["id"]), tool_call_id=call["id"],
        args_digest=args_digest(tool, call["args"]),
        permission_version=config.permission_version)
    if result is None:
        permission, decided, outcome, kind, reason = (
            Permission.ASK, DecisionSource.DEFAULT_ASK, Outcome.NOT_STARTED, None,
            "no result saved for this call")
    elif result["denied"] or not result["ran"]:
        permission = Permission.DENY
        decided = DENIED_BY.get(result["reason_code"], DecisionSource.DEFAULT_DENY)
        outcome, kind, reason = (Outcome.NOT_STARTED, FailureKind.PERMISSION_DENIED,
                                 result["content"])
    else:
        # OpenProgram records no deciding layer: the one the adapter saw (an approved
        # question, a classifier allow), else a rule or mode that let it run
        permission = Permission.ALLOW
        decided = DecisionSource(result.get("allowed_by") or DecisionSource.EXACT_GRANT.value)
        ok = result["status"] == ToolStatus.OK.value
        outcome = Outcome.SUCCEEDED if ok else Outcome.FAILED
        kind = None if ok else FailureKind(result.get("error_kind") or FailureKind.FAILED.value)
        reason = "OpenProgram's gate let the call run"
    digest = (result_digest(result["status"], result["content"])
              if result is not None and result["ran"] else None)
    return OperationView(
        session_id=sid, identity=identity, tool=tool, args=dict(call["args"]),
        dedup_key=identity.args_digest, permission=permission, decided_by=decided,
        outcome=outcome, delivery=Delivery.PENDING if result is None else Delivery.RECORDED,
        execution_started=bool(result and result["ran"]), failure_kind=kind, reason=reason,
        recovery_actions=(), reconciliation_required=False, classifier_outcome=None,
        result_digest=digest, attempts=int(bool(result and result["ran"])))


class OpenProgramImplementation:
    """The :class:`harness.contract.Implementation` of the installed OpenProgram."""

    def __init__(self) -> None:
        self.caps = capabilities()
        self.info = ImplementationInfo(
            name="openprogram",
            version=f"openprogram {self.caps.version} "
                    f"({'source layout' if 'internals' in self.caps.gate_module else 'release layout'}"
                    f"; classifier {'yes' if self.caps.classifier else 'no'}"
                    f"; rules {'yes' if self.caps.rules else 'no'})")

    def open(self, data_dir: str, world: World) -> OpenProgramRuntime:
        return OpenProgramRuntime(data_dir, world, self.caps)

    def inspect(self, data_dir: str) -> Observation:
        return read_observation(data_dir)


__all__ = ["OpenProgramImplementation", "capabilities", "not_applicable"]
