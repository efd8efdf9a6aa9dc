"""benchmarks/bench_ops.py: the floor it divides by is measured in the state the reference's
commits run in, and a row's ratios are what its own figures say (no timing asserted)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
_SPEC = importlib.util.spec_from_file_location("bench_ops", ROOT / "benchmarks" / "bench_ops.py")
bench_ops = importlib.util.module_from_spec(_SPEC)
sys.modules.setdefault("bench_ops", bench_ops)  # its dataclasses look their module up
_SPEC.loader.exec_module(bench_ops)


def _wal_bytes(directory: Path, name: str) -> int:
    return os.path.getsize(directory / f"{name}-wal")


def _frames_in_log(floor) -> int:
    _, log_frames, _ = floor._connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    return log_frames


def test_the_floor_overwrites_an_allocated_log_and_never_extends_it(tmp_path: Path) -> None:
    floor = bench_ops._Floor(str(tmp_path))
    try:
        page_size = floor._connection.execute("PRAGMA page_size").fetchone()[0]
        threshold_pages = floor._connection.execute("PRAGMA wal_autocheckpoint").fetchone()[0]
        allocated = _wal_bytes(tmp_path, "floor.sqlite3")
        assert allocated >= threshold_pages * page_size
        for _ in range(5):
            floor.sample()
        # The commits went to the start of the log (a handful of frames), inside the file.
        assert 0 < _frames_in_log(floor) < 100
        assert _wal_bytes(tmp_path, "floor.sqlite3") == allocated
        assert len(floor.samples_s) == 5 and all(sample > 0 for sample in floor.samples_s)
    finally:
        floor.close()


def test_the_fresh_wal_floor_appends_to_its_log(tmp_path: Path) -> None:
    floor = bench_ops._Floor(str(tmp_path), fresh_wal=True)
    try:
        floor.sample()
        before = _wal_bytes(tmp_path, "floor-fresh.sqlite3")
        for _ in range(5):
            floor.sample()
        assert _wal_bytes(tmp_path, "floor-fresh.sqlite3") > before
    finally:
        floor.close()


def test_a_row_divides_by_its_own_floor(tmp_path: Path) -> None:
    row = bench_ops.measure("turns", 2, str(tmp_path), budget_s=60.0, memory=False)
    assert row.ops_done == 2 and not row.stopped
    assert row.synced_commits_per_op == bench_ops.FLOOR_COMMITS
    assert row.floor_us > 0 and row.floor_fresh_wal_us > 0
    # Both sides are rounded in the row: within a rounding step of each other.
    assert abs(row.ratio_to_floor - row.per_op_us / row.floor_us) <= 0.01
    assert abs(row.unflushed_ratio_to_floor - row.unflushed_per_op_us / row.floor_us) <= 0.01
    # The statements' time is a part of the session's, counted on the reference's connection.
    assert 0 < row.statements_per_op_us <= row.per_op_us
    assert abs(row.statements_ratio_to_floor - row.statements_per_op_us / row.floor_us) <= 0.01
    assert row.transactions_only_per_op_us > 0
    assert row.last_over_first_tenth is None and row.unflushed_last_over_first_tenth is None


def test_flatness_is_read_from_both_the_timed_and_the_unflushed_run(tmp_path: Path) -> None:
    row = bench_ops.measure("batch", 40, str(tmp_path), budget_s=60.0, memory=False)
    assert row.ops_done == 40
    assert row.last_over_first_tenth is not None and row.last_over_first_tenth > 0
    assert row.unflushed_last_over_first_tenth is not None
    assert row.unflushed_last_over_first_tenth > 0


def test_the_statement_clock_counts_the_reference_s_statements_and_lets_go(tmp_path: Path) -> None:
    from reference_impl import store as reference_store

    originals = (reference_store._execute, reference_store._executemany,
                 reference_store.RowCache._read_data_version)
    with bench_ops._StatementClock() as clock:
        store = reference_store.Store.open(str(tmp_path))
        counted = clock.statements
        store.connection.execute("SELECT 1").fetchone()
        assert clock.statements == counted + 1
        store.rows.verify()  # a data_version check: SQLite reached past execute
        assert clock.statements == counted + 2
        store.close()
    assert counted > 0 and clock.seconds > 0
    assert (reference_store._execute, reference_store._executemany,
            reference_store.RowCache._read_data_version) == originals


def test_a_replay_commits_its_pattern_in_order_and_leaves_the_floor_synced(tmp_path: Path) -> None:
    replay = bench_ops._Floor(str(tmp_path), name="pattern")
    statements: list[str] = []
    replay._connection.set_trace_callback(statements.append)
    try:
        seconds = replay.replay([True, False, False, True])
        assert seconds > 0
        assert replay._connection.execute("SELECT COUNT(*) FROM ops").fetchone()[0] == 4
        assert replay._connection.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    finally:
        replay.close()
    modes = [sql.split("=")[1].strip() for sql in statements
             if sql.startswith("PRAGMA synchronous =")]
    assert modes == ["NORMAL", "FULL"]  # switched only where the pattern changes
    assert statements.count("COMMIT") == 4


def test_the_counted_run_keeps_the_session_s_commits_in_order(tmp_path: Path) -> None:
    counted = bench_ops._session("turns", 3, str(tmp_path), budget_s=60.0, traced=False,
                                 counted=True)
    pattern = counted["pattern"]
    assert len(pattern) == counted["writing"] and sum(pattern) == counted["synced"]
    assert pattern[-1]  # a turn's end is flushed before run_turn returns it
    per_op_us, floor_us = bench_ops._transactions_only(str(tmp_path), pattern, counted["ops"])
    assert per_op_us > 0 and floor_us > 0


def test_a_session_that_did_no_op_has_no_transactions_only_figure(tmp_path: Path) -> None:
    # a session stopped at its budget before its first tool call: nothing to divide by
    assert bench_ops._transactions_only(str(tmp_path), [True, False], ops=0) is None
    assert bench_ops._transactions_only(str(tmp_path), [], ops=3) is None
    assert bench_ops._cell(None) == "-" and bench_ops._cell(1234.5, 1e-3, "ms") == "1.23ms"


def test_the_minimal_patterns_are_the_commit_budget():
    per_turn, none = bench_ops.MINIMAL_PATTERNS["turns"]
    assert none == () and (len(per_turn), sum(per_turn)) == bench_ops.COMMIT_BUDGET["turns"]
    per_op, per_session = bench_ops.MINIMAL_PATTERNS["batch"]
    assert (len(per_op), sum(per_op)) == bench_ops.COMMIT_BUDGET["batch"]
    # a batch of one is a one-call turn
    assert (len(per_op) + len(per_session), sum(per_op) + sum(per_session)) == \
        bench_ops.COMMIT_BUDGET["turns"]


def test_a_row_checks_the_budget_and_divides_by_the_minimal_replay(tmp_path: Path) -> None:
    for shape, size in (("turns", 2), ("batch", 6)):
        row = bench_ops.measure(shape, size, str(tmp_path), budget_s=60.0, memory=False)
        assert row.within_budget, (shape, row.writing_transactions_per_op,
                                   row.synced_commits_per_op)
        assert row.minimal_per_op_us > 0
        assert abs(row.ratio_to_minimal - row.per_op_us / row.minimal_per_op_us) <= 0.01
        assert row.cpu_per_op_us > 0 and row.unflushed_cpu_per_op_us > 0
        assert row.floor_cpu_us > 0
    # the reference: five commits per op, two synced, and the turn's own three, one synced
    assert (row.writing_transactions_per_op, row.synced_commits_per_op) == (
        round((5 * 6 + 3) / 6, 2), round((2 * 6 + 1) / 6, 2))


def test_a_minimal_replay_samples_one_op_and_a_share_of_the_session(tmp_path: Path) -> None:
    replay = bench_ops._MinimalReplay(str(tmp_path), "batch", 4)
    statements: list[str] = []
    replay._replay._connection.set_trace_callback(statements.append)
    try:
        assert replay.sample() > 0 and len(replay.samples_s) == 1
    finally:
        replay.close()
    assert statements.count("COMMIT") == 5 + 3  # one op's commits and the session's own
