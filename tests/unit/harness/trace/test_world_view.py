"""The world's view of a trace and the first divergence of two views, on hand-built trace
pairs: neighbours that must not diverge (an allowed choice made differently) beside
neighbours that must (a behaviour that differs)."""

from __future__ import annotations

import copy
import json

from harness.contract import Thresholds
from harness.trace.record import Kind, Source, Trace, TraceEvent, TraceMeta
from harness.trace.world_view import (
    WORDING, first_world_divergence, world_view,
)

EX1 = "ex-05c38dd61ce453f9"
EX2 = "ex-0fb3c675b1318478"


def trace(*items: tuple[str, str, dict] | tuple[str, str, dict, int]) -> Trace:
    """A trace of (source, kind, data[, instance]) events, indexed in order."""
    events = tuple(TraceEvent(at, item[0], item[1], item[3] if len(item) > 3 else 0, item[2])
                   for at, item in enumerate(items))
    meta = TraceMeta(scenario_id="t", stage="unit", seed=0, implementation="x", features=(),
                     thresholds=Thresholds(), sessions=(), tools=(), faults=())
    return Trace(meta, events, ())


def user(text: str) -> dict:
    return {"role": "user", "content": text, "tool_call_id": "", "tool_calls": [],
            "outcome": None, "failure_kind": None, "incomplete": False}


def tool_message(call: str, content: str, outcome: str = "succeeded") -> dict:
    return {"role": "tool", "content": content, "tool_call_id": call, "tool_calls": [],
            "outcome": outcome, "failure_kind": None, "incomplete": False}


def request(request_id: str, messages: list, tools: list, instance: int = 0) -> tuple:
    return (Source.WORLD, Kind.MODEL_REQUEST,
            {"request_id": request_id, "session_id": "s1", "messages": messages, "tools": tools,
             "script_index": 0, "instance": instance}, instance)


def stream_end(request_id: str, calls: list[str] = ()) -> tuple:
    return (Source.WORLD, Kind.MODEL_STREAM_END,
            {"request_id": request_id, "how": "end", "text": "", "tool_call_ids": list(calls),
             "tool_calls": [{"tool_call_id": c, "tool": "write_file", "args": {"path": c}}
                            for c in calls]})


def ledger(call: str, execution_id: str = EX1, seq: int = 1, invocation: int = 1,
           instance: int = 0) -> tuple:
    return (Source.WORLD, Kind.TOOL_EXECUTED,
            {"ledger_seq": seq, "session_id": "s1", "tool_call_id": call,
             "execution_id": execution_id, "tool": "write_file", "args": {"path": call},
             "status": "ok", "effect": "applied", "invocation": invocation}, instance)


def prompt(wait_id: str, reason: str = "ask rule write_file:'*' requires the owner's approval",
           execution_id: str = EX1) -> tuple:
    return (Source.WORLD, Kind.APPROVAL_PROMPT,
            {"wait_id": wait_id, "session_id": "s1", "execution_id": execution_id,
             "tool_call_id": "c1", "tool": "write_file", "args": {"path": "c1"},
             "reason": reason})


def publish(status: str = "denied", reason: str = "deny rule matches",
            actions: list[str] = ("change_rules",), execution_id: str = EX1) -> tuple:
    return (Source.WORLD, Kind.UI_PUBLISH,
            {"projection": {"session_id": "s1", "execution_id": execution_id,
                            "tool_call_id": "c1", "permission": "deny", "outcome": "not_started",
                            "status": status, "reason": reason,
                            "recovery_actions": list(actions)}})


def classifier(raw: str, outcome: str = "allow") -> tuple:
    return (Source.WORLD, Kind.CLASSIFIER_REQUEST,
            {"request": {"session_id": "s1", "tool": "Bash", "operation": raw},
             "raw": raw, "outcome": outcome, "reason": "scripted", "delay_s": 0.0, "review": 1})


def failpoint(action: str = "none", name: str = "after_result_saved", context: dict = None
              ) -> tuple:
    return (Source.WORLD, Kind.FAILPOINT,
            {"name": name, "hit": 1, "action": action, "params": {},
             "context": context or {"session_id": "s1"}})


def noise(kind: str = Kind.LIFECYCLE_EVENT, source: str = Source.IUT, **data: object) -> tuple:
    return (source, kind, dict(data) or {"event": {"type": "turn_started"}})


def diverge(a: Trace, b: Trace, **options: bool):
    return first_world_divergence(world_view(a, **options), world_view(b, **options))


# --------------------------------------------------------------------------- the view


