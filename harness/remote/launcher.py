"""Run an implementation under test as a child process speaking :mod:`harness.remote.protocol`.

:class:`ProcessImplementation` satisfies :class:`harness.contract.Implementation`. Guarantees:

* ``open(data_dir, world)`` spawns one process per opened instance (stdin/stdout pipes, its
  own process group, stderr kept in a bounded buffer for error messages), sends
  ``initialize`` then ``open``, and returns a :class:`ProcessRuntime` whose driver calls are
  requests; while one is in flight the proxy answers the child's port requests by calling
  ``world`` in the calling thread (so the runner's re-entrant calls and holds just work);
* crash mode ``"process"``: when the world raises ``SimulatedCrash`` while serving a port
  request (a crash fault at a ``failpoint``, or any call of an instance the run declared
  dead) the child's process group is SIGKILLed and reaped — it is paused waiting for that
  answer, so it dies right there and none of its ``finally:`` blocks run — and the *same*
  ``SimulatedCrash`` is re-raised out of the driver call: the runner's drop-and-reopen path
  then spawns a fresh process on the same data dir;
* a child that exits, writes a line that is not a protocol message, stays silent longer
  than ``reply_timeout_s`` while a response is due (or leaves its stdin unread that long),
  goes past one of the :class:`~harness.contract.limits.Limits` (line length, inspect answer size,
  JSON depth, messages read ahead, bytes one scenario run brings in: every line its
  instances send and every reading of its data dir count), or rejects a request becomes a
  :class:`~harness.remote.errors.RemoteError` naming the command, the pid, the exit status
  and the tail of its stderr (a silent or babbling child is killed first). The
  implementation's own exceptions come back as themselves: contract exceptions as their
  class, others as :class:`~harness.remote.protocol.RemoteException` subclasses of the same
  name. Nothing here makes the runner raise;
* ``inspect(data_dir)`` asks a persistent *inspector* process (one per implementation
  object, spawned on first use, respawned if it dies — but not for a data dir whose
  inspection already failed, until it is released) so probes cost a round trip, not a
  process start; ``info`` comes from its ``initialize`` handshake;
* every wait is bounded: pipes are read and written in the calling thread with ``select``
  (no reader thread to block on; the stderr reader is a daemon that gives up when told),
  and :meth:`ProcessImplementation.bound_waits` makes the startup and reply timeouts follow
  the run's ``time_limit_s`` (3/4 of it);
* no child outlives its use: ``close()`` of a runtime shuts its process down, a dropped
  runtime's process is killed when the proxy is collected, :meth:`release` kills whatever
  still runs on a data dir (the runner calls it when a run ends, e.g. after a hang), and
  the interpreter's exit kills the rest. Each child leads its own session and carries a
  mark in its environment; ending it kills its process group and (Linux) sweeps ``/proc``
  for what it started (:func:`sweep`: session, group, parent chain, the mark, or a process
  still holding its pipes). Those strays are killed and :meth:`release` returns them by
  pid for the run's error. Whatever escaped all of that (double fork, ``setsid``, every
  descriptor closed, an empty environment) is re-parented to the harness, its child
  subreaper (:mod:`harness.remote.subreaper`): a child's end kills those too and reports
  them by pid and command line. :func:`end_all_children` (signals, exit) ends every child
  and runs :func:`register_cleanup` callbacks. A forked copy of this object never touches its
  parent's children;
* fork server (``docs/protocol.md``; :mod:`harness.remote.forkserver`): the first child
  needed is a *template* candidate started with the fork socket. If it answers
  ``initialize`` with ``fork_server: true``, every instance and inspector is forked from it
  (also by ``run --jobs`` workers, which inherit the socket) and then handled exactly as
  above: its own session, pipes, mark, SIGKILL crashes, sweep, release; liveness and kill
  through a pidfd, the exit status as the template reports it. If it does not, it becomes
  the shared inspector and every instance is spawned. A candidate that fails its handshake
  fails the open (or load) that started it, as that child would have. A template that dies,
  hangs (bounded by ``fork_timeout_s``, else the startup timeout) or lies is reported once
  in :attr:`ProcessImplementation.fork_off` and the launcher spawns from then on;
  :meth:`ProcessImplementation.close` (or the interpreter's exit) ends the template and
  whatever of its instances is left;
* readings: each data dir's ``inspect`` answers are decoded with the previous reading's
  objects reused (:mod:`harness.remote.observation_reuse`), and a server that offers
  ``inspect_since`` is sent the token of its own last reading and may answer "unchanged";
  an "unchanged" for any other token is a protocol error (a :class:`RemoteError`); one that
  offers ``inspect_parts`` may also leave out the parts of a reading unchanged since that
  token (the previous reading's objects stand for them).
"""

from __future__ import annotations

import atexit
import functools
import itertools
import os
import select
import shlex
import signal
import subprocess
import threading
import time
import weakref
from typing import Any, Callable, Mapping, Sequence

from harness.contract import (
    CONTRACT_VERSION,
    ApprovalPrompt,
    ClassifierRequest,
    CheckpointFixture,
    ClassifierVerdict,
    ContractError,
    ImplementationInfo,
    LifecycleEvent,
    ModelChunk,
    ModelRequest,
    Observation,
    Projection,
    RecoveryReport,
    Rule,
    SessionConfig,
    SimulatedCrash,
    ToolInvocation,
    ToolResult,
    TurnResult,
    World,
)
from harness.contract.errors import ImplementationLoadError
from harness.contract.limits import DEFAULT_LIMITS, LimitExceeded, Limits, current_limits, human_bytes
from harness.remote import forkserver, subreaper
from harness.remote.errors import RemoteError
from harness.remote.forkserver import ForkChannel, ForkRefused
from harness.remote.observation_reuse import ObservationReuse
from harness.remote.protocol import (
    DRIVER_METHODS,
    INVALID_PARAMS,
    PORT_METHODS,
    PROTOCOL_VERSION,
    WRONG_STATE,
    CHILD_MARK_ENV,
    FORK_FD_ENV,
    BadMessage,
    BadValue,
    CheckpointFixtureResult,
    Endpoint,
    InitializeResult,
    PeerGone,
    PeerRejected,
    PeerSilent,
    ProtocolError,
    RpcFault,
)

CRASH_MODE = "process"
DEFAULT_STARTUP_TIMEOUT_S = 15.0
"""How long a new child may take to answer ``initialize``."""
DEFAULT_REPLY_TIMEOUT_S = 15.0
"""How long a child may stay silent while a response is due (below the runner's default
20 s limit, so a hang is reported with the command, the status and the stderr tail)."""
REPLY_SHARE = 0.75
"""Share of the run's per-call time limit a child may stay silent while a response is due
(below the limit, so a hang is reported with the command, the status and the stderr tail)."""
_DEFAULT_TIME_LIMIT_S: float | None = None


