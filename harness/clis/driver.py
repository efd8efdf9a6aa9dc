"""The black-box driver: a real agent CLI run as the implementation under test.

:class:`CliImplementation` satisfies :class:`harness.contract.Implementation` for any CLI
described by a :class:`Dialect` (how to start and resume it, the model API it speaks, its
programmatic channel: a :class:`Channel` per process, which reads what the process writes,
or what it serves on an event stream the channel follows, and sends the user's messages and
the approval answers). The CLI itself is never changed or imported: it is a child process
that talks to the world only through the loopback servers of :mod:`harness.clis.loopback`.

Guarantees:

* every world port is called from the thread of the harness's driver call: the driver takes
  what the CLIs did from one inbox, in arrival order, and answers each item before it takes
  the next (model calls: the world's script rendered in the CLI's wire API; tool runs: the
  world executes the call between ``after_start_recorded`` and ``after_tool_returned``;
  approval requests: the world's approver is prompted and the turn returns
  ``awaiting_approval`` with the CLI still waiting for the answer);
* a ``SimulatedCrash`` out of any world call (a crash fault at a failpoint) SIGKILLs the
  process group of every CLI of the instance and every descendant of it (a CLI may run its
  tools in sessions of their own), while the CLI waits for that answer, and is re-raised:
  the runner restarts; :meth:`CliRuntime.recover` resumes each session whose turn was open
  with the CLI's own resume (``Dialect.argv(resume=True)`` and the channel's
  ``resume``, which finds what it noted in :class:`SessionMemory`: a thread or session id);
* the driver reports only what it saw from outside: a turn ends ``completed`` when the CLI
  said its turn ended well, ``failed`` when it reported an error or exited, and re-raises the
  world's own transport error (the same object, M3) when the CLI gave up after one;
  ``inspect`` reads nothing: a black box has no store the harness may read, so the
  observation is empty and every criterion that needs one is ``not_applicable``
  (:mod:`harness.criteria.outside_view`), never judged on it;
* an answer to an approval no live process of this instance is waiting for (answered already,
  or asked by a CLI that was killed or closed since: it kept the question in memory) reaches
  nothing: the call returns ``idle``;
* what the contract asks and the CLI cannot do (change rules in the middle of a session,
  cancel, import a checkpoint, a rule the CLI's settings cannot express) raises
  :class:`NotOffered` naming it; a CLI that does nothing for :data:`IDLE_LIMIT_S` raises
  :class:`CliError` with the tail of its stderr;
* what survives a restart lives in the data dir (``cli/state.json``: the session configs,
  which sessions have a conversation and an open turn, what each session's channels noted,
  the request counter), next to each
  session's sandbox (``sandbox/<session>``, the CLI's working directory) and its home
  (``home/<session>``, where the CLI keeps its own sessions);
* no process outlives its runtime: :meth:`CliRuntime.close` ends each CLI (stdin closed,
  then SIGKILL of its group after :data:`STOP_GRACE_S`) and the loopback servers.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Protocol

from harness.clis import tool_command
from harness.clis.loopback import (
    RESET, Inbox, LedgerExchange, Loopback, ModelExchange, ProcessExited, ProcessLine,
)
from harness.contract import (
    ApprovalPrompt, ChunkKind, Failpoint, ImplementationInfo, ModelRequest, ModelStreamCancelled,
    ModelTransportError, Observation, OperationIdentity, RecoveryReport, Rule, SessionConfig,
    SimulatedCrash, ToolCall, ToolInvocation, ToolUnavailable, TurnResult, TurnStatus, World,
    WorldError, args_digest, execution_id_for, from_json, to_json,
)

IDLE_LIMIT_S = 120.0
"""Longest the driver waits for a CLI to do anything (a request, a tool run, a line)."""
STOP_GRACE_S = 2.0
STDERR_TAIL_CHARS = 1_500
RESUME_PROMPT = "Continue from where you left off."
"""What the driver says to a CLI it resumed after a crash cut its turn (the words Claude
Code's own interactive resume adds; the same words for every CLI, so their continuations
compare)."""


class CliError(Exception):
    """The CLI did something the driver cannot read, or nothing at all."""


class NotOffered(Exception):
    """The contract asks for something this CLI has no way to do from outside."""


@dataclass(frozen=True, slots=True)
class ApprovalAsked:
    """The CLI asks whether it may run one of its tools."""

    request_id: str
    tool_use_id: str
    tool_name: str
    input: dict[str, Any]
    reason: str


@dataclass(frozen=True, slots=True)
class TurnEnded:
    ok: bool
    text: str
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Served:
    """What the world's stream gave for one model call."""

    text: str
    calls: tuple[ToolCall, ...]
    end: str
    """"end", "eof", or "reset" (a transport error or a cancellation)."""


