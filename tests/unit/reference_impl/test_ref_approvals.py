"""approvals: waits committed before the prompt and answered exactly once (L3.2), never for
hard constraints or explicit denies (L3.4), only for capable interactive owners (L3.10);
revalidation of the approved operation (L2.9); escalation needs its own approval (L2.10,
L2.11)."""

from __future__ import annotations

import pytest

from harness.contract import (
    DecisionSource,
    FailureKind,
    Outcome,
    Permission,
    Rule,
    RuleEffect,
    SimulatedCrash,
    TurnStatus,
    WaitStatus,
)
from ref_fakes import FakeWorld, Reply, allow, ask, call, config, deny
from reference_impl.errors import UnknownWaitError


def _ask_world(**kwargs):
    return FakeWorld(replies={"s1": [Reply("", (call("c1", "delete_branch", branch="old"),)),
                                     Reply("deleted.")]}, **kwargs)


def test_the_wait_is_committed_before_the_prompt(start, impl, data_dir):
    seen = []
    world = _ask_world(prompt_hook=lambda prompt: seen.append(impl.inspect(data_dir)))
    result = start(world, config(rules=(ask("delete_branch"),))).run_turn("s1", "delete")
    assert result.status is TurnStatus.AWAITING_APPROVAL
    (at_prompt,) = seen
    (wait,) = at_prompt.approval_waits
    assert (wait.wait_id, wait.status) == (world.prompts[0].wait_id, WaitStatus.PENDING)
    op = impl.inspect(data_dir).operation("c1")
    assert (op.permission, op.decided_by, op.outcome) == (Permission.ASK, DecisionSource.ASK_RULE,
                                                          Outcome.NOT_STARTED)
    assert world.ui[-1].status == "awaiting_approval"


def test_an_answer_applies_exactly_once(start, impl, data_dir):
    world = _ask_world()
    runtime = start(world, config(rules=(ask("delete_branch"),)))
    runtime.run_turn("s1", "delete")
    wait_id = world.prompts[0].wait_id
    assert runtime.answer_approval(wait_id, True).status is TurnStatus.COMPLETED
    assert runtime.answer_approval(wait_id, False).status is TurnStatus.COMPLETED
    assert runtime.answer_approval(wait_id, True).status is TurnStatus.COMPLETED
    obs = impl.inspect(data_dir)
    assert world.executed("c1") == 1
    (wait,) = obs.approval_waits
    assert (wait.status, wait.applied) == (WaitStatus.APPROVED, True)
    assert obs.operation("c1").decided_by is DecisionSource.APPROVAL


def test_a_rejection_is_recorded_not_executed_and_the_loop_goes_on(start, impl, data_dir):
    world = _ask_world()
    runtime = start(world, config(rules=(ask("delete_branch"),)))
    runtime.run_turn("s1", "delete")
    result = runtime.answer_approval(world.prompts[0].wait_id, False)
    op = impl.inspect(data_dir).operation("c1")
    assert (op.permission, op.outcome, op.failure_kind) == (
        Permission.DENY, Outcome.NOT_STARTED, FailureKind.PERMISSION_DENIED)
    assert result.status is TurnStatus.COMPLETED and world.executed("c1") == 0
    assert world.requests[-1].messages[-1].outcome is Outcome.NOT_STARTED


def test_a_crash_right_after_the_prompt_leaves_an_answerable_wait(impl, data_dir):
    world = _ask_world(crash_at="after_prompt")
    runtime = impl.open(data_dir, world)
    runtime.open_session(config(rules=(ask("delete_branch"),)))
    with pytest.raises(SimulatedCrash):
        runtime.run_turn("s1", "delete")
    world.crash_at = ""
    restarted = impl.open(data_dir, world)
    restarted.recover()
    assert len(world.prompts) == 1  # shown once; not shown again
    assert impl.inspect(data_dir).approval_waits[0].status is WaitStatus.PENDING
    restarted.answer_approval(world.prompts[0].wait_id, True)
    restarted.answer_approval(world.prompts[0].wait_id, True)
    assert world.executed("c1") == 1
    restarted.close()


