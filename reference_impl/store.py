"""The durable store: one SQLite file per data dir.

Guarantees:

* one file, ``<data_dir>/lifecycle.sqlite3``, in WAL mode;
* every commit survives a crash of the process the moment it returns; a
  :attr:`Durability.SYNCED` commit (``synchronous=FULL``, the default) also survives a crash
  of the machine the moment it returns. A :attr:`Durability.ORDERED` commit
  (``synchronous=NORMAL``) is not flushed by itself: it reaches the disk with the next synced
  commit, and never without what was committed before it (WAL frames are replayed in order
  and checksummed as a chain, so a power loss keeps a prefix of the commits). Callers use
  ORDERED only for a state whose loss on a power cut is the same as a crash one step
  earlier: nothing outside the store has relied on it before the next synced commit (see
  "What is flushed before what" in ``docs/lifecycle.md``);
* every write happens inside :meth:`Store.transaction` (``BEGIN IMMEDIATE`` ... ``COMMIT``),
  which takes the write lock up front so two instances on one data dir serialize instead of
  failing half way; an ``Exception`` rolls it back. Nothing else is caught: a
  ``SimulatedCrash`` leaves the transaction uncommitted, exactly like a killed process;
* callers never hold a transaction across a world call or a failpoint (the rule that keeps a
  second instance able to proceed while the first one is held somewhere);
* the schema is versioned (``schema_version`` table) and migrated forward on open; a store
  written by a newer schema is refused rather than misread;
* schema version 2 stores a checkpoint as a full snapshot now and then and as a delta
  (the messages it appends) otherwise (:mod:`reference_impl.continuation`), and indexes what
  each step looks up, so the cost of a step does not grow with the session;
* :func:`open_read_only` gives a fresh read-only connection for ``inspect``;
* a runtime's own connection (:class:`WriterConnection`) keeps a :class:`RowCache` of the
  rows it decoded, served only while no statement of its own wrote their table and
  ``PRAGMA data_version`` shows that nobody else committed (checked again after each world
  call, driver call and ``BEGIN IMMEDIATE``): a read inside a write transaction always sees
  the latest commit, a read outside one the store as of the last check.
"""

from __future__ import annotations

import os
import re
import sqlite3
from typing import Callable, TypeVar
from enum import Enum
from urllib.parse import quote

from reference_impl.errors import StoreError

STORE_FILE_NAME = "lifecycle.sqlite3"
BUSY_TIMEOUT_MS = 2_000
"""Small on purpose: transactions are short, so a long wait means something is stuck."""

