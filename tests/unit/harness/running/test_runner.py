"""The runner drives an implementation through steps, crashes, hangs and handoffs, and the
trace it records is deterministic. A tiny JSON-file implementation stands in for an IUT."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from harness import contract as c
from harness.running.runner import ScenarioRun, run_scenario
from harness.scenarios.loader import load, loads
from harness.trace.record import Kind, trace_digest

DATA = Path(__file__).parent / "data"


# --------------------------------------------------------------------------- a fake IUT


class FakeRuntime:
    """Asks the model, runs tool calls through the world, keeps state in store.json."""

    def __init__(self, impl: FakeImpl, data_dir: str, world: c.World) -> None:
        self.impl, self.world = impl, world
        self.path = os.path.join(data_dir, "store.json")

    def _load(self) -> dict:
        if not os.path.exists(self.path):
            return {"sessions": {}, "ops": {}, "requests": 0}
        with open(self.path) as handle:
            return json.load(handle)

    def _save(self, state: dict) -> None:
        with open(self.path + ".tmp", "w") as handle:
            json.dump(state, handle)
        os.replace(self.path + ".tmp", self.path)

    def open_session(self, config: c.SessionConfig) -> None:
        state = self._load()
        state["sessions"].setdefault(config.session_id, {"version": config.permission_version})
        self._save(state)

    def run_turn(self, session_id: str, user_text: str) -> c.TurnResult:
        if self.impl.block is not None:
            self.impl.block.wait()  # a hang: nobody ever sets it
        if self.impl.boom:
            raise RuntimeError("boom from the implementation")
        if self.impl.leak_path:
            self.world.emit(c.LifecycleEvent(c.EventType.RUNTIME_FAULT, session_id,
                                             data={"where": self.path}))
        messages = [c.Message("user", user_text)]
        for _ in range(5):
            state = self._load()
            state["requests"] += 1
            self._save(state)
            request_id = f"r{state['requests']}"
            self.world.failpoint(c.Failpoint.BEFORE_MODEL_REQUEST, {"session_id": session_id})
            stream = self.world.open_model_stream(
                c.ModelRequest(request_id, session_id, tuple(messages), ("write_file",)))
            text, calls = "", []
            while True:
                chunk = stream.next_chunk()
                if chunk.kind is c.ChunkKind.TEXT:
                    text += chunk.text
                elif chunk.kind is c.ChunkKind.TOOL_CALL:
                    calls.append(chunk.tool_call)
                else:
                    break
            if not calls:
                return c.TurnResult(session_id, c.TurnStatus.COMPLETED, text)
            messages.append(c.Message("assistant", text, tool_calls=tuple(calls)))
            for call in calls:
                messages.append(c.Message("tool", self._operate(session_id, call),
                                          tool_call_id=call.tool_call_id))
        return c.TurnResult(session_id, c.TurnStatus.INCOMPLETE)

    def _operate(self, session_id: str, call: c.ToolCall) -> str:
        execution_id = c.execution_id_for(session_id, call.tool_call_id)
        identity = c.OperationIdentity(execution_id, call.tool_call_id,
                                       c.args_digest(call.tool, call.args), 1)
        context = {"session_id": session_id, "tool_call_id": call.tool_call_id}
        state = self._load()
        if execution_id in state["ops"]:
            return state["ops"][execution_id].get("output", "")
        state["ops"][execution_id] = {"session": session_id, "call": call.tool_call_id,
                                      "tool": call.tool, "args": call.args, "started": False}
        self._save(state)
        self.world.failpoint(c.Failpoint.AFTER_PREPARE, context)
        state = self._load()
        state["ops"][execution_id]["started"] = True
        self._save(state)
        self.world.failpoint(c.Failpoint.AFTER_START_RECORDED, context)
        result = self.world.execute_tool(c.ToolInvocation(identity, session_id, call.tool, call.args))
        state = self._load()
        state["ops"][execution_id]["output"] = result.output
        state["ops"][execution_id]["status"] = result.status.value
        self._save(state)
        self.world.failpoint(c.Failpoint.AFTER_RESULT_SAVED, context)
        if self.impl.swallow:
            try:
                self.world.failpoint(c.Failpoint.AFTER_PROJECTION, context)
            except BaseException:
                pass
        return result.output

    def answer_approval(self, wait_id: str, approve: bool) -> c.TurnResult:
        return c.TurnResult("s1", c.TurnStatus.COMPLETED)

    def update_rules(self, session_id, rules, permission_version) -> None:
        state = self._load()
        state["sessions"][session_id]["version"] = permission_version
        self._save(state)

    def cancel(self, session_id: str) -> None:
        pass

    def recover(self) -> c.RecoveryReport:
        state = self._load()
        unknown = [ex for ex, op in state["ops"].items() if op["started"] and "status" not in op]
        for ex in unknown:
            state["ops"][ex]["status"] = "unknown"
        self._save(state)
        return c.RecoveryReport(reconciliation_required=tuple(unknown))

    def load_checkpoint(self, session_id: str, data: bytes) -> None:
        pass

    def close(self) -> None:
        pass


class FakeImpl:
    info = c.ImplementationInfo("fake", "0.1", features=(c.Feature.MULTI_INSTANCE,))

    def __init__(self, **flags) -> None:
        self.block: threading.Event | None = flags.get("block")
        self.boom = flags.get("boom", False)
        self.swallow = flags.get("swallow", False)
        self.leak_path = flags.get("leak_path", False)

    def open(self, data_dir: str, world: c.World) -> FakeRuntime:
        return FakeRuntime(self, data_dir, world)

    def inspect(self, data_dir: str) -> c.Observation:
        path = os.path.join(data_dir, "store.json")
        if not os.path.exists(path):
            return c.Observation()
        with open(path) as handle:
            state = json.load(handle)
        sessions = tuple(
            c.SessionView(sid, c.TurnStatus.IDLE, s["version"], c.Mode.DEFAULT, True)
            for sid, s in sorted(state["sessions"].items()))
        ops = []
        for ex, op in sorted(state["ops"].items()):
            status = op.get("status")
            outcome = {None: c.Outcome.NOT_STARTED, "ok": c.Outcome.SUCCEEDED,
                       "error": c.Outcome.FAILED, "unknown": c.Outcome.UNKNOWN}[status]
            ops.append(c.OperationView(
                op["session"], c.OperationIdentity(ex, op["call"], c.args_digest(op["tool"], op["args"]), 1),
                op["tool"], op["args"], "", c.Permission.ALLOW, c.DecisionSource.EXACT_GRANT,
                outcome, c.Delivery.RECORDED if status else c.Delivery.PENDING, op["started"],
                None, "", (), status == "unknown", None, None, 1 if op["started"] else 0))
        return c.Observation(sessions=sessions, operations=tuple(ops))


def run(impl, name_or_text: str, seed: int = 7, **kwargs) -> ScenarioRun:
    scenario = load(DATA / name_or_text) if name_or_text.endswith(".toml") else loads(name_or_text)
    return run_scenario(impl, scenario, seed, **kwargs)


def kinds(run_: ScenarioRun, *wanted: str) -> list:
    return [e for e in run_.trace.events if e.kind in wanted]


# --------------------------------------------------------------------------- tests


def test_a_plain_turn_records_calls_ledger_and_observations():
    result = run(FakeImpl(), "runner_basic.toml")
    trace = result.trace
    assert result.error == "" and trace.completed
    methods = [e.data["method"] for e in kinds(result, Kind.DRIVER_CALL)]
    assert methods == ["open", "open_session", "run_turn"]
    assert kinds(result, Kind.DRIVER_RETURN)[-1].data["result"]["status"] == "completed"
    (row,) = trace.ledger()
    assert row.data["ledger_seq"] == 1 and row.data["args"]["path"] == "/repo/a.txt"
    labels = [p.label for p in trace.observations]
    assert labels[-2:] == ["quiescent", "final"]
    assert "probe:tool_executed" in labels and "probe:failpoint:after_result_saved" in labels
    probe = next(p for p in trace.observations if p.label == "probe:tool_executed")
    assert trace.events[probe.index].kind == Kind.TOOL_EXECUTED
    assert probe.observation.operations[0].execution_started
    assert result.failpoints_reached == ("after_prepare", "after_result_saved",
                                         "after_start_recorded", "before_model_request")
    assert trace.meta.features == (c.Feature.MULTI_INSTANCE,)
    assert trace.meta.implementation == "fake"
    assert [r.data["script_index"] for r in kinds(result, Kind.MODEL_REQUEST)] == [0, -1]
    assert result.duration_s >= 0


def test_crash_drops_the_instance_restarts_and_recovers():
    result = run(FakeImpl(), "runner_crash.toml")
    trace = result.trace
    assert result.error == "" and trace.completed
    (crash,) = trace.crashes()
    assert crash.data == {"failpoint": "after_start_recorded", "mode": "in_process"}
    assert crash.instance == 0
    (restart,) = kinds(result, Kind.RESTART)
    assert restart.data == {"instance": 1} and restart.index > crash.index
    firing = [e for e in kinds(result, Kind.FAILPOINT) if e.data["action"] == "crash"]
    assert firing[0].data["hit"] == 1 and firing[0].index < crash.index
    after = trace.observations_labelled("after_restart")[0]
    op = after.observation.operations[0]
    assert op.outcome is c.Outcome.UNKNOWN and op.reconciliation_required
    recover = [e for e in kinds(result, Kind.DRIVER_RETURN) if e.data["method"] == "recover"]
    assert recover[0].data["result"]["reconciliation_required"] == [op.identity.execution_id]
    # The dead instance left no ledger row: the crash came before the tool ran.
    assert trace.ledger() == ()
    # The next step ran on the new instance.
    last_turn = [e for e in kinds(result, Kind.DRIVER_CALL) if e.data["method"] == "run_turn"][-1]
    assert last_turn.instance == 1


def test_a_hang_is_reported_not_raised():
    never = threading.Event()
    result = run(FakeImpl(block=never), "runner_basic.toml", time_limit_s=0.2)
    assert not result.trace.completed
    assert "hang" in result.error and "run_turn" in result.error
    (hang,) = kinds(result, Kind.HANG)
    assert hang.data == {"method": "run_turn", "limit_s": 0.2}
    assert result.trace.observations == ()  # nothing read after a hang


def test_an_unexpected_exception_is_reported():
    result = run(FakeImpl(boom=True), "runner_basic.toml")
    assert not result.trace.completed and "RuntimeError: boom" in result.error
    (raised,) = kinds(result, Kind.DRIVER_RAISED)
    assert raised.data["expected"] is False and raised.data["exception"] == "RuntimeError"
    assert result.trace.observations[-1].label == "final"


def test_a_transport_error_propagating_is_expected():
    result = run(FakeImpl(), """
