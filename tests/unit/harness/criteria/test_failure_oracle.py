"""The failure oracle on hand-built traces: keys, table model, evictions, repeat judgement."""

from __future__ import annotations

from harness.contract import FAILURE_TABLE_CAPACITY
from harness.criteria import facts as F
from harness.criteria import failure_oracle as O

from tracebuilder import TraceBuilder, call, op_view, session


def upload(i: int) -> dict:
    return {"file": f"/repo/batch-{i:02d}.csv"}


def _uploads(n: int, **row):
    b = TraceBuilder(session("s1", rules=[("allow", "upload")]))
    for i in range(1, n + 1):
        b.model("s1", [call(f"f{i}", "upload", upload(i))])
        b.executed("s1", f"f{i}", "upload", upload(i), status="error", error_kind="failed", **row)
    return b


def test_capacity_is_the_fixed_constant():
    assert O.FAILURE_TABLE_CAPACITY == FAILURE_TABLE_CAPACITY == 16


def test_bash_key_drops_description_only_and_user_tools_keep_it():
    b = TraceBuilder(session("s1"), tools=[("Bash", "bash"), ("notify", "external")])
    t = b.build()
    bash = O.dedup_key(t, "s1", "Bash", {"command": "ls", "description": "a", "cwd": "/r"})
    assert bash == O.dedup_key(t, "s1", "Bash", {"command": "ls", "description": "b", "cwd": "/r"})
    assert bash != O.dedup_key(t, "s1", "Bash", {"command": "ls", "description": "a", "cwd": "/s"})
    assert bash != O.dedup_key(t, "s1", "Bash", {"command": "ls ", "description": "a", "cwd": "/r"})
    assert O.dedup_key(t, "s1", "notify", {"text": "x", "description": "a"}) != \
        O.dedup_key(t, "s1", "notify", {"text": "x", "description": "b"})


def test_executed_failures_are_certain_events_in_world_order():
    trace = _uploads(3).build()
    events = O.failure_events(trace)
    assert [e.tool_call_id for e in events] == ["f1", "f2", "f3"]
    assert all(e.certain and e.kind == "failed" and e.source == "ledger" for e in events)


def test_unavailable_and_denials_are_possible_events_and_successes_none():
    b = TraceBuilder(session("s1", rules=[("allow", "upload"), ("deny", "drop")]),
                     tools=[("upload", "external"), ("drop", "external")])
    b.model("s1", [call("u1", "upload", upload(1))])
    b.unavailable("s1", "u1", "upload", upload(1))
    b.model("s1", [call("u2", "upload", upload(2))])
    b.unavailable("s1", "u2", "upload", upload(2))
    b.executed("s1", "u2", "upload", upload(2))  # retried and succeeded: no failure
    b.model("s1", [call("d1", "drop", {"t": 1})])
    b.observe(op_view("s1", "d1", "drop", {"t": 1}, permission="deny", decided_by="explicit_deny"))
    events = {e.tool_call_id: e for e in O.failure_events(b.build())}
    assert set(events) == {"u1", "d1"}
    assert (events["u1"].source, events["u1"].kind) == ("unavailable", "transient")
    assert (events["d1"].source, events["d1"].kind) == ("denial", "permission_denied")
    assert not events["d1"].certain


def test_table_model_evicts_the_least_recently_failed_key():
    b = _uploads(FAILURE_TABLE_CAPACITY)
    # f1 fails again (touched), then a 17th distinct key arrives: f2 is the oldest now
    b.model("s1", [call("g1", "upload", upload(1))])
    b.executed("s1", "g1", "upload", upload(1), status="error", error_kind="failed")
    b.model("s1", [call("f17", "upload", upload(17))])
    last = b.executed("s1", "f17", "upload", upload(17), status="error", error_kind="failed")
    trace = b.build()
    model = O.table_model(trace)
    key = lambda i: O.dedup_key(trace, "s1", "upload", upload(i))  # noqa: E731
    assert [e.key for e in model.evictions] == [key(2)]
    assert model.evictions[0].index == last
    held = model.keys_at("s1", last + 1)
    assert len(held) == FAILURE_TABLE_CAPACITY and held[-1] == key(17) and key(1) in held
    assert len(model.distinct_keys("s1")) == FAILURE_TABLE_CAPACITY + 1


def test_no_eviction_within_capacity():
    assert O.table_model(_uploads(FAILURE_TABLE_CAPACITY).build()).evictions == ()


def test_a_loaded_checkpoint_replaces_the_table_with_its_most_recent_entries():
    b = TraceBuilder(session("s1"))
    entries = [{"dedup_key": f"k{i}", "tool": "Bash", "failure_kind": "failed", "count": 1,
                "last_execution_id": f"ex{i}"} for i in range(20)]
    b.driver("load_checkpoint", session_id="s1", fixture="v2",
             fixture_content={"format_version": 2, "messages": [], "failure_entries": entries})
    model = O.table_model(b.build())
    held = model.keys_at("s1", b.last + 1)
    assert held == tuple(O.fixture_key(e) for e in entries[-16:])
    assert model.events == () and model.evictions == ()


DEPLOY = {"service": "api"}


def _deploys(outcomes, version_of=lambda i: 1):
    b = TraceBuilder(session("s1", rules=[("allow", "deploy")]), tools=[("deploy", "external")])
    views = []
    for i, outcome in enumerate(outcomes, start=1):
        b.model("s1", [call(f"k{i}", "deploy", DEPLOY)])
        if outcome == "ok":
            b.executed("s1", f"k{i}", "deploy", DEPLOY, permission_version=version_of(i))
            views.append(op_view("s1", f"k{i}", "deploy", DEPLOY, permission_version=version_of(i)))
        else:
            b.executed("s1", f"k{i}", "deploy", DEPLOY, status="error", error_kind=outcome,
                       permission_version=version_of(i))
            views.append(op_view("s1", f"k{i}", "deploy", DEPLOY, outcome="failed", failure_kind=outcome,
                                 permission_version=version_of(i)))
    b.observe(*views)
    trace = b.build()
    listed = list(F.operations(trace).values())
    return trace, listed


def test_repeat_judgement_counts_strict_failures_of_one_key_and_version():
    trace, listed = _deploys(["failed", "param_error", "failed"])
    assert [p.tool_call_id for p in O.must_refuse(trace, listed[:2], listed[2])] == ["k1", "k2"]
    assert O.must_refuse(trace, listed[:1], listed[1]) == []  # one failure: below the limit


def test_repeat_judgement_restarts_after_a_success_and_ignores_transients():
    trace, listed = _deploys(["failed", "ok", "failed", "failed"])
    assert O.must_refuse(trace, listed[:3], listed[3]) == []
    trace, listed = _deploys(["transient", "transient", "failed"])
    assert O.must_refuse(trace, listed[:2], listed[2]) == []


def test_repeat_judgement_is_per_permission_version():
    trace, listed = _deploys(["failed", "failed", "failed"], version_of=lambda i: 1 if i < 3 else 2)
    assert O.must_refuse(trace, listed[:2], listed[2]) == []
