"""store: one WAL SQLite file per data dir, durable commits, explicit transactions,
versioned schema; inspect reads it through a fresh read-only connection."""

from __future__ import annotations

import os
import sqlite3

import pytest

from harness.contract import Observation
from reference_impl import store as store_module
from reference_impl.errors import StoreError
from harness.contract import SimulatedCrash
from reference_impl.store import SCHEMA_VERSION, Durability, Store, open_read_only, store_path


def test_one_wal_file_per_data_dir_with_full_sync(tmp_path):
    store = Store.open(str(tmp_path / "d"))
    conn = store.connection
    assert os.path.exists(store_path(str(tmp_path / "d")))
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == store_module.BUSY_TIMEOUT_MS
    store.close()


def test_reopening_does_not_migrate_twice(tmp_path):
    Store.open(str(tmp_path)).close()
    store = Store.open(str(tmp_path))
    rows = store.connection.execute("SELECT version FROM schema_version").fetchall()
    assert [tuple(row) for row in rows] == [(SCHEMA_VERSION,)]
    store.close()


def test_a_store_from_a_newer_schema_is_refused(tmp_path):
    store = Store.open(str(tmp_path))
    with store.transaction() as conn:
        conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    store.close()
    with pytest.raises(StoreError, match="newer than this code"):
        Store.open(str(tmp_path))


def test_an_exception_rolls_the_transaction_back():
    store = Store.open_file(":memory:")
    with pytest.raises(RuntimeError):
        with store.transaction() as conn:
            conn.execute("INSERT INTO runtime_faults (session_id, execution_id, location, error, at)"
                         " VALUES ('s', 'e', 'here', 'x', 0)")
            raise RuntimeError("boom")
    assert store.connection.execute("SELECT COUNT(*) FROM runtime_faults").fetchone()[0] == 0
    assert not store.connection.in_transaction


_FAULT_ROW = ("INSERT INTO runtime_faults (session_id, execution_id, location, error, at)"
              " VALUES ('s', 'e', 'here', 'x', 0)")


def test_a_crash_leaves_the_transaction_uncommitted_like_a_killed_process(tmp_path):
    store = Store.open(str(tmp_path))
    with pytest.raises(SimulatedCrash):
        with store.transaction() as conn:
            conn.execute(_FAULT_ROW)
            raise SimulatedCrash("killed here")
    assert store.connection.in_transaction  # neither committed nor rolled back by us
    reader = open_read_only(str(tmp_path))
    assert reader.execute("SELECT COUNT(*) FROM runtime_faults").fetchone()[0] == 0
    store.close()  # closing an open transaction rolls it back, as the process's death does
    assert reader.execute("SELECT COUNT(*) FROM runtime_faults").fetchone()[0] == 0
    reader.close()


@pytest.mark.parametrize("durability, synchronous", [(Durability.ORDERED, 1),
                                                     (Durability.SYNCED, 2)])
def test_a_commit_is_as_durable_as_asked_and_visible_at_once_either_way(
        tmp_path, durability, synchronous):
    store = Store.open(str(tmp_path))
    reader = Store.open(str(tmp_path))
    with store.transaction(durability) as conn:
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == synchronous
        conn.execute(_FAULT_ROW)
    # another connection (another instance, the harness's inspect) sees it at once
    assert reader.connection.execute("SELECT COUNT(*) FROM runtime_faults").fetchone()[0] == 1
    with store.transaction() as conn:  # the default is synced
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2
    store.close()
    reader.close()


def test_a_second_connection_sees_only_committed_writes(tmp_path):
    first = Store.open(str(tmp_path))
    second = Store.open(str(tmp_path))
    first.connection.execute("BEGIN IMMEDIATE")
    first.connection.execute("INSERT INTO runtime_faults (session_id, execution_id, location, error, at)"
                             " VALUES ('s', 'e', 'here', 'x', 0)")
    assert second.connection.execute("SELECT COUNT(*) FROM runtime_faults").fetchone()[0] == 0
    first.connection.execute("COMMIT")
    assert second.connection.execute("SELECT COUNT(*) FROM runtime_faults").fetchone()[0] == 1
    first.close()
    second.close()


def test_read_only_connection_cannot_write(tmp_path):
    Store.open(str(tmp_path)).close()
    conn = open_read_only(str(tmp_path))
    with pytest.raises(sqlite3.OperationalError):
        conn.execute("INSERT INTO runtime_faults (session_id, execution_id, location, error, at)"
                     " VALUES ('s', 'e', 'here', 'x', 0)")
    conn.close()


def test_inspect_of_a_dir_without_a_store_is_empty_and_creates_nothing(impl, tmp_path):
    assert impl.inspect(str(tmp_path / "nothing")) == Observation()
    assert not os.path.exists(tmp_path / "nothing")


