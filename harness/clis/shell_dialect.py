"""What every CLI dialect shares: the world's calls as the CLI's shell tool, the session's
rules as per-tool permissions, an answer written in any wire API, the environment.

Each CLI under the driver (:mod:`harness.clis.claude_code`, :mod:`harness.clis.codex`,
:mod:`harness.clis.opencode`) has one shell tool and sees every scenario tool call as a call
of it whose command runs the ledger program (:mod:`harness.clis.tool_command`). What differs
is the shell tool's name and argument names, the wire API and the rule syntax; this module
holds the rest once.

Guarantees:

* :meth:`ShellDialect.call_of` reads a shell call back into the world's call when its
  command is a ledger command (directly or wrapped in ``bash -lc``), else keeps the CLI's
  own call as it is, never guessed;
* :func:`refusal` names why a session cannot be expressed in a CLI whose rules match whole
  shell commands (a rule on one argument field) or whose auto mode would ask the world's
  model to classify (auto mode), else is empty;
* :func:`permissions` sorts every tool of a session into allow / ask / deny with the
  harness's precedence (hard constraints and tools outside the owner's capabilities deny;
  deny over ask over allow) and gives the default for the others (ask when an owner can be
  asked, else deny);
* :func:`write_answer` writes one served answer through an :class:`AnswerStream`: the whole
  event sequence when the world's stream ended, the events up to the cut and a clean close
  for an EOF, a TCP reset for a transport error or a cancellation.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from typing import Any, Mapping, Protocol

from harness.clis import tool_command
from harness.clis.driver import Served
from harness.clis.loopback import CLOSE, RESET, ModelExchange
from harness.contract import Mode, Rule, RuleEffect, SessionConfig, ToolCall

KEPT_ENV = ("PATH", "LANG", "TZ", "TMPDIR")
"""The only variables of the harness's environment a CLI inherits."""


class AnswerStream(Protocol):
    """The events of one streamed answer in one wire API; each returns the bytes to send."""

    content_type: str

    def start(self) -> bytes: ...

    def text(self, text: str) -> bytes: ...

    def call(self, call: ToolCall) -> bytes:
        """A complete call of the CLI's shell tool carrying ``call``."""

    def finish(self) -> bytes: ...


def write_answer(exchange: ModelExchange, stream: AnswerStream, served: Served) -> None:
    """``served`` streamed (see the module docstring)."""
    if served.end not in ("end", "eof"):
        exchange.end(RESET)
        return
    exchange.head(200, stream.content_type)
    exchange.send(stream.start())
    if served.text:
        exchange.send(stream.text(served.text))
    for call in served.calls:
        exchange.send(stream.call(call))
    if served.end == "end":
        exchange.send(stream.finish())
    exchange.end(CLOSE)


def refusal(cli: str, config: SessionConfig) -> str:
    if config.mode is Mode.AUTO:
        return (f"auto mode: {cli}'s automatic approval asks the model API, which here is the "
                "world's scripted model, not its classifier")
    for rule in (*config.rules, *config.hard_constraints):
        if rule.field or rule.pattern != "*":
            return (f"the rule {rule.effect.value} {rule.tool} {rule.field}={rule.pattern!r} "
                    f"matches one field of the arguments; {cli}'s rules match the whole shell "
                    "command")
    return ""


@dataclass(frozen=True, slots=True)
class Permissions:
    """Each tool of a session by the permission it has before anyone is asked."""

    allow: tuple[str, ...]
    ask: tuple[str, ...]
    deny: tuple[str, ...]
    default: str
    """"ask" (an owner can be asked) or "deny", for a tool no rule names."""


def permissions(config: SessionConfig) -> Permissions:
    deny = {rule.tool for rule in (*config.rules, *config.hard_constraints)
            if rule.effect is RuleEffect.DENY or rule in config.hard_constraints}
    if config.capabilities:
        deny |= {spec.name for spec in config.tools if spec.name not in config.capabilities}
    ask = {r.tool for r in config.rules if r.effect is RuleEffect.ASK} - deny
    allow = {r.tool for r in config.rules if r.effect is RuleEffect.ALLOW} - deny - ask
    default = "ask" if config.interactive and config.owner_can_approve else "deny"
    return Permissions(tuple(sorted(allow)), tuple(sorted(ask)), tuple(sorted(deny)), default)


def rule_tools(rules: tuple[Rule, ...]) -> tuple[str, ...]:
    return tuple(sorted({rule.tool for rule in rules}))


def base_env(home: str, **extra: str) -> dict[str, str]:
    kept = {key: value for key, value in os.environ.items() if key in KEPT_ENV}
    return {**kept, "HOME": home, **extra}


def unwrap_shell(command: Any) -> Any:
    """The script of ``bash -lc SCRIPT`` (how Codex shows the command it runs), else the
    command unchanged."""
    if not isinstance(command, str):
        return command
    try:
        words = shlex.split(command)
    except ValueError:
        return command
    if len(words) == 3 and os.path.basename(words[0]) in ("bash", "sh", "zsh") \
            and words[1] in ("-lc", "-c"):
        return words[2]
    return command


class ShellDialect:
    """The part of a dialect that depends only on the CLI's shell tool (subclassed)."""

    shell_tool: str = ""
    command_key: str = "command"

    def call_of(self, tool_use_id: str, tool_name: str, input: Mapping[str, Any]) -> ToolCall:
        """The world's call a shell call carries (its ledger command), else the CLI's own."""
        if tool_name == self.shell_tool:
            command = input.get(self.command_key)
            call = tool_command.decode(command) or tool_command.decode(unwrap_shell(command))
            if call is not None:
                return call
        return ToolCall(tool_use_id, tool_name, dict(input))

    def shell_input(self, call: ToolCall) -> dict[str, Any]:
        """The shell tool's arguments that run ``call`` through the ledger program."""
        return {self.command_key: tool_command.encode(call)}

    def version_argv(self, binary: str) -> list[str]:
        return [binary, "--version"]

    def side_answer(self, body: dict[str, Any]) -> tuple[str, bytes] | None:
        return None
