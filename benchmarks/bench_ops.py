"""The reference's cost per durable write operation against the durability floor, in one run.

    python benchmarks/bench_ops.py [--quick] [--sizes 1 10 100] [--json PATH] [--dir DIR]

For each session size N (1, 10, 100, 1,000, 10,000 write operations; ``--quick``: up to
1,000) and each of two shapes, one session drives the reference (``reference_impl``, in this
process) through N allowed write operations against a minimal world whose ports do nothing
(the harness's own costs are not in the figures):

* ``batch``: one user message, one model response carrying N tool calls, then a final answer;
* ``turns``: N turns, each a user message, a response with one call, then a final answer.

Two tables. **Against the targets** (issue 29): time per op; ``minimal``, a replay of the
target's commit pattern (``MINIMAL_PATTERNS``: eight commits, three synced, per one-call
turn; five, two synced, per op of a batch, plus the turn's own, shared), one insert per
commit, sampled inside the session's tool calls beside the floor, and ``x min``, the time
per op over it (target 1.5); CPU per op of the timed run (its flushes' system time in it,
the floor samples' left out) and of the unflushed run (below: the op's own CPU), against the
CPU targets (0.8 ms per one-call turn, 0.4 ms per batch op); a floor sample's CPU (three
flushed commits: what the flushes alone cost in CPU, for any implementation); commits per op
(synced) and whether they are within the target's budget.

**Detail**: time per op, the ratio to the **floor** (three ``synchronous=FULL`` WAL
commits of a comparable row, each in its own transaction, in the same directory, with a
log already allocated, as in any store past its first checkpoint: the
mean of samples taken right before and after the session and interleaved with its operations,
from inside tool calls, where the reference holds no transaction; their time is left out of
the session's), the same three commits appending to a new log (``fresh``: what a new
store's first commits pay; sampled around the session; no ratio uses it), how flat the curve
is (median cost of an op in the last tenth of the session over the first tenth, from the
world's clock of tool calls), transactions, writing transactions and *synced* commits
(``synchronous=FULL``: an fsync) per op (counted on the reference's own connection), peak traced memory (``tracemalloc``);
both in a second run of the same session, because tracing statements and allocations slows
the session down, and database bytes per op (the file after a WAL truncate, minus the
empty store). A third run of the same session with every commit unflushed
(``synchronous=OFF``: the same statements, no fsync) gives the op's cost besides its flushes,
also as a ratio to the floor (with as many synced commits per op as the floor has, an op can
only be within 1.5x the floor when this part is within 0.5x), and how flat that cost is along
the session (``l/1st``, as above: the disk's flush time, which moves over minutes, is not in
it). The timed run also adds up the
time spent inside the reference's SQL statements (``SQL``: commits and their flushes
included, as a ratio to the floor too): what the op's statements cost whatever the Python
around them does. And the session's own writing commits replayed in the same order, synced
or ordered as they were, each one insert of the floor's row in a database like the floor's
(``tx only``): what the op's count of transactions and flushes costs by itself, divided by a
floor sampled between the replay's chunks. Where that is over 1.5x, no code running the same
transactions can meet the target. Ratios measured in one run compare across machines;
absolute times do not.
A session past ``--budget-s`` is stopped and reported as such. One unmeasured session of
each shape runs first, so that the process's one-time costs land in no row. Writes a JSON result.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
import tracemalloc
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.contract import (  # noqa: E402
    ChunkKind,
    ModelChunk,
    ModelRequest,
    Rule,
    RuleEffect,
    SessionConfig,
    ToolCall,
    ToolInvocation,
    ToolKind,
    ToolResult,
    ToolSpec,
    ToolStatus,
)
from reference_impl import implementation  # noqa: E402
from reference_impl import store as reference_store  # noqa: E402
from reference_impl.store import STORE_FILE_NAME  # noqa: E402

SIZES = (1, 10, 100, 1_000, 10_000)
COMMIT_BUDGET = {"turns": (8, 3), "batch": (5, 2)}
"""Issue 29's target: the most writing commits (of them synced) per op, a one-call turn and
an operation in a batch (whose session also pays a one-call turn's commits less one op's,
shared by its ops). The reference's own counts, the same eight (three synced) per turn and
five (two) per further batch op, are asserted by ``tests/unit/reference_impl/
test_ref_commit_budget.py``; the ``budget`` column says whether a row is within the target."""
ORDERED, SYNCED = False, True
MINIMAL_PATTERNS = {
    # one one-call turn: message + first request's start, its end + prepare, start, result,
    # checkpoint, projection, the second request's start, its end + the turn's end
    "turns": ((ORDERED, ORDERED, SYNCED, SYNCED, ORDERED, ORDERED, ORDERED, SYNCED), ()),
    # one op of a batch (prepare, start, result, checkpoint, projection), and once per
    # session the turn's own: message + first request's start, the second request's start,
    # its end + the turn's end (the first request's end rides on the first prepare)
    "batch": ((ORDERED, SYNCED, SYNCED, ORDERED, ORDERED), (ORDERED, ORDERED, SYNCED)),
}
"""The commit pattern of the target, per op and per session: what a same-run replay of the
fewest commits the failpoint table allows costs (the ``x min`` column divides by it)."""
QUICK_SIZES = (1, 10, 100, 1_000)
SHAPES = ("batch", "turns")
FLOOR_COMMITS = 3
FLOOR_SAMPLES_AROUND = 20
"""Floor samples taken right before and right after each session."""
FLOOR_SAMPLES_PER_SESSION = 50
"""Floor samples interleaved with a session's operations (one every size/50 tool calls)."""
PATTERN_COMMITS_MAX = 3_000
"""Commits of a session's own pattern played for its transactions-only figure."""
PATTERN_WARM_UP_COMMITS = 100
PATTERN_CHUNK_COMMITS = 33
"""A floor sample after every 33 replayed commits (three one-call turns)."""
FLOOR_WAL_SPARE_PAGES = 100
"""Pages the floor's log is allocated beyond the automatic checkpoint's threshold: room
for the frames of the commit that crosses it."""
TOOL = "write_file"
SESSION = "bench"