def test_a_crash_before_the_prompt_shows_it_on_recovery(impl, data_dir):
    world = _ask_world(crash_at="after_wait_persisted")
    runtime = impl.open(data_dir, world)
    runtime.open_session(config(rules=(ask("delete_branch"),)))
    with pytest.raises(SimulatedCrash):
        runtime.run_turn("s1", "delete")
    assert world.prompts == []
    world.crash_at = ""
    restarted = impl.open(data_dir, world)
    restarted.recover()
    assert [p.tool_call_id for p in world.prompts] == ["c1"]
    restarted.close()


def test_hard_constraints_and_explicit_denies_never_become_waits(start, impl, data_dir):
    world = FakeWorld(replies={"s1": [Reply("", (call("h", "Bash", command="sudo rm"),
                                                 call("d", "write_file", path="/etc/x")))]})
    cfg = config(hard_constraints=(Rule(RuleEffect.DENY, "Bash", "*sudo*", "command"),),
                 rules=(deny("write_file", "/etc/*", "path"), ask("Bash"), ask("write_file")))
    result = start(world, cfg).run_turn("s1", "x")
    obs = impl.inspect(data_dir)
    assert result.status is TurnStatus.COMPLETED
    assert obs.approval_waits == () and world.prompts == []
    assert [op.decided_by for op in obs.operations] == [DecisionSource.HARD_CONSTRAINT,
                                                        DecisionSource.EXPLICIT_DENY]
    assert obs.operation("h").recovery_actions == ()  # nothing can lift a hard constraint


@pytest.mark.parametrize("who", [dict(interactive=False), dict(owner_can_approve=False)])
def test_only_capable_interactive_owners_get_waits(start, impl, data_dir, who):
    world = _ask_world()
    result = start(world, config(rules=(ask("delete_branch"),), **who)).run_turn("s1", "x")
    assert result.status is TurnStatus.COMPLETED
    assert impl.inspect(data_dir).approval_waits == () and world.prompts == []


def test_unknown_wait_ids_are_an_error(start):
    runtime = start(FakeWorld(), config())
    with pytest.raises(UnknownWaitError):
        runtime.answer_approval("wait-nope", True)


def test_rules_changed_while_pending_void_the_approval(start, impl, data_dir):
    world = _ask_world()
    runtime = start(world, config(rules=(ask("delete_branch"),)))
    runtime.run_turn("s1", "delete")
    runtime.update_rules("s1", (ask("delete_branch"), allow("read_file")), 2)
    runtime.answer_approval(world.prompts[0].wait_id, True)
    op = impl.inspect(data_dir).operation("c1")
    assert (op.permission, op.decided_by, op.outcome) == (
        Permission.DENY, DecisionSource.REVALIDATION, Outcome.NOT_STARTED)
    assert world.executed("c1") == 0


def test_a_grant_under_the_new_rules_still_lets_the_approved_call_run(start, impl, data_dir):
    world = _ask_world()
    runtime = start(world, config(rules=(ask("delete_branch"),)))
    runtime.run_turn("s1", "delete")
    runtime.update_rules("s1", (allow("delete_branch"),), 2)
    runtime.answer_approval(world.prompts[0].wait_id, True)
    assert world.executed("c1") == 1
    assert world.ledger[0].identity.permission_version == 2  # bound to the rules it ran under
    op = impl.inspect(data_dir).operation("c1")
    assert (op.identity.permission_version, op.decided_by) == (2, DecisionSource.EXACT_GRANT)


def test_a_file_written_while_the_approval_was_pending_voids_its_precondition(start, impl, data_dir):
    edit = call("e1", "edit_file", path="/repo/app.cfg", old="80", new="8080", expect_sha="sha256:abc")
    world = FakeWorld(replies={"s1": [Reply("", (edit,))],
                               "s2": [Reply("", (call("w1", "write_file", path="/repo/app.cfg", content="9090"),))]})
    runtime = start(world, config("s1", rules=(ask("edit_file"),)), config("s2", rules=(allow("write_file"),)))
    runtime.run_turn("s1", "bump")
    runtime.run_turn("s2", "rewrite")
    runtime.answer_approval(world.prompts[0].wait_id, True)
    op = impl.inspect(data_dir).operation("e1")
    assert (op.decided_by, op.outcome) == (DecisionSource.REVALIDATION, Outcome.NOT_STARTED)
    assert "/repo/app.cfg" in op.reason and world.executed("e1") == 0


