"""Fakes for the suite and CLI tests: scenarios, a runner, criteria and implementations.

They stand in for harness.scenarios.loader / harness.running.runner / the criteria catalogue, so these
tests depend only on the shared vocabulary (contract, trace, criteria.base, result).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.contract import Feature, ImplementationInfo, Thresholds
from harness.criteria.base import Criterion, Evidence, Status, Verdict, failed, judge, passed
from harness.trace.record import Trace, TraceEvent, TraceMeta


@dataclass(frozen=True, slots=True)
class FakeScenario:
    id: str
    stage: str = "l4"
    title: str = "a fake scenario"
    file: str = "scenarios/l4/fake.toml"
    tags: tuple[str, ...] = ()
    faults: tuple[str, ...] = ()
    # what the fake runner does with it
    failpoints: tuple[str, ...] = ()
    error: str = ""
    marks: tuple[str, ...] = ()
    """Labels criteria look for in the trace (``harness`` events of kind ``mark``)."""
    publishes: int = 0
    """UI publications the world records (the behaviour that shows ``web_projection``)."""
    excused: tuple[str, ...] = ()
    """Planned faults the fake run reports as excused (a feature neither declared nor shown)."""


@dataclass(frozen=True, slots=True)
class FakeRun:
    trace: Trace
    failpoints_reached: tuple[str, ...]
    error: str
    duration_s: float
    excused: tuple[str, ...] = ()


@dataclass
class FakeImplementation:
    info: ImplementationInfo = field(
        default_factory=lambda: ImplementationInfo("fake-impl", "9.9", (Feature.APPROVALS,))
    )

    def open(self, data_dir: str, world: Any) -> Any:  # pragma: no cover - never driven
        raise AssertionError("the fake runner never opens the implementation")

    def inspect(self, data_dir: str) -> Any:  # pragma: no cover
        raise AssertionError("never inspected")


def make_trace(scenario: FakeScenario, seed: int, features=(Feature.APPROVALS,)) -> Trace:
    events = [
        TraceEvent(0, "harness", "driver_call", 0, {"method": "run_turn", "args": {"text": "hi"}}),
    ]
    for mark in scenario.marks:
        events.append(TraceEvent(len(events), "harness", "mark", 0, {"label": mark}))
    for _ in range(scenario.publishes):
        events.append(TraceEvent(len(events), "world", "ui_publish", 0, {"projection": {}}))
    for fp in scenario.failpoints:
        events.append(
            TraceEvent(len(events), "world", "failpoint", 0, {"name": fp, "context": {}, "hit": 1, "action": "none"})
        )
    events.append(TraceEvent(len(events), "harness", "driver_return", 0, {"method": "run_turn"}))
    meta = TraceMeta(
        scenario_id=scenario.id, stage=scenario.stage, seed=seed, implementation="fake-impl",
        features=tuple(features), thresholds=Thresholds(), sessions=(), tools=(), faults=(),
    )
    return Trace(meta, tuple(events), (), completed=not scenario.error, error=scenario.error)


def fake_runner(calls: list | None = None, features=(Feature.APPROVALS,)):
    def run(implementation, scenario, seed, *, time_limit_s=20.0, data_root=None):
        if calls is not None:
            calls.append((scenario.id, seed, time_limit_s))
        return FakeRun(make_trace(scenario, seed, features), scenario.failpoints, scenario.error, 0.25,
                       scenario.excused)

    return run


def render_faults(plan) -> tuple[str, ...]:
    return tuple(f"fault {f}" for f in plan)


def _marks(trace: Trace, label: str) -> list[int]:
    return [e.index for e in trace.of_kind("mark") if e.data["label"] == label]


def criterion(cid: str, stage: str = "l4", required=()) -> Criterion:
    """A criterion exercised by marks ``<cid>:ok`` and violated by marks ``<cid>:bad``."""

    def check(trace: Trace) -> Verdict:
        ok = _marks(trace, f"{cid}:ok")
        bad = _marks(trace, f"{cid}:bad")
        if f"{cid}:raise" in {e.data["label"] for e in trace.of_kind("mark")}:
            raise RuntimeError("checker exploded")
        return judge(
            cid, len(ok) + len(bad),
            [Evidence(f"{cid} violated <here> & there", (i,)) for i in bad],
            why_idle="nothing to check",
        )

    return Criterion(
        id=cid, stage=stage, title=f"title of {cid}", statement=f"statement of {cid}",
        seed_clause=f"「seed clause of {cid}」", check=check, required_features=tuple(required),
    )


__all__ = [
    "FakeScenario", "FakeRun", "FakeImplementation", "make_trace", "fake_runner",
    "render_faults", "criterion", "Status", "passed", "failed",
]
