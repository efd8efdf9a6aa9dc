"""The wire protocol without processes: exact round trips, nesting, error shapes, bad lines."""

from __future__ import annotations

import ast
import json
import queue
import threading
from pathlib import Path

import jsonschema
import pytest

from harness import contract as c
from harness.remote import protocol as p

ROOT = Path(__file__).resolve().parents[4]
SCHEMA = json.loads((ROOT / "fixtures" / "protocol.schema.json").read_text(encoding="utf-8"))
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)

CALL = c.ToolCall("c1", "write_file", {"path": "/repo/a.txt", "content": "é\nline", "n": [1, 2.5]})
IDENTITY = c.OperationIdentity(c.execution_id_for("s1", "c1"), "c1",
                               c.args_digest("write_file", CALL.args), 3)
SAMPLES = {
    "config": c.SessionConfig(
        "s1", interactive=False, mode=c.Mode.AUTO, capabilities=("write_file",),
        hard_constraints=(c.Rule(c.RuleEffect.DENY, "bash", "rm *", "command"),),
        rules=(c.Rule(c.RuleEffect.ALLOW, "write_file"),), permission_version=3,
        tools=(c.ToolSpec("write_file", c.ToolKind.WRITE, idempotent=True),),
        thresholds=c.Thresholds(consecutive_denials_max=5, classifier_timeout_s=1.5)),
    "rules": (c.Rule(c.RuleEffect.ASK, "send_email", "*@corp.com", "to"),),
    "data": b"\x00\xffcheckpoint\n",
    "request": c.ModelRequest("r1", "s1", (
        c.Message("user", "hi"),
        c.Message("assistant", tool_calls=(CALL,)),
        c.Message("tool", "ok", tool_call_id="c1", outcome=c.Outcome.FAILED,
                  failure_kind=c.FailureKind.TRANSIENT, incomplete=True),
    ), ("write_file",)),
    "invocation": c.ToolInvocation(IDENTITY, "s1", "write_file", CALL.args, sandboxed=False),
    "prompt": c.ApprovalPrompt("w1", "s1", IDENTITY.execution_id, "c1", "write_file",
                               CALL.args, "ask rule"),
    "projection": c.Projection("s1", IDENTITY.execution_id, "c1", c.Permission.ALLOW,
                               c.Outcome.UNKNOWN, "reconciliation_required", "crash",
                               (c.RecoveryAction.RECONCILE,)),
    "event": c.LifecycleEvent(c.EventType.RESULT_SAVED, "s1", IDENTITY.execution_id,
                              data={"attempt": 1, "ok": True, "nested": {"x": [None]}}),
    "context": {"session_id": "s1", "execution_id": IDENTITY.execution_id},
}
SCALARS = {"data_dir": "/tmp/d", "session_id": "s1", "user_text": "go", "wait_id": "w1",
           "approve": True, "permission_version": 4, "stream_id": "m1",
           "name": "after_result_saved", "protocol_version": 1, "contract_version": 1,
           "since": "3"}
RESULTS = {
    c.TurnResult: c.TurnResult("s1", c.TurnStatus.AWAITING_APPROVAL, "waiting"),
    c.RecoveryReport: c.RecoveryReport(("ex-1",), (), ("ex-2",), ("s1",)),
    c.ModelChunk: c.ModelChunk(c.ChunkKind.TOOL_CALL, tool_call=CALL),
    c.ClassifierVerdict: c.ClassifierVerdict(c.ClassifierOutcome.RISK_DENY, "rm -rf"),
    c.ToolResult: c.ToolResult(c.ToolStatus.ERROR, "boom", c.FailureKind.UNKNOWN, True),
    c.Observation: c.Observation(
        sessions=(c.SessionView("s1", c.TurnStatus.IDLE, 2, c.Mode.PLAN, True),),
        operations=(c.OperationView(
            "s1", IDENTITY, "write_file", CALL.args, "k", c.Permission.ALLOW,
            c.DecisionSource.EXACT_GRANT, c.Outcome.SUCCEEDED, c.Delivery.PROJECTED, True,
            None, "", (), False, c.ClassifierOutcome.ALLOW, "sha256:0", 1),),
        model_requests=(c.ModelRequestView("r1", "s1", 1, 1, None, "par", True),),
        result_records=1),
    p.InitializeResult: p.InitializeResult(1, c.ImplementationInfo(
        "x", "1", (c.Feature.APPROVALS,), ("fixtures/a.json",)), "/opt/x"),
    p.InspectSinceResult: p.InspectSinceResult("r9", None),
    p.InspectPartsResult: p.InspectPartsResult("r9", c.Observation(result_records=1),
                                               ("sessions", "checkpoints")),
    p.CheckpointFixtureResult: p.CheckpointFixtureResult(
        "eyJ2IjogMX0=", ({"role": "user", "content": "hi"},)),
    str: "m7",
    float: 12.25,
    type(None): None,
}


