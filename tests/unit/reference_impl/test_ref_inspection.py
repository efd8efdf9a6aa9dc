"""inspection: the Observation is read from the durable store alone (fresh read-only
connection, nothing written, works after close), every field filled, rows in insertion
order (X1, X2 identity, L4.10 result records); and the implementation's declared info."""

from __future__ import annotations

import hashlib
import os
from importlib import resources

from harness.contract import (
    Delivery,
    Feature,
    Implementation,
    Mode,
    Outcome,
    Permission,
    Runtime,
    WaitStatus,
    args_digest,
    execution_id_for,
)
from ref_fakes import FakeWorld, Reply, allow, ask, call, config, deny
from reference_impl import implementation
from reference_impl.store import store_path


def _digest(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def test_the_implementation_satisfies_the_contract_protocols(impl, data_dir):
    assert isinstance(impl, Implementation)
    assert (impl.info.name, impl.info.version) == ("reference", "0.1.0")
    assert set(impl.info.features) == set(Feature)
    for relative in impl.info.checkpoint_fixtures:
        assert resources.files("reference_impl").joinpath(relative).is_file()
    runtime = impl.open(data_dir, FakeWorld())
    assert isinstance(runtime, Runtime)
    runtime.close()
    assert implementation().info == impl.info


def test_the_observation_reads_the_store_alone_and_changes_nothing(start, impl, data_dir):
    calls = (call("a", "read_file", path="/a"), call("b", "write_file", path="/b"),
             call("c", "delete_branch", branch="x"))
    world = FakeWorld(replies={"s1": [Reply("", calls)], "s2": [Reply("partial", end="eof")]},
                      tool_behaviour={"a": ["fail"]})
    runtime = start(world, config(rules=(allow("read_file"), deny("write_file"), ask("delete_branch"))),
                    config("s2", mode=Mode.PLAN, interactive=False))
    runtime.run_turn("s1", "go")
    runtime.run_turn("s2", "think")
    runtime.close()
    before = _digest(store_path(data_dir))
    obs = impl.inspect(data_dir)
    assert obs == impl.inspect(data_dir)  # deterministic
    assert _digest(store_path(data_dir)) == before

    assert [(s.session_id, s.mode, s.interactive) for s in obs.sessions] == [
        ("s1", Mode.DEFAULT, True), ("s2", Mode.PLAN, False)]
    assert [op.identity.tool_call_id for op in obs.operations] == ["a", "b", "c"]  # rowid order
    a, b, c = obs.operations
    assert a.identity.execution_id == execution_id_for("s1", "a")
    assert a.identity.args_digest == args_digest("read_file", {"path": "/a"})
    assert a.identity.permission_version == 1
    assert (a.permission, a.outcome, a.delivery, a.attempts, a.failure_kind.value) == (
        Permission.ALLOW, Outcome.FAILED, Delivery.PROJECTED, 1, "failed")
    assert a.result_digest.startswith("sha256:") and a.dedup_key
    assert (b.permission, b.outcome, b.execution_started, b.result_digest, b.attempts) == (
        Permission.DENY, Outcome.NOT_STARTED, False, None, 0)
    assert (c.permission, c.delivery, c.recovery_actions[0].value) == (Permission.ASK, Delivery.PENDING, "approve")
    (wait,) = obs.approval_waits
    assert (wait.execution_id, wait.status, wait.applied) == (c.identity.execution_id, WaitStatus.PENDING, False)
    assert [f.dedup_key for f in obs.failure_table] == [a.dedup_key, b.dedup_key]
    assert obs.failure_events_logged == 2 and obs.result_records == 2
    assert {p.tool_call_id for p in obs.projections} == {"a", "b", "c"}
    assert [cp.sequence for cp in obs.checkpoints if cp.session_id == "s1"] == list(
        range(1, 1 + sum(cp.session_id == "s1" for cp in obs.checkpoints)))
    partial = obs.model_requests[-1]
    assert (partial.session_id, partial.partial_text, partial.incomplete) == ("s2", "partial", True)


def test_inspect_works_while_an_instance_holds_the_store_open(start, impl, data_dir):
    runtime = start(FakeWorld(replies={"s1": [Reply("hi")]}), config())
    runtime.run_turn("s1", "hello")
    assert impl.inspect(data_dir).model_requests[0].end_events == 1
    assert os.path.exists(store_path(data_dir))


def test_an_unchanged_store_gives_the_same_observation_object_and_a_commit_a_new_one(
        start, impl, data_dir):
    runtime = start(FakeWorld(replies={"s1": [Reply("hi"), Reply("again")]}), config())
    runtime.run_turn("s1", "hello")
    first = impl.inspect(data_dir)
    assert impl.inspect(data_dir) is first  # nothing committed in between
    runtime.run_turn("s1", "more")  # commits through the runtime's own connection
    second = impl.inspect(data_dir)
    assert second is not first and second != first
    assert len(second.model_requests) == len(first.model_requests) + 1
    impl.release(data_dir)  # the run is over: the kept connection is closed
    assert impl.inspect(data_dir) == second  # and a later read opens a new one


def test_a_replaced_store_file_is_read_afresh(start, impl, data_dir, tmp_path):
    runtime = start(FakeWorld(replies={"s1": [Reply("hi")]}), config())
    runtime.run_turn("s1", "hello")
    runtime.close()
    assert len(impl.inspect(data_dir).sessions) == 1
    os.remove(store_path(data_dir))
    assert impl.inspect(data_dir).sessions == ()  # gone: an empty observation
    other = implementation().open(data_dir, FakeWorld())  # a new, empty store there
    try:
        assert impl.inspect(data_dir).sessions == ()
        other.open_session(config("s9"))
        assert [s.session_id for s in impl.inspect(data_dir).sessions] == ["s9"]
    finally:
        other.close()


def test_the_reader_keeps_a_bounded_number_of_data_dirs(start, tmp_path):
    from reference_impl.inspection import StoreReader

    reader = StoreReader(data_dirs_max=2)
    dirs = [str(tmp_path / f"d{i}") for i in range(4)]
    for path in dirs:
        runtime = implementation().open(path, FakeWorld())
        runtime.open_session(config())
        runtime.close()
        assert len(reader.observe(path).sessions) == 1
    assert len(reader._kept) == 2 and set(reader._kept) == set(dirs[2:])


def test_a_later_reading_reuses_the_views_of_unchanged_rows_and_equals_a_fresh_read(
        start, impl, data_dir):
    from reference_impl.inspection import observe

    calls = (call("a", "read_file", path="/a"),)
    world = FakeWorld(replies={"s1": [Reply("", calls), Reply("done"), Reply("more")]})
    runtime = start(world, config(rules=(allow("read_file"),)))
    runtime.run_turn("s1", "go")
    first = impl.inspect(data_dir)
    runtime.run_turn("s1", "again")  # new model requests; the operation's rows unchanged
    second = impl.inspect(data_dir)
    assert second is not first and second == observe(data_dir)  # same value as a fresh read
    assert second.operations[0] is first.operations[0]  # unchanged rows: the same views
    assert second.sessions[0] is first.sessions[0]
    assert second.model_requests[0] is first.model_requests[0]
    assert len(second.model_requests) > len(first.model_requests)
    fresh = observe(data_dir)  # a plain connection decodes everything anew
    assert fresh == second and fresh.operations[0] is not second.operations[0]


def test_a_changed_row_is_decoded_again(start, impl, data_dir):
    world = FakeWorld(replies={"s1": [Reply("", (call("c", "delete_branch", branch="x"),))]})
    runtime = start(world, config(rules=(ask("delete_branch"),)))
    runtime.run_turn("s1", "go")
    waiting = impl.inspect(data_dir)
    (wait,) = waiting.approval_waits
    runtime.answer_approval(wait.wait_id, False)
    answered = impl.inspect(data_dir)
    assert answered.operations[0] is not waiting.operations[0]
    assert answered.operations[0] != waiting.operations[0]
    assert answered.operations[0].recovery_actions != waiting.operations[0].recovery_actions \
        or answered.operations[0].outcome != waiting.operations[0].outcome


def test_a_part_whose_rows_did_not_change_is_the_previous_reading_s_tuple(start, impl, data_dir):
    from reference_impl.inspection import observe

    calls = (call("a", "read_file", path="/a"),)
    world = FakeWorld(replies={"s1": [Reply("", calls), Reply("done"), Reply("more")]},
                      tool_behaviour={"a": ["fail"]})
    runtime = start(world, config(rules=(allow("read_file"),)))
    runtime.run_turn("s1", "go")
    first = impl.inspect(data_dir)
    assert first.operations and first.failure_table
    runtime.run_turn("s1", "again")  # a text answer: no operation, no failure
    second = impl.inspect(data_dir)
    assert second is not first and second == observe(data_dir)  # same value as a fresh read
    assert second.model_requests != first.model_requests
    assert second.operations is first.operations  # the part itself, not only its rows
    assert second.failure_table is first.failure_table
    (wait_for,) = [call("b", "delete_branch", branch="x")]
    world.replies["s1"].append(Reply("", (wait_for,)))
    runtime.update_rules("s1", (allow("read_file"), ask("delete_branch")), 2)
    runtime.run_turn("s1", "branch")
    third = impl.inspect(data_dir)
    assert third == observe(data_dir) and len(third.operations) == 2
    assert third.operations[0] is first.operations[0]  # the unchanged row's view kept
