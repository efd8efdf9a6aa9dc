"""The reference implementation as a process: ``python -m reference_impl.remote``.

It serves ``harness.remote.protocol`` (newline-delimited JSON-RPC 2.0, ``docs/protocol.md``)
on stdin/stdout, wrapping :func:`reference_impl.implementation`, and gives the reference a
:class:`RemoteWorld` whose every port call is a request to the harness. It is also the
template for any Python implementation that wants to be gated as a process: swap the
factory.

Imports from the harness: :mod:`harness.contract` and :mod:`harness.remote.protocol` only
(the protocol module imports nothing but the contract and the standard library).

Guarantees:

* one runtime per process: ``open`` starts it, ``close`` closes it, ``shutdown`` ends the
  process with status 0, and so does the end of stdin while idle;
* requests before ``initialize``, a second ``open``, or a driver call with no open runtime
  are answered with a ``WRONG_STATE`` error naming what to send first;
* stdout carries protocol messages only: the original stdout is kept for them and file
  descriptor 1 is pointed at stderr, so a stray ``print`` cannot corrupt the stream;
* if the harness goes away while the runtime waits for a port answer, the process ends at
  once with :data:`EXIT_HARNESS_GONE` (``os._exit``: nothing else runs), as if killed.

Fork server (optional, ``docs/protocol.md`` "Fork server"): started with
``LIFECYCLE_HARNESS_FORK_FD`` naming a ``SOCK_SEQPACKET`` socket, the process is a
:class:`ForkTemplate` instead: the reference is imported once, ``initialize`` answers
``fork_server: true``, and each fork request becomes a process that leaves the template's
session, takes the request's pipes as its stdin/stdout/stderr, closes every descriptor of
the template, carries the request's mark, reports its pid and then serves exactly like a
freshly spawned process (``os._exit`` with the same status at the end, so nothing of the
template runs in it). The template is single-threaded when it forks (it refuses to offer
forks otherwise), opens no store, reaps its instances and reports each exit status.
"""

from __future__ import annotations

import fcntl
import gc
import os
import select
import signal
import socket
import stat
import sys
import threading
import traceback
from typing import Any, BinaryIO, Callable

from harness.contract import (
    CONTRACT_VERSION,
    ApprovalPrompt,
    ClassifierRequest,
    ClassifierVerdict,
    Failpoint,
    Implementation,
    LifecycleEvent,
    ModelChunk,
    ModelRequest,
    Observation,
    Projection,
    RecoveryReport,
    Rule,
    Runtime,
    SessionConfig,
    ToolInvocation,
    ToolResult,
    TurnResult,
    to_json,
)
from harness.remote.protocol import (
    CHILD_MARK_ENV,
    DRIVER_METHODS,
    FORK_FD_ENV,
    FORK_MESSAGE_BYTES_MAX,
    FORK_REQUEST_FDS,
    METHOD_NOT_FOUND,
    OBSERVATION_ROW_PARTS,
    PORT_METHODS,
    PROTOCOL_VERSION,
    VERSION_MISMATCH,
    WRONG_STATE,
    CheckpointFixtureResult,
    Endpoint,
    InitializeResult,
    InspectPartsResult,
    InspectSinceResult,
    ProtocolError,
    RpcFault,
    StreamTransport,
    fork_datagram,
    prepare_decoders,
    read_fork_datagram,
)

READINGS_KEPT = 16
"""Data dirs whose latest reading ``inspect_since`` remembers (the oldest is dropped)."""
EXIT_HARNESS_GONE = 70
"""Exit status when stdin ends while a port request awaits its answer."""


class RemoteModelStream:
    """A model stream living in the harness (``next_chunk`` requests by stream id)."""

    def __init__(self, endpoint: Endpoint, stream_id: str) -> None:
        self._endpoint = endpoint
        self._stream_id = stream_id

    def next_chunk(self) -> ModelChunk:
        return self._endpoint.call("next_chunk", stream_id=self._stream_id)