id = "t" 
stage = "m"
[[sessions]]
id = "s1"
[[model]]
text = "partial"
end = "transport_error"
[[steps]]
do = "turn"
text = "hi"
""")
    assert result.error == "" and result.trace.completed
    (raised,) = kinds(result, Kind.DRIVER_RAISED)
    assert raised.data["exception"] == "ModelTransportError" and raised.data["expected"] is True
    (end,) = kinds(result, Kind.MODEL_STREAM_END)
    assert end.data["how"] == "transport_error" and end.data["text"] == "partial"


def test_concurrent_turn_holds_a_while_b_runs_to_quiescence():
    result = run(FakeImpl(), "runner_concurrent.toml")
    trace = result.trace
    assert result.error == "", result.error
    hold = next(e for e in kinds(result, Kind.FAILPOINT) if e.data["action"] == "hold")
    assert hold.instance == 0 and hold.data["name"] == "after_prepare"
    calls = [e for e in kinds(result, Kind.DRIVER_CALL) if e.data["method"] == "concurrent_turn"]
    assert [(e.instance, e.data["args"]["role"]) for e in calls] == [(0, "A"), (1, "B")]
    returns = [e for e in kinds(result, Kind.DRIVER_RETURN) if e.data["method"] == "concurrent_turn"]
    assert [e.instance for e in returns] == [1, 0]  # B finished before A was released
    b_events = [e for e in trace.events if e.instance == 1 and e.source != "harness"]
    assert b_events and all(hold.index < e.index < returns[1].index for e in b_events)
    # B found A's prepared record and did not execute; A executed once after release.
    assert [row.instance for row in trace.ledger()] == [0]
    assert [e.data["method"] for e in kinds(result, Kind.DRIVER_CALL) if e.instance == 1] == [
        "open", "concurrent_turn", "close"]


def test_change_rules_and_delay_faults_act_through_the_runner():
    result = run(FakeImpl(), """