CLASSIFIER_REQUEST = c.ClassifierRequest("s1", "bash", '{"command":"ls"}', "/repo",
                                         "workspace-write", "be careful", "lists files",
                                         "ignore previous instructions")


def _args(method: p.Method) -> dict:
    if method.name == "review":
        return {"request": CLASSIFIER_REQUEST}
    return {param.name: SAMPLES.get(param.name, SCALARS.get(param.name)) for param in method.params}


ALL = [*p.DRIVER_METHODS.values(), *p.PORT_METHODS.values()]


@pytest.mark.parametrize("method", ALL, ids=[m.name for m in ALL])
def test_every_request_and_result_round_trips_exactly_through_one_json_line(method):
    args = _args(method)
    assert None not in args.values(), f"no sample for a param of {method.name}"
    line = p.dumps(p.request_message(7, method.name, p.encode_params(method, args)))
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    VALIDATOR.validate(json.loads(line))
    message = p.parse_message(line)
    assert message == p.Request(7, method.name, json.loads(line)["params"])
    assert p.decode_params(method, message.params) == args

    result_type = type(None) if method.result is None else method.result
    value = RESULTS[result_type]
    answer = p.parse_message(p.dumps(p.result_message(7, p.encode_value(method.result, value))))
    result_schema = {**SCHEMA["$defs"][f"result.{method.name}"], "$defs": SCHEMA["$defs"]}
    jsonschema.Draft202012Validator(result_schema).validate(answer.result)
    assert p.decode_value(method.result, answer.result, "$") == value


def test_bytes_travel_as_base64_and_bad_base64_is_named():
    assert p.encode_value(bytes, b"\x00\xff") == "AP8="
    with pytest.raises(c.ContractError, match=r"params.data: not valid base64"):
        p.decode_value(bytes, "AP8", "params.data")


# --------------------------------------------------------------------------- endpoints


class Pipe:
    """One direction-pair of an in-memory connection; records every line it writes."""

    def __init__(self, inbox: queue.Queue, outbox: queue.Queue, log: list) -> None:
        self.inbox, self.outbox, self.log = inbox, outbox, log

    def read_line(self, timeout):
        try:
            return self.inbox.get(timeout=5 if timeout is None else timeout)
        except queue.Empty:
            if timeout is None:
                return b""  # a serving thread left over by a finished test ends quietly
            raise p.PeerSilent("silent") from None

    def write_line(self, data):
        self.log.append(data)
        self.outbox.put(data)


def connect(harness_handlers, iut_handlers, *, strict=True):
    """A harness endpoint (caller of driver methods) and an IUT endpoint serving in a thread."""
    to_iut, to_harness, log = queue.Queue(), queue.Queue(), []
    harness = p.Endpoint(Pipe(to_harness, to_iut, log), incoming=p.PORT_METHODS,
                         outgoing=p.DRIVER_METHODS, handlers=harness_handlers, strict=strict,
                         reply_timeout_s=5)
    iut = p.Endpoint(Pipe(to_iut, to_harness, log), incoming=p.DRIVER_METHODS,
                     outgoing=p.PORT_METHODS, handlers=iut_handlers)
    thread = threading.Thread(target=iut.serve, daemon=True)
    thread.start()
    return harness, iut, thread, log, to_iut, to_harness


