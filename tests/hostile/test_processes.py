"""Hostile out-of-process implementations: real child processes that fork helpers holding the
pipes, hang, flood or nest without end. Each must end as a reported scenario error (exit 1)
in bounded time, leave no process behind, and keep the harness's memory bounded; a signal to
the harness ends every child it started and exits 130/143/129."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import reference_impl
from harness.contract.limits import LIMITS_ENV, Limits
from harness.remote.launcher import ProcessImplementation
from harness.running.runner import run_scenario
from harness.scenarios.loader import load

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[2]
SCENARIO_PATH = ROOT / "scenarios/l4/crash_after_result_saved.toml"
SCENARIO = load(SCENARIO_PATH)
REFERENCE_INFO = reference_impl.implementation().info

HOSTILE_SERVER = Path(__file__).with_name("hostile_server.py")


@pytest.fixture
def hostile(tmp_path):
    script = tmp_path / "hostile_server.py"
    shutil.copy(HOSTILE_SERVER, script)
    pids = tmp_path / "pids.txt"
    pids.touch()
    return script, pids


def _argv(hostile, mode):
    script, pids = hostile
    return [sys.executable, str(script), mode, str(pids)]


def _noted(hostile) -> list[int]:
    return [int(line) for line in hostile[1].read_text().split()]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rpartition(b")")[2].split()[0] != b"Z"
    except OSError:
        return False


# A hung child is waited out for its silence bound, with no CPU spent: the hang cases below
# keep it short. The startup handshake has its own bound (the launcher's startup timeout,
# 3/4 of the run's time limit), so a loaded machine's slow interpreter start is not taken
# for a hang while the silence stays short; a reply due from a live server (open, a step
# of the turn before the hang) takes milliseconds, far below it.
SILENCE_S = 2.0


def _run(hostile, mode, *, limits=None, time_limit_s=10.0, silence_s=None,
         startup_timeout_s=None):
    bounds = {} if silence_s is None else {"reply_timeout_s": silence_s}
    if startup_timeout_s is not None:
        bounds["startup_timeout_s"] = startup_timeout_s
    implementation = ProcessImplementation(_argv(hostile, mode), info=REFERENCE_INFO,
                                           limits=limits, **bounds)
    implementation.spares = 0
    started = time.monotonic()
    with implementation:
        run = run_scenario(implementation, SCENARIO, 0, time_limit_s=time_limit_s)
    return run, time.monotonic() - started


# --------------------------------------------------------------------------- strays


@pytest.mark.parametrize("mode", ["group-then-exit", "session-then-exit", "orphan-then-exit",
                                  "group-then-hang", "session-then-run", "orphan-then-run",
                                  "daemon-then-run", "daemon-then-exit", "daemon-then-hang"])
def test_a_helper_holding_the_pipes_is_killed_and_named(hostile, mode):
    run, wall_s = _run(hostile, mode, time_limit_s=6.0, silence_s=SILENCE_S)
    helpers = _noted(hostile)
    assert helpers, f"the child started no helper: {run.error}"
    assert wall_s < 25, f"shutdown took {wall_s:.1f}s"
    assert not run.trace.completed
    for pid in helpers:
        assert f"pid {pid} " in run.error, run.error
        assert not _alive(pid)
    assert "left 1 process(es) behind" in run.error


def test_a_daemon_of_a_forked_instance_in_a_worker_is_killed_and_named(hostile, tmp_path):
    # A fork server's instances are children of its template, which the main process
    # started: with --jobs their orphans are re-parented to the main process, not to the
    # worker that runs the scenario. The worker finds them there all the same.
    reports = tmp_path / "reports"
    argv = [sys.executable, "-m", "harness.cli.app", "run", "--impl",
            "process:" + " ".join(_argv(hostile, "daemon-then-run")), "--scenarios",
            str(SCENARIO_PATH), str(ROOT / "scenarios/m/eof_without_text.toml"),
            "--report-dir", str(reports), "--jobs", "2", "--time-limit-s", "30"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "LH_HOSTILE_FORK_SERVER": "1"})
    daemons = _noted(hostile)
    assert done.returncode == 1, done.stderr[-2000:]
    assert daemons, "no daemon was started"
    report = json.loads((reports / "report.json").read_text(encoding="utf-8"))
    errors = " ".join(scenario["error"] for scenario in report["scenarios"])
    for pid in daemons:
        assert f"pid {pid} " in errors, errors
        assert not _alive(pid)


# --------------------------------------------------------------------------- time limit


@pytest.mark.parametrize("mode, says", [
    ("hang", "wrote nothing for 2s while 'run_turn'"),
    # A probe's inspect runs inside a driver call, whose own limit may strike first.
    ("hang-inspect", ("wrote nothing for 2s while 'inspect'",
                      "wrote nothing for 2s while 'inspect_since'",
                      "wrote nothing for 2s while 'inspect_parts'",
                      "made no progress (no call to the world) for 6s")),
    # The handshake's own bound, waited out twice (the instance's, then the inspector's).
    ("hang-handshake", "wrote nothing for 2s while 'initialize'"),
])
def test_the_time_limit_bounds_every_wait(hostile, mode, says):
    # A 6 s limit (a loaded machine takes a second or two to start the reference server:
    # the startup bound stays 4.5 s), a short silence; the hung handshake gets a short
    # startup bound, since that child never answers.
    run, wall_s = _run(hostile, mode, time_limit_s=6.0, silence_s=SILENCE_S,
                       startup_timeout_s=SILENCE_S if mode == "hang-handshake" else None)
    assert not run.trace.completed
    assert any(text in run.error for text in ((says,) if isinstance(says, str) else says)), \
        run.error
    assert wall_s < 25, f"took {wall_s:.1f}s under a 6s limit"
    assert not any(_alive(pid) for pid in _noted(hostile))


def test_the_time_limit_bounds_the_load_time_handshake(hostile):
    started = time.monotonic()
    done = _cli(hostile, "hang-handshake", "--time-limit-s", "2")
    assert time.monotonic() - started < 14  # the default would wait 15 s
    assert done.returncode == 2, done.stderr
    assert "initialize" in done.stderr
    assert not any(_alive(pid) for pid in _noted(hostile))


# --------------------------------------------------------------------------- limits


@pytest.mark.parametrize("mode, limits, says", [
    ("huge-line", Limits(line_bytes=1024 * 1024), "past the limit line_bytes=1MiB"),
    ("deep-json", Limits(), "past the limit json_depth=200"),
    ("request-flood", Limits(unanswered_messages=16), "past the limit unanswered_messages=16"),
    ("huge-inspect", Limits(inspect_bytes=64 * 1024), "past the limit inspect_bytes=64KiB"),
])
def test_a_flood_past_a_limit_fails_the_implementation_naming_it(hostile, mode, limits, says):
    run, wall_s = _run(hostile, mode, limits=limits)
    assert not run.trace.completed
    assert says in run.error, run.error
    assert "the harness killed it" in run.error
    assert wall_s < 30


def test_a_child_that_never_reads_its_stdin_cannot_block_the_harness(hostile):
    # Requests pipelined without reading the answers: past the pipe's buffer the harness's
    # write would block forever; the write is bounded by the same silence limit.
    run, wall_s = _run(hostile, "request-flood", limits=Limits(unanswered_messages=100_000),
                       time_limit_s=6.0, silence_s=SILENCE_S)
    assert not run.trace.completed
    assert "read nothing of its stdin for 2s" in run.error, run.error
    assert wall_s < 25


def test_an_event_flood_stops_at_the_events_limit(hostile, monkeypatch):
    monkeypatch.setenv(LIMITS_ENV, "events_per_scenario=200")
    run, _ = _run(hostile, "event-flood")
    assert not run.trace.completed
    assert "past the limit events_per_scenario=200" in run.error, run.error
    assert len(run.trace.events) < 400


@pytest.mark.parametrize("mode, what", [
    ("big-events", "run_turn"),      # events of 1 MB each, each under the line limit
    ("big-inspect", "inspect"),      # valid readings of ~10 MB, new at every probe
])
def test_bytes_a_scenario_brings_in_are_bounded_not_only_counts(hostile, mode, what):
    # Each message is within line_bytes / inspect_bytes and the event count stays far below
    # its limit: only a bound on the bytes of the whole scenario stops these (issue 28).
    run, wall_s = _run(hostile, mode, limits=Limits(scenario_bytes=24 * 1024 * 1024),
                       time_limit_s=20.0)
    assert not run.trace.completed
    assert "past the limit scenario_bytes=24MiB" in run.error, run.error
    assert "the harness killed it" in run.error and what in run.error
    assert wall_s < 30


def _cli(hostile, mode, *options, env=None, **popen):
    argv = [sys.executable, "-m", "harness.cli.app", "run", "--impl",
            "process:" + " ".join(_argv(hostile, mode)), "--scenarios", str(SCENARIO_PATH),
            "--report-dir", str(hostile[0].parent / "reports"), *options]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, **(env or {})}, **popen)


@pytest.mark.parametrize("mode, env, says", [
    ("deep-json", {}, "json_depth=200"),
    ("huge-line", {LIMITS_ENV: "line_bytes=1MiB"}, "line_bytes=1MiB"),
])
def test_the_command_line_reports_a_flood_as_a_failure(hostile, mode, env, says):
    done = _cli(hostile, mode, env=env)
    assert done.returncode == 1, done.stderr[-2000:]
    assert says in done.stdout + done.stderr


def test_a_bad_limits_setting_is_a_usage_error(hostile):
    done = _cli(hostile, "run", env={LIMITS_ENV: "line_bytes=lots"})
    assert done.returncode == 2
    assert LIMITS_ENV in done.stderr


# --------------------------------------------------------------------------- values, names, shutdown


@pytest.mark.parametrize("mode, says", [
    ("surrogate-event", "params.event.data.bad: text with a lone surrogate"),
    ("nan-event", "params.event.data.cost: not a JSON number"),
    ("infinity-event", "params.event.data.cost: not a JSON number"),
    ("unknown-failpoint", "world port failpoint was called with name '<b>after_lunch</b>', "
                          "which is not in the failpoint catalogue"),
])
def test_a_value_or_name_off_the_protocol_is_a_scenario_error_with_reports(hostile, mode, says):
    # Valid JSON to Python, not to RFC 8259 or UTF-8 (a lone \ud800, NaN, -Infinity), and a
    # failpoint outside the catalogue: each a clear failure naming the member or the name,
    # with every report written; never exit 3, never recorded, never "reached".
    done = _cli(hostile, mode)
    assert done.returncode == 1, done.stderr[-2000:]
    reports = hostile[0].parent / "reports"
    report = json.loads((reports / "report.json").read_text(encoding="utf-8"))
    (scenario,) = report["scenarios"]
    assert scenario["status"] == "error" and says in scenario["error"], scenario["error"]
    assert "after_lunch" not in json.dumps(scenario["failpoints_reached"])
    assert {path.name for path in reports.iterdir()} >= {"report.json", "junit.xml",
                                                           "report.md", "report.html"}


def test_a_server_that_answers_shutdown_but_never_exits_fails_in_bounded_time(hostile):
    run, wall_s = _run(hostile, "ignore-shutdown", time_limit_s=10.0)
    assert "answered `shutdown` but did not exit within 2s" in run.error, run.error
    assert not run.trace.completed
    assert wall_s < 15, f"took {wall_s:.1f}s"
    assert not any(_alive(pid) for pid in _noted(hostile))


# --------------------------------------------------------------------------- signals


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130),
                                          (signal.SIGHUP, 129)])
def test_a_signal_ends_every_child_and_data_dir(hostile, tmp_path, signum, code):
    data_root = tmp_path / "data"
    data_root.mkdir()
    argv = [sys.executable, "-m", "harness.cli.app", "run", "--impl",
            "process:" + " ".join(_argv(hostile, "group-then-hang")), "--scenarios",
            str(SCENARIO_PATH), "--report-dir", str(tmp_path / "reports"),
            "--time-limit-s", "60"]
    env = {**os.environ, "LIFECYCLE_HARNESS_DATA_ROOT": str(data_root)}
    harness = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not _noted(hostile) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _noted(hostile), "the child never reached its turn"
        children = _descendants(harness.pid)
        assert children
        harness.send_signal(signum)
        _, err = harness.communicate(timeout=20)
    finally:
        if harness.poll() is None:
            harness.kill()
    assert harness.returncode == code, err
    last = err.strip().splitlines()[-1]
    assert f"terminated by {signal.Signals(signum).name}" in last
    for pid in [*children, *_noted(hostile)]:
        assert not _alive(pid), f"pid {pid} survived"
    assert list(data_root.iterdir()) == []


def _descendants(root: int) -> list[int]:
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as handle:
                    parents[int(entry)] = int(handle.read().rpartition(b")")[2].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    found, frontier = [], [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent:
                found.append(pid)
                frontier.append(pid)
    return found
