"""The scripted model serves each session its script, duplicates on repeat, then "done."."""

import pytest

from harness import contract as c
from harness.trace.record import Kind
from harness.world.log import Channel, EventLog
from harness.world.model import ScriptedModel, ScriptedResponse, StreamEnd


def channel(log: EventLog, raised: list | None = None) -> Channel:
    raised = raised if raised is not None else []
    return Channel(0, lambda kind, data: log.append("world", kind, 0, data, guarded=True),
                   lambda: None, raised.append)


def request(rid: str, session: str = "s1") -> c.ModelRequest:
    return c.ModelRequest(rid, session, (c.Message("user", "hi"),), ("write_file",))


def drain(stream) -> list[c.ModelChunk]:
    chunks = []
    while True:
        chunk = stream.next_chunk()
        chunks.append(chunk)
        if chunk.kind in (c.ChunkKind.END, c.ChunkKind.EOF):
            return chunks


CALL = c.ToolCall("c1", "write_file", {"path": "/a", "content": "x"})


def test_script_order_per_session_repeat_and_default_answer():
    model = ScriptedModel([
        ScriptedResponse("s1", "first", (CALL,), repeat=2),
        ScriptedResponse("s2", "other session"),
        ScriptedResponse("s1", "second"),
    ])
    log = EventLog()
    texts = []
    for rid in ("r1", "r2", "r3", "r4"):
        chunks = drain(model.open(request(rid), channel(log)))
        texts.append("".join(ch.text for ch in chunks if ch.kind is c.ChunkKind.TEXT))
    assert texts == ["first", "first", "second", "done."]
    assert [e.data["script_index"] for e in log.events() if e.kind == Kind.MODEL_REQUEST] == [0, 0, 2, -1]
    assert model.remaining("s2") == 1 and model.remaining("s1") == 0


def test_chunks_text_words_then_calls_then_end_and_records():
    model = ScriptedModel([ScriptedResponse("s1", "I will  write it", (CALL,))])
    log = EventLog()
    stream = model.open(request("r1"), channel(log))
    chunks = drain(stream)
    assert [ch.kind for ch in chunks] == [c.ChunkKind.TEXT] * 4 + [c.ChunkKind.TOOL_CALL, c.ChunkKind.END]
    assert "".join(ch.text for ch in chunks) == "I will  write it"
    assert chunks[4].tool_call == CALL
    assert stream.next_chunk().kind is c.ChunkKind.EOF  # after the end, only EOF
    opened, ended = log.events()
    assert opened.kind == Kind.MODEL_REQUEST and opened.data["messages"] == [c.to_json(c.Message("user", "hi"))]
    assert opened.data["tools"] == ["write_file"] and opened.data["request_id"] == "r1"
    assert ended.kind == Kind.MODEL_STREAM_END
    assert ended.data == {"request_id": "r1", "how": "end", "text": "I will  write it",
                          "tool_call_ids": ["c1"], "tool_calls": [c.to_json(CALL)]}


def test_eof_keeps_partial_text_and_never_ends():
    model = ScriptedModel([ScriptedResponse("s1", "part", end=StreamEnd.EOF)])
    log = EventLog()
    chunks = drain(model.open(request("r1"), channel(log)))
    assert [ch.kind for ch in chunks] == [c.ChunkKind.TEXT, c.ChunkKind.EOF]
    assert log.events()[-1].data["how"] == "eof" and log.events()[-1].data["text"] == "part"


@pytest.mark.parametrize("end, error", [(StreamEnd.TRANSPORT_ERROR, c.ModelTransportError),
                                        (StreamEnd.CANCELLED, c.ModelStreamCancelled)])
def test_errors_are_raised_after_the_served_chunks_and_noted(end, error):
    model = ScriptedModel([ScriptedResponse("s1", "abc", end=end)])
    log, raised = EventLog(), []
    stream = model.open(request("r1"), channel(log, raised))
    assert stream.next_chunk().text == "abc"
    with pytest.raises(error):
        stream.next_chunk()
    with pytest.raises(error):
        stream.next_chunk()
    ends = [e for e in log.events() if e.kind == Kind.MODEL_STREAM_END]
    assert len(ends) == 1 and ends[0].data["how"] == end.value  # recorded once
    assert [type(e) for e in raised] == [error, error]


def test_a_conversation_is_recorded_as_sent_each_message_encoded_once_while_it_is_kept():
    """The recorded messages are to_json of what was sent; a message object the previous
    request carried shares its JSON, unless its args were changed in place since."""
    model = ScriptedModel([])
    log = EventLog()
    args = {"path": "/a", "content": "x"}
    user = c.Message("user", "hi")
    asked = c.Message("assistant", "", tool_calls=(c.ToolCall("c1", "write_file", args),))
    result = c.Message("tool", "ok", tool_call_id="c1")
    sent = [(user,), (user, asked), (user, asked, result)]
    for number, messages in enumerate(sent):
        model.open(c.ModelRequest(f"r{number}", "s1", messages, ()), channel(log))
    expected = [c.to_json(m) for m in sent]
    args["content"] = "changed in place"  # an implementation's own business, recorded as is
    model.open(c.ModelRequest("r3", "s1", (user, asked, result), ()), channel(log))
    model.open(c.ModelRequest("r4", "s2", (c.Message("user", "other"),), ()), channel(log))
    recorded = [e.data["messages"] for e in log.events() if e.kind == Kind.MODEL_REQUEST]
    assert recorded[:3] == expected
    assert recorded[3] == c.to_json((user, asked, result))
    assert recorded[3][1]["tool_calls"][0]["args"]["content"] == "changed in place"
    assert recorded[2][1]["tool_calls"][0]["args"]["content"] == "x"
    assert recorded[2][0] is recorded[1][0] is recorded[0][0]  # encoded once
    assert recorded[3][1] is not recorded[2][1]  # encoded again after the change
    assert recorded[4] == [c.to_json(c.Message("user", "other"))]
