"""``inspect``: a normalized :class:`Observation` read from the durable store alone.

Guarantees: it reads through a read-only connection (no running instance needed, nothing
written), reads every table inside one read transaction so the snapshot is consistent,
fills every field of the observation from stored rows, orders rows by insertion (rowid),
and derives recovery actions with the same function the runtime projects with.

:class:`StoreReader` is what ``inspect`` uses: the harness reads the store at every
failpoint, mostly between writes, so it keeps one connection per data dir (no schema parse
per read) and hands back the very same :class:`Observation` while SQLite's
``PRAGMA data_version`` says no other connection committed since (and the file is the same
file); it keeps at most a few data dirs and closes one on :meth:`StoreReader.release`.
A kept connection also remembers the views it decoded in its previous reading, keyed by the
very column values they were decoded from, and reuses a view only for a row whose values
are unchanged (:class:`_Decoded`): decoding is pure, so the observation is the same value,
and the unchanged parts are the same objects as in the previous one. It keeps them per part
(sessions, operations, failure table, checkpoints, projections, model requests): a part
whose rows, as fetched, equal the rows it was last decoded from is that decoding's tuple of
views, without a look at each row (most readings follow a write to one or two tables).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from dataclasses import dataclass
from typing import Any, Callable, Hashable, TypeVar

from harness.contract import (
    ApprovalWaitView,
    CheckpointView,
    DenialCounterView,
    FailureEntryView,
    FailureKind,
    Mode,
    ModelRequestStatus,
    ModelRequestView,
    Observation,
    OperationView,
    Projection,
    SessionView,
    TurnStatus,
    WaitStatus,
    from_json,
)
from reference_impl import records, results
from reference_impl.records import Stage
from reference_impl.store import open_read_only, store_path
from reference_impl.visibility import operation_status


def observe(data_dir: str) -> Observation:
    """The observation read through a fresh connection (closed again)."""
    conn = open_read_only(data_dir)
    if conn is None:
        return Observation()
    try:
        return _read(conn)
    finally:
        conn.close()


@dataclass(slots=True)
class _Kept:
    conn: sqlite3.Connection
    file_id: tuple[int, int]
    data_version: int
    observation: Observation


class StoreReader:
    """Observations of several data dirs, each through one kept read-only connection."""

    def __init__(self, data_dirs_max: int = 4) -> None:
        self._kept: dict[str, _Kept] = {}
        self._data_dirs_max = data_dirs_max
        self._lock = threading.Lock()  # the connections are shared between threads

    def observe(self, data_dir: str) -> Observation:
        with self._lock:
            try:
                stat = os.stat(store_path(data_dir))
            except FileNotFoundError:
                self._close(data_dir)
                return Observation()
            file_id = (stat.st_dev, stat.st_ino)
            kept = self._kept.get(data_dir)
            if kept is not None and kept.file_id != file_id:  # replaced: read the new file
                self._close(data_dir)
                kept = None
            if kept is not None:
                version = _data_version(kept.conn)
                if version == kept.data_version:
                    return kept.observation
                kept.observation = _read(kept.conn, schema_known=True)
                kept.data_version = version
                return kept.observation
            conn = open_read_only(data_dir, any_thread=True)
            if conn is None:
                return Observation()
            version = _data_version(conn)
            observation = _read(conn)
            if not _has_schema(conn):  # being created: read it afresh next time
                conn.close()
                return observation
            self._kept[data_dir] = _Kept(conn, file_id, version, observation)
            while len(self._kept) > self._data_dirs_max:
                self._close(next(iter(self._kept)))
            return observation

    def release(self, data_dir: str) -> None:
        with self._lock:
            self._close(data_dir)

    def _close(self, data_dir: str) -> None:
        kept = self._kept.pop(data_dir, None)
        if kept is not None:
            kept.conn.close()


def _data_version(conn: sqlite3.Connection) -> int:
    """Changes whenever another connection commits to the store (SQLite's guarantee)."""
    return int(conn.execute("PRAGMA data_version").fetchone()[0])


_V = TypeVar("_V")


class _Decoded:
    """The views decoded from rows in the previous decoding of one part of the observation on
    one connection, by the row's column values: a row read again unchanged gets the view
    decoded before (decoding is a pure function of those values); only the rows of the
    current decoding are kept. Also the rows the part was last decoded from and the views
    it gave (:meth:`same`)."""

    def __init__(self) -> None:
        self._previous: dict[Hashable, Any] = {}
        self._current: dict[Hashable, Any] = {}
        self._rows: Any = None
        self._pending: Any = None
        self._views: tuple[Any, ...] = ()

    def same(self, *sources: Any) -> tuple[Any, ...] | None:
        """The views of the previous decoding when ``sources`` (what the part is decoded
        from: lists of fetched rows, compared by their column values, and sets) equal its
        sources; else None, and the memo turns to a new decoding (:meth:`keep` ends it)."""
        values = sources  # fetched rows are plain tuples (see _read): compared as they are
        if values == self._rows:
            return self._views
        self._pending = values
        self._previous, self._current = self._current, {}
        return None

    def keep(self, views: tuple[_V, ...]) -> tuple[_V, ...]:
        self._rows, self._views = self._pending, views
        return views

    def view(self, key: Hashable, decode: Callable[[], _V]) -> _V:
        found = self._current.get(key, self)
        if found is self:
            found = self._previous.get(key, self)
            if found is self:
                found = decode()
            self._current[key] = found
        return found  # type: ignore[return-value]


def _decoded(conn: sqlite3.Connection, part: str) -> _Decoded:
    """This connection's memo of the views of ``part`` (a fresh one for a plain connection)."""
    memo = getattr(conn, "memo", None)
    if memo is None:
        return _Decoded()
    decoded = memo.get(("inspection", part))
    if decoded is None:
        decoded = memo[("inspection", part)] = _Decoded()
    return decoded  # type: ignore[return-value]


def _read(conn: sqlite3.Connection, *, schema_known: bool = False) -> Observation:
    """One snapshot of every table (``schema_known``: this connection saw the schema
    already; a table is never dropped, so a kept connection skips that query).

    Rows are fetched as plain tuples (no row factory): most readings only compare the rows
    of a part with those it was last decoded from, and a ``sqlite3.Row`` costs an object per
    row plus a tuple copy to compare; a row that must be decoded is looked at by column name
    through :func:`_named`."""
    row_factory = conn.row_factory
    conn.row_factory = None
    conn.execute("BEGIN")  # one snapshot for every table
    try:
        if not schema_known and not _has_schema(conn):
            return Observation()
        wait_rows = _wait_rows(conn)
        failure_events_logged, result_records = _counts(conn)
        observation = Observation(
            sessions=_sessions(conn),
            operations=_operations(conn, wait_rows),
            approval_waits=_waits(wait_rows),
            denial_counters=_denial_counters(conn),
            failure_table=_failure_table(conn),
            checkpoints=_checkpoints(conn),
            projections=_projections(conn),
            model_requests=_model_requests(conn),
            failure_events_logged=failure_events_logged,
            result_records=result_records,
        )
        return observation
    finally:
        conn.execute("COMMIT")
        conn.row_factory = row_factory


def _columns(cursor: sqlite3.Cursor) -> dict[str, int]:
    """Each column of the statement just run, by name: its position in a fetched row."""
    return {column[0]: at for at, column in enumerate(cursor.description or ())}


def _named(columns: dict[str, int], row: tuple[Any, ...]) -> dict[str, Any]:
    """The row by column name, for the decoders that read a row as ``row["name"]``."""
    return {name: row[at] for name, at in columns.items()}


def _has_schema(conn: sqlite3.Connection) -> bool:
    return conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'operations'"
    ).fetchone() is not None


