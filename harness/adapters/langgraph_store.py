"""Read ``SqliteSaver``'s database as the adapter's sessions, without importing LangGraph.

The inspector process answers ``inspect`` often and must start fast: importing LangGraph
takes seconds, so this reads the saver's two tables with :mod:`sqlite3` (read-only) and
decodes their msgpack values with ``ormsgpack`` (the saver's own encoding, a dependency of
``langgraph-checkpoint``). Per session (LangGraph thread): the latest checkpoint of the
root namespace (``checkpoints``, highest id), its ``messages`` channel, its step
(``metadata.step``), and the tool messages saved against it as pending writes (``writes``:
a task finished, its step's checkpoint not saved yet). Objects the adapter's messages never
contain (LangGraph's own extension types, e.g. ``Send`` packets) decode to ``None``.
Guarantees: nothing is written; a missing database or table means "nothing saved yet".
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any, Iterator, Mapping

from harness.adapters import conversation
from harness.adapters.conversation import SessionStore, tool_results
from harness.contract import SessionConfig, canonical_json

MSGPACK = "msgpack"


def read_sessions(database: Path,
                  configs: Mapping[str, SessionConfig]) -> Iterator[SessionStore]:
    return conversation.read_sessions(database, configs, _session)


def _decode(kind: str, blob: bytes | None) -> Any:
    import ormsgpack

    if kind == MSGPACK and blob:
        return ormsgpack.unpackb(blob, ext_hook=lambda code, data: None)
    if kind == "json" and blob:
        return json.loads(blob)
    return None


def _session(connection: sqlite3.Connection, config: SessionConfig) -> SessionStore:
    try:
        row = connection.execute(
            "SELECT checkpoint_id, type, checkpoint, metadata FROM checkpoints "
            "WHERE thread_id = ? AND checkpoint_ns = '' ORDER BY checkpoint_id DESC LIMIT 1",
            (config.session_id,)).fetchone()
    except sqlite3.OperationalError:  # the saver has not created its tables yet
        row = None
    if row is None:
        return SessionStore(config, (), (), -1, 0, False)
    checkpoint_id, kind, blob, metadata = row
    checkpoint = _decode(kind, blob) or {}
    messages = tuple(m for m in checkpoint.get("channel_values", {}).get("messages", ())
                     if isinstance(m, dict))
    pending: list[dict[str, Any]] = []
    for write_kind, value in connection.execute(
            "SELECT type, value FROM writes WHERE thread_id = ? AND checkpoint_ns = '' AND "
            "checkpoint_id = ? AND channel = 'messages' ORDER BY task_path, task_id, idx",
            (config.session_id, checkpoint_id)):
        pending.extend(tool_results(_decode(write_kind, value) or ()))
    last = messages[-1] if messages else None
    finished = bool(last and last["role"] == "assistant" and not last["tool_calls"])
    return SessionStore(
        config=config, messages=messages, saved_results=tuple(pending),
        checkpoint_sequence=int(json.loads(metadata or "{}").get("step", 0)),
        checkpoint_size_bytes=_size_bytes(messages), running=bool(messages) and not finished)


def _size_bytes(messages: tuple[dict[str, Any], ...]) -> int:
    """The size of the conversation the checkpoint holds (canonical JSON). Not the blob's
    length: LangGraph's channel versions carry a random part, which would make the
    observation, and so the trace, differ from run to run."""
    return len(canonical_json(list(messages)).encode("utf-8"))