class _OverBudget(BaseException):
    """Stops a session that ran past the time budget (not an Exception: nothing catches it)."""


class _Stream:
    def __init__(self, chunks: list[ModelChunk]) -> None:
        self._chunks = chunks
        self._next = 0

    def next_chunk(self) -> ModelChunk:
        chunk = self._chunks[self._next]
        self._next += 1
        return chunk


class _BenchWorld:
    """A world whose ports cost next to nothing: the model answers a user message with
    ``calls_per_response`` write calls and anything else with a final text."""

    def __init__(self, calls_per_response: int, budget_s: float, floor: _Floor | None = None,
                 floor_every: int = 1, minimal: _MinimalReplay | None = None) -> None:
        self.calls_per_response = calls_per_response
        self.tool_times: list[float] = []
        self.floor_s: list[float] = []
        """Per tool call, the time spent sampling the floor in it (excluded from the ops)."""
        self.floor_cpu_s = 0.0
        """CPU time of this process spent sampling (excluded from the ops' CPU)."""
        self._floor = floor
        self._minimal = minimal
        self._floor_every = floor_every
        self._budget_s = budget_s
        self._started = time.perf_counter()
        self._clock = 0.0
        self._call_seq = 0

    def open_model_stream(self, request: ModelRequest) -> _Stream:
        if request.messages and request.messages[-1].role == "user":
            chunks = []
            for _ in range(self.calls_per_response):
                self._call_seq += 1
                call_id = f"call-{self._call_seq}"
                args = {"path": f"/repo/out/{self._call_seq}.txt", "content": "x" * 64}
                chunks.append(ModelChunk(ChunkKind.TOOL_CALL, tool_call=ToolCall(call_id, TOOL, args)))
            return _Stream(chunks + [ModelChunk(ChunkKind.END)])
        return _Stream([ModelChunk(ChunkKind.TEXT, text="done"), ModelChunk(ChunkKind.END)])

    def review(self, request: Any) -> Any:  # never called: an allow rule decides every call
        raise AssertionError("the benchmark session needs no classifier")

    def execute_tool(self, invocation: ToolInvocation) -> ToolResult:
        now = time.perf_counter()
        if now - self._started > self._budget_s:
            raise _OverBudget()
        self.tool_times.append(now)
        sampled = 0.0
        if self._floor is not None and len(self.tool_times) % self._floor_every == 0:
            # Under the same load as the ops around it; no store transaction is open here.
            cpu_started = time.process_time()
            sampled = self._floor.sample()
            if self._minimal is not None:
                sampled += self._minimal.sample()
            self.floor_cpu_s += time.process_time() - cpu_started
        self.floor_s.append(sampled)
        return ToolResult(ToolStatus.OK, output="wrote 64 bytes")

    def prompt_approval(self, prompt: Any) -> None:
        raise AssertionError("the benchmark session needs no approval")

    def publish(self, projection: Any) -> None:
        pass

    def now(self) -> float:
        self._clock += 0.001
        return self._clock

    def emit(self, event: Any) -> None:
        pass

    def failpoint(self, name: Any, context: dict[str, Any]) -> None:
        pass