class RemoteWorld:
    """A :class:`harness.contract.World` whose ports are requests to the harness. World
    exceptions come back as the contract's classes, with the harness's messages."""

    def __init__(self, endpoint: Endpoint) -> None:
        self._endpoint = endpoint

    def open_model_stream(self, request: ModelRequest) -> RemoteModelStream:
        return RemoteModelStream(self._endpoint,
                                 self._endpoint.call("open_model_stream", request=request))

    def review(self, request: ClassifierRequest) -> ClassifierVerdict:
        return self._endpoint.call("review", request=request)

    def execute_tool(self, invocation: ToolInvocation) -> ToolResult:
        return self._endpoint.call("execute_tool", invocation=invocation)

    def prompt_approval(self, prompt: ApprovalPrompt) -> None:
        self._endpoint.call("prompt_approval", prompt=prompt)

    def publish(self, projection: Projection) -> None:
        self._endpoint.call("publish", projection=projection)

    def now(self) -> float:
        return self._endpoint.call("now")

    def emit(self, event: LifecycleEvent) -> None:
        self._endpoint.call("emit", event=event)

    def failpoint(self, name: Failpoint, context: dict[str, Any]) -> None:
        self._endpoint.call("failpoint", name=str(getattr(name, "value", name)),
                            context=dict(context))


_EncodedPart = tuple[tuple[Any, ...], list[Any], dict[int, tuple[Any, Any]]]


