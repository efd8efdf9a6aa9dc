"""The process clock held at the world's virtual time (harness.running.process_clock, runner wiring).

The implementation under test here is the ordinary kind the option exists for: the reference
with its classifier timeout measured by ``time.monotonic()`` instead of the world's clock
port. Frozen, it must time out a slow verdict with no real sleeping and the same trace
digest every run; unfrozen, the same implementation lets the slow verdict through — so the
tests below can fail.
"""

from __future__ import annotations

import datetime as dt
import threading
import time

import pytest

import reference_impl
from harness.contract import ClassifierOutcome, ClassifierVerdict
from harness.criteria.base import Status
from harness.implementations.specs import InProcessImplementation
from harness.running.process_clock import FrozenProcessClock, ProcessClockError
from harness.running.runner import run_scenario
from harness.scenarios.loader import loads
from harness.running.suite import default_criteria, evaluate
from harness.trace.record import Kind, trace_digest
from harness.world.clock import EPOCH, VirtualClock
from reference_impl.classifier_gate import ClassifierGate

SLOW_ALLOW = """
id = "slow-classifier-allow"
stage = "l2"
title = "An allow that arrives after the classifier timeout is a timeout"

[[sessions]]
id = "s1"
mode = "auto"
interactive = true

[classifier]
script = [{ review = 1, outcome = "allow", delay_s = 120.0 }]

[[tools]]
name = "write_file"
kind = "write"

[[model]]
tool_calls = [{ id = "c1", tool = "write_file", args = { path = "/repo/a.txt", content = "a" } }]

[[model]]
text = "done"

[[steps]]
do = "turn"
text = "write a file"
"""


class _MonotonicGate(ClassifierGate):
    """Times the review with the process clock, as most runtimes do."""

    def _ask(self, request, timeout_s):  # type: ignore[no-untyped-def]
        started = time.monotonic()
        verdict = self._world.review(request)
        if time.monotonic() - started > timeout_s and verdict.outcome is ClassifierOutcome.ALLOW:
            return ClassifierVerdict(ClassifierOutcome.TIMEOUT,
                                     f"no verdict within {timeout_s:g}s (time.monotonic)")
        return verdict


class _ClockReadingImplementation(reference_impl.ReferenceImplementation):
    def open(self, data_dir, world):  # type: ignore[no-untyped-def]
        runtime = super().open(data_dir, world)
        for value in vars(runtime).values():  # swap the gate of its pipeline
            gate = getattr(value, "_gate", None)
            if isinstance(gate, ClassifierGate):
                gate.__class__ = _MonotonicGate
        return runtime


def _implementation(*, frozen: bool) -> InProcessImplementation:
    implementation = InProcessImplementation("python:clock_reading", _ClockReadingImplementation())
    implementation.freeze_process_clock = frozen
    return implementation


def _run(frozen: bool):
    return run_scenario(_implementation(frozen=frozen), loads(SLOW_ALLOW), 0, time_limit_s=20)


def _executions(run) -> list:
    return [e for e in run.trace.events if e.kind == Kind.TOOL_EXECUTED]


@pytest.fixture
def no_real_sleep(monkeypatch):
    def refuse(seconds: float) -> None:
        raise AssertionError(f"time.sleep({seconds}) during a frozen-clock run")

    monkeypatch.setattr(time, "sleep", refuse)


def test_python_implementations_freeze_by_default():
    assert InProcessImplementation("python:x", reference_impl.implementation()).freeze_process_clock


def test_frozen_the_monotonic_timeout_fires_with_no_sleep_and_one_digest(no_real_sleep):
    first, second = _run(frozen=True), _run(frozen=True)
    assert first.error == "" and second.error == ""
    assert _executions(first) == []  # a verdict 120 s late is not an allow
    assert trace_digest(first.trace) == trace_digest(second.trace)
    verdicts = {v.criterion_id: v for v in evaluate(default_criteria(), first.trace)}
    assert all(v.status is not Status.FAIL for v in verdicts.values()), [
        (v.criterion_id, v.message) for v in verdicts.values() if v.status is Status.FAIL]


def test_unfrozen_the_same_implementation_lets_the_slow_allow_through():
    run = _run(frozen=False)
    assert len(_executions(run)) == 1  # so the frozen run's pass is the clock's doing
    assert any(v.status is Status.FAIL
               for v in evaluate(default_criteria(), run.trace)), "a criterion must see it"


def test_the_real_clock_is_back_after_the_run():
    _run(frozen=True)
    assert abs(time.time() - dt.datetime.now(dt.timezone.utc).timestamp()) < 5
    assert time.time() > EPOCH + 365 * 86400  # not the world's 2023 instant


def test_follow_moves_every_reading_and_every_thread():
    clock = VirtualClock()
    seen: list[float] = []
    with FrozenProcessClock(clock.now()) as frozen:
        clock.follow(frozen.follow)
        assert time.time() == time.monotonic() == EPOCH
        clock.advance(2.5)
        reader = threading.Thread(target=lambda: seen.append(time.monotonic()))
        reader.start()
        reader.join()
        assert dt.datetime.now(dt.timezone.utc).timestamp() == EPOCH + 2.5
        assert time.perf_counter() == EPOCH + 2.5
    assert seen == [EPOCH + 2.5]
    clock.advance(1)  # after the block: a no-op follower, the real clock untouched
    assert time.time() > EPOCH + 365 * 86400


def test_a_second_freeze_in_the_same_process_is_refused():
    with FrozenProcessClock(EPOCH):
        with pytest.raises(ProcessClockError, match="already frozen"):
            with FrozenProcessClock(EPOCH):
                pass
    with FrozenProcessClock(EPOCH):  # and the first one let go on exit
        pass


def _args(*argv: str):
    from harness.cli.app import build_parser

    return build_parser().parse_args(["run", *argv])


def _context():
    import io

    from harness.cli.options import Context, Deps

    return Context(Deps(), io.StringIO(), io.StringIO(), ())


def test_no_freeze_clock_turns_it_off_for_a_python_implementation():
    spec = "python:reference_impl:implementation"
    from harness.cli.options import implementation_under_test

    assert implementation_under_test(_context(), _args("--impl", spec)).freeze_process_clock
    off = implementation_under_test(_context(), _args("--impl", spec, "--no-freeze-clock"))
    assert off.freeze_process_clock is False


def test_freeze_clock_for_an_implementation_outside_this_process_is_bad_input():
    from harness.cli.options import implementation_under_test
    from harness.contract.errors import UsageError

    with pytest.raises(UsageError, match="only python: implementations"):
        implementation_under_test(_context(), _args("--freeze-clock"))
