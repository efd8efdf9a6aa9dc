"""The fork server: instances forked from one pre-imported template behave like spawned
children (real SIGKILL crashes, one instance per kill, nothing outlives release or close),
and a template that dies, hangs or lies makes the launcher spawn instead."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from harness.remote import forkserver, launcher
from harness.remote.forkserver import ForkChannel, ForkedProcess, ForkRefused
from harness.remote.launcher import ProcessImplementation
from harness.remote.protocol import (
    CHILD_MARK_ENV,
    FORK_FD_ENV,
    ProtocolError,
    fork_datagram,
    read_fork_datagram,
)
from harness.running.runner import run_scenario
from harness.scenarios.loader import load
from remote_recording import Recording

pytestmark = [pytest.mark.process,
              pytest.mark.skipif(not forkserver.supported(), reason="needs Linux pidfds")]

ROOT = Path(__file__).resolve().parents[4]
CRASH = load(ROOT / "scenarios/l4/crash_after_result_saved.toml")
SERVER = [sys.executable, "-m", "reference_impl.remote"]

# A template that answers every fork request with ``LH_TEST_LIE`` (a pid, "" for none) and,
# started without the fork socket, is the reference's plain server.
LIAR = '''
import os, socket, sys
from harness.remote.protocol import FORK_FD_ENV, fork_datagram
if FORK_FD_ENV not in os.environ:
    from reference_impl.remote import main
    sys.exit(main())
from reference_impl import implementation
from reference_impl.remote import ForkTemplate, fork_socket_from_environment

KEPT = []

class Liar(ForkTemplate):
    def _fork_one(self):
        data, fds, _, _ = socket.recv_fds(self.sock, 4096, 4)
        lie = os.environ["LH_TEST_LIE"]
        if not lie:  # silent: keeps the request, never answers
            KEPT.append(fds)
            return
        os.write(fds[3], fork_datagram(pid=int(lie)))
        for fd in fds:
            os.close(fd)

out = os.fdopen(os.dup(1), "wb")
os.dup2(2, 1)
sys.exit(Liar(implementation, fork_socket_from_environment(), 0, out).run())
'''


# A fork-capable server whose runtime starts two helpers at open: one in its session, one
# that leaves it (found by the instance's own mark once its parent is gone).
STARTER = '''
import os, subprocess, sys
from reference_impl import implementation
from reference_impl.remote import ForkTemplate, fork_socket_from_environment, serve

class Impl:
    def __init__(self):
        self._impl = implementation()
        self.info = self._impl.info
    def open(self, data_dir, world):
        sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
        subprocess.Popen(sleeper)
        subprocess.Popen(sleeper, start_new_session=True)
        return self._impl.open(data_dir, world)
    def inspect(self, data_dir):
        return self._impl.inspect(data_dir)

out = os.fdopen(os.dup(1), "wb")
os.dup2(2, 1)
sock = fork_socket_from_environment()
sys.exit(ForkTemplate(Impl, sock, 0, out).run() if sock else serve(Impl(), sys.stdin.buffer, out))
'''


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rpartition(b")")[2].split()[0]
    except OSError:
        return False
    return state != b"Z"


def _stat(pid: int) -> tuple[int, int]:
    """(parent, session) of ``pid``."""
    fields = Path(f"/proc/{pid}/stat").read_bytes().rpartition(b")")[2].split()
    return int(fields[1]), int(fields[3])


def _marked(mark: str) -> list[int]:
    """Live processes whose environment carries ``mark`` (the template's, inherited)."""
    token = f"{CHILD_MARK_ENV}={mark}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _alive(int(entry)):
            try:
                if token in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"):
                    found.append(int(entry))
            except OSError:
                pass
    return found


def _gone_within(pids, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(_alive(pid) for pid in pids)


# --------------------------------------------------------------------------- the happy path


def test_instances_are_forked_children_of_the_template_and_crash_by_sigkill(tmp_path):
    with Recording(SERVER) as implementation:
        run = run_scenario(implementation, CRASH, 0)
        assert run.error == "" and run.trace.completed
        template = implementation._template
        inspector = implementation._inspectors[None]
        assert implementation.fork_off is None and template.alive
        crashed, restarted = implementation.children
        assert all(isinstance(c.popen, ForkedProcess) for c in (crashed, restarted, inspector))
        # the crashed one: a real SIGKILL (status reported by the template, its parent)
        assert crashed.killed and crashed.popen.returncode == -signal.SIGKILL
        assert crashed.popen.status_known and not _alive(crashed.pid)
        restarted.popen.wait(5)
        assert restarted.popen.returncode == 0  # closed and shut down in order
        assert [e.data["mode"] for e in run.trace.crashes()] == ["process"]
        assert len(run.trace.ledger()) == 1
        # siblings survive a kill: the inspector (forked too) and the template
        assert inspector.alive and template.alive
        parent, session = _stat(inspector.pid)
        assert parent == template.pid and session == inspector.pid
        pids = [template.pid, inspector.pid]
    assert _gone_within(pids)


# A harness script that runs a scenario in process mode and exits without closing the
# implementation: the launcher's exit hook ends what is left.
LEFT_OPEN = '''
import sys
from harness.remote.launcher import ProcessImplementation
from harness.running.runner import run_scenario
from harness.scenarios.loader import load
implementation = ProcessImplementation([sys.executable, "-m", "reference_impl.remote"])
run = run_scenario(implementation, load(sys.argv[1]), 0)
assert run.error == "", run.error
inspector = implementation._inspectors[None]
assert inspector.forked and inspector.alive
print(implementation._template.pid, inspector.pid, implementation._template.mark, flush=True)
'''


def test_an_exit_without_close_kills_the_forked_processes_quietly(tmp_path):
    # The forked processes' descriptors must outlive the finalizers run at exit: the exit
    # hook polls and kills through them (it printed an EBADF traceback and could not kill),
    # then closes them and the fork channel.
    script = tmp_path / "left_open.py"
    script.write_text(LEFT_OPEN)
    done = subprocess.run([sys.executable, "-X", "dev", str(script), str(ROOT / "scenarios/l4/crash_after_result_saved.toml")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    # -X dev shows every ResourceWarning: the hook also closes the descriptors it used
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, \
        done.stderr
    assert "ResourceWarning" not in done.stderr, done.stderr
    template, inspector, mark = done.stdout.split()
    assert _gone_within([int(template), int(inspector)])
    assert _marked(mark) == []


def test_a_forked_instance_starts_clean_own_session_own_pipes_own_mark(tmp_path):
    with ProcessImplementation(SERVER) as implementation:
        runtime = implementation.open(str(tmp_path), world=None)
        child = runtime._child
        template = implementation._template
        parent, session = _stat(child.pid)
        assert parent == template.pid and session == child.pid
        # fds: stdin, stdout (to stderr), stderr, the protocol output; plus what the
        # reference opened for its store; nothing of the template's
        fds = {int(fd): os.readlink(f"/proc/{child.pid}/fd/{fd}")
               for fd in os.listdir(f"/proc/{child.pid}/fd")}
        assert {0, 1, 2, 3} <= set(fds)
        assert all(not target.startswith("socket:") for target in fds.values()), fds
        assert {t for t in fds.values() if t.startswith("pipe:")} == set(child.pipes)
        assert fds[1] == fds[2]  # a stray print goes to stderr
        runtime.close()
        child.popen.wait(5)
        assert child.popen.returncode == 0


def test_the_template_mark_finds_every_instance_for_the_final_sweep(tmp_path):
    with ProcessImplementation(SERVER) as implementation:
        runtime = implementation.open(str(tmp_path), world=None)
        # /proc shows the environment the template was exec'd with, so the sweep that ends
        # the template finds its instances by its mark (an instance sets its own mark in
        # os.environ, inherited by what it starts).
        assert runtime._child.pid in _marked(implementation._template.mark)
        runtime.close()


def test_release_and_close_leave_no_process_behind(tmp_path):
    implementation = ProcessImplementation(SERVER)
    first = implementation.open(str(tmp_path / "a"), world=None)
    second = implementation.open(str(tmp_path / "b"), world=None)
    template = implementation._template
    assert first._child.forked and second._child.forked
    assert implementation.release(str(tmp_path / "a")) == ""
    assert _gone_within([first._child.pid])
    assert first._child.popen.returncode == -signal.SIGKILL
    assert _alive(second._child.pid) and template.alive  # one instance per kill
    implementation.close()
    assert _gone_within([second._child.pid, template.pid, *_marked(template.mark)])
    assert _marked(template.mark) == []


def test_what_a_forked_instance_started_is_swept_and_reported_by_release(tmp_path):
    path = tmp_path / "lh_starter.py"
    path.write_text(STARTER, encoding="utf-8")
    with ProcessImplementation([sys.executable, str(path)]) as implementation:
        runtime = implementation.open(str(tmp_path / "data"), world=None)
        child = runtime._child
        assert child.forked
        helpers = [int(entry) for entry in os.listdir("/proc")
                   if entry.isdigit() and _alive(int(entry)) and _stat(int(entry))[0] == child.pid]
        assert len(helpers) == 2
        text = implementation.release(str(tmp_path / "data"))
        assert "left 2 process(es) behind that the harness killed" in text
        assert all(f"pid {pid} " in text for pid in helpers)
        assert _gone_within([child.pid, *helpers])
        assert implementation._template.alive


# --------------------------------------------------------------------------- fallbacks


def test_a_template_that_died_makes_the_launcher_spawn(tmp_path):
    with Recording(SERVER) as implementation:
        implementation.info  # noqa: B018 - the load-time handshake starts the template
        template = implementation._template
        os.kill(template.pid, signal.SIGKILL)
        assert _gone_within([template.pid])
        run = run_scenario(implementation, CRASH, 0)
        assert run.error == "" and run.trace.completed
        assert "fork" in implementation.fork_off
        crashed, restarted = implementation.children
        assert not crashed.forked and not restarted.forked
        assert crashed.popen.returncode == -signal.SIGKILL


def test_a_hung_template_is_bounded_then_the_launcher_spawns(tmp_path):
    implementation = Recording(SERVER)
    implementation.fork_timeout_s = 1.0  # the spawn after it keeps the full startup bound
    try:
        implementation.info  # noqa: B018
        template = implementation._template
        os.kill(template.pid, signal.SIGSTOP)
        started = time.monotonic()
        runtime = implementation.open(str(tmp_path), world=None)
        assert time.monotonic() - started < 10
        assert "no fork answer within 1s (hung?)" in implementation.fork_off
        assert f"(pid {template.pid})" in implementation.fork_off
        assert not runtime._child.forked
        runtime.close()
    finally:
        os.kill(template.pid, signal.SIGCONT)
        implementation.close()
    assert _gone_within([template.pid])


@pytest.mark.parametrize("lie, says", [
    ("own-harness", "which is not its live child"),
    ("1", "which is not its live child"),
    ("", "no fork answer within 1s"),
])
def test_a_lying_template_is_refused_and_nothing_it_named_is_signalled(tmp_path, lie, says):
    path = tmp_path / "lh_liar.py"
    path.write_text(LIAR, encoding="utf-8")
    pid = str(os.getpid()) if lie == "own-harness" else lie
    implementation = Recording([sys.executable, str(path)], {"LH_TEST_LIE": pid})
    implementation.fork_timeout_s = 1.0
    with implementation:
        run = run_scenario(implementation, CRASH, 0)
        assert run.error == "" and run.trace.completed  # spawned instead
        assert says in implementation.fork_off
        assert not any(child.forked for child in implementation.children)
    assert _alive(1) and _alive(os.getpid())


def test_a_command_without_a_fork_server_is_spawned_and_its_first_child_inspects(tmp_path):
    code = ("import os, sys; os.environ.pop('" + FORK_FD_ENV + "', None); "
            "from reference_impl.remote import main; sys.exit(main())")
    with Recording([sys.executable, "-c", code]) as implementation:
        implementation.info  # noqa: B018
        assert implementation.fork_off == "the implementation offers no fork server"
        inspector = implementation._inspectors.get(None)
        assert inspector is not None and not inspector.forked  # the candidate, reused
        run = run_scenario(implementation, CRASH, 0)
        assert run.error == ""
        assert implementation._inspectors[None] is inspector
        assert not any(child.forked for child in implementation.children)


def test_fork_server_false_spawns():
    with Recording(SERVER) as implementation:
        implementation.fork_server = False
        run = run_scenario(implementation, CRASH, 0)
        assert run.error == "" and implementation._template is None
        assert not any(child.forked for child in implementation.children)


# --------------------------------------------------------------------------- the channel


def test_the_channel_refuses_a_template_that_closed_its_end():
    channel = ForkChannel()
    channel.started()
    pipes = [*os.pipe(), *os.pipe(), *os.pipe()]
    try:
        with pytest.raises(ForkRefused, match="fork socket is closed|closed the reply socket"):
            channel.fork(os.getpid(), "m", pipes[0], pipes[3], pipes[5], 1.0)
    finally:
        channel.close()
        for fd in pipes:
            os.close(fd)


def test_the_channel_reports_a_refusal_and_an_early_death():
    channel = ForkChannel()
    template_end = channel.theirs
    pipes = [*os.pipe(), *os.pipe(), *os.pipe()]
    try:
        for answer, says in ((fork_datagram(error="out of memory"), "refused the fork: out "
                              "of memory"),
                             (fork_datagram(pid=4242, exit_status=3), "ended with status 3"),
                             (b"not json", "not UTF-8 JSON")):
            def serve(answer=answer):
                _, fds, _, _ = socket.recv_fds(template_end, 4096, 4)
                os.write(fds[3], answer)
                for fd in fds:
                    os.close(fd)
            thread = threading.Thread(target=serve)
            thread.start()
            with pytest.raises(ForkRefused, match=says):
                channel.fork(os.getpid(), "m", pipes[0], pipes[3], pipes[5], 5.0)
            thread.join()
    finally:
        channel.close()
        for fd in pipes:
            os.close(fd)


@pytest.mark.parametrize("data, kind", [
    (b'{"mark":"a-1"}', "request"), (b'{"pid":12}', "reply"),
    (b'{"pid":12,"exit_status":-9}', "reply"), (b'{"error":"no"}', "reply"),
])
def test_fork_datagrams_that_are_well_formed(data, kind):
    assert read_fork_datagram(data, kind) == __import__("json").loads(data)


@pytest.mark.parametrize("data, kind", [
    (b'{"mark":""}', "request"), (b'{"mark":"a=b"}', "request"), (b'{"mark":1}', "request"),
    (b'{"mark":"a","x":1}', "request"), (b"[]", "request"), (b"\xff", "request"),
    (b'{"pid":0}', "reply"), (b'{"pid":true}', "reply"), (b'{"pid":"12"}', "reply"),
    (b'{"exit_status":1}', "reply"), (b'{"error":3}', "reply"), (b'{"pid":1,"x":2}', "reply"),
])
def test_fork_datagrams_that_are_not(data, kind):
    with pytest.raises(ProtocolError):
        read_fork_datagram(data, kind)


# --------------------------------------------------------------------------- inspect_since


def test_an_unchanged_store_is_answered_unchanged_and_read_as_the_same_object(tmp_path,
                                                                            monkeypatch):
    lines = []
    read = launcher._PipeTransport.read_line

    def reading(self, timeout):
        line = read(self, timeout)
        lines.append(line)
        return line

    with ProcessImplementation(SERVER) as implementation:
        runtime = implementation.open(str(tmp_path), world=None)  # creates the store
        monkeypatch.setattr(launcher._PipeTransport, "read_line", reading)
        first = implementation.inspect(str(tmp_path))
        second = implementation.inspect(str(tmp_path))
        assert second is first
        answers = [line for line in lines if b'"reading"' in line]
        assert len(answers) == 2
        assert b'"observation":null' not in answers[0]
        assert b'"observation":null' in answers[1]
        runtime.close()


LIES_UNCHANGED = '''
import os, sys
from reference_impl import implementation
from reference_impl.remote import InspectSinceResult, Server, serve

Server.do_inspect_since = lambda self, data_dir, since: InspectSinceResult("1", None)
os.environ.pop("LIFECYCLE_HARNESS_FORK_FD", None)
out = os.fdopen(os.dup(1), "wb")
os.dup2(2, 1)
sys.exit(serve(implementation(), sys.stdin.buffer, out))
'''


def test_an_unchanged_for_a_reading_never_named_is_a_remote_error(tmp_path):
    path = tmp_path / "lh_lies_unchanged.py"
    path.write_text(LIES_UNCHANGED, encoding="utf-8")
    with ProcessImplementation([sys.executable, str(path)]) as implementation:
        with pytest.raises(launcher.RemoteError, match="but the reading named was ''"):
            implementation.inspect(str(tmp_path))