def _without(data: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    if not names:
        return data
    return {name: value for name, value in data.items() if name not in names}


class ReadingEncoder:
    """The JSON of ``inspect`` answers, re-encoding only what changed: the reference hands
    back the same Observation while its store is unchanged, the same tuple for a part whose
    rows are unchanged, and the same row views for unchanged rows, so the previous reading's
    encodings are reused by object identity (the objects are held, so an id is never reused;
    only the latest reading is kept)."""

    def __init__(self) -> None:
        self._last: tuple[Observation | None, Any] = (None, None)
        self._parts: dict[str, _EncodedPart] = {}
        """Per tuple field: the tuple, its encoding, and each row's (by id: row, encoding)."""

    def encode(self, observation: Observation) -> Any:
        if type(observation) is not Observation:
            return to_json(observation)  # a subclass may have more fields
        if observation is self._last[0]:
            return self._last[1]
        parts: dict[str, _EncodedPart] = {}
        data: dict[str, Any] = {}
        for name in Observation.__dataclass_fields__:
            value = getattr(observation, name)
            if not isinstance(value, tuple):
                data[name] = to_json(value)
                continue
            known = self._parts.get(name)
            if known is not None and known[0] is value:  # the same part: its encoding
                parts[name] = known
                data[name] = known[1]
                continue
            previous = known[2] if known is not None else {}
            rows: dict[int, tuple[Any, Any]] = {}
            items = []
            for row in value:
                seen = previous.get(id(row))
                encoded = seen[1] if seen is not None and seen[0] is row else to_json(row)
                rows[id(row)] = (row, encoded)
                items.append(encoded)
            parts[name] = (value, items, rows)
            data[name] = items
        self._last, self._parts = (observation, data), parts
        return data


class Server:
    """Answers the harness's driver requests for one implementation, one runtime at a time."""

    def __init__(self, implementation: Implementation, endpoint: Endpoint) -> None:
        self.implementation = implementation
        self.endpoint = endpoint
        self.initialized = False
        self.runtime: Runtime | None = None
        endpoint.handlers = {name: getattr(self, "do_" + name) for name in DRIVER_METHODS}
        readings = ReadingEncoder()
        endpoint.encoders["inspect"] = readings.encode
        endpoint.encoders["inspect_since"] = lambda answer: {
            "reading": answer.reading,
            "observation": None if answer.observation is None
            else readings.encode(answer.observation)}
        endpoint.encoders["inspect_parts"] = lambda answer: {
            "reading": answer.reading,
            "observation": None if answer.observation is None
            else _without(readings.encode(answer.observation), answer.unchanged),
            "unchanged": list(answer.unchanged)}
        self._readings: dict[str, tuple[Observation, str]] = {}
        self._reading_count = 0

    def _ready(self, method: str) -> None:
        if not self.initialized:
            raise RpcFault(WRONG_STATE, f"{method}: send initialize first")

    def _runtime(self, method: str) -> Runtime:
        self._ready(method)
        if self.runtime is None:
            raise RpcFault(WRONG_STATE, f"{method}: no runtime is open; send open first")
        return self.runtime

    def do_initialize(self, protocol_version: int, contract_version: int) -> InitializeResult:
        if protocol_version != PROTOCOL_VERSION:
            raise RpcFault(VERSION_MISMATCH, f"this server speaks protocol_version "
                           f"{PROTOCOL_VERSION}, not {protocol_version}")
        if contract_version != CONTRACT_VERSION:
            raise RpcFault(VERSION_MISMATCH, f"this server's values follow contract_version "
                           f"{CONTRACT_VERSION}, not {contract_version}")
        self.initialized = True
        return InitializeResult(PROTOCOL_VERSION, self.implementation.info, inspect_since=True,
                                inspect_parts=True)

    def do_open(self, data_dir: str) -> None:
        self._ready("open")
        if self.runtime is not None:
            raise RpcFault(WRONG_STATE, "open: a runtime is already open in this process "
                           "(one per process); close it first")
        self.runtime = self.implementation.open(data_dir, RemoteWorld(self.endpoint))

    def do_open_session(self, config: SessionConfig) -> None:
        self._runtime("open_session").open_session(config)

    def do_run_turn(self, session_id: str, user_text: str) -> TurnResult:
        return self._runtime("run_turn").run_turn(session_id, user_text)

    def do_answer_approval(self, wait_id: str, approve: bool) -> TurnResult:
        return self._runtime("answer_approval").answer_approval(wait_id, approve)

    def do_update_rules(self, session_id: str, rules: tuple[Rule, ...],
                        permission_version: int) -> None:
        self._runtime("update_rules").update_rules(session_id, rules, permission_version)

    def do_cancel(self, session_id: str) -> None:
        self._runtime("cancel").cancel(session_id)

    def do_recover(self) -> RecoveryReport:
        return self._runtime("recover").recover()

    def do_load_checkpoint(self, session_id: str, data: bytes) -> None:
        self._runtime("load_checkpoint").load_checkpoint(session_id, data)

    def do_close(self) -> None:
        runtime, self.runtime = self._runtime("close"), None
        runtime.close()

    def do_inspect(self, data_dir: str) -> Observation:
        self._ready("inspect")
        return self.implementation.inspect(data_dir)

    def do_inspect_since(self, data_dir: str, since: str) -> InspectSinceResult:
        """The reference's ``inspect`` hands back the same Observation object while the store
        is unchanged (``PRAGMA data_version``): that identity is what "unchanged" means."""
        self._ready("inspect_since")
        observation = self.implementation.inspect(data_dir)
        last = self._readings.get(data_dir)
        if last is not None and last[0] is observation:
            return InspectSinceResult(last[1], None if since == last[1] else observation)
        self._reading_count += 1
        token = str(self._reading_count)
        self._readings.pop(data_dir, None)
        self._readings[data_dir] = (observation, token)
        while len(self._readings) > READINGS_KEPT:
            del self._readings[next(iter(self._readings))]
        return InspectSinceResult(token, observation)

    def do_inspect_parts(self, data_dir: str, since: str) -> InspectPartsResult:
        """As :meth:`do_inspect_since`; a part (a tuple field) the reference hands back as the
        very tuple of the reading ``since`` named is left out as unchanged (its ``inspect``
        keeps a part's tuple while that part's rows are unchanged)."""
        last = self._readings.get(data_dir)
        answer = self.do_inspect_since(data_dir, since)
        if answer.observation is None or last is None or since != last[1]:
            return InspectPartsResult(answer.reading, answer.observation)
        previous = last[0]
        unchanged = tuple(name for name in OBSERVATION_ROW_PARTS
                          if getattr(answer.observation, name) is getattr(previous, name))
        return InspectPartsResult(answer.reading, answer.observation, unchanged)

    def do_checkpoint_fixture(self, name: str) -> CheckpointFixtureResult:
        self._ready("checkpoint_fixture")
        offer = getattr(self.implementation, "checkpoint_fixture", None)
        if not callable(offer):
            raise RpcFault(METHOD_NOT_FOUND, "checkpoint_fixture: this implementation hands "
                           "over no checkpoint fixtures")
        return CheckpointFixtureResult.of(offer(name))

    def do_shutdown(self) -> None:
        self.close_runtime()

    def close_runtime(self) -> None:
        runtime, self.runtime = self.runtime, None
        if runtime is not None:
            runtime.close()


def _harness_gone() -> None:
    os._exit(EXIT_HARNESS_GONE)


def serve(implementation: Implementation, rfile: BinaryIO, wfile: BinaryIO) -> int:
    """Serve the protocol on ``rfile``/``wfile`` until ``shutdown`` or end of input."""
    endpoint = Endpoint(StreamTransport(rfile, wfile), incoming=DRIVER_METHODS,
                        outgoing=PORT_METHODS, handlers={}, on_eof_in_call=_harness_gone)
    server = Server(implementation, endpoint)
    endpoint.serve()
    server.close_runtime()
    return 0


# --------------------------------------------------------------------------- fork server


PROTOCOL_FD = 3
"""Where a forked instance keeps its protocol output (fd 1 points at stderr, as in ``main``)."""
_REPLY_FD = 4
_OUT_OF_THE_WAY_FD = 100
_LINE_BYTES_MAX = 8 * 1024 * 1024


def fork_socket_from_environment() -> socket.socket | None:
    """The fork request socket the harness passed (and the variable removed, so nothing this
    process starts inherits it), or None when there is none or it is unusable."""
    text = os.environ.pop(FORK_FD_ENV, None)
    if text is None:
        return None
    try:
        fd = int(text)
        if not stat.S_ISSOCK(os.fstat(fd).st_mode):
            raise ValueError("not a socket")
        sock = socket.socket(fileno=fd)
    except (ValueError, OSError) as exc:
        sys.stderr.write(f"{FORK_FD_ENV}={text!r} is not a usable socket ({exc}); serving "
                         "without a fork server\n")
        return None
    if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_SEQPACKET \
            or not hasattr(os, "fork") or not hasattr(socket, "recv_fds"):
        sock.detach()
        return None
    return sock


class ForkTemplate:
    """Serves ``initialize``/``shutdown`` on stdin and fork requests on ``fork_socket``
    (module doc). ``factory`` builds the implementation; the template calls it once for its
    ``info``, each forked instance once more for itself."""

    def __init__(self, factory: Callable[[], Implementation], fork_socket: socket.socket,
                 protocol_in_fd: int, protocol_out: BinaryIO) -> None:
        self.factory = factory
        self.sock: socket.socket | None = fork_socket
        self.in_fd = protocol_in_fd
        self.replies: dict[int, socket.socket] = {}
        """The reply socket of each live instance, for its exit status."""
        self.endpoint = Endpoint(StreamTransport(None, protocol_out), incoming=DRIVER_METHODS,
                                 outgoing=PORT_METHODS, handlers={})
        self.server = Server(factory(), self.endpoint)
        self.endpoint.handlers = {name: self._not_here for name in DRIVER_METHODS}
        self.endpoint.handlers["initialize"] = self.do_initialize
        self.endpoint.handlers["shutdown"] = lambda: None

    def _not_here(self, **_: Any) -> None:
        raise RpcFault(WRONG_STATE, "this process is a fork template: it answers initialize "
                       "and shutdown, and forks instances on its fork socket")

    def do_initialize(self, protocol_version: int, contract_version: int) -> InitializeResult:
        result = self.server.do_initialize(protocol_version, contract_version)
        # Forking a process with other threads would copy their locks mid-use.
        return InitializeResult(result.protocol_version, result.info,
                                inspect_since=result.inspect_since,
                                inspect_parts=result.inspect_parts,
                                fork_server=threading.active_count() == 1)

    def run(self) -> int:
        signal.signal(signal.SIGCHLD, self._reap)
        prepare_decoders()  # once here, not again in every instance
        gc.freeze()  # what exists now is shared by every fork; no collection copies it
        pending = bytearray()
        while not self.endpoint.stopping:
            waiting = [self.in_fd] + ([self.sock] if self.sock is not None else [])
            ready = select.select(waiting, [], [])[0]
            if self.in_fd in ready:
                chunk = os.read(self.in_fd, 65_536)
                if not chunk:
                    return 0  # the harness is gone; its instances have their own pipes
                pending += chunk
                while b"\n" in pending and not self.endpoint.stopping:
                    line, _, rest = bytes(pending).partition(b"\n")
                    pending[:] = rest
                    self.endpoint.serve_line(line)
                if len(pending) > _LINE_BYTES_MAX:
                    sys.stderr.write("fork template: a request line without end; exiting\n")
                    return 2
            elif self.sock is not None and self.sock in ready:
                self._fork_one()
        return 0

    def _fork_one(self) -> None:
        assert self.sock is not None
        try:
            data, fds, _, _ = socket.recv_fds(self.sock, FORK_MESSAGE_BYTES_MAX,
                                              FORK_REQUEST_FDS)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data, fds = b"", []
        if not data and not fds:  # every harness end is closed
            self.sock.close()
            self.sock = None
            return
        reply = socket.socket(fileno=fds[-1]) if len(fds) == FORK_REQUEST_FDS else None
        try:
            if reply is None:
                raise ProtocolError(f"a fork request carries {FORK_REQUEST_FDS} descriptors "
                                    f"(stdin, stdout, stderr, reply), this one {len(fds)}")
            mark = read_fork_datagram(data, "request")["mark"]
            if not self.server.initialized:
                raise ProtocolError("send initialize on stdin before the first fork request")
        except ProtocolError as exc:
            for fd in fds[:FORK_REQUEST_FDS - 1] if reply is not None else fds:
                os.close(fd)
            if reply is not None:
                self._send(reply, fork_datagram(error=str(exc)))
                reply.close()
            return
        reply.setblocking(False)
        sys.stderr.flush()
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})  # register before reaping
        try:
            try:
                pid = os.fork()
            except OSError as exc:
                self._send(reply, fork_datagram(error=f"fork failed: {exc}"))
                reply.close()
                pid = -1
            if pid == 0:
                self._become_instance(fds, mark)  # never returns
            if pid > 0:
                self.replies[pid] = reply
        finally:
            for fd in fds[:-1]:
                os.close(fd)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})

    @staticmethod
    def _send(reply: socket.socket, data: bytes) -> None:
        try:
            reply.send(data)
        except OSError:
            pass  # the requester went away; nobody is left to tell

    def _reap(self, *_: Any) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            reply = self.replies.pop(pid, None)
            if reply is not None:
                self._send(reply, fork_datagram(pid=pid,
                                                exit_status=os.waitstatus_to_exitcode(status)))
                reply.close()

    def _become_instance(self, fds: list[int], mark: str) -> None:
        """In the forked process: become a freshly started instance, serve, and exit."""
        code = 1
        try:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
            os.setsid()
            # Move the request's descriptors out of the way, then onto their places, then
            # close everything else: the template's pipes, its socket, its siblings' replies.
            stdin_r, stdout_w, stderr_w, reply = (
                fcntl.fcntl(fd, fcntl.F_DUPFD, _OUT_OF_THE_WAY_FD) for fd in fds)
            os.dup2(stdin_r, 0)
            os.dup2(stderr_w, 1)  # a stray print goes to stderr, as in main()
            os.dup2(stderr_w, 2)
            os.dup2(stdout_w, PROTOCOL_FD)
            os.dup2(reply, _REPLY_FD)
            os.closerange(_REPLY_FD + 1, os.sysconf("SC_OPEN_MAX"))
            os.environ[CHILD_MARK_ENV] = mark
            os.write(_REPLY_FD, fork_datagram(pid=os.getpid()))
            os.close(_REPLY_FD)
            code = serve(self.factory(), os.fdopen(0, "rb"), os.fdopen(PROTOCOL_FD, "wb"))
        except BaseException:  # noqa: BLE001 - report it like an uncaught exception would
            try:
                traceback.print_exc()
            except BaseException:  # noqa: BLE001
                pass
        finally:
            try:
                sys.stderr.flush()
            finally:
                os._exit(code)


def main() -> int:
    from reference_impl import implementation

    protocol_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed by accident goes to stderr, not into the protocol
    sys.stdout = sys.stderr
    fork_socket = fork_socket_from_environment()
    if fork_socket is not None:
        return ForkTemplate(implementation, fork_socket, sys.stdin.fileno(), protocol_out).run()
    return serve(implementation(), sys.stdin.buffer, protocol_out)


if __name__ == "__main__":
    sys.exit(main())
