"""The child subreaper: what escapes into the harness's care is found, killed and named; what
the harness started itself (in its own session, or registered) is left alone."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from harness.remote import subreaper

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]
ESCAPE = """
import os, sys
if os.fork():
    os._exit(0)
os.setsid()
if os.fork():
    os._exit(0)
print(os.getpid(), flush=True)
os.closerange(0, 65536)
os.execve(sys.argv[1], [sys.argv[1], "-c", "import time; time.sleep(60)"], {})
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rpartition(b")")[2].split()[0] != b"Z"
    except OSError:
        return False


def _cmdline(pid: int) -> bytes:
    with open(f"/proc/{pid}/cmdline", "rb") as handle:
        return handle.read()


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as handle:
        return int(handle.read().rpartition(b")")[2].split()[1])


def test_an_escaped_daemon_is_reparented_here_killed_and_named():
    assert subreaper.become_subreaper()
    done = subprocess.run([sys.executable, "-c", ESCAPE, sys.executable], capture_output=True,
                          text=True, timeout=60, check=True)
    daemon = int(done.stdout.split()[0])
    deadline = time.monotonic() + 10
    while _parent(daemon) != os.getpid() and time.monotonic() < deadline:
        time.sleep(0.01)  # its middle parent exits right after the fork
    assert _parent(daemon) == os.getpid()  # the kernel gave it to us, not to init
    while b"time.sleep(60)" not in _cmdline(daemon) and time.monotonic() < deadline:
        time.sleep(0.01)  # it prints its pid before its execve: the name comes after
    found = subreaper.escaped()
    assert [pid for pid, _ in found] == [daemon]
    assert "time.sleep(60)" in found[0][1]
    assert not _alive(daemon)
    assert subreaper.escaped() == []


def test_children_started_here_are_not_taken_for_escaped_ones():
    assert subreaper.become_subreaper()
    same_session = subprocess.Popen(SLEEPER)
    with subreaper.spawning():
        registered = subprocess.Popen(SLEEPER, start_new_session=True)
        subreaper.adopt(registered.pid)
    try:
        assert subreaper.escaped() == []
        assert same_session.poll() is None and registered.poll() is None
    finally:
        for child in (same_session, registered):
            child.kill()
            child.wait()
        subreaper.forget(registered.pid)


def test_an_unregistered_child_in_another_session_counts_as_escaped():
    # What a forked copy of the harness would see of its parent's children: not its own.
    assert subreaper.become_subreaper()
    stranger = subprocess.Popen(SLEEPER, start_new_session=True)
    found = subreaper.escaped()
    assert [pid for pid, _ in found] == [stranger.pid]
    assert stranger.wait(5) == -9 or stranger.returncode in (0, -9)