def _part(conn: sqlite3.Connection, part: str, sources: tuple[Any, ...],
          decode: Callable[[_Decoded], tuple[_V, ...]]) -> tuple[_V, ...]:
    """The views of one part of the observation: the previous decoding's tuple while its
    ``sources`` are unchanged (:meth:`_Decoded.same`), else ``decode(memo)``, kept."""
    decoded = _decoded(conn, part)
    same = decoded.same(*sources)
    return same if same is not None else decoded.keep(decode(decoded))


def _sessions(conn: sqlite3.Connection) -> tuple[SessionView, ...]:
    cursor = conn.execute("SELECT * FROM sessions ORDER BY rowid")
    rows = cursor.fetchall()
    return _part(conn, "sessions", (rows,), lambda decoded: tuple(
        decoded.view(("session", row),
                     lambda: _session_view(_named(_columns(cursor), row), decoded))
        for row in rows))


def _session_view(row: dict[str, Any], decoded: _Decoded) -> SessionView:
    # A session's row changes with its turn status; its config (the costly part to decode)
    # is decoded again only when the columns it is decoded from change.
    config_key = ("config", row["config_json"], row["rules_json"], row["permission_version"])
    state = decoded.view(config_key, lambda: records.session_from_row(row))
    return SessionView(state.session_id, TurnStatus(row["turn_status"]), state.permission_version,
                       Mode(state.config.mode), state.config.interactive)