_MIGRATIONS: tuple[str, ...] = (
    # -- version 1 ---------------------------------------------------------------------
    """
    CREATE TABLE sessions (
        session_id          TEXT PRIMARY KEY,
        config_json         TEXT NOT NULL,     -- the SessionConfig as first opened
        rules_json          TEXT NOT NULL,     -- rules in force now
        permission_version  INTEGER NOT NULL,  -- version of those rules
        turn_status         TEXT NOT NULL,
        cancelled           INTEGER NOT NULL DEFAULT 0
    );
    CREATE TABLE operations (
        execution_id        TEXT PRIMARY KEY,
        session_id          TEXT NOT NULL,
        tool_call_id        TEXT NOT NULL,
        tool                TEXT NOT NULL,
        tool_kind           TEXT NOT NULL,     -- '' when the session does not know the tool
        args_json           TEXT NOT NULL,
        args_digest         TEXT NOT NULL,
        permission_version  INTEGER NOT NULL,  -- identity: version of the decision in force
        dedup_key           TEXT NOT NULL,
        stage               TEXT NOT NULL,     -- see records.Stage
        permission          TEXT NOT NULL,
        decided_by          TEXT NOT NULL,
        classifier_outcome  TEXT,
        wait_trigger        TEXT NOT NULL DEFAULT '',
        reason              TEXT NOT NULL DEFAULT '',
        execution_started   INTEGER NOT NULL DEFAULT 0,  -- the host's start record
        start_order         INTEGER,           -- order of start records across the store
        start_mark          INTEGER NOT NULL DEFAULT 0,  -- last start_order at the decision
        delivery            TEXT NOT NULL,
        checkpoint_sequence INTEGER,           -- first checkpoint that carried the result
        prepared_at         REAL NOT NULL
    );
    CREATE TABLE result_records (              -- the authoritative result, one per identity
        execution_id        TEXT PRIMARY KEY,
        session_id          TEXT NOT NULL,
        tool_call_id        TEXT NOT NULL,
        args_digest         TEXT NOT NULL,
        permission_version  INTEGER NOT NULL,
        outcome             TEXT NOT NULL,
        failure_kind        TEXT,
        execution_started   INTEGER NOT NULL,
        reconciliation_required INTEGER NOT NULL,
        result_digest       TEXT,
        reason              TEXT NOT NULL,
        output              TEXT NOT NULL,
        attempts            INTEGER NOT NULL,
        recorded_at         REAL NOT NULL
    );
    CREATE TABLE diagnostics (                 -- optional display state, never authoritative
        execution_id        TEXT PRIMARY KEY,
        session_id          TEXT NOT NULL,
        display_json        TEXT NOT NULL,
        written_at          REAL NOT NULL
    );
    CREATE TABLE runtime_faults (
        id                  INTEGER PRIMARY KEY,
        session_id          TEXT NOT NULL,
        execution_id        TEXT NOT NULL,
        location            TEXT NOT NULL,
        error               TEXT NOT NULL,
        at                  REAL NOT NULL
    );
    CREATE TABLE approval_waits (
        wait_id             TEXT PRIMARY KEY,
        session_id          TEXT NOT NULL,
        execution_id        TEXT NOT NULL,
        purpose             TEXT NOT NULL,     -- permission | escalation
        tool_call_id        TEXT NOT NULL,
        reason              TEXT NOT NULL,
        trigger             TEXT NOT NULL,
        permission_version  INTEGER NOT NULL,
        status              TEXT NOT NULL,
        prompted            INTEGER NOT NULL DEFAULT 0,
        created_at          REAL NOT NULL,
        answered_at         REAL
    );
    CREATE TABLE denial_counters (
        session_id          TEXT NOT NULL,
        permission_version  INTEGER NOT NULL,
        consecutive         INTEGER NOT NULL DEFAULT 0,
        cumulative          INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (session_id, permission_version)
    );
    CREATE TABLE counted_denials (             -- one row per identity: no double counting
        session_id          TEXT NOT NULL,
        permission_version  INTEGER NOT NULL,
        execution_id        TEXT NOT NULL,
        PRIMARY KEY (session_id, permission_version, execution_id)
    );
    CREATE TABLE failure_events (              -- full failure history (never evicted)
        id                  INTEGER PRIMARY KEY,
        session_id          TEXT NOT NULL,
        execution_id        TEXT NOT NULL UNIQUE,
        dedup_key           TEXT NOT NULL,
        tool                TEXT NOT NULL,
        failure_kind        TEXT NOT NULL,
        permission_version  INTEGER NOT NULL,
        at                  REAL NOT NULL
    );
    CREATE TABLE repeat_budget (               -- the repeat guard's counts, reset by a success
        session_id          TEXT NOT NULL,
        dedup_key           TEXT NOT NULL,
        permission_version  INTEGER NOT NULL,
        failures            INTEGER NOT NULL,
        PRIMARY KEY (session_id, dedup_key, permission_version)
    );
    CREATE TABLE failure_table (               -- recent failures, bounded per session
        session_id          TEXT NOT NULL,
        dedup_key           TEXT NOT NULL,
        tool                TEXT NOT NULL,
        failure_kind        TEXT NOT NULL,
        count               INTEGER NOT NULL,
        last_execution_id   TEXT NOT NULL,
        touched             INTEGER NOT NULL,  -- recency; the smallest is evicted first
        PRIMARY KEY (session_id, dedup_key)
    );
    CREATE TABLE checkpoints (
        id                  INTEGER PRIMARY KEY,
        session_id          TEXT NOT NULL,
        sequence            INTEGER NOT NULL,
        format_version      INTEGER NOT NULL,
        data                BLOB NOT NULL,
        size_bytes          INTEGER NOT NULL,
        failure_entries     INTEGER NOT NULL,
        last_execution_id   TEXT NOT NULL,
        reason              TEXT NOT NULL,
        created_at          REAL NOT NULL,
        UNIQUE (session_id, sequence)
    );
    CREATE TABLE projections (                 -- last projection published per operation
        execution_id        TEXT PRIMARY KEY,
        session_id          TEXT NOT NULL,
        projection_json     TEXT NOT NULL,
        published_at        REAL NOT NULL
    );
    CREATE TABLE model_requests (
        request_id          TEXT PRIMARY KEY,
        session_id          TEXT NOT NULL,
        status              TEXT,
        partial_text        TEXT NOT NULL DEFAULT '',
        start_events        INTEGER NOT NULL,
        end_events          INTEGER NOT NULL DEFAULT 0,
        started_at          REAL NOT NULL,
        ended_at            REAL
    );
    """,
    # -- version 2: incremental checkpoints, and indexes that keep every step flat --------
    # base_sequence: NULL for a full snapshot, else the snapshot a delta extends;
    # chain: digest of the state after this checkpoint (a snapshot's own, or the previous
    # chain extended by the delta), what a memo of the conversation is checked against.
    """
    ALTER TABLE checkpoints ADD COLUMN base_sequence INTEGER;
    ALTER TABLE checkpoints ADD COLUMN chain TEXT NOT NULL DEFAULT '';
    CREATE INDEX operations_start_order ON operations (start_order);
    CREATE INDEX model_requests_session ON model_requests (session_id);
    """,
)

