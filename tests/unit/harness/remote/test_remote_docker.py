"""docker:IMAGE without a Docker engine: clear load errors, the exact command, and a run
through a stand-in ``docker`` that starts the reference server instead of a container."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import reference_impl
from harness.errors import ImplementationLoadError
from harness.implementations import resolve
from harness.remote import docker as docker_module
from harness.remote.docker import DockerImplementation
from harness.runner import run_scenario
from harness.scenarios import load

ROOT = Path(__file__).resolve().parents[4]
CRASH = load(ROOT / "scenarios/l4/crash_after_result_saved.toml")
REFERENCE_INFO = reference_impl.implementation().info
USER = f"{os.getuid()}:{os.getgid()}"


@pytest.fixture
def no_docker(monkeypatch):
    monkeypatch.setattr(docker_module.shutil, "which", lambda name: None)

    def run(*args, **kwargs):  # pragma: no cover - must not be reached
        raise AssertionError("docker must not be run when it is not installed")

    monkeypatch.setattr(docker_module.subprocess, "run", run)


@pytest.fixture
def engine(monkeypatch):
    """``docker`` installed; ``engine.answer`` decides what ``docker info`` does."""
    calls = []

    class Engine:
        answer = subprocess.CompletedProcess([], 0, "27.1.1\n", "")

        def run(self, argv, **kwargs):
            calls.append(list(argv))
            if isinstance(self.answer, BaseException):
                raise self.answer
            return self.answer

    fake = Engine()
    fake.calls = calls
    monkeypatch.setattr(docker_module.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(docker_module.subprocess, "run", fake.run)
    return fake


def _load_error(spec: str) -> str:
    with pytest.raises(ImplementationLoadError) as info:
        resolve(spec)
    return str(info.value)


def test_no_docker_binary_says_no_engine_is_reachable_and_how_to_fix_it(no_docker):
    message = _load_error("docker:acme/runtime:1.2")
    assert message.startswith("--impl docker:acme/runtime:1.2: no Docker engine is reachable: "
                              "the `docker` command is not installed")
    assert "dockerd" in message and '--impl "process:COMMAND"' in message


def test_a_daemon_that_does_not_answer_says_so(engine):
    engine.answer = subprocess.CompletedProcess(
        [], 1, "", "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
                   "Is the docker daemon running?\n")
    message = _load_error("docker:acme/runtime:1.2")
    assert ("no Docker engine is reachable: `docker info` failed with status 1: Cannot connect "
            "to the Docker daemon at unix:///var/run/docker.sock") in message
    assert "start the Docker daemon" in message and "process:COMMAND" in message
    assert engine.calls == [["docker", "info", "--format", "{{.ServerVersion}}"]]

    engine.answer = subprocess.TimeoutExpired(["docker", "info"], 15)
    assert "`docker info` did not answer within 15s" in _load_error("docker:acme/runtime:1.2")


def test_docker_needs_an_image(no_docker):
    assert "needs an image" in _load_error("docker:  ")


def test_opening_without_an_engine_is_a_reported_scenario_error(no_docker):
    implementation = DockerImplementation("acme/runtime:1.2", info=REFERENCE_INFO)
    run = run_scenario(implementation, CRASH, 0, time_limit_s=5)
    assert not run.trace.completed
    assert "open on instance 0 raised ImplementationLoadError" in run.error
    assert "no Docker engine is reachable" in run.error


def test_the_exact_docker_run_command(engine):
    implementation = DockerImplementation("acme/runtime:1.2", info=REFERENCE_INFO)
    assert implementation.docker_argv("/dev/shm/lh-run-abc", "lh-7-1") == [
        "docker", "run", "-i", "--rm", "--network", "none", "--read-only",
        "--name", "lh-7-1", "--user", USER,
        "-v", "/dev/shm/lh-run-abc:/dev/shm/lh-run-abc", "acme/runtime:1.2"]
    assert implementation.docker_argv(None, "lh-7-2")[-3:] == ["--user", USER, "acme/runtime:1.2"]
    first, second = implementation._argv_for("/d"), implementation._argv_for("/d")
    assert first[first.index("--name") + 1] != second[second.index("--name") + 1]
    assert implementation.crash_mode == "process" and implementation.spares == 0
    assert implementation._inspector_key("/d") == "/d"  # the inspector must mount the dir
    assert implementation._usable_fixture_root(str(ROOT)) is None

    implementation._kill_hook("lh-7-1")()
    assert engine.calls[-1] == ["docker", "kill", "--signal", "KILL", "lh-7-1"]


FAKE_DOCKER = """#!/bin/sh
echo "$@" >> "{log}"
case "$1" in
  info) echo 27.1.1 ;;
  kill) exit 0 ;;
  run) exec "{python}" -m reference_impl.remote ;;
  *) echo "unexpected: $*" >&2; exit 64 ;;
esac
"""


@pytest.mark.process
def test_a_run_through_a_stand_in_docker_mounts_only_the_data_dir_and_kills_by_name(tmp_path):
    log = tmp_path / "docker.log"
    fake = tmp_path / "docker"
    fake.write_text(FAKE_DOCKER.format(log=log, python=sys.executable), encoding="utf-8")
    fake.chmod(0o755)
    implementation = DockerImplementation("acme/runtime:1.2", docker=str(fake))
    with implementation:
        assert implementation.info == REFERENCE_INFO
        run = run_scenario(implementation, CRASH, 0)
    assert run.error == "" and run.trace.completed
    assert [e.data["mode"] for e in run.trace.crashes()] == ["process"]
    calls = [line.split() for line in log.read_text(encoding="utf-8").splitlines()]
    runs = [call for call in calls if call[0] == "run"]
    assert runs[0][-3:] == ["--user", USER, "acme/runtime:1.2"]  # info: no mount
    mounts = {call[call.index("-v") + 1] for call in runs[1:]}
    assert len(mounts) == 1 and len(runs) == 4  # inspector + two instances, one data dir
    data_dir = mounts.pop().split(":")[0]
    assert os.path.basename(data_dir).startswith("lh-run-")
    for call in runs:
        assert call[1:7] == ["-i", "--rm", "--network", "none", "--read-only", "--name"]
    killed = [call[-1] for call in calls if call[0] == "kill"]
    assert killed, "the crash must kill the container by name"
    assert killed[0] in {call[call.index("--name") + 1] for call in runs}
