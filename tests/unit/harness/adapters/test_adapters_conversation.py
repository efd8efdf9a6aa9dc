"""The contract's view of a library's store (pure, no library needed) and the gate that keeps
library worker threads off the wire between driver calls."""

from __future__ import annotations

import threading

from harness.adapters.conversation import SessionStore, observation, user_message
from harness.adapters.serialized_world import SerializedWorld
from harness.contract import (
    Delivery,
    Outcome,
    SessionConfig,
    TurnStatus,
    execution_id_for,
)

CONFIG = SessionConfig("s1")
CALLS = {"role": "assistant", "content": "", "request_id": "s1:model:1", "tool_calls": [
    {"id": "c1", "tool": "write_file", "args": {"path": "/a"}},
    {"id": "c2", "tool": "write_file", "args": {"path": "/b"}}]}


def _result(tool_call_id: str, status: str = "ok") -> dict:
    return {"role": "tool", "tool_call_id": tool_call_id, "tool": "write_file",
            "status": status, "content": "done", "error_kind": None}


def test_a_saved_but_unfolded_result_is_recorded_and_not_in_the_checkpoint():
    store = SessionStore(CONFIG, (user_message("go"), CALLS, _result("c1")),
                         (_result("c2", "error"),), 3, 10, True)
    seen = observation([store])
    c1, c2 = seen.operation("c1"), seen.operation("c2")
    assert (c1.outcome, c1.delivery, c1.execution_started) == (
        Outcome.SUCCEEDED, Delivery.RECORDED, True)
    assert (c2.outcome, c2.delivery) == (Outcome.FAILED, Delivery.RECORDED)
    (checkpoint,) = seen.checkpoints
    assert checkpoint.last_execution_id == execution_id_for("s1", "c1")  # c2 not folded
    assert seen.result_records == 2
    assert seen.sessions[0].turn_status is TurnStatus.RUNNING


def test_a_call_without_a_result_is_not_started_and_no_start_is_invented():
    seen = observation([SessionStore(CONFIG, (user_message("go"), CALLS), (), 1, 0, True)])
    for tool_call_id in ("c1", "c2"):
        operation = seen.operation(tool_call_id)
        assert operation.outcome is Outcome.NOT_STARTED
        assert operation.execution_started is False and operation.attempts == 0
    assert seen.model_requests == () and seen.projections == ()


def test_a_store_without_a_checkpoint_reports_none():
    seen = observation([SessionStore(CONFIG, (user_message("go"),), (), -1, 0, False)])
    assert seen.checkpoints == ()
    assert seen.sessions[0].turn_status is TurnStatus.COMPLETED


class _RecordingWorld:
    def __init__(self) -> None:
        self.calls: list[float] = []

    def now(self) -> float:
        self.calls.append(1.0)
        return 1.0


def test_a_worker_uses_the_world_only_while_the_serving_thread_admits_it():
    inner = _RecordingWorld()
    world = SerializedWorld(inner)  # built on this (the serving) thread
    worker = threading.Thread(target=world.now, daemon=True)
    worker.start()
    worker.join(timeout=0.2)
    assert worker.is_alive() and inner.calls == []  # held at the gate
    with world.admitting():
        worker.join(timeout=10)
    assert not worker.is_alive() and inner.calls == [1.0]
    assert world.now() == 1.0  # the serving thread itself never waits


def test_a_tool_the_host_refused_to_start_is_saved_as_not_started():
    refused = dict(_result("c1", "error"), started=False, error_kind="transient")
    seen = observation([SessionStore(CONFIG, (user_message("go"), CALLS, refused), (), 2, 0,
                                     True)])
    operation = seen.operation("c1")
    assert (operation.outcome, operation.delivery, operation.execution_started) == (
        Outcome.NOT_STARTED, Delivery.RECORDED, False)
    assert operation.failure_kind == "transient" and operation.result_digest is None
