"""The scripted model: what the world answers to each model request, per session.

Guarantees:

* each session's requests are served that session's ``[[model]]`` responses in script order;
  a response with ``repeat = N`` is served to N consecutive requests unchanged (same text,
  same tool-call ids: a duplicate delivery); once the script is exhausted every request gets
  the default final answer ``"done."`` ending normally (``script_index = -1``);
* the stream yields the text in word-sized chunks (so an implementation must concatenate),
  then the tool calls, then the scripted ending: ``END``, ``EOF``, a
  :class:`~harness.contract.ModelTransportError` or a
  :class:`~harness.contract.ModelStreamCancelled` (raised again if read again);
* the world records ``MODEL_REQUEST`` (full messages as contract JSON, tool names) when a
  stream is opened and ``MODEL_STREAM_END`` once, when the ending is reached. A message object
  that the session's previous request carried too (a conversation carries every earlier
  message in each request) is not encoded again: its JSON is shared by the requests that
  carry it, so encoding a session of N requests costs its N messages, not N times the
  conversation, for an implementation that keeps its message objects (the recorded data is
  the same value; nothing mutates recorded data).
"""

from __future__ import annotations

import collections.abc
import enum
import re
import threading
from dataclasses import dataclass
from typing import Sequence

from harness.contract import (
    ChunkKind,
    Message,
    ModelChunk,
    ModelRequest,
    ModelStreamCancelled,
    ModelTransportError,
    ToolCall,
    to_json,
)
from harness.trace.record import Kind
from harness.world.log import Channel

DEFAULT_ANSWER = "done."


class StreamEnd(enum.StrEnum):
    END = "end"
    EOF = "eof"
    TRANSPORT_ERROR = "transport_error"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class ScriptedResponse:
    session: str
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    end: StreamEnd = StreamEnd.END
    repeat: int = 1


def _word_chunks(text: str) -> list[str]:
    # Word-sized pieces whose concatenation is exactly ``text``.
    return [piece for piece in re.findall(r"\S+\s*|\s+", text) if piece]


class ScriptedStream:
    """One open model stream (implements :class:`harness.contract.ModelStream`)."""

    def __init__(self, request_id: str, response: ScriptedResponse, channel: Channel) -> None:
        self._request_id = request_id
        self._end = response.end
        self._chunks: list[ModelChunk] = [ModelChunk(ChunkKind.TEXT, text=piece)
                                          for piece in _word_chunks(response.text)]
        self._chunks += [ModelChunk(ChunkKind.TOOL_CALL, tool_call=call)
                         for call in response.tool_calls]
        self._position = 0
        self._ended = False
        self._served_text: list[str] = []
        self._served_calls: list[ToolCall] = []
        self._channel = channel
        self._lock = threading.Lock()

    def next_chunk(self) -> ModelChunk:
        self._channel.guard()
        with self._lock:
            if self._position < len(self._chunks):
                chunk = self._chunks[self._position]
                self._position += 1
                if chunk.kind is ChunkKind.TEXT:
                    self._served_text.append(chunk.text)
                elif chunk.tool_call is not None:
                    self._served_calls.append(chunk.tool_call)
                return chunk
            first_end = not self._ended
            self._ended = True
        if first_end:
            self._channel.record(Kind.MODEL_STREAM_END, {
                "request_id": self._request_id,
                "how": self._end.value,
                "text": "".join(self._served_text),
                "tool_call_ids": [call.tool_call_id for call in self._served_calls],
                "tool_calls": to_json(tuple(self._served_calls)),
            })
        if self._end is StreamEnd.TRANSPORT_ERROR:
            error: Exception = ModelTransportError("connection reset by peer (scripted)")
        elif self._end is StreamEnd.CANCELLED:
            error = ModelStreamCancelled("the user cancelled the request (scripted)")
        elif self._end is StreamEnd.END and first_end:
            return ModelChunk(ChunkKind.END)
        else:
            return ModelChunk(ChunkKind.EOF)
        self._channel.raised(error)
        raise error


class ScriptedModel:
    """Serves the script; shared by every instance of a run (the script survives restarts)."""

    def __init__(self, script: Sequence[ScriptedResponse]) -> None:
        self._script = tuple(script)
        self._queues: dict[str, list[int]] = {}
        for index, response in enumerate(self._script):
            self._queues.setdefault(response.session, []).extend([index] * response.repeat)
        self._served: dict[str, int] = {}
        self._lock = threading.Lock()
        self._encoded: dict[str, dict[int, tuple[object, object]]] = {}
        """Per session, the message objects of its latest request, by id, with the object
        (held, so an id is never reused while it is a key) and its JSON. Only the latest
        request's are kept: a conversation carries the earlier messages again, and an
        implementation that rebuilds them for each request (one decoded from the wire) hands
        new objects every time, which must not pile up."""

    def next_response(self, session_id: str) -> tuple[int, ScriptedResponse]:
        """The script index and response for the session's next request (-1: default)."""
        with self._lock:
            queue = self._queues.get(session_id, [])
            position = self._served.get(session_id, 0)
            self._served[session_id] = position + 1
        if position < len(queue):
            index = queue[position]
            return index, self._script[index]
        return -1, ScriptedResponse(session_id, text=DEFAULT_ANSWER)

    def remaining(self, session_id: str) -> int:
        with self._lock:
            return max(0, len(self._queues.get(session_id, [])) - self._served.get(session_id, 0))

    def open(self, request: ModelRequest, channel: Channel) -> ScriptedStream:
        channel.guard()
        index, response = self.next_response(request.session_id)
        channel.record(Kind.MODEL_REQUEST, {
            "request_id": request.request_id,
            "session_id": request.session_id,
            "messages": self._messages_json(request.session_id, request.messages),
            "tools": list(request.tools),
            "script_index": index,
            "instance": channel.instance,
        })
        return ScriptedStream(request.request_id, response, channel)

    def _messages_json(self, session_id: str, messages: object) -> object:
        """``to_json(messages)``, each :class:`Message` object that the session's previous
        request carried too reused with its JSON, while its tool calls' args still equal what
        was encoded (a dict inside a frozen message can still be changed in place; then it is
        encoded afresh)."""
        if isinstance(messages, (str, bytes, bytearray, memoryview)) \
                or not isinstance(messages, collections.abc.Sequence):
            return to_json(messages)
        out = []
        with self._lock:
            before = self._encoded.get(session_id, {})
            now: dict[int, tuple[object, object]] = {}
            for message in messages:
                if type(message) is not Message:
                    out.append(to_json(message))
                    continue
                seen = now.get(id(message)) or before.get(id(message))
                if seen is None or seen[0] is not message or not _args_unchanged(message, seen[1]):
                    seen = (message, to_json(message))
                now[id(message)] = seen
                out.append(seen[1])
            self._encoded[session_id] = now
        return out


def _args_unchanged(message: Message, data: object) -> bool:
    """Do the message's tool calls still hold the args its JSON ``data`` was encoded from?"""
    if not message.tool_calls:
        return True
    calls = data.get("tool_calls") if isinstance(data, dict) else None
    return isinstance(calls, list) and len(calls) == len(message.tool_calls) and all(
        type(call.args) is dict and encoded.get("args") == call.args
        for call, encoded in zip(message.tool_calls, calls))
