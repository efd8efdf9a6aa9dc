"""SimWorld composes the parts: one ordered log, failpoints consult the fault plan, probes
follow the events they name, dead instances are silenced, placeholders follow the seed."""

import random

import pytest

from harness import contract as c
from harness.faults.plan import make_fault
from harness.trace.record import Kind, Source
from harness.world import SimWorld
from harness.world.clock import EPOCH
from harness.world.model import ScriptedResponse

SESSION = c.SessionConfig("s1", tools=(c.ToolSpec("write_file", c.ToolKind.WRITE),),
                          thresholds=c.Thresholds(classifier_timeout_s=7.0))


class Hooks:
    def __init__(self, hold=False):
        self.calls: list = []
        self.hold_wanted = hold

    def probe(self, instance, label):
        self.calls.append(("probe", instance, label))

    def change_rules(self, instance, session_id, rules, version, failpoint):
        self.calls.append(("change_rules", instance, session_id, rules, version, failpoint))

    def cancel(self, instance, session_id, failpoint):
        self.calls.append(("cancel", instance, session_id, failpoint))

    def hold_requested(self, instance, failpoint, planned):
        return self.hold_wanted

    def hold(self, instance, failpoint):
        self.calls.append(("hold", instance, failpoint))


def world(faults=(), hooks=None, seed=1, **kwargs):
    return SimWorld(rng=random.Random(seed), sessions=(SESSION,), faults=faults, hooks=hooks, **kwargs)


def test_the_world_is_a_contract_world_and_ports_tag_instances():
    w = world()
    assert isinstance(w, c.World) and isinstance(w.port(2), c.World)
    w.port(2).emit(c.LifecycleEvent(c.EventType.TURN_ENDED, "s1", data={"status": "completed"}))
    w.emit(c.LifecycleEvent(c.EventType.RECOVERED, "s1"))
    first, second = w.log.events()
    assert (first.instance, first.source, first.kind) == (2, Source.IUT, Kind.LIFECYCLE_EVENT)
    assert first.data["event"]["data"] == {"status": "completed"} and second.instance == 0
    assert w.now() == EPOCH


def test_failpoints_count_hits_record_probe_then_act():
    hooks = Hooks()
    w = world([make_fault("after_result_saved", "2", "crash"),
               make_fault("after_prepare", "1", "raise", {"message": "boom"}),
               make_fault("before_model_request", "1", "delay", {"seconds": 4}),
               make_fault("after_revalidation", "1", "change_rules",
                          {"session": "s1", "permission_version": 2,
                           "rules": [{"effect": "deny", "tool": "write_file"}]}),
               make_fault("after_prompt", "1", "cancel", {"session": "s1"})], hooks)
    port = w.port(0)
    port.failpoint(c.Failpoint.AFTER_RESULT_SAVED, {"tool_call_id": "c1"})
    with pytest.raises(c.InjectedFault, match="boom"):
        port.failpoint(c.Failpoint.AFTER_PREPARE, {})
    port.failpoint(c.Failpoint.BEFORE_MODEL_REQUEST, {})
    assert w.now() == EPOCH + 4
    port.failpoint(c.Failpoint.AFTER_REVALIDATION, {})
    port.failpoint(c.Failpoint.AFTER_PROMPT, {})
    with pytest.raises(c.SimulatedCrash):
        port.failpoint(c.Failpoint.AFTER_RESULT_SAVED, {"tool_call_id": "c1"})
    events = w.log.events()
    assert [(e.data["name"], e.data["hit"], e.data["action"]) for e in events] == [
        ("after_result_saved", 1, "none"), ("after_prepare", 1, "raise"),
        ("before_model_request", 1, "delay"), ("after_revalidation", 1, "change_rules"),
        ("after_prompt", 1, "cancel"), ("after_result_saved", 2, "crash")]
    assert events[0].data["context"] == {"tool_call_id": "c1"} and events[0].data["params"] == {}
    assert events[5].data["fault_index"] == 0 and events[1].data["params"] == {"message": "boom"}
    probes = [call for call in hooks.calls if call[0] == "probe"]
    assert [p[2] for p in probes] == [f"probe:failpoint:{e.data['name']}" for e in events]
    assert ("change_rules", 0, "s1", (c.Rule(c.RuleEffect.DENY, "write_file"),), 2,
            "after_revalidation") in hooks.calls
    assert ("cancel", 0, "s1", "after_prompt") in hooks.calls
    assert w.failpoints_reached() == ("after_prepare", "after_prompt", "after_result_saved",
                                      "after_revalidation", "before_model_request")
    point, crash = w.take_crash(0)
    assert point == "after_result_saved" and isinstance(crash, c.SimulatedCrash)
    assert w.take_crash(0) is None
    assert [type(e) for e in w.take_raised(0)] == [c.InjectedFault] and w.take_raised(0) == []


@pytest.mark.parametrize("name", ["after_lunch", "<b>after_prepare</b>", "AFTER_PREPARE"])
def test_a_failpoint_outside_the_catalogue_is_refused_not_reached(name):
    w = world([make_fault("after_prepare", "1", "crash")])
    with pytest.raises(c.ContractError, match="not in the failpoint catalogue"):
        w.port(0).failpoint(name, {"session_id": "s1"})
    assert w.failpoints_reached() == () and len(w.log) == 0
    (problem,) = w.take_foreign_calls()
    assert repr(name) in problem and "protocol error" in problem


