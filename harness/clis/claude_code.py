"""Claude Code (``@anthropic-ai/claude-code``) under the black-box driver.

How it is run (found by hand against a scripted server, Claude Code 2.1.197; see
``docs/real-systems.md``):

* ``claude -p --input-format stream-json --output-format stream-json --verbose --tools Bash
  --permission-prompt-tool stdio --settings <file>`` in the session's sandbox, with ``HOME``
  the session's home, ``ANTHROPIC_BASE_URL`` the world's server (Anthropic Messages,
  streamed: :mod:`harness.clis.wire_messages`), any ``ANTHROPIC_API_KEY`` and
  ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1``. Claude Code refuses
  ``--dangerously-skip-permissions`` as root, and the harness wants its permission layer in
  play anyway: every tool use it does not allow or deny by its own rules becomes a
  ``control_request`` ``can_use_tool`` on stdout, answered ``allow`` / ``deny`` on stdin;
* the scenario's tools are Bash commands running the ledger program
  (:mod:`harness.clis.tool_command`); the session's rules become Claude Code permission
  rules over those commands (``Bash(.lh/tool write_file *)``), hard constraints and tools
  outside the owner's capabilities become deny rules; a rule on one field of the arguments
  has no counterpart (the CLI matches the whole command), and auto mode's classifier would
  ask the world's model, not its classifier: sessions needing either are refused, named;
* a session that is not interactive, or whose owner cannot approve, runs without the
  permission prompt tool: Claude Code then refuses what its rules do not allow;
* a restart is ``--continue`` (the most recent conversation of the working directory).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.clis import tool_command, wire_messages
from harness.clis.driver import (
    ApprovalAsked, ProcessIO, Served, SessionMemory, SessionPaths, TurnEnded,
)
from harness.clis.loopback import CLOSE, RESET, ModelExchange
from harness.clis.shell_dialect import ShellDialect, base_env, permissions, refusal, write_answer
from harness.clis.wire_messages import MessagesStream, ToolUse
from harness.contract import Message, Mode, SessionConfig, ToolCall

SHELL_TOOL = "Bash"
MODEL = "claude-sonnet-4-5"


class ClaudeCode(ShellDialect):
    name = "claude-code"
    binary = "claude"
    package = "@anthropic-ai/claude-code"
    shell_tool = SHELL_TOOL
    command_key = "command"
    time_limit_s = 120.0

    # -- starting it ------------------------------------------------------------------------

    def check_session(self, config: SessionConfig) -> str:
        return refusal("Claude Code", config)

    def settings(self, config: SessionConfig) -> dict[str, Any]:
        found = permissions(config)
        mode = "plan" if config.mode is Mode.PLAN else "default"
        return {"permissions": {"allow": [_rule(t) for t in found.allow],
                                "deny": [_rule(t) for t in found.deny],
                                "ask": [_rule(t) for t in found.ask], "defaultMode": mode}}

    def prepare(self, session: SessionPaths, config: SessionConfig, base_url: str) -> None:
        settings_path(session).write_text(json.dumps(self.settings(config), indent=1))

    def argv(self, binary: str, session: SessionPaths, config: SessionConfig,
             resume: bool) -> list[str]:
        argv = [binary, "-p", "--input-format", "stream-json", "--output-format", "stream-json",
                "--verbose", "--tools", SHELL_TOOL, "--model", MODEL,
                "--settings", str(settings_path(session))]
        if config.interactive and config.owner_can_approve:
            argv += ["--permission-prompt-tool", "stdio"]
        if resume:
            argv.append("--continue")
        return argv

    def env(self, session: SessionPaths, base_url: str) -> dict[str, str]:
        return base_env(str(session.home), ANTHROPIC_BASE_URL=base_url,
                        ANTHROPIC_API_KEY="sk-lifecycle-harness",
                        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
                        DISABLE_AUTOUPDATER="1", CI="1")

    def channel(self, io: ProcessIO, session: SessionPaths, config: SessionConfig,
                memory: SessionMemory, resume: bool) -> "ClaudeChannel":
        return ClaudeChannel(io)

    # -- its model API ----------------------------------------------------------------------

    def kind_of(self, method: str, path: str) -> str:
        return wire_messages.kind_of(method, path)

    def auxiliary_reply(self, path: str) -> tuple[int, dict[str, Any]]:
        return wire_messages.auxiliary_reply(path)

    def conversation(self, body: dict[str, Any]) -> tuple[Message, ...]:
        return wire_messages.conversation(body, self.call_of)

    def tool_use(self, call: ToolCall) -> ToolUse:
        description = call.args.get("description")
        return ToolUse(call.tool_call_id, SHELL_TOOL, {
            "command": tool_command.encode(call),
            "description": description if isinstance(description, str) and description
            else f"{call.tool} (harness tool)"})

    def answer(self, exchange: ModelExchange, served: Served, number: int) -> None:
        model = str(exchange.body.get("model") or MODEL)
        message_id = f"msg_lh_{number}"
        if wire_messages.is_streamed(exchange.body):
            write_answer(exchange, _Stream(MessagesStream(message_id, model), self), served)
            return
        if served.end == "end":
            uses = tuple(self.tool_use(call) for call in served.calls)
            body = json.dumps(wire_messages.whole_message(message_id, model, served.text,
                                                          uses)).encode()
            exchange.head(200, "application/json")
            exchange.send(body)
            exchange.end(CLOSE)
        elif served.end == "eof":
            exchange.head(200, "application/json")
            exchange.send(b'{"id": "' + message_id.encode() + b'", "content": [')
            exchange.end(CLOSE)
        else:
            exchange.end(RESET)


class _Stream:
    """:class:`~harness.clis.wire_messages.MessagesStream` as an ``AnswerStream``."""

    content_type = "text/event-stream"

    def __init__(self, stream: MessagesStream, dialect: ClaudeCode) -> None:
        self._stream = stream
        self._dialect = dialect

    def start(self) -> bytes:
        return self._stream.start()

    def text(self, text: str) -> bytes:
        return self._stream.text(text)

    def call(self, call: ToolCall) -> bytes:
        return self._stream.tool_use(self._dialect.tool_use(call))

    def finish(self) -> bytes:
        return self._stream.finish()


class ClaudeChannel:
    """``--input-format stream-json --output-format stream-json`` on stdio: a user message
    per line in, ``control_request`` ``can_use_tool`` and ``result`` lines out."""

    def __init__(self, io: ProcessIO) -> None:
        self.io = io

    def start_turn(self, text: str) -> None:
        self.io.write((json.dumps({"type": "user", "message": {"role": "user", "content": text}})
                       + "\n").encode())

    def read(self, line: str) -> ApprovalAsked | TurnEnded | None:
        try:
            message = json.loads(line)
        except ValueError:
            return None
        if not isinstance(message, dict):
            return None
        if message.get("type") == "control_request":
            request = message.get("request") or {}
            if request.get("subtype") == "can_use_tool":
                tool_input = request.get("input") if isinstance(request.get("input"), dict) else {}
                return ApprovalAsked(
                    request_id=str(message.get("request_id", "")),
                    tool_use_id=str(request.get("tool_use_id", "")),
                    tool_name=str(request.get("tool_name", "")), input=tool_input,
                    reason=str(request.get("description") or request.get("decision_reason")
                               or f"Claude Code asks to run {request.get('tool_name')}"))
            return None
        if message.get("type") == "result":
            ok = message.get("subtype") == "success" and not message.get("is_error")
            return TurnEnded(ok, str(message.get("result") or ""),
                             "" if ok else json.dumps(message)[:500])
        return None

    def answer(self, asked: ApprovalAsked, approve: bool) -> None:
        decision: dict[str, Any] = (
            {"behavior": "allow", "updatedInput": asked.input} if approve else
            {"behavior": "deny", "message": "The user refused this operation."})
        self.io.write((json.dumps({"type": "control_response", "response": {
            "subtype": "success", "request_id": asked.request_id, "response": decision}})
            + "\n").encode())


def _rule(tool: str) -> str:
    return f"{SHELL_TOOL}({tool_command.PROGRAM_PATH} {tool} *)"


def settings_path(session: SessionPaths) -> Path:
    return session.home / "lh-settings.json"
