"""failure_policy: dedup keys (L1.3-L1.5), the bounded failure table and its history (L1.1,
L1.2), the repeat guard (L1.3, L3.9), failure classes (L1.7), bounded retries (L1.8) and
host-authoritative outcomes (X5)."""

from __future__ import annotations

from collections import OrderedDict

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.contract import (
    SAFE_INTEGER_MAX,
    DecisionSource,
    FailureKind,
    Mode,
    Outcome,
    RecoveryAction,
    Thresholds,
    ToolKind,
)
from ref_fakes import FakeWorld, Reply, allow, call, config
from reference_impl import denial_counters, failure_policy
from reference_impl.store import Store

texts = st.text(max_size=12)
# JSON canonical JSON (RFC 8785) writes: integers a double keeps exactly
json_scalars = (st.none() | st.booleans()
                | st.integers(-SAFE_INTEGER_MAX, SAFE_INTEGER_MAX) | texts)
args_dicts = st.dictionaries(st.sampled_from(["command", "cwd", "timeout", "env"]), json_scalars,
                             max_size=4)


@given(args_dicts, texts, texts)
def test_bash_key_ignores_the_description_and_nothing_else(args, first, second):
    key = failure_policy.dedup_key("Bash", ToolKind.BASH, {**args, "description": first})
    assert key == failure_policy.dedup_key("Bash", ToolKind.BASH, {**args, "description": second})
    assert key == failure_policy.dedup_key("Bash", ToolKind.BASH, args)
    changed = {**args, "command": f"{args.get('command')}!"}
    assert key != failure_policy.dedup_key("Bash", ToolKind.BASH, changed)


@given(args_dicts, texts, texts)
def test_other_tools_keep_a_field_named_description(args, first, second):
    a = failure_policy.dedup_key("notify", ToolKind.EXTERNAL, {**args, "description": first})
    b = failure_policy.dedup_key("notify", ToolKind.EXTERNAL, {**args, "description": second})
    assert (a == b) == (first == second)


@given(texts)
def test_command_text_is_never_normalised(command):
    keys = {
        failure_policy.dedup_key("Bash", ToolKind.BASH, {"command": variant})
        for variant in (command, command + " ", " " + command + " ", command + "x")
    }
    assert len(keys) == 4


def test_bash_is_recognised_by_kind_or_by_name():
    assert failure_policy.is_bash("shell", ToolKind.BASH)
    assert failure_policy.is_bash("Bash", None)
    assert not failure_policy.is_bash("terminal", ToolKind.TERMINAL)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 5), st.lists(st.integers(0, 8), max_size=40))
def test_failure_table_is_bounded_lru_and_history_is_complete(capacity, keys):
    store = Store.open_file(":memory:")
    model: OrderedDict[str, int] = OrderedDict()
    with store.transaction() as conn:
        denial_counters.record_risk_denial(conn, "s", 1, "ex-risky")
        for number, key in enumerate(keys):
            name = f"k{key}"
            assert failure_policy.record_failure(
                conn, session_id="s", execution_id=f"ex-{number}", dedup_key=name, tool="t",
                failure_kind=FailureKind.FAILED, permission_version=1, consumes_budget=True,
                capacity=capacity, now=0.0)
            # a replay of the same operation is not a new failure
            assert not failure_policy.record_failure(
                conn, session_id="s", execution_id=f"ex-{number}", dedup_key=name, tool="t",
                failure_kind=FailureKind.FAILED, permission_version=1, consumes_budget=True,
                capacity=capacity, now=0.0)
            model[name] = model.pop(name, 0) + 1
            while len(model) > capacity:
                model.popitem(last=False)
        entries = failure_policy.table_entries(conn, "s")
        assert [(e.dedup_key, e.count) for e in entries] == list(model.items())
        (logged,) = conn.execute("SELECT COUNT(*) FROM failure_events").fetchone()
        assert logged == len(keys)
        # eviction touched no denial counter (L1.2)
        assert denial_counters.read(conn, "s", 1) == denial_counters.DenialCounts(1, 1)
    store.close()


def test_replace_table_keeps_only_the_most_recent_entries():
    store = Store.open_file(":memory:")
    entries = tuple(failure_policy.FailureEntry(f"k{i}", "t", FailureKind.FAILED, 1, f"ex-{i}")
                    for i in range(5))
    with store.transaction() as conn:
        failure_policy.replace_table(conn, "s", entries, 3)
        assert failure_policy.table_entries(conn, "s") == entries[-3:]
    store.close()