class ProcessIO(Protocol):
    """What a channel may do with its CLI process."""

    def write(self, data: bytes) -> None:
        """Write to the process's stdin."""

    def follow(self, lines: Iterable[str], name: str) -> None:
        """Feed ``lines`` (read in a thread of their own, e.g. an HTTP event stream the
        process serves) to the driver as if the process had written them on stdout."""


class Channel(Protocol):
    """The programmatic channel of one CLI process for one session, read and written only
    from the driver's thread."""

    def start_turn(self, text: str) -> None:
        """Send the user's message (now, or as soon as the channel is ready)."""

    def read(self, line: str) -> "ApprovalAsked | TurnEnded | None":
        """One line the process (or a source it follows) produced: what it means for the
        driver, if anything. May write to the process (a handshake's next step)."""

    def answer(self, asked: ApprovalAsked, approve: bool) -> None: ...


class Dialect(Protocol):
    """What the driver needs to know of one CLI."""

    name: str
    binary: str
    package: str
    time_limit_s: float
    """The time limit of one driver call this CLI needs (start-up, its own retries)."""

    def version_argv(self, binary: str) -> list[str]: ...

    def check_session(self, config: SessionConfig) -> str:
        """Empty, or why this session cannot be expressed in the CLI's settings."""

    def prepare(self, session: "SessionPaths", config: SessionConfig, base_url: str) -> None:
        """Write the CLI's configuration for this session (settings files)."""

    def argv(self, binary: str, session: "SessionPaths", config: SessionConfig,
             resume: bool) -> list[str]: ...

    def env(self, session: "SessionPaths", base_url: str) -> dict[str, str]: ...

    def channel(self, io: ProcessIO, session: "SessionPaths", config: SessionConfig,
                memory: "SessionMemory", resume: bool) -> Channel:
        """The channel of a process just started (``resume``: the session has a conversation
        the CLI kept; ``memory``: what the channel noted in earlier processes)."""

    def kind_of(self, method: str, path: str) -> str: ...

    def auxiliary_reply(self, path: str) -> tuple[int, dict[str, Any]]: ...

    def side_answer(self, body: dict[str, Any]) -> tuple[str, bytes] | None:
        """A model call that is not part of the session's conversation (a title request):
        its content type and whole answer, given without the world; else ``None``."""

    def conversation(self, body: dict[str, Any]) -> tuple[Any, ...]: ...

    def answer(self, exchange: ModelExchange, served: Served, number: int) -> None:
        """Write the served answer to the CLI in its wire API, then end the exchange."""

    def call_of(self, tool_use_id: str, tool_name: str, input: dict[str, Any]) -> ToolCall: ...


class SessionMemory:
    """What a session's channels note for the next process (a thread id), kept in the data
    dir's ``cli/state.json``."""

    def __init__(self, record: dict[str, Any], save: Callable[[], None]) -> None:
        self._record = record
        self._save = save

    def get(self, key: str) -> Any:
        return self._record.get("memory", {}).get(key)

    def set(self, key: str, value: Any) -> None:
        self._record.setdefault("memory", {})[key] = value
        self._save()


@dataclass(frozen=True, slots=True)
class SessionPaths:
    session_id: str
    sandbox: Path
    home: Path
    logs: Path


