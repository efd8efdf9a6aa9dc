"""Incremental checkpoints (continuation + store v2): snapshots and deltas rebuild exactly the
conversation a full write would hold, the per-connection memo is never fooled (rollback,
another instance), the store grows linearly, and an allowed write takes two synced commits of five."""

from __future__ import annotations

import sqlite3

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.contract import Message, Outcome, ToolCall, TurnStatus
from ref_fakes import FakeWorld, Reply, allow, call, config
from reference_impl import checkpoint_codec, continuation
from reference_impl.checkpoint_codec import Delta
from reference_impl.errors import CheckpointFormatError
from reference_impl.store import Store

IDS = st.sampled_from(["a", "b", "c", "d"])
APPENDS = st.lists(
    st.one_of(
        st.builds(lambda text: Message("user", text), st.text(max_size=5)),
        st.builds(lambda ids: Message("assistant", "", tool_calls=tuple(
            ToolCall(i, "read_file", {"path": "/" + i}) for i in ids)), st.lists(IDS, max_size=4)),
        st.builds(lambda i: Message("tool", "ok", tool_call_id=i, outcome=Outcome.SUCCEEDED), IDS),
    ),
    max_size=25,
)


def _session(store: Store, session_id: str = "s") -> None:
    with store.transaction() as conn:
        conn.execute("INSERT INTO sessions (session_id, config_json, rules_json,"
                     " permission_version, turn_status) VALUES (?, '{}', '[]', 1, 'running')",
                     (session_id,))


def _fresh_read(path: str, session_id: str = "s") -> continuation.State | None:
    """The state as a connection without any memo reads it from the rows alone."""
    plain = sqlite3.connect(path)
    plain.row_factory = sqlite3.Row
    try:
        return continuation.state(plain, session_id)
    finally:
        plain.close()


@settings(max_examples=60, deadline=None)
@given(APPENDS, st.integers(0, 400))
def test_deltas_and_snapshots_rebuild_the_conversation_exactly(tmp_path_factory, appends,
                                                               snapshot_min):
    path = str(tmp_path_factory.mktemp("store") / "s.sqlite3")
    store = Store.open_file(path)
    _session(store)
    original = continuation.SNAPSHOT_BYTES_MIN
    continuation.SNAPSHOT_BYTES_MIN = snapshot_min  # small: snapshots among the deltas
    try:
        expected: tuple[Message, ...] = ()
        for message in appends:
            with store.transaction() as conn:
                continuation.append(conn, "s", message, reason="test", now=0.0)
            expected += (message,)
            remembered = continuation.state(store.connection, "s")
            assert remembered.messages == expected
            assert remembered.pending == continuation.pending_tool_calls(expected)
        rebuilt = _fresh_read(path)
        if appends:
            assert rebuilt.messages == expected and rebuilt.sequence == len(appends)
            assert rebuilt.pending == continuation.pending_tool_calls(expected)
            assert rebuilt.chain == continuation.state(store.connection, "s").chain
    finally:
        continuation.SNAPSHOT_BYTES_MIN = original
        store.close()


def test_a_delta_is_written_until_the_deltas_outgrow_their_snapshot(tmp_path, monkeypatch):
    monkeypatch.setattr(continuation, "SNAPSHOT_BYTES_MIN", 2_000)
    store = Store.open_file(str(tmp_path / "s.sqlite3"))
    _session(store)
    for index in range(200):
        with store.transaction() as conn:
            continuation.append(conn, "s", Message("user", f"message {index}"), reason="t", now=0.0)
    rows = store.connection.execute(
        "SELECT sequence, base_sequence, size_bytes FROM checkpoints ORDER BY sequence").fetchall()
    snapshots = [row for row in rows if row["base_sequence"] is None]
    deltas = [row for row in rows if row["base_sequence"] is not None]
    assert rows[0]["base_sequence"] is None and len(snapshots) >= 2 and deltas
    # each delta stays small (what it appends), and snapshots cost at most about the deltas
    assert max(row["size_bytes"] for row in deltas) < 1_000
    delta_bytes = sum(row["size_bytes"] for row in deltas)
    assert sum(row["size_bytes"] for row in snapshots) <= 2 * delta_bytes + 2 * 2_000
    store.close()


