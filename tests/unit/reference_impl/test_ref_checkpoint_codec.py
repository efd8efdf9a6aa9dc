"""checkpoint_codec: versioned format, writer-independent readers, old fixtures that load and
continue (L1.6), checkpoints within capacity (L1.1), repair that never guesses (L4.8)."""

from __future__ import annotations

import json
from importlib import resources

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.contract import (
    SAFE_INTEGER_MAX,
    FailureKind,
    Message,
    Outcome,
    ToolCall,
    TurnStatus,
    canonical_json,
    from_json,
)
from ref_fakes import FakeWorld, Reply, config
from reference_impl import CHECKPOINT_FIXTURES, checkpoint_codec
from reference_impl.checkpoint_codec import CURRENT_FORMAT_VERSION, Continuation, decode, encode
from reference_impl.errors import CheckpointFormatError
from reference_impl.failure_policy import FailureEntry

texts = st.text(max_size=20)
# Numbers canonical JSON (RFC 8785) writes, and reads back as equal Python values: a float
# past 2**53 such as 5.340122595676513e16 is written 53401225956765130 and read back as that
# int, which Python does not find equal to the float (the bytes are the same again:
# test_canonical_json.py)
numbers = (st.integers(-SAFE_INTEGER_MAX, SAFE_INTEGER_MAX)
           | st.floats(-float(SAFE_INTEGER_MAX), float(SAFE_INTEGER_MAX)))
calls = st.builds(ToolCall, texts, texts, st.dictionaries(texts, numbers | texts, max_size=3))
messages = st.builds(
    Message,
    role=st.sampled_from(["user", "assistant", "tool"]),
    content=texts,
    tool_call_id=texts,
    tool_calls=st.lists(calls, max_size=2).map(tuple),
    outcome=st.none() | st.sampled_from(Outcome),
    failure_kind=st.none() | st.sampled_from(FailureKind),
    incomplete=st.booleans(),
)
entries = st.builds(FailureEntry, texts, texts, st.sampled_from(FailureKind), st.integers(1, 50), texts)
continuations = st.builds(
    Continuation, texts, st.integers(0, 10**6), texts,
    st.lists(messages, max_size=5).map(tuple), st.lists(entries, max_size=5).map(tuple),
)


@settings(max_examples=80, deadline=None)
@given(continuations)
def test_decode_inverts_encode(continuation):
    assert decode(encode(continuation)) == continuation


def _fixture(relative: str) -> tuple[bytes, dict]:
    root = resources.files("reference_impl")
    data = root.joinpath(relative).read_bytes()
    expect = json.loads(root.joinpath(relative.replace(".json", ".expect.json")).read_text())
    return data, expect


@pytest.mark.parametrize("relative", CHECKPOINT_FIXTURES)
def test_every_declared_fixture_is_an_old_format_that_decodes_as_its_sidecar_says(relative):
    data, expect = _fixture(relative)
    continuation = decode(data)
    assert continuation.format_version == expect["source_format_version"] < CURRENT_FORMAT_VERSION
    assert continuation.messages == from_json(tuple[Message, ...], expect["messages"])


@pytest.mark.parametrize("relative", CHECKPOINT_FIXTURES)
def test_rfc_8785_left_every_fixture_and_its_current_form_as_they_were(relative):
    # Canonical JSON became RFC 8785; it differs from the Python text it replaced only for
    # floats, keys beyond U+FFFF and integers past 2**53 - 1, none of which a fixture holds:
    # a fixture's canonical bytes, and the current checkpoint written from it, are unchanged.
    data, _ = _fixture(relative)
    document = json.loads(data)
    python_text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert canonical_json(document) == python_text
    current = json.loads(encode(decode(data)))
    assert encode(decode(data)) == json.dumps(
        current, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def test_a_checkpoint_with_floats_is_written_as_rfc_8785_and_reads_back_equal():
    call = ToolCall("c1", "t", {"ratio": 0.5, "timeout": 30.0, "tiny": 1e-7})
    continuation = Continuation("s1", 1, "", (Message("assistant", "", tool_calls=(call,)),), ())
    data = encode(continuation)
    assert b'{"ratio":0.5,"timeout":30,"tiny":1e-7}' in data
    assert decode(data) == continuation  # 30 reads back as 30, equal to 30.0


def test_the_fixtures_cover_every_old_version(impl):
    versions = {decode(_fixture(f)[0]).format_version for f in impl.info.checkpoint_fixtures}
    assert versions == set(checkpoint_codec.SUPPORTED_FORMAT_VERSIONS) - {CURRENT_FORMAT_VERSION}


@pytest.mark.parametrize("relative", CHECKPOINT_FIXTURES)
def test_a_session_continues_from_an_old_checkpoint(start, impl, data_dir, relative):
    data, expect = _fixture(relative)
    world = FakeWorld(replies={"s1": [Reply("continuing")]})
    runtime = start(world, config())
    runtime.load_checkpoint("s1", data)
    obs = impl.inspect(data_dir)
    assert obs.sessions[0].turn_status is TurnStatus.IDLE  # never marked complete by a repair
    assert obs.checkpoints[-1].format_version == CURRENT_FORMAT_VERSION
    assert all(cp.failure_entries <= 16 for cp in obs.checkpoints)
    result = runtime.run_turn("s1", "carry on")
    carried = world.requests[0].messages
    assert carried[:-1] == from_json(tuple[Message, ...], expect["messages"])
    assert carried[-1] == Message("user", "carry on")
    assert result.status is TurnStatus.COMPLETED


def test_the_v2_fixture_keeps_host_statuses_and_guesses_nothing_from_text():
    continuation = decode(_fixture("fixtures/checkpoints/v2_with_failures.json")[0])
    first_tool = next(m for m in continuation.messages if m.role == "tool")
    assert "not executed" in first_tool.content and first_tool.outcome is Outcome.SUCCEEDED
    assert len(continuation.failure_entries) == 18  # the old format let the table overflow


def test_loading_an_overflowing_v2_table_keeps_only_the_most_recent_entries(start, impl, data_dir):
    runtime = start(FakeWorld(), config())
    runtime.load_checkpoint("s1", _fixture("fixtures/checkpoints/v2_with_failures.json")[0])
    obs = impl.inspect(data_dir)
    assert len(obs.failure_table) == 16 and obs.checkpoints[-1].failure_entries == 16
    assert obs.failure_table[-1].last_execution_id == "ex-legacy00000017"


def test_loading_into_a_session_never_opened_creates_it(start, impl, data_dir):
    runtime = start(FakeWorld())
    runtime.load_checkpoint("fresh", _fixture("fixtures/checkpoints/v1_basic.json")[0])
    assert [s.session_id for s in impl.inspect(data_dir).sessions] == ["fresh"]


@pytest.mark.parametrize(("data", "message"), [
    (b"\xff", "not UTF-8 JSON"),
    (b"[]", "JSON object"),
    (b"{}", "no format version"),
    (b'{"version": 9}', "not supported"),
    (b'{"v": 1, "session": "s", "history": [["robot", "hi"]]}', "role"),
    (b'{"version": 2, "session": "s", "turns": [{"role": "user"}]}', "text"),
    (b'{"format": "reference_impl.checkpoint", "format_version": 3}', "v3"),
])
def test_invalid_checkpoints_say_what_is_wrong(data, message):
    with pytest.raises(CheckpointFormatError, match=message):
        decode(data)