id = "t"
stage = "l2"
[[sessions]]
id = "s1"
[[tools]]
name = "write_file"
kind = "write"
[[model]]
tool_calls = [{ id = "c1", tool = "write_file", args = { path = "/repo/x", content = "x" } }]
[[faults]]
failpoint = "after_prepare"
action = "change_rules"
permission_version = 2
rules = [{ effect = "deny", tool = "write_file" }]
[[faults]]
failpoint = "before_model_request"
hits = "2"
action = "delay"
seconds = 5
[[steps]]
do = "turn"
""")
    assert result.error == ""
    reentrant = next(e for e in kinds(result, Kind.DRIVER_CALL) if e.data["method"] == "update_rules")
    assert reentrant.data["via_failpoint"] == "after_prepare"
    assert reentrant.data["args"] == {"session_id": "s1", "permission_version": 2,
                                      "rules": [{"effect": "deny", "tool": "write_file",
                                                 "pattern": "*", "field": ""}]}
    assert result.trace.final_observation().sessions[0].permission_version == 2
    delay = [e for e in kinds(result, Kind.FAILPOINT) if e.data["action"] == "delay"]
    assert delay[0].data["params"] == {"seconds": 5.0} and delay[0].data["hit"] == 2


def test_an_answer_with_no_prompt_is_recorded_as_skipped():
    result = run(FakeImpl(), """
