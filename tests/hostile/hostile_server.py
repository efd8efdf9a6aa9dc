"""The reference server, misbehaving at its first run_turn as ``argv[1]`` says (see the
modes below); ``argv[2]`` is a file where it notes the pids of the processes it starts, one
per line. ``$LH_HOSTILE_BYTES`` sizes the huge line (default 3,000,000). Used by
``tests/hostile/test_processes.py`` (copied into a temporary folder) and by
``benchmarks/bench_hostile_memory.py``."""

import dataclasses, json, os, subprocess, sys, time
from harness.contract import EventType, LifecycleEvent, Outcome, Permission, Projection
from harness.remote import protocol
from reference_impl import implementation
from reference_impl.remote import serve

MODE = sys.argv[1]
PIDS = sys.argv[2]
OUT = sys.stdout.buffer
SLEEPER = [sys.executable, "-c", "import time; time.sleep(300)"]


def note(pid):
    with open(PIDS, "a") as handle:
        handle.write(f"{pid}\n")


def helper(kind):
    if kind == "group":      # same process group, inherits stdout/stderr
        note(subprocess.Popen(SLEEPER).pid)
    elif kind == "session":  # its own session (setsid)
        note(subprocess.Popen(SLEEPER, start_new_session=True).pid)
    elif kind == "daemon":
        daemon()
    elif kind == "orphan":   # own session, parent gone, environment wiped: only the pipes tell
        middle = subprocess.Popen([sys.executable, "-c",
            "import subprocess, sys; p = subprocess.Popen(sys.argv[1:], start_new_session=True, "
            "env={}); print(p.pid)", *SLEEPER], stdout=subprocess.PIPE)
        note(int(middle.stdout.readline()))
        middle.wait()


DAEMON = """
import os, sys
if os.fork():
    os._exit(0)
os.setsid()                         # its own session and process group
if os.fork():
    os._exit(0)                     # its parent is gone: an orphan
with open(sys.argv[1], "a") as handle:
    handle.write(f"{os.getpid()}\\n")
os.closerange(0, 65536)             # no pipe of the harness's
os.execve(sys.argv[2], [sys.argv[2], "-c", "import time; time.sleep(300)"], {})  # no mark
"""


def daemon():
    """A daemon that leaves every trace the sweep follows (double fork, setsid, every
    descriptor closed, re-exec with an empty environment): only the kernel knows it."""
    subprocess.run([sys.executable, "-c", DAEMON, PIDS, sys.executable], check=True)


def raw(data):
    OUT.write(data)
    OUT.flush()


class Runtime:
    def __init__(self, runtime, world):
        self._runtime = runtime
        self._world = world

    def __getattr__(self, name):
        return getattr(self._runtime, name)

    def run_turn(self, session_id, text):
        kind, _, then = MODE.partition("-then-")
        if kind in ("group", "session", "orphan", "daemon"):
            helper(kind)
            if then == "exit":
                os._exit(5)
            if then == "hang":
                time.sleep(300)
        if MODE == "hang":
            note(os.getpid())
            time.sleep(300)
        if MODE == "huge-line":
            raw(b'{"jsonrpc":"2.0","id":99,"method":"now","params":{"pad":"' + b"x" * int(os.environ.get("LH_HOSTILE_BYTES", "3000000")))
            time.sleep(300)
        if MODE == "deep-json":
            raw(b'{"jsonrpc":"2.0","id":99,"method":"now","params":{"a":' + b"[" * 100_000
                + b"]" * 100_000 + b"}}\n")
            time.sleep(300)
        if MODE == "request-flood":
            raw(b"".join(b'{"jsonrpc":"2.0","id":%d,"method":"now","params":{}}\n' % n
                         for n in range(1000, 6000)))
            time.sleep(300)
        if MODE == "surrogate-event":  # valid JSON: the escape \\ud800 alone is no character
            protocol._ENCODE = json.JSONEncoder(separators=(",", ":")).encode
            self._world.emit(LifecycleEvent(EventType.OPERATION_PREPARED, session_id,
                                            data={"note": "ok", "bad": "x\ud800y"}))
        if MODE in ("nan-event", "infinity-event"):  # NaN and Infinity are not JSON
            protocol._ENCODE = json.JSONEncoder(separators=(",", ":")).encode
            self._world.emit(LifecycleEvent(EventType.OPERATION_PREPARED, session_id, data={
                "cost": float("nan") if MODE == "nan-event" else float("-inf")}))
        if MODE == "unknown-failpoint":
            self._world.failpoint("<b>after_lunch</b>", {"session_id": session_id})
        if MODE == "event-flood":
            while True:
                self._world.emit(LifecycleEvent(EventType.OPERATION_PREPARED, session_id))
        if MODE == "big-events":  # each under the line limit, together without end
            blob = "x" * int(os.environ.get("LH_HOSTILE_EVENT_BYTES", "1000000"))
            while True:
                self._world.emit(LifecycleEvent(EventType.OPERATION_PREPARED, session_id,
                                                data={"blob": blob}))
        return self._runtime.run_turn(session_id, text)


class Impl:
    def __init__(self):
        self._impl = implementation()
        self.info = self._impl.info

    def open(self, data_dir, world):
        return Runtime(self._impl.open(data_dir, world), world)

    def inspect(self, data_dir):
        if MODE == "hang-inspect":
            note(os.getpid())
            time.sleep(300)
        if MODE == "huge-inspect":
            raw(b'{"pad":"' + b"x" * 300_000 + b'"}\n')
            time.sleep(300)
        if MODE == "big-inspect":  # a valid reading of ~10 MB, new at every probe
            self.readings = getattr(self, "readings", 0) + 1
            observation = self._impl.inspect(data_dir)
            return dataclasses.replace(observation, projections=observation.projections + tuple(
                Projection("s1", f"ex-{n}", f"c{n}", Permission.DENY, Outcome.NOT_STARTED,
                           "denied", f"{self.readings}:" + "y" * 5_000, ())
                for n in range(2_000)))
        return self._impl.inspect(data_dir)


if MODE == "hang-handshake":
    note(os.getpid())
    time.sleep(300)
if os.environ.get("LH_HOSTILE_FORK_SERVER") == "1":  # offer a fork server, as the reference
    from reference_impl.remote import ForkTemplate, fork_socket_from_environment
    protocol_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    fork_socket = fork_socket_from_environment()
    if fork_socket is not None:
        sys.exit(ForkTemplate(Impl, fork_socket, sys.stdin.fileno(), protocol_out).run())
    sys.exit(serve(Impl(), sys.stdin.buffer, protocol_out))
status = serve(Impl(), sys.stdin.buffer, OUT)
if MODE == "ignore-shutdown":  # answered shutdown, never exits
    note(os.getpid())
    time.sleep(300)
sys.exit(status)
