"""contract_check: values of the contract's types pass; anything else names its field."""

from __future__ import annotations

import collections.abc
from typing import Any

import pytest

from harness.contract import (
    EventType,
    Feature,
    ImplementationInfo,
    LifecycleEvent,
    Message,
    ModelRequest,
    Observation,
    RecoveryReport,
    SessionView,
    TurnResult,
    TurnStatus,
    Mode,
)
from harness.contract.value_checks import RUNTIME_METHODS, driver_result_problem, value_problem



class ConversationView(collections.abc.Sequence):
    """The first ``count`` items of a list, read-only (like the reference's view)."""

    def __init__(self, log, count):
        self._log, self._count = log, count

    def __len__(self):
        return self._count

    def __getitem__(self, index):
        return self._log[:self._count][index]


SESSION = SessionView("s1", TurnStatus.IDLE, 1, Mode.DEFAULT, True)


@pytest.mark.parametrize("kind, value", [
    (Observation, Observation()),
    (Observation, Observation(sessions=(SESSION,), failure_events_logged=3)),
    (SessionView, SessionView("s1", "idle", 1, "default", True)),  # StrEnum values
    (ImplementationInfo, ImplementationInfo("x", "1", (Feature.APPROVALS,))),
    (LifecycleEvent, LifecycleEvent(EventType.PROJECTED, "s1", data={"a": [1, 2.5, None, {"b": True}]})),
    (TurnResult, TurnResult("s1", TurnStatus.COMPLETED, "hi")),
    (ModelRequest, ModelRequest("r", "s1", (Message("user", "hi"),), ())),
    (ModelRequest, ModelRequest("r", "s1", ConversationView([Message("user", "hi"), None], 1), ())),
])
def test_values_of_the_contract_pass(kind, value):
    assert value_problem(kind, value, "x") == ""


@pytest.mark.parametrize("kind, value, message", [
    (TurnResult, "done", "run_turn returned str, expected TurnResult (harness/contract/vocabulary.py)"),
    (TurnResult, TurnResult("s1", "finished"),
     "run_turn returned a TurnResult whose status is 'finished', expected TurnStatus"),
    (Observation, Observation(sessions=[SESSION]),
     "whose sessions is list, expected tuple[SessionView, ...]"),
    (Observation, Observation(sessions=(SESSION, None)), "whose sessions[1] is None"),
    (Observation, Observation(failure_events_logged=True), "failure_events_logged is bool, expected int"),
    (LifecycleEvent, LifecycleEvent(EventType.PROJECTED, "s1", data={"a": {1}}),
     "whose data['a'] is set, expected JSON data"),
    (LifecycleEvent, LifecycleEvent(EventType.PROJECTED, "s1", data={1: "x"}),
     "whose data key 1 is int, expected str"),
    (LifecycleEvent, LifecycleEvent(EventType.PROJECTED, "s1", data={"n": [1, 2**53 + 1]}),
     "whose data['n'][1] is int 9007199254740993, expected JSON data canonical JSON has a text "
     "for (RFC 8785"),
    (LifecycleEvent, LifecycleEvent(EventType.PROJECTED, "s1", data={"x": float("nan")}),
     "whose data['x'] is float nan, expected JSON data canonical JSON has a text for"),
    (LifecycleEvent, LifecycleEvent(EventType.PROJECTED, "s1", data={"t": "\udc00"}),
     "whose data['t'] is '\\udc00', expected JSON data canonical JSON has a text for"),
    (ImplementationInfo, ImplementationInfo("x", "1", ("teleport",)), "features[0] is 'teleport'"),
    (ModelRequest, ModelRequest("r", "s1", [Message("user", "hi")], ()),
     "whose messages is list, expected a read-only sequence of Message"),
    (ModelRequest, ModelRequest("r", "s1", "hi", ()), "whose messages is 'hi', expected a read-only"),
    (ModelRequest, ModelRequest("r", "s1", ConversationView([Message("user", "hi"), None], 2), ()),
     "whose messages[1] is None"),
])
def test_values_off_the_contract_name_the_field(kind, value, message):
    assert message in value_problem(kind, value, "run_turn returned")


def test_driver_results_follow_the_runtime_annotations():
    assert driver_result_problem("recover", RecoveryReport()) == ""
    assert driver_result_problem("concurrent_turn", TurnResult("s", TurnStatus.IDLE)) == ""
    assert "answer_approval returned None" in driver_result_problem("answer_approval", None)
    assert driver_result_problem("update_rules", object()) == ""  # -> None: not checked
    assert "open returned None, expected a Runtime" in driver_result_problem("open", None)

    class Half:
        def run_turn(self, *args: Any) -> None: ...

    problem = driver_result_problem("open", Half())
    assert "open returned Half, which is not a Runtime" in problem and "close" in problem
    assert "run_turn" not in problem.split("missing")[1]
    assert set(RUNTIME_METHODS) >= {"open_session", "run_turn", "recover", "close"}
