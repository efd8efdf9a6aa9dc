"""``docker:IMAGE`` against a real Docker engine: the reference server in a container.

Needs a reachable engine and the test image built by ``tools/build_test_image.sh``
(``LH_DOCKER_TEST_IMAGE``, default ``lifecycle-harness/reference:test``); every test here is
skipped, with the reason, where either is missing. ``.ci/run`` starts an engine and builds
the image when it can.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.remote import container_engine
from harness.remote.container_engine import LABEL
from harness.remote.docker import ContainerLimits, DockerImplementation, _Container
from harness.running.runner import run_scenario
from harness.scenarios.loader import load

ROOT = Path(__file__).resolve().parents[2]
IMAGE = os.environ.get("LH_DOCKER_TEST_IMAGE", "lifecycle-harness/reference:test")
CRASH = load(ROOT / "scenarios/l4/crash_after_result_saved.toml")


def _unavailable() -> str:
    """Why the engine tests cannot run here ("" when they can)."""
    if shutil.which("docker") is None:
        return "no `docker` command on PATH"
    try:
        info = subprocess.run(["docker", "info", "--format", "{{.ID}}"], capture_output=True,
                              text=True, timeout=15, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"`docker info` failed: {exc}"
    if info.returncode != 0:
        return f"no reachable Docker engine ({(info.stderr or '').strip()[:200]})"
    image = subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True,
                           text=True, timeout=30, check=False)
    if image.returncode != 0:
        return f"the test image {IMAGE} is absent: build it with tools/build_test_image.sh"
    return ""


WHY = _unavailable()
pytestmark = [pytest.mark.docker, pytest.mark.process,
              pytest.mark.skipif(bool(WHY), reason=WHY or "engine ready")]


def _labelled(label: str = LABEL) -> set[str]:
    done = subprocess.run(["docker", "ps", "--all", "--quiet", "--no-trunc", "--filter",
                           f"label={label}"], capture_output=True, text=True, timeout=30,
                          check=True)
    return set(done.stdout.split())


def _attrs(name: str) -> dict:
    done = subprocess.run(["docker", "container", "inspect", "--format", "{{json .}}", name],
                          capture_output=True, text=True, timeout=30, check=True)
    return json.loads(done.stdout)


def test_a_running_container_is_hardened_as_the_command_says(tmp_path):
    data_dir = str(tmp_path / "data")
    os.mkdir(data_dir)
    implementation = DockerImplementation(IMAGE, limits=ContainerLimits(
        memory="256m", cpus="0.5", pids=64, tmpfs="8m"))
    try:
        inspector = implementation._inspector(data_dir)  # a running container on data_dir
        assert isinstance(inspector, _Container) and inspector.alive
        attrs = _attrs(inspector.container)
        host = attrs["HostConfig"]
        assert attrs["State"]["Running"]
        assert host["NetworkMode"] == "none" and host["ReadonlyRootfs"] is True
        assert host["CapDrop"] == ["ALL"] and not host.get("CapAdd")
        assert host["SecurityOpt"] == ["no-new-privileges"]
        assert host["PidsLimit"] == 64
        assert host["Memory"] == 256 << 20 and host["MemorySwap"] == 256 << 20
        assert host["NanoCpus"] == 500_000_000
        assert host["Tmpfs"] == {"/tmp": "rw,noexec,nosuid,nodev,size=8m"}
        assert host["Binds"] == [f"{data_dir}:{data_dir}"]
        assert host["AutoRemove"] is False and host["Privileged"] is False
        assert attrs["Config"]["User"] == f"{os.getuid()}:{os.getgid()}"
        assert attrs["Config"]["Labels"][LABEL] == implementation.run_id
        assert attrs["Name"] == f"/lh-{implementation.run_id}-1"  # the creating process
        assert _labelled(implementation.label) == {attrs["Id"]}
    finally:
        implementation.close()
    assert _labelled(implementation.label) == set()


def test_a_crash_is_a_real_kill_of_the_container_and_nothing_is_left(tmp_path):
    implementation = DockerImplementation(IMAGE)
    with implementation:
        run = run_scenario(implementation, CRASH, 0)
        assert run.error == "" and run.trace.completed
        assert [event.data["mode"] for event in run.trace.crashes()] == ["process"]
        assert implementation.engine is not None
    assert _labelled(implementation.label) == set()


def test_the_oom_killer_is_named_with_the_memory_limit():
    implementation = DockerImplementation(IMAGE, limits=ContainerLimits(memory="32m"))
    engine = implementation.ensure_engine()
    argv = implementation._argv_for(None) + [
        "python3", "-c", "b = bytearray(512 << 20); b[::4096] = b'x' * len(b[::4096])"]
    child = _Container(engine, argv, None, None, "docker run", 60.0)
    try:
        child.popen.wait(120)
        status = child.status()
    finally:
        child.kill()
        implementation.close()
    assert status.endswith(f"container {child.container} was killed by the OOM killer "
                           "(memory limit 32 MiB)"), status
    assert _labelled(implementation.label) == set()


HARNESS_DIES = """
import os, signal, sys
from harness.remote.docker import DockerImplementation, remove_all_containers
implementation = DockerImplementation(sys.argv[1])
data_dir = sys.argv[2]
implementation._inspector(data_dir)  # a running container, never closed
print(implementation.label, flush=True)
if sys.argv[3] == "signal":
    def on_term(signum, frame):  # what the CLI's handler does
        remove_all_containers()
        os._exit(143)
    signal.signal(signal.SIGTERM, on_term)
    os.kill(os.getpid(), signal.SIGTERM)
