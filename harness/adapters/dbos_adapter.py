"""The DBOS adapter's :class:`harness.contract.Implementation`, importable without DBOS.

``inspect`` reads DBOS's system database directly (:mod:`harness.adapters.dbos_store`), so
the inspector process never imports DBOS (seconds of start-up) nor launches it (which would
start recovery); ``open`` imports :mod:`harness.adapters.dbos_runtime`, where the workflow,
its steps and the findings are.
"""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path
from typing import Any

from harness.adapters import session_configs
from harness.adapters.conversation import observation
from harness.adapters.dbos_store import DATABASE, read_sessions
from harness.contract import ImplementationInfo, Observation, World


class DBOSImplementation:
    def __init__(self) -> None:
        self.info = ImplementationInfo(name="dbos", version=f"dbos {version('dbos')}")

    def open(self, data_dir: str, world: World) -> Any:
        from harness.adapters.dbos_runtime import DBOSRuntime

        return DBOSRuntime(data_dir, world)

    def inspect(self, data_dir: str) -> Observation:
        configs = session_configs.load_all(data_dir)
        return observation(read_sessions(Path(data_dir) / DATABASE, configs))
