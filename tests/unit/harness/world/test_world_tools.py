"""Fake tools: effects by kind on a fake filesystem, scripted behaviours, one ledger row per
real execution, no row when the tool could not start."""

import os

import pytest

from harness import contract as c
from harness.trace.record import Kind
from harness.world.clock import VirtualClock
from harness.world.log import Channel, EventLog
from harness.world.templates import file_sha256
from harness.world.tools import Behaviour, FakeTools, ToolBehaviour

K = c.ToolKind
SPECS = (c.ToolSpec("read_file", K.READ, True), c.ToolSpec("write_file", K.WRITE),
         c.ToolSpec("edit_file", K.FILE_EDIT), c.ToolSpec("Bash", K.BASH),
         c.ToolSpec("send_email", K.EXTERNAL), c.ToolSpec("term", K.TERMINAL),
         c.ToolSpec("web", K.WEB), c.ToolSpec("app", K.USER_APP),
         c.ToolSpec("put_object", K.WRITE))


def make(behaviours=(), files=None, clock=None):
    log = EventLog()
    raised: list = []
    channel = Channel(0, lambda kind, data: log.append("world", kind, 0, data, guarded=True),
                      lambda: None, raised.append)
    tools = FakeTools(SPECS, behaviours, files or {"/repo/a.txt": "hello"}, clock or VirtualClock())
    return tools, log, channel, raised


def invoke(tools, channel, tool, args, call="c1"):
    identity = c.OperationIdentity(c.execution_id_for("s1", call), call, c.args_digest(tool, args), 2)
    return tools.execute(c.ToolInvocation(identity, "s1", tool, args), channel)


def test_kinds_have_their_fake_effects_and_each_execution_is_one_ledger_row():
    tools, log, ch, _ = make()
    assert invoke(tools, ch, "read_file", {"path": "/repo/a.txt"}).output == "hello"
    invoke(tools, ch, "write_file", {"path": "/repo/new/b.txt", "content": "bee"}, "c2")
    assert tools.read_file("/repo/new/b.txt") == "bee"
    invoke(tools, ch, "Bash", {"command": "ls -la", "description": "list"}, "c3")
    for i, tool in enumerate(("send_email", "term", "web", "app", "put_object")):
        assert invoke(tools, ch, tool, {"x": i}, f"e{i}").status is c.ToolStatus.OK
    assert [e["tool"] for e in tools.external_effects] == ["Bash", "send_email", "term", "web",
                                                           "app", "put_object"]
    rows = [e for e in log.events() if e.kind == Kind.TOOL_EXECUTED]
    assert [r.data["ledger_seq"] for r in rows] == list(range(1, 9))
    write = rows[1].data
    assert write["effect"] == "applied" and write["status"] == "ok" and write["kind"] == "write"
    assert write["args_digest"] == c.args_digest("write_file", {"path": "/repo/new/b.txt", "content": "bee"})
    assert write["permission_version"] == 2 and write["execution_id"] == c.execution_id_for("s1", "c2")
    assert rows[0].data["effect"] == "none"  # a read changes nothing
    assert tools.files() == {"/repo/a.txt": "hello", "/repo/new/b.txt": "bee"}
    assert not os.path.exists("/repo/new/b.txt")  # the real filesystem is untouched


def test_file_edits_check_their_preconditions():
    tools, log, ch, _ = make(files={"/repo/app.cfg": "port = 80"})
    good = file_sha256("port = 80")
    stale = invoke(tools, ch, "edit_file", {"path": "/repo/app.cfg", "old": "80", "new": "81",
                                             "expect_sha": file_sha256("other")}, "e1")
    assert stale.error_kind is c.FailureKind.FAILED and "precondition failed" in stale.output
    assert tools.read_file("/repo/app.cfg") == "port = 80"
    ok = invoke(tools, ch, "edit_file", {"path": "/repo/app.cfg", "old": "80", "new": "81",
                                          "expect_sha": good}, "e2")
    assert ok.status is c.ToolStatus.OK and tools.read_file("/repo/app.cfg") == "port = 81"
    missing = invoke(tools, ch, "edit_file", {"path": "/repo/app.cfg"}, "e3")
    assert missing.error_kind is c.FailureKind.PARAM_ERROR
    assert [r.data["effect"] for r in log.events()] == ["none", "applied", "none"]
    assert [r.data.get("precondition_failed", False) for r in log.events()] == [True, False, False]


