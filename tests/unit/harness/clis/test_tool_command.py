"""The ledger command: encode/decode are inverse, anything else decodes to None, and the
program really hands a call to a driver and prints its result."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading

import pytest

from harness.clis import tool_command
from harness.clis.tool_command import ToolCommandError, decode, encode
from harness.contract import ToolCall


@pytest.mark.parametrize("call", [
    ToolCall("c1", "write_file", {"path": "/repo/out.txt", "content": "it's \"quoted\" $HOME `x`"}),
    ToolCall("c2", "Bash", {"command": "rm -rf build", "description": "clean\nthe build"}),
    ToolCall("call_9.a", "read", {}),
    ToolCall("c3", "x", {"nested": {"a": [1, 2, None, True]}, "ünï": "cödé"}),
])
def test_decode_inverts_encode(call):
    assert decode(encode(call)) == call


@pytest.mark.parametrize("command", [
    "ls -la", ".lh/tool write_file c1", ".lh/tool write_file c1 '[1]'",
    ".lh/tool write_file c1 'not json'", "other/tool w c1 '{}'", ".lh/tool 'a b' c1 '{}'",
    ".lh/tool w c1 '{}' extra", "'unterminated", None, 42,
])
def test_anything_else_decodes_to_none(command):
    assert decode(command) is None


def test_a_call_that_cannot_be_a_plain_word_is_refused_with_the_fix():
    with pytest.raises(ToolCommandError, match="rename it in the scenario"):
        encode(ToolCall("c 1", "write_file", {}))
    with pytest.raises(ToolCommandError, match="tool name"):
        encode(ToolCall("c1", "write file", {}))


def _one_shot_driver(reply: dict) -> tuple[int, list[dict]]:
    server = socket.create_server(("127.0.0.1", 0))
    seen: list[dict] = []

    def serve() -> None:
        conn, _ = server.accept()
        with conn, server:
            data = b""
            while not data.endswith(b"\n"):
                data += conn.recv(65536)
            seen.append(json.loads(data))
            conn.sendall((json.dumps(reply) + "\n").encode())

    threading.Thread(target=serve, daemon=True).start()
    return server.getsockname()[1], seen


def test_the_program_hands_the_call_to_the_driver_and_prints_its_result(tmp_path):
    port, seen = _one_shot_driver({"status": "error", "output": "disk full"})
    program = tmp_path / "tool"
    program.write_text(tool_command.program(sys.executable, port, "s1"))
    call = ToolCall("c7", "write_file", {"path": "/repo/a", "content": "x'y"})
    argv = [sys.executable, str(program), call.tool, call.tool_call_id,
            json.dumps(call.args)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and done.stdout == "disk full"
    assert seen == [{"tool": "write_file", "tool_call_id": "c7", "args": call.args,
                     "session": "s1"}]


def test_the_program_without_a_driver_exits_75_saying_so(tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]  # closed on exit: nobody listens there any more
    program = tmp_path / "tool"
    program.write_text(tool_command.program(sys.executable, port, "s1"))
    done = subprocess.run([sys.executable, str(program), "t", "c1", "{}"], capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 75 and "driver is gone" in done.stderr