def test_an_escalation_is_never_granted_by_a_retry_only_by_its_own_approval(start, impl, data_dir):
    calls = [call("s1c", "Bash", command="npm install"), call("s2c", "Bash", command="npm i -g tsc")]
    world = FakeWorld(replies={"s1": [Reply("", (c,)) for c in calls]},
                      tool_behaviour={"s1c": ["escalate"], "s2c": ["escalate"]})
    runtime = start(world, config(rules=(allow("Bash"),)))
    assert runtime.run_turn("s1", "install").status is TurnStatus.AWAITING_APPROVAL
    assert [inv.sandboxed for inv in world.ledger] == [True]
    runtime.answer_approval(world.prompts[0].wait_id, False)
    runtime.answer_approval(world.prompts[1].wait_id, True)
    assert [(inv.identity.tool_call_id, inv.sandboxed) for inv in world.ledger] == [
        ("s1c", True), ("s2c", True), ("s2c", False)]
    obs = impl.inspect(data_dir)
    refused, approved = obs.operation("s1c"), obs.operation("s2c")
    assert (refused.outcome, refused.failure_kind, refused.execution_started) == (
        Outcome.FAILED, FailureKind.PERMISSION_DENIED, True)  # partial effects possible
    assert (approved.outcome, approved.attempts, approved.decided_by) == (
        Outcome.SUCCEEDED, 2, DecisionSource.APPROVAL)
    assert obs.result_records == 2


def test_an_approved_run_that_asks_to_escalate_has_applied_its_permission_answer(
        start, impl, data_dir):
    """The permission answer took effect (the sandboxed run happened) while the operation
    waits on its escalation question: the first wait is applied, the second is pending
    (chaos regression l2-escalation-after-sandbox, seed 3)."""
    world = FakeWorld(replies={"s1": [Reply("", (call("c1", "Bash", command="npm i -g tsc"),))]},
                      tool_behaviour={"c1": ["escalate"]})
    runtime = start(world, config(rules=(ask("Bash"),)))
    assert runtime.run_turn("s1", "install").status is TurnStatus.AWAITING_APPROVAL
    assert runtime.answer_approval(world.prompts[0].wait_id, True).status is TurnStatus.AWAITING_APPROVAL
    permission, escalation = impl.inspect(data_dir).approval_waits
    assert (permission.status, permission.applied) == (WaitStatus.APPROVED, True)
    assert (escalation.status, escalation.applied) == (WaitStatus.PENDING, False)
    assert [inv.sandboxed for inv in world.ledger] == [True]


def test_without_an_owner_an_escalation_request_just_fails(start, impl, data_dir):
    world = FakeWorld(replies={"s1": [Reply("", (call("c1", "Bash", command="npm install"),))]},
                      tool_behaviour={"c1": ["escalate"]})
    start(world, config(interactive=False, rules=(allow("Bash"),))).run_turn("s1", "install")
    op = impl.inspect(data_dir).operation("c1")
    assert (op.outcome, op.execution_started, len(world.ledger), world.prompts) == (
        Outcome.FAILED, True, 1, [])


