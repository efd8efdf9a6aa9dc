"""The trace digest, version 2: readings and conversations written as changes.

It must stay a pure function of the trace's content (shared objects or not), tell apart
traces that differ in any reading or message, and grow with what changed, not with the
size of each reading."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from harness.contract import Observation, Outcome, Permission, Projection
from harness.trace.record import (DIGEST_VERSION, Kind, ObservationPoint, TraceEvent,
                                  digest_pieces, trace_canonical_json, trace_digest,
                                  trace_from_json, trace_to_json)
from harness.trace.sequence_delta import common_prefix, common_suffix

SCENARIO = Path(__file__).parents[4] / "scenarios" / "l4" / "crash_after_result_saved.toml"


@pytest.fixture(scope="module")
def trace():
    from harness.implementations.specs import resolve
    from harness.running.runner import run_scenario
    from harness.scenarios.loader import load

    return run_scenario(resolve("reference"), load(SCENARIO), 0).trace


def _projection(n: int, reason: str = "denied") -> Projection:
    return Projection("s1", f"ex-{n}", f"c{n}", Permission.DENY, Outcome.NOT_STARTED, reason,
                      "why", ())


def test_the_digest_names_its_version_and_is_not_the_whole_canonical_text(trace):
    text = "".join(digest_pieces(trace))
    assert text.startswith(f"lifecycle-harness trace digest {DIGEST_VERSION}\n")
    assert DIGEST_VERSION == 2
    # the readings repeat each other: written as changes, the text is far smaller
    assert len(text) < len(trace_canonical_json(trace)) * 0.6


def test_the_digest_text_after_its_header_is_one_json_value(trace):
    """Every change is a complete JSON value: a reading written as a change closes its
    object (it once did not, leaving each changed point's object open)."""
    import json

    header, body = "".join(digest_pieces(trace)).split("\n", 1)
    decoded = json.loads(body)
    changed = [p["observation"] for p in decoded["observations"]
               if isinstance(p["observation"], dict) and "value" not in p["observation"]]
    assert changed and all(set(c) == set(dataclasses.asdict(Observation())) for c in changed)


def test_equal_content_gives_equal_digests_whatever_objects_are_shared(trace):
    rebuilt = trace_from_json(trace_to_json(trace))  # no row, reading or message shared
    assert trace_digest(rebuilt) == trace_digest(trace)
    assert "".join(digest_pieces(rebuilt)) == "".join(digest_pieces(trace))


def test_a_change_in_any_reading_changes_the_digest(trace):
    base = trace_digest(trace)
    seen = set()
    for at in (0, len(trace.observations) // 2, len(trace.observations) - 1):
        point = trace.observations[at]
        changed = dataclasses.replace(point.observation, failure_events_logged=99)
        points = list(trace.observations)
        points[at] = dataclasses.replace(point, observation=changed)
        digest = trace_digest(dataclasses.replace(trace, observations=tuple(points)))
        assert digest != base
        seen.add(digest)
    assert len(seen) == 3


def test_a_row_changed_added_or_dropped_in_the_middle_changes_the_digest(trace):
    rows = tuple(_projection(n) for n in range(6))
    variants = [
        rows,
        rows[:3] + (_projection(3, "other"),) + rows[4:],  # one row replaced
        rows[:3] + (_projection(9),) + rows[3:],  # one row inserted
        rows[:2] + rows[3:],  # one row dropped
        rows[::-1],  # same rows, another order
    ]
    digests = set()
    for variant in variants:
        points = (ObservationPoint(10**6, "probe:a", Observation(projections=rows)),
                  ObservationPoint(10**6 + 1, "probe:b", Observation(projections=variant)))
        digests.add(trace_digest(dataclasses.replace(trace, observations=points)))
    assert len(digests) == len(variants)


def test_unchanged_readings_are_one_mark_each(trace):
    reading = Observation(projections=tuple(_projection(n) for n in range(50)))
    copy = trace_from_json(trace_to_json(dataclasses.replace(
        trace, observations=(ObservationPoint(1, "probe:x", reading),)))).observations[0].observation
    assert copy is not reading and copy == reading
    one = dataclasses.replace(trace, observations=(ObservationPoint(1, "a", reading),))
    two = dataclasses.replace(trace, observations=(ObservationPoint(1, "a", reading),
                                                   ObservationPoint(2, "b", copy)))
    grown = len("".join(digest_pieces(two))) - len("".join(digest_pieces(one)))
    assert grown < 60  # the second reading is '"="' and its point's index and label


def test_messages_are_written_as_the_change_from_the_previous_request(trace):
    requests = [e for e in trace.events if e.kind == Kind.MODEL_REQUEST]
    assert len(requests) >= 2
    base = trace_digest(trace)
    # a message changed in an earlier part of a later request's conversation is seen
    last = requests[-1]
    messages = [dict(m) for m in last.data["messages"]]
    messages[0] = {**messages[0], "content": "something else"}
    events = list(trace.events)
    events[last.index] = TraceEvent(last.index, last.source, last.kind, last.instance,
                                    {**last.data, "messages": messages})
    assert trace_digest(dataclasses.replace(trace, events=tuple(events))) != base
    text = "".join(digest_pieces(trace))
    assert '"messages":{"added":' in text


def test_prefix_and_suffix_by_identity_then_by_sameness():
    a, b, c, d = object(), object(), object(), object()
    assert common_prefix((a, b, c), (a, b, d)) == 2
    assert common_prefix((a, b), (a, b, c)) == 2
    assert common_prefix((), (a,)) == 0
    assert common_suffix((a, b, c), (d, b, c), 3) == 2
    assert common_suffix((a, b, c), (d, b, c), 1) == 1
    assert common_suffix((a, b, c), (d, b, c), 0) == 0
    equal = lambda x, y: str(x) == str(y)  # noqa: E731
    assert common_prefix([1, 2, 3, 4], [1, 2, 5, 4], equal) == 2
    assert common_prefix(["x", "y"], ["x", "y"], equal) == 2
    assert common_suffix([1, 2, 3, 4], [9, 2, 3, 4], 4, equal) == 3