SCHEMA_VERSION = len(_MIGRATIONS)

_CHECKPOINT_COLUMNS_V1_END = "        created_at          REAL NOT NULL,\n        UNIQUE"
_CHECKPOINT_COLUMNS_CURRENT_END = ("        created_at          REAL NOT NULL,\n"
                                   "        base_sequence       INTEGER,\n"
                                   "        chain               TEXT NOT NULL DEFAULT '',\n"
                                   "        UNIQUE")


def _fresh_schema() -> list[str]:
    """The statements that create an empty store at the current version at once: version
    1's tables with the columns version 2 adds (in the same place: after the others), and
    version 2's indexes. Each ``ALTER TABLE`` reloads the whole schema: migrating a new store
    from version 1 cost half as much again as creating its tables. A test compares the two,
    column by column and index by index."""
    first = _MIGRATIONS[0]
    assert first.count(_CHECKPOINT_COLUMNS_V1_END) == 1, "update _fresh_schema with the schema"
    statements = _statements(first.replace(_CHECKPOINT_COLUMNS_V1_END,
                                           _CHECKPOINT_COLUMNS_CURRENT_END))
    for script in _MIGRATIONS[1:]:
        statements += [statement for statement in _statements(script)
                       if not statement.lstrip().upper().startswith("ALTER TABLE")]
    return statements


class Durability(Enum):
    """How far a commit is durable when ``COMMIT`` returns (the value: SQLite's
    ``synchronous`` setting that gives it in WAL mode)."""

    SYNCED = "FULL"
    """On disk: survives a power cut. For what the world cannot give back (a tool's result)
    and what something outside is about to rely on (the start record before the tool runs,
    a wait before its prompt, the turn's end before the caller reads it)."""
    ORDERED = "NORMAL"
    """Visible to every reader and to a restarted process at once; on disk with the next
    SYNCED commit. For a step whose loss on a power cut equals a crash one step earlier."""


