"""Run an implementation image with Docker: the ``docker:IMAGE`` form of ``--impl``.

:class:`DockerImplementation` is a :class:`~harness.remote.launcher.ProcessImplementation`
whose command is ``docker run -i`` of the image, speaking the same protocol on the
container's stdin/stdout. Guarantees:

* every container is confined (:meth:`DockerImplementation.docker_argv` gives the exact
  command): no network, a read-only root file system, all capabilities dropped, no
  privilege gain (``no-new-privileges``), bounded processes, memory (no swap beyond it) and
  CPUs (:class:`ContainerLimits`, defaults below, overridable by ``LH_DOCKER_*``), a small
  ``noexec`` tmpfs on ``/tmp``, and only the run's data dir writable, mounted at the same
  path. It runs as the harness's uid:gid so it can write the data dir the harness created;
  ``--`` ends the options, so an image name can never be read as one;
* every container is named ``lh-<run id>-<n>`` and labelled
  ``lifecycle-harness.run=<run id>``, with a random run id per implementation object, so
  CI jobs sharing a daemon never collide nor remove each other's containers;
* every container is removed on every exit path of the harness: when its instance is closed
  or crashed (a crash is a ``SIGKILL`` of the container through the engine, then of the
  ``docker`` client), when a run ends or hangs (``release``), at :meth:`close` (by label,
  so also those of workers that failed or were killed before removing theirs; the engine is
  reached for it even when only workers used it), at interpreter exit (also after an
  exception), and from a signal handler calling
  :func:`remove_all_containers`. Only a ``SIGKILL`` of the harness itself skips all of
  these: its containers then see their stdin close and exit, and
  ``docker rm -f $(docker ps -aq --filter label=lifecycle-harness.run)`` removes them;
* containers run without ``--rm`` so that the engine can still say, after one ended, that
  the OOM killer ended it: the error message then reads "killed by the OOM killer (memory
  limit N)" beside the exit status;
* with no reachable engine — no ``docker`` on PATH, or ``docker info`` failing — resolving
  and opening raise :class:`~harness.contract.errors.ImplementationLoadError` saying so and how to
  fix it (start the daemon, or use ``process:COMMAND``). Nothing else is attempted then.

Why two ways of talking to the engine: the protocol needs the container's stdin/stdout as
plain pipes that a ``SIGKILL`` can cut, which ``docker run -i`` gives as a child process
(the SDK's attach is a raw socket with multiplexed stream framing). Inspecting, killing,
removing and finding containers by label go through the Docker SDK for Python when it is
installed and reaches the same daemon, else through the ``docker`` command
(:mod:`harness.remote.container_engine`).

``inspect`` uses one inspector container per data dir (it must mount it), stopped when the
run releases the dir; ``info`` comes from a container started without any mount.
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
import shutil
import subprocess
import uuid
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from harness.contract import ImplementationInfo
from harness.contract.errors import ImplementationLoadError
from harness.remote import container_engine
from harness.remote.container_engine import LABEL, Engine
from harness.remote.launcher import (
    register_cleanup,
    DEFAULT_REPLY_TIMEOUT_S,
    ProcessImplementation,
    _Child,
    _child_name,
)

DOCKER_INFO_TIMEOUT_S = 15.0
DEFAULT_DOCKER_STARTUP_TIMEOUT_S = 60.0
"""Starting a container can take longer than starting a process."""
FIX = ("start the Docker daemon (`sudo systemctl start docker`, or run `dockerd`), check "
       "DOCKER_HOST and your access to its socket, or run the implementation without a "
       "container: --impl \"process:COMMAND\" (see docs/protocol.md)")


@dataclass(frozen=True, slots=True)
class ContainerLimits:
    """Resource limits of every container, in ``docker run``'s own units."""

    memory: str = "1g"
    """``--memory`` (and ``--memory-swap``: no swap beyond it). Env: LH_DOCKER_MEMORY."""
    cpus: str = "1"
    """``--cpus``. Env: LH_DOCKER_CPUS."""
    pids: int = 256
    """``--pids-limit``. Env: LH_DOCKER_PIDS."""
    tmpfs: str = "64m"
    """Size of the writable ``/tmp``. Env: LH_DOCKER_TMPFS."""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ContainerLimits:
        """The defaults, each overridden by its ``LH_DOCKER_*`` variable when set."""
        default = cls()
        limits = cls(memory=env.get("LH_DOCKER_MEMORY", "").strip() or default.memory,
                     cpus=env.get("LH_DOCKER_CPUS", "").strip() or default.cpus,
                     pids=int(env.get("LH_DOCKER_PIDS", "").strip() or default.pids),
                     tmpfs=env.get("LH_DOCKER_TMPFS", "").strip() or default.tmpfs)
        limits.validate()
        return limits

    def validate(self) -> None:
        size = re.compile(r"[0-9]+[bkmg]?", re.IGNORECASE)
        problems = []
        if not size.fullmatch(self.memory):
            problems.append(f"memory {self.memory!r} (e.g. 512m, 2g)")
        if not size.fullmatch(self.tmpfs):
            problems.append(f"tmpfs {self.tmpfs!r} (e.g. 64m)")
        if not re.fullmatch(r"[0-9]+(\.[0-9]+)?", self.cpus) or float(self.cpus) <= 0:
            problems.append(f"cpus {self.cpus!r} (e.g. 1, 0.5)")
        if self.pids <= 0:
            problems.append(f"pids {self.pids} (a positive count)")
        if problems:
            raise ImplementationLoadError("--impl docker: bad container limits: "
                                          + "; ".join(problems))


