"""The Anthropic Messages wire module, on request shapes recorded from Claude Code 2.1.197."""

from __future__ import annotations

import json

from harness.clis import tool_command, wire_messages
from harness.clis.claude_code import ClaudeCode
from harness.clis.wire_messages import AUXILIARY, MODEL, MessagesStream, ToolUse
from harness.contract import Message, ToolCall

# A request Claude Code sent after a refused tool use (trimmed: system, tools, metadata).
RECORDED_AFTER_REFUSAL = {
    "model": "claude-sonnet-4-5",
    "stream": True,
    "max_tokens": 64000,
    "messages": [
        {"role": "user", "content": [
            {"type": "text", "text": "<system-reminder>\nToday's date is 2026-12-07.\n</system-reminder>\n\n"},
            {"type": "text", "text": "write out.txt", "cache_control": {"type": "ephemeral"}}]},
        {"role": "system", "content": "Available agent types for the Agent tool: ..."},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Running it."},
            {"type": "tool_use", "id": "c1", "name": "Bash", "input": {
                "command": ".lh/tool write_file c1 '{\"content\":\"x\",\"path\":\"/repo/out.txt\"}'",
                "description": "write_file (harness tool)"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "content": "The user refused this operation.", "is_error": True,
             "tool_use_id": "c1", "cache_control": {"type": "ephemeral"}}]},
    ],
}


def test_kind_of_sorts_model_calls_from_the_rest():
    assert wire_messages.kind_of("POST", "/v1/messages?beta=true") == MODEL
    assert wire_messages.kind_of("POST", "/v1/messages/count_tokens?beta=true") == AUXILIARY
    assert wire_messages.kind_of("GET", "/") == AUXILIARY
    assert wire_messages.kind_of("GET", "/v1/messages") == AUXILIARY
    status, body = wire_messages.auxiliary_reply("/v1/messages/count_tokens")
    assert status == 200 and body == {"input_tokens": 1}
    assert wire_messages.auxiliary_reply("/")[0] == 404


def test_conversation_reads_the_recorded_request_back_into_the_worlds_calls():
    messages = ClaudeCode().conversation(RECORDED_AFTER_REFUSAL)
    assert messages == (
        Message(role="user", content="write out.txt"),
        Message(role="assistant", content="Running it.", tool_calls=(
            ToolCall("c1", "write_file", {"content": "x", "path": "/repo/out.txt"}),)),
        Message(role="tool", tool_call_id="c1", content="The user refused this operation."),
    )


def test_a_tool_use_that_is_not_a_ledger_command_is_kept_as_the_clis_own():
    body = {"messages": [{"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_9", "name": "Bash", "input": {"command": "ls -la"}},
        {"type": "tool_use", "id": "toolu_10", "name": "Read", "input": {"file_path": "/x"}}]}]}
    (message,) = ClaudeCode().conversation(body)
    assert message.tool_calls == (ToolCall("toolu_9", "Bash", {"command": "ls -la"}),
                                  ToolCall("toolu_10", "Read", {"file_path": "/x"}))


def _events(data: bytes) -> list[tuple[str, dict]]:
    out = []
    for block in data.decode().split("\n\n"):
        if not block.strip():
            continue
        kind, payload = block.split("\n", 1)
        assert kind.startswith("event: ") and payload.startswith("data: ")
        out.append((kind[7:], json.loads(payload[6:])))
    return out


def test_a_streamed_answer_is_the_event_sequence_claude_code_reads():
    stream = MessagesStream("msg_1", "m")
    call = ToolCall("c1", "write_file", {"path": "/repo/a"})
    use = ToolUse("c1", "Bash", {"command": tool_command.encode(call), "description": "d"})
    data = stream.start() + stream.text("Running it.") + stream.tool_use(use) + stream.finish()
    events = _events(data)
    assert [kind for kind, _ in events] == [
        "message_start", "content_block_start", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_stop", "message_delta",
        "message_stop"]
    assert events[2][1]["delta"] == {"type": "text_delta", "text": "Running it."}
    assert events[4][1]["content_block"]["type"] == "tool_use"
    assert events[4][1]["index"] == 1
    assert json.loads(events[5][1]["delta"]["partial_json"]) == use.input
    assert events[7][1]["delta"]["stop_reason"] == "tool_use"


def test_an_answer_without_calls_ends_the_turn_and_a_cut_has_no_message_stop():
    stream = MessagesStream("msg_2", "m")
    assert _events(stream.finish())[0][1]["delta"]["stop_reason"] == "end_turn"
    cut = MessagesStream("msg_3", "m")
    partial = cut.start() + cut.text("The file says")
    assert "message_stop" not in [kind for kind, _ in _events(partial)]


def test_the_whole_message_for_a_request_that_is_not_streamed():
    use = ToolUse("c1", "Bash", {"command": "x"})
    body = wire_messages.whole_message("msg_4", "m", "hi", (use,))
    assert body["content"] == [{"type": "text", "text": "hi"},
                               {"type": "tool_use", "id": "c1", "name": "Bash",
                                "input": {"command": "x"}}]
    assert body["stop_reason"] == "tool_use"
    assert wire_messages.whole_message("msg_5", "m", "", ())["stop_reason"] == "end_turn"
    assert not wire_messages.is_streamed({"stream": False})
    assert wire_messages.is_streamed(RECORDED_AFTER_REFUSAL)
