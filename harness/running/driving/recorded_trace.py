"""The trace of a finished run (:func:`recorded_trace`), free of what varies run to run.

Guarantees: the metadata is the scenario's plus the implementation's checked ``info``; a run
with no error of its own is also judged for planned faults and holds that did not happen
(:mod:`harness.criteria.fault_coverage`), each one a run error — unless the scenario is written
for an optional feature the implementation neither declares nor showed in the run
(:mod:`harness.criteria.feature_evidence`): then they are *excused*, listed apart, and the run
is no error (an implementation without the feature never walks the path they sat on); a run
that stopped on its own error keeps that error alone (the faults it never got to are a
consequence, not news). Neither the
data dir's path (either spelling) nor a memory address reaches the trace: each is replaced
by :data:`DATA_DIR_MARK` / ``" at 0x?"``, and a trace holding neither is returned as is.
"""

from __future__ import annotations

import os
import re
from typing import Any

from harness.criteria import fault_coverage, feature_evidence
from harness.contract import Feature, conformance
from harness.running.driving.state import RunState
from harness.trace.record import Trace, TraceMeta, digest_pieces, trace_from_json, trace_to_json

DATA_DIR_MARK = "<data_dir>"
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def recorded_trace(state: RunState
                   ) -> tuple[Trace, tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """The trace, the failpoints reached, what was planned but did not happen (each a run
    error), and what was planned but did not happen on the path of an optional feature the
    scenario is written for and the implementation neither declares nor showed (excused)."""
    state.foreign_thread_calls()
    info = state.info()
    scenario = state.scenario
    meta = TraceMeta(
        scenario_id=scenario.id,
        stage=scenario.stage,
        seed=state.seed,
        implementation=info.name,
        features=tuple(Feature(f) for f in info.features),
        thresholds=scenario.thresholds,
        sessions=scenario.sessions,
        tools=scenario.tools,
        faults=tuple(fault.spec() for fault in scenario.faults),
        crash_mode=state.crash_mode,
        dangerous_markers=scenario.classifier.dangerous,
        tags=scenario.tags,
    )
    with state.obs_lock:
        observations = tuple(state.observations)
    events = state.log.events()
    unfired: tuple[str, ...] = ()
    excused: tuple[str, ...] = ()
    if not state.errors:
        judged = Trace(meta, events, observations)
        unfired = fault_coverage.messages(judged)
        absent = feature_evidence.absent(judged, conformance.scenario_requirements(scenario))
        if unfired and absent:
            # The path the fault sat on belongs to a feature this implementation neither
            # declares nor showed: not an error, but nothing this run passes counts.
            names = ", ".join(f.value for f in absent)
            excused = tuple(f"{line} [excused: the scenario is written for {names}, which the "
                            "implementation neither declares nor showed]" for line in unfired)
            unfired = ()
    errors = [*state.errors, *(f"planned but not carried out: {line}" for line in unfired)]
    trace = Trace(meta, events, observations, completed=not errors, error="; ".join(errors))
    return scrub(trace, state.data_dir), state.world.failpoints_reached(), unfired, excused


def scrub(trace: Trace, data_dir: str) -> Trace:
    """The trace without the data dir path or memory addresses (they vary run to run)."""
    # Longest first: one spelling may contain the other (/private/tmp/x vs /tmp/x).
    marks = sorted({data_dir, os.path.realpath(data_dir)}, key=len, reverse=True)
    found = []

    def look(piece: str, fresh: bool) -> None:
        # A repeated piece is a copy of a fresh one, and every string of the text lies
        # whole in one piece (harness.trace.record.trace_text_pieces): the fresh ones say it.
        if fresh and not found and (any(mark in piece for mark in marks)
                                    or _ADDRESS.search(piece)):
            found.append(piece)

    digest_pieces(trace, look)  # the digest is kept for the trace's judge
    if not found:
        return trace

    def clean(value: Any) -> Any:
        if isinstance(value, str):
            for mark in marks:
                value = value.replace(mark, DATA_DIR_MARK)
            return _ADDRESS.sub(" at 0x?", value)
        if isinstance(value, dict):
            return {clean(k): clean(v) for k, v in value.items()}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value

    return trace_from_json(clean(trace_to_json(trace)))
