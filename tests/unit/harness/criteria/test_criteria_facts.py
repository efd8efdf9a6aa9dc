"""The shared trace facts: precedence, rules in force, review linking, operations."""

from __future__ import annotations

from harness.contract import DecisionSource, Permission, canonical_json
from harness.criteria import facts as F
from harness.trace.record import FaultSpec

from tracebuilder import TraceBuilder, call, op_view, rule, session


def test_rule_matching_uses_fields_and_whole_args():
    assert F.rule_matches(rule("deny", "Bash", "rm *", "command"), "Bash", {"command": "rm -rf x"})
    assert not F.rule_matches(rule("deny", "Bash", "rm *", "command"), "Bash", {"command": "ls"})
    assert F.rule_matches(rule("deny", "Bash", "*", "cwd"), "Bash", {"command": "ls"})  # '*' matches a missing field
    assert not F.rule_matches(rule("deny", "Bash", "/x*", "cwd"), "Bash", {"command": "ls"})
    assert F.rule_matches(rule("allow", "web_*"), "web_fetch", {"url": "u"})
    assert F.rule_matches(rule("deny", "t", '*"n":1*'), "t", {"n": 1})


def test_static_precedence_first_match_wins():
    cfg = session("s", hard_constraints=[("deny", "Bash", "*sudo*", "command")], capabilities=["Bash", "w"],
                  rules=[("allow", "Bash"), ("deny", "w", "/etc/*", "path"), ("ask", "w", "/repo/*", "path"),
                         ("allow", "w")])
    decide = lambda tool, args, kind="write": F.static_decision(cfg, cfg.rules, tool, args, kind)
    assert decide("Bash", {"command": "sudo ls"}).source is DecisionSource.HARD_CONSTRAINT
    assert decide("deploy", {}).source is DecisionSource.CAPABILITY
    assert decide("w", {"path": "/etc/x"}).source is DecisionSource.EXPLICIT_DENY
    assert decide("w", {"path": "/repo/x"}).source is DecisionSource.ASK_RULE
    assert decide("w", {"path": "/tmp/x"}).permission is Permission.ALLOW
    plan = session("p", mode="plan", rules=[("allow", "w")])
    assert F.static_decision(plan, plan.rules, "w", {}, "write").source is DecisionSource.PLAN_MODE
    assert F.static_decision(plan, plan.rules, "w", {}, "read").source is DecisionSource.EXACT_GRANT
    auto = session("a", mode="auto")
    assert F.static_decision(auto, (), "w", {}, "write").permission is None
    quiet = session("q", interactive=False)
    assert F.static_decision(quiet, (), "w", {}, "write").source is DecisionSource.DEFAULT_DENY
    assert F.static_decision(session("i"), (), "w", {}, "write").source is DecisionSource.DEFAULT_ASK


def test_rule_timeline_reads_driver_calls_and_faults_with_plan_fallback():
    fault = FaultSpec("during_classifier_review", "change_rules", "1",
                      {"session": "s1", "permission_version": 3, "rules": [{"effect": "deny", "tool": "w"}]})
    b = TraceBuilder(session("s1", rules=[("allow", "w")]), "s2", faults=[fault])
    update = b.update_rules("s1", [("ask", "w")], 2)
    b.update_rules("s2", [("deny", "w")], 9)
    change = b.add("failpoint", {"name": "during_classifier_review", "action": "change_rules", "hit": 1,
                                 "context": {}})  # no params recorded: taken from meta.faults
    trace = b.build()
    timeline = F.rule_timeline(trace, "s1")
    assert [s.permission_version for s in timeline] == [1, 2, 3]
    assert F.rules_at(trace, "s1", update).permission_version == 1
    assert F.rules_at(trace, "s1", update + 1).permission_version == 2
    assert F.rules_at(trace, "s1", change + 1).rules[0].tool == "w"
    assert F.versions(trace, "s2") == {1, 9}


