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
  than ``reply_timeout_s`` while a response is due, or rejects a request becomes a
  :class:`~harness.remote.errors.RemoteError` naming the command, the pid, the exit status
  and the tail of its stderr (a silent or babbling child is killed first). The
  implementation's own exceptions come back as themselves: contract exceptions as their
  class, others as :class:`~harness.remote.protocol.RemoteException` subclasses of the same
  name. Nothing here makes the runner raise;
* ``inspect(data_dir)`` asks a persistent *inspector* process (one per implementation
  object, spawned on first use, respawned if it dies) so probes cost a round trip, not a
  process start; ``info`` comes from its ``initialize`` handshake;
* no child outlives its use: ``close()`` of a runtime shuts its process down, a dropped
  runtime's process is killed when the proxy is collected, :meth:`release` kills whatever
  still runs on a data dir (the runner calls it when a run ends, e.g. after a hang), and
  the interpreter's exit kills the rest. A forked copy of this object never touches its
  parent's children.
"""

from __future__ import annotations

import atexit
import os
import queue
import shlex
import signal
import subprocess
import threading
import weakref
from typing import Any, Mapping, Sequence

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
from harness.errors import ImplementationLoadError
from harness.remote.errors import RemoteError
from harness.remote.protocol import (
    DRIVER_METHODS,
    INVALID_PARAMS,
    PORT_METHODS,
    PROTOCOL_VERSION,
    WRONG_STATE,
    BadMessage,
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
EXIT_WAIT_S = 2.0
"""How long an orderly ``shutdown`` may take before the child is killed."""
STDERR_BUFFER_BYTES = 16_384
STDERR_TAIL_CHARS = 2_000
"""How much of the stderr tail an error message quotes."""


# --------------------------------------------------------------------------- transport


class _PipeTransport:
    """Reads the child's stdout in a thread (so reads can time out), writes its stdin."""

    def __init__(self, stdin: Any, stdout: Any, name: str) -> None:
        self._stdin = stdin
        self._lines: queue.SimpleQueue[bytes] = queue.SimpleQueue()
        self._eof = False
        self.thread = threading.Thread(target=_pump_lines, args=(stdout, self._lines),
                                       name=f"{name}-stdout", daemon=True)
        self.thread.start()

    def read_line(self, timeout: float | None) -> bytes:
        if self._eof:
            return b""
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise PeerSilent(f"no line within {timeout:g}s") from None
        if not line:
            self._eof = True
        return line

    def write_line(self, data: bytes) -> None:
        try:
            self._stdin.write(data)
            self._stdin.flush()
        except (BrokenPipeError, ValueError, OSError) as exc:
            raise PeerGone(f"cannot write to the child's stdin ({exc})") from None


def _pump_lines(stream: Any, lines: queue.SimpleQueue[bytes]) -> None:
    try:
        for line in iter(stream.readline, b""):
            lines.put(line)
    except (OSError, ValueError):
        pass
    finally:
        lines.put(b"")


class _StderrTail:
    """The last :data:`STDERR_BUFFER_BYTES` bytes the child wrote to stderr."""

    def __init__(self, stream: Any, name: str) -> None:
        self._buffer = bytearray()
        self._lock = threading.Lock()
        self.thread = threading.Thread(target=self._pump, args=(stream,),
                                       name=f"{name}-stderr", daemon=True)
        self.thread.start()

    def _pump(self, stream: Any) -> None:
        try:
            while True:
                chunk = stream.read1(4096) if hasattr(stream, "read1") else stream.read(4096)
                if not chunk:
                    return
                with self._lock:
                    self._buffer += chunk
                    del self._buffer[:-STDERR_BUFFER_BYTES]
        except (OSError, ValueError):
            return

    def text(self, wait_s: float = 0.0) -> str:
        if wait_s:
            self.thread.join(wait_s)
        with self._lock:
            data = bytes(self._buffer)
        text = data.decode("utf-8", "replace").rstrip()
        if len(text) > STDERR_TAIL_CHARS:
            text = "..." + text[-STDERR_TAIL_CHARS:]
        return text


# --------------------------------------------------------------------------- one child


_LIVE: weakref.WeakSet[_Child] = weakref.WeakSet()