id = "t"
stage = "l3"
[[sessions]]
id = "s1"
[[steps]]
do = "answer"
""")
    assert result.error == ""
    call, ret = kinds(result, Kind.DRIVER_CALL)[-1], kinds(result, Kind.DRIVER_RETURN)[-1]
    assert call.data["method"] == ret.data["method"] == "answer_approval"
    assert "no approval prompt" in call.data["skipped"] and ret.data["result"] is None


def test_a_swallowed_crash_is_reported_and_the_instance_restarted():
    result = run(FakeImpl(swallow=True), """
id = "t"
stage = "l4"
[[sessions]]
id = "s1"
[[tools]]
name = "write_file"
kind = "write"
[[model]]
tool_calls = [{ id = "c1", tool = "write_file", args = { path = "/repo/x", content = "x" } }]
[[faults]]
failpoint = "after_projection"
action = "crash"
[[steps]]
do = "turn"
""")
    assert "caught SimulatedCrash" in result.error and not result.trace.completed
    (crash,) = result.trace.crashes()
    assert crash.data["swallowed"] is True
    # What the dead instance did afterwards never reached the log.
    assert not [e for e in result.trace.events if e.instance == 0 and e.index > crash.index
                and e.source != "harness"]


def test_same_seed_same_digest_and_no_temp_path_in_the_trace(tmp_path):
    impl = FakeImpl(leak_path=True)
    first = run(impl, "runner_crash.toml", seed=3, data_root=str(tmp_path))
    second = run(impl, "runner_crash.toml", seed=3, data_root=str(tmp_path))
    assert trace_digest(first.trace) == trace_digest(second.trace)
    text = json.dumps(c.to_json(first.trace))
    assert str(tmp_path) not in text and "<data_dir>" in text
    assert list(tmp_path.iterdir()) == []  # data dirs are removed
    other = run(impl, "runner_crash.toml", seed=4, data_root=str(tmp_path))
    assert trace_digest(other.trace) != trace_digest(first.trace)  # faker values differ


# --------------------------------------------------------------------------- the reference IUT


def reference():
    reference_impl = pytest.importorskip("reference_impl")
    return reference_impl.implementation()


def test_the_reference_implementation_runs_a_simple_scenario_deterministically():
    impl = reference()
    first = run(impl, "runner_basic.toml")
    assert first.error == "" and first.trace.completed
    (row,) = first.trace.ledger()
    assert row.data["tool_call_id"] == "c1" and row.data["effect"] == "applied"
    (op,) = first.trace.final_observation().operations
    assert op.outcome is c.Outcome.SUCCEEDED and op.delivery is c.Delivery.PROJECTED
    assert kinds(first, Kind.UI_PUBLISH) and kinds(first, Kind.LIFECYCLE_EVENT)
    assert trace_digest(first.trace) == trace_digest(run(impl, "runner_basic.toml").trace)


def test_the_reference_implementation_recovers_from_a_crash_and_shares_a_store():
    impl = reference()
    crashed = run(impl, "runner_crash.toml")
    assert crashed.error == "" and len(crashed.trace.crashes()) == 1
    op = crashed.trace.observations_labelled("after_restart")[0].observation.operations[0]
    assert op.outcome is c.Outcome.UNKNOWN and op.reconciliation_required
    concurrent = run(impl, "runner_concurrent.toml")
    assert concurrent.error == ""
    assert len(concurrent.trace.ledger()) == 1  # two instances, one execution


class FixtureImpl(FakeImpl):
    info = c.ImplementationInfo("fake", "0.1", checkpoint_fixtures=("data/ckpt_v1.json",))


def test_every_other_step_is_recorded_as_its_driver_call():
    result = run(FixtureImpl(), "runner_steps.toml")
    assert result.error == ""
    calls = [(e.instance, e.data["method"], e.data["args"]) for e in kinds(result, Kind.DRIVER_CALL)]
    loaded = calls[2][2]
    assert calls[2][1] == "load_checkpoint" and loaded["fixture"] == "ckpt"
    assert loaded["path"] == "data/ckpt_v1.json"
    assert loaded["expected_messages"] == [{"role": "user", "content": "hello"}]
    assert loaded["size_bytes"] == (DATA / "ckpt_v1.json").stat().st_size
    skipped = kinds(result, Kind.DRIVER_CALL)[3]
    assert "declares no checkpoint fixture 'v9'" in skipped.data["skipped"]
    assert calls[4][1:] == ("update_rules", {
        "session_id": "s1", "permission_version": 2,
        "rules": [{"effect": "deny", "tool": "Bash", "pattern": "*sudo*", "field": "command"}]})
    assert calls[5][1:] == ("cancel", {"session_id": "s1"})
    assert [call[:2] for call in calls[6:]] == [(0, "close"), (1, "open"), (1, "recover")]
    (restart,) = kinds(result, Kind.RESTART)
    assert restart.data == {"instance": 1} and not result.trace.crashes()
    labels = [p.label for p in result.trace.observations]
    assert labels == ["quiescent"] * 4 + ["after_restart", "quiescent", "observe:end",
                                          "quiescent", "final"]
    assert result.trace.final_observation().sessions[0].permission_version == 2


def test_a_rule_change_that_reuses_a_version_stops_the_run_with_a_fix():
    from harness.scenarios.loader import loads
    import reference_impl

    scenario = loads("""
