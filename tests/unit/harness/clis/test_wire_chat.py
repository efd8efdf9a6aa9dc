"""The Chat Completions wire module and OpenCode's server channel, on shapes recorded from
OpenCode 1.18.33 (its requests to a scripted server; its server's events)."""

from __future__ import annotations

import json

from harness.clis import tool_command, wire_chat
from harness.clis.driver import ApprovalAsked, TurnEnded
from harness.clis.opencode import EVENT, OpenCode, OpenCodeChannel
from harness.clis.wire_chat import AUXILIARY, MODEL, ChatStream
from harness.contract import (
    Message, Rule, RuleEffect, SessionConfig, ToolCall, ToolKind, ToolSpec,
)

SYSTEM = {"role": "system", "content": "You are opencode, an interactive CLI tool that helps "
                                       "users with software engineering tasks..."}
# The request OpenCode sent after an approved bash call (trimmed: tools, the system prompt).
RECORDED_AFTER_TOOL = {
    "model": "m", "max_tokens": 32000, "tool_choice": "auto", "stream": True,
    "stream_options": {"include_usage": True},
    "messages": [
        SYSTEM,
        {"role": "user", "content": "write it"},
        {"role": "assistant", "content": "Running it.", "tool_calls": [{
            "id": "c1", "type": "function", "function": {"name": "bash", "arguments": (
                "{\"command\":\".lh/tool write_file c1 '{\\\"path\\\":\\\"/repo/a\\\"}'\","
                "\"description\":\"write\"}")}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok\n"},
    ],
}
# The title request OpenCode sends alongside a new session's first turn.
RECORDED_TITLE = {
    "model": "m", "max_tokens": 32000, "stream": True, "stream_options": {"include_usage": True},
    "messages": [
        {"role": "system", "content": "You are a title generator. You output ONLY a thread "
                                      "title. Nothing else.\n\n<task>..."},
        {"role": "user", "content": "Generate a title for this conversation:\n"},
        {"role": "user", "content": "write it"},
    ],
}


def test_kind_of_sorts_model_calls_from_the_rest():
    assert wire_chat.kind_of("POST", "/v1/chat/completions") == MODEL
    assert wire_chat.kind_of("GET", "/v1/models") == AUXILIARY
    assert wire_chat.kind_of("POST", "/v1/completions") == AUXILIARY
    assert wire_chat.auxiliary_reply("/v1/models")[0] == 200


def test_conversation_reads_the_recorded_request_back_into_the_worlds_calls():
    assert OpenCode().conversation(RECORDED_AFTER_TOOL) == (
        Message(role="user", content="write it"),
        Message(role="assistant", content="Running it.", tool_calls=(
            ToolCall("c1", "write_file", {"path": "/repo/a"}),)),
        Message(role="tool", tool_call_id="c1", content="ok\n"),
    )


def test_the_title_request_is_answered_without_the_world_and_nothing_else_is():
    dialect = OpenCode()
    assert dialect.side_answer(RECORDED_AFTER_TOOL) is None
    content_type, data = dialect.side_answer(RECORDED_TITLE)
    assert content_type == "text/event-stream"
    chunks = [json.loads(line[6:]) for line in data.decode().split("\n\n")
              if line.startswith("data: {")]
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == wire_chat.TITLE
    assert data.endswith(b"data: [DONE]\n\n")
    content_type, whole = dialect.side_answer({**RECORDED_TITLE, "stream": False})
    assert json.loads(whole)["choices"][0]["message"]["content"] == wire_chat.TITLE
    # a request with tools is the conversation even if a system prompt mentions titles
    assert not wire_chat.is_title_request({**RECORDED_TITLE, "tools": [{"type": "function"}]})


def test_a_streamed_answer_is_the_chunk_sequence_opencode_reads():
    dialect = OpenCode()
    stream = ChatStream("chatcmpl-1", "m", "bash", dialect.shell_input)
    call = ToolCall("c1", "write_file", {"path": "/repo/a"})
    data = stream.start() + stream.text("Running it.") + stream.call(call) + stream.finish()
    lines = [line for line in data.decode().split("\n\n") if line]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert deltas[1] == {"content": "Running it."}
    (sent,) = deltas[2]["tool_calls"]
    assert (sent["index"], sent["id"], sent["function"]["name"]) == (0, "c1", "bash")
    arguments = json.loads(sent["function"]["arguments"])
    assert arguments["command"] == tool_command.encode(call)
    assert dialect.call_of("c1", "bash", arguments) == call
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    cut = ChatStream("chatcmpl-2", "m", "bash", dialect.shell_input)
    assert b"finish_reason\": \"stop" not in cut.start() + cut.text("partial")


def test_the_sessions_rules_as_bash_permission_patterns():
    config = SessionConfig(
        session_id="s1", rules=(Rule(RuleEffect.ALLOW, "write_file"),
                                Rule(RuleEffect.DENY, "delete_file")),
        hard_constraints=(Rule(RuleEffect.DENY, "drop_db"),),
        tools=(ToolSpec("write_file", ToolKind.WRITE),))
    table = OpenCode().bash_permissions(config)
    assert list(table)[0] == "*" and table["*"] == "ask"
    assert table[".lh/tool write_file *"] == "allow"
    assert table[".lh/tool delete_file *"] == "deny"
    assert table["./.lh/tool drop_db *"] == "deny"
    closed = OpenCode().bash_permissions(SessionConfig(
        session_id="s2", interactive=False, rules=(Rule(RuleEffect.ASK, "send"),)))
    assert closed == {"*": "deny", ".lh/tool send *": "deny", "./.lh/tool send *": "deny"}


class _IO:
    def __init__(self) -> None:
        self.followed: list[str] = []

    def write(self, data: bytes) -> None:  # pragma: no cover - OpenCode's channel is HTTP
        raise AssertionError("nothing is written to opencode serve's stdin")

    def follow(self, lines, name) -> None:
        self.followed.append(name)


class _Memory:
    def __init__(self, **noted) -> None:
        self.noted = dict(noted)

    def get(self, key):
        return self.noted.get(key)

    def set(self, key, value) -> None:
        self.noted[key] = value


def _event(kind: str, **properties) -> str:
    return EVENT + json.dumps({"id": "evt_1", "type": kind, "properties": properties})


def _channel(memory: _Memory, resume: bool) -> tuple[OpenCodeChannel, list, _IO]:
    io = _IO()
    channel = OpenCodeChannel(io, memory, resume)
    calls: list = []

    def call(method, path, body=None):
        calls.append((method, path, body))
        return {"id": "ses_new"} if path == "/session" else True

    channel._call = call  # the HTTP side, recorded instead of sent
    return channel, calls, io


# permission.asked as opencode serve 1.18.33 sent it (trimmed)
ASKED = dict(id="per_25", sessionID="ses_new", permission="bash",
             patterns=[".lh/tool write_file c1 '{\"path\":\"/repo/a\"}'"],
             metadata={"command": ".lh/tool write_file c1 '{\"path\":\"/repo/a\"}'"},
             always=[".lh/tool *"], tool={"messageID": "msg_1", "callID": "c1"})


def test_the_server_channel_creates_the_session_prompts_asks_and_ends_on_idle():
    memory = _Memory()
    channel, calls, io = _channel(memory, resume=False)
    channel.start_turn("write it")
    assert channel.read("opencode server listening on http://127.0.0.1:54339") is None
    assert channel.base == "http://127.0.0.1:54339" and io.followed == ["events"]
    assert calls == []  # nothing before the event stream is connected
    channel.read(_event("server.connected"))
    assert calls == [("POST", "/session", {}),
                     ("POST", "/session/ses_new/prompt_async",
                      {"parts": [{"type": "text", "text": "write it"}]})]
    assert memory.noted == {"session_id": "ses_new"}
    assert channel.read(_event("session.status", sessionID="ses_new",
                               status={"type": "busy"})) is None
    asked = channel.read(_event("permission.asked", **ASKED))
    assert isinstance(asked, ApprovalAsked) and asked.request_id == "per_25"
    assert OpenCode().call_of(asked.tool_use_id, asked.tool_name, asked.input) == ToolCall(
        "c1", "write_file", {"path": "/repo/a"})
    channel.answer(asked, approve=False)
    assert calls[-1] == ("POST", "/permission/per_25/reply", {"reply": "reject"})
    assert channel.read(_event("session.status", sessionID="other",
                               status={"type": "idle"})) is None
    ended = channel.read(_event("session.status", sessionID="ses_new", status={"type": "idle"}))
    assert isinstance(ended, TurnEnded) and ended.ok


def test_a_restart_prompts_the_noted_session_and_an_error_fails_the_turn():
    channel, calls, _ = _channel(_Memory(session_id="ses_old"), resume=True)
    channel.read("opencode server listening on http://127.0.0.1:1")
    channel.read(_event("server.connected"))
    channel.start_turn("Continue from where you left off.")
    assert calls == [("POST", "/session/ses_old/prompt_async",
                      {"parts": [{"type": "text", "text": "Continue from where you left off."}]})]
    channel.read(_event("session.error", sessionID="ses_old", error={"name": "APIError"}))
    ended = channel.read(_event("session.idle", sessionID="ses_old"))
    assert isinstance(ended, TurnEnded) and not ended.ok and "APIError" in ended.detail
