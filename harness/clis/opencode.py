"""OpenCode (``opencode-ai``) under the black-box driver.

How it is run (found by hand against a scripted server, OpenCode 1.18.33; see
``docs/real-systems.md``):

* ``opencode serve --pure --port PORT`` in the session's sandbox, with ``HOME`` the session's
  home and ``OPENCODE_CONFIG`` its ``opencode.json``: one custom OpenAI-compatible provider
  (``@ai-sdk/openai-compatible``, bundled) whose ``baseURL`` is the world's server (Chat
  Completions, streamed: :mod:`harness.clis.wire_chat`); ``OPENCODE_DISABLE_MODELS_FETCH``,
  ``..._AUTOUPDATE``, ``..._LSP_DOWNLOAD``, ``..._SHARE``, ``..._DEFAULT_PLUGINS``,
  ``..._CLAUDE_CODE``, ``..._EXTERNAL_SKILLS`` and ``..._PROJECT_CONFIG`` set;
* OpenCode installs ``@opencode-ai/plugin`` into its config directory from the npm registry
  in the background on every start (``--pure`` does not stop it; it only logs a warning when
  it fails): the session's ``.npmrc`` and ``npm_config_*`` point npm at an unreachable
  registry in offline mode, so the install fails at once and nothing leaves the machine;
* the server's HTTP API is the programmatic channel: the driver follows ``GET /event``
  (server-sent events), creates the session (``POST /session``, its id noted for restarts),
  sends each user message with ``POST /session/{id}/prompt_async``; an event
  ``permission.asked`` is the approval question, answered by ``POST
  /permission/{id}/reply`` with ``once`` or ``reject``; the session's status going from
  ``busy`` back to ``idle`` ends the turn (failed when a ``session.error`` came between);
* the title OpenCode asks its model for (a request without tools, a title generator's
  system prompt) is answered without the world;
* the scenario's tools are calls of OpenCode's ``bash`` tool whose ``command`` runs the ledger
  program; the session's rules become ``permission.bash`` patterns
  (``".lh/tool TOOL *": allow | ask | deny``, the default ``"*"`` ask when an owner can be
  asked, else deny; an ask rule of a session nobody can be asked in is deny). A rule on one
  field of the arguments has no counterpart; plan mode (OpenCode's ``plan`` agent is its
  own prompt and permissions, not the harness's read-only mode) and auto mode have none
  either: sessions needing them are refused, named;
* a restart is a new server over the same data directory, prompting the noted session.
"""

from __future__ import annotations

import json
import re
import socket
import urllib.error
import urllib.request
from typing import Any, Iterator

from harness.clis import tool_command, wire_chat
from harness.clis.driver import (
    ApprovalAsked, CliError, ProcessIO, Served, SessionMemory, SessionPaths, TurnEnded,
)
from harness.clis.loopback import CLOSE, RESET, ModelExchange
from harness.clis.shell_dialect import ShellDialect, base_env, permissions, refusal, write_answer
from harness.clis.wire_chat import ChatStream
from harness.contract import Message, Mode, SessionConfig, ToolCall