class _TransactionCounter:
    """Counts the transactions on one connection, those that changed a row, and those of
    them committed with ``synchronous=FULL`` (an fsync of the WAL: a synced commit); keeps
    the writing commits in order, each as synced or not (``pattern``)."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self.transactions = 0
        self.writing = 0
        self.synced = 0
        self.pattern: list[bool] = []
        self._connection = connection
        self._changes_at_begin = 0
        self._full = connection.execute("PRAGMA synchronous").fetchone()[0] >= 2
        connection.set_trace_callback(self._statement)

    def _statement(self, sql: str) -> None:
        words = sql.split()
        head = words[0].upper() if words else ""
        if head == "BEGIN":
            self.transactions += 1
            self._changes_at_begin = self._connection.total_changes
        elif head == "COMMIT" and self._connection.total_changes > self._changes_at_begin:
            self.writing += 1
            self.synced += self._full
            self.pattern.append(self._full)
        elif head == "PRAGMA" and "".join(words[1:]).lower().startswith("synchronous="):
            self._full = "".join(words[1:]).split("=", 1)[1].upper() in ("FULL", "2",
                                                                         "EXTRA", "3")


@dataclass(frozen=True, slots=True)
class Row:
    shape: str
    size: int
    ops_done: int
    stopped: bool
    per_op_us: float
    cpu_per_op_us: float
    """CPU time of this process per op (its flushes' system time included, the floor's
    samples left out): what the op costs besides waiting for the disk."""
    unflushed_cpu_per_op_us: float
    """The same in the run with every commit unflushed: the op's CPU without its flushes."""
    minimal_per_op_us: float | None
    """A replay of the budget's commit pattern (``MINIMAL_PATTERNS``), one insert per commit,
    sampled inside the session's tool calls with the floor: the per-op cost of the fewest
    commits the failpoint table allows, on this disk at this moment."""
    ratio_to_minimal: float | None
    """Time per op over ``minimal_per_op_us``: the target is at most 1.5."""
    within_budget: bool
    """Commits and synced commits per op at most ``COMMIT_BUDGET`` (for a session of one op,
    the one-call turn's)."""
    floor_us: float
    floor_cpu_us: float
    """CPU time of one floor sample (three flushed commits of one row each)."""
    floor_fresh_wal_us: float
    """The floor's three commits appending to a new log (sampled around the session only):
    what a fresh store's first commits pay on this disk; no ratio uses it."""
    ratio_to_floor: float
    last_over_first_tenth: float | None
    unflushed_last_over_first_tenth: float | None
    """The same of the unflushed run: whether the op's own work grows along the session,
    apart from the disk's flush time, which moves over minutes."""
    transactions_per_op: float
    writing_transactions_per_op: float
    synced_commits_per_op: float
    peak_memory_bytes: int | None
    database_bytes_per_op: float
    unflushed_per_op_us: float
    """Time per op of the same session with every commit unflushed (synchronous=OFF)."""
    unflushed_ratio_to_floor: float
    statements_per_op_us: float
    """Of the timed run's time per op, the time inside the reference's SQL statements
    (commits and their flushes included): what fewer or cheaper statements could save."""
    statements_ratio_to_floor: float
    transactions_only_per_op_us: float | None
    """The op's own sequence of writing commits (synced or ordered, in its order), each one
    insert of the floor's row: what its transactions cost however little ran in them (None:
    the session did no op)."""
    transactions_only_ratio_to_floor: float | None
    """Against a floor sampled between the replay's chunks (not the session's floor)."""


def _config() -> SessionConfig:
    return SessionConfig(
        session_id=SESSION,
        tools=(ToolSpec(TOOL, ToolKind.WRITE),),
        rules=(Rule(RuleEffect.ALLOW, TOOL),),
    )


def _store_bytes(data_dir: str) -> int:
    connection = sqlite3.connect(os.path.join(data_dir, STORE_FILE_NAME))
    connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    connection.close()
    path = os.path.join(data_dir, STORE_FILE_NAME)
    return sum(os.path.getsize(name) for name in (path, path + "-wal") if os.path.exists(name))


