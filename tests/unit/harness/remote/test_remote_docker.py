"""docker:IMAGE without a Docker engine: clear load errors, the exact command, and a run
through a stand-in ``docker`` that starts the reference server instead of a container."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import reference_impl
from harness.contract.errors import ImplementationLoadError
from harness.implementations.specs import resolve
from harness.remote import docker as docker_module
from harness.remote import container_engine
from harness.remote.container_engine import LABEL
from harness.remote.docker import (
    ContainerLimits,
    DockerImplementation,
    _Container,
    remove_all_containers,
)
from harness.running.runner import run_scenario
from harness.scenarios.loader import load

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
        answer = subprocess.CompletedProcess([], 0, "DAEMON:ID\n", "")

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
    assert engine.calls == [["docker", "info", "--format", "{{.ID}}"]]

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


class FakeEngine:
    """An engine that records the management calls and knows some containers."""

    kind = "fake"

    def __init__(self, containers=None):
        self.containers = dict(containers or {})  # name -> inspect attrs
        self.calls = []

    def attrs(self, name):
        self.calls.append(("attrs", name))
        return self.containers.get(name)

    def kill(self, name):
        self.calls.append(("kill", name))

    def remove(self, name):
        self.calls.append(("remove", name))
        self.containers.pop(name, None)

    def labelled(self, label):
        self.calls.append(("labelled", label))
        return [name for name, attrs in self.containers.items()
                if label.partition("=")[2] == attrs.get("Config", {}).get("Labels", {}).get(
                    label.partition("=")[0])]


def _oom_attrs(run_id=""):
    return {"State": {"Status": "exited", "ExitCode": 137, "OOMKilled": True},
            "HostConfig": {"Memory": 64 << 20},
            "Config": {"Labels": {LABEL: run_id}}}


@pytest.fixture
def fake_engine(engine, monkeypatch):
    fake = FakeEngine()
    monkeypatch.setattr(docker_module.container_engine, "connect",
                        lambda docker, daemon_id: fake)
    return fake


def test_the_exact_docker_run_command(engine, fake_engine):
    implementation = DockerImplementation("acme/runtime:1.2", info=REFERENCE_INFO,
                                          limits=ContainerLimits())
    label = f"lifecycle-harness.run={implementation.run_id}"
    assert implementation.docker_argv("/dev/shm/lh-run-abc", "lh-x-1") == [
        "docker", "run", "-i", "--network", "none", "--read-only",
        "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
        "--pids-limit", "256", "--memory", "1g", "--memory-swap", "1g", "--cpus", "1",
        "--tmpfs", "/tmp:rw,noexec,nosuid,nodev,size=64m",
        "--name", "lh-x-1", "--label", label, "--user", USER,
        "-v", "/dev/shm/lh-run-abc:/dev/shm/lh-run-abc", "--", "acme/runtime:1.2"]
    assert "--rm" not in implementation.docker_argv(None, "n")  # the OOM verdict outlives it
    assert implementation.docker_argv(None, "lh-x-2")[-4:] == ["--user", USER, "--",
                                                               "acme/runtime:1.2"]
    first, second = implementation._argv_for("/d"), implementation._argv_for("/d")
    names = [argv[argv.index("--name") + 1] for argv in (first, second)]
    assert names[0] != names[1]
    assert all(name.startswith(f"lh-{implementation.run_id}-") for name in names)
    assert implementation.crash_mode == "process" and implementation.spares == 0
    assert implementation._inspector_key("/d") == "/d"  # the inspector must mount the dir
    assert implementation._usable_fixture_root(str(ROOT)) is None

    assert implementation.ensure_engine() is fake_engine
    implementation._kill_hook("lh-x-1")()
    assert fake_engine.calls[-1] == ("kill", "lh-x-1")


def test_run_ids_differ_between_objects_and_processes_share_no_names(no_docker):
    ids = {DockerImplementation("img", info=REFERENCE_INFO).run_id for _ in range(50)}
    assert len(ids) == 50 and all(len(run_id) == 12 for run_id in ids)


def test_limits_are_configurable_from_the_environment_and_checked():
    limits = ContainerLimits.from_env({"LH_DOCKER_MEMORY": "256m", "LH_DOCKER_CPUS": "0.5",
                                       "LH_DOCKER_PIDS": "32", "LH_DOCKER_TMPFS": "8m"})
    assert limits == ContainerLimits(memory="256m", cpus="0.5", pids=32, tmpfs="8m")
    assert ContainerLimits.from_env({}) == ContainerLimits()
    implementation = DockerImplementation("img", info=REFERENCE_INFO, limits=limits)
    argv = implementation.docker_argv(None, "n")
    assert argv[argv.index("--memory") + 1] == "256m" and argv[argv.index("--cpus") + 1] == "0.5"
    assert argv[argv.index("--pids-limit") + 1] == "32"
    assert argv[argv.index("--tmpfs") + 1].endswith("size=8m")
    with pytest.raises(ImplementationLoadError, match="memory 'lots'.*cpus '0'"):
        ContainerLimits.from_env({"LH_DOCKER_MEMORY": "lots", "LH_DOCKER_CPUS": "0"})


def _container_child(engine, code, name="lh-x-1"):
    # a real process (exit status ``code``) whose argv names a container, like docker run's
    argv = [sys.executable, "-c", f"import sys; sys.exit({code})", "--name", name]
    return _Container(engine, argv, None, None, "docker run", 5.0)


def test_an_oom_killed_container_is_reported_with_its_limit_then_removed():
    fake = FakeEngine({"lh-x-1": _oom_attrs()})
    child = _container_child(fake, 137)
    child.popen.wait(10)
    assert child.status() == ("it exited with status 137; container lh-x-1 was killed by the "
                              "OOM killer (memory limit 64 MiB)")
    child.kill()
    assert ("remove", "lh-x-1") in fake.calls and "lh-x-1" not in fake.containers
    assert "OOM killer" in child.status()  # read before the removal, kept
    child.kill()
    assert fake.calls.count(("remove", "lh-x-1")) == 1


def test_a_plain_exit_says_nothing_about_oom_and_the_container_is_still_removed():
    attrs = {"State": {"Status": "exited", "ExitCode": 3, "OOMKilled": False},
             "HostConfig": {"Memory": 0}}
    fake = FakeEngine({"lh-x-1": attrs})
    child = _container_child(fake, 3)
    child.popen.wait(10)
    assert child.status() == "it exited with status 3"
    child.kill()
    assert fake.containers == {}


def test_close_sweeps_the_label_and_exit_removes_what_every_object_started(engine, fake_engine):
    implementation = DockerImplementation("img", info=REFERENCE_INFO)
    implementation.ensure_engine()
    other = DockerImplementation("img", info=REFERENCE_INFO)
    other.ensure_engine()
    fake_engine.containers = {"mine": _oom_attrs(implementation.run_id),
                              "other": _oom_attrs(other.run_id),
                              "someone-elses": _oom_attrs("0123456789ab")}
    implementation.close()
    assert set(fake_engine.containers) == {"other", "someone-elses"}
    assert "other" in remove_all_containers()
    assert set(fake_engine.containers) == {"someone-elses"}


def test_a_forked_copy_never_removes_its_parents_containers(engine, fake_engine):
    implementation = DockerImplementation("img", info=REFERENCE_INFO)
    implementation.ensure_engine()
    fake_engine.containers = {"mine": _oom_attrs(implementation.run_id)}
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the copy: sweeps nothing of the parent's, then leaves without cleanup
        os.write(write, repr(sorted(remove_all_containers())).encode())
        os._exit(0)
    os.close(write)
    assert os.read(read, 1000) == b"[]"
    os.waitpid(pid, 0)
    assert remove_all_containers() == ["mine"]


def test_forked_workers_never_name_two_containers_alike(no_docker):
    # run --jobs forks workers that each continue the same counter: without the pid, both
    # named their next container lh-<run>-2 ("The container name ... is already in use").
    implementation = DockerImplementation("img", info=REFERENCE_INFO)
    mine = [implementation.container_name() for _ in range(2)]
    names = set(mine)
    for _ in range(2):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.write(write, " ".join(implementation.container_name()
                                     for _ in range(3)).encode())
            os._exit(0)
        os.close(write)
        theirs = os.read(read, 1000).decode().split()
        os.close(read)
        os.waitpid(pid, 0)
        assert all(name.startswith(f"lh-{implementation.run_id}-{pid}-") for name in theirs)
        names |= set(theirs)
    assert len(names) == 2 + 2 * 3
    assert mine == [f"lh-{implementation.run_id}-1", f"lh-{implementation.run_id}-2"]


def test_close_removes_by_label_what_only_workers_started(engine, fake_engine):
    # The engine was reached in workers only (their containers left behind when they failed):
    # close in the parent reaches it to remove them by label all the same.
    implementation = DockerImplementation("img", info=REFERENCE_INFO)
    assert implementation.engine is None
    fake_engine.containers = {"lh-w-1": _oom_attrs(implementation.run_id),
                              "someone-elses": _oom_attrs("0123456789ab")}
    implementation.close()
    assert set(fake_engine.containers) == {"someone-elses"}


class FakeContainer:
    def __init__(self, name, log, fail=None):
        self.id = name
        self.attrs = _oom_attrs()
        self.log = log
        self.fail = fail

    def kill(self, signal):
        self.log.append(("kill", self.id, signal))
        if self.fail:
            raise self.fail

    def remove(self, force):
        self.log.append(("remove", self.id, force))
        if self.fail:
            raise self.fail


class FakeClient:
    """The part of ``docker.DockerClient`` the SDK engine uses."""

    def __init__(self, daemon_id="DAEMON:ID", fail=None):
        self.log = []
        self.daemon_id = daemon_id
        self.fail = fail
        outer = self

        class Containers:
            def get(self, name):
                if name == "gone":
                    raise LookupError("404 Client Error: Not Found")  # like docker.errors.NotFound
                return FakeContainer(name, outer.log, outer.fail)

            def list(self, all, filters):
                outer.log.append(("list", all, filters))
                return [FakeContainer("c1", outer.log), FakeContainer("c2", outer.log)]

        self.containers = Containers()

    def info(self):
        return {"ID": self.daemon_id}


def test_the_sdk_is_used_only_when_it_reaches_the_same_daemon_as_the_command():
    client = FakeClient()
    sdk = container_engine.connect("docker", "DAEMON:ID", sdk_client=lambda: client)
    assert sdk.kind == "sdk" and sdk.client is client
    assert container_engine.connect("docker", "OTHER:ID", sdk_client=lambda: client).kind == "cli"

    def unreachable():
        raise ConnectionError("no socket")

    assert container_engine.connect("docker", "DAEMON:ID", sdk_client=unreachable).kind == "cli"


def test_the_sdk_engine_kills_removes_and_finds_by_label():
    client = FakeClient()
    sdk = container_engine.SdkEngine(client)
    sdk.kill("lh-x-1")
    sdk.remove("lh-x-1")
    assert client.log == [("kill", "lh-x-1", "SIGKILL"), ("remove", "lh-x-1", True)]
    assert container_engine.state(sdk, "lh-x-1") == container_engine.ContainerState(
        "exited", 137, True, 64 << 20)
    assert container_engine.state(sdk, "gone") is None
    sdk.kill("gone")
    sdk.remove("gone")  # gone already: not an error
    client.log.clear()
    assert container_engine.remove_labelled(sdk, "lifecycle-harness.run=abc") == ["c1", "c2"]
    assert client.log == [("list", True, {"label": "lifecycle-harness.run=abc"}),
                          ("remove", "c1", True), ("remove", "c2", True)]
    failing = container_engine.SdkEngine(FakeClient(fail=RuntimeError("409 Conflict")))
    failing.kill("lh-x-1")
    failing.remove("lh-x-1")  # never raises: cleanup is best effort


def test_the_command_engine_parses_json_only():
    calls = []
    answers = {
        "container": subprocess.CompletedProcess([], 0, json.dumps(_oom_attrs()), ""),
        "ps": subprocess.CompletedProcess([], 0, "c1\nc2\n", ""),
    }

    def run(argv, **kwargs):
        calls.append(argv)
        return answers.get(argv[1], subprocess.CompletedProcess([], 0, "", ""))

    cli = container_engine.CliEngine("/usr/bin/docker", run=run)
    assert container_engine.state(cli, "lh-x-1").describe() == (
        "killed by the OOM killer (memory limit 64 MiB)")
    assert container_engine.remove_labelled(cli, "lifecycle-harness.run=abc") == ["c1", "c2"]
    cli.kill("lh-x-1")
    assert calls == [
        ["/usr/bin/docker", "container", "inspect", "--format", "{{json .}}", "lh-x-1"],
        ["/usr/bin/docker", "ps", "--all", "--quiet", "--no-trunc", "--filter",
         "label=lifecycle-harness.run=abc"],
        ["/usr/bin/docker", "rm", "--force", "c1"], ["/usr/bin/docker", "rm", "--force", "c2"],
        ["/usr/bin/docker", "kill", "--signal", "KILL", "lh-x-1"]]
    answers["container"] = subprocess.CompletedProcess([], 1, "", "No such container")
    assert container_engine.state(cli, "gone") is None


FAKE_DOCKER = """#!/bin/sh
echo "$@" >> "{log}"
case "$1" in
  info) echo FAKE:DAEMON ;;
  kill|rm|ps) exit 0 ;;
  container) echo "No such container" >&2; exit 1 ;;
  run) exec "{python}" -m reference_impl.remote ;;
  *) echo "unexpected: $*" >&2; exit 64 ;;