def bound_load_waits(time_limit_s: float | None) -> None:
    """Bound the waits of launchers created from now on (the load-time handshake included)
    by ``time_limit_s`` (the command line's ``--time-limit-s``); None: no bound."""
    global _DEFAULT_TIME_LIMIT_S
    _DEFAULT_TIME_LIMIT_S = time_limit_s


EXIT_WAIT_S = 2.0
"""How long an orderly ``shutdown`` may take before the child is killed."""
STDERR_BUFFER_BYTES = 16_384
STDERR_TAIL_CHARS = 2_000
"""How much of the stderr tail an error message quotes."""


# --------------------------------------------------------------------------- transport


POLL_SLICE_S = 0.2
"""Longest a read or write waits before looking whether its child is being closed, so no
thread ever stays blocked on a pipe a stray process still holds."""
READ_CHUNK_BYTES = 65_536


class _ByteBudget:
    """What the processes of one scenario run (one data dir) may still send the harness:
    :attr:`~harness.contract.limits.Limits.scenario_bytes`, shared by its instances and by
    the inspector while it reads that data dir."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._lock = threading.Lock()

    def take(self, size: int) -> None:
        with self._lock:
            self.used += size
            used = self.used
        if used > self.limit:
            raise LimitExceeded("scenario_bytes", self.limit,
                                f"{human_bytes(used)} of messages in this scenario run",
                                "it sent more than one scenario may bring in")


class _PipeTransport:
    """Reads the child's stdout and writes its stdin in the calling thread, on non-blocking
    pipes with ``select``: every wait is bounded (the read timeout, the write timeout), one
    line is at most ``line_bytes`` long, and at most ``unanswered`` messages are read ahead.
    :meth:`close` never waits for a thread that is using the pipes: that thread closes them
    itself within :data:`POLL_SLICE_S`."""

    def __init__(self, stdin_fd: int, stdout_fd: int, limits: Limits) -> None:
        self._stdin_fd = stdin_fd
        self._stdout_fd = stdout_fd
        os.set_blocking(stdin_fd, False)
        os.set_blocking(stdout_fd, False)
        self.limits = limits
        self.line_bytes = limits.line_bytes
        self.write_timeout_s: float | None = None
        self.leader_alive: Callable[[], bool] | None = None
        """When it says the child has exited, its output counts as ended even if a process
        it started still holds the pipe open."""
        self.budget: _ByteBudget | None = None
        """The scenario's byte budget every line read is taken from (None: unbounded)."""
        self._buffer = bytearray()
        self._scanned = 0
        """How far :attr:`_buffer` is known to hold no newline (each byte is looked at once)."""
        self._eof = False
        self._busy = threading.Lock()
        self._closing = False
        self._closed = False

    # -- reading ---------------------------------------------------------------------------

    def read_line(self, timeout: float | None) -> bytes:
        with self._busy:
            try:
                line = self._read_line(timeout)
            finally:
                if self._closing:
                    self._close_fds()
        if self.budget is not None and line:
            self.budget.take(len(line))
        return line

    def _read_line(self, timeout: float | None) -> bytes:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            newline = self._buffer.find(b"\n", self._scanned)
            if newline >= 0:
                if newline > self.line_bytes:
                    self._too_long(newline)
                line = bytes(self._buffer[:newline + 1])
                del self._buffer[:newline + 1]
                self._scanned = 0
                return line
            self._scanned = len(self._buffer)
            if len(self._buffer) > self.line_bytes:
                self._too_long(len(self._buffer))
            if self._eof or self._closing:
                line = bytes(self._buffer)
                self._buffer.clear()
                self._scanned = 0
                return line
            ready = self._wait(self._stdout_fd, False, deadline, timeout)
            if self._closing:
                continue
            if not ready:
                if self.leader_alive is not None and not self.leader_alive():
                    self._eof = True
                continue
            try:
                chunk = os.read(self._stdout_fd, READ_CHUNK_BYTES)
            except BlockingIOError:
                continue
            except OSError:
                chunk = b""
            if not chunk:
                self._eof = True
                continue
            self._buffer += chunk
            queued = self._buffer.count(b"\n", self._scanned)  # none before it
            if queued > self.limits.unanswered_messages:
                raise LimitExceeded("unanswered_messages", self.limits.unanswered_messages,
                                    f"{queued} messages read ahead of the harness's answers",
                                    "it sent messages without waiting for answers")

    def _too_long(self, size: int) -> None:
        name = "inspect_bytes" if self.line_bytes == self.limits.inspect_bytes \
            and self.line_bytes != self.limits.line_bytes else "line_bytes"
        self._buffer.clear()
        self._scanned = 0
        raise LimitExceeded(name, self.line_bytes,
                            f"{human_bytes(size)} read so far without a newline" if size
                            > self.line_bytes else f"a line of {human_bytes(size)}",
                            "it sent a message line that is too long")

    def _wait(self, fd: int, write: bool, deadline: float | None, timeout: float | None) -> bool:
        """Wait until ``fd`` is ready (True), at most :data:`POLL_SLICE_S` (False: the caller
        looks again); raise :class:`PeerSilent` past ``deadline``."""
        remaining = POLL_SLICE_S
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                if write:
                    raise PeerSilent(f"it read nothing of its stdin for {timeout:g}s")
                raise PeerSilent(f"no line within {timeout:g}s")
            remaining = min(remaining, left)
        try:
            if write:
                return bool(select.select([], [fd], [], remaining)[1])
            return bool(select.select([fd], [], [], remaining)[0])
        except (OSError, ValueError):
            self._eof = True
            return True

    # -- writing ---------------------------------------------------------------------------

    def write_line(self, data: bytes) -> None:
        with self._busy:
            try:
                self._write(data)
            finally:
                if self._closing:
                    self._close_fds()

    def _write(self, data: bytes) -> None:
        timeout = self.write_timeout_s
        deadline = None if timeout is None else time.monotonic() + timeout
        view = memoryview(data)
        while view:
            if self._closing:
                raise PeerGone("the harness is closing the child's pipes")
            try:
                written = os.write(self._stdin_fd, view)
            except BlockingIOError:
                written = 0
            except OSError as exc:
                raise PeerGone(f"cannot write to the child's stdin ({exc})") from None
            view = view[written:]
            if view:
                self._wait(self._stdin_fd, True, deadline, timeout)

    # -- closing ---------------------------------------------------------------------------

    def close(self) -> None:
        """Close both pipes now, or (when a thread is reading or writing) let that thread
        close them within :data:`POLL_SLICE_S`; never waits for it."""
        self._closing = True
        if self._busy.acquire(blocking=False):
            try:
                self._close_fds()
            finally:
                self._busy.release()

    def _close_fds(self) -> None:
        if self._closed:
            return
        self._closed = True
        for fd in (self._stdin_fd, self._stdout_fd):
            try:
                os.close(fd)
            except OSError:
                pass

    def at_eof(self, wait_s: float) -> bool:
        """Does the child's stdout end within ``wait_s`` (nobody holds it any more)?
        Discards what is still unread. False if a thread is using the pipe."""
        if not self._busy.acquire(timeout=wait_s):
            return False
        try:
            deadline = time.monotonic() + wait_s
            while not self._eof and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                ready, _, _ = select.select([self._stdout_fd], [], [], left)
                if not ready:
                    return False
                try:
                    if not os.read(self._stdout_fd, READ_CHUNK_BYTES):
                        self._eof = True
                except BlockingIOError:
                    continue
                except OSError:
                    self._eof = True
            return True
        finally:
            self._busy.release()


