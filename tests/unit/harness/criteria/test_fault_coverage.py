"""fault_coverage: which planned faults and holds did not happen, from hand-built traces."""

from __future__ import annotations

from typing import Any

from harness.contract import Thresholds
from harness.criteria.fault_coverage import FAULT_FIRED, unfired
from harness.trace.record import FaultSpec, Kind, Source, Trace, TraceEvent, TraceMeta


class _Trace:
    """A minimal trace builder: failpoint hits, driver calls, then ``build()``."""

    def __init__(self, *faults: FaultSpec) -> None:
        self.faults = faults
        self.events: list[TraceEvent] = []
        self.hits: dict[str, int] = {}

    def add(self, kind: str, source: str, instance: int, data: dict[str, Any]) -> int:
        self.events.append(TraceEvent(len(self.events), source, kind, instance, data))
        return len(self.events) - 1

    def hit(self, name: str, action: str = "none", *, fault: int | None = None,
            instance: int = 0, params: dict[str, Any] | None = None) -> int:
        self.hits[name] = self.hits.get(name, 0) + 1
        data: dict[str, Any] = {"name": name, "context": {}, "hit": self.hits[name],
                                "action": action, "params": dict(params or {})}
        if fault is not None:
            data["fault_index"] = fault
        return self.add(Kind.FAILPOINT, Source.WORLD, instance, data)

    def call(self, method: str, instance: int = 0, **data: Any) -> int:
        return self.add(Kind.DRIVER_CALL, Source.HARNESS, instance, {"method": method, **data})

    def build(self) -> Trace:
        meta = TraceMeta("t", "l4", 0, "hand-built", (), Thresholds(), (), (), self.faults)
        return Trace(meta, tuple(self.events), ())


CRASH_SAVED = FaultSpec("after_result_saved", "crash", "1")


def test_a_fault_that_fired_on_its_hit_is_fine():
    t = _Trace(CRASH_SAVED)
    t.call("run_turn")
    t.hit("after_result_saved", "crash", fault=0)
    assert unfired(t.build()) == ()


def test_a_failpoint_never_reached_names_the_fault_the_failpoint_and_the_cause():
    t = _Trace(CRASH_SAVED)
    t.call("run_turn")
    t.hit("after_prepare")
    (item,) = unfired(t.build())
    assert item.fault_index == 0 and item.failpoint == "after_result_saved"
    assert item.hits_reached == 0 and "failpoint never reached" in item.cause
    assert item.what.startswith("fault 1: after_result_saved, hit #1 -> crash")
    assert "did not fire" in item.message() and "reached 0 time(s)" in item.message()


def test_a_hit_after_the_last_one_reached_says_how_often_it_was_reached():
    t = _Trace(FaultSpec("after_result_saved", "crash", "3"))
    t.hit("after_result_saved")
    t.hit("after_result_saved")
    (item,) = unfired(t.build())
    assert item.hits_reached == 2 and "reached only 2 time(s), so hit #3 never came" in item.cause


def test_a_list_must_fire_on_every_listed_hit():
    fault = FaultSpec("after_tool_returned", "raise", "1,3", {"message": "x"})
    t = _Trace(fault)
    t.hit("after_tool_returned", "raise", fault=0)
    t.hit("after_tool_returned")
    t.hit("after_tool_returned", "raise", fault=0)
    assert unfired(t.build()) == ()
    t = _Trace(fault)
    t.hit("after_tool_returned", "raise", fault=0)
    t.hit("after_tool_returned")
    (item,) = unfired(t.build())
    assert "hit #3 never came" in item.cause


def test_a_range_must_fire_at_least_once():
    fault = FaultSpec("after_prepare", "delay", "2+", {"seconds": 1.0})
    t = _Trace(fault)
    t.hit("after_prepare")
    assert "hit #2 never came" in unfired(t.build())[0].cause
    t.hit("after_prepare", "delay", fault=0)
    assert unfired(t.build()) == ()


