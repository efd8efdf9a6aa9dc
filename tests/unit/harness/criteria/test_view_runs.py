"""Operations' views held as runs (facts.ViewPairs) and the readings' new rows
(reading_changes): the same pairs, sightings and answers as walking every reading, whether
successive readings share their row objects or not."""

from __future__ import annotations

import dataclasses
import random

from harness.contract import (DecisionSource, Delivery, Observation, OperationIdentity,
                              OperationView, Outcome, Permission, Thresholds)
from harness.criteria import facts as F
from harness.criteria import reading_changes
from harness.criteria.trace_readings import find_op
from harness.trace.record import ObservationPoint, Trace, TraceMeta

META = TraceMeta("t", "x", 0, "hand-built", (), Thresholds(), (), (), ())


def _view(session: str, call: str, outcome: Outcome = Outcome.NOT_STARTED) -> OperationView:
    return OperationView(session, OperationIdentity(f"ex-{call}", call, "sha256:x", 1), "t", {},
                         "k", Permission.ALLOW, DecisionSource.EXACT_GRANT, outcome, Delivery.PENDING,
                         False, None, "", (), False, None, None, 0)


def _naive_pairs(trace: Trace) -> dict[tuple[str, str], list[tuple[ObservationPoint, OperationView]]]:
    views: dict[tuple[str, str], list] = {}
    for point in F.points(trace):
        seen = set()
        for view in point.observation.operations:
            key = (view.session_id, view.identity.tool_call_id)
            if key in seen:
                continue
            seen.add(key)
            views.setdefault(key, []).append((point, view))
    return views


def _readings(seed: int, shared: bool) -> list[tuple[OperationView, ...]]:
    """Readings that append, update in the middle, duplicate, drop and bring back rows."""
    draw = random.Random(seed)
    rows: list[OperationView] = []
    readings = []
    for step in range(60):
        action = draw.random()
        if action < 0.4 or not rows:
            rows.append(_view(draw.choice("ab"), f"c{step}"))
        elif action < 0.6:
            at = draw.randrange(len(rows))
            rows[at] = dataclasses.replace(rows[at], outcome=draw.choice(list(Outcome)))
        elif action < 0.7:
            rows.insert(draw.randrange(len(rows) + 1), draw.choice(rows))  # a duplicate record
        elif action < 0.8:
            rows.pop(draw.randrange(len(rows)))
        reading = tuple(rows) if shared else tuple(dataclasses.replace(r) for r in rows)
        readings.append(reading)
        if draw.random() < 0.3:
            readings.append(reading)  # an unchanged reading (the same tuple)
    return readings


def _trace(readings: list[tuple[OperationView, ...]]) -> Trace:
    points = tuple(ObservationPoint(at * 2, "probe:x", Observation(operations=reading))
                   for at, reading in enumerate(readings))
    return Trace(META, (), points)


def test_runs_stand_for_exactly_the_pairs_of_every_reading():
    for seed in range(12):
        for shared in (True, False):
            trace = _trace(_readings(seed, shared))
            ops = F.operations(trace)
            naive = _naive_pairs(trace)
            assert [k for k in ops if ops[k].views] == list(naive)  # first-sighting order
            for key, pairs in naive.items():
                views = ops[key].views
                assert len(views) == len(pairs) and bool(views)
                assert all(a[0] is b[0] and a[1] is b[1] for a, b in zip(views, pairs))
                assert views[-1][0] is pairs[-1][0] and views[0][1] is pairs[0][1]
                for one, two in zip(views.runs, views.runs[1:]):  # runs are maximal
                    assert one.stop <= two.start and (one.view is not two.view
                                                      or one.stop != two.start)
                for index in (-1, 0, 7, 31, 10**6):
                    want = None
                    for point, view in pairs:
                        if point.index <= index:
                            want = (point, view)
                    got = ops[key].view_at(index)
                    assert (got is None) == (want is None)
                    assert got is None or (got[0] is want[0] and got[1] is want[1])


def test_new_rows_and_find_op_agree_with_reading_everything():
    for seed in range(8):
        trace = _trace(_readings(seed, True))
        first: dict[tuple[str, str], int] = {}
        for point in trace.observations:
            for view in point.observation.operations:
                first.setdefault((view.session_id, view.identity.tool_call_id), point.index)
        from_new: dict[tuple[str, str], int] = {}
        for point, view in reading_changes.new_rows(trace):
            from_new.setdefault((view.session_id, view.identity.tool_call_id), point.index)
        assert from_new == first
        for point in trace.observations:
            observation = point.observation
            for view in observation.operations:
                key = (view.session_id, view.identity.tool_call_id)
                assert find_op(observation, key) is observation.operation(key[1], key[0])
            assert find_op(observation, ("a", "never")) is None
