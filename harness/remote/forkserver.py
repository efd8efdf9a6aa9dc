"""The harness side of the optional fork server (``docs/protocol.md``, "Fork server").

A process-mode implementation pays an interpreter start and its imports for every instance
the harness opens. One that offers a fork server is started once more as a *template*: with
:data:`~harness.remote.protocol.FORK_FD_ENV` naming an inherited ``SOCK_SEQPACKET`` socket,
it answers ``initialize`` with ``fork_server: true`` and then forks one process per fork
request; each forked process behaves like a freshly spawned child (``initialize``, ``open``)
on the pipes the request carried.

Guarantees (Linux only: :func:`supported` is False elsewhere, and the launcher spawns):

* :meth:`ForkChannel.fork` returns within ``timeout_s`` (twice: sending, then the answer) a
  :class:`ForkedProcess` for a process that reported its own pid after it left its
  template's session (it leads its own session and process group, so a group kill ends
  exactly that instance and what it started) and that is verified to be a live child of the
  template (``/proc``: parent and session); anything else (the template gone, silent, or
  lying about the pid) raises :class:`ForkRefused` saying what happened, and nothing the
  harness owns is signalled on a lie. The caller keeps (and closes) its descriptors;
* requests are single datagrams, each carrying its own reply socket: processes forked from
  the one that made the channel (``run --jobs`` workers) may fork through it at the same
  time without ever reading each other's answers;
* :class:`ForkedProcess` is the part of :class:`subprocess.Popen` the launcher uses
  (``pid``, ``returncode``, ``poll``, ``wait``, ``kill``). Liveness and the kill go through a
  pidfd, so they never touch a reused pid and do not depend on the template; the exit
  status comes from the template, which is the instance's parent and reaps it (its report
  on the reply socket). When the template is gone before reporting, ``returncode`` is
  :data:`EXIT_STATUS_UNKNOWN` and ``status_known`` False; every wait for it is bounded.
* descriptors: a channel's socket is closed by :meth:`ForkChannel.close`, a forked process's
  pidfd and status socket when it is collected; :func:`release_all` closes whatever is left
  (the launcher's exit hook calls it once it has killed everything, so an exit without
  ``close`` leaves nothing for the interpreter to warn about).
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import threading
import weakref

from harness.remote.protocol import (
    FORK_MESSAGE_BYTES_MAX,
    ProtocolError,
    fork_datagram,
    read_fork_datagram,
)

STATUS_WAIT_S = 2.0
"""How long an exited instance's status may take to arrive from its template (it reaps on
``SIGCHLD``, so it is there at once unless the template is stuck or gone)."""
EXIT_STATUS_UNKNOWN = 255
"""``returncode`` of an instance whose template never reported its status."""


class ForkRefused(Exception):
    """The template did not give a usable instance; the message says what happened."""


def supported() -> bool:
    """Can this platform fork through a template (pidfds, descriptor passing, ``/proc``)?"""
    return (hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal")
            and hasattr(socket, "send_fds") and hasattr(socket, "SOCK_SEQPACKET")
            and os.path.isdir("/proc"))


def _parent_and_session(pid: int) -> tuple[int, int] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rpartition(b")")[2].split()
    except OSError:
        return None
    if len(fields) < 4 or fields[0] == b"Z":
        return None
    return int(fields[1]), int(fields[3])


_OPEN_CHANNELS: weakref.WeakSet[ForkChannel] = weakref.WeakSet()
_FORKED: weakref.WeakSet[ForkedProcess] = weakref.WeakSet()


def release_all() -> None:
    """Close every channel and every forked process's descriptors still open (at the
    interpreter's exit, after the processes were killed: nothing may use them after)."""
    for channel in list(_OPEN_CHANNELS):
        channel.close()
    for process in list(_FORKED):
        process.release()


