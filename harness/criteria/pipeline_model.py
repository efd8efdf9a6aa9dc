"""The documented lifecycle as a model: which failpoint hits a scenario implies, with no IUT.

A scenario plans faults at numbered hits of failpoints; an implementation calls the
failpoints itself. A planned fault is *neutral* when every implementation the docs allow
reaches its hit. This module walks a scenario through the pipeline of ``docs/lifecycle.md``
(turns, the operation pipeline and its failpoints, approvals, recovery) and the contract's
outcomes, on one *path*: wherever the docs leave a choice free that changes which
failpoints are hit, it asks a :class:`Chooser`, and :mod:`harness.criteria.neutrality`
enumerates every combination of answers.

Guarantees:

* pure and deterministic: :func:`walk` reads the scenario and the chooser only (no clock,
  no random, no implementation); the same answers give the same :class:`Path`;
* option 0 of every choice is what the reference implementation does, so the path of all
  zeros is the reference's: with ``every_failpoint`` it counts the hits of a real run of the
  reference (``tests/unit/harness/scenarios/test_scenarios_neutral.py`` compares them on a
  spread of the bundled suite; all 219 scenarios the model follows to the end agreed when
  it was written);
* a hit the docs *require* (a row of the pipeline table reached on the documented path) is
  always counted; a hit the docs leave free is a choice, asked only when a planned fault or
  a ``concurrent_turn`` hold sits at that failpoint (elsewhere it changes nothing). The free
  hits: the result-delivery failpoints when a denial or refusal is saved (the table's deny
  row lists none, "—"); every failpoint ``recover()`` might pass for the steps it takes
  (saving a cut-off call's ``unknown``, folding, projecting, showing a wait, ending a
  request); the decision point when a call of a cancelled session is closed, when an
  owner's answer decides a call, when revalidation refuses, and when a restarted or second
  instance takes up a call another instance decided ("decided again", L4.8); a second
  delivery's ``after_prepare``; the sandboxed result saved before its escalation wait;
* other free choices that change the path are choices too: whether a decision no one has
  to be asked for is committed with the operation record (before ``after_prepare``, where
  a rule change or a cancel there then comes after it) or after it, whether a restarted
  instance asks the classifier again for a call it decides again (the review numbers of
  a scripted classifier move), and where a turn notices a cancellation that arrived at a
  model-request failpoint (before the start record, before sending, or not there);
* everything else follows the docs as the reference reads them (precedence with the
  repeat guard after the layers nothing lifts, denial counters per version, the repeat
  budget, automatic retries up to the limit, escalation with ``sandbox_escalation``, a
  new message answering waits "no", lost waits driving nothing);
* what the model does not follow ends the path with :attr:`Path.stopped` saying why:
  instance A of a ``concurrent_turn`` after it is released, a ``load_checkpoint`` (the
  fixture and its failure table are the implementation's own), a rule change reusing a
  version (a run error), more than 64 restarts or 1,000 model requests in a turn. A fault
  still unfired there cannot be shown to fire.

Placeholders are expanded as a run with seed 0 would (``{{faker:...}}`` changes text, not
the shape of a call).
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field
from typing import Any, Sequence

from harness.contract import (
    ClassifierOutcome,
    DecisionSource,
    Failpoint,
    Rule,
    SessionConfig,
    ToolCall,
    ToolKind,
    args_digest,
    canonical_json,
)
from harness.criteria.facts import static_decision
from harness.faults.plan import Action, Fault
from harness.scenarios import Scenario, StepKind
from harness.world.model import DEFAULT_ANSWER, ScriptedResponse, StreamEnd
from harness.world.templates import Templates, file_sha256
from harness.world.tools import Behaviour

F = Failpoint
DELIVERY = (F.AFTER_RESULT_SAVED, F.DURING_DIAGNOSTICS_WRITE, F.DURING_CHECKPOINT_BUILD,
            F.AFTER_CHECKPOINT_SAVED, F.AFTER_PROJECTION)
"""The failpoints after a result record, in pipeline order."""
MODEL_POINTS = frozenset({F.BEFORE_MODEL_REQUEST.value, F.AFTER_MODEL_REQUEST_STARTED.value,
                          F.AFTER_MODEL_STREAM_ENDED.value})
FIXED = (DecisionSource.HARD_CONSTRAINT, DecisionSource.CAPABILITY, DecisionSource.PLAN_MODE,
         DecisionSource.EXPLICIT_DENY)
"""The layers nothing lifts; the repeat guard comes right after them (as in the reference)."""
BUDGET_FREE = (DecisionSource.CLASSIFIER, DecisionSource.CANCELLATION,
               DecisionSource.REVALIDATION)
RESTARTS_MAX = 64
REQUESTS_MAX = 1_000

# operation stages
PREPARED, DECIDED, WAITING, STARTED, ESCALATING, RECORDED = (
    "prepared", "decided", "waiting", "started", "escalating", "recorded")


# --------------------------------------------------------------------------- choices


@dataclass(frozen=True, slots=True)
class Choice:
    """One free choice on a path: what was free, the options, and the one taken."""

    label: str
    options: tuple[str, ...]
    picked: int

    def text(self) -> str:
        return f"{self.label}: {self.options[self.picked]}"


class Chooser:
    """Answers a path's choices from a prefix of picks (then 0), recording every one; the
    enumeration in :mod:`harness.criteria.neutrality` advances the prefix like an odometer."""

    def __init__(self, prefix: Sequence[int] = ()) -> None:
        self.prefix = tuple(prefix)
        self.taken: list[Choice] = []

    def pick(self, label: str, options: tuple[str, ...]) -> int:
        position = len(self.taken)
        picked = self.prefix[position] if position < len(self.prefix) else 0
        self.taken.append(Choice(label, options, picked))
        return picked


# --------------------------------------------------------------------------- the path


@dataclass(frozen=True, slots=True)
class Path:
    """What one path of a scenario did."""

    choices: tuple[Choice, ...]
    fired: tuple[frozenset[int], ...]
    """Per fault of the plan (plan order): the hits of its failpoint it fired on."""
    reached: dict[str, int]
    """Hits per failpoint over the path (live instances only)."""
    holds: tuple[tuple[int, bool], ...]
    """Per ``concurrent_turn`` step: (step index, whether instance A was held)."""
    stopped: str = ""
    """Why the model could not follow the rest of the scenario ("" when it did)."""

    def departures(self) -> tuple[Choice, ...]:
        """The choices this path made otherwise than the reference does."""
        return tuple(c for c in self.choices if c.picked != 0)


class _Crash(BaseException):
    def __init__(self, instance: int) -> None:
        self.instance = instance


class _Held(BaseException):
    """Instance A of a concurrent_turn reached its hold."""


class _Raised(BaseException):
    """``run_turn`` raised (a transport error or a cancelled stream, re-raised: M3)."""


class _Stop(BaseException):
    def __init__(self, why: str) -> None:
        self.why = why


# --------------------------------------------------------------------------- state


@dataclass(slots=True)
class _Session:
    config: SessionConfig
    rules: tuple[Rule, ...]
    version: int
    versions: set[int]
    responses: list[ScriptedResponse]
    served: int = 0
    cancelled: bool = False
    turn: str = "idle"
    phase: str = "ask"
    """What the loop does next: ``ask`` the model, run ``calls``, or ``done``."""
    pending: list[ToolCall] = field(default_factory=list)
    answer: int = -1
    """Which served answer the pending calls come from (a redelivery comes from another)."""
    open_requests: int = 0
    history_unknown: bool = False

    @property
    def owner_can_answer(self) -> bool:
        return self.config.interactive and self.config.owner_can_approve


@dataclass(slots=True)
class _Op:
    session: str
    call: ToolCall
    kind: ToolKind | None
    idempotent: bool
    answer: int
    stage: str = PREPARED
    permission: str = ""
    decided_by: DecisionSource | None = None
    decider: int = -1
    """The instance that took the decision in force."""
    version: int = 0
    trigger: str = ""
    start_mark: int = 0
    escalated: bool = False
    delivery: str = ""
    """"" (no result), "recorded", "checkpointed" or "projected"."""

    @property
    def name(self) -> str:
        return f"{self.session}/{self.call.tool_call_id}"

    @property
    def key(self) -> str:
        """The repeat guard's dedup key: a Bash call without its description."""
        args = self.call.args
        if self.kind is ToolKind.BASH or self.call.tool == "Bash":
            args = {k: v for k, v in args.items() if k != "description"}
        return args_digest(self.call.tool, args)