def test_the_view_keeps_the_worlds_observations_in_order_and_drops_the_rest():
    run = trace(
        noise(Kind.DRIVER_CALL, Source.HARNESS, method="run_turn"),
        request("s1:req-1", [user("go")], ["write_file"]),
        noise(),
        stream_end("s1:req-1", ["c1"]),
        failpoint("none"),
        ledger("c1"),
        failpoint("crash", context={"execution_id": EX1, "stage": "mine"}),
        noise(Kind.CRASH, Source.HARNESS, failpoint="after_result_saved"),
        publish("succeeded", "", []),
    )
    view = world_view(run)
    assert [e.kind for e in view] == [Kind.MODEL_REQUEST, Kind.MODEL_STREAM_END,
                                      Kind.TOOL_EXECUTED, Kind.FAILPOINT, Kind.UI_PUBLISH]
    assert [e.position for e in view] == [0, 1, 2, 3, 4]
    assert [e.trace_index for e in view] == [1, 3, 5, 6, 8]
    # a fired fault keeps what the plan says, not the implementation's context
    assert view[3].data == {"name": "after_result_saved", "hit": 1, "action": "crash",
                            "params": {}}
    # the event's instance is not repeated in a model request's data
    assert "instance" not in view[0].data
    line = view[0].line(width=None)
    assert line.split()[:3] == ["0", "world", "model_request"]
    assert json.loads(line[line.index("{"):])["request_id"] == "request#1"


def test_the_view_is_pure_and_leaves_the_trace_alone():
    run = trace(request("r-9", [user("go"), tool_message("c1", "done")], ["b", "a"]),
                prompt("w-7"), publish(actions=["reject", "approve"]))
    before = copy.deepcopy([e.data for e in run.events])
    assert world_view(run) == world_view(run)
    assert [e.data for e in run.events] == before


def test_a_trace_with_no_world_event_has_an_empty_view_and_equal_empty_views_agree():
    empty = trace(noise(), noise(Kind.DRIVER_CALL, Source.HARNESS, method="open"))
    assert world_view(empty) == ()
    assert diverge(empty, empty) is None


# --------------------------------------------------------------------------- must not diverge


def test_differently_minted_wait_ids_are_the_same():
    a = trace(prompt("wait-ex-05c38dd61ce453f9"), prompt("wait-ex-0fb3c675b1318478",
                                                         execution_id=EX2))
    b = trace(prompt("w/1"), prompt("w/2", execution_id=EX2))
    assert diverge(a, b) is None
    assert [e.data["wait_id"] for e in world_view(b)] == ["wait#1", "wait#2"]


def test_differently_minted_request_ids_are_the_same():
    a = trace(request("s1:req-1", [user("go")], ["write_file"]), stream_end("s1:req-1", ["c1"]),
              request("s1:req-2", [user("go")], ["write_file"]), stream_end("s1:req-2"))
    b = trace(request("7f3a", [user("go")], ["write_file"]), stream_end("7f3a", ["c1"]),
              request("91bc", [user("go")], ["write_file"]), stream_end("91bc"))
    assert diverge(a, b) is None


def test_wording_of_reasons_and_tool_messages_is_the_same_unless_exact_text():
    a = trace(prompt("w1", reason="ask rule write_file:'*' requires the owner's approval"),
              publish(reason="deny rule write_file:'/etc/*' matches; change the rules"),
              request("r1", [user("go"), tool_message("c1", "not executed: deny rule")], []))
    b = trace(prompt("w1", reason="no rule covers write_file; asking the owner"),
              publish(reason="deny rule write_file matches"),
              request("r1", [user("go"), tool_message("c1", "refused by rule")], []))
    assert diverge(a, b) is None
    assert world_view(a)[1].data["projection"]["reason"] == WORDING
    exact = diverge(a, b, exact_text=True)
    assert exact is not None and exact.position == 0
    assert [f.path for f in exact.fields] == ["reason"]


def test_sets_in_any_order_and_extra_implementation_events_are_the_same():
    a = trace(request("r1", [user("go")], ["read_file", "write_file"]),
              publish(actions=["approve", "reject"]))
    b = trace(noise(), request("r1", [user("go")], ["write_file", "read_file"]), noise(),
              failpoint("none"), failpoint("none", "after_projection"),
              publish(actions=["reject", "approve"]))
    assert diverge(a, b) is None


# --------------------------------------------------------------------------- must diverge


def test_a_request_id_used_twice_differs_from_fresh_ones():
    fresh = trace(request("r1", [user("go")], []), stream_end("r1"),
                  request("r2", [user("go")], []), stream_end("r2"))
    reused = trace(request("r1", [user("go")], []), stream_end("r1"),
                   request("r1", [user("go")], []), stream_end("r1"))
    divergence = diverge(fresh, reused)
    assert divergence is not None and divergence.position == 2
    assert [(f.path, f.a, f.b) for f in divergence.fields] == [
        ("request_id", '"request#2"', '"request#1"')]


def test_a_wait_shown_again_under_its_old_id_differs_from_a_new_wait():
    new = trace(prompt("w1"), prompt("w2"))
    again = trace(prompt("w1"), prompt("w1"))
    divergence = diverge(new, again)
    assert divergence is not None and divergence.position == 1
    assert [f.path for f in divergence.fields] == ["wait_id"]