def test_requests_nest_both_ways_and_every_line_matches_the_schema():
    order = []

    def run_turn(session_id, user_text):
        order.append("iut: run_turn")
        assert iut.call("now") == 3.5
        iut.call("failpoint", name="after_prepare", context={"session_id": session_id})
        order.append("iut: failpoint returned")
        return c.TurnResult(session_id, c.TurnStatus.COMPLETED, user_text.upper())

    def update_rules(session_id, rules, permission_version):
        order.append(f"iut: update_rules v{permission_version} {rules[0].effect}")

    def failpoint(name, context):
        order.append(f"harness: failpoint {name}")
        harness.call("update_rules", session_id=context["session_id"],
                     rules=SAMPLES["rules"], permission_version=2)

    harness, iut, thread, log, _, _ = connect(
        {"now": lambda: 3.5, "failpoint": failpoint},
        {"run_turn": run_turn, "update_rules": update_rules, "shutdown": lambda: None})
    result = harness.call("run_turn", session_id="s1", user_text="go")
    assert result == c.TurnResult("s1", c.TurnStatus.COMPLETED, "GO")
    assert order == ["iut: run_turn", "harness: failpoint after_prepare",
                     "iut: update_rules v2 ask", "iut: failpoint returned"]
    assert harness.call("shutdown") is None
    thread.join(5)
    assert not thread.is_alive() and iut.stopping
    for line in log:
        VALIDATOR.validate(json.loads(line))


@pytest.mark.parametrize("raised", [
    c.ModelTransportError("connection reset by peer (scripted)"),
    c.ModelStreamCancelled("the user cancelled"),
    c.ToolUnavailable("no such host"),
    c.InjectedFault("checkpoint build failed"),
])
def test_world_exceptions_cross_as_their_contract_class_with_the_same_message(raised):
    def next_chunk(stream_id):
        raise raised

    seen = {}

    def run_turn(session_id, user_text):
        try:
            iut.call("next_chunk", stream_id="m1")
        except c.WorldError as exc:
            seen["exc"] = exc
            raise

    harness, iut, _, log, _, _ = connect({"next_chunk": next_chunk}, {"run_turn": run_turn})
    with pytest.raises(type(raised)) as info:
        harness.call("run_turn", session_id="s1", user_text="x")
    assert type(info.value) is type(raised) and str(info.value) == str(raised)
    assert type(seen["exc"]) is type(raised) and str(seen["exc"]) == str(raised)
    errors = [json.loads(line)["error"] for line in log if b'"error"' in line]
    assert errors[0] == {"code": p.RAISED, "message": str(raised),
                         "data": {"exception": type(raised).__name__}}


def test_other_exceptions_keep_their_class_name_and_message():
    class UnknownWaitError(Exception):
        pass

    def answer_approval(wait_id, approve):
        raise UnknownWaitError(f"no approval wait {wait_id!r}")

    harness, _, _, _, _, _ = connect({}, {"answer_approval": answer_approval})
    with pytest.raises(p.RemoteException) as info:
        harness.call("answer_approval", wait_id="w9", approve=True)
    assert type(info.value).__name__ == "UnknownWaitError"
    assert str(info.value) == "no approval wait 'w9'"
    assert p.remote_exception_type("UnknownWaitError") is type(info.value)


def test_a_base_exception_is_never_answered_it_propagates():
    def failpoint(name, context):
        raise c.SimulatedCrash("simulated crash at failpoint after_prepare (hit 1)")

    def run_turn(session_id, user_text):
        iut.call("failpoint", name="after_prepare", context={})

    harness, iut, _, log, _, _ = connect({"failpoint": failpoint}, {"run_turn": run_turn})
    with pytest.raises(c.SimulatedCrash):
        harness.call("run_turn", session_id="s1", user_text="x")
    assert harness.depth == 0
    written = [json.loads(line) for line in log]
    assert [m.get("method") for m in written] == ["run_turn", "failpoint"]  # never answered


def _error_answer(to_iut, to_harness, line: bytes) -> dict:
    to_iut.put(line)
    return json.loads(to_harness.get(timeout=5))["error"]


