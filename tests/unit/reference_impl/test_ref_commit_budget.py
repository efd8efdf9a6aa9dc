"""The reference's commit budget, counted (never timed): a one-call turn takes at most eight
writing commits, three of them synced (an fsync); each further operation of a batch at most
five, two of them synced (docs/lifecycle.md, "What is flushed before what";
``benchmarks/bench_ops.py`` prints the same counts).

A turn's fewest commits are those the failpoint table keeps apart. Three pairs of adjacent
steps have no failpoint between them, so each pair is one commit: the user message with the
first model request's start (``before_model_request`` comes before both), a request's end
with the prepare of the first call it answered (``after_model_stream_ended`` before, then
``after_prepare``), and the last request's end with the turn's end. The tests count what
SQLite is asked to commit on the runtime's own connection, with the durability each commit
had, so a step split again (or a flush added) fails here whatever the disk's speed.
"""

from __future__ import annotations

import sqlite3

from harness.contract import TurnStatus
from ref_fakes import FakeWorld, Reply, allow, call, config

ORDERED, SYNCED = "ordered", "synced"

ONE_CALL_TURN = (
    ORDERED,  # the user message with the first model request's start
    ORDERED,  # that request's end (the answer) with the call's prepare and decision
    SYNCED,   # the start record, before the tool runs
    SYNCED,   # the result, which nobody can give back
    ORDERED,  # the checkpoint folding it, with the diagnostics
    ORDERED,  # the projection mark
    ORDERED,  # the second model request's start
    SYNCED,   # its end (the final answer) with the turn's end, before the caller reads it
)
TURN_BUDGET = (8, 3)
BATCH_OP_BUDGET = (5, 2)


class CommitCounter:
    """The writing commits of one connection in order, each ``ordered`` or ``synced``
    (committed under ``synchronous=FULL``); a transaction that changed no row is no commit:
    SQLite writes and flushes nothing for it."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self.commits: list[str] = []
        self._connection = connection
        self._full = connection.execute("PRAGMA synchronous").fetchone()[0] >= 2
        self._changes_at_begin = 0
        connection.set_trace_callback(self._statement)

    def _statement(self, sql: str) -> None:
        if sql.startswith("PRAGMA synchronous"):
            self._full = sql.rstrip().split("=")[-1].strip().upper() in ("FULL", "EXTRA", "2", "3")
        elif sql.startswith("BEGIN"):
            self._changes_at_begin = self._connection.total_changes
        elif sql == "COMMIT" and self._connection.total_changes > self._changes_at_begin:
            self.commits.append(SYNCED if self._full else ORDERED)

    def since(self, mark: int) -> tuple[int, int]:
        """(commits, synced commits) after the first ``mark`` ones."""
        later = self.commits[mark:]
        return len(later), later.count(SYNCED)


def _writes(count: int, prefix: str = "c") -> tuple:
    return tuple(call(f"{prefix}{i}", "write_file", path=f"/repo/{prefix}{i}.txt", content="x")
                 for i in range(1, count + 1))


def test_a_one_call_turn_takes_eight_commits_three_synced_in_this_order(start):
    world = FakeWorld(replies={"s1": [Reply("writing", _writes(1))]})
    runtime = start(world, config(rules=(allow("write_file"),)))
    counter = CommitCounter(runtime._store.connection)
    assert runtime.run_turn("s1", "write a file").status is TurnStatus.COMPLETED
    assert tuple(counter.commits) == ONE_CALL_TURN
    assert counter.since(0) == TURN_BUDGET
    assert len(world.ledger) == 1 and len(world.requests) == 2


def test_every_turn_of_a_long_session_keeps_the_budget(start):
    replies = []
    for turn in range(1, 6):
        replies += [Reply("writing", _writes(1, prefix=f"t{turn}-")), Reply("done.")]
    world = FakeWorld(replies={"s1": replies})
    runtime = start(world, config(rules=(allow("write_file"),)))
    counter = CommitCounter(runtime._store.connection)
    for turn in range(5):
        mark = len(counter.commits)
        assert runtime.run_turn("s1", f"write file {turn}").status is TurnStatus.COMPLETED
        assert counter.since(mark) == TURN_BUDGET, (turn, counter.commits[mark:])
    assert len(world.ledger) == 5


def test_each_further_operation_of_a_batch_takes_five_commits_two_synced(start):
    """Ten calls in one answer: five commits per call (prepare with its decision, start,
    result, checkpoint with diagnostics, projection; the first call's prepare rides on the
    request's end), two synced (start, result), plus the turn's own three: the user message
    with the first request's start, the second request's start, its end with the turn's."""
    world = FakeWorld(replies={"s1": [Reply("writing", _writes(10))]})
    runtime = start(world, config(rules=(allow("write_file"),)))
    counter = CommitCounter(runtime._store.connection)
    assert runtime.run_turn("s1", "write ten files").status is TurnStatus.COMPLETED
    commits, synced = counter.since(0)
    assert (commits, synced) == (10 * BATCH_OP_BUDGET[0] + 3, 10 * BATCH_OP_BUDGET[1] + 1)
    assert len(world.ledger) == 10


def test_a_batch_op_s_marginal_cost_is_the_budget(start):
    counts = {}
    for size in (4, 12):
        world = FakeWorld(replies={f"b{size}": [Reply("writing", _writes(size))]})
        runtime = start(world, config(f"b{size}", rules=(allow("write_file"),)))
        counter = CommitCounter(runtime._store.connection)
        assert runtime.run_turn(f"b{size}", "write").status is TurnStatus.COMPLETED
        counts[size] = counter.since(0)
    per_op = tuple((counts[12][i] - counts[4][i]) / 8 for i in range(2))
    assert per_op == BATCH_OP_BUDGET


def test_the_counter_counts_writing_commits_with_their_durability(tmp_path):
    from reference_impl.store import Durability, Store

    store = Store.open(str(tmp_path))
    try:
        store.connection.execute("CREATE TABLE t (x)")
        counter = CommitCounter(store.connection)
        with store.transaction(Durability.ORDERED) as conn:
            conn.execute("INSERT INTO t VALUES (1)")
        with store.transaction(Durability.SYNCED) as conn:
            conn.execute("SELECT * FROM t").fetchall()  # changes nothing: no commit
        with store.transaction(Durability.SYNCED) as conn:
            conn.execute("UPDATE t SET x = 2")
        with store.transaction(Durability.ORDERED) as conn:
            conn.execute("DELETE FROM t")
        assert counter.commits == [ORDERED, SYNCED, ORDERED]
    finally:
        store.close()


def test_the_budget_bites_on_an_added_flush(start, monkeypatch):
    """Every commit of the same turn synced: the count of commits is the budget's, the
    count of flushes is not."""
    from reference_impl import store as store_module

    world = FakeWorld(replies={"s1": [Reply("writing", _writes(1))]})
    runtime = start(world, config(rules=(allow("write_file"),)))
    counter = CommitCounter(runtime._store.connection)
    original = store_module.Store.transaction
    monkeypatch.setattr(store_module.Store, "transaction",
                        lambda store, durability=None: original(store, store_module.Durability.SYNCED))
    assert runtime.run_turn("s1", "write a file").status is TurnStatus.COMPLETED
    assert counter.since(0) == (8, 8) != TURN_BUDGET
