"""The Anthropic Messages API as the world serves it to Claude Code (``POST /v1/messages``).

Pure functions over parsed JSON and bytes; no I/O. The shapes are those Claude Code 2.1
sends and reads (recorded in ``tests/unit/harness/clis/test_wire_messages.py``).

Guarantees:

* :func:`kind_of` sorts a request: a model call (``/v1/messages``, streamed or not) is
  served from the world's script; anything else (``count_tokens``, a probe of ``/``) is
  :data:`AUXILIARY` and answered by :func:`auxiliary_reply` without the world;
* :func:`conversation` turns the request's ``messages`` into the contract's
  :class:`~harness.contract.Message` s: user text (blocks the CLI adds for itself, its
  ``<system-reminder>`` s, left out), assistant text and tool calls, and one ``tool`` message
  per ``tool_result``; a ``tool_use`` is read back through ``decode`` (the ledger command it
  carries), else kept as the CLI's own tool with its own input, never guessed;
* :class:`MessagesStream` writes the server-sent events of one answer, block by block, so
  the driver can stop after any block (an EOF cut: the stream ends without
  ``message_stop``); :func:`whole_message` is the same answer not streamed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from harness.contract import Message, ToolCall

MODEL = "model"
AUXILIARY = "auxiliary"
REMINDER = "<system-reminder>"


@dataclass(frozen=True, slots=True)
class ToolUse:
    """A call of one of the CLI's own tools, as the answer carries it."""

    id: str
    name: str
    input: dict[str, Any]


def kind_of(method: str, path: str) -> str:
    route = path.split("?", 1)[0].rstrip("/")
    if method == "POST" and route.endswith("/v1/messages"):
        return MODEL
    return AUXILIARY


def auxiliary_reply(path: str) -> tuple[int, dict[str, Any]]:
    """Status and JSON body for a request that is not a model call."""
    if "count_tokens" in path:
        return 200, {"input_tokens": 1}
    return 404, {"type": "error", "error": {"type": "not_found_error",
                                            "message": f"{path}: not served by the harness"}}


def is_streamed(body: Mapping[str, Any]) -> bool:
    return bool(body.get("stream"))


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for block in content or ():
        if isinstance(block, Mapping) and block.get("type") == "text":
            text = str(block.get("text", ""))
            if not text.lstrip().startswith(REMINDER):
                parts.append(text)
    return "".join(parts)


def conversation(body: Mapping[str, Any],
                 decode: Callable[[str, str, Mapping[str, Any]], ToolCall]) -> tuple[Message, ...]:
    """The request's conversation as contract messages (see the module docstring);
    ``decode(id, name, input)`` reads a ``tool_use`` back into the world's call."""
    messages: list[Message] = []
    for entry in body.get("messages") or ():
        if not isinstance(entry, Mapping):
            continue
        role, content = entry.get("role"), entry.get("content")
        if role == "assistant":
            blocks = [content] if isinstance(content, str) else list(content or ())
            calls = tuple(decode(str(b.get("id", "")), str(b.get("name", "")),
                                 b.get("input") if isinstance(b.get("input"), Mapping) else {})
                          for b in blocks if isinstance(b, Mapping) and b.get("type") == "tool_use")
            messages.append(Message(role="assistant", content=_text_of(content),
                                    tool_calls=calls))
        elif role == "user":
            blocks = [] if isinstance(content, str) else list(content or ())
            for block in blocks:
                if isinstance(block, Mapping) and block.get("type") == "tool_result":
                    messages.append(Message(role="tool", tool_call_id=str(block.get("tool_use_id", "")),
                                            content=_text_of(block.get("content"))))
            text = _text_of(content)
            if text:
                messages.append(Message(role="user", content=text))
    return tuple(messages)


def _event(kind: str, data: Mapping[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode()


class MessagesStream:
    """The events of one streamed answer; each method returns the bytes to send next."""

    def __init__(self, message_id: str, model: str) -> None:
        self.message_id = message_id
        self.model = model
        self._index = 0
        self._tool_use = False

    def start(self) -> bytes:
        return _event("message_start", {"type": "message_start", "message": {
            "id": self.message_id, "type": "message", "role": "assistant", "model": self.model,
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1}}})

    def text(self, text: str) -> bytes:
        index, self._index = self._index, self._index + 1
        return (_event("content_block_start", {"type": "content_block_start", "index": index,
                                               "content_block": {"type": "text", "text": ""}})
                + _event("content_block_delta", {"type": "content_block_delta", "index": index,
                                                 "delta": {"type": "text_delta", "text": text}})
                + _event("content_block_stop", {"type": "content_block_stop", "index": index}))

    def tool_use(self, use: ToolUse) -> bytes:
        index, self._index = self._index, self._index + 1
        self._tool_use = True
        return (_event("content_block_start", {"type": "content_block_start", "index": index,
                                               "content_block": {"type": "tool_use", "id": use.id,
                                                                 "name": use.name, "input": {}}})
                + _event("content_block_delta", {"type": "content_block_delta", "index": index,
                                                 "delta": {"type": "input_json_delta",
                                                           "partial_json": json.dumps(use.input)}})
                + _event("content_block_stop", {"type": "content_block_stop", "index": index}))

    def finish(self) -> bytes:
        reason = "tool_use" if self._tool_use else "end_turn"
        return (_event("message_delta", {"type": "message_delta",
                                         "delta": {"stop_reason": reason, "stop_sequence": None},
                                         "usage": {"output_tokens": 1}})
                + _event("message_stop", {"type": "message_stop"}))


def whole_message(message_id: str, model: str, text: str,
                  uses: tuple[ToolUse, ...]) -> dict[str, Any]:
    """The answer as one JSON body (a request with ``stream`` false)."""
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    content += [{"type": "tool_use", "id": u.id, "name": u.name, "input": u.input} for u in uses]
    return {"id": message_id, "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": "tool_use" if uses else "end_turn",
            "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1}}
