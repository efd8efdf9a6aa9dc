"""A turn's user message is committed with its first model request's start (one commit, after
``before_model_request``): what the turn sends when the session changed while it waited there,
and when it was cancelled there."""

from __future__ import annotations

from harness.contract import Outcome, TurnStatus, WaitStatus
from ref_fakes import FakeWorld, Reply, allow, ask, call, config

WRITE = call("c1", "write_file", path="/repo/a.txt", content="x")


def _roles(request) -> list[tuple[str, str]]:
    return [(m.role, m.content if m.role == "user" else m.tool_call_id or "") for m in request.messages]


def test_nothing_of_the_turn_is_durable_at_its_first_before_model_request(start, impl, data_dir):
    seen = []
    world = FakeWorld(hooks={"before_model_request": lambda _ctx: seen.append(impl.inspect(data_dir))})
    runtime = start(world, config(rules=(allow("write_file"),)))
    assert runtime.run_turn("s1", "hello").status is TurnStatus.COMPLETED
    (before,) = seen
    assert before.model_requests == () and before.checkpoints == ()
    assert before.sessions[0].turn_status is TurnStatus.IDLE
    assert _roles(world.requests[0]) == [("user", "hello")]


def test_a_turn_held_before_its_first_request_settles_what_another_instance_left(impl, data_dir):
    """Instance A waits at its first ``before_model_request``; instance B runs the same
    session meanwhile and leaves a call waiting for approval. A's message cannot follow that
    call's pending request without its result (X3): A settles again (its message answers the
    wait "no"), passes ``before_model_request`` again, and only then commits its message."""
    world = FakeWorld(replies={"s1": [Reply("", (WRITE,)), Reply("refused, then.")]})
    first = impl.open(data_dir, world)
    first.open_session(config(rules=(ask("write_file"),)))
    second_results = []

    def run_second_instance(_context):
        world.hooks.pop("before_model_request")  # only A's first hit holds it
        second = impl.open(data_dir, world)
        second_results.append(second.run_turn("s1", "from B"))
        second.close()

    world.hooks["before_model_request"] = run_second_instance
    result = first.run_turn("s1", "from A")
    first.close()
    assert second_results[0].status is TurnStatus.AWAITING_APPROVAL
    assert result.status is TurnStatus.COMPLETED and result.final_text == "refused, then."
    assert world.executed("c1") == 0
    assert world.hit_names().count("before_model_request") == 3  # A's twice, B's once
    b_request, a_request = world.requests
    assert _roles(b_request) == [("user", "from B")]
    assert _roles(a_request) == [("user", "from B"), ("assistant", ""), ("tool", "c1"),
                                 ("user", "from A")]
    assert a_request.messages[2].outcome is Outcome.NOT_STARTED
    obs = impl.inspect(data_dir)
    assert [w.status for w in obs.approval_waits] == [WaitStatus.REJECTED]


def test_the_same_turn_delivered_to_another_instance_meanwhile_is_not_said_twice(impl, data_dir):
    """The same message delivered to instance B while A waits at its first
    ``before_model_request``: B sent it to the model and left its call waiting for approval.
    A's message is that one (it reached the model before the prompt was shown, so it answers
    nothing): A appends nothing and continues the session where B left it, waiting."""
    world = FakeWorld(replies={"s1": [Reply("", (WRITE,))]})
    first = impl.open(data_dir, world)
    first.open_session(config(rules=(ask("write_file"),)))

    def run_second_instance(_context):
        world.hooks.pop("before_model_request")
        second = impl.open(data_dir, world)
        assert second.run_turn("s1", "send").status is TurnStatus.AWAITING_APPROVAL
        second.close()

    world.hooks["before_model_request"] = run_second_instance
    assert first.run_turn("s1", "send").status is TurnStatus.AWAITING_APPROVAL
    assert len(world.requests) == 1 and _roles(world.requests[0]) == [("user", "send")]
    obs = impl.inspect(data_dir)
    assert [w.status for w in obs.approval_waits] == [WaitStatus.PENDING]
    first.answer_approval(world.prompts[0].wait_id, True)
    assert world.executed("c1") == 1
    assert [role for role, _ in _roles(world.requests[-1])] == ["user", "assistant", "tool"]
    first.close()


def test_a_cancel_at_the_first_before_model_request_keeps_the_message(start, impl, data_dir):
    world = FakeWorld()
    runtime = start(world, config())
    world.hooks["before_model_request"] = lambda _ctx: (world.hooks.pop("before_model_request"),
                                                        runtime.cancel("s1"))
    assert runtime.run_turn("s1", "first").status is TurnStatus.CANCELLED
    assert world.requests == [] and impl.inspect(data_dir).model_requests == ()
    assert impl.inspect(data_dir).sessions[0].turn_status is TurnStatus.CANCELLED
    # The next turn clears the cancellation; the cancelled turn's message stays said.
    assert runtime.run_turn("s1", "second").status is TurnStatus.COMPLETED
    assert _roles(world.requests[0]) == [("user", "first"), ("user", "second")]


def test_a_cancelled_session_s_next_turn_can_be_cancelled_again_before_its_request(start, impl,
                                                                                   data_dir):
    world = FakeWorld()
    runtime = start(world, config())
    runtime.cancel("s1")
    world.hooks["before_model_request"] = lambda _ctx: (world.hooks.pop("before_model_request"),
                                                        runtime.cancel("s1"))
    assert runtime.run_turn("s1", "first").status is TurnStatus.CANCELLED
    assert world.requests == []
    assert runtime.run_turn("s1", "second").status is TurnStatus.COMPLETED
    assert _roles(world.requests[0]) == [("user", "first"), ("user", "second")]


def test_a_cancel_after_the_final_stream_ends_the_turn_cancelled_not_completed(start, impl,
                                                                               data_dir):
    """The final answer's end commits the turn's end too, unless the session was cancelled
    meanwhile: then the turn ends cancelled, as the loop ends a cancelled session's turn."""
    world = FakeWorld()
    runtime = start(world, config())
    world.hooks["after_model_stream_ended"] = lambda _ctx: runtime.cancel("s1")
    assert runtime.run_turn("s1", "hello").status is TurnStatus.CANCELLED
    assert impl.inspect(data_dir).sessions[0].turn_status is TurnStatus.CANCELLED
