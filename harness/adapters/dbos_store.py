"""Read DBOS's SQLite system database as the adapter's sessions, without DBOS.

The inspector process never launches DBOS (it would start recovery): it opens the system
database read-only with :mod:`sqlite3` and reads what DBOS recorded with its portable JSON
serializer: each turn workflow's inputs (``workflow_input``), status (``workflow_status``)
and step outputs (``operation_outputs``, in step order). Guarantees: nothing is written;
a missing database or table means "nothing recorded yet".
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any, Iterator, Mapping

from harness.adapters import conversation
from harness.adapters.conversation import SessionStore, user_message
from harness.contract import SessionConfig

DATABASE = "dbos.sqlite"
"""The DBOS system database's file name inside the data dir (the runtime writes it, the
adapter's inspect reads it)."""

STEP_FUNCTIONS = ("model_step", "tool_step")
UNFINISHED = ("PENDING", "ENQUEUED")


def read_sessions(database: Path,
                  configs: Mapping[str, SessionConfig]) -> Iterator[SessionStore]:
    return conversation.read_sessions(database, configs, _session)


def _session(connection: sqlite3.Connection, config: SessionConfig) -> SessionStore:
    prefix = f"{config.session_id}/turn/"
    try:
        workflows = connection.execute(
            "SELECT s.workflow_uuid, s.status, i.inputs FROM workflow_status s "
            "LEFT JOIN workflow_input i ON i.workflow_uuid = s.workflow_uuid "
            "WHERE substr(s.workflow_uuid, 1, ?) = ? ORDER BY s.workflow_uuid",
            (len(prefix), prefix)).fetchall()
    except sqlite3.OperationalError:  # DBOS has not created its tables yet
        return SessionStore(config, (), (), -1, 0, False)
    messages: list[dict[str, Any]] = []
    running = False
    for workflow_id, status, inputs in workflows:
        running = running or status in UNFINISHED
        if inputs:
            messages.append(user_message(json.loads(inputs)["positionalArgs"][1]))
        for (output,) in connection.execute(
                "SELECT output FROM operation_outputs WHERE workflow_uuid = ? AND "
                "function_name IN (?, ?) AND output IS NOT NULL ORDER BY function_id",
                (workflow_id, *STEP_FUNCTIONS)):
            messages.append(json.loads(output))
    return SessionStore(config=config, messages=tuple(messages), saved_results=(),
                        checkpoint_sequence=-1, checkpoint_size_bytes=0, running=running)