def test_an_optional_fault_may_not_fire():
    t = _Trace(FaultSpec("after_result_saved", "crash", "1", optional=True))
    t.call("run_turn")
    assert unfired(t.build()) == ()


def test_a_planned_hold_outside_a_concurrent_turn_did_not_fire():
    t = _Trace(FaultSpec("after_prepare", "hold", "1"))
    t.hit("after_prepare", "none", fault=0,
          params={"planned": "hold", "skipped": "no concurrent_turn step is running this instance"})
    (item,) = unfired(t.build())
    assert "hold skipped on hit #1: no concurrent_turn step" in item.cause


def test_a_rule_change_fires_only_when_the_re_entrant_call_followed():
    fault = FaultSpec("after_prepare", "change_rules", "1",
                      {"session": "s1", "rules": [], "permission_version": 2})
    t = _Trace(fault)
    t.hit("after_prepare", "change_rules", fault=0)
    t.call("update_rules", via_failpoint="after_prepare", args={})
    assert unfired(t.build()) == ()
    t = _Trace(fault)
    t.hit("after_prepare", "change_rules", fault=0)
    t.hit("after_permission_decision")  # the instance went on: no update_rules came
    t.call("update_rules", via_failpoint="after_prepare", args={})  # too late, not this hit
    (item,) = unfired(t.build())
    assert "no re-entrant update_rules call followed" in item.cause


def _concurrent(t: _Trace, hold_at: str, *, held: bool) -> None:
    t.call("concurrent_turn", 0, args={"role": "A", "hold_at": hold_at})
    t.hit("after_prepare", instance=0)
    if held:
        t.hit(hold_at, "hold", instance=0)
    t.call("concurrent_turn", 1, args={"role": "B", "hold_at": hold_at, "held": held})
    t.hit(hold_at, instance=1)


def test_a_concurrent_turn_whose_hold_engaged_is_fine():
    t = _Trace()
    _concurrent(t, "after_revalidation", held=True)
    assert unfired(t.build()) == ()


def test_a_concurrent_turn_whose_hold_never_engaged_is_reported():
    t = _Trace()
    _concurrent(t, "after_revalidation", held=False)
    (item,) = unfired(t.build())
    assert item.fault_index == -1 and item.failpoint == "after_revalidation"
    assert item.what == "concurrent_turn #1 (hold at after_revalidation)"
    assert "hold skipped: instance A's turn never reached after_revalidation" in item.cause
    assert item.hits_reached == 1  # instance B reached it, after A


def test_a_hold_reached_only_by_b_or_on_other_instances_does_not_count():
    t = _Trace()
    t.call("concurrent_turn", 0, args={"role": "A", "hold_at": "after_prepare"})
    t.hit("after_prepare", "hold", instance=3)  # some other instance, not A
    t.call("concurrent_turn", 1, args={"role": "B", "hold_at": "after_prepare"})
    assert len(unfired(t.build())) == 1


def test_a_concurrent_turn_held_only_by_optional_hold_faults_is_exempt():
    t = _Trace(FaultSpec("after_revalidation", "hold", "1", optional=True))
    _concurrent(t, "after_revalidation", held=False)
    assert unfired(t.build()) == ()


def test_a_required_planned_hold_that_did_not_hold_reports_fault_and_step():
    t = _Trace(FaultSpec("after_revalidation", "hold", "2"))
    _concurrent(t, "after_revalidation", held=False)
    items = unfired(t.build())
    assert [i.fault_index for i in items] == [0, -1]


def test_the_kill_label_is_stable():
    assert FAULT_FIRED == "fault-fired"


def test_a_concurrent_turn_marked_optional_is_exempt():
    t = _Trace()
    t.call("concurrent_turn", 0, args={"role": "A", "hold_at": "after_revalidation", "optional": True})
    t.call("concurrent_turn", 1, args={"role": "B", "hold_at": "after_revalidation", "held": False})
    assert unfired(t.build()) == ()
