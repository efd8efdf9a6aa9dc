"""The DBOS adapter's wait for a recovered workflow to stop running in its process (what makes
``recover`` return at the same point of the trace run after run), on a stand-in for DBOS's
count of running executions. Skipped with the reason when DBOS is not installed."""

from __future__ import annotations

import types

import pytest

from harness.adapters import find


def _runtime_class():
    adapter = find("dbos")
    if not adapter.installed:
        pytest.skip(f"adapter dbos not installed: {adapter.missing_reason}")
    from harness.adapters.dbos_runtime import DBOSRuntime

    return DBOSRuntime


class _Running:
    """Answers ``activeList`` with the workflow running for ``polls`` looks, then stopped."""

    def __init__(self, workflow_id: str, polls: int) -> None:
        self.workflow_id, self.polls, self.looks = workflow_id, polls, 0

    def activeList(self) -> list[str]:  # noqa: N802 - DBOS's name
        self.looks += 1
        return [self.workflow_id, "other"] if self.looks <= self.polls else ["other"]


class _DBOS:
    def __init__(self, running: _Running) -> None:
        self._active_workflows_set = running


def _bare(runtime_class, dbos: object):
    runtime = object.__new__(runtime_class)  # no launch: only the wait is under test
    runtime.dbos = dbos
    return runtime


@pytest.fixture
def sleeps(monkeypatch) -> list[float]:
    """The wait's sleeps, recorded instead of slept."""
    _runtime_class()  # skips without DBOS, before importing the module that needs it
    import harness.adapters.dbos_runtime as dbos_runtime

    slept: list[float] = []
    monkeypatch.setattr(dbos_runtime, "time", types.SimpleNamespace(sleep=slept.append))
    return slept


def test_the_wait_ends_only_once_the_workflow_runs_no_more(sleeps):
    running = _Running("s1/turn/000001", polls=3)
    _bare(_runtime_class(), _DBOS(running))._until_it_stops_here("s1/turn/000001")
    assert running.looks == 4  # three looks while it ran, the fourth saw it stopped
    from harness.adapters.dbos_runtime import POLLING_INTERVAL_S

    assert sleeps == [POLLING_INTERVAL_S] * 3


def test_another_workflow_running_does_not_hold_the_wait(sleeps):
    running = _Running("s2/turn/000001", polls=5)
    _bare(_runtime_class(), _DBOS(running))._until_it_stops_here("s1/turn/000001")
    assert running.looks == 1 and sleeps == []


def test_a_dbos_without_the_count_is_a_clear_error_not_a_silent_race():
    with pytest.raises(RuntimeError, match="_active_workflows_set.*tested with dbos"):
        _bare(_runtime_class(), object())._until_it_stops_here("s1/turn/000001")