class _Process:
    """One CLI child process for one session: its own process group, a stdout reader, the
    channel its dialect reads it with."""

    def __init__(self, argv: list[str], env: dict[str, str], paths: SessionPaths, inbox: Inbox,
                 generation: int) -> None:
        self.generation = generation
        self.session_id = paths.session_id
        self.inbox = inbox
        self.channel: Channel | None = None
        paths.logs.mkdir(parents=True, exist_ok=True)
        self.stderr_path = paths.logs / f"{paths.session_id}-{generation}.stderr"
        self._stderr = open(self.stderr_path, "wb")
        self.popen = subprocess.Popen(argv, cwd=paths.sandbox, env=env, stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=self._stderr,
                                      start_new_session=True)
        self._lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, args=(inbox,), daemon=True,
                                       name=f"lh-cli-stdout-{paths.session_id}")
        self.reader.start()

    def _read(self, inbox: Inbox) -> None:
        assert self.popen.stdout is not None
        for raw in self.popen.stdout:
            inbox.put(ProcessLine(self.session_id, self.generation,
                                  raw.decode("utf-8", "replace").rstrip("\n")))
        inbox.put(ProcessExited(self.session_id, self.generation, self.popen.wait()))

    def follow(self, lines: Iterable[str], name: str) -> None:
        def pump() -> None:
            try:
                for line in lines:
                    self.inbox.put(ProcessLine(self.session_id, self.generation, line))
            except (OSError, ValueError):
                pass  # the process is gone: its stdout reader reports that

        threading.Thread(target=pump, daemon=True,
                         name=f"lh-cli-{name}-{self.session_id}").start()

    def write(self, data: bytes) -> None:
        with self._lock:
            assert self.popen.stdin is not None
            try:
                self.popen.stdin.write(data)
                self.popen.stdin.flush()
            except (BrokenPipeError, ValueError):
                pass  # it exited: the reader reports that

    def alive(self) -> bool:
        return self.popen.poll() is None

    def kill(self) -> None:
        # A CLI may start its tools in sessions of their own (Codex runs each command on a
        # PTY): they are not in its process group, but they are its descendants.
        stray = _descendants(self.popen.pid)
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for pid in stray:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.popen.wait()
        self._stderr.close()

    def stop(self) -> None:
        with self._lock:
            try:
                if self.popen.stdin is not None:
                    self.popen.stdin.close()
            except OSError:
                pass
        try:
            self.popen.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
        self.kill()

    def stderr_tail(self) -> str:
        try:
            return self.stderr_path.read_text("utf-8", "replace")[-STDERR_TAIL_CHARS:]
        except OSError:
            return ""


def _descendants(root: int) -> list[int]:
    """Every live descendant of ``root`` (from ``/proc``; empty where there is none)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read().decode("ascii", "replace")
        except OSError:
            continue
        # the command name (field 2) may hold spaces: the parent is 2 fields after its ')'
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 1 and fields[1].isdigit():
            children.setdefault(int(fields[1]), []).append(int(entry))
    found: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


class _State:
    """What survives a restart, in ``<data dir>/cli/state.json``."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / "cli" / "state.json"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.data: dict[str, Any] = json.loads(self.path.read_text())
        except (OSError, ValueError):
            self.data = {"configs": {}, "sessions": {}, "requests": 0, "waits": 0}

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, sort_keys=True))
        os.replace(tmp, self.path)

    def session(self, session_id: str) -> dict[str, Any]:
        return self.data["sessions"].setdefault(
            session_id, {"conversation": False, "turn_open": False})

    def next(self, counter: str) -> int:
        self.data[counter] = int(self.data.get(counter, 0)) + 1
        self.save()
        return self.data[counter]