@pytest.mark.parametrize("behaviour, kind, effect", [
    (Behaviour.PARAM_ERROR, c.FailureKind.PARAM_ERROR, "none"),
    (Behaviour.FAIL, c.FailureKind.FAILED, "none"),
    (Behaviour.TRANSIENT, c.FailureKind.TRANSIENT, "none"),
])
def test_failing_behaviours_have_no_effect(behaviour, kind, effect):
    tools, log, ch, _ = make([ToolBehaviour(behaviour, call="c1")])
    result = invoke(tools, ch, "write_file", {"path": "/repo/x", "content": "x"})
    assert result.status is c.ToolStatus.ERROR and result.error_kind is kind
    assert tools.read_file("/repo/x") is None
    (row,) = log.events()
    assert row.data["effect"] == effect and row.data["behaviour"] == behaviour.value


def test_unavailable_raises_and_leaves_no_ledger_row():
    tools, log, ch, raised = make([ToolBehaviour(Behaviour.UNAVAILABLE, tool="send_email", times=2)])
    for _ in range(2):
        with pytest.raises(c.ToolUnavailable):
            invoke(tools, ch, "send_email", {"to": "a"})
    assert invoke(tools, ch, "send_email", {"to": "a"}).status is c.ToolStatus.OK  # times used up
    kinds = [e.kind for e in log.events()]
    assert kinds == [Kind.TOOL_UNAVAILABLE, Kind.TOOL_UNAVAILABLE, Kind.TOOL_EXECUTED]
    assert log.events()[2].data["ledger_seq"] == 1 and log.events()[2].data["invocation"] == 3
    assert "ledger_seq" not in log.events()[0].data and len(raised) == 2
    with pytest.raises(c.ToolUnavailable, match="no tool named 'ghost'"):
        invoke(tools, ch, "ghost", {})


def test_partial_escalate_claims_not_executed_and_hang():
    clock = VirtualClock()
    tools, log, ch, _ = make([ToolBehaviour(Behaviour.PARTIAL_ESCALATE, call="p"),
                              ToolBehaviour(Behaviour.CLAIMS_NOT_EXECUTED, call="n"),
                              ToolBehaviour(Behaviour.HANG, call="h", seconds=90)], clock=clock)
    partial = invoke(tools, ch, "write_file", {"path": "/repo/p", "content": "abcd"}, "p")
    assert partial.escalation_requested and partial.status is c.ToolStatus.ERROR
    assert partial.error_kind is c.FailureKind.PERMISSION_DENIED
    assert tools.read_file("/repo/p") == "ab"
    claim = invoke(tools, ch, "write_file", {"path": "/repo/n", "content": "done"}, "n")
    assert "not executed" in claim.output and claim.status is c.ToolStatus.OK
    assert tools.read_file("/repo/n") == "done"  # it did execute
    start = clock.now()
    hung = invoke(tools, ch, "send_email", {"to": "x"}, "h")
    assert hung.error_kind is c.FailureKind.TRANSIENT and "timed out" in hung.output
    assert clock.now() - start == 90
    assert [r.data["effect"] for r in log.events()] == ["partial", "applied", "none"]
    assert log.events()[0].data["escalation_requested"] is True


def test_call_entries_come_first_and_are_consumed_in_order():
    tools, log, ch, _ = make([ToolBehaviour(Behaviour.FAIL, tool="Bash"),
                              ToolBehaviour(Behaviour.TRANSIENT, call="b1", times=2),
                              ToolBehaviour(Behaviour.PARAM_ERROR, call="b1")])
    kinds = [invoke(tools, ch, "Bash", {"command": "ls"}, "b1").error_kind for _ in range(5)]
    assert kinds == [c.FailureKind.TRANSIENT, c.FailureKind.TRANSIENT, c.FailureKind.PARAM_ERROR,
                     c.FailureKind.FAILED, None]
    assert [r.data["invocation"] for r in log.events()] == [1, 2, 3, 4, 5]
