"""The simulated world: every port an implementation under test (IUT) may use, composed.

:class:`SimWorld` implements :class:`harness.contract.World` and owns the run's ground truth:
the scripted model, the scripted classifier, the fake tools with their fake filesystem and
side-effect ledger, the scripted approver, the fake UI, the virtual clock, the fault plan and
the single ordered event log.

Guarantees:

* everything an IUT does through a port is recorded, in order, as one
  :class:`~harness.trace.record.TraceEvent` tagged with the calling instance; ``emit`` becomes a
  ``LIFECYCLE_EVENT``;
* ``failpoint(name, ctx)`` with a name outside the :class:`~harness.contract.Failpoint`
  catalogue is refused like a bad argument (below): not counted, not reached, the run fails;
* ``failpoint(name, ctx)`` counts the hit (1-based, per name, over the run), consults the
  fault plan, records a ``FAILPOINT`` event (name, context, hit, action, params), lets the
  runner probe the durable store, then carries the action out: ``crash`` marks the instance
  dead and raises :class:`~harness.contract.SimulatedCrash`, ``raise`` raises
  :class:`~harness.contract.InjectedFault`, ``delay`` advances the virtual clock,
  ``change_rules`` / ``cancel`` / ``hold`` are handed to the runner's hooks;
* the runner's probe hook is called right after ``TOOL_EXECUTED``, ``APPROVAL_PROMPT``,
  ``UI_PUBLISH`` and every ``FAILPOINT`` is recorded;
* a dead instance (crashed, or abandoned by the runner) can no longer act: each of its port
  calls raises ``SimulatedCrash`` and records nothing;
* once the runner has admitted a thread (:meth:`SimWorld.admit_thread`), only admitted
  threads may use an instance's ports: a call from any other thread (one the implementation
  started itself, whose timing no seed controls) records nothing, raises
  :class:`ForeignThreadCall` into that thread, and is reported once per port and thread by
  :meth:`SimWorld.take_foreign_calls` (the runner fails the scenario with it);
* a port argument that is not of the contract's types all the way down (a ``set`` in an
  event's data, a list where a tuple belongs...: :mod:`harness.contract.value_checks`) is refused
  likewise: nothing recorded, :class:`~harness.contract.ContractError` raised into the
  implementation, one message for the runner naming the port and the field;
* nothing here reads the wall clock or global randomness: one ``random.Random`` seeds the
  Faker that expands ``{{faker:...}}`` placeholders, in a fixed order (files, then the model
  script, then whatever the runner expands).

Each instance talks to the world through its own :meth:`SimWorld.port`; the world itself acts
as the port of instance :attr:`SimWorld.instance`.
"""

from __future__ import annotations

import enum
import itertools
import random
import re
import threading
from dataclasses import replace
from typing import Any, Iterable, Mapping, NoReturn, Protocol, Sequence

from harness.contract import (
    ApprovalPrompt,
    ClassifierRequest,
    ClassifierVerdict,
    ContractError,
    Failpoint,
    InjectedFault,
    LifecycleEvent,
    ModelRequest,
    Projection,
    Rule,
    SessionConfig,
    SimulatedCrash,
    Thresholds,
    ToolCall,
    ToolInvocation,
    ToolResult,
    ToolSpec,
    to_json,
)
from harness.contract.value_checks import read_only_sequence, value_problem
from harness.faults.plan import Action, Fault, FaultPlan
from harness.trace.record import Kind, Source, TraceEvent
from harness.world.approver import ScriptedApprover
from harness.world.classifier import ClassifierConfig, ScriptedClassifier
from harness.world.clock import VirtualClock
from harness.world.log import Channel, EventLog
from harness.world.model import ScriptedModel, ScriptedResponse, ScriptedStream
from harness.world.templates import Templates
from harness.world.tools import FakeTools, ToolBehaviour
from harness.world.ui import FakeUI

_CATALOGUE = frozenset(point.value for point in Failpoint)
"""The failpoint names an implementation may call (anything else is refused)."""


MODEL_REQUEST_MESSAGES_MAX = 1_000_000
"""The most messages one model request may carry (a read-only sequence is read only this far)."""

_DEFAULT_THREAD_NAME = re.compile(r"^(Thread|Dummy|ThreadPoolExecutor)-\d+")


