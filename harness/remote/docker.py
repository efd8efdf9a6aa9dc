"""Run an implementation image with Docker: the ``docker:IMAGE`` form of ``--impl``.

:class:`DockerImplementation` is a :class:`~harness.remote.launcher.ProcessImplementation`
whose command is ``docker run`` of the image, speaking the same protocol on the container's
stdin/stdout. Guarantees:

* every container runs with no network, a read-only root file system and only the run's
  data dir writable, mounted at the same path (:meth:`DockerImplementation.docker_argv`
  gives the exact command); it runs as the harness's uid:gid so it can write the data dir
  the harness created, and has a ``--name`` so a crash is a ``docker kill --signal KILL``
  of the container (plus a SIGKILL of the ``docker`` client);
* ``inspect`` uses one inspector container per data dir (it must mount it), stopped when the
  run releases the dir; ``info`` comes from a container started without any mount;
* with no reachable engine — no ``docker`` on PATH, or ``docker info`` failing — resolving
  and opening raise :class:`~harness.errors.ImplementationLoadError` saying so and how to
  fix it (start the daemon, or use ``process:COMMAND``). Nothing else is attempted then.

Checkpoint fixtures declared by the image live inside it; the harness cannot read them, so
scenarios that load one report that they were not found.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
from typing import Any, Mapping, Sequence

from harness.contract import ImplementationInfo
from harness.errors import ImplementationLoadError
from harness.remote.launcher import (
    DEFAULT_REPLY_TIMEOUT_S,
    ProcessImplementation,
)

DOCKER_INFO_TIMEOUT_S = 15.0
DEFAULT_DOCKER_STARTUP_TIMEOUT_S = 60.0
"""Starting a container can take longer than starting a process."""
FIX = ("start the Docker daemon (`sudo systemctl start docker`, or run `dockerd`), check "
       "DOCKER_HOST and your access to its socket, or run the implementation without a "
       "container: --impl \"process:COMMAND\" (see docs/protocol.md)")


class DockerImplementation(ProcessImplementation):
    """The implementation in ``image`` (see the module doc)."""

    spares = 0  # each container's command names its data dir

    def __init__(self, image: str, *, docker: str = "docker",
                 env: Mapping[str, str] | None = None, info: ImplementationInfo | None = None,
                 startup_timeout_s: float = DEFAULT_DOCKER_STARTUP_TIMEOUT_S,
                 reply_timeout_s: float = DEFAULT_REPLY_TIMEOUT_S) -> None:
        image = image.strip()
        if not image:
            raise ImplementationLoadError("--impl docker: needs an image, e.g. "
                                          "docker:my-runtime:1.2 ; see docs/protocol.md")
        self.image = image
        self.docker = docker
        self._engine_ok = False
        self._names = itertools.count(1)
        super().__init__([docker, "run", image], env, info=info,
                         startup_timeout_s=startup_timeout_s, reply_timeout_s=reply_timeout_s)

    def __repr__(self) -> str:
        return f"DockerImplementation({self.image!r})"

    @property
    def spec(self) -> str:
        return f"docker:{self.image}"

    # -- the engine --------------------------------------------------------------------------

    def ensure_engine(self) -> None:
        """Raise :class:`ImplementationLoadError` unless a Docker engine answers."""
        if self._engine_ok:
            return
        where = f"--impl {self.spec}"
        if shutil.which(self.docker) is None:
            raise ImplementationLoadError(
                f"{where}: no Docker engine is reachable: the `{self.docker}` command is not "
                f"installed (not on PATH); install Docker, then {FIX}")
        try:
            done = subprocess.run([self.docker, "info", "--format", "{{.ServerVersion}}"],
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
        self._engine_ok = True

    # -- the command -------------------------------------------------------------------------

    def docker_argv(self, data_dir: str | None, name: str) -> list[str]:
        """The exact ``docker run`` command for a container named ``name`` on ``data_dir``."""
        argv = [self.docker, "run", "-i", "--rm", "--network", "none", "--read-only",
                "--name", name, "--user", f"{os.getuid()}:{os.getgid()}"]
        if data_dir is not None:
            argv += ["-v", f"{data_dir}:{data_dir}"]
        argv.append(self.image)
        return argv

    def _argv_for(self, data_dir: str | None) -> Sequence[str]:
        return self.docker_argv(data_dir, f"lh-{os.getpid()}-{next(self._names)}")

    def _inspector_key(self, data_dir: str) -> str | None:
        return data_dir

    def _kill_hook(self, child_name: str) -> Any:
        docker = self.docker

        def kill_container() -> None:
            if child_name:
                subprocess.run([docker, "kill", "--signal", "KILL", child_name],
                               capture_output=True, timeout=DOCKER_INFO_TIMEOUT_S, check=False)

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