class _Container(_Child):
    """A ``docker run -i`` child that also knows its container: removes it once the client
    is gone, and reads its final state first (for the OOM verdict)."""

    def __init__(self, engine: Engine, argv: Sequence[str], *args: Any, **kwargs: Any) -> None:
        self.container = _child_name(argv)
        self.engine = engine
        self.final_state: container_engine.ContainerState | None = None
        self.removed = False
        super().__init__(argv, *args, **kwargs)

    def kill(self) -> None:
        super().kill()
        self._remove()

    def _remove(self) -> None:
        if self.removed or self.owner_pid != os.getpid() or not self.container:
            return
        self.removed = True
        # only an exit of its own can be the OOM killer's (one engine call fewer per container)
        if self.final_state is None and not self.killed and self.popen.returncode not in (0, None):
            self.final_state = container_engine.state(self.engine, self.container)
        self.engine.remove(self.container)

    def status(self) -> str:
        text = super().status()
        if self.popen.poll() is None or not self.container:
            return text
        if self.final_state is None and not self.removed:
            self.final_state = container_engine.state(self.engine, self.container)
        said = self.final_state.describe() if self.final_state is not None else ""
        return f"{text}; container {self.container} was {said}" if said else text


class DockerImplementation(ProcessImplementation):
    """The implementation in ``image`` (see the module doc)."""

    spares = 0  # each container's command names its data dir
    fork_server = False  # descriptors cannot be passed into a container: one per instance

    def __init__(self, image: str, *, docker: str = "docker",
                 env: Mapping[str, str] | None = None, info: ImplementationInfo | None = None,
                 limits: ContainerLimits | None = None,
                 startup_timeout_s: float = DEFAULT_DOCKER_STARTUP_TIMEOUT_S,
                 reply_timeout_s: float = DEFAULT_REPLY_TIMEOUT_S) -> None:
        image = image.strip()
        if not image:
            raise ImplementationLoadError("--impl docker: needs an image, e.g. "
                                          "docker:my-runtime:1.2 ; see docs/protocol.md")
        self.image = image
        self.docker = docker
        # ``limits`` here are the container's; ``self.limits`` (set by the base) bound the wire.
        self.container_limits = (limits if limits is not None
                                 else ContainerLimits.from_env(os.environ))
        self.run_id = uuid.uuid4().hex[:12]  # not the seeded world: names must not collide
        self.label = f"{LABEL}={self.run_id}"
        self.engine: Engine | None = None
        self._names = itertools.count(1)
        self._creator = os.getpid()
        super().__init__([docker, "run", image], env, info=info,
                         startup_timeout_s=startup_timeout_s, reply_timeout_s=reply_timeout_s)

    def __repr__(self) -> str:
        return f"DockerImplementation({self.image!r})"

    @property
    def spec(self) -> str:
        return f"docker:{self.image}"

    # -- the engine --------------------------------------------------------------------------

    def ensure_engine(self) -> Engine:
        """The engine (see :mod:`~harness.remote.container_engine`); raise
        :class:`ImplementationLoadError` unless one answers."""
        if self.engine is not None:
            return self.engine
        where = f"--impl {self.spec}"
        if shutil.which(self.docker) is None:
            raise ImplementationLoadError(
                f"{where}: no Docker engine is reachable: the `{self.docker}` command is not "
                f"installed (not on PATH); install Docker, then {FIX}")
        try:
            done = subprocess.run([self.docker, "info", "--format", "{{.ID}}"],
                                  capture_output=True, text=True,
                                  timeout=DOCKER_INFO_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            raise ImplementationLoadError(
                f"{where}: no Docker engine is reachable: `{self.docker} info` did not answer "
                f"within {DOCKER_INFO_TIMEOUT_S:g}s; {FIX}") from None
        except OSError as exc:
            raise ImplementationLoadError(
                f"{where}: no Docker engine is reachable: cannot run `{self.docker} info` "
                f"({exc}); {FIX}") from None
        if done.returncode != 0:
            detail = (done.stderr or done.stdout or "").strip().splitlines()
            said = f": {detail[-1]}" if detail else ""
            raise ImplementationLoadError(
                f"{where}: no Docker engine is reachable: `{self.docker} info` failed with "
                f"status {done.returncode}{said}; {FIX}")
        engine = self._connect(done.stdout.strip())
        container_engine.track(self.run_id, engine)
        self.engine = engine
        return engine

    def _connect(self, daemon_id: str) -> Engine:
        return container_engine.connect(self.docker, daemon_id)

    # -- the command -------------------------------------------------------------------------

    def docker_argv(self, data_dir: str | None, name: str) -> list[str]:
        """The exact ``docker run`` command for a container named ``name`` on ``data_dir``."""
        limits = self.container_limits
        argv = [self.docker, "run", "-i", "--network", "none", "--read-only",
                "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
                "--pids-limit", str(limits.pids),
                "--memory", limits.memory, "--memory-swap", limits.memory,
                "--cpus", limits.cpus,
                "--tmpfs", f"/tmp:rw,noexec,nosuid,nodev,size={limits.tmpfs}",
                "--name", name, "--label", self.label,
                "--user", f"{os.getuid()}:{os.getgid()}"]
        if data_dir is not None:
            argv += ["-v", f"{data_dir}:{data_dir}"]
        argv += ["--", self.image]
        return argv

    def container_name(self) -> str:
        """A name no other container of this run has: a forked copy of this object (a
        worker) continues the same counter, so its names carry its pid."""
        number = next(self._names)
        pid = os.getpid()
        return f"lh-{self.run_id}-{number}" if pid == self._creator \
            else f"lh-{self.run_id}-{pid}-{number}"

    def _argv_for(self, data_dir: str | None) -> Sequence[str]:
        return self.docker_argv(data_dir, self.container_name())

    def _new_child(self, argv: Sequence[str], on_kill: Any) -> _Child:
        return _Container(self.ensure_engine(), argv, self.env, self.cwd,
                          shlex.join(argv), self.reply_timeout_s, on_kill=on_kill,
                          limits=self.limits, on_strays=self._note_strays)

    def _inspector_key(self, data_dir: str) -> str | None:
        return data_dir

    def _kill_hook(self, child_name: str) -> Any:
        engine = self.engine

        def kill_container() -> None:
            if child_name and engine is not None:
                engine.kill(child_name)

        return kill_container

    def _usable_fixture_root(self, root: str) -> str | None:
        return None  # a path inside the image

    def _prepare(self) -> None:
        self.ensure_engine()

    @property
    def info(self) -> ImplementationInfo:
        if self._info is not None:  # known: never fails (the runner reads it after a run)
            return self._info
        self.ensure_engine()
        info = ProcessImplementation.info.fget(self)  # type: ignore[attr-defined]
        idle = self._inspectors.pop(None, None)  # started without a mount: of no further use
        if idle is not None:
            idle.stop()
        return info

    # -- cleanup -------------------------------------------------------------------------------

    def remove_containers(self) -> list[str]:
        """Remove every container of this object still known to the engine (by label), its
        workers' included: when only forked workers reached the engine, it is reached here."""
        engine = self.engine
        if engine is None:
            try:
                engine = self.ensure_engine()
            except ImplementationLoadError:
                return []  # no engine: no container can exist
        return container_engine.remove_labelled(engine, self.label)

    def close(self) -> None:
        """Stop and remove every container of this object, then sweep by label (a client
        killed before its container existed can leave one behind)."""
        try:
            super().close()
        finally:
            self.remove_containers()


def remove_all_containers() -> list[str]:
    """Remove every container this process started; for a signal handler (the CLI's), as
    the interpreter's exit does it too. Returns the ids removed."""
    return container_engine.remove_everything_started()


# The CLI's SIGTERM/SIGINT/SIGHUP handling ends every child it started and then runs these
# cleanups: a container outlives its `docker run` client, so it is removed here by label.
register_cleanup(remove_all_containers)
