"""visibility: the tool list equals what can run (L5.1, L5.3) and every projection equals what
the authoritative record derives (L5.4, no retry for unknown or denied)."""

from __future__ import annotations

from harness.contract import (
    Mode,
    RecoveryAction,
    Rule,
    RuleEffect,
    expected_projection,
)
from ref_fakes import FakeWorld, Reply, allow, ask, call, config, deny
from reference_impl.visibility import visible_tools


def test_tools_denied_outright_are_not_visible():
    cfg = config(hard_constraints=(Rule(RuleEffect.DENY, "fetch"),),
                 rules=(deny("write_file"), deny("Bash", "rm *", "command")))
    visible = visible_tools(cfg)
    assert "fetch" not in visible and "write_file" not in visible
    assert "Bash" in visible and "read_file" in visible
    assert visible_tools(config(mode=Mode.PLAN)) == ("read_file",)
    assert visible_tools(config(capabilities=("Bash",))) == ("Bash",)


def test_every_published_projection_matches_its_record(start, impl, data_dir):
    calls = (
        call("ok", "read_file", path="/a"),
        call("denied", "write_file", path="/etc/x"),
        call("failed", "Bash", command="make"),
        call("unknown", "Bash", command="deploy"),
        call("waiting", "delete_branch", branch="x"),
    )
    world = FakeWorld(replies={"s1": [Reply("", calls)]},
                      tool_behaviour={"failed": ["fail"], "unknown": ["unknown"]})
    cfg = config(rules=(allow("read_file"), deny("write_file"), allow("Bash"), ask("delete_branch")))
    start(world, cfg).run_turn("s1", "go")
    obs = impl.inspect(data_dir)
    published = {p.tool_call_id: p for p in world.ui}  # the last one per operation
    assert set(published) == {c.tool_call_id for c in calls}
    for op in obs.operations:
        projection = published[op.identity.tool_call_id]
        waiting = any(w.execution_id == op.identity.execution_id and w.status.value == "pending"
                      for w in obs.approval_waits)
        status, actions = expected_projection(op.permission, op.outcome, op.decided_by,
                                              op.failure_kind, op.reconciliation_required, waiting)
        assert (projection.status, projection.recovery_actions, projection.reason) == (
            status, actions, op.reason)
        assert projection.recovery_actions == op.recovery_actions
    assert RecoveryAction.RETRY not in published["unknown"].recovery_actions
    assert RecoveryAction.RETRY not in published["denied"].recovery_actions
    assert published["waiting"].recovery_actions == (RecoveryAction.APPROVE, RecoveryAction.REJECT)
    assert set(obs.projections) == {p for p in world.ui if p.tool_call_id != "waiting"} | {
        published["waiting"]}