class _StatementClock:
    """While active, adds up the time the reference's connection spends inside ``execute`` and
    ``executemany`` (SQLite's work for a statement, its commit's flush included; rows fetched
    afterwards are not counted) and in its row cache's ``PRAGMA data_version`` checks (which
    call SQLite past the connection's own ``execute``): a wrapper of two clock reads per
    statement, well under 1% of an op, so the timed run can carry it."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.statements = 0

    def __enter__(self) -> "_StatementClock":
        self._originals = reference_store._execute, reference_store._executemany
        self._read_data_version = reference_store.RowCache._read_data_version
        clock = time.perf_counter

        def timed(run):
            def statement(*arguments):
                started = clock()
                try:
                    return run(*arguments)
                finally:
                    self.seconds += clock() - started
                    self.statements += 1
            return statement

        reference_store._execute, reference_store._executemany = map(timed, self._originals)
        reference_store.RowCache._read_data_version = timed(self._read_data_version)
        return self

    def __exit__(self, *_: object) -> None:
        reference_store._execute, reference_store._executemany = self._originals
        reference_store.RowCache._read_data_version = self._read_data_version


class _Unflushed:
    """While active, every transaction of the reference commits with ``synchronous=OFF``: the
    same statements and pages, no fsync (a benchmark-only patch of ``Store.transaction``)."""

    def __enter__(self) -> None:
        self._original = reference_store.Store.transaction

        def transaction(store, durability=None):
            if not getattr(store, "_bench_unflushed", False):
                store.connection.execute("PRAGMA synchronous = OFF")
                store._bench_unflushed = True
            return reference_store._Transaction(store.connection)

        reference_store.Store.transaction = transaction

    def __exit__(self, *_: object) -> None:
        reference_store.Store.transaction = self._original


def _session(shape: str, size: int, data_dir: str, budget_s: float, traced: bool,
             floor: _Floor | None = None, counted: bool = False,
             statements: _StatementClock | None = None,
             minimal: _MinimalReplay | None = None) -> dict[str, Any]:
    """One session; ``counted`` traces every statement (transaction counts) and ``traced``
    every allocation: both slow the session down, so the timed run does neither. With
    ``statements`` (active around the call) the statements' time is taken from the
    session's turns only, as the session's time is."""
    floor_every = max(1, size // FLOOR_SAMPLES_PER_SESSION)
    world = _BenchWorld(size if shape == "batch" else 1, budget_s, floor, floor_every, minimal)
    runtime = implementation().open(data_dir, world)
    runtime.open_session(_config())
    empty_bytes = _store_bytes(data_dir)
    counter = (_TransactionCounter(runtime._store.connection)  # the reference's own connection
               if counted else None)
    if traced:
        tracemalloc.start()
    statement_s_before = statements.seconds if statements else 0.0
    started = time.perf_counter()
    cpu_started = time.process_time()
    stopped = False
    try:
        for _ in range(1 if shape == "batch" else size):
            runtime.run_turn(SESSION, "write the next file")
    except _OverBudget:
        stopped = True
    elapsed_s = time.perf_counter() - started - sum(world.floor_s)
    cpu_s = time.process_time() - cpu_started - world.floor_cpu_s
    statement_s = statements.seconds - statement_s_before if statements else None
    peak = tracemalloc.get_traced_memory()[1] if traced else None
    if traced:
        tracemalloc.stop()
    runtime.close()
    ops = len(world.tool_times)
    return {"elapsed_s": elapsed_s, "cpu_s": cpu_s, "statement_s": statement_s, "ops": ops,
            "stopped": stopped, "peak": peak,
            "tool_times": world.tool_times, "floor_s": world.floor_s,
            "transactions": counter.transactions if counter else None,
            "writing": counter.writing if counter else None,
            "synced": counter.synced if counter else None,
            "pattern": counter.pattern if counter else None,
            "bytes": _store_bytes(data_dir) - empty_bytes}


class _Floor:
    """Three durable commits of an operation-sized row, each its own transaction (insert,
    update, update), in a database of its own in the same directory as the store.

    Its write-ahead log is allocated before the first sample (:meth:`_allocate_wal`), so
    every sampled commit overwrites frames the file already has, as the log of any store
    past its first checkpoint does. A commit that appends to the log also flushes the
    file's new size (on ext4, a journal commit): measured on the benchmark machine, three
    such commits took 1.0-1.5 ms against 0.64-0.87 ms, and a floor made of them flattered
    every ratio. ``fresh_wal=True`` keeps that growing log, to
    show what a store's first commits pay (the ``floor_fresh_wal_us`` column)."""

    def __init__(self, directory: str, *, fresh_wal: bool = False, name: str = "floor") -> None:
        path = os.path.join(directory, f"{name}-fresh.sqlite3" if fresh_wal
                            else f"{name}.sqlite3")
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(path + suffix):
                os.remove(path + suffix)
        # any thread: the peers of bench_peers.py run tools on worker threads
        self._connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._connection.execute("PRAGMA journal_mode = WAL")
        self._connection.execute("PRAGMA synchronous = FULL")
        self._connection.execute("CREATE TABLE ops (id TEXT PRIMARY KEY, stage TEXT, body TEXT)")
        if not fresh_wal:
            self._allocate_wal()
        self._rows = 0
        self.samples_s: list[float] = []
        self.cpu_s: list[float] = []
        """Per sample, this process's CPU time: what three flushed commits cost in CPU
        (the kernel's share of a flush included), the same for any implementation."""

    def _allocate_wal(self) -> None:
        """Grow the log past the automatic checkpoint's threshold once, then restart it: from
        then on a checkpoint resets the log before it outgrows the file, and the freed
        pages of the database file are reused too, so no sampled commit extends a file."""
        connection = self._connection
        page_size = connection.execute("PRAGMA page_size").fetchone()[0]
        threshold_pages = connection.execute("PRAGMA wal_autocheckpoint").fetchone()[0]
        connection.execute("CREATE TABLE wal_filler (body BLOB)")
        connection.execute("BEGIN IMMEDIATE")
        connection.execute("INSERT INTO wal_filler VALUES (zeroblob(?))",
                           ((threshold_pages + FLOOR_WAL_SPARE_PAGES) * page_size,))
        connection.execute("COMMIT")
        connection.execute("DROP TABLE wal_filler")
        busy, _, _ = connection.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()
        assert not busy, "nothing else reads the floor's database"

    def sample(self) -> float:
        """One floor measurement; returns (and keeps) its duration in seconds."""
        self._rows += 1
        started = time.perf_counter()
        cpu_started = time.process_time()
        for step, sql in enumerate(("INSERT INTO ops (stage, body, id) VALUES (?, ?, ?)",
                                    "UPDATE ops SET stage = ?, body = ? WHERE id = ?",
                                    "UPDATE ops SET stage = ?, body = ? WHERE id = ?")):
            self._connection.execute("BEGIN IMMEDIATE")
            self._connection.execute(sql, (f"stage-{step}", "x" * 300, f"op-{self._rows}"))
            self._connection.execute("COMMIT")
        elapsed = time.perf_counter() - started
        self.cpu_s.append(time.process_time() - cpu_started)
        self.samples_s.append(elapsed)
        return elapsed

    def replay(self, pattern: list[bool]) -> float:
        """The commits of ``pattern`` in order, each its own transaction of one insert of the
        floor's row, synced (``synchronous=FULL``) or ordered (``NORMAL``) as given, the
        pragma issued only when that changes, as the reference does; returns the seconds."""
        connection = self._connection
        full = True
        started = time.perf_counter()
        for synced in pattern:
            if synced is not full:
                connection.execute(f"PRAGMA synchronous = {'FULL' if synced else 'NORMAL'}")
                full = synced
            self._rows += 1
            connection.execute("BEGIN IMMEDIATE")
            connection.execute("INSERT INTO ops (stage, body, id) VALUES (?, ?, ?)",
                               ("replayed", "x" * 300, f"op-{self._rows}"))
            connection.execute("COMMIT")
        elapsed = time.perf_counter() - started
        if not full:
            connection.execute("PRAGMA synchronous = FULL")
        return elapsed

    def close(self) -> None:
        self._connection.close()


