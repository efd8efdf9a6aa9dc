"""The reference implementation of the agent-operation lifecycle, on SQLite.

It implements every behaviour of ``docs/lifecycle.md`` and is meant to be read and copied.
Only :mod:`harness.contract` is imported from the harness. Entry point::

    from reference_impl import implementation
    impl = implementation()
    runtime = impl.open(data_dir, world)      # a harness.contract.Runtime
    observation = impl.inspect(data_dir)      # read from the store alone

Module map (one concept each): ``store`` (SQLite, transactions, schema), ``records``
(typed rows), ``permissions`` (precedence), ``classifier_gate``, ``denial_counters``,
``approvals``, ``failure_policy``, ``results`` (authoritative result record),
``execution`` (the operation pipeline), ``continuation`` + ``checkpoint_codec`` (the
session's checkpointed conversation), ``model_requests``, ``turns`` (the agent loop),
``visibility`` (tool lists and UI projections), ``recovery``, ``runtime`` (the driver),
``inspection`` (the observation), ``events`` (realtime events and failpoints).
"""

from __future__ import annotations

import json
from pathlib import Path

from harness.contract import CheckpointFixture, Feature, ImplementationInfo, Observation, World
from reference_impl.errors import ReferenceImplError
from reference_impl.inspection import StoreReader
from reference_impl.runtime import ReferenceRuntime

__all__ = [
    "CHECKPOINT_FIXTURES",
    "ReferenceImplError",
    "ReferenceImplementation",
    "ReferenceRuntime",
    "implementation",
]

CHECKPOINT_FIXTURES: tuple[str, ...] = (
    "fixtures/checkpoints/v1_basic.json",
    "fixtures/checkpoints/v2_with_failures.json",
)
"""Old-format checkpoints (relative to this package), each with a ``.expect.json`` sidecar
listing the messages a session continued from it must carry; handed to the harness by
:meth:`ReferenceImplementation.checkpoint_fixture`."""


_PACKAGE = Path(__file__).resolve().parent


class ReferenceImplementation:
    def __init__(self) -> None:
        self.info = ImplementationInfo(
            name="reference",
            version="0.1.0",
            features=tuple(Feature),
            checkpoint_fixtures=CHECKPOINT_FIXTURES,
        )
        self._reader = StoreReader()

    def open(self, data_dir: str, world: World) -> ReferenceRuntime:
        return ReferenceRuntime(data_dir, world)

    def inspect(self, data_dir: str) -> Observation:
        return self._reader.observe(data_dir)

    def release(self, data_dir: str) -> None:
        """The run on ``data_dir`` is over: close the connection ``inspect`` kept there."""
        self._reader.release(data_dir)

    def checkpoint_fixture(self, name: str) -> CheckpointFixture:
        """The content of a fixture it declares (those only, read from this package), with
        the messages of its ``.expect.json`` sidecar."""
        if name not in CHECKPOINT_FIXTURES:
            raise ReferenceImplError(f"no declared checkpoint fixture {name!r} "
                                     f"(declared: {', '.join(CHECKPOINT_FIXTURES)})")
        path = _PACKAGE / name
        sidecar = path.with_name(path.name.split(".")[0] + ".expect.json")
        messages = None
        if sidecar.is_file():
            messages = tuple(json.loads(sidecar.read_text(encoding="utf-8"))["messages"])
        return CheckpointFixture(path.read_bytes(), messages)


def implementation() -> ReferenceImplementation:
    return ReferenceImplementation()
