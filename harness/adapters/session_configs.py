"""The session configurations an adapter was given, kept beside the library's own store.

Neither library has a notion of a session's identity, rules or tools: the adapter keeps each
:class:`~harness.contract.SessionConfig` as one JSON file (written to a temporary name,
fsynced and renamed, so a kill leaves the old file or the new one). It is bookkeeping for
the adapter, not lifecycle state: nothing the libraries decide reads it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from harness.contract import SessionConfig, from_json, to_json

FOLDER = "adapter-sessions"


def save(data_dir: str, config: SessionConfig) -> None:
    folder = Path(data_dir) / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{_file_stem(config.session_id)}.json"
    temporary = target.with_suffix(".tmp")
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(to_json(config), handle, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, target)


def load_all(data_dir: str) -> dict[str, SessionConfig]:
    """Every saved session, by id (empty when the adapter never ran in ``data_dir``)."""
    folder = Path(data_dir) / FOLDER
    if not folder.is_dir():
        return {}
    configs = {}
    for path in sorted(folder.glob("*.json")):
        config = from_json(SessionConfig, json.loads(path.read_text(encoding="utf-8")))
        configs[config.session_id] = config
    return configs


def _file_stem(session_id: str) -> str:
    return session_id.encode("utf-8").hex()