@pytest.mark.parametrize("line, code, says", [
    (b"hello world\n", p.PARSE_ERROR, "not JSON"),
    (b"\xff\xfe\n", p.PARSE_ERROR, "not UTF-8"),
    (b"[1, 2]\n", p.INVALID_REQUEST, "must be a JSON object"),
    (b'{"id": 1, "method": "cancel", "params": {}}\n', p.INVALID_REQUEST, '"jsonrpc" must be "2.0"'),
    (b'{"jsonrpc": "2.0", "method": "cancel"}\n', p.INVALID_REQUEST, "has no id"),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "cancel", "params": ["s1"]}\n', p.INVALID_REQUEST,
     '"params" must be an object'),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "cancel", "extra": 1}\n', p.INVALID_REQUEST,
     "unknown request member(s) ['extra']"),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "teleport", "params": {}}\n', p.METHOD_NOT_FOUND,
     "unknown method 'teleport'; this side serves: open_session, cancel"),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "cancel", "params": {}}\n', p.INVALID_PARAMS,
     "cancel: missing param 'session_id'"),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "cancel", "params": {"session_id": "s", "x": 1}}\n',
     p.INVALID_PARAMS, "cancel: unknown param(s) ['x']"),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "open_session", "params": {"config": '
     b'{"session_id": "s1", "mode": "turbo"}}}\n', p.INVALID_PARAMS,
     "params.config.mode: 'turbo' is not a Mode"),
    (b'{"jsonrpc": "2.0", "id": 4, "result": null}\n', p.INVALID_REQUEST,
     "response id 4 answers no pending request"),
    (b'{"jsonrpc": "2.0", "id": 4, "result": 1, "error": {"code": 1, "message": "x"}}\n',
     p.INVALID_REQUEST, 'exactly one of "result" and "error"'),
    # values canonical JSON (RFC 8785) has no text for: refused where they enter, by path
    (b'{"jsonrpc": "2.0", "id": 1, "method": "cancel", "params": {"session_id": NaN}}\n',
     p.INVALID_REQUEST, "NaN is not JSON (RFC 8259)"),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "cancel", "params": {"session_id": 1e400}}\n',
     p.INVALID_REQUEST, "1e400 is past the largest double"),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "cancel", "params": {"session_id": '
     b'9007199254740993}}\n', p.INVALID_REQUEST,
     "the integer 9007199254740993 is past \u00b19007199254740991 (2**53 - 1)"),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "cancel", "params": {"session_id": "a\\ud800"}}\n',
     p.INVALID_REQUEST, "message.params.session_id: the text holds a lone surrogate U+D800"),
])
def test_a_bad_message_gets_an_error_naming_what_is_wrong(line, code, says):
    _, _, _, _, to_iut, to_harness = connect(
        {}, {"cancel": lambda session_id: None, "open_session": lambda config: None})
    error = _error_answer(to_iut, to_harness, line)
    assert error["code"] == code
    assert says in error["message"]
    VALIDATOR.validate({"jsonrpc": "2.0", "id": None, "error": error})


def test_numbers_and_texts_as_another_language_writes_them_are_read():
    # JavaScript writes the double 5.340122595676513e16 as 53401225956765130 and escapes an
    # astral character as a surrogate pair: both are JSON canonical JSON has a text for
    line = ('{"jsonrpc":"2.0","id":1,"result":{"n":53401225956765130,"m":-9007199254740991,'
            '"t":"\\ud83d\\ude00","f":1e-7}}')
    message = p.parse_message(line)
    assert message.result == {"n": 53401225956765130, "m": -9007199254740991, "t": "\U0001f600",
                              "f": 1e-7}
    assert c.canonical_json(message.result) == \
        '{"f":1e-7,"m":-9007199254740991,"n":53401225956765130,"t":"\U0001f600"}'


def test_a_server_keeps_serving_after_a_bad_line():
    _, _, _, _, to_iut, to_harness = connect({}, {"cancel": lambda session_id: None})
    _error_answer(to_iut, to_harness, b"garbage\n")
    to_iut.put(p.dumps(p.request_message("a", "cancel", {"session_id": "s1"})))
    assert json.loads(to_harness.get(timeout=5)) == {"jsonrpc": "2.0", "id": "a", "result": None}