class _MinimalReplay:
    """The budget's commit pattern of one op (and, for a batch, the session's own commits,
    shared by its ops), replayed in a database like the floor's at each floor sample: what
    the fewest commits cost at that moment."""

    def __init__(self, directory: str, shape: str, size: int) -> None:
        self._per_op, self._per_session = MINIMAL_PATTERNS[shape]
        self._size = size
        self._replay = _Floor(directory, name="minimal")
        self._replay.replay(list(self._per_op) * 10)  # its first commits of each kind
        self.samples_s: list[float] = []
        """Per sample, the cost per op of a session of ``size`` ops."""

    def sample(self) -> float:
        elapsed = self._replay.replay(list(self._per_op))
        shared = self._replay.replay(list(self._per_session)) if self._per_session else 0.0
        self.samples_s.append(elapsed + shared / self._size)
        return elapsed + shared

    def close(self) -> None:
        self._replay.close()


def _transactions_only(directory: str, pattern: list[bool],
                       ops: int) -> tuple[float, float] | None:
    """The session's own writing commits (``pattern``, from the counted run), each one row,
    in a database like the floor's: what the op's count of transactions and flushes costs
    by itself, whatever runs inside them; returns (µs per op, µs of the floor sampled
    alongside), None when the session wrote nothing or did no op (stopped at once). At most ``PATTERN_COMMITS_MAX`` commits are played (from the session's
    start, so a session's first turn is in it) and scaled to the whole, after an untimed
    first play of up to ``PATTERN_WARM_UP_COMMITS`` of them, so that none of the timed ones
    is its connection's first of a kind. The disk's flush time moves from minute to minute,
    so the floor this figure is divided by is sampled between its chunks of
    ``PATTERN_CHUNK_COMMITS`` commits, not taken from the session's."""
    played = pattern[:PATTERN_COMMITS_MAX]
    if not played or ops < 1:
        return None
    replay = _Floor(directory, name="pattern")
    floor = _Floor(directory, name="pattern-floor")
    try:
        replay.replay(played[:PATTERN_WARM_UP_COMMITS])
        floor.sample()
        seconds = 0.0
        for start in range(0, len(played), PATTERN_CHUNK_COMMITS):
            seconds += replay.replay(played[start:start + PATTERN_CHUNK_COMMITS])
            floor.sample()
    finally:
        replay.close()
        floor.close()
    return (seconds / len(played) * len(pattern) / ops * 1e6,
            statistics.fmean(floor.samples_s[1:]) * 1e6)