class _Child:
    """One spawned implementation process and its endpoint (the harness side)."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str] | None, cwd: str | None,
                 command: str, reply_timeout_s: float, on_kill: Any = None) -> None:
        self.command = command
        self.reply_timeout_s = reply_timeout_s
        self._on_kill = on_kill
        self.killed = False
        self.stopping = False
        """Set once asked to shut down: its reaper ends it, :meth:`release` leaves it be."""
        try:
            self.popen = subprocess.Popen(
                list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, env=None if env is None else dict(env), cwd=cwd,
                start_new_session=True,
            )
        except OSError as exc:
            raise RemoteError(f"cannot start the implementation command `{command}`: "
                              f"{exc.strerror or exc}; check the command (its first word "
                              "must be an executable on PATH or a path to one)") from None
        self.pid = self.popen.pid
        self.owner_pid = os.getpid()
        name = f"lh-child-{self.pid}"
        self.transport = _PipeTransport(self.popen.stdin, self.popen.stdout, name)
        self.stderr = _StderrTail(self.popen.stderr, name)
        self.endpoint = Endpoint(self.transport, incoming=PORT_METHODS,
                                 outgoing=DRIVER_METHODS, handlers={}, strict=True,
                                 reply_timeout_s=reply_timeout_s)
        _LIVE.add(self)

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

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
        try:
            return self.endpoint.call(method, **params)
        except SimulatedCrash:
            self.kill()
            raise
        except PeerSilent:
            self.kill()
            raise self.error(method, f"it wrote nothing for {self.endpoint.reply_timeout_s:g}s "
                             f"while {method!r} awaited its response (hung?); the harness "
                             "killed it") from None
        except PeerGone:
            self.wait(EXIT_WAIT_S)
            raise self.error(method, f"it closed its stdout while {method!r} awaited its "
                             "response") from None
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

    def status(self) -> str:
        code = self.popen.poll()
        if code is None:
            return "it is still running"
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

    def kill(self) -> None:
        """SIGKILL the child's process group and reap it (idempotent)."""
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
                os.killpg(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                try:
                    self.popen.kill()
                except ProcessLookupError:
                    pass
        try:
            self.popen.wait(EXIT_WAIT_S)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL cannot be ignored
            pass
        self._close_pipes()

    def stop(self) -> None:
        """Orderly end: ``shutdown``, then (in the background) wait for the exit and kill
        the process group if it does not come within :data:`EXIT_WAIT_S`."""
        if self.owner_pid != os.getpid():
            return
        if self.popen.poll() is None and not self.killed:
            self.stopping = True
            try:
                self.endpoint.reply_timeout_s = EXIT_WAIT_S
                self.endpoint.call("shutdown")
            except ProtocolError:
                pass
            except Exception:  # noqa: BLE001 - the child's answer does not matter any more
                pass
            threading.Thread(target=self._reap, name=f"lh-reap-{self.pid}", daemon=True).start()
            return
        self.kill()

    def _reap(self) -> None:
        self.wait(EXIT_WAIT_S)
        self.kill()

    def _close_pipes(self) -> None:
        for stream in (self.popen.stdin, self.popen.stdout, self.popen.stderr):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass


@atexit.register
def _kill_leftovers() -> None:
    for child in list(_LIVE):
        child.kill()


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
    data dir."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str] | None = None, *,
                 info: ImplementationInfo | None = None, cwd: str | None = None,
                 startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S,
                 reply_timeout_s: float = DEFAULT_REPLY_TIMEOUT_S) -> None:
        self.argv = tuple(str(part) for part in argv)
        if not self.argv:
            raise ImplementationLoadError("process implementation: empty command; give the "
                                          "command that starts the implementation's server, "
                                          "e.g. process:'python -m reference_impl.remote'")
        self.command = shlex.join(self.argv)
        self.env = None if env is None else {**os.environ, **env}
        self.cwd = cwd
        self.startup_timeout_s = float(startup_timeout_s)
        self.reply_timeout_s = float(reply_timeout_s)
        self._info = info
        self._info_from_handshake = False
        self.fixture_root: str | None = None
        """Folder the declared checkpoint fixtures are relative to (from the handshake)."""
        self._lock = threading.Lock()
        self._inspect_lock = threading.Lock()
        self._inspectors: dict[str | None, _Child] = {}
        self._inspecting: str | None = None
        self._by_dir: dict[str, weakref.WeakSet[_Child]] = {}
        self._spares: list[_Child] = []

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
        """Start one child running ``argv`` (docker: one that also manages its container)."""
        return _Child(argv, self.env, self.cwd, shlex.join(argv), self.reply_timeout_s,
                      on_kill=on_kill)

    # -- children ------------------------------------------------------------------------------

    def _spawn(self, data_dir: str | None) -> _Child:
        self._prepare()
        argv = self._argv_for(data_dir)
        child = self._new_child(argv, on_kill=self._kill_hook(_child_name(argv)))
        if data_dir is not None:
            with self._lock:
                self._by_dir.setdefault(data_dir, weakref.WeakSet()).add(child)
        return child

    def _take(self, data_dir: str) -> _Child:
        """A child for ``data_dir``: the spare if one is ready, then start the next spare."""
        if self.spares <= 0:
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
            self._inspecting = data_dir
            try:
                child = self._inspector(key)
                return child.call("inspect", data_dir=data_dir)
            except RemoteError:
                self._inspectors.pop(key, None)
                raise
            finally:
                self._inspecting = None

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

    def release(self, data_dir: str) -> None:
        """Kill every child still running on ``data_dir`` (the run that owned it is over)."""
        with self._lock:
            children = list(self._by_dir.pop(data_dir, ()))
        if self._inspecting == data_dir:  # a hung inspect: unblock it
            inspector = self._inspectors.get(self._inspector_key(data_dir))
            if inspector is not None:
                children.append(inspector)
        for child in children:
            if not child.stopping:
                child.kill()
        key = self._inspector_key(data_dir)
        if key is not None:
            inspector = self._inspectors.pop(key, None)
            if inspector is not None:
                inspector.stop()

    def close(self) -> None:
        """Stop the inspector(s) and kill any child still running."""
        with self._lock:
            children = [child for group in self._by_dir.values() for child in group]
            self._by_dir.clear()
            children += self._spares
            self._spares.clear()
        for child in children:
            child.kill()
        for inspector in list(self._inspectors.values()):
            inspector.stop()
        self._inspectors.clear()

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