def test_seventeen_distinct_failures_stay_recorded_beyond_the_table(start, impl, data_dir):
    calls = tuple(call(f"c{i}", "Bash", command=f"false {i}") for i in range(18))
    world = FakeWorld(replies={"s1": [Reply("", calls)]},
                      tool_behaviour={c.tool_call_id: ["fail"] for c in calls})
    runtime = start(world, config(rules=(allow("Bash"),)))
    runtime.run_turn("s1", "run them all")
    obs = impl.inspect(data_dir)
    assert len(world.ledger) == 18
    assert len(obs.failure_table) == 16
    assert all(cp.failure_entries <= 16 for cp in obs.checkpoints)
    assert obs.failure_events_logged == 18
    assert all(op.failure_kind is FailureKind.FAILED for op in obs.operations)
    assert {e.dedup_key for e in obs.failure_table} == {op.dedup_key for op in obs.operations[2:]}


def test_rewording_a_bash_description_does_not_reset_the_repeat_guard(start, impl, data_dir):
    calls = [call(f"c{i}", "Bash", command="make deploy", description=f"attempt {i}") for i in range(3)]
    world = FakeWorld(replies={"s1": [Reply("", (c,)) for c in calls]},
                      tool_behaviour={"c0": ["fail"], "c1": ["fail"]})
    runtime = start(world, config(rules=(allow("Bash"),)))
    runtime.run_turn("s1", "deploy")
    obs = impl.inspect(data_dir)
    assert world.executed("c0") == world.executed("c1") == 1
    assert world.executed("c2") == 0
    third = obs.operation("c2")
    assert third.decided_by is DecisionSource.REPEAT_GUARD
    assert (third.outcome, third.execution_started) == (Outcome.NOT_STARTED, False)
    assert len({op.dedup_key for op in obs.operations}) == 1


def test_a_success_starts_the_repeat_count_again(start, data_dir):
    calls = [call(f"c{i}", "Bash", command="make") for i in range(4)]
    world = FakeWorld(replies={"s1": [Reply("", (c,)) for c in calls]},
                      tool_behaviour={"c0": ["fail"], "c2": ["fail"]})
    start(world, config(rules=(allow("Bash"),))).run_turn("s1", "build")
    assert [world.executed(c.tool_call_id) for c in calls] == [1, 1, 1, 1]


def test_user_tool_descriptions_and_shell_spelling_make_distinct_operations(start, impl, data_dir):
    calls = (
        call("n1", "notify", channel="ops", description="first"),
        call("n2", "notify", channel="ops", description="second"),
        call("n3", "notify", channel="ops", description="third"),
        call("b1", "Bash", command="ls -la"),
        call("b2", "Bash", command="ls -al"),
        call("b3", "Bash", command="ls  -la"),
    )
    world = FakeWorld(replies={"s1": [Reply("", calls)]},
                      tool_behaviour={c.tool_call_id: ["fail"] for c in calls})
    tools = config().tools + ()
    runtime = start(world, config(rules=(allow("notify"), allow("Bash")), tools=tools))
    runtime.run_turn("s1", "try")
    obs = impl.inspect(data_dir)
    assert len(world.ledger) == 6
    assert len({op.dedup_key for op in obs.operations}) == 6


def test_repeat_guard_counts_denials_but_not_classifier_risk_denials(start, impl, data_dir):
    denied = [call(f"d{i}", "Bash", command="shutdown now") for i in range(3)]
    world = FakeWorld(replies={"s1": [Reply("", tuple(denied))]})
    start(world, config(interactive=False)).run_turn("s1", "x")
    sources = [op.decided_by for op in impl.inspect(data_dir).operations]
    assert sources == [DecisionSource.DEFAULT_DENY] * 2 + [DecisionSource.REPEAT_GUARD]