def test_reopening_an_up_to_date_store_commits_nothing(tmp_path):
    Store.open(str(tmp_path)).close()
    reader = open_read_only(str(tmp_path))
    before = reader.execute("PRAGMA data_version").fetchone()[0]
    Store.open(str(tmp_path)).close()
    assert reader.execute("PRAGMA data_version").fetchone()[0] == before  # no commit
    reader.close()


def test_a_new_store_has_the_layout_of_version_1_migrated_forward(tmp_path):
    """A new store is created at the current version at once (no ALTER TABLE); it must be
    the very layout an old store gets by migrating: every table's columns (name, type, not
    null, default, key, position) and every index (columns, uniqueness)."""
    from ref_fakes import version_1_store

    migrated_path = str(tmp_path / "migrated.sqlite3")
    version_1_store(migrated_path).close()
    Store.open_file(migrated_path).close()
    fresh_path = str(tmp_path / "fresh.sqlite3")
    Store.open_file(fresh_path).close()

    def layout(path):
        connection = sqlite3.connect(path)
        tables = [name for (name,) in connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        described = {}
        for table in tables:
            indexes = sorted(
                (tuple(connection.execute(f"PRAGMA index_info('{name}')").fetchall()), unique)
                for _, name, unique, *_ in connection.execute(f"PRAGMA index_list('{table}')"))
            described[table] = (connection.execute(f"PRAGMA table_xinfo('{table}')").fetchall(),
                                indexes)
        version = connection.execute("SELECT version FROM schema_version").fetchall()
        connection.close()
        return described, version

    fresh, migrated = layout(fresh_path), layout(migrated_path)
    assert fresh == migrated
    assert fresh[1] == [(SCHEMA_VERSION,)]
    assert "chain" in [column[1] for column in fresh[0]["checkpoints"][0]]


def test_the_row_cache_drops_what_a_statement_may_have_changed():
    """Each write statement drops the cached rows of the table it writes; anything the
    classification cannot name (a qualified or quoted table, DDL, a rollback) drops all."""
    from reference_impl.store import MISSING, _tables_written

    assert _tables_written("SELECT * FROM sessions") == ()
    assert _tables_written("INSERT OR IGNORE INTO operations (a) VALUES (?)") == ("operations",)
    assert _tables_written("  update sessions SET x = 1") == ("sessions",)
    assert _tables_written("DELETE FROM repeat_budget WHERE a = ?") == ("repeat_budget",)
    assert _tables_written("REPLACE INTO diagnostics(a) VALUES (1)") == ("diagnostics",)
    for unnamed in ('UPDATE "sessions" SET x = 1', "UPDATE main.sessions SET x = 1",
                    "CREATE TABLE t (a)", "ROLLBACK", "ROLLBACK TO display",
                    "WITH x AS (SELECT 1) DELETE FROM sessions", "PRAGMA user_version = 3"):
        assert _tables_written(unnamed) == ("*",), unnamed

    store = Store.open_file(":memory:")
    rows = store.rows
    with store.transaction() as conn:
        rows.put("sessions", "s", "cached session")
        rows.put("operations", "o", "cached operation")
        conn.execute("UPDATE operations SET stage = 'x' WHERE execution_id = 'none'")
        assert rows.get("operations", "o") is MISSING  # written: dropped
        assert rows.get("sessions", "s") == "cached session"  # another table: kept
        conn.execute('UPDATE "sessions" SET turn_status = turn_status')
        assert rows.get("sessions", "s") is MISSING  # not classified: everything dropped
        rows.put("sessions", "s", "read in the transaction")
    assert rows.get("sessions", "s") == "read in the transaction"  # committed: still true
    try:
        with store.transaction():
            rows.put("sessions", "s", "never committed")
            raise ValueError("rolled back")
    except ValueError:
        pass
    assert rows.get("sessions", "s") is MISSING
    store.close()


def test_the_row_cache_sees_another_connections_commit_once_told_others_may_have_run(tmp_path):
    path = str(tmp_path / "s.sqlite3")
    first, second = Store.open_file(path), Store.open_file(path)
    from reference_impl import records
    from harness.contract import SessionConfig
    from reference_impl.runtime import _insert_session

    with first.transaction() as conn:
        _insert_session(conn, SessionConfig(session_id="s"))
    assert records.load_session(first.connection, "s").cancelled is False
    statements = []
    first.connection.set_trace_callback(statements.append)
    assert records.load_session(first.connection, "s").cancelled is False
    assert statements == ["PRAGMA data_version"]  # served from the cache, verified once
    with second.transaction() as conn:
        conn.execute("UPDATE sessions SET cancelled = 1 WHERE session_id = 's'")
    first.rows.others_may_have_run()  # what a world call or a driver call tells it
    assert records.load_session(first.connection, "s").cancelled is True
    with second.transaction() as conn:
        conn.execute("UPDATE sessions SET cancelled = 0 WHERE session_id = 's'")
    with first.transaction() as conn:  # a write transaction always reads the latest
        assert records.load_session(conn, "s").cancelled is False
    first.close()
    second.close()
