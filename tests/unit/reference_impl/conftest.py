"""Fixtures for the reference implementation's tests: a data dir, the implementation, and a
way to open a runtime over a scripted :class:`ref_fakes.FakeWorld`."""

from __future__ import annotations

import pytest

from ref_fakes import FakeWorld
from reference_impl import ReferenceImplementation, implementation


@pytest.fixture
def impl() -> ReferenceImplementation:
    return implementation()


@pytest.fixture
def data_dir(tmp_path) -> str:
    return str(tmp_path / "data")


@pytest.fixture
def start(impl, data_dir):
    """start(world, *configs) -> runtime with those sessions opened on the test's data dir."""
    opened = []

    def _start(world: FakeWorld, *configs):
        runtime = impl.open(data_dir, world)
        for config in configs:
            runtime.open_session(config)
        opened.append(runtime)
        return runtime

    yield _start
    for runtime in opened:
        runtime.close()