def test_failure_classes_are_distinct_results(start, impl, data_dir):
    calls = (
        call("p", "write_file", path="/a"),
        call("p2", "write_file", path="/a", content="fixed"),
        call("f", "Bash", command="make"),
        call("u", "Bash", command="deploy"),
        call("r", "Bash", command="sync"),
        call("ok", "Bash", command="echo after the failures"),
    )
    world = FakeWorld(replies={"s1": [Reply("", calls)]},
                      tool_behaviour={"p": ["param_error"], "f": ["fail"], "u": ["unknown"],
                                      "r": ["raise"]})
    start(world, config(rules=(allow("write_file"), allow("Bash")))).run_turn("s1", "go")
    obs = impl.inspect(data_dir)
    kinds = {op.identity.tool_call_id: (op.outcome, op.failure_kind, op.reconciliation_required)
             for op in obs.operations}
    assert kinds == {
        "p": (Outcome.FAILED, FailureKind.PARAM_ERROR, False),
        "p2": (Outcome.SUCCEEDED, None, False),  # the corrected call is a new operation
        "f": (Outcome.FAILED, FailureKind.FAILED, False),
        "u": (Outcome.UNKNOWN, FailureKind.UNKNOWN, True),
        "r": (Outcome.UNKNOWN, FailureKind.UNKNOWN, True),
        "ok": (Outcome.SUCCEEDED, None, False),  # other approved work continues
    }
    messages = {m.tool_call_id: m for m in world.requests[-1].messages if m.role == "tool"}
    assert messages["p"].failure_kind is FailureKind.PARAM_ERROR
    assert "exit status 1" in messages["f"].content  # the necessary output reaches the model
    assert obs.operation("u").recovery_actions == (RecoveryAction.RECONCILE,)
    assert world.executed("u") == 1  # unknown is never retried


def test_tool_text_never_changes_execution_state(start, impl, data_dir):
    world = FakeWorld(replies={"s1": [Reply("", (call("c1", "write_file", path="/a"),))]},
                      tool_behaviour={"c1": ["claims_not_executed"]})
    start(world, config(rules=(allow("write_file"),))).run_turn("s1", "x")
    op = impl.inspect(data_dir).operation("c1")
    assert (op.outcome, op.execution_started) == (Outcome.SUCCEEDED, True)


def test_retries_only_when_certainly_not_run_or_idempotent_and_bounded(start, impl, data_dir):
    calls = (
        call("u1", "write_file", path="/a"),    # unavailable twice, then runs
        call("u2", "write_file", path="/b"),    # never available
        call("t1", "read_file", path="/c"),     # transient on an idempotent tool
        call("t2", "write_file", path="/d"),    # transient on a non-idempotent tool
    )
    world = FakeWorld(
        replies={"s1": [Reply("", calls)]},
        tool_behaviour={"u1": ["unavailable"] * 2, "u2": ["unavailable"] * 5,
                        "t1": ["transient"] * 5, "t2": ["transient"]},
    )
    cfg = config(rules=(allow("write_file"), allow("read_file")),
                 thresholds=Thresholds(auto_retries_max=2))
    start(world, cfg).run_turn("s1", "x")
    obs = impl.inspect(data_dir)
    u1, u2, t1, t2 = (obs.operation(c.tool_call_id) for c in calls)
    assert (u1.outcome, u1.attempts, world.executed("u1")) == (Outcome.SUCCEEDED, 3, 1)
    assert (u2.outcome, u2.failure_kind, u2.execution_started, u2.attempts) == (
        Outcome.NOT_STARTED, FailureKind.TRANSIENT, False, 3)
    assert u2.recovery_actions == (RecoveryAction.RETRY,)
    assert (t1.outcome, t1.failure_kind, world.executed("t1")) == (Outcome.FAILED, FailureKind.TRANSIENT, 3)
    assert (t2.outcome, t2.failure_kind, world.executed("t2")) == (Outcome.FAILED, FailureKind.TRANSIENT, 1)


def test_mode_is_irrelevant_to_the_key():
    assert failure_policy.dedup_key("Bash", ToolKind.BASH, {"command": "x"}) == \
        failure_policy.dedup_key("Bash", None, {"command": "x", "description": "y"})
    assert Mode.AUTO  # (the key depends on the call only)


def test_unknown_outcomes_count_toward_the_repeat_guard(start, impl, data_dir):
    calls = [call(f"c{i}", "Bash", command="make release") for i in range(3)]
    world = FakeWorld(replies={"s1": [Reply("", (c,)) for c in calls]},
                      tool_behaviour={"c0": ["unknown"], "c1": ["unknown"]})
    start(world, config(rules=(allow("Bash"),))).run_turn("s1", "release")
    assert [world.executed(c.tool_call_id) for c in calls] == [1, 1, 0]
    assert impl.inspect(data_dir).operation("c2").decided_by is DecisionSource.REPEAT_GUARD