SHELL_TOOL = "bash"
PROVIDER = "lh"
MODEL = "world"
SESSION = "session_id"
EVENT = "event:"
"""Prefix of the lines the channel feeds from the server's event stream."""
HTTP_TIMEOUT_S = 60.0
LISTENING = re.compile(r"listening on (http://[0-9.]+:[0-9]+)")
UNREACHABLE_REGISTRY = "http://127.0.0.1:9/"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class OpenCode(ShellDialect):
    name = "opencode"
    binary = "opencode"
    package = "opencode-ai"
    shell_tool = SHELL_TOOL
    command_key = "command"
    time_limit_s = 300.0  # start-up under load, then up to five retries with growing waits

    # -- starting it ------------------------------------------------------------------------

    def check_session(self, config: SessionConfig) -> str:
        if config.mode is Mode.PLAN:
            return ("plan mode: OpenCode's plan agent is its own prompt and permissions, not "
                    "a mode that denies every tool but reads")
        return refusal("OpenCode", config)

    def bash_permissions(self, config: SessionConfig) -> dict[str, str]:
        """``permission.bash`` of the session (see the module docstring); later entries win."""
        found = permissions(config)
        ask = "ask" if found.default == "ask" else "deny"
        table = {"*": found.default}
        for tools, decision in ((found.allow, "allow"), (found.ask, ask), (found.deny, "deny")):
            for tool in tools:
                for program in (tool_command.PROGRAM_PATH, "./" + tool_command.PROGRAM_PATH):
                    table[f"{program} {tool} *"] = decision
        return table

    def settings(self, config: SessionConfig, base_url: str) -> dict[str, Any]:
        return {
            "$schema": "https://opencode.ai/config.json",
            "provider": {PROVIDER: {
                "npm": "@ai-sdk/openai-compatible", "name": "lifecycle-harness world",
                "options": {"baseURL": base_url + "/v1", "apiKey": "sk-lifecycle-harness"},
                "models": {MODEL: {"name": MODEL}}}},
            "model": f"{PROVIDER}/{MODEL}", "small_model": f"{PROVIDER}/{MODEL}",
            "autoupdate": False, "share": "disabled",
            "permission": {"bash": self.bash_permissions(config)},
        }

    def prepare(self, session: SessionPaths, config: SessionConfig, base_url: str) -> None:
        (session.home / "opencode.json").write_text(
            json.dumps(self.settings(config, base_url), indent=1))
        (session.home / ".npmrc").write_text(f"registry={UNREACHABLE_REGISTRY}\noffline=true\n")

    def argv(self, binary: str, session: SessionPaths, config: SessionConfig,
             resume: bool) -> list[str]:
        return [binary, "serve", "--pure", "--hostname", "127.0.0.1",
                "--port", str(_free_port())]

    def env(self, session: SessionPaths, base_url: str) -> dict[str, str]:
        flags = {f"OPENCODE_DISABLE_{what}": "1" for what in (
            "MODELS_FETCH", "AUTOUPDATE", "LSP_DOWNLOAD", "SHARE", "DEFAULT_PLUGINS",
            "CLAUDE_CODE", "EXTERNAL_SKILLS", "PROJECT_CONFIG")}
        return base_env(str(session.home), OPENCODE_CONFIG=str(session.home / "opencode.json"),
                        npm_config_registry=UNREACHABLE_REGISTRY, npm_config_offline="true",
                        **flags)

    def channel(self, io: ProcessIO, session: SessionPaths, config: SessionConfig,
                memory: SessionMemory, resume: bool) -> "OpenCodeChannel":
        return OpenCodeChannel(io, memory, resume)

    # -- its model API ----------------------------------------------------------------------

    def kind_of(self, method: str, path: str) -> str:
        return wire_chat.kind_of(method, path)

    def auxiliary_reply(self, path: str) -> tuple[int, dict[str, Any]]:
        return wire_chat.auxiliary_reply(path)

    def side_answer(self, body: dict[str, Any]) -> tuple[str, bytes] | None:
        return wire_chat.title_answer(body) if wire_chat.is_title_request(body) else None

    def conversation(self, body: dict[str, Any]) -> tuple[Message, ...]:
        return wire_chat.conversation(body, self.call_of)

    def shell_input(self, call: ToolCall) -> dict[str, Any]:
        description = call.args.get("description")
        return {"command": tool_command.encode(call),
                "description": description if isinstance(description, str) and description
                else f"{call.tool} (harness tool)"}

    def answer(self, exchange: ModelExchange, served: Served, number: int) -> None:
        model = str(exchange.body.get("model") or MODEL)
        completion_id = f"chatcmpl-lh-{number}"
        if exchange.body.get("stream"):
            write_answer(exchange, ChatStream(completion_id, model, SHELL_TOOL,
                                              self.shell_input), served)
            return
        if served.end != "end":
            exchange.end(RESET if served.end != "eof" else CLOSE)
            return
        calls = [{"id": c.tool_call_id, "type": "function", "function": {
            "name": SHELL_TOOL, "arguments": json.dumps(self.shell_input(c))}}
            for c in served.calls]
        exchange.head(200, "application/json")
        exchange.send(json.dumps(wire_chat.whole_answer(completion_id, model, served.text,
                                                        calls)).encode())
        exchange.end(CLOSE)


