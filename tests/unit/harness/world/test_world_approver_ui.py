"""Prompts are recorded and answered oldest first; projections are recorded in order."""

from harness import contract as c
from harness.trace.record import Kind
from harness.world.approver import ScriptedApprover
from harness.world.log import Channel, EventLog
from harness.world.ui import FakeUI


def channel(log: EventLog) -> Channel:
    return Channel(0, lambda kind, data: log.append("world", kind, 0, data, guarded=True),
                   lambda: None, lambda error: None)


def prompt(wait_id: str) -> c.ApprovalPrompt:
    return c.ApprovalPrompt(wait_id, "s1", "ex-" + wait_id, "c-" + wait_id, "Bash",
                            {"command": "ls"}, "ask rule")


def test_next_is_the_oldest_unanswered_prompt_and_reprompts_keep_their_place():
    log, approver = EventLog(), ScriptedApprover()
    assert approver.next_unanswered() is None
    for wait in ("w1", "w2", "w1"):
        approver.prompt(prompt(wait), channel(log))
    assert [e.kind for e in log.events()] == [Kind.APPROVAL_PROMPT] * 3
    assert log.events()[0].data == c.to_json(prompt("w1"))
    assert approver.next_unanswered() == "w1"
    approver.mark_answered("w1")
    assert approver.next_unanswered() == "w2"
    approver.mark_answered("w2")
    assert approver.next_unanswered() is None
    assert [p.wait_id for p in approver.prompted()] == ["w1", "w2"]


def test_ui_records_every_publication_and_shows_the_latest():
    log, ui = EventLog(), FakeUI()
    first = c.Projection("s1", "ex-1", "c1", c.Permission.ALLOW, c.Outcome.NOT_STARTED,
                         "pending", "", ())
    second = c.Projection("s1", "ex-1", "c1", c.Permission.ALLOW, c.Outcome.SUCCEEDED,
                          "succeeded", "", ())
    ui.publish(first, channel(log))
    ui.publish(second, channel(log))
    assert [e.data["projection"]["status"] for e in log.events()] == ["pending", "succeeded"]
    assert ui.published() == (first, second)
    assert ui.current() == {("s1", "ex-1"): second}