def store_path(data_dir: str) -> str:
    return os.path.join(data_dir, STORE_FILE_NAME)


class StoreConnection(sqlite3.Connection):
    """A connection that carries a memo of what this instance decoded from the store
    (see :mod:`reference_impl.continuation`); a memo entry is only ever used after checking
    it against the committed state, so it is a cache, never state of its own."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.memo: dict[object, object] = {}


class RowCache:
    """The rows this instance's connection read or wrote, decoded, kept while they are
    provably still the committed ones; what the store's readers (``records``,
    ``continuation``, ``results``...) consult before running a query.

    A cached row is served only when both hold:

    * this connection wrote nothing to its table since (every write statement drops the
      cached rows of the table it writes, see :class:`WriterConnection`; a rollback, a
      statement it cannot classify or a schema change drops everything);
    * nobody else committed since the cache was last *verified*: ``PRAGMA data_version``
      (which changes only with other connections' commits) equals the value seen when the
      rows were cached; any difference drops everything.

    Verification is needed again after anything that lets another instance run: a world
    call or a driver call of this instance (:meth:`others_may_have_run`), the start of a write
    transaction (its reads must be the latest: what it writes depends on them), and a read
    outside a transaction that had to go to the store (it may have seen a newer commit than
    the cached rows; a cached row served after it must be as new). Inside a write
    transaction nobody else can commit, and right after its ``COMMIT`` the cache is the
    committed state, so reads there cost no query at all. Without a world call in between,
    a read served from the cache is the read made at the last verification: nothing
    outside can tell the two apart, and every decision is re-checked by the compare-and-set
    transaction that acts on it.
    """

    __slots__ = ("_connection", "_tables", "_data_version", "_verified", "_cursor")

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection
        self._cursor: sqlite3.Cursor | None = None  # one cursor for every check
        self._tables: dict[str, dict[object, object]] = {}
        self._data_version: int | None = None  # set by verify(), once the store is open
        self._verified = False

    def get(self, table: str, key: object) -> object:
        """The cached value, or :data:`MISSING` (the caller then reads the store, and puts
        what it read)."""
        entries = self._tables.get(table)
        if entries is None or key not in entries:
            if not self._connection.in_transaction:
                self._verified = False  # the caller's fresh read may be newer than the rest
            return MISSING
        if not self._verified:
            self._verify()
            entries = self._tables.get(table)
            if entries is None or key not in entries:
                return MISSING
        return entries[key]

    def put(self, table: str, key: object, value: object) -> None:
        """Remember ``value``, read from (or just written to) ``table`` on this connection."""
        entries = self._tables.get(table)
        if entries is None:
            entries = self._tables[table] = {}
        entries[key] = value

    def written(self, table: str) -> None:
        self._tables.pop(table, None)

    def forget(self) -> None:
        self._tables.clear()

    def others_may_have_run(self) -> None:
        """Another instance may have run: verify before the next cached read (inside a
        write transaction nobody else can commit, so nothing changes there)."""
        if not self._connection.in_transaction:
            self._verified = False

    def transaction_began(self) -> None:
        self._verified = False

    def verify(self) -> None:
        """Check the cached rows against the store now (drops them all if anyone else
        committed since the last check); the store calls it once it is open."""
        self._verify()

    def _read_data_version(self) -> int:
        cursor = self._cursor
        if cursor is None:
            cursor = self._cursor = sqlite3.Connection.cursor(self._connection)
        (version,) = cursor.execute("PRAGMA data_version").fetchone()
        return version

    def _verify(self) -> None:
        version = self._read_data_version()
        if version != self._data_version:
            self._tables.clear()
            self._data_version = version
        self._verified = True


MISSING = object()
"""What :meth:`RowCache.get` returns for a row it cannot vouch for."""

_EVERYTHING = ("*",)
_NOTHING: tuple[str, ...] = ()
_BEGIN = ("BEGIN",)
_WRITE_STATEMENT = re.compile(
    r"\s*(?:INSERT(?:\s+OR\s+\w+)?\s+INTO|REPLACE\s+INTO|UPDATE(?:\s+OR\s+\w+)?|DELETE\s+FROM)"
    r"\s+(\w+)(?:\s|\(|$)", re.IGNORECASE)
"""A write to one plainly named table (a qualified or quoted name is not recognised: it
counts as a write to everything). The schema has no triggers and no foreign keys, so a
statement changes no table but its own."""
_HARMLESS_PRAGMAS = ("data_version", "synchronous", "busy_timeout", "journal_mode")


def _tables_written(sql: str) -> tuple[str, ...]:
    """What a statement may change, for :class:`RowCache`: the one table an INSERT, UPDATE
    or DELETE writes; nothing for a read; everything for a rollback, DDL or anything else."""
    words = sql.split(None, 2)
    head = words[0].upper() if words else ""
    if head == "SELECT" or head in ("COMMIT", "END", "SAVEPOINT", "RELEASE"):
        return _NOTHING
    if head == "BEGIN":
        return _BEGIN
    if head == "PRAGMA" and len(words) > 1 and words[1].split("=")[0].strip().lower() in (
            _HARMLESS_PRAGMAS):
        return _NOTHING
    match = _WRITE_STATEMENT.match(sql)
    if match is not None:
        return (match.group(1).lower(),)
    return _EVERYTHING


_WRITTEN_BY_STATEMENT: dict[str, tuple[str, ...]] = {}


class WriterConnection(StoreConnection):
    """The connection of one runtime instance: every statement it runs tells its
    :class:`RowCache` (``rows``) what may have changed."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.rows = RowCache(self)

    def execute(self, sql: str, parameters=(), /):  # type: ignore[override]
        tables = _WRITTEN_BY_STATEMENT.get(sql)
        if tables is None or tables:  # the common case (a known read) costs one lookup
            self._statement(sql)
        return _execute(self, sql, parameters)

    def executemany(self, sql: str, parameters, /):  # type: ignore[override]
        self._statement(sql)
        return _executemany(self, sql, parameters)

    def executescript(self, script: str, /):  # type: ignore[override]
        self.rows.forget()
        return super().executescript(script)

    def _statement(self, sql: str) -> None:
        tables = _WRITTEN_BY_STATEMENT.get(sql)
        if tables is None:
            tables = _WRITTEN_BY_STATEMENT[sql] = _tables_written(sql)
        if not tables:
            return
        if tables is _BEGIN:
            self.rows.transaction_began()
        elif tables is _EVERYTHING:
            self.rows.forget()
        else:
            self.rows.written(tables[0])


_execute = sqlite3.Connection.execute
_executemany = sqlite3.Connection.executemany


def rows_of(conn: sqlite3.Connection) -> RowCache | None:
    """The row cache of a runtime's connection; None for any other (``inspect``'s)."""
    return getattr(conn, "rows", None)


_T = TypeVar("_T")


def read_through(conn: sqlite3.Connection, table: str, key: object, read: Callable[[], _T]) -> _T:
    """What ``read()`` reads from ``table``, or the value ``conn``'s row cache vouches for
    under ``key`` (then ``read`` is not called); a value read is remembered. An exception
    of ``read`` (a missing row it refuses) remembers nothing."""
    rows = getattr(conn, "rows", None)  # rows_of(conn), without its call: the hottest path
    if rows is None:
        return read()
    value = rows.get(table, key)
    if value is MISSING:
        value = read()
        rows.put(table, key, value)
    return value  # type: ignore[return-value]


class Store:
    """One connection to the store of one data dir, used by one runtime instance."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection
        self.connection = connection
        """For reads outside a transaction: each sees the latest committed state, or,
        through the row cache, the state as of its last check (see :class:`RowCache`).
        An attribute, not a property: the steps read it dozens of times each."""
        self._durability = Durability.SYNCED  # what open_file set
        self.rows = rows_of(connection)

    @classmethod
    def open(cls, data_dir: str) -> "Store":
        os.makedirs(data_dir, exist_ok=True)
        return cls.open_file(store_path(data_dir))

    @classmethod
    def open_file(cls, path: str) -> "Store":
        """Open (creating and migrating if needed); ``":memory:"`` is accepted for tests."""
        # isolation_level=None: no implicit transactions; we issue BEGIN/COMMIT ourselves.
        # check_same_thread=False: a harness may build the instance on one thread and drive
        # it from another; each instance still uses its connection from one thread at a time.
        connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False,
                                     factory=WriterConnection)
        connection.row_factory = sqlite3.Row
        connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if path != ":memory:":
            connection.execute("PRAGMA journal_mode = WAL")
        connection.execute("PRAGMA synchronous = FULL")
        store = cls(connection)
        store._migrate()
        if store.rows is not None:
            store.rows.verify()
        return store

    def transaction(self, durability: Durability = Durability.SYNCED) -> "_Transaction":
        """A write transaction whose commit is as durable as ``durability`` says."""
        if durability is not self._durability:  # a pragma only when it changes
            self._connection.execute(f"PRAGMA synchronous = {durability.value}")
            self._durability = durability
        return _Transaction(self._connection)

    def close(self) -> None:
        self._connection.close()

    def _migrate(self) -> None:
        with self.transaction() as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            row = conn.execute("SELECT version FROM schema_version").fetchone()
            current = row["version"] if row else 0
            if current > SCHEMA_VERSION:
                raise StoreError(
                    f"store schema version {current} is newer than this code "
                    f"({SCHEMA_VERSION}); upgrade reference_impl"
                )
            if current == 0:
                for statement in _fresh_schema():
                    conn.execute(statement)
            for script in _MIGRATIONS[current:] if current else ():
                for statement in _statements(script):
                    conn.execute(statement)
            if row is None:
                conn.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
            elif current != SCHEMA_VERSION:  # up to date: opening writes nothing (no commit)
                conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION,))


class _Transaction:
    """``with``: ``BEGIN IMMEDIATE``, then ``COMMIT`` on success and ``ROLLBACK`` on an
    ``Exception``; any other ``BaseException`` (a ``SimulatedCrash``) leaves it uncommitted,
    as a killed process would. A class, not a generator: a step opens several."""

    __slots__ = ("_connection",)

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection

    def __enter__(self) -> sqlite3.Connection:
        self._connection.execute("BEGIN IMMEDIATE")
        return self._connection

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> bool:
        rows = rows_of(self._connection)
        if exc_type is None:
            try:
                self._connection.execute("COMMIT")
            except BaseException:
                if rows is not None:
                    rows.forget()
                raise
            return False
        if rows is not None:  # rows cached in the transaction may never be committed
            rows.forget()
        if issubclass(exc_type, Exception):
            self._connection.execute("ROLLBACK")
        return False


def _statements(script: str) -> list[str]:
    """Split a migration script into statements (``executescript`` would commit early)."""
    statements, pending = [], ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            statements.append(pending)
            pending = ""
    return statements


def open_read_only(data_dir: str, *, any_thread: bool = False) -> sqlite3.Connection | None:
    """A fresh read-only connection, or None when no store was ever created there
    (``any_thread``: usable from several threads, the caller serializing the uses)."""
    path = store_path(data_dir)
    if not os.path.exists(path):
        return None
    connection = sqlite3.connect(f"file:{quote(os.path.abspath(path))}?mode=ro", uri=True,
                                 check_same_thread=not any_thread, factory=StoreConnection)
    connection.row_factory = sqlite3.Row
    connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    return connection