def _flatness(tool_times: list[float], floor_s: list[float]) -> float | None:
    """Median gap between consecutive tool calls (less the floor sampled in the first of
    them) in the last tenth of the session over the first tenth."""
    gaps = [later - earlier - sampled
            for earlier, later, sampled in zip(tool_times, tool_times[1:], floor_s)]
    if len(gaps) < 20:
        return None
    tenth = len(gaps) // 10
    return statistics.median(gaps[-tenth:]) / statistics.median(gaps[:tenth])


def _warm_up(directory: str) -> None:
    """One unmeasured session of each shape first: the process's one-time costs (lazy
    imports, first-use caches) belong to no session size. Each measured session still opens
    a fresh instance and pays its own first statements."""
    for shape in SHAPES:
        data_dir = tempfile.mkdtemp(prefix=f"warm-up-{shape}-", dir=directory)
        _session(shape, 2, data_dir, budget_s=60.0, traced=False)
        shutil.rmtree(data_dir)


def measure(shape: str, size: int, directory: str, budget_s: float, memory: bool) -> Row:
    floor = _Floor(directory)
    fresh_floor = _Floor(directory, fresh_wal=True)
    minimal = _MinimalReplay(directory, shape, size)
    for _ in range(FLOOR_SAMPLES_AROUND):
        floor.sample()
        fresh_floor.sample()
        minimal.sample()
    data_dir = tempfile.mkdtemp(prefix=f"{shape}-{size}-", dir=directory)
    with _StatementClock() as statements:
        timed = _session(shape, size, data_dir, budget_s, traced=False, floor=floor,
                         statements=statements, minimal=minimal)
    for _ in range(FLOOR_SAMPLES_AROUND):
        floor.sample()
        fresh_floor.sample()
        minimal.sample()
    floor.close()
    fresh_floor.close()
    minimal.close()
    minimal_us = statistics.fmean(minimal.samples_s) * 1e6
    floor_us = statistics.fmean(floor.samples_s) * 1e6  # a mean, like the per-op cost
    shutil.rmtree(data_dir)
    # A second run counts the transactions (and, with ``memory``, traces allocations).
    data_dir = tempfile.mkdtemp(prefix=f"{shape}-{size}-counted-", dir=directory)
    counted = _session(shape, size, data_dir, budget_s * 4, counted=True,
                       traced=memory and not timed["stopped"])
    shutil.rmtree(data_dir)
    peak = counted["peak"]
    transactions_only = _transactions_only(directory, counted["pattern"], counted["ops"])
    # A third run, every commit unflushed: the op's cost besides its flushes.
    data_dir = tempfile.mkdtemp(prefix=f"{shape}-{size}-unflushed-", dir=directory)
    with _Unflushed():
        unflushed = _session(shape, size, data_dir, budget_s, traced=False)
    shutil.rmtree(data_dir)
    unflushed_per_op_us = unflushed["elapsed_s"] / max(unflushed["ops"], 1) * 1e6
    counted_ops = max(counted["ops"], 1)
    ops = max(timed["ops"], 1)
    per_op_us = timed["elapsed_s"] / ops * 1e6
    writing_per_op = counted["writing"] / counted_ops
    synced_per_op = counted["synced"] / counted_ops
    if shape == "batch" and counted["ops"] > 1:  # the turn's own commits are shared
        budget = tuple(per_op + extra / counted["ops"] for per_op, extra in zip(
            COMMIT_BUDGET["batch"], (len(MINIMAL_PATTERNS["batch"][1]),
                                     sum(MINIMAL_PATTERNS["batch"][1]))))
    else:
        budget = COMMIT_BUDGET["turns"]
    statements_per_op_us = timed["statement_s"] / ops * 1e6
    return Row(
        shape=shape, size=size, ops_done=timed["ops"], stopped=timed["stopped"],
        per_op_us=round(per_op_us, 1), cpu_per_op_us=round(timed["cpu_s"] / ops * 1e6, 1),
        unflushed_cpu_per_op_us=round(unflushed["cpu_s"] / max(unflushed["ops"], 1) * 1e6, 1),
        minimal_per_op_us=round(minimal_us, 1),
        ratio_to_minimal=round(per_op_us / minimal_us, 2),
        within_budget=(writing_per_op <= budget[0] + 1e-9
                       and synced_per_op <= budget[1] + 1e-9),
        floor_us=round(floor_us, 1),
        floor_cpu_us=round(statistics.fmean(floor.cpu_s) * 1e6, 1),
        floor_fresh_wal_us=round(statistics.fmean(fresh_floor.samples_s) * 1e6, 1),
        ratio_to_floor=round(per_op_us / floor_us, 2),
        last_over_first_tenth=_rounded(_flatness(timed["tool_times"], timed["floor_s"])),
        unflushed_last_over_first_tenth=_rounded(_flatness(unflushed["tool_times"],
                                                           unflushed["floor_s"])),
        transactions_per_op=round(counted["transactions"] / counted_ops, 2),
        writing_transactions_per_op=round(writing_per_op, 2),
        synced_commits_per_op=round(synced_per_op, 2),
        peak_memory_bytes=peak,
        database_bytes_per_op=round(timed["bytes"] / ops, 1),
        unflushed_per_op_us=round(unflushed_per_op_us, 1),
        unflushed_ratio_to_floor=round(unflushed_per_op_us / floor_us, 2),
        statements_per_op_us=round(statements_per_op_us, 1),
        statements_ratio_to_floor=round(statements_per_op_us / floor_us, 2),
        transactions_only_per_op_us=(None if transactions_only is None
                                     else round(transactions_only[0], 1)),
        transactions_only_ratio_to_floor=(None if transactions_only is None else round(
            transactions_only[0] / transactions_only[1], 2)),
    )


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _cell(value: float | None, scale: float = 1.0, unit: str = "") -> str:
    """A printed figure with two decimals, "-" where there is none."""
    return "-" if value is None else f"{value * scale:.2f}{unit}"