@dataclass(slots=True)
class _Wait:
    op: _Op
    purpose: str
    version: int
    trigger: str = ""
    status: str = "pending"
    prompted: bool = False


@dataclass(slots=True)
class _Hold:
    instance: int
    at: str | None
    planned: bool
    held: bool = False


# --------------------------------------------------------------------------- the walk


def walk(scenario: Scenario, chooser: Chooser, *, every_failpoint: bool = False) -> Path:
    """One path of ``scenario`` through the documented lifecycle, choices from ``chooser``.
    ``every_failpoint``: ask the free hits of every failpoint, not only of those a fault or
    a hold watches (the all-zero path then counts every hit the reference makes)."""
    walker = _Walk(scenario, chooser, every_failpoint)
    stopped = ""
    try:
        walker.steps()
    except _Stop as stop:
        stopped = stop.why
    return Path(tuple(chooser.taken), tuple(frozenset(f) for f in walker.fired),
                dict(walker.hits), tuple(walker.holds), stopped)


class _Walk:
    def __init__(self, scenario: Scenario, chooser: Chooser, every_failpoint: bool) -> None:
        self.scenario = scenario
        self.chooser = chooser
        self.faults: tuple[Fault, ...] = scenario.faults
        self.fired: list[set[int]] = [set() for _ in self.faults]
        self.watched = {f.failpoint.value for f in self.faults} | {
            s.hold_at.value for s in scenario.steps if s.hold_at is not None}
        if every_failpoint:
            self.watched = {f.value for f in Failpoint}
        required = {f.failpoint.value for f in self.faults if not f.optional} | {
            s.hold_at.value for s in scenario.steps if s.hold_at is not None and not s.optional}
        self.required_operation_points = bool(required - MODEL_POINTS)
        self.hits: dict[str, int] = {}
        self.holds: list[tuple[int, bool]] = []
        self.hold: _Hold | None = None
        self.instance = 0
        self.reviews = 0
        self.starts: list[tuple[_Op, str]] = []
        """Every start record, in order, with the path it writes ("" for none)."""
        templates = Templates(0)
        self.files = {templates.expand(p): templates.expand(c)
                      for p, c in sorted(scenario.files.items())}
        templates.set_files(self.files)
        script = [dataclasses.replace(r, tool_calls=tuple(
            ToolCall(c.tool_call_id, c.tool, templates.expand(c.args)) for c in r.tool_calls))
            for r in scenario.model]
        self.specs = {spec.name: spec for spec in scenario.tools}
        self.sessions = {
            c.session_id: _Session(c, c.rules, c.permission_version, {c.permission_version},
                                   [r for r in script if r.session == c.session_id
                                    for _ in range(r.repeat)])
            for c in scenario.sessions}
        self.behaviour_used = [0] * len(scenario.tool_behaviours)
        self.ops: dict[tuple[str, str], _Op] = {}
        self.waits: list[_Wait] = []
        self.prompts: list[_Wait] = []
        self.answered: list[_Wait] = []
        self.counters: dict[tuple[str, int], list[int]] = {}
        self.counted: set[tuple[str, int, str]] = set()
        self.budget: dict[tuple[str, str, int], int] = {}

    # -- choices and hits -------------------------------------------------------------

    def choose(self, label: str, *options: str) -> int:
        return self.chooser.pick(label, options)

    def hit(self, point: Failpoint, instance: int) -> str:
        """A hit the docs require; returns the action it suffered ("raise", ...) or ""."""
        name = point.value
        self.hits[name] = number = self.hits.get(name, 0) + 1
        for index, fault in enumerate(self.faults):
            if fault.failpoint is point and fault.fires(number):
                return self._act(index, fault, number, instance)
        hold = self.hold
        if hold is not None and not hold.held and hold.instance == instance and hold.at == name:
            hold.held = True
            raise _Held()
        return ""

    def maybe(self, point: Failpoint, instance: int, why: str, reference: bool) -> str:
        """A hit the docs leave free (``reference``: whether the reference passes it)."""
        if point.value not in self.watched:
            return ""
        passes, skips = f"passes {point.value}", f"passes no {point.value}"
        picked = self.choose(why, *((passes, skips) if reference else (skips, passes)))
        if (picked == 0) == reference:
            return self.hit(point, instance)
        return ""

    def _act(self, index: int, fault: Fault, number: int, instance: int) -> str:
        action = fault.action
        if action is Action.HOLD:
            hold = self.hold
            if hold is None or hold.held or hold.instance != instance:
                return ""  # a planned hold outside a concurrent turn does nothing
            hold.held = True
            self.fired[index].add(number)
            raise _Held()
        self.fired[index].add(number)
        if action is Action.CRASH:
            raise _Crash(instance)
        if action is Action.CHANGE_RULES:
            session = self.sessions[fault.params["session"]]
            self._new_rules(session, fault.rules(), int(fault.params["permission_version"]))
        elif action is Action.CANCEL:
            self._cancel(self.sessions[fault.params["session"]])
        return action.value

    # -- steps ------------------------------------------------------------------------

    def steps(self) -> None:
        for position, step in enumerate(self.scenario.steps):
            session = self.sessions[step.session or self.scenario.default_session]
            try:
                self._step(position, step, session)
            except _Crash:
                self._restart()
            except _Raised:
                pass

    def _step(self, position: int, step: Any, s: _Session) -> None:
        if step.do is StepKind.TURN:
            self.run_turn(self.instance, s, step.text)
        elif step.do is StepKind.ANSWER:
            self.answer(self.instance, step.wait, step.approve)
        elif step.do is StepKind.UPDATE_RULES:
            self._new_rules(s, step.rules, step.permission_version)
        elif step.do is StepKind.CANCEL:
            self._cancel(s)
        elif step.do is StepKind.RESTART:
            self.instance += 1
            self._recover_loop()
        elif step.do is StepKind.CONCURRENT_TURN:
            self._concurrent(position, step, s)
        elif step.do is StepKind.LOAD_CHECKPOINT:
            raise _Stop(f"step {position + 1} loads a checkpoint fixture: its conversation and "
                        "failure table are the implementation's own, so the repeat guard's "
                        "decisions after it are not known")

    def _new_rules(self, s: _Session, rules: Sequence[Rule], version: int) -> None:
        if version in s.versions:
            raise _Stop(f"a rule change reuses permission version {version} of "
                        f"{s.config.session_id}: the run stops with an error there")
        s.versions.add(version)
        s.rules, s.version = tuple(rules), version
        # A wait already shown may be closed by the change (a lost wait, contract.md) or
        # left pending and its answer revalidated (the reference).
        for wait in self._shown_waits(s, "permission"):
            if self.choose(f"the rule change to version {version} meets the shown wait of "
                           f"{wait.op.name}", "leaves it pending", "closes it") == 1:
                wait.status = "rejected"
                static = static_decision(s.config, s.rules, wait.op.call.tool,
                                         wait.op.call.args,
                                         wait.op.kind.value if wait.op.kind else None)
                if static.source in FIXED:
                    self._close(wait.op, DecisionSource.REVALIDATION)
                else:
                    wait.op.stage = PREPARED

    def _cancel(self, s: _Session) -> None:
        s.cancelled = True
        if s.turn in ("running", "awaiting_approval"):
            s.turn = "cancelled"
        for wait in self._shown_waits(s, "permission"):
            if self.choose(f"the cancellation of {s.config.session_id} meets the shown wait "
                           f"of {wait.op.name}", "leaves it pending", "closes it") == 1:
                wait.status = "rejected"
                self._close(wait.op, DecisionSource.CANCELLATION)

    def _shown_waits(self, s: _Session, purpose: str) -> list[_Wait]:
        return [w for w in self.waits if w.status == "pending" and w.prompted
                and w.purpose == purpose and w.op.session == s.config.session_id]

    @staticmethod
    def _close(op: _Op, decided_by: DecisionSource) -> None:
        op.stage, op.permission, op.decided_by, op.decider = DECIDED, "deny", decided_by, -1

    def _restart(self) -> None:
        self.instance += 1
        self._recover_loop()

    def _recover_loop(self) -> None:
        for _ in range(RESTARTS_MAX):
            try:
                self.recover(self.instance)
                return
            except _Crash:
                self.instance += 1
            except _Raised:
                return
        raise _Stop(f"more than {RESTARTS_MAX} restarts in a row")

    def _concurrent(self, position: int, step: Any, s: _Session) -> None:
        planned = next((f for f in self.faults if f.action is Action.HOLD), None)
        at = step.hold_at.value if step.hold_at is not None else None
        a = self.instance
        self.hold = _Hold(a, at, planned is not None)
        crashed = held = False
        try:
            self.run_turn(a, s, step.text)
        except _Held:
            held = True
        except _Crash:
            crashed = True
        except _Raised:
            pass
        self.hold = None
        self.holds.append((position, held))
        b = self.instance + 1000 + position  # B never drives a later step
        try:
            self.run_turn(b, s, step.text)
        except (_Crash, _Raised):
            pass  # a crashed B is dropped: nothing restarts it
        if held:
            raise _Stop(f"instance A of the concurrent_turn (step {position + 1}) goes on from "
                        "the store once B is done: the model does not follow it further")
        if crashed:
            self._restart()

    # -- turns ------------------------------------------------------------------------

    def run_turn(self, instance: int, s: _Session, text: str) -> None:
        # A new message answers every pending wait "no", after which the calls an earlier
        # turn left pending are settled; then the message; then the loop.
        self._refuse_waits(instance, s)
        while True:
            settled = self._settle(instance, s)
            if settled == "deferred":
                return
            if settled != "awaiting" or not self._refuse_waits(instance, s):
                break
        s.cancelled = False
        s.turn, s.phase = "running", "ask"
        self.drive(instance, s)

    def _refuse_waits(self, instance: int, s: _Session) -> bool:
        refused = [w for w in self.waits
                   if w.status == "pending" and w.op.session == s.config.session_id]
        for wait in refused:
            self._answered(instance, wait, approve=False, by="a new message")
        if refused and s.turn == "awaiting_approval":
            s.turn = "running"
        return bool(refused)

    def _settle(self, instance: int, s: _Session) -> str:
        while s.pending:
            outcome = self.run_call(instance, s, s.pending[0])
            if outcome != "done":
                return outcome
            s.pending.pop(0)
        return "done"

    def drive(self, instance: int, s: _Session) -> None:
        requests = 0
        while True:
            if s.cancelled:
                self._settle(instance, s)
                s.turn = "cancelled"
                return
            if s.pending:
                outcome = self.run_call(instance, s, s.pending[0])
                if outcome == "awaiting":
                    s.turn = "awaiting_approval"
                    return
                if outcome == "deferred":
                    return
                s.pending.pop(0)
                if not s.pending:
                    s.phase = "ask"
                continue
            if s.phase == "done":
                s.turn = "completed"
                return
            requests += 1
            if requests > REQUESTS_MAX:
                raise _Stop(f"more than {REQUESTS_MAX} model requests in one turn")
            if not self.ask_model(instance, s):
                return

    def ask_model(self, instance: int, s: _Session) -> bool:
        """One model request; False when the turn ended with it."""
        session = s.config.session_id
        self.hit(F.BEFORE_MODEL_REQUEST, instance)
        if s.cancelled and self.choose(
                f"{session} was cancelled at before_model_request; the turn notices it",
                "before recording the request's start", "later") == 0:
            s.turn = "cancelled"
            return False
        s.open_requests += 1
        self.hit(F.AFTER_MODEL_REQUEST_STARTED, instance)
        if s.cancelled and self.choose(
                f"{session} was cancelled before its request was sent; the turn notices it",
                "before sending it", "later") == 0:
            self.hit(F.AFTER_MODEL_STREAM_ENDED, instance)
            s.open_requests -= 1
            s.turn = "cancelled"
            return False
        answer = s.served
        response = (s.responses[answer] if answer < len(s.responses)
                    else ScriptedResponse(session, DEFAULT_ANSWER))
        s.served += 1
        self.hit(F.AFTER_MODEL_STREAM_ENDED, instance)
        s.open_requests -= 1
        if response.end is StreamEnd.END:
            if response.tool_calls:
                s.pending, s.phase, s.answer = self._order(response.tool_calls), "calls", answer
            else:
                s.phase = "done"
            return True
        if response.end is StreamEnd.EOF:
            s.turn, s.phase = "incomplete", "done"
            return False
        s.turn = "failed" if response.end is StreamEnd.TRANSPORT_ERROR else "cancelled"
        raise _Raised()

    def _order(self, calls: tuple[ToolCall, ...]) -> list[ToolCall]:
        """The order in which the calls of one answer are taken up: the docs fix the order
        of their results in the conversation, not of their pipelines. Explored when a
        required fault or hold sits at an operation failpoint (every order of up to four
        calls; the answer's order and its reverse beyond)."""
        if len(calls) < 2 or not self.required_operation_points:
            return list(calls)
        orders = (list(itertools.permutations(calls)) if len(calls) <= 4
                  else [calls, calls[::-1]])
        picked = self.choose(
            "the calls " + ", ".join(c.tool_call_id for c in calls) + " of one answer are "
            "taken up", *(" then ".join(c.tool_call_id for c in order) for order in orders))
        return list(orders[picked])

    # -- the operation pipeline -----------------------------------------------------------

    def run_call(self, instance: int, s: _Session, call: ToolCall) -> str:
        op = self._prepare(instance, s, call)
        while True:
            if op.stage == PREPARED:
                self._decide(instance, s, op)
            elif op.stage == DECIDED:
                if op.decider != instance and self._decide_again(instance, s, op):
                    continue
                if op.permission == "allow":
                    self._execute(instance, s, op)
                elif op.permission == "deny":
                    self._save(instance, s, op, "not_started", "permission_denied"
                               if op.decided_by is not DecisionSource.CANCELLATION else None)
                    self._deliver(instance, op, f"saving the refusal of {op.name}",
                                  documented=False)
                else:
                    self._open_wait(instance, s, op)
            elif op.stage == ESCALATING:
                self._execute(instance, s, op)
            elif op.stage == WAITING:
                return "awaiting"
            elif op.stage == STARTED:
                return "deferred"  # another instance holds it
            else:
                return "done"

    def _prepare(self, instance: int, s: _Session, call: ToolCall) -> _Op:
        key = (s.config.session_id, call.tool_call_id)
        op = self.ops.get(key)
        if op is not None:
            if op.answer != s.answer and op.stage == PREPARED:
                self.maybe(F.AFTER_PREPARE, instance,
                           f"a second delivery of {op.name} finds its record", reference=False)
            elif op.answer != s.answer and op.stage == RECORDED:
                op.answer = s.answer
                self.maybe(F.AFTER_PROJECTION, instance,
                           f"a second delivery of {op.name} answered from its saved result",
                           reference=False)
            return op
        spec = self.specs.get(call.tool)
        op = self.ops[key] = _Op(s.config.session_id, call, spec.kind if spec else None,
                                 bool(spec and spec.idempotent), s.answer)
        fault = self._fault_at(F.AFTER_PREPARE)
        grouped = False
        if fault is not None and fault.action in (Action.CHANGE_RULES, Action.CANCEL,
                                                  Action.CRASH):
            decision = self._decision(s, op)
            if decision is not None and self.choose(
                    f"the decision of {op.name} needs no one; it is committed",
                    "with the operation record (before after_prepare)",
                    "after after_prepare") == 0:
                self._apply(instance, s, op, decision)
                grouped = True
        self.hit(F.AFTER_PREPARE, instance)
        if grouped:
            self.hit(F.AFTER_PERMISSION_DECISION, instance)
        return op

    def _fault_at(self, point: Failpoint) -> Fault | None:
        number = self.hits.get(point.value, 0) + 1
        return next((f for f in self.faults if f.failpoint is point and f.fires(number)), None)

    def _decide_again(self, instance: int, s: _Session, op: _Op) -> bool:
        """Another (restarted or second) instance takes up a call decided but never started:
        the docs let it carry on from the decision or decide it again (L4.8)."""
        op.decider = instance
        if op.decided_by is DecisionSource.CLASSIFIER and op.permission != "ask" and (
                F.DURING_CLASSIFIER_REVIEW.value in self.watched
                or self.scenario.classifier.script) and self.choose(
                f"{op.name}, decided by the classifier and never started, is taken up again",
                "from its decision", "by a new review") == 1:
            op.stage = PREPARED
            return True
        self.maybe(F.AFTER_PERMISSION_DECISION, instance,
                   f"{op.name}, decided and never started, is taken up again", reference=False)
        return False

    def _decision(self, s: _Session, op: _Op) -> tuple[str, DecisionSource, str] | None:
        """(permission, decided_by, fallback trigger) by the precedence; None when only the
        classifier can decide (:meth:`_review` asks it)."""
        config = s.config
        if s.cancelled:
            return ("deny", DecisionSource.CANCELLATION, "")
        static = static_decision(config, s.rules, op.call.tool, op.call.args,
                                 op.kind.value if op.kind else None)
        if static.source in FIXED:
            return ("deny", static.source, "")
        if s.history_unknown:
            raise _Stop("the repeat guard's counts come from a loaded checkpoint")
        limit = config.thresholds.failure_repeat_limit
        if self.budget.get((op.session, op.key, s.version), 0) >= limit:
            return ("deny", DecisionSource.REPEAT_GUARD, "")
        if static.source is DecisionSource.ASK_RULE:
            return ("ask" if s.owner_can_answer else "deny", DecisionSource.ASK_RULE, "")
        if static.source is not DecisionSource.CLASSIFIER:
            return (static.permission.value, static.source, "")
        if s.owner_can_answer:
            trigger = self._trigger(s)
            if trigger:
                return ("ask", DecisionSource.CLASSIFIER, trigger)
        return None

    def _trigger(self, s: _Session) -> str:
        consecutive, cumulative = self.counters.get((s.config.session_id, s.version), [0, 0])
        thresholds = s.config.thresholds
        hit_consecutive = consecutive >= thresholds.consecutive_denials_max
        hit_cumulative = cumulative >= thresholds.cumulative_denials_max
        if hit_consecutive and hit_cumulative:
            return "both"
        return "consecutive" if hit_consecutive else "cumulative" if hit_cumulative else ""

    def _decide(self, instance: int, s: _Session, op: _Op) -> None:
        decision = self._decision(s, op)
        if decision is not None and decision[1] is DecisionSource.CANCELLATION:
            self._apply(instance, s, op, decision)
            self.maybe(F.AFTER_PERMISSION_DECISION, instance,
                       f"{op.name} is closed because its session was cancelled",
                       reference=True)
            return
        version = s.version
        risk = False
        if decision is None:
            decision, risk = self._review(instance, s, op)
        self._apply(instance, s, op, decision, version)
        if risk:
            self._count_risk_denial(s, op, version)
        elif decision[0] == "allow" and decision[1] is DecisionSource.CLASSIFIER:
            self._reset(s.config.session_id, version, consecutive=True)
        self.hit(F.AFTER_PERMISSION_DECISION, instance)

    def _apply(self, instance: int, s: _Session, op: _Op,
               decision: tuple[str, DecisionSource, str], version: int | None = None) -> None:
        op.permission, op.decided_by, op.trigger = decision
        op.stage, op.decider = DECIDED, instance
        op.version = s.version if version is None else version
        op.start_mark = len(self.starts)

    def _review(self, instance: int, s: _Session, op: _Op) -> tuple[tuple[str, DecisionSource, str], bool]:
        thresholds = s.config.thresholds
        operation = canonical_json(op.call.args)
        if len(operation) > thresholds.classifier_input_chars_max:
            return ("deny", DecisionSource.CLASSIFIER, ""), False
        self.reviews += 1
        outcome = self._verdict(self.reviews, operation, thresholds.classifier_timeout_s)
        version = s.version
        self.hit(F.DURING_CLASSIFIER_REVIEW, instance)
        if s.cancelled:
            return ("deny", DecisionSource.CANCELLATION, ""), False
        if s.version != version:
            return ("deny", DecisionSource.REVALIDATION, ""), False
        if outcome is ClassifierOutcome.ALLOW:
            return ("allow", DecisionSource.CLASSIFIER, ""), False
        return ("deny", DecisionSource.CLASSIFIER, ""), outcome is ClassifierOutcome.RISK_DENY

    def _verdict(self, number: int, operation: str, timeout_s: float) -> ClassifierOutcome:
        """What the world's scripted classifier answers to its ``number``-th review."""
        config = self.scenario.classifier
        override = next((e for e in config.script if e.review == number), None)
        delay = config.delay_s
        if override is not None:
            outcome = override.outcome
            if override.delay_s is not None:
                delay = override.delay_s
        elif len(operation) > config.input_chars_max:
            outcome = ClassifierOutcome.NO_VERDICT_OVERSIZE
        elif any(marker in operation for marker in config.dangerous):
            outcome = ClassifierOutcome.RISK_DENY
        else:
            outcome = ClassifierOutcome.ALLOW
        return ClassifierOutcome.TIMEOUT if delay > timeout_s else outcome

    def _count_risk_denial(self, s: _Session, op: _Op, version: int) -> None:
        once = (op.session, version, op.call.tool_call_id)
        if once in self.counted:
            return  # one identity counts once, whoever decides it again
        self.counted.add(once)
        counts = self.counters.setdefault((op.session, version), [0, 0])
        counts[0] += 1
        counts[1] += 1

    def _reset(self, session: str, version: int, *, consecutive: bool = False,
               cumulative: bool = False) -> None:
        counts = self.counters.get((session, version))
        if counts is not None:
            if consecutive:
                counts[0] = 0
            if cumulative:
                counts[1] = 0

    # -- waits ---------------------------------------------------------------------------

    def _open_wait(self, instance: int, s: _Session, op: _Op, purpose: str = "permission") -> None:
        # A permission wait is asked under the version of the decision that asks (a rule
        # change since then voids it before its prompt); an escalation under the one now.
        if purpose == "permission":
            static = static_decision(s.config, s.rules, op.call.tool, op.call.args,
                                     op.kind.value if op.kind else None)
            # No wait may exist for what a layer nothing lifts forbids (L3.4 judges a wait
            # by the rules in force when it is created); a decision the rules changed under
            # since it was taken is void: decided again, with or without a wait persisted
            # and closed unshown first.
            if static.source in FIXED or (s.version != op.version and self.choose(
                    f"the rules changed since {op.name} was decided to ask", "its wait is not "
                    "persisted, the call is decided again", "its wait is persisted, then "
                    "closed unshown") == 0):
                op.stage = PREPARED
                return
        wait = _Wait(op, purpose, op.version if purpose == "permission" else s.version,
                     op.trigger)
        self.waits.append(wait)
        op.stage = WAITING
        s.turn = "awaiting_approval"
        self.hit(F.AFTER_WAIT_PERSISTED, instance)
        self._prompt(instance, s, wait, documented=True)

    def _prompt(self, instance: int, s: _Session, wait: _Wait, *, documented: bool) -> None:
        """Show a committed wait, unless the rules changed since it was asked: it is then
        closed unshown and its call decided again (refused when a layer nothing lifts now
        forbids it; an escalation's sandboxed result stands)."""
        if wait.status != "pending":
            return
        op = wait.op
        static = static_decision(s.config, s.rules, op.call.tool, op.call.args,
                                 op.kind.value if op.kind else None)
        blocked = static.source in FIXED
        if blocked or (wait.purpose == "permission" and s.version != wait.version):
            wait.status = "rejected"
            s.turn = "running"
            if wait.purpose == "escalation":
                op.stage = RECORDED
                self._deliver(instance, op, f"the sandboxed result of {op.name} standing",
                              documented=False, reference=False)
            elif blocked:
                op.stage, op.permission, op.decided_by = DECIDED, "deny", DecisionSource.REVALIDATION
            else:
                op.stage = PREPARED
            return
        wait.prompted = True
        self.prompts.append(wait)
        if documented:
            self.hit(F.AFTER_PROMPT, instance)
        else:
            self.maybe(F.AFTER_PROMPT, instance,
                       f"recover() showing the wait of {op.name} committed but never shown",
                       reference=False)

    def answer(self, instance: int, which: str, approve: bool) -> None:
        if which == "next":
            wait = next((w for w in self.prompts if w not in self.answered), None)
        elif which == "again":
            wait = self.answered[-1] if self.answered else None
        else:
            shown = [w for w in self.prompts if w.op.call.tool_call_id == which]
            unanswered = [w for w in shown if w not in self.answered]
            wait = unanswered[0] if unanswered else (shown[-1] if shown else None)
        if wait is None:
            return  # recorded as skipped
        self.answered.append(wait)
        if wait.status != "pending":
            return  # a lost wait: the answer changes nothing and drives nothing
        s = self.sessions[wait.op.session]
        self._answered(instance, wait, approve, by="the owner's answer")
        s.turn = "running"
        if self.run_call(instance, s, wait.op.call) == "deferred":
            return
        self.drive(instance, s)

    def _answered(self, instance: int, wait: _Wait, approve: bool, by: str) -> None:
        op, session = wait.op, wait.op.session
        wait.status = "approved" if approve else "rejected"
        if wait.purpose == "escalation":
            if approve:
                op.stage, op.decided_by, op.version = ESCALATING, DecisionSource.APPROVAL, wait.version
                op.escalated = True
            else:
                op.stage = RECORDED
                self._deliver(instance, op, f"the sandboxed result of {op.name} standing after "
                              "its escalation was refused", documented=False, reference=False)
            return
        op.stage, op.decider = DECIDED, instance
        op.permission, op.decided_by, op.version = ("allow" if approve else "deny",
                                                    DecisionSource.APPROVAL, wait.version)
        if approve:
            self._reset(session, wait.version, consecutive=True)
        if wait.trigger in ("cumulative", "both"):
            self._reset(session, wait.version, cumulative=True)
        self.maybe(F.AFTER_PERMISSION_DECISION, instance,
                   f"{by} decides {op.name}", reference=False)

    # -- execution ------------------------------------------------------------------------

    def _refusal(self, s: _Session, op: _Op) -> DecisionSource | None:
        """Revalidation before the start (docs/contract.md, "Revalidation before the
        start"); None when it passes (an exact grant re-binds to the version in force)."""
        if s.cancelled:
            return DecisionSource.CANCELLATION
        path = op.call.args.get("path")
        if (op.kind is ToolKind.FILE_EDIT and op.call.args.get("expect_sha")
                and any(other is not op and written == path
                        for other, written in self.starts[op.start_mark:])):
            return DecisionSource.REVALIDATION
        if s.version == op.version:
            return None
        static = static_decision(s.config, s.rules, op.call.tool, op.call.args,
                                 op.kind.value if op.kind else None)
        if static.source in FIXED:
            return (DecisionSource.REVALIDATION if op.decided_by is DecisionSource.APPROVAL
                    else static.source)
        if static.source is DecisionSource.EXACT_GRANT:
            op.version = s.version
            return None
        return DecisionSource.REVALIDATION

    def _refuse(self, instance: int, s: _Session, op: _Op, refusal: DecisionSource,
                started: bool = False) -> None:
        if op.escalated:  # the sandboxed result stands; only the escalation is refused
            op.stage = RECORDED
            self._deliver(instance, op, f"the sandboxed result of {op.name} standing after "
                          "revalidation refused its escalation", documented=False,
                          reference=False)
            return
        op.stage, op.permission, op.decided_by, op.decider = DECIDED, "deny", refusal, instance
        if not started:
            self.maybe(F.AFTER_PERMISSION_DECISION, instance,
                       f"revalidation refusing {op.name}", reference=False)

    def _execute(self, instance: int, s: _Session, op: _Op) -> None:
        refusal = self._refusal(s, op)
        if refusal is not None:
            return self._refuse(instance, s, op, refusal)
        self.hit(F.AFTER_REVALIDATION, instance)
        refusal = self._refusal(s, op)
        if refusal is not None:
            return self._refuse(instance, s, op, refusal)
        op.stage = STARTED
        writes = op.kind is not ToolKind.READ
        self.starts.append((op, op.call.args.get("path", "") if writes else ""))
        self._reset(op.session, s.version, consecutive=True)
        self.hit(F.AFTER_START_RECORDED, instance)
        refusal = self._refusal(s, op)
        if refusal is not None:  # after the start record: no decision point any more
            return self._refuse(instance, s, op, refusal, started=True)
        sandboxed = not op.escalated
        outcome, kind, escalation = self._invoke(op, s.config.thresholds.auto_retries_max,
                                                 sandboxed)
        self.hit(F.AFTER_TOOL_RETURNED, instance)
        if escalation and sandboxed and s.owner_can_answer:
            op.stage, op.delivery = WAITING, "recorded"
            self.maybe(F.AFTER_RESULT_SAVED, instance,
                       f"the sandboxed result of {op.name}, saved before its escalation wait",
                       reference=False)
            self._open_wait(instance, s, op, purpose="escalation")
            return
        self._save(instance, s, op, outcome, kind)
        self._deliver(instance, op, "", documented=True)

    def _invoke(self, op: _Op, retries_max: int, sandboxed: bool) -> tuple[str, str | None, bool]:
        """(outcome, failure kind, escalation requested) of a run, retries included."""
        retries, returned = 0, False
        while True:
            behaviour = self._behaviour(op)
            if op.call.tool not in self.specs or behaviour is Behaviour.UNAVAILABLE:
                if retries < retries_max:
                    retries += 1
                    continue
                return ("failed" if returned else "not_started"), "transient", False
            returned = True
            status, kind, escalation = self._effect(op, behaviour)
            if (status == "error" and kind == "transient" and op.idempotent
                    and retries < retries_max):
                retries += 1
                continue
            if status == "ok":
                return "succeeded", None, False
            if escalation:
                return "failed", "permission_denied", True
            return ("unknown" if kind == "unknown" else "failed"), kind, False

    def _behaviour(self, op: _Op) -> Behaviour:
        for wanted in ("call", "tool"):
            for index, entry in enumerate(self.scenario.tool_behaviours):
                selector = entry.call if wanted == "call" else entry.tool
                target = op.call.tool_call_id if wanted == "call" else op.call.tool
                if selector and selector == target and self.behaviour_used[index] < entry.times:
                    self.behaviour_used[index] += 1
                    return entry.behaviour
        return Behaviour.OK

    def _effect(self, op: _Op, behaviour: Behaviour) -> tuple[str, str | None, bool]:
        """What the world's fake tool returns: (status, error kind, escalation requested)."""
        if behaviour is Behaviour.PARAM_ERROR:
            return "error", "param_error", False
        if behaviour is Behaviour.FAIL:
            return "error", "failed", False
        if behaviour in (Behaviour.TRANSIENT, Behaviour.HANG):
            return "error", "transient", False
        if behaviour is Behaviour.UNKNOWN:
            return "error", "unknown", False
        args, kind = op.call.args, op.kind
        path = args.get("path")
        partial = behaviour is Behaviour.PARTIAL_ESCALATE
        applied = True
        if kind is ToolKind.READ:
            applied = False
            if isinstance(path, str) and path not in self.files:
                return "error", "failed", False
        elif kind is ToolKind.WRITE and isinstance(path, str):
            content = args.get("content", "")
            if not isinstance(content, str):
                return "error", "param_error", False
            self.files[path] = content[: len(content) // 2] if partial else content
        elif kind is ToolKind.FILE_EDIT:
            old, new = args.get("old"), args.get("new")
            if not (isinstance(path, str) and isinstance(old, str) and isinstance(new, str)):
                return "error", "param_error", False
            content = self.files.get(path)
            if content is None:
                return "error", "failed", False
            expected, actual = args.get("expect_sha"), file_sha256(content)
            if expected and expected not in (actual, actual.removeprefix("sha256:")):
                return "error", "failed", False
            if old not in content:
                return "error", "failed", False
            self.files[path] = content.replace(old, new, 1)
        elif kind is ToolKind.BASH:
            command = args.get("command")
            if not isinstance(command, str) or not command:
                return "error", "param_error", False
        if partial and applied:
            return "error", "permission_denied", True
        return "ok", None, False

    def _save(self, instance: int, s: _Session, op: _Op, outcome: str, kind: str | None) -> None:
        op.stage, op.delivery = RECORDED, "recorded"
        consumes = (outcome == "not_started" and kind == "permission_denied"
                    and op.decided_by not in BUDGET_FREE) or (
            outcome in ("failed", "unknown") and kind in ("failed", "param_error", "unknown"))
        if consumes:
            budget = (op.session, op.key, op.version)
            self.budget[budget] = self.budget.get(budget, 0) + 1
        elif outcome == "succeeded":
            for budget in [b for b in self.budget if b[:2] == (op.session, op.key)]:
                del self.budget[budget]

    def _deliver(self, instance: int, op: _Op, why: str, *, documented: bool,
                 reference: bool = True) -> None:
        """After a result record: diagnostics, checkpoint, projection (L4.4: a checkpoint
        that fails to build skips after_checkpoint_saved; the result is still projected)."""
        def at(point: Failpoint) -> str:
            if documented:
                return self.hit(point, instance)
            return self.maybe(point, instance, why, reference)

        at(F.AFTER_RESULT_SAVED)
        at(F.DURING_DIAGNOSTICS_WRITE)
        if at(F.DURING_CHECKPOINT_BUILD) != Action.RAISE.value:
            op.delivery = "checkpointed"
            at(F.AFTER_CHECKPOINT_SAVED)
        op.delivery = "projected"
        at(F.AFTER_PROJECTION)

    # -- recovery -------------------------------------------------------------------------

    def recover(self, instance: int) -> None:
        """docs/lifecycle.md, "Recovery": what a restarted instance does with the store."""
        for op in list(self.ops.values()):
            if op.stage == STARTED:
                self._save(instance, self.sessions[op.session], op, "unknown", "unknown")
                self.maybe(F.AFTER_RESULT_SAVED, instance,
                           f"recover() saving the unknown result of {op.name}, cut off by a "
                           "crash", reference=False)
        for s in self.sessions.values():
            while s.open_requests > 0:
                s.open_requests -= 1
                self.maybe(F.AFTER_MODEL_STREAM_ENDED, instance,
                           f"recover() ending a request of {s.config.session_id} a crash left "
                           "open", reference=False)
        for op in list(self.ops.values()):
            if op.stage == RECORDED and op.delivery == "recorded":
                why = f"recover() folding the saved result of {op.name} into a checkpoint"
                self.maybe(F.DURING_DIAGNOSTICS_WRITE, instance, why, reference=False)
                if self.maybe(F.DURING_CHECKPOINT_BUILD, instance, why,
                              reference=False) != Action.RAISE.value:
                    op.delivery = "checkpointed"
                    self.maybe(F.AFTER_CHECKPOINT_SAVED, instance, why, reference=False)
        for op in list(self.ops.values()):
            if op.stage == RECORDED and op.delivery != "projected":
                op.delivery = "projected"
                self.maybe(F.AFTER_PROJECTION, instance,
                           f"recover() projecting the result of {op.name}", reference=False)
        for wait in list(self.waits):
            if wait.status == "pending" and not wait.prompted:
                self._prompt(instance, self.sessions[wait.op.session], wait, documented=False)
        for s in self.sessions.values():
            if s.turn == "running":
                self.drive(instance, s)
        for s in self.sessions.values():
            if s.cancelled and s.turn != "running":
                self._settle(instance, s)