raise RuntimeError("a harness bug")
"""


@pytest.mark.parametrize("how", ["exception", "signal"])
def test_a_harness_that_dies_leaves_no_container(tmp_path, how):
    done = subprocess.run([sys.executable, "-c", HARNESS_DIES, IMAGE, str(tmp_path), how],
                          capture_output=True, text=True, timeout=300, check=False, cwd=ROOT)
    label = done.stdout.strip()
    assert label.startswith(f"{LABEL}="), done.stderr
    assert done.returncode == (1 if how == "exception" else 143), done.stderr
    assert _labelled(label) == set()


WORKER_DIES = """
import os, sys
from harness.remote.docker import DockerImplementation
implementation = DockerImplementation(sys.argv[1])
print(implementation.label, flush=True)
pid = os.fork()
if pid == 0:  # a worker: starts a container, then dies without any cleanup
    implementation._inspector(sys.argv[2])
    os._exit(1)
os.waitpid(pid, 0)
implementation.close()  # the parent never reached the engine itself
"""


def test_a_worker_that_dies_leaves_no_container_once_the_parent_closes(tmp_path):
    done = subprocess.run([sys.executable, "-c", WORKER_DIES, IMAGE, str(tmp_path)],
                          capture_output=True, text=True, timeout=300, check=False, cwd=ROOT)
    label = done.stdout.strip()
    assert label.startswith(f"{LABEL}=") and done.returncode == 0, done.stderr
    assert _labelled(label) == set()


def test_parallel_workers_run_scenarios_in_containers_with_the_default_jobs(tmp_path):
    # --jobs left at its default (the number of cores): forked workers start containers at
    # the same time; none may share a name (issue 28: "already in use" in nearly every
    # scenario), and none may be left behind.
    before = _labelled()
    report_dir = tmp_path / "report"
    scenarios = [str(ROOT / "scenarios" / name) for name in (
        "l4/crash_after_result_saved.toml", "l1/old_checkpoints.toml",
        "x/duplicate_delivery_one_record.toml", "m/eof_without_text.toml")]
    done = subprocess.run(
        [sys.executable, "-m", "harness.cli.app", "run", "--impl", f"docker:{IMAGE}",
         "--scenarios", *scenarios, "--report-dir", str(report_dir)],
        capture_output=True, text=True, timeout=900, check=False, cwd=ROOT)
    tail = done.stdout[-3000:] + done.stderr[-3000:]
    assert _labelled() <= before, tail
    report = json.loads((report_dir / "report.json").read_text(encoding="utf-8"))
    errored = {s["id"]: s["error"] for s in report["scenarios"] if s["error"]}
    assert not errored, errored
    assert {s["status"] for s in report["scenarios"]} == {"passed"}, tail


@pytest.mark.slow  # the whole suite, one container per instance: minutes, not seconds
def test_the_whole_suite_passes_in_containers_and_leaves_none(tmp_path):
    # the default --jobs: parallel workers, each starting containers of its own
    before = _labelled()
    report_dir = tmp_path / "report"
    done = subprocess.run(
        [sys.executable, "-m", "harness.cli.app", "run", "--impl", f"docker:{IMAGE}",
         "--report-dir", str(report_dir)],
        capture_output=True, text=True, timeout=1800, check=False, cwd=ROOT)
    tail = done.stdout[-3000:] + done.stderr[-3000:]
    after = _labelled()
    assert after <= before, f"stray containers: {sorted(after - before)}"
    assert done.returncode in (0, 1), tail
    report = json.loads((report_dir / "report.json").read_text(encoding="utf-8"))
    assert report["implementation"] and len(report["scenarios"]) > 100
    crashes_completed = [scenario["id"] for scenario in report["scenarios"]
                         if "crash" in scenario["id"] and scenario["status"] == "passed"]
    assert crashes_completed, "crash scenarios (real kills of containers) must pass"
    errored = {scenario["id"]: scenario["error"] for scenario in report["scenarios"]
               if scenario["error"]}
    assert done.returncode == 0 and not errored, tail
    assert report["summary"]["passed"] == report["summary"]["criteria"]