def test_an_execution_id_is_compared_as_the_contract_fixes_it():
    a = trace(ledger("c1", EX1))
    b = trace(ledger("c1", "ex-0000000000000000"))
    divergence = diverge(a, b)
    assert divergence is not None
    assert [f.path for f in divergence.fields] == ["execution_id"]


def test_a_second_ledger_row_for_the_same_call_is_named():
    once = trace(request("r1", [user("go")], []), stream_end("r1", ["c1"]), ledger("c1"),
                 failpoint("crash"), publish("succeeded", "", [], EX1))
    twice = trace(request("r1", [user("go")], []), stream_end("r1", ["c1"]), ledger("c1"),
                  failpoint("crash"), ledger("c1", seq=2, invocation=2, instance=1),
                  publish("succeeded", "", [], EX1))
    divergence = diverge(once, twice)
    assert divergence is not None and divergence.position == 4
    assert divergence.a.kind == Kind.UI_PUBLISH and divergence.b.kind == Kind.TOOL_EXECUTED
    assert divergence.b.data["tool_call_id"] == "c1" and divergence.b.data["invocation"] == 2
    assert [(f.path, f.a, f.b) for f in divergence.fields] == [
        ("kind", '"ui_publish"', '"tool_executed"')]
    assert [e.kind for e in divergence.before] == [Kind.MODEL_STREAM_END, Kind.TOOL_EXECUTED,
                                                   Kind.FAILPOINT]
    assert [e.kind for e in divergence.after_a] == []
    assert [e.kind for e in divergence.after_b] == [Kind.UI_PUBLISH]


def test_one_side_ending_early_is_said_with_no_event_on_that_side():
    longer = trace(request("r1", [user("go")], []), stream_end("r1", ["c1"]), ledger("c1"))
    shorter = trace(request("r1", [user("go")], []), stream_end("r1", ["c1"]))
    divergence = diverge(shorter, longer)
    assert divergence is not None and divergence.position == 2
    assert divergence.a is None and divergence.b.kind == Kind.TOOL_EXECUTED
    assert divergence.fields == ()
    assert diverge(longer, shorter).b is None


def test_truncated_classifier_bytes_are_shown_where_they_differ():
    full = '{"command":"' + "echo step-ok; " * 80 + 'rm -rf /"}'
    cut = full[:800]
    divergence = diverge(trace(classifier(full, "risk_deny")), trace(classifier(cut)))
    assert divergence is not None and divergence.position == 0
    paths = {f.path: f for f in divergence.fields}
    assert set(paths) == {"outcome", "raw", "request.operation"}
    shown = paths["raw"]
    assert f"({len(full)} characters, from character 760)" in shown.a
    assert f"({len(cut)} characters, from character 760)" in shown.b
    assert shown.a.startswith("…") and "rm -rf" not in shown.b


def test_a_projection_status_and_its_actions_differ_whatever_the_wording():
    denied = trace(publish("denied", "the rule says no", ["change_rules"]))
    cancelled = trace(publish("cancelled", "cancelled by the owner", []))
    divergence = diverge(denied, cancelled)
    assert divergence is not None
    assert [(f.path, f.a, f.b) for f in divergence.fields] == [
        ("projection.recovery_actions[0:]", '["change_rules"]', "[]"),
        ("projection.status", '"denied"', '"cancelled"')]


def test_a_different_tool_message_outcome_differs_though_wording_is_normalised():
    a = trace(request("r1", [user("go"), tool_message("c1", "done", "succeeded")], []))
    b = trace(request("r1", [user("go"), tool_message("c1", "done", "unknown")], []))
    divergence = diverge(a, b)
    assert divergence is not None
    assert [f.path for f in divergence.fields] == ["messages[1].outcome"]


def test_a_different_instance_differs():
    a = trace(ledger("c1", instance=0))
    b = trace(ledger("c1", instance=1))
    divergence = diverge(a, b)
    assert divergence is not None
    assert [f.path for f in divergence.fields] == ["instance"]
    # each side's line is the trace's rendering, numbered by the position in the view
    line = divergence.b.line(width=None)
    assert line.split()[:4] == ["0", "world", "tool_executed", "i1"]
    assert json.loads(line[line.index("{"):])["tool_call_id"] == "c1"


def test_context_is_at_most_three_events_each_way():
    common = [request(f"r{n}", [user(str(n))], []) for n in range(6)]
    a = trace(*common, ledger("c1"), *[stream_end(f"x{n}") for n in range(5)])
    b = trace(*common, ledger("c2"), *[stream_end(f"x{n}") for n in range(5)])
    divergence = diverge(a, b)
    assert divergence is not None and divergence.position == 6
    assert [e.position for e in divergence.before] == [3, 4, 5]
    assert [e.position for e in divergence.after_a] == [7, 8, 9]
    assert [e.position for e in divergence.after_b] == [7, 8, 9]
