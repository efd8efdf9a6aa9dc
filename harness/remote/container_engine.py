"""The Docker engine as the harness manages its containers: state, kill, remove, by label.

``docker run -i`` (a client process with stdin/stdout pipes) carries the protocol; this
module does everything else to the containers. Guarantees:

* :func:`connect` returns an :class:`Engine` that talks to *the same daemon* the ``docker``
  command uses: the Docker SDK for Python (``pip install 'lifecycle-harness[docker]'``)
  when it is installed and reports the daemon ID ``docker info`` reported, else the
  ``docker`` command itself. (The SDK reads ``DOCKER_HOST`` only, the command also reads
  docker contexts: when the two disagree the command wins, so a container is never looked
  for on the wrong daemon.) The SDK answers in structured data; the command's output is
  parsed from ``--format '{{json ...}}'`` only;
* :meth:`Engine.state` gives a container's exit code and whether the OOM killer ended it
  (with its memory limit), or None when there is no such container;
* :meth:`Engine.kill`, :meth:`Engine.remove` and :meth:`Engine.remove_labelled` are
  cleanup: they never raise, and a container already gone is not an error;
* :func:`remove_everything_started` removes every container this process labelled, on any
  engine it used (a forked copy removes none of its parent's); it runs at interpreter exit
  and is what a signal handler calls.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import threading
from dataclasses import dataclass
from typing import Any, Callable, Protocol

LABEL = "lifecycle-harness.run"
"""Every container the harness starts carries ``LABEL=<run id>`` (one id per
implementation object): removal by label finds them all, and only them."""
ENGINE_CALL_TIMEOUT_S = 30.0
"""How long one management call (inspect, kill, remove, list) may take."""


@dataclass(frozen=True, slots=True)
class ContainerState:
    """What the engine says about a container."""

    status: str
    """``created``, ``running``, ``exited``, ... as the engine says."""
    exit_code: int | None
    oom_killed: bool
    memory_limit_bytes: int
    """0: no limit."""

    def describe(self) -> str:
        """A phrase for an error message ("" when there is nothing beyond the exit status)."""
        if not self.oom_killed:
            return ""
        limit = (f"memory limit {format_bytes(self.memory_limit_bytes)}"
                 if self.memory_limit_bytes else "no memory limit set")
        return f"killed by the OOM killer ({limit})"


def format_bytes(count: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size and count % size == 0:
            return f"{count // size} {unit}"
    return f"{count} bytes"


def _state_from(attrs: dict[str, Any]) -> ContainerState:
    state = attrs.get("State") or {}
    host = attrs.get("HostConfig") or {}
    code = state.get("ExitCode")
    return ContainerState(status=str(state.get("Status", "")),
                          exit_code=code if isinstance(code, int) else None,
                          oom_killed=bool(state.get("OOMKilled")),
                          memory_limit_bytes=int(host.get("Memory") or 0))


class Engine(Protocol):
    """What the launcher needs from a Docker engine (see the module doc)."""

    kind: str
    """``sdk`` or ``cli``: how it talks to the daemon."""

    def attrs(self, name: str) -> dict[str, Any] | None: ...

    def kill(self, name: str) -> None: ...

    def remove(self, name: str) -> None: ...

    def labelled(self, label: str) -> list[str]: ...


class CliEngine:
    """The engine through the ``docker`` command."""

    kind = "cli"

    def __init__(self, docker: str, run: Callable[..., Any] = subprocess.run) -> None:
        self.docker = docker
        self._run = run

    def _call(self, *args: str) -> Any:
        try:
            return self._run([self.docker, *args], capture_output=True, text=True,
                             timeout=ENGINE_CALL_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None

    def attrs(self, name: str) -> dict[str, Any] | None:
        done = self._call("container", "inspect", "--format", "{{json .}}", name)
        if done is None or done.returncode != 0:
            return None
        try:
            value = json.loads(done.stdout)
        except ValueError:
            return None
        return value if isinstance(value, dict) else None

    def kill(self, name: str) -> None:
        self._call("kill", "--signal", "KILL", name)

    def remove(self, name: str) -> None:
        self._call("rm", "--force", name)

    def labelled(self, label: str) -> list[str]:
        done = self._call("ps", "--all", "--quiet", "--no-trunc", "--filter", f"label={label}")
        if done is None or done.returncode != 0:
            return []
        return [line.strip() for line in done.stdout.splitlines() if line.strip()]


class SdkEngine:
    """The engine through the Docker SDK for Python (a ``docker.DockerClient``)."""

    kind = "sdk"

    def __init__(self, client: Any) -> None:
        self.client = client

    def _container(self, name: str) -> Any:
        try:
            return self.client.containers.get(name)
        except Exception:  # noqa: BLE001 - NotFound, APIError, a dead daemon: nothing to do
            return None

    def attrs(self, name: str) -> dict[str, Any] | None:
        container = self._container(name)
        return None if container is None else dict(container.attrs)

    def kill(self, name: str) -> None:
        container = self._container(name)
        if container is not None:
            try:
                container.kill(signal="SIGKILL")
            except Exception:  # noqa: BLE001 - not running any more (409) is fine
                pass

    def remove(self, name: str) -> None:
        container = self._container(name)
        if container is not None:
            try:
                container.remove(force=True)
            except Exception:  # noqa: BLE001 - removal already in progress (409), gone (404)
                pass

    def labelled(self, label: str) -> list[str]:
        try:
            found = self.client.containers.list(all=True, filters={"label": label})
        except Exception:  # noqa: BLE001
            return []
        return [container.id for container in found]


def state(engine: Engine, name: str) -> ContainerState | None:
    attrs = engine.attrs(name)
    return None if attrs is None else _state_from(attrs)


def remove_labelled(engine: Engine, label: str) -> list[str]:
    """Remove (forcibly) every container carrying ``label``; returns their ids."""
    found = engine.labelled(label)
    for container in found:
        engine.remove(container)
    return found


def connect(docker: str, daemon_id: str,
            sdk_client: Callable[[], Any] | None = None) -> Engine:
    """The engine for the daemon ``docker info`` reported as ``daemon_id`` (module doc).

    ``sdk_client`` makes the SDK client (default: ``docker.from_env``); tests pass a fake."""
    try:
        if sdk_client is None:
            import docker as docker_sdk  # the optional extra

            client = docker_sdk.from_env(timeout=int(ENGINE_CALL_TIMEOUT_S))
        else:
            client = sdk_client()
        same_daemon = bool(daemon_id) and client.info().get("ID") == daemon_id
    except Exception:  # noqa: BLE001 - no SDK, or it cannot reach the daemon: use the command
        return CliEngine(docker)
    return SdkEngine(client) if same_daemon else CliEngine(docker)


_STARTED: dict[str, tuple[Engine, int]] = {}
"""run id -> (its engine, the pid of the process that starts its containers)."""
_STARTED_LOCK = threading.Lock()


def track(run_id: str, engine: Engine) -> None:
    """Remember that this process starts containers labelled ``LABEL=run_id``."""
    with _STARTED_LOCK:
        _STARTED[run_id] = (engine, os.getpid())


def forget(run_id: str) -> None:
    with _STARTED_LOCK:
        _STARTED.pop(run_id, None)


@atexit.register
def remove_everything_started() -> list[str]:
    """Remove every container this process started (normal exit, an exception, or a signal
    handler calling it); returns the ids removed. Safe to call more than once."""
    with _STARTED_LOCK:  # a forked copy of the harness never removes its parent's
        started = [(run_id, engine) for run_id, (engine, pid) in _STARTED.items()
                   if pid == os.getpid()]
    removed: list[str] = []
    for run_id, engine in started:
        removed += remove_labelled(engine, f"{LABEL}={run_id}")
    return removed