class _StderrTail:
    """The last :data:`STDERR_BUFFER_BYTES` bytes the child wrote to stderr, read by a daemon
    thread that owns the pipe (it closes it at the end, or within :data:`POLL_SLICE_S` of
    :meth:`close`): nothing ever waits for it without a bound."""

    def __init__(self, fd: int, name: str) -> None:
        self._fd = fd
        self._buffer = bytearray()
        self._lock = threading.Lock()
        self._closing = False
        self.thread = threading.Thread(target=self._pump, name=f"{name}-stderr", daemon=True)
        self.thread.start()

    def _pump(self) -> None:
        try:
            while not self._closing:
                try:
                    ready, _, _ = select.select([self._fd], [], [], POLL_SLICE_S)
                    if not ready:
                        continue
                    chunk = os.read(self._fd, 4096)
                except BlockingIOError:
                    continue
                except (OSError, ValueError):
                    return
                if not chunk:
                    return
                with self._lock:
                    self._buffer += chunk
                    del self._buffer[:-STDERR_BUFFER_BYTES]
        finally:
            try:
                os.close(self._fd)
            except OSError:
                pass

    def ended(self, wait_s: float) -> bool:
        """Did stderr end (every process holding it is gone) within ``wait_s``?"""
        self.thread.join(wait_s)
        return not self.thread.is_alive()

    def close(self) -> None:
        self._closing = True

    def text(self, wait_s: float = 0.0) -> str:
        if wait_s:
            self.thread.join(wait_s)
        with self._lock:
            data = bytes(self._buffer)
        text = data.decode("utf-8", "replace").rstrip()
        if len(text) > STDERR_TAIL_CHARS:
            text = "..." + text[-STDERR_TAIL_CHARS:]
        return text


# --------------------------------------------------------------------------- strays


_PROC = "/proc"


def _proc_stat(pid: int) -> tuple[int, int, int, str, int] | None:
    """``(ppid, pgrp, session, name, start ticks)`` of ``pid`` from ``/proc``, None if gone."""
    try:
        with open(f"{_PROC}/{pid}/stat", "rb") as handle:
            raw = handle.read()
    except OSError:
        return None
    head, _, tail = raw.rpartition(b")")
    fields = tail.split()
    if len(fields) < 20 or fields[0] == b"Z":
        return None  # a zombie holds nothing any more
    name = head.partition(b"(")[2].decode("utf-8", "replace")
    return int(fields[1]), int(fields[2]), int(fields[3]), name, int(fields[19])


def _started(pid: int) -> int:
    """When ``pid`` started (clock ticks since boot; 0 if unknown)."""
    stat = _proc_stat(pid)
    return 0 if stat is None else stat[4]