class OpenCodeChannel:
    """``opencode serve``'s HTTP API and event stream (see the module docstring)."""

    def __init__(self, io: ProcessIO, memory: SessionMemory, resume: bool) -> None:
        self.io = io
        self.memory = memory
        self.resume = resume
        self.base = ""
        self.session = ""
        self.waiting: list[str] = []
        self.prompted = False
        self.busy = False
        self.error = ""
        self.last_text = ""

    # -- HTTP ---------------------------------------------------------------------------------

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        request = urllib.request.Request(
            self.base + path, method=method, headers={"content-type": "application/json"},
            data=None if body is None else json.dumps(body).encode())
        try:
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as reply:
                data = reply.read()
        except (OSError, urllib.error.URLError) as exc:
            raise CliError(f"opencode serve at {self.base}: {method} {path} failed ({exc})"
                           ) from exc
        try:
            return json.loads(data) if data else None
        except ValueError:
            return None

    def _events(self) -> Iterator[str]:
        with urllib.request.urlopen(self.base + "/event") as stream:
            for raw in stream:
                line = raw.decode("utf-8", "replace").strip()
                if line.startswith("data:"):
                    yield EVENT + line[5:].strip()

    # -- the channel ----------------------------------------------------------------------------

    def start_turn(self, text: str) -> None:
        if self.session:
            self._prompt(text)
        else:
            self.waiting.append(text)

    def _prompt(self, text: str) -> None:
        self.prompted, self.busy, self.error, self.last_text = True, False, "", ""
        self._call("POST", f"/session/{self.session}/prompt_async",
                   {"parts": [{"type": "text", "text": text}]})

    def read(self, line: str) -> ApprovalAsked | TurnEnded | None:
        if not line.startswith(EVENT):
            found = LISTENING.search(line)
            if found and not self.base:
                self.base = found.group(1)
                self.io.follow(self._events(), "events")
            return None
        try:
            event = json.loads(line[len(EVENT):])
        except ValueError:
            return None
        kind = event.get("type") if isinstance(event, dict) else None
        data = event.get("properties") if isinstance(event, dict) else None
        data = data if isinstance(data, dict) else {}
        if kind == "server.connected":
            self._ready()
            return None
        if data.get("sessionID") != self.session or not self.session:
            return None
        if kind == "permission.asked":
            tool = data.get("tool") if isinstance(data.get("tool"), dict) else {}
            metadata = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
            permission = str(data.get("permission", ""))
            return ApprovalAsked(
                request_id=str(data.get("id", "")), tool_use_id=str(tool.get("callID", "")),
                tool_name=permission, input=dict(metadata),
                reason=f"OpenCode asks for {permission}: {', '.join(data.get('patterns') or [])}")
        if kind == "session.error":
            self.error = json.dumps(data.get("error"))[:500]
        elif kind == "message.part.updated":
            part = data.get("part") if isinstance(data.get("part"), dict) else {}
            if part.get("type") == "text":
                self.last_text = str(part.get("text") or "")
        elif kind in ("session.status", "session.idle"):
            status = data.get("status") if isinstance(data.get("status"), dict) else {}
            state = "idle" if kind == "session.idle" else status.get("type")
            if state == "busy":
                self.busy = True
            elif state == "idle" and self.prompted and (self.busy or self.error):
                self.prompted = False
                return TurnEnded(not self.error, self.last_text, self.error)
        return None

    def _ready(self) -> None:
        noted = self.memory.get(SESSION)
        if self.resume and noted:
            self.session = str(noted)
        else:
            created = self._call("POST", "/session", {})
            self.session = str((created or {}).get("id") or "")
            if not self.session:
                raise CliError(f"opencode serve at {self.base}: POST /session gave no id")
            self.memory.set(SESSION, self.session)
        waiting, self.waiting = self.waiting, []
        for text in waiting:
            self._prompt(text)

    def answer(self, asked: ApprovalAsked, approve: bool) -> None:
        self._call("POST", f"/permission/{asked.request_id}/reply",
                   {"reply": "once" if approve else "reject"})