def _operations(conn: sqlite3.Connection,
                waits: _WaitRows) -> tuple[OperationView, ...]:
    # Read off the waits already read (a wait always belongs to an operation, so the join
    # that reads them leaves none out).
    wait_execution, wait_status = waits.columns["execution_id"], waits.columns["status"]
    pending_waits = {row[wait_execution] for row in waits.rows
                     if row[wait_status] == WaitStatus.PENDING.value}
    # One query for every result record (not one per operation).
    result_cursor = conn.execute("SELECT * FROM result_records")
    all_result_rows = result_cursor.fetchall()
    cursor = conn.execute("SELECT * FROM operations ORDER BY rowid")
    rows = cursor.fetchall()

    def decode(decoded: _Decoded) -> tuple[OperationView, ...]:
        result_columns, columns = _columns(result_cursor), _columns(cursor)
        result_execution, execution = result_columns["execution_id"], columns["execution_id"]
        result_rows = {row[result_execution]: row for row in all_result_rows}
        views = []
        for row in rows:
            result_row = result_rows.get(row[execution])
            wait_pending = row[execution] in pending_waits
            key = ("operation", row, result_row, wait_pending)
            views.append(decoded.view(key, lambda: _operation_view(
                _named(columns, row),
                None if result_row is None else _named(result_columns, result_row),
                wait_pending)))
        return tuple(views)

    return _part(conn, "operations", (rows, all_result_rows, pending_waits), decode)


def _operation_view(row: dict[str, Any], result_row: dict[str, Any] | None,
                    wait_pending: bool) -> OperationView:
    op = records.operation_from_row(row)
    record = None if result_row is None else results.record_from_row(result_row)
    permission, outcome, _, reason, actions = operation_status(op, record, wait_pending)
    return OperationView(
        session_id=op.session_id,
        identity=op.identity,
        tool=op.tool,
        args=op.args,
        dedup_key=op.dedup_key,
        permission=permission,
        decided_by=op.decided_by,
        outcome=outcome,
        delivery=op.delivery,
        # The result record is the last word; before it, the host's start record.
        execution_started=record.execution_started if record else op.execution_started,
        failure_kind=record.failure_kind if record else None,
        reason=reason,
        recovery_actions=actions,
        reconciliation_required=record.reconciliation_required if record else False,
        classifier_outcome=op.classifier_outcome,
        result_digest=record.result_digest if record else None,
        attempts=record.attempts if record else int(op.stage is Stage.STARTED),
    )


@dataclass(frozen=True, slots=True)
class _WaitRows:
    columns: dict[str, int]
    rows: list[tuple[Any, ...]]


def _wait_rows(conn: sqlite3.Connection) -> _WaitRows:
    cursor = conn.execute(
        "SELECT w.*, o.stage AS op_stage, EXISTS (SELECT 1 FROM approval_waits AS later"
        " WHERE later.execution_id = w.execution_id AND later.rowid > w.rowid) AS superseded"
        " FROM approval_waits AS w"
        " JOIN operations AS o ON o.execution_id = w.execution_id ORDER BY w.rowid"
    )
    return _WaitRows(_columns(cursor), cursor.fetchall())


