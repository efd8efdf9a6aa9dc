"""What every part of one scenario run shares (:class:`RunState`).

Guarantees: the run's one :class:`~harness.world.log.EventLog` receives every harness event
through :meth:`RunState.event`; an error recorded with :meth:`RunState.fail` stops the run
before its next step (:attr:`RunState.stopped`); a rule change is accepted only under a
permission version its session never had (:meth:`RunState.bumps_version`: the contract binds
each decision to a version, so reusing one would make two rule sets indistinguishable);
``Implementation.info`` is read checked (:meth:`RunState.info`), a value off the contract
becomes a placeholder and an error, never an exception.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.contract import Implementation, ImplementationInfo
from harness.contract.value_checks import value_problem
from harness.scenarios.loader import Scenario
from harness.trace.record import ObservationPoint, Source
from harness.world.log import EventLog

if TYPE_CHECKING:
    from harness.world import SimWorld

CRASH_MODE = "in_process"
"""An in-process implementation's crashes: the instance is dropped, not killed."""


@dataclass(slots=True)
class Hold:
    """The state of one concurrent_turn: instance A is held at a failpoint."""

    instance: int
    at: str | None
    held: bool = False
    reported: bool = False
    released: bool = False


class RunState:
    """The state of one scenario run that its parts read and change."""

    def __init__(self, implementation: Implementation, scenario: Scenario, seed: int,
                 limit: float, data_dir: str) -> None:
        self.impl = implementation
        self.crash_mode = str(getattr(implementation, "crash_mode", CRASH_MODE))
        """"in_process", or "process" for an implementation whose crashes are real kills."""
        self.black_box = str(getattr(implementation, "black_box", "") or "")
        """Why the implementation's store and events cannot be read (a real CLI run as a
        black box: :mod:`harness.clis`); empty for every implementation under the contract."""
        self.scenario = scenario
        self.seed = seed
        self.limit = limit
        self.data_dir = data_dir
        self.log = EventLog()
        self.world: SimWorld
        """Bound by the runner right after the parts the world calls back exist."""
        self.cond = threading.Condition()
        self.observations: list[ObservationPoint] = []
        self.obs_lock = threading.Lock()
        self.runtimes: dict[int, Any] = {}
        self.primary = -1
        self.next_instance = 0
        self.errors: list[str] = []
        self.versions: dict[str, set[int]] = {
            c.session_id: {c.permission_version} for c in scenario.sessions}
        """The permission versions each session has had, as the harness set them."""
        self.hung = False
        self.finished = False
        self.concurrent: Hold | None = None
        self.answered: set[str] = set()
        self.abandoned: list[tuple[str, Any]] = []
        """Driver calls given up on (hangs): (method, :class:`~harness.running.driving.calls.Call`),
        for :func:`~harness.running.driving.hung_threads.stop_abandoned`."""

    def event(self, kind: str, instance: int, data: dict[str, Any]) -> None:
        self.log.append(Source.HARNESS, kind, instance, data)

    def fail(self, message: str) -> None:
        self.errors.append(message)

    @property
    def stopped(self) -> bool:
        return bool(self.errors)

    def runtime(self, instance: int) -> Any:
        return self.runtimes[instance]

    def bumps_version(self, session_id: str, version: int, where: str) -> bool:
        """True when a rule change names a version this session never had; otherwise the
        scenario is wrong and the run stops with an error that says how to fix it."""
        used = self.versions.setdefault(session_id, set())
        if version not in used:
            used.add(version)
            return True
        self.fail(f"scenario {self.scenario.id} ({self.scenario.file}): {where} changes the rules "
                  f"of session {session_id!r} to permission_version {version}, which the session "
                  f"already had; every rule change must name a new version (e.g. "
                  f"{max(used) + 1})")
        return False

    def foreign_thread_calls(self) -> None:
        """Fail the run for every world port called from a thread the runner did not start
        (the world refused those calls and recorded nothing of them)."""
        for message in self.world.take_foreign_calls():
            self.fail(message)

    def info(self) -> ImplementationInfo:
        """``Implementation.info``, checked; a placeholder (and an error) when it is not one."""
        # An in-process implementation's info is a checked snapshot; read_info re-reads the
        # implementation's own (see harness.implementations.specs.InProcessImplementation).
        read_info = getattr(self.impl, "read_info", None)
        try:
            info = read_info() if callable(read_info) else self.impl.info
        except Exception as exc:  # noqa: BLE001 - the implementation's failure is data
            self.fail(f"reading Implementation.info raised {type(exc).__name__}: {exc}")
            return ImplementationInfo(name="<info raised>", version="")
        problem = value_problem(ImplementationInfo, info, "Implementation.info is")
        if problem:
            self.fail(problem)
            return ImplementationInfo(name="<invalid info>", version="")
        return info