class CliRuntime:
    """One instance: the CLIs of its sessions, their loopback servers, the inbox."""

    def __init__(self, dialect: Dialect, binary: str, data_dir: str, world: World) -> None:
        self.dialect = dialect
        self.binary = binary
        self.world = world
        self.root = Path(data_dir)
        self.state = _State(self.root)
        self.inbox = Inbox()
        self.loopback = Loopback(self.inbox, dialect.kind_of, dialect.auxiliary_reply,
                                 dialect.side_answer)
        self.configs: dict[str, SessionConfig] = {
            sid: from_json(SessionConfig, data) for sid, data in self.state.data["configs"].items()}
        self.processes: dict[str, _Process] = {}
        self.generation = 0
        self.pending: dict[str, tuple[str, ApprovalAsked]] = {}
        self.raised: list[BaseException] = []
        self.closed = False
        for sid in self.configs:
            self._write_program(sid)

    # -- paths and processes ------------------------------------------------------------------

    def paths(self, session_id: str) -> SessionPaths:
        return SessionPaths(session_id, self.root / "sandbox" / session_id,
                            self.root / "home" / session_id, self.root / "cli" / "logs")

    def _write_program(self, session_id: str) -> None:
        paths = self.paths(session_id)
        program = paths.sandbox / tool_command.PROGRAM_PATH
        program.parent.mkdir(parents=True, exist_ok=True)
        program.write_text(tool_command.program(sys.executable, self.loopback.ledger_port,
                                                session_id))
        program.chmod(0o755)

    def _process(self, session_id: str) -> _Process:
        process = self.processes.get(session_id)
        if process is not None and process.alive():
            return process
        config = self.configs[session_id]
        paths = self.paths(session_id)
        record = self.state.session(session_id)
        resume = bool(record["conversation"])
        base_url = self.loopback.base_url(session_id)
        self.dialect.prepare(paths, config, base_url)  # this instance's ports
        argv = self.dialect.argv(self.binary, paths, config, resume=resume)
        env = self.dialect.env(paths, base_url)
        self.generation += 1
        process = _Process(argv, env, paths, self.inbox, self.generation)
        process.channel = self.dialect.channel(
            process, paths, config, SessionMemory(record, self.state.save), resume)
        self.processes[session_id] = process
        record["conversation"] = True
        self.state.save()
        return process

    def _kill_all(self) -> None:
        for process in self.processes.values():
            process.kill()
        self.processes.clear()
        self.loopback.close()
        self.closed = True

    # -- the contract's driver calls ------------------------------------------------------------

    def open_session(self, config: SessionConfig) -> None:
        problem = self.dialect.check_session(config)
        if problem:
            raise NotOffered(f"session {config.session_id!r}: {problem}")
        self.configs[config.session_id] = config
        self.state.data["configs"][config.session_id] = to_json(config)
        self.state.session(config.session_id)
        self.state.save()
        paths = self.paths(config.session_id)
        for folder in (paths.sandbox, paths.home):
            folder.mkdir(parents=True, exist_ok=True)
        self._write_program(config.session_id)

    def run_turn(self, session_id: str, user_text: str) -> TurnResult:
        if session_id not in self.configs:
            raise NotOffered(f"no session {session_id!r} was opened")
        return self._turn(session_id, user_text)

    def _turn(self, session_id: str, user_text: str) -> TurnResult:
        process = self._process(session_id)
        self.state.session(session_id)["turn_open"] = True
        self.state.save()
        self.raised = []
        assert process.channel is not None
        process.channel.start_turn(user_text)
        return self._pump(session_id)

    def answer_approval(self, wait_id: str, approve: bool) -> TurnResult:
        found = self.pending.pop(wait_id, None)
        process = self.processes.get(found[0]) if found is not None else None
        if found is None or process is None or not process.alive():
            # Answered already, or asked by a process that is gone (a CLI keeps a pending
            # approval in its memory): the answer reaches nothing, which is what happened.
            session_id = self.state.data.get("wait_sessions", {}).get(wait_id)
            if session_id is None:
                raise NotOffered(f"no approval {wait_id!r} was ever asked in this data dir")
            return TurnResult(session_id, TurnStatus.IDLE)
        session_id, asked = found
        assert process.channel is not None
        process.channel.answer(asked, approve)
        return self._pump(session_id)

    def update_rules(self, session_id: str, rules: tuple[Rule, ...],
                     permission_version: int) -> None:
        raise NotOffered(f"{self.dialect.name} reads its permission rules when it starts; the "
                         "driver cannot change them in the middle of a session")

    def cancel(self, session_id: str) -> None:
        raise NotOffered(f"the {self.dialect.name} driver does not cancel a turn")

    def load_checkpoint(self, session_id: str, data: bytes) -> None:
        raise NotOffered(f"{self.dialect.name} imports no checkpoint of the harness's format")

    def recover(self) -> RecoveryReport:
        resumed = []
        for session_id, record in sorted(self.state.data["sessions"].items()):
            if record.get("turn_open") and session_id in self.configs:
                resumed.append(session_id)
                self._turn(session_id, RESUME_PROMPT)
        return RecoveryReport(turns_resumed=tuple(resumed))

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for process in self.processes.values():
            process.stop()
        self.processes.clear()
        self.loopback.close()

    # -- the pump -----------------------------------------------------------------------------

    def _pump(self, session_id: str) -> TurnResult:
        try:
            return self._pump_until_turn_ends(session_id)
        except SimulatedCrash:
            self._kill_all()
            raise

    def _pump_until_turn_ends(self, session_id: str) -> TurnResult:
        while True:
            item = self.inbox.take(IDLE_LIMIT_S)
            if item is None:
                process = self.processes.get(session_id)
                raise CliError(f"{self.dialect.name} did nothing for {IDLE_LIMIT_S:g}s in "
                               f"session {session_id!r}; its stderr ends with: "
                               f"{process.stderr_tail() if process else ''}")
            if isinstance(item, ModelExchange):
                self._serve(item)
            elif isinstance(item, LedgerExchange):
                self._run_tool(item)
            elif isinstance(item, ProcessLine):
                if item.generation != self._generation_of(item.session_id):
                    continue
                process = self.processes[item.session_id]
                assert process.channel is not None
                signal_ = process.channel.read(item.line)
                if isinstance(signal_, ApprovalAsked):
                    return self._ask(item.session_id, signal_)
                if isinstance(signal_, TurnEnded):
                    return self._ended(item.session_id, signal_)
            elif isinstance(item, ProcessExited):
                if item.generation != self._generation_of(item.session_id):
                    continue
                process = self.processes.pop(item.session_id, None)
                tail = process.stderr_tail() if process else ""
                return self._ended(item.session_id, TurnEnded(
                    False, "", f"{self.dialect.name} exited with status {item.status}: {tail}"))

    def _generation_of(self, session_id: str) -> int:
        process = self.processes.get(session_id)
        return process.generation if process is not None else -1

    def _ended(self, session_id: str, ended: TurnEnded) -> TurnResult:
        self.state.session(session_id)["turn_open"] = False
        self.state.save()
        if not ended.ok and self.raised:
            raise self.raised[-1]  # the world's own error, which the CLI gave up on (M3)
        status = TurnStatus.COMPLETED if ended.ok else TurnStatus.FAILED
        return TurnResult(session_id, status, ended.text)

    def _ask(self, session_id: str, asked: ApprovalAsked) -> TurnResult:
        call = self.dialect.call_of(asked.tool_use_id, asked.tool_name, asked.input)
        number = self.state.next("waits")
        wait_id = f"{session_id}:wait:{number}"
        execution_id = execution_id_for(session_id, call.tool_call_id)
        self.pending[wait_id] = (session_id, asked)
        self.state.data.setdefault("wait_sessions", {})[wait_id] = session_id
        self.state.save()
        self.world.prompt_approval(ApprovalPrompt(
            wait_id=wait_id, session_id=session_id, execution_id=execution_id,
            tool_call_id=call.tool_call_id, tool=call.tool, args=dict(call.args),
            reason=asked.reason))
        self.world.failpoint(Failpoint.AFTER_PROMPT, {
            "session_id": session_id, "tool_call_id": call.tool_call_id,
            "execution_id": execution_id})
        return TurnResult(session_id, TurnStatus.AWAITING_APPROVAL)

    def _serve(self, exchange: ModelExchange) -> None:
        session_id = exchange.session_id
        if session_id not in self.configs:
            exchange.end(RESET)
            return
        number = self.state.next("requests")
        request_id = f"{session_id}:request:{number}"
        self.world.failpoint(Failpoint.BEFORE_MODEL_REQUEST, {"session_id": session_id})
        self.world.failpoint(Failpoint.AFTER_MODEL_REQUEST_STARTED,
                             {"session_id": session_id, "request_id": request_id})
        stream = self.world.open_model_stream(ModelRequest(
            request_id=request_id, session_id=session_id,
            messages=self.dialect.conversation(exchange.body),
            tools=tuple(spec.name for spec in self.configs[session_id].tools)))
        texts: list[str] = []
        calls: list[ToolCall] = []
        end = "end"
        while True:
            try:
                chunk = stream.next_chunk()
            except (ModelTransportError, ModelStreamCancelled) as exc:
                self.raised.append(exc)
                end = "reset"
                break
            if chunk.kind is ChunkKind.TEXT:
                texts.append(chunk.text)
            elif chunk.kind is ChunkKind.TOOL_CALL and chunk.tool_call is not None:
                calls.append(chunk.tool_call)
            else:
                end = "end" if chunk.kind is ChunkKind.END else "eof"
                break
        self.dialect.answer(exchange, Served("".join(texts), tuple(calls), end), number)
        self.world.failpoint(Failpoint.AFTER_MODEL_STREAM_ENDED,
                             {"session_id": session_id, "request_id": request_id})

    def _run_tool(self, exchange: LedgerExchange) -> None:
        session_id = exchange.session_id
        config = self.configs.get(session_id)
        if config is None:
            exchange.answer("error", f"no session {session_id!r}")
            return
        context = {"session_id": session_id, "tool_call_id": exchange.tool_call_id,
                   "execution_id": execution_id_for(session_id, exchange.tool_call_id)}
        self.world.failpoint(Failpoint.AFTER_START_RECORDED, context)
        invocation = ToolInvocation(
            identity=OperationIdentity(
                execution_id=context["execution_id"], tool_call_id=exchange.tool_call_id,
                args_digest=args_digest(exchange.tool, exchange.args),
                permission_version=config.permission_version),
            session_id=session_id, tool=exchange.tool, args=dict(exchange.args))
        try:
            result = self.world.execute_tool(invocation)
            status, output = result.status.value, result.output
        except ToolUnavailable as exc:
            status, output = "error", f"the tool could not start: {exc}"
        except WorldError as exc:
            status, output = "error", str(exc)
        self.world.failpoint(Failpoint.AFTER_TOOL_RETURNED, context)
        exchange.answer(status, output)