def test_a_crashed_instance_can_no_longer_act_or_leave_records():
    w = world([make_fault("after_prepare", "1", "crash")])
    dead, alive = w.port(0), w.port(1)
    with pytest.raises(c.SimulatedCrash):
        dead.failpoint(c.Failpoint.AFTER_PREPARE, {})
    before = len(w.log)
    for action in (lambda: dead.now(), lambda: dead.failpoint(c.Failpoint.AFTER_PROMPT, {}),
                   lambda: dead.publish(c.Projection("s1", "e", "c", c.Permission.ALLOW,
                                                     c.Outcome.SUCCEEDED, "succeeded", "", ()))):
        with pytest.raises(c.SimulatedCrash, match="instance 0 is dead"):
            action()
    assert len(w.log) == before
    alive.failpoint(c.Failpoint.AFTER_PREPARE, {})  # hit 2: no fault, another instance
    assert w.log.events()[-1].instance == 1 and w.hits("after_prepare") == 2


def test_hold_asks_the_runner_and_a_planned_hold_without_a_turn_is_skipped():
    hooks = Hooks(hold=True)
    w = world(hooks=hooks)
    w.failpoint(c.Failpoint.AFTER_PREPARE, {})
    assert w.log.events()[-1].data["action"] == "hold" and ("hold", 0, "after_prepare") in hooks.calls
    quiet = world([make_fault("after_prepare", "1", "hold")], Hooks(hold=False))
    quiet.failpoint(c.Failpoint.AFTER_PREPARE, {})
    data = quiet.log.events()[-1].data
    assert data["action"] == "none" and data["params"]["planned"] == "hold"


def test_ports_record_and_probe_tool_prompt_and_publication():
    hooks = Hooks()
    w = world(hooks=hooks, model=[ScriptedResponse("s1", "hi")])
    port = w.port(0)
    identity = c.OperationIdentity("ex-1", "c1", c.args_digest("write_file", {"path": "/x"}), 1)
    port.execute_tool(c.ToolInvocation(identity, "s1", "write_file", {"path": "/x", "content": "y"}))
    port.prompt_approval(c.ApprovalPrompt("w1", "s1", "ex-1", "c1", "write_file", {}, "ask"))
    port.publish(c.Projection("s1", "ex-1", "c1", c.Permission.ALLOW, c.Outcome.SUCCEEDED,
                              "succeeded", "", ()))
    verdict = port.review(c.ClassifierRequest("s1", "write_file", "{}", "/repo", "w", ""))
    stream = port.open_model_stream(c.ModelRequest("r1", "s1", (), ()))
    assert stream.next_chunk().text == "hi" and verdict.outcome is c.ClassifierOutcome.ALLOW
    assert [e.kind for e in w.log.events()] == [Kind.TOOL_EXECUTED, Kind.APPROVAL_PROMPT,
                                                Kind.UI_PUBLISH, Kind.CLASSIFIER_REQUEST,
                                                Kind.MODEL_REQUEST]
    assert [call[2] for call in hooks.calls] == ["probe:tool_executed", "probe:approval_prompt",
                                                 "probe:ui_publish"]
    assert w.tools.read_file("/x") == "y" and len(w.ledger()) == 1


def test_placeholders_expand_from_the_seed_in_a_fixed_order():
    model = [ScriptedResponse("s1", "hi {{faker:name}}", (c.ToolCall(
        "c1", "write_file", {"path": "/repo/x", "content": "{{sha256:/repo/a}} {{faker:email}}"}),))]
    files = {"/repo/a": "{{faker:word}}"}
    one, same, other = (world(seed=s, model=model, files=files) for s in (3, 3, 4))
    assert one.tools.files() == same.tools.files() != other.tools.files()
    assert one.model.next_response("s1") == same.model.next_response("s1")
    response = one.model.next_response("s1")  # default answer now
    assert response[0] == -1
    text = same.model._script[0].tool_calls[0].args["content"]
    assert text.startswith("sha256:") and "{{" not in text and "@" in text


def test_a_model_request_checks_only_messages_it_has_not_seen_and_names_a_bad_one(monkeypatch):
    import harness.world.world as world_module

    walked: list = []
    check = world_module.value_problem

    def counting(kind, value, what):
        if kind is c.ModelRequest and isinstance(value, c.ModelRequest):
            walked.append(tuple(value.messages))
        return check(kind, value, what)

    monkeypatch.setattr(world_module, "value_problem", counting)
    w = world()
    port = w.port(0)
    hello, answer = c.Message("user", "hello"), c.Message("assistant", "hi")
    port.open_model_stream(c.ModelRequest("r1", "s1", (hello,), ()))
    port.open_model_stream(c.ModelRequest("r2", "s1", (hello, answer), ()))
    assert walked == [(hello,), (answer,)]  # hello, the same object, is not walked again
    # An equal but new message object is checked; one off the contract is named in full,
    # at its place in the whole request, although the messages before it were seen.
    bad = c.Message("user", 7)  # type: ignore[arg-type]
    with pytest.raises(c.ContractError, match=r"messages\[2\]\.content is int"):
        port.open_model_stream(c.ModelRequest("r3", "s1", (hello, answer, bad), ()))
    with pytest.raises(c.ContractError, match="open_model_stream was called with"):
        port.open_model_stream("not a request")  # type: ignore[arg-type]
