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
from typing import Any, Mapping

from harness.clis import tool_command, wire_messages
from harness.clis.driver import ApprovalAsked, Served, SessionPaths, TurnEnded
from harness.clis.loopback import CLOSE, RESET, ModelExchange
from harness.clis.wire_messages import MessagesStream, ToolUse
from harness.contract import Message, Mode, Rule, RuleEffect, SessionConfig, ToolCall

SHELL_TOOL = "Bash"
MODEL = "claude-sonnet-4-5"


class ClaudeCode:
    name = "claude-code"
    binary = "claude"
    package = "@anthropic-ai/claude-code"

    # -- starting it ------------------------------------------------------------------------

    def version_argv(self, binary: str) -> list[str]:
        return [binary, "--version"]

    def check_session(self, config: SessionConfig) -> str:
        if config.mode is Mode.AUTO:
            return ("auto mode: Claude Code's classifier asks the model API, which here is the "
                    "world's scripted model, not its classifier")
        for rule in (*config.rules, *config.hard_constraints):
            if rule.field or rule.pattern != "*":
                return (f"the rule {rule.effect.value} {rule.tool} {rule.field}={rule.pattern!r} "
                        "matches one field of the arguments; Claude Code's rules match the whole "
                        "Bash command")
        return ""

    def settings(self, config: SessionConfig) -> dict[str, Any]:
        allow: list[str] = []
        deny: list[str] = []
        ask: list[str] = []
        chosen = {RuleEffect.ALLOW: allow, RuleEffect.DENY: deny, RuleEffect.ASK: ask}
        for rule in config.rules:
            chosen[rule.effect].append(_rule(rule))
        deny += [_rule(rule) for rule in config.hard_constraints]
        if config.capabilities:
            deny += [_rule(Rule(RuleEffect.DENY, spec.name)) for spec in config.tools
                     if spec.name not in config.capabilities]
        mode = "plan" if config.mode is Mode.PLAN else "default"
        return {"permissions": {"allow": allow, "deny": deny, "ask": ask,
                                "defaultMode": mode}}

    def prepare(self, session: SessionPaths, config: SessionConfig) -> None:
        path = session.home / "lh-settings.json"
        path.write_text(json.dumps(self.settings(config), indent=1))

    def argv(self, binary: str, session: SessionPaths, config: SessionConfig,
             resume: bool) -> list[str]:
        argv = [binary, "-p", "--input-format", "stream-json", "--output-format", "stream-json",
                "--verbose", "--tools", SHELL_TOOL, "--model", MODEL,
                "--settings", str(session.home / "lh-settings.json")]
        if config.interactive and config.owner_can_approve:
            argv += ["--permission-prompt-tool", "stdio"]
        if resume:
            argv.append("--continue")
        return argv

    def env(self, session: SessionPaths, base_url: str) -> dict[str, str]:
        import os

        keep = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "TZ", "TMPDIR")}
        return {**keep, "HOME": str(session.home), "ANTHROPIC_BASE_URL": base_url,
                "ANTHROPIC_API_KEY": "sk-lifecycle-harness",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                "DISABLE_AUTOUPDATER": "1", "CI": "1"}

    # -- its programmatic channel -----------------------------------------------------------

    def user_line(self, text: str) -> bytes:
        return (json.dumps({"type": "user", "message": {"role": "user", "content": text}})
                + "\n").encode()

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

    def approval_line(self, asked: ApprovalAsked, approve: bool) -> bytes:
        decision: dict[str, Any] = (
            {"behavior": "allow", "updatedInput": asked.input} if approve else
            {"behavior": "deny", "message": "The user refused this operation."})
        return (json.dumps({"type": "control_response", "response": {
            "subtype": "success", "request_id": asked.request_id, "response": decision}})
            + "\n").encode()

    # -- its model API ----------------------------------------------------------------------

    def kind_of(self, method: str, path: str) -> str:
        return wire_messages.kind_of(method, path)

    def auxiliary_reply(self, path: str) -> tuple[int, dict[str, Any]]:
        return wire_messages.auxiliary_reply(path)

    def call_of(self, tool_use_id: str, tool_name: str, input: Mapping[str, Any]) -> ToolCall:
        """The world's call a tool use carries (its ledger command), else the CLI's own."""
        if tool_name == SHELL_TOOL:
            call = tool_command.decode(input.get("command"))
            if call is not None:
                return call
        return ToolCall(tool_use_id, tool_name, dict(input))

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
        uses = tuple(self.tool_use(call) for call in served.calls)
        if not wire_messages.is_streamed(exchange.body):
            if served.end == "end":
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
            return
        stream = MessagesStream(message_id, model)
        exchange.head(200, "text/event-stream")
        exchange.send(stream.start())
        if served.text:
            exchange.send(stream.text(served.text))
        for use in uses:
            exchange.send(stream.tool_use(use))
        if served.end == "end":
            exchange.send(stream.finish())
            exchange.end(CLOSE)
        else:
            exchange.end(CLOSE if served.end == "eof" else RESET)


def _rule(rule: Rule) -> str:
    return f"{SHELL_TOOL}({tool_command.PROGRAM_PATH} {rule.tool} *)"


def settings_path(session: SessionPaths) -> Path:
    return session.home / "lh-settings.json"
