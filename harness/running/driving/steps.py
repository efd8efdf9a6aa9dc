"""The scenario's steps and their dispatch (:class:`Steps`).

Guarantees of :meth:`Steps.execute`: instance 0 is opened (a crash there restarts it), every
session is opened on the primary, then the steps run in order, each followed by the
``"quiescent"`` observation, and the run ends with ``"final"``; the first run error stops
the steps, a hang stops every observation after it. A crash of the primary during any step
drops it, restarts and recovers (:meth:`Instances.after`). Per step:

* ``answer`` answers exactly one approval wait (the next unanswered one, the last answered
  one again, or the one shown for a named tool call); with none to answer the step is a
  closed, ``skipped`` driver span saying why;
* ``concurrent_turn`` runs a turn on instance A until it is held (or ends), the same turn on
  a new instance B to its end (then B is closed and dropped), then releases A and collects
  its call: one chosen, replayable interleaving; A is always released, whatever happened.
  An implementation that does not declare ``multi_instance`` may refuse B (its ``open``
  raises): recorded as a refusal, no run error, and A finishes the turn alone;
* ``load_checkpoint`` hands the implementation the bytes of a fixture *it* declared (asked
  of it, never a path the harness opens) and records what the harness reads from them
  (size, sha256, the documented layout's content and expected messages); an undeclared
  fixture is a ``skipped`` span. An implementation that does not declare
  ``checkpoint_import`` may refuse the fixture (``load_checkpoint`` raises): recorded as a
  refusal, no run error.
"""

from __future__ import annotations

import hashlib
from pathlib import PurePosixPath
from typing import Any

from harness.scenarios import fixture_source
from harness.scenarios.checkpoint_fixture import read_fixture
from harness.contract import to_json
from harness.running.driving.calls import DriverCalls
from harness.running.driving.instances import Instances
from harness.running.driving.state import Hold, RunState
from harness.running.driving.store_probe import StoreProbe
from harness.faults.plan import Action
from harness.scenarios.loader import Step, StepKind
from harness.trace.record import Kind


def fixture_matches(name: str, declared: str) -> bool:
    """Does a step's ``fixture`` name this declared fixture? By path, file name, stem, or
    a stem prefix ending at a separator ("v1" names "fixtures/checkpoints/v1_basic.json")."""
    path = PurePosixPath(declared)
    stem = path.name.split(".")[0]
    return name in (declared, path.name, path.stem, stem) or any(
        stem.startswith(name + sep) for sep in "_-.")