def test_reviews_link_by_context_then_by_exact_args():
    args = {"path": "/a", "content": "x"}
    b = TraceBuilder(session("s1", mode="auto"))
    b.model("s1", [call("c1", "w", args), call("c2", "w", args)])
    b.classifier("s1", "w", args)
    b.classifier("s1", "w", args)
    b.classifier("s1", "w", args, operation=canonical_json(args)[:5])
    b.failpoint("during_classifier_review", context={"tool_call_id": "c2", "session_id": "s1"})
    trace = b.build()
    linked = [r.op_key for r in F.reviews(trace)]
    assert linked == [("s1", "c1"), ("s1", "c2"), ("s1", "c2")]
    b = TraceBuilder(session("s1", mode="auto"))
    b.model("s1", [call("c1", "w", args)])
    b.classifier("s1", "w", args, operation="{}")
    assert F.reviews(b.build())[0].op_key is None


def test_operations_join_world_and_store_by_session_and_call():
    args = {"path": "/a"}
    b = TraceBuilder("s1", "s2")
    b.model("s1", [call("c1", "w", args)])
    b.model("s2", [call("c1", "w", {"path": "/b"})])
    row = b.executed("s1", "c1", "w", args)
    b.observe(op_view("s1", "c1", "w", args), op_view("s2", "c1", "w", {"path": "/b"}, outcome="not_started"))
    ops = F.operations(b.build())
    assert list(ops) == [("s1", "c1"), ("s2", "c1")]
    assert ops[("s1", "c1")].rows[0].index == row and not ops[("s2", "c1")].rows
    assert ops[("s2", "c1")].args == {"path": "/b"} and ops[("s2", "c1")].args_source == "served"


def test_effective_outcome_turns_a_slow_verdict_into_a_timeout():
    b = TraceBuilder(session("s1", mode="auto", thresholds={"classifier_timeout_s": 5.0}))
    b.classifier("s1", "w", {}, "allow", delay_s=6.0)
    b.classifier("s1", "w", {}, "allow", delay_s=5.0)
    trace = b.build()
    assert [F.effective_outcome(trace, r) for r in F.reviews(trace)] == ["timeout", "allow"]


def test_events_between_is_the_scan_of_its_definition():
    import dataclasses
    import itertools

    from harness.criteria import facts
    from harness.trace.record import Kind

    b = TraceBuilder("s1")
    b.model("s1", [call("c1", "write_file", {"path": "/a"})])
    b.executed("s1", "c1", "write_file", {"path": "/a"})
    b.model("s1")
    b.observe()
    trace = b.build()

    def scan(t, lo, hi, *kinds):
        return tuple(e for e in t.events if lo < e.index < hi and (not kinds or e.kind in kinds))

    kind_sets = [(), (Kind.MODEL_REQUEST,), (Kind.TOOL_EXECUTED, Kind.MODEL_REQUEST),
                 (Kind.MODEL_REQUEST, Kind.MODEL_REQUEST), ("no-such-kind",)]
    n = len(trace.events)
    # indexes out of their positions (a hand-built trace): the scan itself answers
    renumbered = dataclasses.replace(trace, events=tuple(
        dataclasses.replace(e, index=e.index * 2) for e in trace.events))
    for t in (trace, renumbered):
        for lo, hi in itertools.product(range(-2, 2 * n + 2), repeat=2):
            for kinds in kind_sets:
                assert facts.events_between(t, lo, hi, *kinds) == scan(t, lo, hi, *kinds)


def test_the_next_model_request_is_one_that_started_after_the_event():
    """Found by generation: an instance held at after_model_request_started sends its request,
    composed before, after everything the other instance did; it is not 'the next request'."""
    from harness.criteria import facts as F
    from tracebuilder import TraceBuilder, session

    b = TraceBuilder(session("s1"))
    b.failpoint("after_model_request_started", context={"session_id": "s1", "request_id": "old"})
    event = b.failpoint("after_projection", context={"session_id": "s1"})
    b.model_request("s1", request_id="old")
    stale = b.last
    b.model_request("s1", request_id="new")
    fresh = b.last
    trace = b.build()
    assert F.next_model_request(trace, "s1", event).index == fresh
    assert F.next_model_request(trace, "s1", -1).index == stale  # before it started