OUTSIDE_ONLY = ("a black-box CLI: the harness sees its model requests, its tool runs and its "
                "approval requests, never its store or lifecycle events")


@dataclass(slots=True)
class CliImplementation:
    """``cli:NAME``: one CLI binary under the contract (see the module docstring)."""

    dialect: Dialect
    binary: str
    version: str
    info: ImplementationInfo = field(init=False)
    crash_mode: str = "process"
    black_box: str = OUTSIDE_ONLY
    freeze_process_clock: bool = False

    def __post_init__(self) -> None:
        self.info = ImplementationInfo(name=f"cli:{self.dialect.name}", version=self.version)

    @property
    def time_limit_s(self) -> float:
        """The ``--time-limit-s`` this CLI needs (its start-up and its own retries)."""
        return float(self.dialect.time_limit_s)

    def open(self, data_dir: str, world: World) -> CliRuntime:
        return CliRuntime(self.dialect, self.binary, data_dir, world)

    def inspect(self, data_dir: str) -> Observation:
        return Observation()

    def why_not(self, scenario: Any) -> str:
        """Empty when the driver can run ``scenario`` as written, else why not
        (:func:`harness.clis.applicability.why_not`)."""
        from harness.clis.applicability import why_not

        return why_not(self.dialect, scenario.sessions, [step.do.value for step in scenario.steps],
                       [(fault.failpoint.value, fault.action.value) for fault in scenario.faults])
