"""The event log numbers events in order and silences dead instances."""

from harness.trace.record import Kind, Source
from harness.world.log import EventLog


def test_events_are_numbered_in_append_order():
    log = EventLog()
    first = log.append(Source.WORLD, Kind.UI_PUBLISH, 0, {"a": 1})
    second = log.append(Source.HARNESS, Kind.CRASH, 1, {})
    assert (first.index, second.index) == (0, 1) and log.last_index() == 1 and len(log) == 2
    assert log.events() == (first, second)


def test_a_dead_instance_leaves_nothing_behind_but_the_harness_still_records():
    log = EventLog()
    log.kill(3)
    assert log.is_dead(3) and not log.is_dead(0)
    assert log.append(Source.WORLD, Kind.TOOL_EXECUTED, 3, {}, guarded=True) is None
    assert log.append(Source.HARNESS, Kind.RESTART, 3, {}) is not None
    assert [e.kind for e in log.events()] == [Kind.RESTART]
