"""The OpenAI Chat Completions API as the world serves it to OpenCode
(``POST .../chat/completions``).

Pure functions over parsed JSON and bytes; no I/O. The shapes are those OpenCode 1.18
(its OpenAI-compatible provider) sends and reads (recorded in
``tests/unit/harness/clis/test_wire_chat.py``).

Guarantees:

* :func:`kind_of` sorts a request: ``POST`` to a path ending in ``/chat/completions`` is a
  model call; anything else (a models list, a probe) is :data:`AUXILIARY`, answered by
  :func:`auxiliary_reply` without the world;
* :func:`is_title_request` recognises the request OpenCode makes to name a new session (its
  ``title`` agent: no tools, the system prompt of a title generator): not part of the
  conversation, answered by :func:`title_answer` without the world;
* :func:`conversation` turns the request's ``messages`` into the contract's
  :class:`~harness.contract.Message` s: ``system`` messages left out, user text, assistant
  text and ``tool_calls`` (read back through ``decode``: the ledger command a call carries,
  else the CLI's own call, never guessed) and ``tool`` messages;
* :class:`ChatStream` writes the chunks of one answer (a role chunk, the text, each tool call
  whole, then a chunk with ``finish_reason`` and ``data: [DONE]``), so the driver can stop
  after any of them: an EOF cut is a stream without ``finish_reason`` or ``[DONE]``.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Mapping

from harness.contract import Message, ToolCall

MODEL = "model"
AUXILIARY = "auxiliary"
TITLE_MARKER = "You are a title generator"
TITLE = "lifecycle-harness session"


def kind_of(method: str, path: str) -> str:
    route = path.split("?", 1)[0].rstrip("/")
    if method == "POST" and route.endswith("/chat/completions"):
        return MODEL
    return AUXILIARY


def auxiliary_reply(path: str) -> tuple[int, dict[str, Any]]:
    if path.split("?", 1)[0].rstrip("/").endswith("/models"):
        return 200, {"object": "list", "data": []}
    return 404, {"error": {"type": "not_found", "message": f"{path}: not served by the harness"}}


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(str(part.get("text", "")) for part in content or ()
                   if isinstance(part, Mapping) and part.get("type") == "text")


def is_title_request(body: Mapping[str, Any]) -> bool:
    if body.get("tools"):
        return False
    for message in body.get("messages") or ():
        if isinstance(message, Mapping) and message.get("role") == "system":
            return _text_of(message.get("content")).lstrip().startswith(TITLE_MARKER)
    return False


def _arguments(function: Mapping[str, Any]) -> dict[str, Any]:
    raw = function.get("arguments")
    try:
        parsed = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return {"arguments": raw}
    return dict(parsed) if isinstance(parsed, Mapping) else {"arguments": parsed}


def conversation(body: Mapping[str, Any],
                 decode: Callable[[str, str, Mapping[str, Any]], ToolCall]) -> tuple[Message, ...]:
    """The request's conversation as contract messages (see the module docstring)."""
    messages: list[Message] = []
    for entry in body.get("messages") or ():
        if not isinstance(entry, Mapping):
            continue
        role = entry.get("role")
        if role == "assistant":
            calls = []
            for call in entry.get("tool_calls") or ():
                if isinstance(call, Mapping):
                    function = call.get("function") if isinstance(call.get("function"),
                                                                  Mapping) else {}
                    calls.append(decode(str(call.get("id", "")), str(function.get("name", "")),
                                        _arguments(function)))
            messages.append(Message(role="assistant", content=_text_of(entry.get("content")),
                                    tool_calls=tuple(calls)))
        elif role == "tool":
            messages.append(Message(role="tool", tool_call_id=str(entry.get("tool_call_id", "")),
                                    content=_text_of(entry.get("content"))))
        elif role == "user":
            messages.append(Message(role="user", content=_text_of(entry.get("content"))))
    return tuple(messages)


class ChatStream:
    """The chunks of one streamed answer; each method returns the bytes to send next."""

    content_type = "text/event-stream"

    def __init__(self, completion_id: str, model: str, shell_tool: str,
                 shell_input: Callable[[ToolCall], dict[str, Any]]) -> None:
        self.completion_id = completion_id
        self.model = model
        self.shell_tool = shell_tool
        self.shell_input = shell_input
        self._calls = 0

    def _chunk(self, delta: Mapping[str, Any], finish: str | None = None,
               usage: Mapping[str, Any] | None = None) -> bytes:
        data: dict[str, Any] = {
            "id": self.completion_id, "object": "chat.completion.chunk", "created": 0,
            "model": self.model, "choices": [{"index": 0, "delta": dict(delta),
                                              "finish_reason": finish}]}
        if usage is not None:
            data["usage"] = dict(usage)
        return f"data: {json.dumps(data)}\n\n".encode()

    def start(self) -> bytes:
        return self._chunk({"role": "assistant", "content": ""})

    def text(self, text: str) -> bytes:
        return self._chunk({"content": text})

    def call(self, call: ToolCall) -> bytes:
        index, self._calls = self._calls, self._calls + 1
        return self._chunk({"tool_calls": [{
            "index": index, "id": call.tool_call_id, "type": "function",
            "function": {"name": self.shell_tool,
                         "arguments": json.dumps(self.shell_input(call))}}]})

    def finish(self) -> bytes:
        return (self._chunk({}, "tool_calls" if self._calls else "stop",
                            {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2})
                + b"data: [DONE]\n\n")


def title_answer(body: Mapping[str, Any]) -> tuple[str, bytes]:
    """The answer to a title request (streamed or not, as asked)."""
    model = str(body.get("model") or "model")
    if body.get("stream"):
        stream = ChatStream("chatcmpl-lh-title", model, "", lambda call: {})
        return stream.content_type, stream.start() + stream.text(TITLE) + stream.finish()
    return "application/json", json.dumps({
        "id": "chatcmpl-lh-title", "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": TITLE},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()


def whole_answer(completion_id: str, model: str, text: str, calls: list[dict[str, Any]]
                 ) -> dict[str, Any]:
    """The answer as one JSON body (a request with ``stream`` false)."""
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = calls
    return {"id": completion_id, "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