def _waits(waits: _WaitRows) -> tuple[ApprovalWaitView, ...]:
    rows = [_named(waits.columns, row) for row in waits.rows]
    return tuple(
        ApprovalWaitView(
            wait_id=row["wait_id"],
            session_id=row["session_id"],
            execution_id=row["execution_id"],
            tool_call_id=row["tool_call_id"],
            reason=row["reason"],
            status=WaitStatus(row["status"]),
            # The answer took effect once the operation moved past it: its result is saved,
            # or it already waits on a later question (an approved run that asks to escalate).
            applied=row["status"] != WaitStatus.PENDING.value
            and (row["op_stage"] == Stage.RECORDED.value or bool(row["superseded"])),
        )
        for row in rows
    )


def _denial_counters(conn: sqlite3.Connection) -> tuple[DenialCounterView, ...]:
    cursor = conn.execute("SELECT * FROM denial_counters ORDER BY rowid")
    rows = [_named(_columns(cursor), row) for row in cursor.fetchall()]
    return tuple(
        DenialCounterView(row["session_id"], row["permission_version"], row["consecutive"],
                          row["cumulative"])
        for row in rows
    )


def _failure_table(conn: sqlite3.Connection) -> tuple[FailureEntryView, ...]:
    rows = conn.execute("SELECT session_id, dedup_key, tool, failure_kind, count,"
                        " last_execution_id FROM failure_table ORDER BY rowid").fetchall()
    return _part(conn, "failure_table", (rows,), lambda _: tuple(
        FailureEntryView(session_id, dedup_key, tool, FailureKind(failure_kind), count,
                         last_execution_id)
        for session_id, dedup_key, tool, failure_kind, count, last_execution_id in rows))


def _checkpoints(conn: sqlite3.Connection) -> tuple[CheckpointView, ...]:
    rows = conn.execute(
        "SELECT session_id, format_version, sequence, failure_entries, size_bytes,"
        " last_execution_id FROM checkpoints ORDER BY rowid"
    ).fetchall()
    return _part(conn, "checkpoints", (rows,), lambda decoded: tuple(  # rows never change
        decoded.view(("checkpoint", *row), lambda: CheckpointView(*row)) for row in rows))


def _projections(conn: sqlite3.Connection) -> tuple[Projection, ...]:
    rows = conn.execute("SELECT projection_json FROM projections ORDER BY rowid").fetchall()
    return _part(conn, "projections", (rows,), lambda decoded: tuple(
        decoded.view(("projection", row[0]),
                     lambda: from_json(Projection, json.loads(row[0])))
        for row in rows))


def _model_requests(conn: sqlite3.Connection) -> tuple[ModelRequestView, ...]:
    cursor = conn.execute("SELECT * FROM model_requests ORDER BY rowid")
    rows = cursor.fetchall()
    return _part(conn, "model_requests", (rows,), lambda decoded: tuple(
        decoded.view(("model_request", row),
                     lambda: _model_request_view(_named(_columns(cursor), row)))
        for row in rows))


def _model_request_view(row: dict[str, Any]) -> ModelRequestView:
    return ModelRequestView(
        request_id=row["request_id"],
        session_id=row["session_id"],
        start_events=row["start_events"],
        end_events=row["end_events"],
        status=ModelRequestStatus(row["status"]) if row["status"] else None,
        partial_text=row["partial_text"],
        incomplete=row["status"] == ModelRequestStatus.INCOMPLETE.value,
    )


def _counts(conn: sqlite3.Connection) -> tuple[int, int]:
    """Failure events logged and result records, in one statement."""
    failure_events, result_records = conn.execute(
        "SELECT (SELECT COUNT(*) FROM failure_events), (SELECT COUNT(*) FROM result_records)"
    ).fetchone()
    return failure_events, result_records