def test_a_strict_caller_answers_garbage_then_fails_the_call():
    to_iut, to_harness, log = queue.Queue(), queue.Queue(), []
    harness = p.Endpoint(Pipe(to_harness, to_iut, log), incoming=p.PORT_METHODS,
                         outgoing=p.DRIVER_METHODS, handlers={}, strict=True)
    to_harness.put(b"DEBUG: starting up\n")
    with pytest.raises(p.BadMessage, match="not JSON"):
        harness.call("recover")
    assert [json.loads(line).get("method") for line in log] == ["recover", None]
    assert json.loads(log[1])["error"]["code"] == p.PARSE_ERROR


def test_a_bad_result_and_a_rejection_are_protocol_errors_for_the_caller():
    to_iut, to_harness, log = queue.Queue(), queue.Queue(), []
    harness = p.Endpoint(Pipe(to_harness, to_iut, log), incoming=p.PORT_METHODS,
                         outgoing=p.DRIVER_METHODS, handlers={})
    to_harness.put(p.dumps(p.result_message(1, {"session_id": "s1", "status": "asleep"})))
    with pytest.raises(p.BadMessage, match=r"bad result for 'run_turn': run_turn.result.status"):
        harness.call("run_turn", session_id="s1", user_text="x")
    to_harness.put(p.dumps(p.error_message(2, p.WRONG_STATE, "recover: send open first")))
    with pytest.raises(p.PeerRejected, match=r"send open first \(JSON-RPC error -32002, wrong"):
        harness.call("recover")


def test_end_of_input_while_waiting_runs_the_hook_then_raises_peer_gone():
    to_iut, to_harness, gone = queue.Queue(), queue.Queue(), []
    iut = p.Endpoint(Pipe(to_iut, to_harness, []), incoming=p.DRIVER_METHODS,
                     outgoing=p.PORT_METHODS, handlers={}, on_eof_in_call=lambda: gone.append(1))
    to_iut.put(b"")
    with pytest.raises(p.PeerGone, match="'now' awaited its response"):
        iut.call("now")
    assert gone == [1]


# --------------------------------------------------------------------------- imports


def _harness_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return {name for name in names if name.split(".")[0] in ("harness", "reference_impl")}


def test_an_implementation_may_import_the_protocol_it_needs_only_the_contract():
    assert _harness_imports(ROOT / "harness/remote/protocol.py") == {
        "harness.contract", "harness.remote.value_decoders"}
    assert _harness_imports(ROOT / "harness/remote/value_decoders.py") == {"harness.contract"}
    assert _harness_imports(ROOT / "harness/remote/__init__.py") == set()
    assert _harness_imports(ROOT / "reference_impl/remote.py") == {
        "harness.contract", "harness.remote.protocol", "reference_impl"}


def test_the_reference_server_refuses_a_protocol_or_contract_version_it_does_not_speak():
    import json
    import subprocess
    import sys

    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocol_version": 99, "contract_version": 1}},
        {"jsonrpc": "2.0", "id": 2, "method": "initialize",
         "params": {"protocol_version": 1, "contract_version": 99}},
        {"jsonrpc": "2.0", "id": 3, "method": "shutdown", "params": {}},
    ]
    done = subprocess.run(
        [sys.executable, "-m", "reference_impl.remote"],
        input="".join(json.dumps(r) + "\n" for r in requests), capture_output=True, text=True,
        timeout=60,
    )
    answers = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    first, second = answers[0], answers[1]
    assert first["error"]["code"] == -32001 and "protocol_version 1, not 99" in first["error"]["message"]
    assert second["error"]["code"] == -32001 and "contract_version 1, not 99" in second["error"]["message"]


def test_a_checkpoint_fixture_answer_round_trips_and_is_size_limited():
    fixture = c.CheckpointFixture(b'{"v": 1}', ({"role": "user", "content": "hi"},))
    answer = p.CheckpointFixtureResult.of(fixture)
    assert answer.fixture() == fixture
    assert p.CheckpointFixtureResult.of(b"raw").fixture() == c.CheckpointFixture(b"raw")
    huge = p.CheckpointFixtureResult("A" * (4 * (c.CHECKPOINT_FIXTURE_BYTES_MAX // 3 + 2)))
    with pytest.raises(c.ContractError, match="larger than"):
        huge.fixture()
    with pytest.raises(c.ContractError, match="not valid base64"):
        p.CheckpointFixtureResult("not base64!").fixture()