class ForkChannel:
    """The harness's end of one template's request socket; :attr:`theirs` is the end the
    template inherits (close it here once the template is started: :meth:`started`)."""

    def __init__(self) -> None:
        _OPEN_CHANNELS.add(self)
        self._mine, self.theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.theirs.set_inheritable(True)
        self._closed = False

    def started(self) -> None:
        """The template holds its end now: drop ours, so its death closes the channel."""
        self.theirs.close()

    def close(self) -> None:
        self._closed = True
        _OPEN_CHANNELS.discard(self)
        self._mine.close()
        self.theirs.close()

    def fork(self, template_pid: int, mark: str, stdin_r: int, stdout_w: int, stderr_w: int,
             timeout_s: float) -> ForkedProcess:
        """One new instance on these pipe ends, marked ``mark`` (see the module doc)."""
        if self._closed:
            raise ForkRefused("its fork channel is closed")
        reply, reply_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            try:
                # The fd is shared with forked workers: a timeout (non-blocking + poll) is
                # how every user of it waits, so the flag it sets is the same for all.
                self._mine.settimeout(timeout_s)
                socket.send_fds(self._mine, [fork_datagram(mark=mark)],
                                [stdin_r, stdout_w, stderr_w, reply_theirs.fileno()])
            except socket.timeout:
                raise ForkRefused(f"it took no fork request for {timeout_s:g}s (hung?)") \
                    from None
            except OSError as exc:
                raise ForkRefused(f"its fork socket is closed ({exc.strerror or exc})") \
                    from None
            finally:
                reply_theirs.close()
            pid = self._answer(reply, template_pid, timeout_s)
        except BaseException:
            reply.close()
            raise
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            reply.close()
            raise ForkRefused(f"it answered pid {pid}, which is not running") from None
        relation = _parent_and_session(pid)
        if relation is None or relation[0] != template_pid:
            os.close(pidfd)
            reply.close()
            raise ForkRefused(f"it answered pid {pid}, which is not its live child "
                              f"(parent: {'none' if relation is None else relation[0]})")
        if relation[1] != pid:
            try:
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)  # its child: ours to end
            except OSError:
                pass
            os.close(pidfd)
            reply.close()
            raise ForkRefused(f"the forked process {pid} reported itself before leading its "
                              "own session (it must call setsid first)")
        return ForkedProcess(pid, pidfd, reply)

    @staticmethod
    def _answer(reply: socket.socket, template_pid: int, timeout_s: float) -> int:
        reply.settimeout(timeout_s)
        try:
            data = reply.recv(FORK_MESSAGE_BYTES_MAX)
        except socket.timeout:
            raise ForkRefused(f"no fork answer within {timeout_s:g}s (hung?)") from None
        except OSError as exc:
            raise ForkRefused(f"its reply socket failed ({exc.strerror or exc})") from None
        if not data:
            raise ForkRefused("it closed the reply socket without an answer (did it die?)")
        try:
            fields = read_fork_datagram(data, "reply")
        except ProtocolError as exc:
            raise ForkRefused(str(exc)) from None
        if "error" in fields:
            raise ForkRefused(f"it refused the fork: {fields['error']}")
        if "exit_status" in fields:
            raise ForkRefused(f"the forked process {fields['pid']} ended with status "
                              f"{fields['exit_status']} before it reported itself")
        if fields["pid"] == template_pid:
            raise ForkRefused("it answered its own pid: the template itself must not serve "
                              "an instance")
        return int(fields["pid"])


def _close_quietly(pidfd: int, status: socket.socket) -> None:
    status.close()
    try:
        os.close(pidfd)
    except OSError:
        pass


class ForkedProcess:
    """An instance forked by a template, as much of ``subprocess.Popen`` as the launcher
    uses (see the module doc)."""

    def __init__(self, pid: int, pidfd: int, status: socket.socket) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self.status_known = True
        self._pidfd = pidfd
        self._status = status
        self._lock = threading.Lock()
        # The pidfd lives as long as this object: no thread ever uses a closed (or reused)
        # descriptor number. Not by the finalizer at the interpreter's exit, which would run
        # before the launcher's exit hook polls and kills through them: that hook closes
        # them after (release_all).
        self._finalizer = weakref.finalize(self, _close_quietly, pidfd, status)
        self._finalizer.atexit = False
        _FORKED.add(self)

    def release(self) -> None:
        """Close its pidfd and status socket now; it is neither polled nor killed after."""
        self._finalizer()

    def _exited(self, timeout_s: float | None) -> bool:
        try:
            return bool(select.select([self._pidfd], [], [], timeout_s)[0])
        except (OSError, ValueError):
            return True

    def poll(self) -> int | None:
        if self.returncode is None and self._exited(0):
            self._collect()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not self._exited(timeout):
                raise subprocess.TimeoutExpired(f"forked instance {self.pid}", timeout or 0.0)
            self._collect()
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            try:
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            except OSError:
                pass  # already gone

    def _collect(self) -> None:
        """The exited instance's status, as its template reports it (bounded)."""
        with self._lock:
            if self.returncode is not None:
                return
            code = None
            try:
                self._status.settimeout(STATUS_WAIT_S)
                while code is None:
                    data = self._status.recv(FORK_MESSAGE_BYTES_MAX)
                    if not data:
                        break
                    fields = read_fork_datagram(data, "reply")
                    if fields.get("pid") == self.pid and "exit_status" in fields:
                        code = int(fields["exit_status"])
            except (OSError, ProtocolError):
                pass
            self._status.close()
            if code is None:
                self.status_known = False
                code = EXIT_STATUS_UNKNOWN
            self.returncode = code
