"""Hostile in-process implementations (``python:MODULE:FACTORY``): each misbehaviour is a
scenario error with a message that names it (exit 1), never a harness bug (exit 3), never a
silent pass or a run that differs from run to run.

Each hostile implementation is the reference with one defect, defined below and loaded by
``--impl python:<this module>:<factory>``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import reference_impl
from harness.cli import app as cli
from harness.contract import EventType, LifecycleEvent, TurnResult

HERE = __name__
TURN = "scenarios/m/eof_without_text.toml"
"""One session, one turn, no tool call: the fastest scenario that runs a turn."""
OTHER_TURN = "scenarios/m/cancelled.toml"
TOOL = "scenarios/x/tool_claims_not_executed.toml"
"""A turn whose model calls a tool."""
CRASH = "scenarios/l4/crash_after_result_saved.toml"
"""A crash fault: restart + recover()."""


class Runtime:
    """The reference runtime with some methods replaced."""

    def __init__(self, inner: Any, world: Any, overrides: dict[str, Any]) -> None:
        self.inner, self.world, self.overrides = inner, world, overrides

    def __getattr__(self, name: str) -> Any:
        override = self.overrides.get(name)
        if override is None:
            return getattr(self.inner, name)
        return lambda *args: override(self, *args)


class Hostile:
    """The reference implementation with some driver methods or its inspect replaced."""

    def __init__(self, inspect: Any = None, open: Any = None, **runtime: Any) -> None:
        self.inner = reference_impl.implementation()
        self.info = self.inner.info
        self.fixture_module = type(self.inner).__module__
        self._inspect, self._open, self.runtime = inspect, open, runtime

    def open(self, data_dir: str, world: Any) -> Any:
        if self._open is not None:
            return self._open(data_dir, world)
        return Runtime(self.inner.open(data_dir, world), world, self.runtime)

    def inspect(self, data_dir: str) -> Any:
        observation = self.inner.inspect(data_dir)
        return self._inspect(observation) if self._inspect else observation


# --------------------------------------------------------------------------- factories


def honest() -> Hostile:
    return Hostile()


def open_returns_none() -> Hostile:
    return Hostile(open=lambda data_dir, world: None)


def run_turn_returns_none() -> Hostile:
    return Hostile(run_turn=lambda rt, session, text: (rt.inner.run_turn(session, text), None)[1])


def run_turn_returns_str() -> Hostile:
    return Hostile(run_turn=lambda rt, session, text: (rt.inner.run_turn(session, text), "done")[1])


def run_turn_returns_bad_status() -> Hostile:
    return Hostile(run_turn=lambda rt, session, text: dataclasses.replace(
        rt.inner.run_turn(session, text), status="finished"))


def recover_returns_turn_result() -> Hostile:
    return Hostile(recover=lambda rt: (rt.inner.recover(), TurnResult("s1", "idle"))[1])


def observation_holds_a_set() -> Hostile:
    return Hostile(inspect=lambda obs: dataclasses.replace(obs, sessions=set(obs.sessions)))


def inspect_returns_garbage() -> Hostile:
    return Hostile(inspect=lambda obs: {"sessions": []})


class _InfoRaisesAfterLoad(Hostile):
    reads = 0

    @property  # type: ignore[override]
    def info(self) -> Any:
        type(self).reads += 1
        if type(self).reads > 1:
            raise RuntimeError("info is gone")
        return reference_impl.implementation().info

    @info.setter
    def info(self, value: Any) -> None:
        pass


def info_raises_after_load() -> Hostile:
    _InfoRaisesAfterLoad.reads = 0
    return _InfoRaisesAfterLoad()


def _emit_from_a_thread_of_its_own(rt: Runtime, session: str, text: str) -> Any:
    event = LifecycleEvent(EventType.TURN_ENDED, session)
    worker = threading.Thread(target=rt.world.emit, args=(event,), name="iut-background")
    worker.start()
    worker.join()
    return rt.inner.run_turn(session, text)


def emits_from_its_own_thread() -> Hostile:
    return Hostile(run_turn=_emit_from_a_thread_of_its_own)


def _emit_a_set(rt: Runtime, session: str, text: str) -> Any:
    try:
        rt.world.emit(LifecycleEvent(EventType.TURN_ENDED, session, data={"ids": {"a", "b"}}))
    except Exception:  # noqa: BLE001 - swallowing the refusal does not hide it
        pass
    return rt.inner.run_turn(session, text)


def emits_a_set() -> Hostile:
    return Hostile(run_turn=_emit_a_set)


def _emit_then_run(data: dict[str, Any]) -> Any:
    def run_turn(rt: Runtime, session: str, text: str) -> Any:
        try:
            rt.world.emit(LifecycleEvent(EventType.TURN_ENDED, session, data=data))
        except Exception:  # noqa: BLE001 - swallowing the refusal does not hide it
            pass
        return rt.inner.run_turn(session, text)
    return run_turn


def emits_a_lone_surrogate() -> Hostile:
    return Hostile(run_turn=_emit_then_run({"note": "x\ud800y"}))


def emits_nan() -> Hostile:
    return Hostile(run_turn=_emit_then_run({"cost": float("nan")}))


def _unknown_failpoint(rt: Runtime, session: str, text: str) -> Any:
    try:
        rt.world.failpoint("<b>after_lunch</b>", {"session_id": session})
    except Exception:  # noqa: BLE001 - swallowing the refusal does not hide it
        pass
    return rt.inner.run_turn(session, text)


def calls_an_unknown_failpoint() -> Hostile:
    return Hostile(run_turn=_unknown_failpoint)


class _PooledWorld:
    """The world with execute_tool run on a thread pool (and awaited)."""

    def __init__(self, world: Any) -> None:
        self.world = world

    def __getattr__(self, name: str) -> Any:
        return getattr(self.world, name)

    def execute_tool(self, invocation: Any) -> Any:
        with ThreadPoolExecutor(max_workers=1) as pool:
            return pool.submit(self.world.execute_tool, invocation).result()


def runs_tools_on_a_pool() -> Hostile:
    inner = reference_impl.implementation()
    return Hostile(open=lambda data_dir, world: inner.open(data_dir, _PooledWorld(world)))


STOP = threading.Event()
"""Set by the tests at the end: the unstoppable loop below then ends."""
PIDS_FILE = "LH_TEST_PIDS_FILE"


def _note_pid() -> None:
    with open(os.environ[PIDS_FILE], "a", encoding="utf-8") as out:
        out.write(f"{os.getpid()}\n")


class _BusyOnce:
    calls = 0


def _busy_first_turn(rt: Runtime, session: str, text: str) -> Any:
    _note_pid()
    _BusyOnce.calls += 1
    if _BusyOnce.calls == 1:
        while True:
            pass
    return rt.inner.run_turn(session, text)


def busy_loop_first_turn() -> Hostile:
    _BusyOnce.calls = 0
    return Hostile(run_turn=_busy_first_turn)


def _unstoppable_first_turn(rt: Runtime, session: str, text: str) -> Any:
    _note_pid()
    _BusyOnce.calls += 1
    if _BusyOnce.calls == 1:
        while not STOP.is_set():
            try:
                while not STOP.is_set():
                    pass
            except BaseException:  # noqa: BLE001 - swallows the harness's stop request
                pass
    return rt.inner.run_turn(session, text)


def unstoppable_busy_loop_first_turn() -> Hostile:
    _BusyOnce.calls = 0
    return Hostile(run_turn=_unstoppable_first_turn)


SLOW_PORT_S = 0.15
"""How long each world port call of :func:`slow_world_calls` takes: a dozen calls per turn
outlast a 1 s limit, while no stretch without a recorded event comes near it."""


class _SlowWorld:
    """A world port whose every call takes :data:`SLOW_PORT_S` (a slow machine, a slow
    network to the model): the driver call is long, but it keeps making progress."""

    def __init__(self, world: Any) -> None:
        self._world = world

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._world, name)
        if not callable(attribute):
            return attribute

        def slow(*args: Any, **kwargs: Any) -> Any:
            time.sleep(SLOW_PORT_S)
            return attribute(*args, **kwargs)

        return slow


def slow_world_calls() -> Hostile:
    inner = reference_impl.implementation()
    return Hostile(open=lambda data_dir, world: inner.open(data_dir, _SlowWorld(world)))


# --------------------------------------------------------------------------- helpers


def _run(tmp_path: Path, factory: str, *scenarios: str, limit: str = "20") -> tuple[int, dict]:
    report_dir = tmp_path / "report"
    # --jobs 1: these defects live in the implementation's process-wide state, which one
    # scenario leaves for the next only when both run in this process, one after the other
    code = cli.main(["run", "--impl", f"python:{HERE}:{factory}", "--scenarios", *scenarios,
                     "--report-dir", str(report_dir), "--time-limit-s", limit, "--jobs", "1"])
    report = json.loads((report_dir / "report.json").read_text(encoding="utf-8"))
    return code, {s["id"]: s for s in report["scenarios"]}


def _error_of(tmp_path: Path, factory: str, scenario: str = TURN) -> str:
    code, scenarios = _run(tmp_path, factory, scenario)
    assert code == 1
    (result,) = scenarios.values()
    assert result["status"] == "error"
    return result["error"]


@pytest.fixture(autouse=True)
def _pids(tmp_path, monkeypatch):
    monkeypatch.setenv(PIDS_FILE, str(tmp_path / "pids"))
    STOP.clear()
    before = set(threading.enumerate())  # others' threads are not this test's to wait for
    yield
    STOP.set()
    for thread in threading.enumerate():
        if thread.name.startswith("lh-") and thread not in before:
            thread.join(timeout=10)


# --------------------------------------------------------------------------- tests


def test_the_honest_wrapper_passes_the_scenarios_used_below(tmp_path):
    # A single scenario leaves criteria unexercised (exit 1): what matters is that the
    # scenarios themselves pass, so every error below is the defect's alone.
    _, scenarios = _run(tmp_path, "honest", TURN, OTHER_TURN, CRASH, TOOL)
    assert {s["status"] for s in scenarios.values()} == {"passed"}, scenarios


@pytest.mark.parametrize("factory, scenario, message", [
    ("open_returns_none", TURN,
     "open returned None, expected a Runtime (harness/contract/vocabulary.py: an object with open_session,"),
    ("run_turn_returns_none", TURN,
     "run_turn returned None, expected TurnResult (harness/contract/vocabulary.py) (instance 0)"),
    ("run_turn_returns_str", TURN,
     "run_turn returned str, expected TurnResult (harness/contract/vocabulary.py)"),
    ("run_turn_returns_bad_status", TURN,
     "run_turn returned a TurnResult whose status is 'finished', expected TurnStatus"),
    ("recover_returns_turn_result", CRASH,
     "recover returned TurnResult, expected RecoveryReport (harness/contract/vocabulary.py)"),
    ("observation_holds_a_set", TURN,
     "inspect returned an Observation whose sessions is set, expected tuple[SessionView, ...]"),
    ("inspect_returns_garbage", TURN,
     "inspect returned dict, expected Observation (harness/contract/vocabulary.py)"),
    ("emits_a_set", TURN,
     "world port emit was called with a LifecycleEvent whose data['ids'] is set, expected "
     "JSON data"),
    ("info_raises_after_load", TURN,
     "reading Implementation.info raised RuntimeError: info is gone"),
    ("emits_a_lone_surrogate", TURN,
     "world port emit was called with a LifecycleEvent whose data['note'] is 'x\\ud800y', "
     "expected text without lone surrogates"),
    ("emits_nan", TURN,
     "world port emit was called with a LifecycleEvent whose data['cost'] is nan, expected a "
     "finite number"),
    ("calls_an_unknown_failpoint", TURN,
     "world port failpoint was called with name '<b>after_lunch</b>', which is not in the "
     "failpoint catalogue"),
])
def test_a_value_off_the_contract_is_a_scenario_error(tmp_path, factory, scenario, message):
    assert message in _error_of(tmp_path, factory, scenario)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_port_called_from_a_thread_the_harness_did_not_start_fails_the_scenario(tmp_path):
    error = _error_of(tmp_path, "emits_from_its_own_thread")
    assert ("world port emit was called by instance 0 from thread 'iut-background', which "
            "the harness did not start") in error


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_tool_run_on_a_thread_pool_is_refused_and_named_alike_in_every_run(tmp_path):
    errors = {_error_of(tmp_path / str(n), "runs_tools_on_a_pool", TOOL) for n in range(2)}
    (error,) = errors
    assert ("world port execute_tool was called by instance 0 from thread "
            "'ThreadPoolExecutor-?_0', which the harness did not start") in error


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_foreign_thread_call_is_never_recorded_so_runs_stay_alike(tmp_path):
    digests = set()
    for n in range(3):
        _, scenarios = _run(tmp_path / str(n), "emits_from_its_own_thread", TURN)
        digests.add(next(iter(scenarios.values()))["trace_digest"])
    assert len(digests) == 1


def test_a_long_call_that_keeps_calling_the_world_is_not_a_hang(tmp_path):
    # Each turn's driver call outlasts the 1 s limit (every port call takes SLOW_PORT_S),
    # but the implementation keeps calling the world: slow, not hung. The limit is for a
    # call that stops making progress (the busy loop below is still one after 2 s).
    _, scenarios = _run(tmp_path, "slow_world_calls", TURN, limit="1")
    (result,) = scenarios.values()
    assert result["status"] == "passed" and result["error"] == "", result["error"]
    assert result["duration_s"] > 1.2  # the turn really outlasted the 1 s limit


def test_a_busy_loop_is_a_hang_and_its_thread_is_stopped(tmp_path):
    code, scenarios = _run(tmp_path, "busy_loop_first_turn", TURN, OTHER_TURN, limit="2")
    assert code == 1
    hung, after = scenarios["m-eof-without-text"], scenarios["m-cancelled"]
    assert ("run_turn on instance 0 did not return and made no progress (no call to the world) "
            "for 2s") in hung["error"]
    assert "could not be stopped" not in hung["error"]
    assert after["status"] == "passed" and after["error"] == ""
    assert not [t for t in threading.enumerate() if t.name.startswith("lh-run_turn")]


def test_an_unstoppable_busy_loop_sends_later_scenarios_to_a_fresh_worker(tmp_path):
    code, scenarios = _run(tmp_path, "unstoppable_busy_loop_first_turn", TURN, OTHER_TURN,
                           limit="2")
    assert code == 1
    hung, after = scenarios["m-eof-without-text"], scenarios["m-cancelled"]
    assert "could not be stopped: run_turn (thread 'lh-run_turn-0') still running" in hung["error"]
    assert "every later scenario of this implementation runs in a fresh worker process" in (
        hung["error"])
    assert after["status"] == "passed" and after["error"] == ""
    first, second = (tmp_path / "pids").read_text(encoding="utf-8").split()
    assert int(first) == os.getpid() and int(second) != os.getpid()