CPU_TARGET_US = {"turns": 800.0, "batch": 400.0}
"""Issue 29's CPU targets: per one-call turn, per operation in a batch."""
MINIMAL_RATIO_TARGET = 1.5


def _print(rows: list[Row]) -> None:
    """Two tables: the row against the targets (budget, replay of the minimal pattern,
    CPU), then the detail."""
    header = (f"{'shape':<6} {'ops':>6} {'per op':>9} {'minimal':>9} {'x min':>6} "
              f"{'cpu/op':>8} {'no-flush':>9} {'cpu tgt':>8} {'floor cpu':>9} {'commits/op':>11} "
              f"{'budget':>7} {'x floor':>7}")
    print("against the targets: x min <= 1.5, CPU per op (timed run / unflushed run) <= "
          "0.8 ms per one-call turn, 0.4 ms per batch op; commits per op within the budget")
    print(header)
    print("-" * len(header))
    for row in rows:
        ops = f"{row.ops_done}" + ("!" if row.stopped else "")
        minimal = _cell(row.minimal_per_op_us, scale=1e-3, unit="ms")
        target = CPU_TARGET_US["turns" if row.shape == "turns" or row.size == 1 else "batch"]
        commits = f"{row.writing_transactions_per_op:.2f}({row.synced_commits_per_op:.2f})"
        print(f"{row.shape:<6} {ops:>6} {row.per_op_us / 1000:>7.2f}ms {minimal:>9} "
              f"{_cell(row.ratio_to_minimal):>6} {row.cpu_per_op_us / 1000:>6.2f}ms "
              f"{row.unflushed_cpu_per_op_us / 1000:>7.2f}ms {target / 1000:>6.2f}ms "
              f"{row.floor_cpu_us / 1000:>7.2f}ms {commits:>11} {'ok' if row.within_budget else 'OVER':>7} "
              f"{row.ratio_to_floor:>7.2f}")
    print()
    header = (f"{'shape':<6} {'ops':>6} {'floor':>8} {'fresh':>8} "
              f"{'last/1st':>8} {'tx/op':>6} "
              f"{'peak MB':>8} {'DB B/op':>8} {'no-flush':>9} {'x floor':>7} {'SQL':>8} "
              f"{'x floor':>7} {'tx only':>8} {'x floor':>7} {'l/1st':>6}")
    print("detail")
    print(header)
    print("-" * len(header))
    for row in rows:
        ops = f"{row.ops_done}" + ("!" if row.stopped else "")
        flat = _cell(row.last_over_first_tenth)
        unflushed_flat = _cell(row.unflushed_last_over_first_tenth)
        tx_only = _cell(row.transactions_only_per_op_us, scale=1e-3, unit="ms")
        tx_only_ratio = _cell(row.transactions_only_ratio_to_floor)
        peak = "-" if row.peak_memory_bytes is None else f"{row.peak_memory_bytes / 1e6:.1f}"
        print(f"{row.shape:<6} {ops:>6} {row.floor_us:>6.0f}us "
              f"{row.floor_fresh_wal_us:>6.0f}us "
              f"{flat:>8} {row.transactions_per_op:>6.2f} {peak:>8} "
              f"{row.database_bytes_per_op:>8.0f} {row.unflushed_per_op_us / 1000:>7.2f}ms "
              f"{row.unflushed_ratio_to_floor:>7.2f} {row.statements_per_op_us / 1000:>6.2f}ms "
              f"{row.statements_ratio_to_floor:>7.2f} "
              f"{tx_only:>8} {tx_only_ratio:>7} {unflushed_flat:>6}")
    if any(row.stopped for row in rows):
        print("! stopped at the time budget (--budget-s): the figures cover the ops done")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="sizes up to 1,000 only")
    parser.add_argument("--sizes", type=int, nargs="+", help="session sizes (write ops)")
    parser.add_argument("--shapes", nargs="+", choices=SHAPES, default=list(SHAPES))
    parser.add_argument("--budget-s", type=float, default=120.0,
                        help="stop a session after this many seconds (default 120)")
    parser.add_argument("--no-memory", action="store_true", help="skip the tracemalloc runs")
    parser.add_argument("--dir", help="where the stores go (default: a temporary directory)")
    parser.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "bench_ops.json"),
                        help="where to write the JSON result")
    args = parser.parse_args(argv)
    sizes = tuple(args.sizes) if args.sizes else (QUICK_SIZES if args.quick else SIZES)
    if any(size < 1 for size in sizes):
        print("bench_ops: --sizes must be positive integers", file=sys.stderr)
        return 2
    directory = args.dir or tempfile.mkdtemp(prefix="bench-ops-")
    os.makedirs(directory, exist_ok=True)
    rows = []
    try:
        _warm_up(directory)
        for shape in args.shapes:
            for size in sizes:
                rows.append(measure(shape, size, directory, args.budget_s, not args.no_memory))
                print(f"  measured {shape} x {size}", file=sys.stderr, flush=True)
    finally:
        if not args.dir:
            shutil.rmtree(directory, ignore_errors=True)
    _print(rows)
    result = {"benchmark": "bench_ops", "floor_commits": FLOOR_COMMITS,
              "python": sys.version.split()[0], "sqlite": sqlite3.sqlite_version,
              "rows": [asdict(row) for row in rows]}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"JSON: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
