"""The OpenAI Responses API as the world serves it to the Codex CLI (``POST .../responses``).

Pure functions over parsed JSON and bytes; no I/O. The shapes are those Codex CLI 0.171
sends and reads (recorded in ``tests/unit/harness/clis/test_wire_responses.py``).

Guarantees:

* :func:`kind_of` sorts a request: ``POST`` to a path ending in ``/responses`` is a model
  call; anything else (a probe, a models list) is :data:`AUXILIARY` and answered by
  :func:`auxiliary_reply` without the world;
* :func:`conversation` turns the request's ``input`` items into the contract's
  :class:`~harness.contract.Message` s: the user's messages (the context Codex adds for
  itself, ``<environment_context>`` and the like, and ``developer`` messages left out), each
  run of assistant-side items (an assistant ``message``, ``reasoning``, ``function_call`` s)
  as one assistant message with its text and calls, the way the world served them, and one
  ``tool`` message per ``function_call_output``; a ``function_call`` is read back through
  ``decode`` (the ledger command it carries), else kept as the CLI's own call, never guessed;
* :class:`ResponsesStream` writes the server-sent events of one answer, item by item
  (``response.created``, ``response.output_item.added`` / ``.done`` for each message and
  ``function_call``, ``response.completed`` last), so the driver can stop after any item:
  an EOF cut is a stream without ``response.completed``.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Mapping

from harness.contract import Message, ToolCall

MODEL = "model"
AUXILIARY = "auxiliary"
CONTEXT_PREFIXES = ("<environment_context>", "<user_instructions>", "<skills_instructions>",
                    "# AGENTS.md instructions", "<permissions instructions>",
                    "<collaboration_mode>", "<personality_spec>", "<apps_instructions>")
"""User-role messages Codex writes for itself (context, not what the user said)."""
ASSISTANT_SIDE = ("reasoning", "function_call", "local_shell_call", "custom_tool_call")


def kind_of(method: str, path: str) -> str:
    route = path.split("?", 1)[0].rstrip("/")
    if method == "POST" and route.endswith("/responses"):
        return MODEL
    return AUXILIARY


def auxiliary_reply(path: str) -> tuple[int, dict[str, Any]]:
    """Status and JSON body for a request that is not a model call."""
    if path.split("?", 1)[0].rstrip("/").endswith("/models"):
        return 200, {"object": "list", "data": []}
    return 404, {"error": {"type": "not_found", "message": f"{path}: not served by the harness"}}


def _text_of(content: Any, kinds: tuple[str, ...]) -> str:
    if isinstance(content, str):
        return content
    return "".join(str(part.get("text", "")) for part in content or ()
                   if isinstance(part, Mapping) and part.get("type") in kinds)


def _is_context(text: str) -> bool:
    return text.lstrip().startswith(CONTEXT_PREFIXES)


def _arguments(item: Mapping[str, Any]) -> dict[str, Any]:
    raw = item.get("arguments")
    if isinstance(raw, Mapping):
        return dict(raw)
    try:
        parsed = json.loads(raw) if isinstance(raw, str) else {}
    except ValueError:
        return {"arguments": raw}
    return parsed if isinstance(parsed, dict) else {"arguments": parsed}


def conversation(body: Mapping[str, Any],
                 decode: Callable[[str, str, Mapping[str, Any]], ToolCall]) -> tuple[Message, ...]:
    """The request's conversation as contract messages (see the module docstring);
    ``decode(call_id, name, arguments)`` reads a ``function_call`` back into the world's call."""
    messages: list[Message] = []
    text: list[str] = []
    calls: list[ToolCall] = []
    open_answer = False

    def close_answer() -> None:
        nonlocal open_answer
        if open_answer:
            messages.append(Message(role="assistant", content="".join(text),
                                    tool_calls=tuple(calls)))
            text.clear()
            calls.clear()
            open_answer = False

    for item in body.get("input") or ():
        if not isinstance(item, Mapping):
            continue
        kind, role = item.get("type", "message"), item.get("role")
        if kind == "message" and role == "assistant":
            if calls:  # text after calls starts another answer
                close_answer()
            open_answer = True
            text.append(_text_of(item.get("content"), ("output_text", "text")))
        elif kind in ASSISTANT_SIDE:
            open_answer = True
            if kind == "function_call":
                calls.append(decode(str(item.get("call_id", "")), str(item.get("name", "")),
                                    _arguments(item)))
            elif kind == "local_shell_call":
                action = item.get("action") if isinstance(item.get("action"), Mapping) else {}
                command = action.get("command")
                script = command[-1] if isinstance(command, list) and command else ""
                calls.append(decode(str(item.get("call_id", "")), "local_shell",
                                    {"cmd": script}))
        elif kind in ("function_call_output", "local_shell_call_output",
                      "custom_tool_call_output"):
            close_answer()
            output = item.get("output")
            if isinstance(output, Mapping):
                output = output.get("content", json.dumps(output))
            elif isinstance(output, list):
                output = _text_of(output, ("input_text", "output_text", "text"))
            messages.append(Message(role="tool", tool_call_id=str(item.get("call_id", "")),
                                    content=str(output if output is not None else "")))
        elif kind == "message" and role == "user":
            close_answer()
            said = _text_of(item.get("content"), ("input_text", "text"))
            if said and not _is_context(said):
                messages.append(Message(role="user", content=said))
        else:
            close_answer()  # developer and system messages: the CLI's own instructions
    close_answer()
    return tuple(messages)


def _event(kind: str, data: Mapping[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


class ResponsesStream:
    """The events of one streamed answer; each method returns the bytes to send next."""

    content_type = "text/event-stream"

    def __init__(self, response_id: str, model: str, shell_tool: str,
                 shell_input: Callable[[ToolCall], dict[str, Any]]) -> None:
        self.response_id = response_id
        self.model = model
        self.shell_tool = shell_tool
        self.shell_input = shell_input
        self._index = 0

    def _response(self, status: str) -> dict[str, Any]:
        return {"id": self.response_id, "object": "response", "model": self.model,
                "status": status, "output": []}

    def start(self) -> bytes:
        return _event("response.created", {"response": self._response("in_progress")})

    def _item(self, item: dict[str, Any], started: dict[str, Any], middle: bytes = b"") -> bytes:
        index, self._index = self._index, self._index + 1
        return (_event("response.output_item.added", {"output_index": index, "item": started})
                + middle
                + _event("response.output_item.done", {"output_index": index, "item": item}))

    def text(self, text: str) -> bytes:
        item_id = f"msg_{self.response_id}_{self._index}"
        item = {"type": "message", "id": item_id, "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}]}
        delta = _event("response.output_text.delta", {
            "item_id": item_id, "output_index": self._index, "content_index": 0, "delta": text})
        return self._item(item, {**item, "status": "in_progress", "content": []}, delta)

    def call(self, call: ToolCall) -> bytes:
        item = {"type": "function_call", "id": f"fc_{self.response_id}_{self._index}",
                "call_id": call.tool_call_id, "name": self.shell_tool, "status": "completed",
                "arguments": json.dumps(self.shell_input(call))}
        return self._item(item, {**item, "status": "in_progress", "arguments": ""})

    def finish(self) -> bytes:
        return _event("response.completed", {"response": {
            **self._response("completed"),
            "usage": {"input_tokens": 1, "input_tokens_details": None, "output_tokens": 1,
                      "output_tokens_details": None, "total_tokens": 2}}})
