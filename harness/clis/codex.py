"""The Codex CLI (``@openai/codex``) under the black-box driver.

How it is run (found by hand against a scripted server, Codex CLI 0.171.0; see
``docs/real-systems.md``):

* ``codex app-server`` in the session's sandbox with ``CODEX_HOME`` (and ``HOME``) the
  session's home, whose ``config.toml`` names the world's server as a model provider with
  ``wire_api = "responses"`` (the OpenAI Responses API, streamed:
  :mod:`harness.clis.wire_responses`), no update check, no analytics, no apps or plugins;
  any ``OPENAI_API_KEY``;
* the app-server speaks JSON-RPC on stdio: ``initialize``, then ``thread/start`` (or
  ``thread/resume`` of the thread id the session noted), then ``turn/start`` per user
  message; ``item/commandExecution/requestApproval`` is the approval question, answered
  ``{"decision": "accept" | "decline"}``; ``turn/completed`` ends the turn (its status
  ``completed``, ``failed`` or ``interrupted``);
* the scenario's tools are calls of Codex's ``exec_command`` tool whose ``cmd`` runs the
  ledger program (:mod:`harness.clis.tool_command`); Codex runs it as ``/bin/bash -lc CMD``
  without a sandbox (``danger-full-access``: the ledger program talks to the driver over
  127.0.0.1, which Codex's sandbox would forbid) and asks first unless its rules say
  otherwise (approval policy ``untrusted``);
* the session's rules become execpolicy rules in ``$CODEX_HOME/rules/lh.rules``:
  ``prefix_rule(pattern=[".lh/tool", TOOL], decision="allow" | "prompt" | "forbidden")``;
  hard constraints and tools outside the owner's capabilities are ``forbidden``; a session
  whose owner cannot be asked runs with approval policy ``never`` and every tool no rule
  allows is ``forbidden``. The approval policy is given in ``thread/start`` (0.171 refuses
  ``approval_policy = "untrusted"`` in ``config.toml``, yet takes it there). A rule on one
  field of the arguments has no counterpart, and Codex's automatic approval reviewer would
  ask the world's model: sessions needing either are refused, named. Codex 0.171 has no
  plan mode: plan sessions are refused too;
* a restart is ``thread/resume`` of the session's thread in a new app-server.
"""

from __future__ import annotations

import json
from typing import Any

from harness.clis import tool_command, wire_responses
from harness.clis.driver import (
    ApprovalAsked, ProcessIO, Served, SessionMemory, SessionPaths, TurnEnded,
)
from harness.clis.loopback import RESET, ModelExchange
from harness.clis.shell_dialect import (
    ShellDialect, base_env, permissions, refusal, unwrap_shell, write_answer,
)
from harness.clis.wire_responses import ResponsesStream
from harness.contract import Message, Mode, SessionConfig

SHELL_TOOL = "exec_command"
MODEL = "gpt-5"
PROVIDER = "lh"
THREAD = "thread_id"


class Codex(ShellDialect):
    name = "codex"
    binary = "codex"
    package = "@openai/codex"
    shell_tool = SHELL_TOOL
    command_key = "cmd"
    time_limit_s = 120.0

    # -- starting it ------------------------------------------------------------------------

    def check_session(self, config: SessionConfig) -> str:
        if config.mode is Mode.PLAN:
            return "plan mode: Codex CLI 0.171 has none (its collaboration modes were removed)"
        return refusal("Codex CLI", config)

    def approval_policy(self, config: SessionConfig) -> str:
        return "untrusted" if config.interactive and config.owner_can_approve else "never"

    def rules(self, config: SessionConfig) -> str:
        """The execpolicy rules file for the session (see the module docstring)."""
        found = permissions(config)
        decisions = {tool: "allow" for tool in found.allow}
        decisions.update({tool: "prompt" for tool in found.ask})
        decisions.update({tool: "forbidden" for tool in found.deny})
        if found.default == "deny":
            for spec in config.tools:
                if spec.name not in found.allow:
                    decisions[spec.name] = "forbidden"
        lines = ["# lifecycle-harness: the session's rules over the ledger program's commands"]
        for tool, decision in sorted(decisions.items()):
            for program in (tool_command.PROGRAM_PATH, "./" + tool_command.PROGRAM_PATH):
                lines.append(f"prefix_rule(pattern={json.dumps([program, tool])}, "
                             f"decision={json.dumps(decision)})")
        return "\n".join(lines) + "\n"

    def config_toml(self, config: SessionConfig, base_url: str) -> str:
        return "\n".join([
            f"model = {json.dumps(MODEL)}",
            f"model_provider = {json.dumps(PROVIDER)}",
            'sandbox_mode = "danger-full-access"',
            "check_for_update_on_startup = false",
            "",
            "[analytics]",
            "enabled = false",
            "",
            "[features]",
            "apps = false",
            "plugins = false",
            "",
            f"[model_providers.{PROVIDER}]",
            'name = "lifecycle-harness world"',
            f"base_url = {json.dumps(base_url + '/v1')}",
            'wire_api = "responses"',
            'env_key = "OPENAI_API_KEY"',
            "",
        ])

    def prepare(self, session: SessionPaths, config: SessionConfig, base_url: str) -> None:
        (session.home / "config.toml").write_text(self.config_toml(config, base_url))
        rules = session.home / "rules"
        rules.mkdir(parents=True, exist_ok=True)
        (rules / "lh.rules").write_text(self.rules(config))

    def argv(self, binary: str, session: SessionPaths, config: SessionConfig,
             resume: bool) -> list[str]:
        return [binary, "app-server"]

    def env(self, session: SessionPaths, base_url: str) -> dict[str, str]:
        return base_env(str(session.home), CODEX_HOME=str(session.home),
                        OPENAI_API_KEY="sk-lifecycle-harness", NO_COLOR="1")

    def channel(self, io: ProcessIO, session: SessionPaths, config: SessionConfig,
                memory: SessionMemory, resume: bool) -> "CodexChannel":
        return CodexChannel(io, str(session.sandbox), self.approval_policy(config), memory,
                            resume)

    # -- its model API ----------------------------------------------------------------------

    def kind_of(self, method: str, path: str) -> str:
        return wire_responses.kind_of(method, path)

    def auxiliary_reply(self, path: str) -> tuple[int, dict[str, Any]]:
        return wire_responses.auxiliary_reply(path)

    def conversation(self, body: dict[str, Any]) -> tuple[Message, ...]:
        return wire_responses.conversation(body, self.call_of)

    def answer(self, exchange: ModelExchange, served: Served, number: int) -> None:
        if exchange.body.get("stream") is False:
            exchange.end(RESET)  # Codex always streams; a request that does not is not its
            return
        model = str(exchange.body.get("model") or MODEL)
        write_answer(exchange, ResponsesStream(f"resp_lh_{number}", model, SHELL_TOOL,
                                               self.shell_input), served)