esac
"""


@pytest.mark.process
def test_a_run_through_a_stand_in_docker_mounts_only_the_data_dir_kills_and_removes(
        tmp_path, monkeypatch):
    log = tmp_path / "docker.log"
    fake = tmp_path / "docker"
    fake.write_text(FAKE_DOCKER.format(log=log, python=sys.executable), encoding="utf-8")
    fake.chmod(0o755)
    monkeypatch.setattr(docker_module.container_engine, "connect",
                        lambda docker, daemon_id: container_engine.CliEngine(docker))
    implementation = DockerImplementation("acme/runtime:1.2", docker=str(fake))
    with implementation:
        assert implementation.info == REFERENCE_INFO
        run = run_scenario(implementation, CRASH, 0)
    assert run.error == "" and run.trace.completed
    assert [e.data["mode"] for e in run.trace.crashes()] == ["process"]

    def calls():
        return [line.split() for line in log.read_text(encoding="utf-8").splitlines()]

    runs = [call for call in calls() if call[0] == "run"]
    assert runs[0][-4:] == ["--user", USER, "--", "acme/runtime:1.2"]  # info: no mount
    mounts = {call[call.index("-v") + 1] for call in runs[1:]}
    assert len(mounts) == 1 and len(runs) == 4  # inspector + two instances, one data dir
    data_dir = mounts.pop().split(":")[0]
    assert os.path.basename(data_dir).startswith("lh-run-")
    names = {call[call.index("--name") + 1] for call in runs}
    for call in runs:
        assert call[1:5] == ["-i", "--network", "none", "--read-only"]
        assert call[call.index("--label") + 1] == implementation.label
    killed = [call[-1] for call in calls() if call[0] == "kill"]
    assert killed, "the crash must kill the container by name"
    assert killed[0] in names
    assert ["ps", "--all", "--quiet", "--no-trunc", "--filter",
            f"label={implementation.label}"] in calls()  # the sweep at close
    for _ in range(100):  # an inspector's stop ends in its reaper thread
        removed = {call[-1] for call in calls() if call[0] == "rm"}
        if removed >= names:
            break
        time.sleep(0.05)
    assert removed >= names, "every container is removed once its client is gone"