def _holds(pid: int, mark: bytes, pipes: frozenset[str]) -> bool:
    """Does ``pid`` carry the child's mark in its environment or hold one of its pipes?"""
    try:
        with open(f"{_PROC}/{pid}/environ", "rb") as handle:
            if mark in handle.read().split(b"\0"):
                return True
    except OSError:
        pass
    if not pipes:
        return False
    try:
        fds = os.listdir(f"{_PROC}/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"{_PROC}/{pid}/fd/{fd}") in pipes:
                return True
        except OSError:
            continue
    return False


def _kill_group(leader: int) -> None:
    try:
        os.killpg(leader, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass


def sweep(leader: int, mark: str, pipes: frozenset[str] = frozenset(),
          since: int = 0) -> list[tuple[int, str]]:
    """SIGKILL every process the child ``leader`` started (Linux: found in ``/proc`` by its
    session or process group, by parent chain, by the inherited :data:`CHILD_MARK_ENV` mark,
    or holding one of ``pipes`` such as ``"pipe:[123]"``); ``(pid, name)`` of those killed,
    the leader excluded; only processes started at ``since`` (clock ticks since boot) or
    later can be its descendants, so older ones are not read. Elsewhere only the process
    group is killed."""
    if not os.path.isdir(_PROC):
        _kill_group(leader)
        return []
    own = os.getpid()
    table: dict[int, tuple[int, int, int, str, int]] = {}
    for entry in os.listdir(_PROC):
        if not entry.isdigit() or int(entry) == own:
            continue
        stat = _proc_stat(int(entry))
        if stat is not None:
            table[int(entry)] = stat
    found = {pid for pid, (_, pgrp, session, _, _) in table.items()
             if session == leader or pgrp == leader}
    changed = True
    while changed:  # descendants by parent chain
        changed = False
        for pid, (ppid, _, _, _, _) in table.items():
            if pid not in found and (ppid == leader or ppid in found):
                found.add(pid)
                changed = True
    token = f"{CHILD_MARK_ENV}={mark}".encode()
    found |= {pid for pid, stat in table.items()
              if pid not in found and stat[4] >= since and _holds(pid, token, pipes)}
    _kill_group(leader)  # after the snapshot: a member killed before it would not be named
    killed = []
    for pid in sorted(found):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # the group kill got it first
        except PermissionError:
            continue
        if pid != leader:
            killed.append((pid, table[pid][3]))
    return killed


# --------------------------------------------------------------------------- one child


_LIVE: weakref.WeakSet[_Child] = weakref.WeakSet()
_CLEANUPS: list[Callable[[], None]] = []
_SEQUENCE = itertools.count(1)


def register_cleanup(callback: Callable[[], None]) -> None:
    """Run ``callback`` when the harness ends everything it started (a signal, the
    interpreter's exit); e.g. removing the containers of a docker launcher."""
    _CLEANUPS.append(callback)


def end_all_children() -> int:
    """Kill every child this process started (and what they started) and run the
    :func:`register_cleanup` callbacks; how many children were still running. Safe to call
    from a signal handler's aftermath and more than once."""
    running = 0
    for child in list(_LIVE):
        if child.owner_pid == os.getpid():
            running += child.popen.poll() is None
            child.kill()
    subreaper.escaped()  # orphans no child's end was there to find
    for callback in list(_CLEANUPS):
        try:
            callback()
        except Exception:  # noqa: BLE001 - best effort: the other cleanups must still run
            pass
    return running


def settle_children() -> None:
    """Before this process exits (a ``--jobs`` worker, whose ``os._exit`` runs no atexit
    hook): let every child it is stopping in the background end (each within
    :data:`EXIT_WAIT_S`), then kill what is left (:func:`end_all_children`). A worker that
    exited with an instance still stopping would orphan it to its parent, the subreaper,
    where a sibling worker's scan for escaped processes takes it for a stray of its own
    case: a false report against an implementation that did nothing wrong."""
    for child in list(_LIVE):
        reaper = child.reaper
        if child.owner_pid == os.getpid() and reaper is not None:
            reaper.join(EXIT_WAIT_S + 1.0)
    end_all_children()


class _Child:
    """One spawned implementation process and its endpoint (the harness side).

    It leads its own session (so its process group is its own) and carries a mark in its
    environment; :meth:`kill` kills the group, sweeps what escaped it (:func:`sweep`) and
    reports those strays by pid through ``on_strays``."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str] | None, cwd: str | None,
                 command: str, reply_timeout_s: float, on_kill: Any = None,
                 limits: Limits = DEFAULT_LIMITS,
                 on_strays: Callable[[_Child, str], None] | None = None, *,
                 fork: Callable[[str, int, int, int], Any] | None = None,
                 channel: ForkChannel | None = None) -> None:
        """``fork(mark, stdin_r, stdout_w, stderr_w)``: start the process through a fork
        template instead of spawning ``argv`` (it raises :class:`ForkRefused`, turned into
        a :class:`RemoteError`); ``channel``: spawn a template holding its other end."""
        self.command = command
        self.reply_timeout_s = reply_timeout_s
        self._on_kill = on_kill
        self.on_strays = on_strays
        self.data_dir: str | None = None
        self.killed = False
        self.stopping = False
        """Set once asked to shut down: its reaper ends it, :meth:`release` leaves it be."""
        self.strays: list[tuple[int, str]] = []
        self.inspect_since = False
        """Its ``initialize`` offered ``inspect_since``."""
        self.inspect_parts = False
        """Its ``initialize`` offered ``inspect_parts``."""
        self.reaper: threading.Thread | None = None
        self.mark = f"{os.getpid()}-{next(_SEQUENCE)}-{os.urandom(4).hex()}"
        self.limits = limits
        child_env = dict(os.environ if env is None else env)
        child_env[CHILD_MARK_ENV] = self.mark
        pass_fds: tuple[int, ...] = ()
        if channel is not None:
            child_env[FORK_FD_ENV] = str(channel.theirs.fileno())
            pass_fds = (channel.theirs.fileno(),)
        self.forked = fork is not None
        fds = [*os.pipe(), *os.pipe(), *os.pipe()]
        stdin_r, stdin_w, stdout_r, stdout_w, stderr_r, stderr_w = fds
        self.pipes = frozenset(f"pipe:[{os.fstat(fd).st_ino}]" for fd in (stdin_r, stdout_r,
                                                                            stderr_r))
        # Orphans of what it starts come back to this process (the kernel re-parents them
        # to their nearest subreaper), where _end finds them whatever marks they dropped.
        subreaper.become_subreaper()
        try:
            if fork is not None:
                with subreaper.spawning():  # ours if its template dies: not escaped either
                    self.popen = fork(self.mark, stdin_r, stdout_w, stderr_w)
                    subreaper.adopt(self.popen.pid)
            else:
                with subreaper.spawning():  # not taken for an escaped process meanwhile
                    self.popen = subprocess.Popen(
                        list(argv), stdin=stdin_r, stdout=stdout_w, stderr=stderr_w,
                        env=child_env, cwd=cwd, start_new_session=True, close_fds=True,
                        pass_fds=pass_fds,
                    )
                    subreaper.adopt(self.popen.pid)
        except OSError as exc:
            for fd in fds:
                os.close(fd)
            raise RemoteError(f"cannot start the implementation command `{command}`: "
                              f"{exc.strerror or exc}; check the command (its first word "
                              "must be an executable on PATH or a path to one)") from None
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        for fd in (stdin_r, stdout_w, stderr_w):
            os.close(fd)
        self.pid = self.popen.pid
        self.started = _started(self.pid)
        self.owner_pid = os.getpid()
        self._kill_lock = threading.Lock()
        self._ended = False
        name = f"lh-child-{self.pid}"
        self.transport = _PipeTransport(stdin_w, stdout_r, limits)
        self.transport.write_timeout_s = reply_timeout_s
        self.transport.leader_alive = lambda: self.popen.poll() is None
        self.stderr = _StderrTail(stderr_r, name)
        self.endpoint = Endpoint(self.transport, incoming=PORT_METHODS,
                                 outgoing=DRIVER_METHODS, handlers={}, strict=True,
                                 reply_timeout_s=reply_timeout_s, max_depth=limits.json_depth)
        _LIVE.add(self)

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    def set_reply_timeout(self, timeout_s: float) -> None:
        self.reply_timeout_s = timeout_s
        self.endpoint.reply_timeout_s = timeout_s
        self.transport.write_timeout_s = timeout_s

    def initialize(self, timeout_s: float) -> InitializeResult:
        self.endpoint.reply_timeout_s = timeout_s
        try:
            result = self.call("initialize", protocol_version=PROTOCOL_VERSION,
                               contract_version=CONTRACT_VERSION)
        finally:
            self.endpoint.reply_timeout_s = self.reply_timeout_s
        if result.protocol_version != PROTOCOL_VERSION:
            self.kill()
            raise self.error("initialize", f"it answered protocol_version "
                             f"{result.protocol_version}; this harness speaks {PROTOCOL_VERSION}")
        return result

    def call(self, method: str, **params: Any) -> Any:
        """A request; protocol failures become :class:`RemoteError` (see the module doc)."""
        if self.killed:
            raise self.error(method, "its process is already gone (killed after an earlier "
                             "crash or failure); open a new instance")
        if method in ("inspect", "inspect_since", "inspect_parts"):
            self.transport.line_bytes = self.limits.inspect_bytes
        try:
            return self.endpoint.call(method, **params)
        except SimulatedCrash:
            self.kill()
            raise
        except LimitExceeded as exc:
            self.kill()
            raise self.error(method, f"{exc} (while {method!r} was in flight); the harness "
                             "killed it") from None
        except PeerSilent as exc:
            self.kill()
            what = (f"it read nothing of its stdin for {self.transport.write_timeout_s:g}s"
                    if "stdin" in str(exc) else
                    f"it wrote nothing for {self.endpoint.reply_timeout_s:g}s")
            raise self.error(method, f"{what} while {method!r} awaited its response (hung?); "
                             "the harness killed it") from None
        except PeerGone:
            self.wait(EXIT_WAIT_S)
            raise self.error(method, f"it closed its stdout while {method!r} awaited its "
                             "response") from None
        except BadValue as exc:
            self.kill()
            raise self.error(method, f"it sent a value no JSON message can carry while "
                             f"{method!r} was in flight: {exc}; the harness killed it") from None
        except BadMessage as exc:
            self.kill()
            raise self.error(method, f"it wrote a line that is not a message of protocol "
                             f"version {PROTOCOL_VERSION} while {method!r} was in flight "
                             f"({exc}); stdout carries protocol messages only: write logs to "
                             "stderr; the harness killed it") from None
        except PeerRejected as exc:
            raise self.error(method, f"it rejected {method!r}: {exc}") from None
        except ProtocolError as exc:  # pragma: no cover - every subclass is handled above
            self.kill()
            raise self.error(method, str(exc)) from None
        finally:
            self.transport.line_bytes = self.limits.line_bytes

    def status(self) -> str:
        code = self.popen.poll()
        if code is None:
            return "it is still running"
        if not getattr(self.popen, "status_known", True):
            return ("it has ended (killed by the harness; " if self.killed else
                    "it has ended (") + "its exit status is unknown: its fork template is gone)"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            by = "by the harness " if self.killed else ""
            return f"it was killed {by}with {name}"
        return f"it exited with status {code}"

    def error(self, method: str, detail: str) -> RemoteError:
        tail = self.stderr.text(wait_s=0.5 if self.popen.poll() is not None else 0.0)
        return RemoteError(
            f"implementation process `{self.command}` (pid {self.pid}), {method}: {detail}; "
            f"{self.status()}; stderr tail: {tail if tail else '(empty)'}")

    def wait(self, timeout_s: float) -> None:
        try:
            self.popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
        else:
            self._end()

    def kill(self) -> None:
        """SIGKILL the child's session, group and everything it started, reap it, close its
        pipes (idempotent, bounded whatever the processes do)."""
        if self.owner_pid != os.getpid():
            return  # a forked copy: the process belongs to the parent
        if not self.killed and self.popen.poll() is None:
            self.killed = True
            if self._on_kill is not None:
                try:
                    self._on_kill()
                except Exception:  # noqa: BLE001 - best effort; the SIGKILL below is the kill
                    pass
            try:
                self.popen.kill()
            except ProcessLookupError:
                pass
        self._end()

    def _end(self) -> None:
        """The leader is gone or going: sweep the rest, reap, close (once)."""
        if self._ended or not self._kill_lock.acquire(blocking=False):
            return
        try:
            if self._ended:
                return
            self._ended = True
            self._note_strays(sweep(self.pid, self.mark, since=self.started))
            try:
                self.popen.wait(EXIT_WAIT_S)
            except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL cannot be ignored
                pass
            else:
                # Reaped (a forked one by its template, or here if the template died and
                # it was re-parented to us): the number is free for reuse.
                subreaper.forget(self.pid, reap=self.forked)
            # Someone outside the session and the marked tree may still hold the pipes
            # (it cleared its environment and its parent died): find them by the pipes.
            if not (self.stderr.ended(0.05) and self.transport.at_eof(0.05)):
                self._note_strays(sweep(self.pid, self.mark, self.pipes, self.started))
            # And what left every mark, pipe and session behind: re-parented to us (or, for
            # an instance forked by our parent's template, to our parent).
            self._note_strays(subreaper.escaped(since=self.started))
            self.transport.close()
            self.stderr.close()
        finally:
            self._kill_lock.release()

    def _note_strays(self, strays: list[tuple[int, str]]) -> None:
        if not strays:
            return
        self.strays.extend(strays)
        self._report(_strays_text(strays))

    def stop(self) -> None:
        """Orderly end: ``shutdown``, then (in the background) wait for the exit and kill
        what is left if it does not come within :data:`EXIT_WAIT_S`: a contract violation
        (``shutdown`` is answered, then the process exits), reported like a stray."""
        if self.owner_pid != os.getpid():
            return
        if self.popen.poll() is None and not self.killed:
            self.stopping = True
            answered = False
            try:
                self.endpoint.reply_timeout_s = EXIT_WAIT_S
                self.transport.write_timeout_s = EXIT_WAIT_S
                self.endpoint.call("shutdown")
                answered = True
            except (ProtocolError, LimitExceeded):
                pass
            except Exception:  # noqa: BLE001 - the child's answer does not matter any more
                pass
            self.reaper = threading.Thread(target=self._reap, args=(answered,),
                                           name=f"lh-reap-{self.pid}", daemon=True)
            self.reaper.start()
            return
        self.kill()

    def _reap(self, answered: bool) -> None:
        try:
            self.popen.wait(EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            self._report(f"it {'answered' if answered else 'did not answer'} `shutdown` but "
                         f"did not exit within {EXIT_WAIT_S:g}s, so the harness killed it (the "
                         "protocol's shutdown: answer, then exit with status 0; "
                         "docs/protocol.md)")
        self.kill()

    def _report(self, text: str) -> None:
        if self.on_strays is not None:
            try:
                self.on_strays(self, text)
            except Exception:  # noqa: BLE001 - reporting must not stop the cleanup
                pass


def _strays_text(strays: list[tuple[int, str]]) -> str:
    listed = ", ".join(f"pid {pid} ({name})" for pid, name in strays)
    return (f"it left {len(strays)} process(es) behind that the harness killed: {listed} "
            "(an implementation must end what it starts)")


@atexit.register
def _kill_leftovers() -> None:
    end_all_children()
    forkserver.release_all()


# --------------------------------------------------------------------------- the proxies


class _Ports:
    """Answers one child's port requests by calling the world the runner gave."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.streams: dict[str, Any] = {}

    def handlers(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in PORT_METHODS}

    def open_model_stream(self, request: ModelRequest) -> str:
        stream = self.world.open_model_stream(request)
        stream_id = f"m{len(self.streams) + 1}"
        self.streams[stream_id] = stream
        return stream_id

    def next_chunk(self, stream_id: str) -> ModelChunk:
        stream = self.streams.get(stream_id)
        if stream is None:
            raise RpcFault(INVALID_PARAMS, f"next_chunk: no model stream {stream_id!r} was "
                           "opened by this instance (open_model_stream returns the id)")
        return stream.next_chunk()

    def review(self, request: ClassifierRequest) -> ClassifierVerdict:
        return self.world.review(request)

    def execute_tool(self, invocation: ToolInvocation) -> ToolResult:
        return self.world.execute_tool(invocation)

    def prompt_approval(self, prompt: ApprovalPrompt) -> None:
        self.world.prompt_approval(prompt)

    def publish(self, projection: Projection) -> None:
        self.world.publish(projection)

    def now(self) -> float:
        return self.world.now()

    def emit(self, event: LifecycleEvent) -> None:
        self.world.emit(event)

    def failpoint(self, name: str, context: dict[str, Any]) -> None:
        self.world.failpoint(name, context)  # type: ignore[arg-type] - the world takes str


def _no_world(*_: Any, **__: Any) -> None:
    raise RpcFault(WRONG_STATE, "there is no world while the harness inspects: inspect must "
                   "read the durable store alone, without port calls")


class ProcessRuntime:
    """A :class:`harness.contract.Runtime` whose every call is a request to one child."""

    def __init__(self, child: _Child, world: World) -> None:
        self._child = child
        child.endpoint.handlers = _Ports(world).handlers()
        self._lock = threading.RLock()
        # Kill the child if the runner drops this proxy without closing it. The callback
        # must not reference ``self``.
        self._finalizer = weakref.finalize(self, child.kill)

    @property
    def pid(self) -> int:
        return self._child.pid

    def _call(self, method: str, **params: Any) -> Any:
        with self._lock:
            return self._child.call(method, **params)

    def open_session(self, config: SessionConfig) -> None:
        self._call("open_session", config=config)

    def run_turn(self, session_id: str, user_text: str) -> TurnResult:
        return self._call("run_turn", session_id=session_id, user_text=user_text)

    def answer_approval(self, wait_id: str, approve: bool) -> TurnResult:
        return self._call("answer_approval", wait_id=wait_id, approve=approve)

    def update_rules(self, session_id: str, rules: tuple[Rule, ...],
                     permission_version: int) -> None:
        self._call("update_rules", session_id=session_id, rules=tuple(rules),
                   permission_version=permission_version)

    def cancel(self, session_id: str) -> None:
        self._call("cancel", session_id=session_id)

    def recover(self) -> RecoveryReport:
        return self._call("recover")

    def load_checkpoint(self, session_id: str, data: bytes) -> None:
        self._call("load_checkpoint", session_id=session_id, data=bytes(data))

    def close(self) -> None:
        with self._lock:
            try:
                if not self._child.killed and self._child.alive:
                    self._child.call("close")
            finally:
                self._child.stop()
                self._finalizer.detach()


# --------------------------------------------------------------------------- implementation


class ProcessImplementation:
    """An implementation run as ``argv`` (see the module doc). ``env`` is added to the
    harness's environment; ``info`` skips the load-time handshake (the one ``info`` would
    otherwise trigger)."""

    crash_mode = CRASH_MODE
    spares = 2
    """Children kept starting in the background, so that ``open`` (and the restart right
    after a crash) does not wait for a process start. 0 for commands that depend on the
    data dir. Not used while instances are forked from a template (a fork is quick)."""
    fork_timeout_s: float | None = None
    """Bound on one fork request (sending it, then the new process's report); None: the
    startup timeout."""
    fork_server = True
    """Ask the command for a fork server (``docs/protocol.md``, "Fork server") and, when it
    offers one, fork every instance and inspector from that one pre-started *template*;
    False (or a platform without pidfds), or a command that does not offer it: spawn each."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str] | None = None, *,
                 info: ImplementationInfo | None = None, cwd: str | None = None,
                 startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S,
                 reply_timeout_s: float | None = None,
                 limits: Limits | None = None, time_limit_s: float | None = None) -> None:
        self.argv = tuple(str(part) for part in argv)
        if not self.argv:
            raise ImplementationLoadError("process implementation: empty command; give the "
                                          "command that starts the implementation's server, "
                                          "e.g. process:'python -m reference_impl.remote'")
        self.command = shlex.join(self.argv)
        self.env = None if env is None else {**os.environ, **env}
        self.cwd = cwd
        self.startup_timeout_s = float(startup_timeout_s)
        self.reply_timeout_s = DEFAULT_REPLY_TIMEOUT_S if reply_timeout_s is None \
            else float(reply_timeout_s)
        self._configured_waits = (self.startup_timeout_s, reply_timeout_s)
        self.limits = current_limits() if limits is None else limits
        self._strays: dict[str | None, list[str]] = {}
        self._info = info
        self._info_from_handshake = False
        self.fixture_root: str | None = None
        """Folder the declared checkpoint fixtures are relative to (from the handshake)."""
        # Reentrant: killing a child under it may report its strays, which takes it again.
        self._lock = threading.RLock()
        self._inspect_lock = threading.Lock()
        self._inspectors: dict[str | None, _Child] = {}
        self._inspecting: str | None = None
        self._inspect_failures: dict[str, str] = {}
        self._by_dir: dict[str, weakref.WeakSet[_Child]] = {}
        self._spares: list[_Child] = []
        self._readings: dict[str, ObservationReuse] = {}
        """Per data dir, the latest reading's objects, reused for what did not change."""
        self._budgets: dict[str, _ByteBudget] = {}
        """Per data dir (one scenario run), what its processes may still send."""
        self._template: _Child | None = None
        self._channel: ForkChannel | None = None
        self._declined: _Child | None = None
        """A template candidate that offered no fork server: the shared inspector-to-be."""
        self.fork_off: str | None = None
        """Why instances are spawned, not forked (None: forking, or not tried yet)."""
        limit = _DEFAULT_TIME_LIMIT_S if time_limit_s is None else time_limit_s
        if limit is not None:
            self.bound_waits(limit)

    def bound_waits(self, time_limit_s: float) -> None:
        """Make every wait of this launcher follow the run's per-call time limit: a child
        may stay silent (or leave its stdin unread) for :data:`REPLY_SHARE` of it, and take
        as long to answer ``initialize`` (the runner calls this with its
        ``time_limit_s``; the command line with ``--time-limit-s`` before loading). Timeouts
        given to the constructor stay upper bounds."""
        startup, reply = self._configured_waits
        self.startup_timeout_s = min(startup, REPLY_SHARE * float(time_limit_s))
        self.reply_timeout_s = REPLY_SHARE * float(time_limit_s) if reply is None \
            else min(float(reply), float(time_limit_s))
        with self._lock:
            children = [*self._spares, *self._inspectors.values()]
        for child in children:
            child.set_reply_timeout(self.reply_timeout_s)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.command!r})"

    @property
    def spec(self) -> str:
        """The ``--impl`` text naming this implementation."""
        return f"process:{self.command}"

    # -- hooks for launchers that wrap the command (docker) ----------------------------------

    def _argv_for(self, data_dir: str | None) -> Sequence[str]:
        """The command for a child that works on ``data_dir`` (None: no data dir)."""
        return self.argv

    def _inspector_key(self, data_dir: str) -> str | None:
        """Which inspector serves ``data_dir``: one shared one (None) here."""
        return None

    def _kill_hook(self, child_name: str) -> Any:
        return None

    def _usable_fixture_root(self, root: str) -> str | None:
        return root if root and os.path.isabs(root) and os.path.isdir(root) else None

    def _prepare(self) -> None:
        """Check what spawning needs (raise ImplementationLoadError if it is missing)."""

    def _new_child(self, argv: Sequence[str], on_kill: Any) -> _Child:
        """Start one child running ``argv`` (docker: one that also manages its container):
        forked from the template when there is one, else spawned."""
        template = self._fork_template() if argv == self.argv else None
        if template is not None:
            try:
                return _Child(argv, self.env, self.cwd, shlex.join(argv), self.reply_timeout_s,
                              on_kill=on_kill, limits=self.limits, on_strays=self._note_strays,
                              fork=self._forker(template))
            except ForkRefused as exc:
                self._fork_failed(template, str(exc))
        return _Child(argv, self.env, self.cwd, shlex.join(argv), self.reply_timeout_s,
                      on_kill=on_kill, limits=self.limits, on_strays=self._note_strays)

    # -- the fork server ---------------------------------------------------------------------

    def _fork_template(self) -> _Child | None:
        """The template to fork from (started at the first need), None to spawn."""
        if not self.fork_server or self.fork_off is not None:
            return None
        with self._lock:
            template = self._template
            if template is None and self.fork_off is None:
                template = self._start_template()
            elif template is not None and template.owner_pid == os.getpid() \
                    and not template.alive:
                self._fork_failed(template, "it has exited")
                template = None
            return template

    def _start_template(self) -> _Child | None:
        if not forkserver.supported():
            self.fork_off = "this platform has no pidfds or descriptor passing"
            return None
        channel = ForkChannel()
        try:
            # No stray reports: ending it at close() ends what is left of its instances.
            template = _Child(self.argv, self.env, self.cwd, self.command,
                              self.reply_timeout_s, limits=self.limits, channel=channel)
        except RemoteError as exc:
            channel.close()
            self.fork_off = str(exc)
            return None
        finally:
            channel.started()
        template.endpoint.handlers = {name: _no_world for name in PORT_METHODS}
        try:
            offered = self._handshake(template).fork_server
        except RemoteError as exc:
            # The same command as an instance, failing at the same handshake: reported as
            # the failure of the child being started (one wait, not two), spawned after.
            channel.close()
            self.fork_off = f"its template failed: {exc}"
            raise
        if not offered:
            channel.close()
            self.fork_off = "the implementation offers no fork server"
            self._declined = template
            return None
        self._template, self._channel = template, channel
        return template

    def _forker(self, template: _Child) -> Callable[[str, int, int, int], Any]:
        channel = self._channel
        assert channel is not None

        def fork(mark: str, stdin_r: int, stdout_w: int, stderr_w: int) -> Any:
            timeout_s = self.startup_timeout_s if self.fork_timeout_s is None \
                else min(self.fork_timeout_s, self.startup_timeout_s)
            return channel.fork(template.pid, mark, stdin_r, stdout_w, stderr_w, timeout_s)
        return fork

    def _fork_failed(self, template: _Child, detail: str) -> None:
        """Spawn from now on. The template is left running (it may be the parent of live
        instances; ending it would end them): :meth:`close` ends it."""
        self.fork_off = str(template.error("fork", detail))

    # -- children ------------------------------------------------------------------------------

    def _budget(self, data_dir: str) -> _ByteBudget:
        with self._lock:
            budget = self._budgets.get(data_dir)
            if budget is None:
                budget = self._budgets[data_dir] = _ByteBudget(self.limits.scenario_bytes)
            return budget

    def _spawn(self, data_dir: str | None) -> _Child:
        self._prepare()
        argv = self._argv_for(data_dir)
        child = self._new_child(argv, on_kill=self._kill_hook(_child_name(argv)))
        child.data_dir = data_dir
        if data_dir is not None:
            child.transport.budget = self._budget(data_dir)
            with self._lock:
                self._by_dir.setdefault(data_dir, weakref.WeakSet()).add(child)
        return child

    def _take(self, data_dir: str) -> _Child:
        """A child for ``data_dir``: the spare if one is ready, then start the next spare."""
        if self.spares <= 0 or (self._fork_template() is not None and not self._spares):
            return self._spawn(data_dir)
        self._prepare()
        child = None
        with self._lock:
            while self._spares and child is None:
                spare = self._spares.pop(0)
                if spare.owner_pid == os.getpid() and spare.alive:
                    child = spare
                else:
                    spare.kill()  # dead, or a forked copy's (kill() leaves those alone)
        if child is None:
            child = self._spawn(None)
        child.data_dir = data_dir
        child.transport.budget = self._budget(data_dir)
        child.set_reply_timeout(self.reply_timeout_s)
        with self._lock:
            self._by_dir.setdefault(data_dir, weakref.WeakSet()).add(child)
        while len(self._spares) < self.spares:
            try:
                spare = self._spawn(None)
            except RemoteError:
                break  # the next open reports it
            with self._lock:
                self._spares.append(spare)
        return child

    def _handshake(self, child: _Child) -> InitializeResult:
        try:
            result = child.initialize(self.startup_timeout_s)
        except BaseException:
            child.kill()
            raise
        child.inspect_since = result.inspect_since
        child.inspect_parts = result.inspect_parts
        with self._lock:
            if self._info is None:
                self._info = result.info
                self._info_from_handshake = True
                self.fixture_root = self._usable_fixture_root(result.fixture_root)
            elif self._info_from_handshake and result.info != self._info:
                child.kill()
                raise child.error("initialize", "it reported a different ImplementationInfo "
                                  f"({result.info}) than at load time ({self._info})")
            elif self.fixture_root is None:
                self.fixture_root = self._usable_fixture_root(result.fixture_root)
        return result

    def _inspector(self, key: str | None) -> _Child:
        """The inspector for ``key`` (a data dir it mounts, or None for a shared one)."""
        child = self._inspectors.get(key)
        if child is not None and (child.owner_pid != os.getpid() or child.killed
                                  or not child.alive):
            child = None
        if child is None and key is None and self._declined is not None:
            child, self._declined = self._declined, None  # already initialized, no world
            if child.owner_pid != os.getpid() or child.killed or not child.alive:
                child = None
            else:
                self._inspectors[key] = child
        if child is None:
            child = self._spawn(key)
            child.endpoint.handlers = {name: _no_world for name in PORT_METHODS}
            self._handshake(child)
            self._inspectors[key] = child
        return child

    # -- contract.Implementation ---------------------------------------------------------------

    @property
    def info(self) -> ImplementationInfo:
        if self._info is None:
            with self._inspect_lock:
                if self._info is None:
                    try:
                        self._inspector(None)
                    except RemoteError as exc:
                        raise ImplementationLoadError(
                            f"--impl {self.spec}: cannot load the implementation: {exc}"
                        ) from None
        assert self._info is not None
        return self._info

    def open(self, data_dir: str, world: World) -> ProcessRuntime:
        child = self._take(data_dir)
        runtime = ProcessRuntime(child, world)
        self._handshake(child)
        runtime._call("open", data_dir=data_dir)
        return runtime

    def inspect(self, data_dir: str) -> Observation:
        key = self._inspector_key(data_dir)
        with self._inspect_lock:
            failed = self._inspect_failures.get(data_dir)
            if failed is not None:  # no respawn per probe: one failure ends inspection
                raise RemoteError(f"inspect is off for the rest of this run after: {failed}")
            self._inspecting = data_dir
            try:
                child = self._inspector(key)
                child.transport.budget = self._budget(data_dir)  # its readings count too
                reuse = self._readings.get(data_dir)
                if reuse is None:
                    reuse = self._readings[data_dir] = ObservationReuse()
                if not child.inspect_since and not child.inspect_parts:
                    child.endpoint.decoders["inspect"] = reuse.decode
                    return child.call("inspect", data_dir=data_dir)
                since = reuse.since(child)
                if child.inspect_parts:
                    child.endpoint.decoders["inspect_parts"] = functools.partial(
                        reuse.decode_parts, child, since)
                    return child.call("inspect_parts", data_dir=data_dir, since=since)
                child.endpoint.decoders["inspect_since"] = functools.partial(
                    reuse.decode_since, child, since)
                return child.call("inspect_since", data_dir=data_dir, since=since)
            except RemoteError as exc:
                self._inspectors.pop(key, None)
                self._inspect_failures[data_dir] = str(exc)
                raise
            finally:
                self._inspecting = None
                inspector = self._inspectors.get(key)
                if inspector is not None:
                    inspector.transport.budget = None

    def checkpoint_fixture(self, name: str) -> CheckpointFixture:
        """The declared fixture ``name`` as the implementation hands it over (protocol
        method ``checkpoint_fixture``, answered by the shared inspector): the harness never
        reads a fixture path itself, so this works the same for an image."""
        with self._inspect_lock:
            child = self._inspector(None)
            try:
                answer: CheckpointFixtureResult = child.call("checkpoint_fixture", name=name)
            except RemoteError:
                self._inspectors.pop(None, None)
                raise
        try:
            return answer.fixture()
        except ContractError as exc:
            raise child.error("checkpoint_fixture", str(exc)) from None

    # -- cleanup -------------------------------------------------------------------------------

    def _note_strays(self, child: _Child, text: str) -> None:
        key = child.data_dir if child.data_dir is not None else self._inspecting
        line = f"implementation process `{child.command}` (pid {child.pid}): {text}"
        with self._lock:
            self._strays.setdefault(key, []).append(line)

    def release(self, data_dir: str) -> str:
        """Kill every child still running on ``data_dir`` (the run that owned it is over);
        "" or the processes the children left behind (strays, killed), one per child, for
        the run's error."""
        with self._lock:
            children = list(self._by_dir.pop(data_dir, ()))
        if self._inspecting == data_dir:  # a hung inspect: unblock it
            inspector = self._inspectors.get(self._inspector_key(data_dir))
            if inspector is not None:
                children.append(inspector)
        for child in children:
            if not child.stopping:
                child.kill()
            elif child.reaper is not None:  # let its exit (and the sweep after it) finish
                child.reaper.join(2 * EXIT_WAIT_S + 1)
        key = self._inspector_key(data_dir)
        if key is not None:
            inspector = self._inspectors.pop(key, None)
            if inspector is not None:
                inspector.stop()
        with self._lock:
            strays = [*self._strays.pop(data_dir, ()), *self._strays.pop(None, ())]
        self._inspect_failures.pop(data_dir, None)  # atomic; a hung inspect may hold the lock
        self._readings.pop(data_dir, None)
        self._budgets.pop(data_dir, None)
        return "; ".join(strays)

    def close(self) -> None:
        """Stop the inspector(s) and kill any child still running."""
        with self._lock:
            children = [child for group in self._by_dir.values() for child in group]
            self._by_dir.clear()
            self._readings.clear()
            self._budgets.clear()
            children += self._spares
            self._spares.clear()
        for child in children:
            child.kill()
        inspectors = list(self._inspectors.values())
        self._inspectors.clear()
        for extra in (self._declined, self._template):
            if extra is not None:
                inspectors.append(extra)  # last: it ends what is left of its instances
        self._declined = self._template = None
        for inspector in inspectors:
            inspector.stop()
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        for inspector in inspectors:  # closed means gone: wait for the orderly exits
            reaper = getattr(inspector, "reaper", None)
            if reaper is not None:
                reaper.join(EXIT_WAIT_S + 1.0)

    def __enter__(self) -> ProcessImplementation:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()


def _child_name(argv: Sequence[str]) -> str:
    """The ``--name`` of a container command, "" otherwise (for the docker kill hook)."""
    parts = list(argv)
    for index, part in enumerate(parts[:-1]):
        if part == "--name":
            return parts[index + 1]
    return ""
