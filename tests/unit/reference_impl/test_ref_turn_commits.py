"""Which of a turn's steps share a commit, and what a fault between them finds: the user
message is committed with the first request's start (a crash at the first
``before_model_request`` loses the unacknowledged turn call whole); a request's end carries the prepare of the first call it answered, and the
final answer's end carries the turn's end, unless the session was cancelled meanwhile."""

from __future__ import annotations

from harness.contract import ModelRequestStatus, SimulatedCrash, TurnStatus

import pytest

from ref_fakes import FakeWorld, Reply, allow, call, config

WRITE = call("c1", "write_file", path="/repo/a.txt", content="x")


def test_the_user_message_is_committed_with_the_first_request_s_start(start, impl, data_dir):
    """At the first ``before_model_request`` of a turn nothing of the turn is in the store
    yet: the session reads as the previous turn left it."""
    seen = []
    world = FakeWorld(hooks={"before_model_request": lambda _ctx: seen.append(impl.inspect(data_dir))})
    runtime = start(world, config(rules=(allow("write_file"),)))
    assert runtime.run_turn("s1", "hello").status is TurnStatus.COMPLETED
    after_first = impl.inspect(data_dir)
    assert runtime.run_turn("s1", "again").status is TurnStatus.COMPLETED
    first, second = seen  # one request per turn: the model answers without calls
    assert first.model_requests == () and first.sessions[0].turn_status is TurnStatus.IDLE
    assert second == after_first  # the second turn committed nothing before its request
    assert second.sessions[0].turn_status is TurnStatus.COMPLETED
    assert [m.content for m in world.requests[1].messages if m.role == "user"] == ["hello", "again"]


def test_a_crash_before_a_later_turn_s_first_request_loses_that_turn_call_whole(impl, data_dir):
    """The unacknowledged turn call is lost as a whole: the store is as the previous turn
    left it, recovery resumes nothing, and the caller's retry runs the turn once."""
    world = FakeWorld(replies={"s1": [Reply("done."), Reply("writing", (WRITE,))]})
    runtime = impl.open(data_dir, world)
    runtime.open_session(config(rules=(allow("write_file"),)))
    assert runtime.run_turn("s1", "first").status is TurnStatus.COMPLETED
    before = impl.inspect(data_dir)
    world.crash_at, world.crash_hit = "before_model_request", 2
    with pytest.raises(SimulatedCrash):
        runtime.run_turn("s1", "write a.txt")
    world.crash_at = ""
    restarted = impl.open(data_dir, world)
    assert restarted.recover().turns_resumed == ()
    assert impl.inspect(data_dir) == before and len(world.requests) == 1
    assert restarted.run_turn("s1", "write a.txt").status is TurnStatus.COMPLETED
    assert world.executed("c1") == 1
    assert [m.content for m in world.requests[1].messages if m.role == "user"] == [
        "first", "write a.txt"]
    restarted.close()


def test_the_first_call_is_prepared_with_the_answer_and_announced_in_order(start, impl, data_dir):
    seen = []
    world = FakeWorld(replies={"s1": [Reply("writing", (WRITE,))]},
                      hooks={"after_prepare": lambda _ctx: seen.append(impl.inspect(data_dir))})
    start(world, config(rules=(allow("write_file"),))).run_turn("s1", "write")
    (at_prepare,) = seen
    assert [r.status for r in at_prepare.model_requests] == [ModelRequestStatus.COMPLETED]
    assert at_prepare.operation("c1").permission.value == "allow"  # decided in that commit
    types = world.event_types()
    assert types.index("model_request_ended") < types.index("operation_prepared") < \
        types.index("permission_decided")
    names = world.hit_names()
    assert names.index("after_model_stream_ended") < names.index("after_prepare") < \
        names.index("after_permission_decision")


def test_a_cancel_after_the_final_stream_ends_the_turn_cancelled_not_completed(start, impl,
                                                                               data_dir):
    world = FakeWorld()
    runtime = start(world, config())
    world.hooks["after_model_stream_ended"] = lambda _ctx: runtime.cancel("s1")
    assert runtime.run_turn("s1", "hello").status is TurnStatus.CANCELLED
    assert impl.inspect(data_dir).sessions[0].turn_status is TurnStatus.CANCELLED


def test_a_cancel_at_before_model_request_records_no_request(start, impl, data_dir):
    world = FakeWorld()
    runtime = start(world, config())
    world.hooks["before_model_request"] = lambda _ctx: runtime.cancel("s1")
    assert runtime.run_turn("s1", "hello").status is TurnStatus.CANCELLED
    assert world.requests == [] and impl.inspect(data_dir).model_requests == ()
