"""model_requests: unique ids with one durable start and one end (M1), end statuses (M2),
exceptions propagate unchanged (M3), no replays or retries (M4), partial text stays
incomplete (M5); each request lists the tools visible right then (L5.1)."""

from __future__ import annotations

import pytest

from harness.contract import (
    ModelRequestStatus,
    ModelStreamCancelled,
    ModelTransportError,
    Outcome,
    TurnStatus,
)
from ref_fakes import FakeWorld, Reply, allow, call, config, deny


def _requests(impl, data_dir):
    return impl.inspect(data_dir).model_requests


def test_every_request_has_a_unique_id_and_one_start_and_one_end(start, impl, data_dir):
    world = FakeWorld(replies={"s1": [Reply("", (call("c1", "read_file", path="/a"),)), Reply("done")]})
    runtime = start(world, config(rules=(allow("read_file"),)))
    runtime.run_turn("s1", "read")
    runtime.run_turn("s1", "again")
    views = _requests(impl, data_dir)
    assert len({v.request_id for v in views}) == len(views) == len(world.requests) == 3
    assert [v.request_id for v in views] == [r.request_id for r in world.requests]
    assert all((v.start_events, v.end_events, v.status) == (1, 1, ModelRequestStatus.COMPLETED)
               for v in views)
    started = [e.request_id for e in world.events if e.type.value == "model_request_started"]
    ended = [e.request_id for e in world.events if e.type.value == "model_request_ended"]
    assert started == ended == [v.request_id for v in views]


def test_eof_keeps_the_partial_text_marked_incomplete_and_is_not_an_answer(start, impl, data_dir):
    world = FakeWorld(replies={"s1": [Reply("half an ans", (call("c1", "write_file", path="/a"),), end="eof")]})
    runtime = start(world, config(rules=(allow("write_file"),)))
    result = runtime.run_turn("s1", "answer")
    (view,) = _requests(impl, data_dir)
    assert (view.status, view.partial_text, view.incomplete) == (
        ModelRequestStatus.INCOMPLETE, "half an ans", True)
    assert (result.status, result.final_text) == (TurnStatus.INCOMPLETE, "half an ans")
    assert world.ledger == []  # calls of an unfinished stream never run
    assert len(world.requests) == 1  # and nothing is retried
    runtime.run_turn("s1", "go on")
    partial = world.requests[1].messages[1]
    assert (partial.role, partial.content, partial.incomplete) == ("assistant", "half an ans", True)


def test_eof_without_text_is_incomplete_too(start, impl, data_dir):
    world = FakeWorld(replies={"s1": [Reply("", end="eof")]})
    assert start(world, config()).run_turn("s1", "x").status is TurnStatus.INCOMPLETE
    assert _requests(impl, data_dir)[0].status is ModelRequestStatus.INCOMPLETE


@pytest.mark.parametrize(("end", "error", "status", "turn"), [
    ("transport_error", ModelTransportError, ModelRequestStatus.FAILED, TurnStatus.FAILED),
    ("cancelled", ModelStreamCancelled, ModelRequestStatus.CANCELLED, TurnStatus.CANCELLED),
])
def test_stream_errors_are_recorded_then_propagate_unchanged(start, impl, data_dir, end, error,
                                                             status, turn):
    raised = []

    class Recording(FakeWorld):
        def open_model_stream(self, request):
            stream = super().open_model_stream(request)
            original = stream.next_chunk

            def next_chunk():
                try:
                    return original()
                except Exception as exc:
                    raised.append(exc)
                    raise
            stream.next_chunk = next_chunk
            return stream

    world = Recording(replies={"s1": [Reply("partial", end=end)]})
    runtime = start(world, config())
    with pytest.raises(error) as caught:
        runtime.run_turn("s1", "x")
    assert caught.value is raised[0]  # the very same exception object
    (view,) = _requests(impl, data_dir)
    assert (view.status, view.start_events, view.end_events, view.partial_text) == (
        status, 1, 1, "partial")
    obs = impl.inspect(data_dir)
    assert obs.sessions[0].turn_status is turn
    assert len(world.requests) == 1  # no retry


def test_a_failed_request_is_never_taken_as_an_answer(start, impl, data_dir):
    world = FakeWorld(replies={"s1": [Reply("I am sure it", end="transport_error"), Reply("fine")]})
    runtime = start(world, config())
    with pytest.raises(ModelTransportError):
        runtime.run_turn("s1", "x")
    runtime.run_turn("s1", "retry please")
    assert [m.role for m in world.requests[1].messages] == ["user", "user"]


def test_each_request_lists_the_tools_visible_when_it_is_sent(start, impl, data_dir):
    world = FakeWorld(replies={"s1": [Reply("", (call("c1", "write_file", path="/a"),)), Reply("ok"),
                                      Reply("", (call("c2", "write_file", path="/b"),))]})
    runtime = start(world, config(rules=(allow("write_file"),)))
    runtime.run_turn("s1", "first")
    assert "write_file" in world.requests[0].tools
    runtime.update_rules("s1", (deny("write_file"),), 2)
    runtime.run_turn("s1", "second")
    assert "write_file" not in world.requests[2].tools  # revocation is immediate
    obs = impl.inspect(data_dir)
    assert obs.operation("c1").outcome is Outcome.SUCCEEDED  # saved records are untouched
    assert world.executed("c2") == 0  # an old-style call meets the newest rules


def test_request_ids_keep_counting_from_the_latest_one_and_a_foreign_id_falls_back(
        start, impl, data_dir):
    runtime = start(FakeWorld(), config(), config("s2"))
    for text in ("one", "two", "three"):
        runtime.run_turn("s1", text)
    runtime.run_turn("s2", "other session")
    assert [v.request_id for v in _requests(impl, data_dir)] == [
        "s1:req-1", "s1:req-2", "s1:req-3", "s2:req-1"]
    with runtime._store.transaction() as conn:  # an id this code did not write
        conn.execute("INSERT INTO model_requests (request_id, session_id, start_events,"
                     " end_events, status, started_at) VALUES ('imported', 's1', 1, 1,"
                     " 'completed', 0)")
    runtime.run_turn("s1", "four")
    assert _requests(impl, data_dir)[-1].request_id == "s1:req-5"  # 4 rows counted, then +1
