"""The Responses wire module and Codex's app-server channel, on shapes recorded from Codex
CLI 0.171.0 (its requests to a scripted server; its JSON-RPC lines)."""

from __future__ import annotations

import json

from harness.clis import tool_command, wire_responses
from harness.clis.codex import Codex, CodexChannel
from harness.clis.driver import ApprovalAsked, TurnEnded
from harness.clis.wire_responses import AUXILIARY, MODEL, ResponsesStream
from harness.contract import (
    Message, Rule, RuleEffect, SessionConfig, ToolCall, ToolKind, ToolSpec,
)

# The request Codex sent after it was SIGKILLed mid-tool and its thread resumed (trimmed:
# instructions, tools, client metadata; long context texts shortened).
RECORDED_AFTER_RESUME = {
    "model": "gpt-5", "stream": True, "tool_choice": "auto", "parallel_tool_calls": True,
    "store": False,
    "input": [
        {"type": "message", "id": "msg_b2ef", "role": "developer", "content": [
            {"type": "input_text", "text": "You are a coding agent running in the Codex CLI..."}]},
        {"type": "message", "id": "msg_01a2", "role": "user", "content": [
            {"type": "input_text", "text": "<environment_context>\n  <cwd>/w/sb4</cwd>\n  "
                                           "<shell>bash</shell>\n</environment_context>"}]},
        {"type": "message", "id": "msg_01a3", "role": "user", "content": [
            {"type": "input_text", "text": "go"}]},
        {"type": "message", "id": "msg_0", "role": "assistant", "content": [
            {"type": "output_text", "text": "Running it."}]},
        {"type": "function_call", "id": "fc_0", "name": "exec_command",
         "arguments": "{\"cmd\": \".lh/tool write_file c1 '{}'\"}", "call_id": "c1"},
        {"type": "function_call_output", "id": "fco_07", "call_id": "c1", "output": "aborted"},
        {"type": "message", "id": "msg_01a4", "role": "user", "content": [
            {"type": "input_text", "text": "Continue from where you left off."}]},
    ],
}

# What Codex wrote for a call it asked about and the user declined.
RECORDED_DECLINED_OUTPUT = ('exec_command failed: CreateProcess { message: '
                            '"Rejected(\\"rejected by user\\")" }')


def test_kind_of_sorts_model_calls_from_the_rest():
    assert wire_responses.kind_of("POST", "/v1/responses") == MODEL
    assert wire_responses.kind_of("POST", "/v1/responses?x=1") == MODEL
    assert wire_responses.kind_of("GET", "/v1/responses") == AUXILIARY
    assert wire_responses.kind_of("GET", "/v1/models?client_version=0.171.0") == AUXILIARY
    assert wire_responses.auxiliary_reply("/v1/models")[0] == 200
    assert wire_responses.auxiliary_reply("/")[0] == 404


def test_conversation_reads_the_recorded_request_back_into_the_worlds_calls():
    assert Codex().conversation(RECORDED_AFTER_RESUME) == (
        Message(role="user", content="go"),
        Message(role="assistant", content="Running it.", tool_calls=(
            ToolCall("c1", "write_file", {}),)),
        Message(role="tool", tool_call_id="c1", content="aborted"),
        Message(role="user", content="Continue from where you left off."),
    )


def test_assistant_items_between_outputs_are_one_answer_and_foreign_calls_are_kept():
    body = {"input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "x"}]},
        {"type": "reasoning", "summary": []},
        {"type": "function_call", "name": "exec_command", "call_id": "a",
         "arguments": json.dumps({"cmd": "ls -la"})},
        {"type": "function_call", "name": "view_image", "call_id": "b",
         "arguments": json.dumps({"path": "/x.png"})},
        {"type": "function_call_output", "call_id": "a", "output": RECORDED_DECLINED_OUTPUT},
        {"type": "function_call_output", "call_id": "b", "output": {"content": "no"}},
        {"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": "Done."}]},
    ]}
    assert Codex().conversation(body) == (
        Message(role="user", content="x"),
        Message(role="assistant", content="", tool_calls=(
            ToolCall("a", "exec_command", {"cmd": "ls -la"}),
            ToolCall("b", "view_image", {"path": "/x.png"}))),
        Message(role="tool", tool_call_id="a", content=RECORDED_DECLINED_OUTPUT),
        Message(role="tool", tool_call_id="b", content="no"),
        Message(role="assistant", content="Done."),
    )


def _events(data: bytes) -> list[tuple[str, dict]]:
    out = []
    for block in data.decode().split("\n\n"):
        if block.strip():
            kind, payload = block.split("\n", 1)
            assert kind.startswith("event: ") and payload.startswith("data: ")
            parsed = json.loads(payload[6:])
            assert parsed["type"] == kind[7:]
            out.append((kind[7:], parsed))
    return out


def test_a_streamed_answer_is_the_event_sequence_codex_reads():
    dialect = Codex()
    stream = ResponsesStream("resp_1", "gpt-5", "exec_command", dialect.shell_input)
    call = ToolCall("c1", "write_file", {"path": "/repo/a"})
    events = _events(stream.start() + stream.text("Running it.") + stream.call(call)
                     + stream.finish())
    assert [kind for kind, _ in events] == [
        "response.created", "response.output_item.added", "response.output_text.delta",
        "response.output_item.done", "response.output_item.added",
        "response.output_item.done", "response.completed"]
    message = events[3][1]["item"]
    assert message["content"][0] == {"type": "output_text", "text": "Running it.",
                                     "annotations": []}
    item = events[5][1]["item"]
    assert (item["type"], item["name"], item["call_id"]) == ("function_call", "exec_command",
                                                             "c1")
    assert json.loads(item["arguments"]) == {"cmd": tool_command.encode(call)}
    assert events[5][1]["output_index"] == 1
    # what Codex reads back is the world's call
    assert dialect.call_of("c1", "exec_command", json.loads(item["arguments"])) == call