class ForeignThreadCall(BaseException):
    """Raised into a thread the harness did not start when it calls a world port. Not an
    ``Exception``, so a background worker's ``except Exception`` does not swallow it."""


class WorldHooks(Protocol):
    """What the world asks of the runner (which owns the live runtimes and the threads)."""

    def probe(self, instance: int, label: str) -> None:
        """Read the durable store now (an ObservationPoint labelled ``label``)."""

    def change_rules(self, instance: int, session_id: str, rules: tuple[Rule, ...],
                     permission_version: int, failpoint: str) -> None:
        """Call the live runtime's ``update_rules`` re-entrantly."""

    def cancel(self, instance: int, session_id: str, failpoint: str) -> None:
        """Call the live runtime's ``cancel`` re-entrantly."""

    def hold_requested(self, instance: int, failpoint: str, planned: bool) -> bool:
        """Should ``instance`` be held at this failpoint (a concurrent turn is running)?"""

    def hold(self, instance: int, failpoint: str) -> None:
        """Block the calling instance until the runner releases it."""


class NoHooks:
    """Hooks for a world used without a runner: no probes, no runtime, never hold."""

    def probe(self, instance: int, label: str) -> None:
        pass

    def change_rules(self, instance: int, session_id: str, rules: tuple[Rule, ...],
                     permission_version: int, failpoint: str) -> None:
        pass

    def cancel(self, instance: int, session_id: str, failpoint: str) -> None:
        pass

    def hold_requested(self, instance: int, failpoint: str, planned: bool) -> bool:
        return False

    def hold(self, instance: int, failpoint: str) -> None:
        pass