def test_a_rolled_back_write_never_reaches_a_later_read(tmp_path):
    store = Store.open_file(str(tmp_path / "s.sqlite3"))
    _session(store)
    with store.transaction() as conn:
        continuation.append(conn, "s", Message("user", "kept"), reason="t", now=0.0)
    with pytest.raises(RuntimeError):
        with store.transaction() as conn:
            continuation.append(conn, "s", Message("user", "rolled back"), reason="t", now=0.0)
            raise RuntimeError("abort")
    assert [m.content for m in continuation.messages(store.connection, "s")] == ["kept"]
    with store.transaction() as conn:  # same sequence as the rolled-back one, other content
        continuation.append(conn, "s", Message("user", "second"), reason="t", now=0.0)
    assert [m.content for m in continuation.messages(store.connection, "s")] == ["kept", "second"]
    store.close()


def test_another_instance_write_is_seen_by_the_first(tmp_path):
    path = str(tmp_path / "s.sqlite3")
    first, second = Store.open_file(path), Store.open_file(path)
    _session(first)
    with first.transaction() as conn:
        continuation.append(conn, "s", Message("user", "one"), reason="t", now=0.0)
    assert len(continuation.messages(first.connection, "s")) == 1  # remembered by the first
    with second.transaction() as conn:
        continuation.append(conn, "s", Message("user", "two"), reason="t", now=0.0)
    # Another instance runs only while the first waits in a world call (or between driver
    # calls); the runtime's world tells the first's row cache so, as here.
    first.rows.others_may_have_run()
    assert [m.content for m in continuation.messages(first.connection, "s")] == ["one", "two"]
    with second.transaction() as conn:  # and inside a transaction, without being told
        continuation.append(conn, "s", Message("user", "three"), reason="t", now=0.0)
    with first.transaction() as conn:
        assert [m.content for m in continuation.messages(conn, "s")] == ["one", "two", "three"]
    first.close()
    second.close()


def test_a_delta_is_not_a_loadable_checkpoint_and_garbage_is_a_format_error():
    delta = Delta("s", 4, 3, "ex-1", (Message("user", "hi"),), ())
    data = checkpoint_codec.encode_delta(delta)
    assert checkpoint_codec.decode_delta(data) == delta
    with pytest.raises(CheckpointFormatError):
        checkpoint_codec.decode(data)
    for garbage in (b"\xff", b"[]", b'{"format": "reference_impl.checkpoint_delta"}'):
        with pytest.raises(CheckpointFormatError, match="checkpoint delta"):
            checkpoint_codec.decode_delta(garbage)


def test_a_missing_snapshot_is_a_clear_error(tmp_path):
    path = str(tmp_path / "s.sqlite3")
    store = Store.open_file(path)
    _session(store)
    for text in ("one", "two"):
        with store.transaction() as conn:
            continuation.append(conn, "s", Message("user", text), reason="t", now=0.0)
    with store.transaction() as conn:
        conn.execute("DELETE FROM checkpoints WHERE base_sequence IS NULL")
    store.close()
    with pytest.raises(CheckpointFormatError, match="not in the store"):
        _fresh_read(path)


def test_a_store_of_schema_version_1_opens_and_continues(tmp_path):
    path = str(tmp_path / "old.sqlite3")
    from ref_fakes import version_1_store

    old = version_1_store(path)
    old.execute("INSERT INTO sessions VALUES ('s', '{}', '[]', 1, 'idle', 0)")
    full = checkpoint_codec.encode(checkpoint_codec.Continuation(
        "s", 1, "", (Message("user", "from v1"),), ()))
    old.execute("INSERT INTO checkpoints (session_id, sequence, format_version, data, size_bytes,"
                " failure_entries, last_execution_id, reason, created_at)"
                " VALUES ('s', 1, 3, ?, ?, 0, '', 'old', 0)", (full, len(full)))
    old.close()
    store = Store.open_file(path)
    with store.transaction() as conn:
        continuation.append(conn, "s", Message("user", "after"), reason="t", now=0.0)
    assert [m.content for m in _fresh_read(path).messages] == ["from v1", "after"]
    store.close()


def test_a_response_of_more_calls_than_the_request_guard_runs_them_all(start, monkeypatch):
    from reference_impl import turns
    monkeypatch.setattr(turns, "MAX_MODEL_REQUESTS_PER_DRIVE", 2)
    calls = tuple(call(f"c{i}", "read_file", path=f"/repo/{i}") for i in range(1, 6))
    world = FakeWorld(replies={"s1": [Reply("reading", calls)]})
    result = start(world, config(rules=(allow("read_file"),))).run_turn("s1", "read")
    assert result.status is TurnStatus.COMPLETED and len(world.ledger) == 5
    endless = FakeWorld(replies={"s2": [Reply("again", (call(f"d{i}", "read_file", path="/x"),))
                                        for i in range(5)]})
    stopped = start(endless, config("s2", rules=(allow("read_file"),))).run_turn("s2", "loop")
    assert stopped.status is TurnStatus.INCOMPLETE and len(endless.requests) == 2

