"""The scenario's tools as one shell command each, and the small program that command runs.

A CLI under test has its own tools (a shell, file editors...); the scenario's tools exist only
in the world. So every tool call the world's model makes reaches the CLI as a call of the
CLI's *shell* tool whose command runs the ledger program::

    .lh/tool <tool> <tool_call_id> '<canonical JSON of the arguments>'

run in the case's sandbox directory. The program really runs (a process the CLI started,
with the CLI's own permission checks and approvals before it); it hands the call to the
driver over a loopback socket, the driver has the world execute it (the ledger row, the
failpoints between the side effect and the result), and the program prints the world's
output and exits 0 (``ok``) or 1 (``error``). What the CLI ran is thereby read back from the
command it really executed, not from what it says it did.

Guarantees:

* :func:`encode` and :func:`decode` are inverse: ``decode(encode(call)) == call`` for every
  call whose tool name is a plain word and whose arguments are JSON; :func:`decode` of any
  other command (one the CLI made up, a changed spelling) is ``None``, never a guess;
* :func:`program` is a Python script using the standard library only, with the driver's
  port and the session written into it (no environment variable needs to survive the
  CLI's shell): it reads nothing but its argv; a driver that is gone makes it exit 75 with
  a message on stderr;
* the wire between the program and the driver is one JSON line each way.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

from harness.contract import ToolCall, canonical_json

PROGRAM_PATH = ".lh/tool"
"""Where the program lives, relative to the sandbox (the CLI's working directory)."""

_WORD = re.compile(r"^[A-Za-z0-9_.:-]+$")


class ToolCommandError(ValueError):
    """A call that cannot be written as a ledger command (its tool name or id is not a plain
    word): the scenario cannot run on a CLI as written."""


def encode(call: ToolCall) -> str:
    """The shell command that runs ``call`` through the ledger program."""
    for what, text in (("tool name", call.tool), ("tool call id", call.tool_call_id)):
        if not _WORD.match(text):
            raise ToolCommandError(
                f"{what} {text!r} is not a plain word (letters, digits, _ . : -); a CLI's shell "
                "command could not carry it unquoted: rename it in the scenario")
    return (f"{PROGRAM_PATH} {call.tool} {call.tool_call_id} "
            f"{shlex.quote(canonical_json(call.args))}")


def decode(command: Any) -> ToolCall | None:
    """The call a ledger command carries; ``None`` for anything else."""
    if not isinstance(command, str):
        return None
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if len(words) != 4 or words[0] not in (PROGRAM_PATH, "./" + PROGRAM_PATH):
        return None
    _, tool, call_id, raw = words
    if not _WORD.match(tool) or not _WORD.match(call_id):
        return None
    try:
        args = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(args, dict):
        return None
    return ToolCall(call_id, tool, args)


def program(python: str, port: int, session_id: str) -> str:
    """The ledger program's text for one session's sandbox (``python``: its interpreter)."""
    return (f"#!{python}\n" + _PROGRAM.replace("@PORT@", str(int(port)))
            .replace("@SESSION@", json.dumps(session_id)))


_PROGRAM = '''"""The ledger program of lifecycle-harness (harness/clis/tool_command.py): hands one tool
call to the harness's driver and prints the world's result."""
import json, socket, sys

def main():
    argv = sys.argv[1:]
    if len(argv) != 3:
        print("usage: .lh/tool TOOL CALL_ID JSON_ARGS", file=sys.stderr)
        return 64
    tool, call_id, raw = argv
    try:
        args = json.loads(raw)
    except ValueError as exc:
        print("the arguments are not JSON: %s" % exc, file=sys.stderr)
        return 64
    port = @PORT@
    request = {"tool": tool, "tool_call_id": call_id, "args": args, "session": @SESSION@}
    try:
        with socket.create_connection(("127.0.0.1", port)) as conn:
            conn.sendall((json.dumps(request) + "\\n").encode())
            data = b""
            while not data.endswith(b"\\n"):
                part = conn.recv(65536)
                if not part:
                    break
                data += part
    except OSError as exc:
        print("the harness driver is gone: %s" % exc, file=sys.stderr)
        return 75
    if not data:
        print("the harness driver closed the connection without a result", file=sys.stderr)
        return 75
    reply = json.loads(data)
    sys.stdout.write(reply.get("output", ""))
    sys.stdout.flush()
    return 0 if reply.get("status") == "ok" else 1

sys.exit(main())
'''
