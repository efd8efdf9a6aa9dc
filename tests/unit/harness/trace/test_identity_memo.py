"""harness.trace.identity_memo and the trace kind index built on it."""

from __future__ import annotations

import dataclasses

from harness.trace.identity_memo import by_identity
from harness.trace.record import Trace, TraceEvent, TraceMeta


def test_remembers_by_identity_not_equality_and_keeps_only_size_objects():
    calls: list[object] = []

    @by_identity(2)
    def length(value: list[int]) -> int:
        calls.append(value)
        return len(value)

    a, b, c = [1], [1], [1, 2]  # a == b, but not the same object
    assert (length(a), length(a), length(b)) == (1, 1, 1)
    assert calls == [a, b]
    assert length(c) == 2  # keeps c and b now: a was the oldest
    assert length(b) == 1 and len(calls) == 3
    assert length(a) == 1 and len(calls) == 4  # evicted, so computed again


def _trace(kinds: list[str]) -> Trace:
    meta = TraceMeta("s", "x", 0, "impl", (), None, (), (), ())  # type: ignore[arg-type]
    events = tuple(TraceEvent(i, "harness", kind, 0, {}) for i, kind in enumerate(kinds))
    return Trace(meta, events, ())


def test_of_kind_keeps_trace_order_for_one_kind_and_for_several():
    trace = _trace(["a", "b", "a", "c", "b", "a"])
    assert [e.index for e in trace.of_kind("a")] == [0, 2, 5]
    assert [e.index for e in trace.of_kind("b", "a")] == [0, 1, 2, 4, 5]
    assert [e.index for e in trace.of_kind("a", "a")] == [0, 2, 5]
    assert list(trace.of_kind("missing")) == []
    assert [e.index for e in trace.of_kind("c", "missing")] == [3]
    assert [e.kind for e in trace.ledger()] == []


def test_of_kind_follows_list_order_even_when_indexes_do_not():
    meta = TraceMeta("s", "x", 0, "impl", (), None, (), (), ())  # type: ignore[arg-type]
    events = (TraceEvent(5, "harness", "a", 0, {}), TraceEvent(1, "harness", "b", 0, {}),
              TraceEvent(3, "harness", "a", 0, {}))
    trace = Trace(meta, events, ())
    assert [e.index for e in trace.of_kind("a", "b")] == [5, 1, 3]


def test_the_canonical_text_of_a_real_trace_is_the_plain_encoding_of_its_json():
    from harness.contract import canonical_json, to_json
    from harness.implementations.specs import resolve
    from harness.running.runner import run_scenario
    from harness.scenarios.loader import load
    from harness.trace.record import trace_canonical_json, trace_to_json
    from pathlib import Path

    scenario = load(Path(__file__).parents[4] / "scenarios" / "l4" / "crash_after_result_saved.toml")
    trace = run_scenario(resolve("reference"), scenario, 0).trace
    assert canonical_json(trace_to_json(trace)) == canonical_json(to_json(trace))
    assert trace_canonical_json(trace) == canonical_json(to_json(trace))


def test_large_readings_are_streamed_not_kept_and_the_digest_is_unchanged(monkeypatch):
    # A hostile implementation sends large fresh readings: the digest text is produced
    # piece by piece (never whole) and large rows are not kept, yet the digest is exactly
    # the hash of that text, and the scrub's search sees every string.
    import hashlib

    from harness.contract import Observation, Outcome, Permission, Projection
    from harness.implementations.specs import resolve
    from harness.running.runner import run_scenario
    from harness.scenarios.loader import load
    from harness.trace import record
    from harness.trace.record import (ObservationPoint, digest_and_find, digest_pieces,
                                      trace_digest)
    from pathlib import Path

    monkeypatch.setattr(record, "ROW_TEXT_KEPT_CHARS", 64)
    scenario = load(Path(__file__).parents[4] / "scenarios" / "l4" / "crash_after_result_saved.toml")
    trace = run_scenario(resolve("reference"), scenario, 0).trace
    readings = [Observation(projections=tuple(
        Projection("s1", f"ex-{n}", f"c{n}", Permission.DENY, Outcome.NOT_STARTED, "denied",
                   f"{m}" + "y" * 300, ()) for n in range(20))) for m in range(3)]
    points = trace.observations + tuple(ObservationPoint(10**6 + m, "probe:big", big)
                                        for m, big in enumerate(readings))
    trace = dataclasses.replace(trace, observations=points)
    pieces = list(digest_pieces(trace))
    text = "".join(pieces)
    assert max(len(piece) for piece in pieces) < len(text) // 4  # never the whole text
    expected = "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    digest, found = digest_and_find(trace, lambda piece: "2" + "y" * 300 in piece)
    assert (digest, found) == (expected, True)
    assert trace_digest(trace) == expected