def test_a_new_message_answers_the_waiting_call_no_before_it_reaches_the_model(
        start, impl, data_dir):
    """The owner moved on: the waiting call is refused (not executed), its result goes to the
    model before the new message, and a late approval changes nothing."""
    world = FakeWorld(replies={"s1": [Reply("", (call("c1", "delete_branch", branch="old"),)),
                                      Reply("something else then.")]})
    runtime = start(world, config(rules=(ask("delete_branch"),)))
    runtime.run_turn("s1", "delete")
    assert runtime.run_turn("s1", "never mind, something else").status is TurnStatus.COMPLETED
    roles = [(m.role, m.tool_call_id) for m in world.requests[-1].messages]
    assert roles == [("user", ""), ("assistant", ""), ("tool", "c1"), ("user", "")]
    assert world.requests[-1].messages[2].outcome is Outcome.NOT_STARTED
    runtime.answer_approval(world.prompts[0].wait_id, True)
    op = impl.inspect(data_dir).operation("c1")
    assert (op.outcome, op.decided_by, world.executed("c1")) == (
        Outcome.NOT_STARTED, DecisionSource.APPROVAL, 0)
    (waited,) = impl.inspect(data_dir).approval_waits
    assert (waited.status, waited.applied) == (WaitStatus.REJECTED, True)
    assert world.ui[-1].status == "denied"


def test_a_new_message_answers_each_call_of_the_waiting_answer_in_turn(start, impl, data_dir):
    world = FakeWorld(replies={"s1": [Reply("", (call("c1", "delete_branch", branch="a"),
                                                 call("c2", "delete_branch", branch="b"))),
                                      Reply("kept both.")]})
    runtime = start(world, config(rules=(ask("delete_branch"),)))
    runtime.run_turn("s1", "delete both")
    assert runtime.run_turn("s1", "stop").status is TurnStatus.COMPLETED
    assert [p.tool_call_id for p in world.prompts] == ["c1", "c2"]
    assert [m.tool_call_id for m in world.requests[-1].messages if m.role == "tool"] == ["c1", "c2"]
    assert world.requests[-1].messages[-1].role == "user" and not world.ledger


def test_a_wait_the_new_rules_forbid_is_withdrawn_not_shown(start, impl, data_dir):
    world = _ask_world()
    runtime = start(world, config(rules=(ask("delete_branch"),)))
    world.hooks["after_wait_persisted"] = lambda _ctx: runtime.update_rules(
        "s1", (deny("delete_branch"),), 2)
    runtime.run_turn("s1", "delete")
    obs = impl.inspect(data_dir)
    assert world.prompts == [] and world.executed("c1") == 0
    assert obs.approval_waits[0].status is WaitStatus.REJECTED
    op = obs.operation("c1")
    assert (op.permission, op.decided_by, op.identity.permission_version) == (
        Permission.DENY, DecisionSource.REVALIDATION, 1)


def test_a_deny_between_the_decision_and_the_wait_creates_no_wait(start, impl, data_dir):
    # L3.4: no wait may exist for a call an explicit deny forbids, not even one withdrawn.
    world = _ask_world()
    runtime = start(world, config(rules=(ask("delete_branch"),)))
    world.hooks["after_permission_decision"] = lambda _ctx: runtime.update_rules(
        "s1", (deny("delete_branch"),), 2)
    runtime.run_turn("s1", "delete")
    obs = impl.inspect(data_dir)
    assert obs.approval_waits == () and world.prompts == [] and world.executed("c1") == 0
    op = obs.operation("c1")
    assert (op.permission, op.decided_by, op.identity.permission_version) == (
        Permission.DENY, DecisionSource.EXPLICIT_DENY, 2)


def test_an_ask_decided_under_an_old_version_is_asked_again_under_the_new_one(start, impl, data_dir):
    # The version changed before the wait was persisted: the old decision is void, so it
    # is decided again and only the new decision's wait is created (none withdrawn).
    world = _ask_world()
    runtime = start(world, config(rules=(ask("delete_branch"),)))
    world.hooks["after_permission_decision"] = lambda _ctx: runtime.update_rules(
        "s1", (ask("delete_branch"),), 2)
    runtime.run_turn("s1", "delete")
    waits = impl.inspect(data_dir).approval_waits
    assert [w.status for w in waits] == [WaitStatus.PENDING] and len(world.prompts) == 1
    runtime.answer_approval(world.prompts[0].wait_id, True)
    op = impl.inspect(data_dir).operation("c1")
    assert (world.executed("c1"), op.identity.permission_version) == (1, 2)
