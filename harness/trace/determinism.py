"""Determinism self-check: the same seed, scenario and implementation give the same trace.

Guarantees of :func:`check_determinism`: every scenario is run a second time (the first run
is taken from the suite's own run when given, so a checked run costs one extra pass) and
the trace digests compared; for each mismatch the first diverging trace event (or
observation, or meta) is located and rendered on both sides, so the cause can be read off
directly. Nothing here judges conformance.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from harness.contract import Implementation, canonical_json, to_json
from harness.trace.record import Trace, trace_digest
from harness.trace.lines import compact, render_event

Runner = Callable[..., Any]


@dataclass(frozen=True, slots=True)
class Divergence:
    scenario_id: str
    file: str
    first_digest: str
    second_digest: str
    where: str
    """"event 12", "observation 3", "meta" or "length"."""
    first: str
    second: str

    def lines(self) -> tuple[str, ...]:
        return (
            f"NONDETERMINISTIC {self.scenario_id} ({self.file}): first divergence at {self.where}",
            f"    run 1: {self.first}",
            f"    run 2: {self.second}",
        )


class RecordingRunner:
    """Wraps a runner and keeps each scenario's trace, so the suite's run is the first run."""

    def __init__(self, runner: Runner) -> None:
        self._runner = runner
        self.traces: dict[str, Trace] = {}

    def __call__(self, implementation: Implementation, scenario: Any, seed: int, **kwargs: Any) -> Any:
        run = self._runner(implementation, scenario, seed, **kwargs)
        self.traces[scenario.id] = run.trace
        return run


def first_divergence(first: Trace, second: Trace) -> tuple[str, str, str] | None:
    """Where two traces first differ, rendered on both sides; None when identical."""
    if to_json(first.meta) != to_json(second.meta):
        return "meta", compact(to_json(first.meta)), compact(to_json(second.meta))
    for a, b in zip(first.events, second.events):
        if to_json(a) != to_json(b):
            return f"event {a.index}", render_event(a, width=None), render_event(b, width=None)
    if len(first.events) != len(second.events):
        longer = first.events if len(first.events) > len(second.events) else second.events
        extra = render_event(longer[min(len(first.events), len(second.events))], width=None)
        return (
            "length",
            f"{len(first.events)} events" + (f"; next: {extra}" if longer is first.events else ""),
            f"{len(second.events)} events" + (f"; next: {extra}" if longer is second.events else ""),
        )
    for position, (a, b) in enumerate(zip(first.observations, second.observations)):
        if to_json(a) != to_json(b):
            return (
                f"observation {position} (label {a.label!r}, at event {a.index})",
                compact(to_json(a.observation), width=None),
                compact(to_json(b.observation), width=None),
            )
    if len(first.observations) != len(second.observations):
        return "observations", f"{len(first.observations)}", f"{len(second.observations)}"
    if canonical_json(to_json(first)) != canonical_json(to_json(second)):
        return "trace status", f"completed={first.completed} error={first.error!r}", (
            f"completed={second.completed} error={second.error!r}"
        )
    return None


def check_determinism(
    implementation: Implementation,
    scenarios: Sequence[Any],
    seed: int,
    *,
    runner: Runner,
    first_traces: Mapping[str, Trace] | None = None,
    time_limit_s: float = 20.0,
    data_root: str | None = None,
) -> tuple[Divergence, ...]:
    divergences = []
    for scenario in scenarios:
        first = (first_traces or {}).get(scenario.id)
        if first is None:
            first = runner(implementation, scenario, seed, time_limit_s=time_limit_s, data_root=data_root).trace
        second = runner(implementation, scenario, seed, time_limit_s=time_limit_s, data_root=data_root).trace
        digest_a, digest_b = trace_digest(first), trace_digest(second)
        if digest_a == digest_b:
            continue
        where = first_divergence(first, second) or ("digest only", digest_a, digest_b)
        divergences.append(Divergence(scenario.id, str(scenario.file), digest_a, digest_b, *where))
    return tuple(divergences)
