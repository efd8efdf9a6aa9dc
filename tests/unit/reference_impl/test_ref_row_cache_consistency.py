"""The row cache holds only what a fresh read would return (store.RowCache): after every
commit of a varied run (allowed calls, refusals, approvals, failures that count against the
repeat guard, classifier allows and risk denials, an escalation), every cached operation,
result record, denial count, repeat-guard presence and pending-wait reading equals what a
connection without a cache reads from the store at that moment. The rows a step writes and
keeps for the next one (``records.operation_written``, the result as saved, a fresh
operation with no result) are the ones this checks most."""

from __future__ import annotations

import sqlite3

import pytest

from harness.contract import ClassifierOutcome, Mode
from ref_fakes import FakeWorld, Reply, allow, ask, call, config, deny
from reference_impl import approvals, denial_counters, failure_policy, records, results
from reference_impl import store as store_module
from reference_impl.store import STORE_FILE_NAME


def _fresh(data_dir: str) -> sqlite3.Connection:
    connection = sqlite3.connect(f"{data_dir}/{STORE_FILE_NAME}", isolation_level=None)
    connection.row_factory = sqlite3.Row
    return connection


def _check(rows, fresh: sqlite3.Connection) -> int:
    """Compare every cached entry with a fresh read; returns how many were compared."""
    compared = 0
    for table, entries in rows._tables.items():
        for key, cached in entries.items():
            if table == "operations":
                assert cached == records.load_operation(fresh, key), (table, key)
            elif table == "result_records":
                assert cached == results.load(fresh, key), (table, key)
            elif table == "denial_counters":
                assert cached == denial_counters.read(fresh, *key), (table, key)
            elif table == "repeat_budget" and key[0] == "any":
                assert cached == (fresh.execute(
                    "SELECT 1 FROM repeat_budget WHERE session_id = ?", (key[1],)
                ).fetchone() is not None), (table, key)
            elif table == "approval_waits" and key[0] == "pending":
                assert cached == approvals.pending_of_session(fresh, key[1]), (table, key)
            else:
                continue
            compared += 1
    return compared


@pytest.fixture
def checked(monkeypatch, data_dir):
    """After each commit of a runtime's own connection: every cached row equals the store."""
    compared = [0]
    original = store_module._Transaction.__exit__

    def exit_then_check(self, exc_type, *rest):
        result = original(self, exc_type, *rest)
        rows = store_module.rows_of(self._connection)
        if exc_type is None and rows is not None:  # one instance: nobody else commits
            fresh = _fresh(data_dir)
            try:
                compared[0] += _check(rows, fresh)
            finally:
                fresh.close()
        return result

    monkeypatch.setattr(store_module._Transaction, "__exit__", exit_then_check)
    return compared


def test_cached_rows_equal_the_store_after_every_commit(start, checked):
    writes = tuple(call(f"w{i}", "write_file", path=f"/repo/{i}", content="x") for i in range(3))
    world = FakeWorld(
        replies={"s1": [Reply("", writes), Reply("", (call("d1", "Bash", command="ls"),)),
                        Reply("", (call("f1", "write_file", path="/f", content="1"),
                                   call("f2", "write_file", path="/f", content="1"))),
                        Reply("", (call("a1", "edit_file", path="/e"),))],
                 "s2": [Reply("", (call("c1", "Bash", command="make"),
                                   call("c2", "Bash", command="rm -rf /"),
                                   call("c3", "Bash", command="make test")))]},
        tool_behaviour={"f1": ["fail"], "f2": ["fail"], "w2": ["escalate"]},
        verdicts=[ClassifierOutcome.ALLOW])
    runtime = start(world, config(rules=(allow("write_file"), deny("Bash"), ask("edit_file"))),
                    config("s2", mode=Mode.AUTO))
    runtime.run_turn("s1", "write, list, fail twice, edit")
    for prompt in list(world.prompts):
        runtime.answer_approval(prompt.wait_id, True)
    runtime.run_turn("s1", "again")
    runtime.run_turn("s2", "build")
    assert world.reviews and world.ledger
    assert checked[0] > 50  # the check did compare rows, many