class CodexChannel:
    """``codex app-server``'s JSON-RPC on stdio (see the module docstring)."""

    def __init__(self, io: ProcessIO, cwd: str, approval_policy: str, memory: SessionMemory,
                 resume: bool) -> None:
        self.io = io
        self.cwd = cwd
        self.policy = approval_policy
        self.memory = memory
        self.resume = resume
        self.thread_id = ""
        self.waiting: list[str] = []
        self.calls: dict[int, str] = {}
        self.next_id = 0
        self.last_text = ""
        self._request("initialize", {
            "clientInfo": {"name": "lifecycle-harness", "title": None, "version": "1"},
            "capabilities": {"experimentalApi": False, "requestAttestation": False}})

    def _send(self, message: dict[str, Any]) -> None:
        self.io.write((json.dumps({"jsonrpc": "2.0", **message}) + "\n").encode())

    def _request(self, method: str, params: dict[str, Any]) -> None:
        self.next_id += 1
        self.calls[self.next_id] = method
        self._send({"id": self.next_id, "method": method, "params": params})

    def _thread_params(self) -> dict[str, Any]:
        return {"cwd": self.cwd, "approvalPolicy": self.policy, "sandbox": "danger-full-access"}

    def start_turn(self, text: str) -> None:
        if self.thread_id:
            self._turn(text)
        else:
            self.waiting.append(text)

    def _turn(self, text: str) -> None:
        self.last_text = ""
        self._request("turn/start", {"threadId": self.thread_id, "input": [
            {"type": "text", "text": text, "text_elements": []}]})

    def read(self, line: str) -> ApprovalAsked | TurnEnded | None:
        try:
            message = json.loads(line)
        except ValueError:
            return None
        if not isinstance(message, dict):
            return None
        method = message.get("method")
        params = message.get("params") if isinstance(message.get("params"), dict) else {}
        if method is None and "id" in message:
            return self._response(message)
        if method is not None and "id" in message:
            return self._server_request(message["id"], str(method), params)
        if method == "item/completed":
            item = params.get("item") if isinstance(params.get("item"), dict) else {}
            if item.get("type") == "agentMessage":
                self.last_text = str(item.get("text") or "")
        elif method == "turn/completed":
            turn = params.get("turn") if isinstance(params.get("turn"), dict) else {}
            status = turn.get("status")
            return TurnEnded(status == "completed", self.last_text,
                             "" if status == "completed" else json.dumps(turn)[:500])
        return None

    def _response(self, message: dict[str, Any]) -> TurnEnded | None:
        method = self.calls.pop(message["id"], "") if isinstance(message["id"], int) else ""
        if "error" in message:
            return TurnEnded(False, "", f"codex app-server refused {method}: "
                                        f"{json.dumps(message['error'])[:400]}")
        result = message.get("result") if isinstance(message.get("result"), dict) else {}
        if method == "initialize":
            self._send({"method": "initialized"})
            noted = self.memory.get(THREAD)
            if self.resume and noted:
                self._request("thread/resume", {"threadId": noted, **self._thread_params()})
            else:
                self._request("thread/start", self._thread_params())
        elif method in ("thread/start", "thread/resume"):
            thread = result.get("thread") if isinstance(result.get("thread"), dict) else {}
            self.thread_id = str(thread.get("id") or "")
            if not self.thread_id:
                return TurnEnded(False, "", f"codex app-server: {method} gave no thread id")
            self.memory.set(THREAD, self.thread_id)
            waiting, self.waiting = self.waiting, []
            for text in waiting:
                self._turn(text)
        return None

    def _server_request(self, request_id: Any, method: str,
                        params: dict[str, Any]) -> ApprovalAsked | None:
        if method == "item/commandExecution/requestApproval":
            command = unwrap_shell(params.get("command"))
            return ApprovalAsked(
                request_id=json.dumps(request_id), tool_use_id=str(params.get("itemId", "")),
                tool_name=SHELL_TOOL, input={"cmd": command},
                reason=str(params.get("reason") or f"Codex asks to run {command}"))
        # anything else Codex could ask (a patch, a permission, user input) is not part of
        # what the harness serves: refused, so the turn never waits for it
        self._send({"id": request_id, "error": {
            "code": -32601, "message": f"lifecycle-harness does not answer {method}"}})
        return None

    def answer(self, asked: ApprovalAsked, approve: bool) -> None:
        self._send({"id": json.loads(asked.request_id),
                    "result": {"decision": "accept" if approve else "decline"}})