id = "reused-version"
stage = "l5"
title = "two rule changes to one version"

[[sessions]]
id = "s1"

[[tools]]
library = "standard"

[[steps]]
do = "update_rules"
session = "s1"
permission_version = 2
rules = []

[[steps]]
do = "update_rules"
session = "s1"
permission_version = 2
rules = [{ effect = "deny", tool = "read_file" }]
""", "reused.toml")
    run = run_scenario(reference_impl.implementation(), scenario, 0)
    assert not run.trace.completed
    assert "already had; every rule change must name a new version (e.g. 3)" in run.error
    calls = [e for e in run.trace.events if e.kind == "driver_call" and e.data["method"] == "update_rules"]
    assert len(calls) == 1  # the second change was never applied


# --------------------------------------------------------------------------- faults must fire

FIRE_BASE = """
id = "t"
stage = "l4"
[[sessions]]
id = "s1"
[[tools]]
name = "write_file"
kind = "write"
[[model]]
tool_calls = [{ id = "c1", tool = "write_file", args = { path = "/repo/x", content = "x" } }]
"""


def test_a_misspelt_tool_in_a_fault_is_a_load_error_not_a_silent_fault():
    from harness.contract.errors import ScenarioError

    with pytest.raises(ScenarioError, match=r"faults\[0\]\.rules\[0\]\.tool: 'write_flie' "
                                            r"matches no declared tool"):
        loads(FIRE_BASE + """