def _jsonable(value: Any) -> Any:
    try:
        return to_json(value)
    except ContractError:
        if isinstance(value, dict):
            return {str(k): _jsonable(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [_jsonable(v) for v in value]
        return repr(value)


class SimWorld:
    def __init__(
        self,
        *,
        rng: random.Random,
        sessions: Sequence[SessionConfig] = (),
        tools: Sequence[ToolSpec] = (),
        files: Mapping[str, str] | None = None,
        classifier: ClassifierConfig = ClassifierConfig(),
        model: Sequence[ScriptedResponse] = (),
        behaviours: Sequence[ToolBehaviour] = (),
        faults: FaultPlan | Iterable[Fault] = (),
        hooks: WorldHooks | None = None,
        log: EventLog | None = None,
        clock: VirtualClock | None = None,
    ) -> None:
        self.rng = rng
        self.clock = clock if clock is not None else VirtualClock()
        self.log = log if log is not None else EventLog()
        self.hooks: WorldHooks = hooks if hooks is not None else NoHooks()
        self.plan = faults if isinstance(faults, FaultPlan) else FaultPlan(tuple(faults))
        self.templates = Templates(rng.getrandbits(64))
        expanded_files = {self.templates.expand(path): self.templates.expand(content)
                          for path, content in sorted((files or {}).items())}
        self.templates.set_files(expanded_files)
        script = tuple(
            replace(response, text=self.templates.expand(response.text), tool_calls=tuple(
                ToolCall(call.tool_call_id, call.tool, self.templates.expand(call.args))
                for call in response.tool_calls))
            for response in model
        )
        self.sessions = {config.session_id: config for config in sessions}
        specs: dict[str, ToolSpec] = {}
        for spec in [*tools, *(spec for config in sessions for spec in config.tools)]:
            specs.setdefault(spec.name, spec)
        self.model = ScriptedModel(script)
        self.classifier = ScriptedClassifier(classifier, self.clock, self._timeout_for)
        self.tools = FakeTools(tuple(specs.values()), behaviours, expanded_files, self.clock)
        self.approver = ScriptedApprover()
        self.ui = FakeUI()
        self.instance = 0
        self._hits: dict[str, int] = {}
        self._crashes: dict[int, tuple[str, SimulatedCrash]] = {}
        self._raised: dict[int, list[BaseException]] = {}
        self._channels: dict[int, Channel] = {}
        self._lock = threading.Lock()
        self._admitted: dict[int, set[threading.Thread]] = {}
        self._foreign: list[str] = []
        self._checked_messages: dict[int, Any] = {}
        """Message objects of earlier model requests that passed the contract check, by id
        (held, so an id cannot be reused): see :meth:`_check_model_request`."""

    # -- for the runner --------------------------------------------------------------------

    def port(self, instance: int) -> WorldPort:
        """The world as seen by one instance (every event it causes is tagged with it)."""
        return WorldPort(self, instance)

    def expand(self, value: Any) -> Any:
        return self.templates.expand(value)

    def admit_thread(self, instance: int, thread: threading.Thread) -> None:
        """Let ``thread`` (started by the runner) use ``instance``'s ports. Before the first
        admission every thread may (a world used without a runner, e.g. in unit tests)."""
        with self._lock:
            self._admitted.setdefault(instance, set()).add(thread)

    def take_foreign_calls(self) -> list[str]:
        """One message per (port, thread) refused since the last call (then forgotten)."""
        with self._lock:
            taken, self._foreign = self._foreign, []
            return taken

    def _check_arg(self, instance: int, port: str, kind: Any, value: Any) -> None:
        problem = value_problem(kind, value, f"world port {port} was called with")
        if problem:
            self._refuse_arg(instance, port, problem)

    def _refuse_arg(self, instance: int, port: str, problem: str) -> NoReturn:
        problem += f" (instance {instance})"
        with self._lock:
            if problem not in self._foreign and not self.log.is_dead(instance):
                self._foreign.append(problem)
        raise ContractError(problem)

    def _check_model_request(self, instance: int, request: Any) -> None:
        """:meth:`_check_arg` of a model request, without walking again a message object an
        earlier request of this run passed with: an implementation that keeps its
        conversation hands back the same (frozen) message objects, and a request carries
        the whole session, so checking every message made each request cost more than the
        last. Anything off this path (another type, a problem) gets the full check, which
        names the first problem exactly as before."""
        checked = self._checked_messages
        if type(request) is ModelRequest and type(request.messages) is tuple:
            fresh = tuple(message for message in request.messages
                          if checked.get(id(message)) is not message)
            if not value_problem(ModelRequest, replace(request, messages=fresh), ""):
                for message in fresh:
                    checked[id(message)] = message
                return
        self._check_arg(instance, "open_model_stream", ModelRequest, request)

    def _check_thread(self, instance: int, port: str) -> None:
        with self._lock:
            if not self._admitted:
                return
            thread = threading.current_thread()
            if thread in self._admitted.get(instance, ()):
                return
            # Python's default names count threads process-wide: the count would make the
            # message (and the trace's error) differ between two runs of one scenario.
            name = _DEFAULT_THREAD_NAME.sub(r"\1-?", thread.name)
            message = (f"world port {port} was called by instance {instance} from thread "
                       f"{name!r}, which the harness did not start; an implementation "
                       "must make every world call from the thread of the driver call that "
                       "caused it (other threads make the run's order depend on timing)")
            if message not in self._foreign and not self.log.is_dead(instance):
                self._foreign.append(message)
        raise ForeignThreadCall(message)

    def kill(self, instance: int) -> None:
        """Declare an instance dead: from now on its port calls raise and record nothing."""
        self.log.kill(instance)

    def failpoints_reached(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(sorted(self._hits))

    def hits(self, failpoint: str) -> int:
        with self._lock:
            return self._hits.get(failpoint, 0)

    def take_crash(self, instance: int) -> tuple[str, SimulatedCrash] | None:
        """The failpoint at which a crash fault fired in ``instance``, and the exception
        raised there (once; the runner compares it with what came out of the call)."""
        with self._lock:
            return self._crashes.pop(instance, None)

    def take_raised(self, instance: int) -> list[BaseException]:
        """World errors raised into ``instance`` since the last call (then forgotten)."""
        with self._lock:
            return self._raised.pop(instance, [])

    def ledger(self) -> tuple[TraceEvent, ...]:
        return tuple(e for e in self.log.events() if e.kind == Kind.TOOL_EXECUTED)

    # -- internals ---------------------------------------------------------------------------

    def _timeout_for(self, session_id: str) -> float:
        config = self.sessions.get(session_id)
        return (config.thresholds if config else Thresholds()).classifier_timeout_s

    def _guard(self, instance: int, port: str = "") -> None:
        if self.log.is_dead(instance):
            raise SimulatedCrash(f"instance {instance} is dead: the world refuses its calls")
        if port:
            self._check_thread(instance, port)

    def _note_raised(self, instance: int, error: BaseException) -> None:
        with self._lock:
            self._raised.setdefault(instance, []).append(error)

    def channel(self, instance: int) -> Channel:
        with self._lock:
            channel = self._channels.get(instance)
            if channel is None:
                channel = Channel(
                    instance,
                    lambda kind, data: self._record(Source.WORLD, kind, instance, data),
                    lambda: self._guard(instance, "next_chunk (model stream)"),
                    lambda error: self._note_raised(instance, error),
                )
                self._channels[instance] = channel
            return channel

    def _record(self, source: str, kind: str, instance: int, data: dict[str, Any]) -> None:
        self.log.append(source, kind, instance, data, guarded=True)

    # -- the ports, for one instance ---------------------------------------------------------

    def _open_model_stream(self, instance: int, request: ModelRequest) -> ScriptedStream:
        self._guard(instance, "open_model_stream")
        if isinstance(request, ModelRequest) and type(request.messages) is not tuple:
            request = replace(request, messages=self._messages_read_once(
                instance, request.messages))
        self._check_model_request(instance, request)
        return self.model.open(request, self.channel(instance))

    def _messages_read_once(self, instance: int, messages: Any) -> Any:
        """A request's messages given as a read-only sequence, read once into a tuple: what
        is checked, recorded and answered is one reading, never more than
        :data:`MODEL_REQUEST_MESSAGES_MAX` items (a sequence that does not end is refused, not
        read until memory runs out). Anything that is not a sequence is left to the check."""
        if not read_only_sequence(messages):
            return messages
        try:
            read = tuple(itertools.islice(iter(messages), MODEL_REQUEST_MESSAGES_MAX + 1))
        except Exception as exc:
            self._refuse_arg(instance, "open_model_stream", (
                f"world port open_model_stream was called with a ModelRequest whose messages "
                f"could not be read: {type(exc).__name__}: {exc}"))
        if len(read) > MODEL_REQUEST_MESSAGES_MAX:
            self._refuse_arg(instance, "open_model_stream", (
                f"world port open_model_stream was called with a ModelRequest of more than "
                f"{MODEL_REQUEST_MESSAGES_MAX:,} messages"))
        return read

    def _review(self, instance: int, request: ClassifierRequest) -> ClassifierVerdict:
        self._guard(instance, "review")
        self._check_arg(instance, "review", ClassifierRequest, request)
        return self.classifier.review(request, self.channel(instance))

    def _execute_tool(self, instance: int, invocation: ToolInvocation) -> ToolResult:
        self._guard(instance, "execute_tool")
        self._check_arg(instance, "execute_tool", ToolInvocation, invocation)
        result = self.tools.execute(invocation, self.channel(instance))
        self.hooks.probe(instance, "probe:tool_executed")
        return result

    def _prompt_approval(self, instance: int, prompt: ApprovalPrompt) -> None:
        self._guard(instance, "prompt_approval")
        self._check_arg(instance, "prompt_approval", ApprovalPrompt, prompt)
        self.approver.prompt(prompt, self.channel(instance))
        self.hooks.probe(instance, "probe:approval_prompt")

    def _publish(self, instance: int, projection: Projection) -> None:
        self._guard(instance, "publish")
        self._check_arg(instance, "publish", Projection, projection)
        self.ui.publish(projection, self.channel(instance))
        self.hooks.probe(instance, "probe:ui_publish")

    def _now(self, instance: int) -> float:
        self._guard(instance, "now")
        return self.clock.now()

    def _emit(self, instance: int, event: LifecycleEvent) -> None:
        self._guard(instance, "emit")
        self._check_arg(instance, "emit", LifecycleEvent, event)
        self._record(Source.IUT, Kind.LIFECYCLE_EVENT, instance, {"event": _jsonable(event)})

    def _failpoint(self, instance: int, name: Failpoint | str, context: dict[str, Any]) -> None:
        self._guard(instance, "failpoint")
        self._check_arg(instance, "failpoint", dict[str, Any], context or {})
        point = name.value if isinstance(name, enum.Enum) else str(name)
        if point not in _CATALOGUE:
            shown = point if len(point) <= 80 else point[:80] + "..."
            self._refuse_arg(instance, "failpoint", (
                f"world port failpoint was called with name {shown!r}, which is not in the "
                "failpoint catalogue (harness.contract.Failpoint; docs/lifecycle.md, "
                "\"Failpoint preconditions\"): an unknown point is a protocol error, neither "
                "counted nor reached; call only the catalogue's points, spelled as there"))
        with self._lock:
            hit = self._hits.get(point, 0) + 1
            self._hits[point] = hit
        found = self.plan.fault_at(point, hit)
        fault: Fault | None = found[1] if found else None
        action = fault.action.value if fault else "none"
        params: dict[str, Any] = dict(fault.params) if fault else {}
        if fault is not None and fault.action is Action.HOLD:
            if not self.hooks.hold_requested(instance, point, True):
                action = "none"
                params = {"planned": "hold",
                          "skipped": "no concurrent_turn step is running this instance"}
        elif fault is None and self.hooks.hold_requested(instance, point, False):
            action = "hold"
        data: dict[str, Any] = {"name": point, "context": _jsonable(context or {}), "hit": hit,
                                "action": action, "params": params}
        if found is not None:
            data["fault_index"] = found[0]
        self._record(Source.WORLD, Kind.FAILPOINT, instance, data)
        self.hooks.probe(instance, f"probe:failpoint:{point}")
        if action == Action.CRASH:
            crash = SimulatedCrash(f"simulated crash at failpoint {point} (hit {hit})")
            with self._lock:
                self._crashes[instance] = (point, crash)
            self.kill(instance)
            raise crash
        if action == Action.RAISE:
            error = InjectedFault(params.get("message", "injected fault"))
            self._note_raised(instance, error)
            raise error
        if action == Action.DELAY:
            self.clock.advance(params["seconds"])
        elif action == Action.CHANGE_RULES and fault is not None:
            self.hooks.change_rules(instance, params["session"], fault.rules(),
                                    params["permission_version"], point)
        elif action == Action.CANCEL:
            self.hooks.cancel(instance, params["session"], point)
        elif action == Action.HOLD:
            self.hooks.hold(instance, point)

    # -- contract.World, as instance ``self.instance`` ---------------------------------------

    def open_model_stream(self, request: ModelRequest) -> ScriptedStream:
        return self._open_model_stream(self.instance, request)

    def review(self, request: ClassifierRequest) -> ClassifierVerdict:
        return self._review(self.instance, request)

    def execute_tool(self, invocation: ToolInvocation) -> ToolResult:
        return self._execute_tool(self.instance, invocation)

    def prompt_approval(self, prompt: ApprovalPrompt) -> None:
        self._prompt_approval(self.instance, prompt)

    def publish(self, projection: Projection) -> None:
        self._publish(self.instance, projection)

    def now(self) -> float:
        return self._now(self.instance)

    def emit(self, event: LifecycleEvent) -> None:
        self._emit(self.instance, event)

    def failpoint(self, name: Failpoint, context: dict[str, Any]) -> None:
        self._failpoint(self.instance, name, context)


class WorldPort:
    """The world as one instance sees it (implements :class:`harness.contract.World`)."""

    __slots__ = ("_world", "instance")

    def __init__(self, world: SimWorld, instance: int) -> None:
        self._world = world
        self.instance = instance

    def open_model_stream(self, request: ModelRequest) -> ScriptedStream:
        return self._world._open_model_stream(self.instance, request)

    def review(self, request: ClassifierRequest) -> ClassifierVerdict:
        return self._world._review(self.instance, request)

    def execute_tool(self, invocation: ToolInvocation) -> ToolResult:
        return self._world._execute_tool(self.instance, invocation)

    def prompt_approval(self, prompt: ApprovalPrompt) -> None:
        self._world._prompt_approval(self.instance, prompt)

    def publish(self, projection: Projection) -> None:
        self._world._publish(self.instance, projection)

    def now(self) -> float:
        return self._world._now(self.instance)

    def emit(self, event: LifecycleEvent) -> None:
        self._world._emit(self.instance, event)

    def failpoint(self, name: Failpoint, context: dict[str, Any]) -> None:
        self._world._failpoint(self.instance, name, context)
