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


def test_the_spliced_canonical_text_equals_the_plain_one_on_a_real_trace():
    from harness.contract import canonical_json, to_json
    from harness.implementations.specs import resolve
    from harness.running.runner import run_scenario
    from harness.scenarios.loader import load
    from harness.trace.record import trace_canonical_json, trace_to_json
    from pathlib import Path

    scenario = load(Path(__file__).parents[4] / "scenarios" / "l4" / "crash_after_result_saved.toml")
    trace = run_scenario(resolve("reference"), scenario, 0).trace
    shared = len({id(p.observation) for p in trace.observations})
    assert shared < len(trace.observations)  # the hard case: points share observations
    assert trace_canonical_json(trace) == canonical_json(to_json(trace))
    assert canonical_json(trace_to_json(trace)) == canonical_json(to_json(trace))


def test_the_canonical_text_encodes_shared_rows_once_and_equals_the_plain_one():
    from harness.contract import Observation, canonical_json, to_json
    from harness.implementations.specs import resolve
    from harness.running.runner import run_scenario
    from harness.scenarios.loader import load
    from harness.trace.record import ObservationPoint, trace_canonical_json
    from pathlib import Path

    scenario = load(Path(__file__).parents[4] / "scenarios" / "l4" / "crash_after_result_saved.toml")
    trace = run_scenario(resolve("reference"), scenario, 0).trace
    distinct = list({id(p.observation): p.observation for p in trace.observations}.values())
    rows = [id(op) for obs in distinct for op in obs.operations]
    assert len(set(rows)) < len(rows)  # the hard case: distinct readings share row objects
    assert trace_canonical_json(trace) == canonical_json(to_json(trace))

    class Subclassed(Observation):  # not the plain type: encoded the plain way
        __slots__ = ()

    odd = Subclassed(operations=distinct[-1].operations)
    points = trace.observations + (ObservationPoint(10**6, "probe:odd", odd),)
    mixed = dataclasses.replace(trace, observations=points)
    assert trace_canonical_json(mixed) == canonical_json(to_json(mixed))


def test_large_readings_are_streamed_not_kept_and_the_digest_is_unchanged(monkeypatch):
    # A hostile implementation sends large fresh readings: the text is produced piece by
    # piece (never whole) and nothing past the caps is kept, yet text and digest are exactly
    # those of the plain encoding.
    import hashlib

    from harness.contract import (Observation, Outcome, Permission, Projection, canonical_json,
                                  to_json)
    from harness.implementations.specs import resolve
    from harness.running.runner import run_scenario
    from harness.scenarios.loader import load
    from harness.trace import record
    from harness.trace.record import (ObservationPoint, canonical_pieces, digest_and_find,
                                      digest_pieces, trace_canonical_json, trace_digest)
    from pathlib import Path

    monkeypatch.setattr(record, "ROW_TEXT_KEPT_CHARS", 64)
    monkeypatch.setattr(record, "TUPLE_TEXT_KEPT_CHARS", 512)
    monkeypatch.setattr(record, "OBSERVATION_TEXT_KEPT_CHARS", 1024)
    monkeypatch.setattr(record, "OBSERVATION_TEXTS_KEPT_CHARS", 2048)
    scenario = load(Path(__file__).parents[4] / "scenarios" / "l4" / "crash_after_result_saved.toml")
    trace = run_scenario(resolve("reference"), scenario, 0).trace
    big = Observation(projections=tuple(
        Projection("s1", f"ex-{n}", f"c{n}", Permission.DENY, Outcome.NOT_STARTED, "denied",
                   "y" * 300, ()) for n in range(20)))
    points = trace.observations + tuple(ObservationPoint(10**6 + n, "probe:big", big)
                                        for n in range(3))
    trace = dataclasses.replace(trace, observations=points)
    plain = canonical_json(to_json(trace))
    pieces = list(canonical_pieces(trace))
    assert max(len(piece) for piece in pieces) < len(plain) // 4  # never the whole text
    assert "".join(pieces) == plain == trace_canonical_json(trace)
    # the digest (version 2) hashes digest_pieces, not this text (see test_digest_v2.py)
    expected = "sha256:" + hashlib.sha256("".join(digest_pieces(trace)).encode()).hexdigest()
    digest, found = digest_and_find(trace, lambda piece: "y" * 300 in piece)
    assert (digest, found) == (expected, True)
    assert trace_digest(trace) == expected