class Steps:
    """Runs a scenario's sessions and steps on the run's primary instance."""

    def __init__(self, state: RunState, calls: DriverCalls, instances: Instances,
                 store: StoreProbe) -> None:
        self.state = state
        self.calls = calls
        self.instances = instances
        self.store = store

    def execute(self) -> None:
        state, instances = self.state, self.instances
        state.primary, outcome = instances.open()
        if outcome.kind == "crashed":
            instances.drop(state.primary)
            instances.restart()
        for config in state.scenario.sessions:
            if state.stopped:
                break
            primary = state.primary
            outcome = self.calls.drive(primary, "open_session", {"config": to_json(config)},
                                       lambda: state.runtime(primary).open_session(config))
            instances.after(primary, outcome)
        for step in state.scenario.steps:
            if state.stopped:
                break
            self.step(step)
            if not state.hung and not state.stopped:
                self.store.observe(state.primary, "quiescent")
        if not state.hung:
            self.store.observe(state.primary, "final")

    def step(self, step: Step) -> None:
        state, drive, after = self.state, self.calls.drive, self.instances.after
        primary = state.primary
        session = step.session or state.scenario.default_session
        if step.do is StepKind.TURN:
            text = state.world.expand(step.text)
            after(primary, drive(
                primary, "run_turn", {"session_id": session, "user_text": text},
                lambda: state.runtime(primary).run_turn(session, text)))
        elif step.do is StepKind.ANSWER:
            self.answer(primary, step)
        elif step.do is StepKind.UPDATE_RULES:
            rules, version = step.rules, step.permission_version
            if not state.bumps_version(session, version, "an update_rules step"):
                return
            after(primary, drive(
                primary, "update_rules",
                {"session_id": session, "rules": to_json(rules), "permission_version": version},
                lambda: state.runtime(primary).update_rules(session, rules, version)))
        elif step.do is StepKind.CANCEL:
            after(primary, drive(primary, "cancel", {"session_id": session},
                                 lambda: state.runtime(primary).cancel(session)))
        elif step.do is StepKind.RESTART:
            outcome = drive(primary, "close", {}, lambda: state.runtime(primary).close())
            if outcome.kind in ("returned", "raised", "crashed"):
                self.instances.drop(primary)
                self.instances.restart()
        elif step.do is StepKind.CONCURRENT_TURN:
            self.concurrent_turn(primary, session, step)
        elif step.do is StepKind.LOAD_CHECKPOINT:
            self.load_checkpoint(primary, session, step.fixture)
        elif step.do is StepKind.OBSERVE:
            self.store.observe(primary, f"observe:{step.label}" if step.label else "observe")

    def skip(self, instance: int, method: str, args: dict[str, Any], reason: str) -> None:
        # A closed span keeps checkers' driver-span logic simple; ``skipped`` says no call ran.
        self.state.event(Kind.DRIVER_CALL, instance, {"method": method, "args": args,
                                                      "skipped": reason})
        self.state.event(Kind.DRIVER_RETURN, instance, {"method": method, "result": None,
                                                        "skipped": reason})

    def answer(self, primary: int, step: Step) -> None:
        state = self.state
        approver = state.world.approver
        approve = step.approve
        if step.wait == "next":
            wait_id = approver.next_unanswered()
            missing = "no approval prompt is waiting for an answer"
        elif step.wait == "again":  # the same human answer delivered a second time
            wait_id = approver.last_answered()
            missing = "no wait was answered before, so none can be answered again"
        else:
            wait_id = self._wait_for_call(step.wait)
            missing = f"no approval prompt was shown for tool call {step.wait!r}"
        if wait_id is None:
            self.skip(primary, "answer_approval", {"wait_id": None, "approve": approve},
                      missing)
            return
        approver.mark_answered(wait_id)  # the human clicked once, whatever follows
        state.answered.add(wait_id)
        self.instances.after(primary, self.calls.drive(
            primary, "answer_approval", {"wait_id": wait_id, "approve": approve},
            lambda: state.runtime(primary).answer_approval(wait_id, approve)))

    def _wait_for_call(self, tool_call_id: str) -> str | None:
        """The wait shown for this tool call: the oldest one not answered yet, else the last
        one shown (so a scenario can answer a wait twice)."""
        prompts = [p for p in self.state.world.approver.prompted()
                   if p.tool_call_id == tool_call_id]
        unanswered = [p.wait_id for p in prompts if p.wait_id not in self.state.answered]
        if unanswered:
            return unanswered[0]
        return prompts[-1].wait_id if prompts else None

    def concurrent_turn(self, a: int, session: str, step: Step) -> None:
        state, drive, instances = self.state, self.calls.drive, self.instances
        text = state.world.expand(step.text)
        hold_at = step.hold_at.value if step.hold_at else None
        planned = next((f.failpoint.value for f in state.scenario.faults
                        if f.action is Action.HOLD), None)
        args = {"session_id": session, "user_text": text, "hold_at": hold_at or planned}
        if step.optional:
            args["optional"] = True  # fault_coverage exempts this hold
        hold = state.concurrent = Hold(a, hold_at)
        try:
            first = drive(a, "concurrent_turn", {**args, "role": "A"},
                          lambda: state.runtime(a).run_turn(session, text), allow_hold=True)
            held = first.kind == "held"
            if first.kind == "hung" or (state.stopped and not held):
                return
            # Without multi_instance declared, refusing the second live instance is the
            # documented way out (docs/contract.md, "Features"): B is dropped, A goes on.
            declared = {str(f) for f in state.info().features}
            b, opened = instances.open(extra={"concurrent_with": a},
                                       may_refuse="multi_instance" not in declared)
            if opened.kind == "returned":
                second = drive(b, "concurrent_turn", {**args, "role": "B", "held": held},
                               lambda: state.runtime(b).run_turn(session, text))
                if second.kind not in ("crashed", "hung"):
                    drive(b, "close", {}, lambda: state.runtime(b).close())
            instances.drop(b)
            if held:
                assert first.call is not None
                if state.hung:
                    state.world.kill(a)  # A wakes up dead and its thread ends
                with state.cond:
                    hold.released = True
                    state.cond.notify_all()
                if state.hung:
                    return
                first = self.calls.finish(a, "concurrent_turn", first.call)
            instances.after(a, first)
        finally:
            if not hold.released:
                with state.cond:
                    hold.released = True
                    state.cond.notify_all()
            state.concurrent = None

    def load_checkpoint(self, primary: int, session: str, name: str) -> None:
        state = self.state
        args: dict[str, Any] = {"session_id": session, "fixture": name}
        declared = tuple(state.info().checkpoint_fixtures)
        matches = [d for d in declared if fixture_matches(name, d)]
        if not matches:
            self.skip(primary, "load_checkpoint", {**args, "expected_messages": None,
                                                   "fixture_content": None},
                      f"the implementation declares no checkpoint fixture {name!r} "
                      f"(declared: {', '.join(declared) or 'none'})")
            return
        try:
            # Asked of the implementation: the harness never opens a path it names.
            fixture = fixture_source.fetch(state.impl, matches[0])
        except Exception as exc:  # noqa: BLE001 - any failure to hand it over is reported
            state.fail(f"declared checkpoint fixture {matches[0]!r} could not be had from the "
                       f"implementation: {type(exc).__name__}: {exc}")
            return
        data = fixture.content
        # What the harness itself reads from the bytes it passes (L1.6 judges the load on it;
        # null when the fixture is in no documented layout: the sidecar is all there is).
        expected = None if fixture.expected_messages is None else list(fixture.expected_messages)
        args.update({"path": matches[0], "expected_messages": expected,
                     "fixture_content": read_fixture(data),
                     "size_bytes": len(data),
                     "sha256": hashlib.sha256(data).hexdigest()})
        # Without checkpoint_import declared, refusing the fixture is a documented way out
        # (docs/contract.md, "Features"): the session goes on without it.
        declared = {str(f) for f in state.info().features}
        self.instances.after(primary, self.calls.drive(
            primary, "load_checkpoint", args,
            lambda: state.runtime(primary).load_checkpoint(session, data),
            may_refuse="checkpoint_import" not in declared))
