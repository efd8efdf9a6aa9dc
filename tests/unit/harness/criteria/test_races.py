"""races: a concurrent turn races for an operation only when the hold engaged in it."""

from __future__ import annotations

from harness.contract import Delivery, Observation, Outcome, ToolCall
from harness.criteria import races

try:
    from .lbuilder import TB, op, xid
except ImportError:  # collected without a package
    from lbuilder import TB, op, xid

W = ToolCall("c1", "write_file", {"path": "/repo/a", "content": "x"})
CTX = {"session_id": "s1", "tool_call_id": "c1", "execution_id": xid("c1")}
PENDING = op(W, outcome=Outcome.NOT_STARTED, delivery=Delivery.PENDING, started=True, digest=None)


def _turn(*, action="hold", held=True, context=CTX, view=PENDING, b_hits=True, b_served=True):
    tb = TB()
    args = {"session_id": "s1", "user_text": "go", "hold_at": "after_revalidation"}
    tb.add("driver_call", {"method": "concurrent_turn", "args": {**args, "role": "A"}}, "harness", instance=1)
    tb.respond("s1", (W,), instance=1)
    tb.add("failpoint", {"name": "after_revalidation", "context": context, "hit": 1, "action": action,
                         "params": {}}, instance=1)
    tb.observe("probe:failpoint:after_revalidation", Observation(operations=(view,)))
    tb.add("driver_call", {"method": "concurrent_turn", "args": {**args, "role": "B", "held": held}},
           "harness", instance=2)
    if b_served:
        tb.respond("s1", (W,), instance=2)
    if b_hits:
        tb.add("failpoint", {"name": "after_prepare", "context": CTX, "hit": 1, "action": "none", "params": {}},
               instance=2)
    tb.add("driver_return", {"method": "concurrent_turn", "result": None}, "harness", instance=2)
    tb.add("driver_return", {"method": "concurrent_turn", "result": None}, "harness", instance=1)
    trace = tb.build()
    (turn,) = races.concurrent_turns(trace)
    return trace, turn


def test_a_real_race_names_the_operation():
    trace, turn = _turn()
    assert turn.engaged and turn.a.instance == 1 and turn.b.instance == 2
    assert races.raced_operations(trace, turn) == (("s1", "c1"),)


def test_b_reaching_the_call_only_through_the_model_still_races():
    trace, turn = _turn(b_hits=False)
    assert races.raced_operations(trace, turn) == (("s1", "c1"),)


def test_no_race_without_an_engaged_hold():
    for kwargs in ({"action": "none", "held": False}, {"held": False}, {"action": "none"}):
        trace, turn = _turn(**kwargs)
        assert not turn.engaged
        assert races.raced_operations(trace, turn) == ()


def test_no_race_when_a_was_held_outside_the_operation_or_after_its_result():
    trace, turn = _turn(context={"session_id": "s1"})
    assert races.raced_operations(trace, turn) == ()
    trace, turn = _turn(view=op(W, delivery=Delivery.RECORDED))
    assert races.raced_operations(trace, turn) == ()


def test_no_race_when_b_never_reached_the_operation():
    trace, turn = _turn(b_hits=False, b_served=False)
    assert races.raced_operations(trace, turn) == ()