def test_a_cut_stream_has_no_response_completed():
    stream = ResponsesStream("resp_2", "m", "exec_command", Codex().shell_input)
    kinds = [kind for kind, _ in _events(stream.start() + stream.text("partial"))]
    assert "response.completed" not in kinds


def test_the_rules_file_expresses_the_sessions_rules():
    config = SessionConfig(
        session_id="s1", rules=(Rule(RuleEffect.ALLOW, "write_file"),
                                Rule(RuleEffect.ASK, "send_email"),
                                Rule(RuleEffect.DENY, "delete_file")),
        hard_constraints=(Rule(RuleEffect.DENY, "drop_db"),),
        tools=(ToolSpec("write_file", ToolKind.WRITE), ToolSpec("read_file", ToolKind.READ)))
    rules = Codex().rules(config)
    assert 'prefix_rule(pattern=[".lh/tool", "write_file"], decision="allow")' in rules
    assert 'prefix_rule(pattern=[".lh/tool", "send_email"], decision="prompt")' in rules
    assert 'prefix_rule(pattern=[".lh/tool", "delete_file"], decision="forbidden")' in rules
    assert 'prefix_rule(pattern=[".lh/tool", "drop_db"], decision="forbidden")' in rules
    assert "read_file" not in rules  # no rule: Codex's untrusted policy asks
    closed = Codex().rules(SessionConfig(session_id="s2", interactive=False,
                                         tools=(ToolSpec("read_file", ToolKind.READ),)))
    assert 'prefix_rule(pattern=[".lh/tool", "read_file"], decision="forbidden")' in closed


class _IO:
    def __init__(self) -> None:
        self.sent: list[dict] = []

    def write(self, data: bytes) -> None:
        self.sent.extend(json.loads(line) for line in data.decode().splitlines())

    def follow(self, lines, name) -> None:  # pragma: no cover - Codex follows nothing
        raise AssertionError("Codex's channel is its stdio")


class _Memory:
    def __init__(self, **noted) -> None:
        self.noted = dict(noted)

    def get(self, key):
        return self.noted.get(key)

    def set(self, key, value) -> None:
        self.noted[key] = value


# Lines codex app-server 0.171.0 wrote (trimmed).
APPROVAL_LINE = json.dumps({"method": "item/commandExecution/requestApproval", "id": 0, "params": {
    "kind": "command", "threadId": "t1", "turnId": "u1", "itemId": "c1",
    "command": "/bin/bash -lc \".lh/tool read_file c3 '{\\\"path\\\":\\\"/repo/b\\\"}'\"",
    "cwd": "/w/sb3", "reason": "requires approval by policy",
    "availableDecisions": ["accept", "cancel"]}})
COMPLETED_LINE = json.dumps({"method": "turn/completed", "params": {"threadId": "t1", "turn": {
    "id": "u1", "items": [], "status": "completed", "error": None}}})


def test_the_app_server_handshake_then_a_turn_an_approval_and_its_end():
    io, memory = _IO(), _Memory()
    channel = CodexChannel(io, "/w/sb", "untrusted", memory, resume=False)
    assert [m["method"] for m in io.sent] == ["initialize"]
    channel.start_turn("hello")  # not sent before the thread exists
    assert channel.read(json.dumps({"id": 1, "result": {"codexHome": "/h"}})) is None
    assert [m["method"] for m in io.sent[1:]] == ["initialized", "thread/start"]
    assert io.sent[2]["params"] == {"cwd": "/w/sb", "approvalPolicy": "untrusted",
                                    "sandbox": "danger-full-access"}
    assert channel.read(json.dumps({"id": 2, "result": {"thread": {"id": "t1"}}})) is None
    assert memory.noted == {"thread_id": "t1"}
    assert io.sent[3]["method"] == "turn/start"
    assert io.sent[3]["params"]["input"][0]["text"] == "hello"
    asked = channel.read(APPROVAL_LINE)
    assert isinstance(asked, ApprovalAsked) and asked.tool_use_id == "c1"
    assert Codex().call_of(asked.tool_use_id, asked.tool_name, asked.input) == ToolCall(
        "c3", "read_file", {"path": "/repo/b"})
    channel.answer(asked, approve=False)
    assert io.sent[-1] == {"jsonrpc": "2.0", "id": 0, "result": {"decision": "decline"}}
    ended = channel.read(COMPLETED_LINE)
    assert isinstance(ended, TurnEnded) and ended.ok


def test_a_restart_resumes_the_noted_thread_and_other_questions_are_refused():
    io = _IO()
    channel = CodexChannel(io, "/w/sb", "never", _Memory(thread_id="t9"), resume=True)
    channel.read(json.dumps({"id": 1, "result": {}}))
    assert io.sent[-1]["method"] == "thread/resume"
    assert io.sent[-1]["params"]["threadId"] == "t9"
    assert channel.read(json.dumps({"method": "item/fileChange/requestApproval", "id": 5,
                                    "params": {}})) is None
    assert io.sent[-1]["id"] == 5 and "error" in io.sent[-1]
    failed = channel.read(json.dumps({"id": 2, "error": {"message": "no such thread"}}))
    assert isinstance(failed, TurnEnded) and not failed.ok