[[faults]]
failpoint = "after_prepare"
action = "change_rules"
permission_version = 2
rules = [{ effect = "deny", tool = "write_flie" }]
[[steps]]
do = "turn"
""", "misspelt.toml")


def test_a_fault_on_a_hit_never_reached_makes_the_run_an_error():
    result = run(FakeImpl(), FIRE_BASE + """
[[faults]]
failpoint = "after_prepare"
hits = "2"
action = "crash"
[[steps]]
do = "turn"
""")
    assert not result.trace.completed
    assert result.unfired and result.error == result.trace.error
    assert "planned but not carried out: fault 1: after_prepare, hit #2 -> crash" in result.error
    assert "reached only 1 time(s), so hit #2 never came" in result.error
    assert not result.trace.crashes()  # nothing crashed: the happy path ran


def test_an_optional_fault_that_does_not_fire_leaves_the_run_clean():
    result = run(FakeImpl(), FIRE_BASE + """
[[faults]]
failpoint = "after_prepare"
hits = "2"
action = "crash"
optional = true
[[steps]]
do = "turn"
""")
    assert result.error == "" and result.unfired == () and result.trace.completed


def test_a_fault_that_fires_leaves_the_run_clean():
    result = run(FakeImpl(), FIRE_BASE + """
[[faults]]
failpoint = "after_prepare"
action = "delay"
seconds = 1
[[steps]]
do = "turn"
""")
    assert result.error == "" and result.unfired == ()


def test_a_concurrent_turn_whose_hold_is_never_reached_makes_the_run_an_error():
    text = (DATA / "runner_concurrent.toml").read_text().replace(
        'hold_at = "after_prepare"', 'hold_at = "during_checkpoint_build"')
    assert "during_checkpoint_build" in text
    result = run(FakeImpl(), text)
    assert not result.trace.completed
    assert "concurrent_turn #1 (hold at during_checkpoint_build): did not fire" in result.error
    assert "instance A's turn never reached during_checkpoint_build" in result.error


def test_an_optional_concurrent_turn_whose_hold_is_never_reached_is_clean():
    text = (DATA / "runner_concurrent.toml").read_text().replace(
        'hold_at = "after_prepare"', 'hold_at = "during_checkpoint_build"\noptional = true')
    result = run(FakeImpl(), text)
    assert result.error == "" and result.unfired == ()
    a_call = next(e for e in kinds(result, Kind.DRIVER_CALL) if e.data["method"] == "concurrent_turn")
    assert a_call.data["args"]["optional"] is True


CONCURRENT_CRASH = """
id = "t"
stage = "l4"
[[sessions]]
id = "s1"
rules = [{{ effect = "allow", tool = "send_email" }}]
[[tools]]
name = "send_email"
kind = "external"
[[model]]
tool_calls = [{{ id = "c1", tool = "send_email", args = {{ to = "ops@example.com" }} }}]
repeat = 2
[[faults]]
{fault}
[[steps]]
do = "concurrent_turn"
text = "announce"
hold_at = "after_prepare"
{more}
"""
"""A concurrent turn (A held after prepare, B the duplicate) with one crash fault."""


def test_a_crash_of_instance_b_in_a_concurrent_turn_drops_b_without_a_restart():
    # As the fault plan and docs/contract.md say: B, the duplicate's instance, is dropped;
    # A goes on as the primary and later steps drive it; no recover() runs for B.
    result = run(FakeImpl(), CONCURRENT_CRASH.format(fault='failpoint = "before_model_request"\nhits = "2"\naction = "crash"',
                            more='[[steps]]\ndo = "turn"\ntext = "again"'))
    assert result.error == "", result.error
    (crash,) = kinds(result, Kind.CRASH)
    assert crash.instance == 1 and crash.data["failpoint"] == "before_model_request"
    assert kinds(result, Kind.RESTART) == []
    assert [e.data["method"] for e in kinds(result, Kind.DRIVER_CALL) if e.instance == 1] == [
        "open", "concurrent_turn"]
    last = kinds(result, Kind.DRIVER_CALL)[-1]
    assert (last.instance, last.data["method"]) == (0, "run_turn")  # A is still the primary


def test_a_crash_of_instance_a_in_a_concurrent_turn_restarts_once():
    result = run(FakeImpl(), CONCURRENT_CRASH.format(fault='failpoint = "after_start_recorded"\naction = "crash"',
                            more=""))
    assert result.error == "", result.error
    (crash,) = kinds(result, Kind.CRASH)
    assert crash.instance == 0
    (restart,) = kinds(result, Kind.RESTART)
    assert restart.index > crash.index
    assert [e.data["method"] for e in kinds(result, Kind.DRIVER_CALL)
            if e.instance == restart.data["instance"]] == ["open", "recover"]


def test_checked_parts_skip_rows_already_checked_and_refuse_anything_off_contract():
    from harness.contract.value_checks import value_problem
    from harness.running.runner import _CheckedParts

    session = c.SessionView("s1", c.TurnStatus.COMPLETED, 1, c.Mode.DEFAULT, True)
    other = c.SessionView("s2", c.TurnStatus.COMPLETED, 1, c.Mode.DEFAULT, True)
    parts = _CheckedParts()
    assert parts.fit(c.Observation(sessions=(session,), result_records=2))
    assert parts.fit(c.Observation(sessions=(session, other)))  # one row checked anew
    bad = c.SessionView("s3", c.TurnStatus.COMPLETED, "1", c.Mode.DEFAULT, True)  # type: ignore[arg-type]
    with_bad = c.Observation(sessions=(session, bad))
    assert not parts.fit(with_bad)  # a new row off the contract: left to the full check
    assert "sessions[1].permission_version" in value_problem(c.Observation, with_bad, "inspect returned")
    assert not parts.fit(c.Observation(sessions=[session]))  # type: ignore[arg-type]
    assert not parts.fit(c.Observation(result_records=True))
    assert not parts.fit(object())
    assert parts.fit(c.Observation(sessions=(session,)))  # the earlier good rows still known


def test_checked_parts_skip_a_field_whose_tuple_passed_and_check_rows_per_field(monkeypatch):
    from harness.running.runner import _CheckedParts

    session = c.SessionView("s1", c.TurnStatus.COMPLETED, 1, c.Mode.DEFAULT, True)
    other = c.SessionView("s2", c.TurnStatus.COMPLETED, 1, c.Mode.DEFAULT, True)
    sessions = (session,)
    parts = _CheckedParts()
    checked: list[object] = []
    passes = parts._passes
    monkeypatch.setattr(parts, "_passes", lambda kind, row: checked.append(row) or passes(kind, row))
    assert parts.fit(c.Observation(sessions=sessions))
    assert checked == [session]
    assert parts.fit(c.Observation(sessions=sessions, result_records=3))  # the same tuple
    assert checked == [session]
    assert parts.fit(c.Observation(sessions=(session, other)))  # a new tuple: its new row only
    assert checked == [session, other]
    # A row checked as a session is not thereby a checked operation: checked again, refused.
    assert not parts.fit(c.Observation(sessions=(session, other),
                                       operations=(session,)))  # type: ignore[arg-type]
    assert checked == [session, other, session]


# --------------------------------------------------------------------------- one instance at a time


class SingleInstanceImpl(FakeImpl):
    """Refuses to open a second instance while one is live on the data dir (the documented
    way for an implementation without ``multi_instance``). No crash support: a dropped
    instance would keep its claim."""

    def __init__(self, features: tuple[c.Feature, ...] = (), **flags) -> None:
        super().__init__(**flags)
        self.info = c.ImplementationInfo("single", "0.1", features=features)
        self.live: set[str] = set()

    def open(self, data_dir: str, world: c.World) -> FakeRuntime:
        if data_dir in self.live:
            raise RuntimeError("another live instance holds this data dir")
        self.live.add(data_dir)
        runtime = FakeRuntime(self, data_dir, world)
        runtime.close = lambda: self.live.discard(data_dir)  # type: ignore[method-assign]
        return runtime


def test_an_implementation_without_multi_instance_may_refuse_the_second_instance():
    from harness.criteria import feature_evidence

    result = run(SingleInstanceImpl(), "runner_concurrent.toml")
    assert result.error == "" and result.trace.completed, result.error
    (refused,) = kinds(result, Kind.DRIVER_RAISED)
    assert refused.instance == 1 and refused.data["method"] == "open"
    assert refused.data["refused"] is True and refused.data["expected"] is False
    calls = [e for e in kinds(result, Kind.DRIVER_CALL) if e.data["method"] == "concurrent_turn"]
    assert [e.data["args"]["role"] for e in calls] == ["A"]  # B never took the turn
    assert [row.instance for row in result.trace.ledger()] == [0]  # A finished alone
    assert feature_evidence.shown(result.trace) == ()


def test_a_refused_second_instance_is_a_run_error_when_multi_instance_is_declared():
    result = run(SingleInstanceImpl(features=(c.Feature.MULTI_INSTANCE,)), "runner_concurrent.toml")
    assert not result.trace.completed
    assert "open on instance 1 raised RuntimeError: another live instance" in result.error
    (raised,) = kinds(result, Kind.DRIVER_RAISED)
    assert "refused" not in raised.data


def test_a_fault_on_the_path_of_a_feature_neither_declared_nor_shown_is_excused():
    # after_prepare's second hit is B's: refused, it never comes. The scenario is written
    # for multi_instance, which the implementation neither declares nor showed: excused
    text = CONCURRENT_CRASH.format(fault='failpoint = "after_prepare"\nhits = "2"\naction = "crash"',
                                   more="")
    result = run(SingleInstanceImpl(), text)
    assert result.error == "" and result.unfired == () and result.trace.completed
    (line,) = result.excused
    assert line.startswith("fault 1: after_prepare, hit #2 -> crash")
    assert line.endswith("[excused: the scenario is written for multi_instance, which the "
                         "implementation neither declares nor showed]")
    # neighbours: declared (no excuse: the refusal and the unfired fault are errors), and
    # shown though undeclared (B opened and took the turn, so the plan is judged as for a
    # declared feature: B never reached after_prepare, and that is an error again)
    declared = run(SingleInstanceImpl(features=(c.Feature.MULTI_INSTANCE,)), text)
    assert declared.excused == () and not declared.trace.completed
    undeclared = FakeImpl()
    undeclared.info = c.ImplementationInfo("fake", "0.1", features=())
    shown = run(undeclared, text)
    assert shown.excused == () and not shown.trace.completed
    assert "fault 1: after_prepare, hit #2 -> crash" in shown.error


CHECKPOINT_STEP = """
id = "t"
stage = "l1"
[[sessions]]
id = "s1"
[[tools]]
name = "write_file"
kind = "write"
[[model]]
text = "carried on"
[[steps]]
do = "load_checkpoint"
fixture = "ckpt_v1"
[[steps]]
do = "turn"
text = "carry on"
"""


class RefusingLoader(FakeImpl):
    """Names a fixture, and refuses it: load_checkpoint raises."""

    def __init__(self, features: tuple[c.Feature, ...] = ()) -> None:
        super().__init__()
        self.info = c.ImplementationInfo("loader", "0.1", features=features,
                                         checkpoint_fixtures=("ckpt_v1.json",))

    def checkpoint_fixture(self, name: str) -> bytes:
        return (DATA / name).read_bytes()

    def open(self, data_dir: str, world: c.World) -> FakeRuntime:
        runtime = FakeRuntime(self, data_dir, world)

        def refuse(session_id: str, data: bytes) -> None:
            raise ValueError("this runtime reads no earlier checkpoint format")

        runtime.load_checkpoint = refuse  # type: ignore[method-assign]
        return runtime


def test_an_implementation_without_checkpoint_import_may_refuse_a_fixture():
    from harness.criteria import feature_evidence

    result = run(RefusingLoader(), CHECKPOINT_STEP)
    assert result.error == "" and result.trace.completed, result.error
    (refused,) = kinds(result, Kind.DRIVER_RAISED)
    assert refused.data["method"] == "load_checkpoint" and refused.data["refused"] is True
    assert [e.data["method"] for e in kinds(result, Kind.DRIVER_RETURN)][-1] == "run_turn"
    assert feature_evidence.shown(result.trace) == ()
    # declared, the same refusal is a run error
    declared = run(RefusingLoader(features=(c.Feature.CHECKPOINT_IMPORT,)), CHECKPOINT_STEP)
    assert not declared.trace.completed
    assert "load_checkpoint on instance 0 raised ValueError" in declared.error
