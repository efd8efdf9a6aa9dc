"""Fake tools and the side-effect ledger: what really executed, and what it changed.

Guarantees:

* every tool the world knows is a :class:`~harness.contract.ToolSpec`; its kind decides the
  fake effect: ``read`` reads a file of the fake filesystem (or answers a query), ``write``
  writes ``content`` to ``path`` (or, without ``path``, records an external effect),
  ``file_edit`` replaces ``old`` by ``new`` in ``path`` after checking the ``expect_sha``
  precondition, ``bash`` "runs" ``command`` (its ``description`` is display-only),
  ``external`` / ``terminal`` / ``web`` / ``user_app`` record an external effect;
* the fake filesystem is a pyfakefs :class:`FakeFilesystem` used as a plain object: the real
  filesystem is never patched or touched;
* per-call behaviours (``[[tool_behaviour]]``) are consumed in order, ``times`` invocations
  each, then the tool behaves ``ok``: ``param_error``, ``fail``, ``transient`` (no effect),
  ``unavailable`` (raises :class:`~harness.contract.ToolUnavailable`: certainly not executed,
  no ledger row), ``partial_escalate`` (partial effect, error, escalation requested),
  ``claims_not_executed`` (full effect, output text claiming it did not run), ``hang``
  (advances the virtual clock, then a transient timeout, no effect);
* every real execution appends exactly one ledger row (``TOOL_EXECUTED`` with ``ledger_seq``
  1, 2, ...); a refusal to start appends ``TOOL_UNAVAILABLE`` and no row.
"""

from __future__ import annotations

import enum
import threading
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from pyfakefs.fake_filesystem import FakeFilesystem

from harness.contract import (
    FailureKind,
    ToolInvocation,
    ToolKind,
    ToolResult,
    ToolSpec,
    ToolStatus,
    ToolUnavailable,
    args_digest,
    canonical_json,
    to_json,
)
from harness.trace.record import Kind
from harness.world.clock import VirtualClock
from harness.world.log import Channel
from harness.world.templates import file_sha256

DEFAULT_HANG_S = 600.0


class Behaviour(enum.StrEnum):
    OK = "ok"
    PARAM_ERROR = "param_error"
    FAIL = "fail"
    TRANSIENT = "transient"
    UNAVAILABLE = "unavailable"
    PARTIAL_ESCALATE = "partial_escalate"
    CLAIMS_NOT_EXECUTED = "claims_not_executed"
    HANG = "hang"
    UNKNOWN = "unknown"
    """The effect may have been applied and the tool cannot confirm it (a lost reply)."""


class Effect(enum.StrEnum):
    APPLIED = "applied"
    PARTIAL = "partial"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class ToolBehaviour:
    """How the next ``times`` invocations of one call (``call`` = tool_call_id) or of every
    call of one tool (``tool``) behave. Call-specific entries are consulted first."""

    behaviour: Behaviour
    call: str = ""
    tool: str = ""
    times: int = 1
    seconds: float = DEFAULT_HANG_S
    """Virtual seconds a ``hang`` lasts before the world gives up on it."""


@dataclass(frozen=True, slots=True)
class Execution:
    """What the world did for one invocation that really executed."""

    behaviour: Behaviour
    effect: Effect
    result: ToolResult
    precondition_failed: bool = False


class _PreconditionFailed(Exception):
    """A file edit's ``expect_sha`` does not match the file: the tool refuses, no effect."""


_NOT_EXECUTED_CLAIM = "Operation not executed: nothing was changed."


class FakeTools:
    """The tools of one run, their fake filesystem and their external effects."""

    def __init__(
        self,
        specs: Sequence[ToolSpec],
        behaviours: Sequence[ToolBehaviour] = (),
        files: Mapping[str, str] | None = None,
        clock: VirtualClock | None = None,
    ) -> None:
        self.specs = {spec.name: spec for spec in specs}
        self._behaviours = tuple(behaviours)
        self._used = [0] * len(self._behaviours)
        self._clock = clock or VirtualClock()
        self._files = dict(files or {})
        self._fs: FakeFilesystem | None = None
        self.external_effects: list[dict[str, Any]] = []
        self._ledger = 0
        self._invocations: dict[str, int] = {}
        self._lock = threading.RLock()

    # -- fake filesystem -----------------------------------------------------------------

    @property
    def fs(self) -> FakeFilesystem:
        """The fake filesystem, built with the initial files at its first use (building one
        is a few percent of a scenario's run, and most scenarios never touch a file)."""
        if self._fs is None:
            fs = FakeFilesystem(path_separator="/")
            for path, content in sorted(self._files.items()):
                fs.create_file(path, contents=content)
            self._fs = fs
        return self._fs

    def read_file(self, path: str) -> str | None:
        with self._lock:
            if not self.fs.isfile(path):
                return None
            return self.fs.get_object(path).contents

    def write_file(self, path: str, content: str) -> None:
        with self._lock:
            if self.fs.isfile(path):
                self.fs.get_object(path).set_contents(content)
            else:
                self.fs.create_file(path, contents=content)

    def files(self) -> dict[str, str]:
        """Every file of the fake filesystem with its content (sorted by path)."""
        with self._lock:
            found: dict[str, str] = {}
            pending = ["/"]
            while pending:
                folder = pending.pop()
                for name in self.fs.listdir(folder):
                    path = folder.rstrip("/") + "/" + name
                    if self.fs.isdir(path):
                        pending.append(path)
                    else:
                        found[path] = self.fs.get_object(path).contents
            return dict(sorted(found.items()))

    # -- execution -----------------------------------------------------------------------

    def _behaviour_for(self, call_id: str, tool: str) -> ToolBehaviour | None:
        for wanted in ("call", "tool"):
            for index, entry in enumerate(self._behaviours):
                selector = entry.call if wanted == "call" else entry.tool
                key = call_id if wanted == "call" else tool
                if selector and selector == key and self._used[index] < entry.times:
                    self._used[index] += 1
                    return entry
        return None

    def execute(self, invocation: ToolInvocation, channel: Channel) -> ToolResult:
        """Perform the invocation, record it, and return what the tool returned."""
        channel.guard()
        with self._lock:
            call_id = invocation.identity.tool_call_id
            number = self._invocations.get(call_id, 0) + 1
            self._invocations[call_id] = number
            spec = self.specs.get(invocation.tool)
            entry = self._behaviour_for(call_id, invocation.tool) if spec else None
            behaviour = entry.behaviour if entry else Behaviour.OK
            row = {
                "session_id": invocation.session_id,
                "tool_call_id": call_id,
                "execution_id": invocation.identity.execution_id,
                "tool": invocation.tool,
                "kind": spec.kind.value if spec else "",
                "args": to_json(invocation.args),
                "args_digest": args_digest(invocation.tool, invocation.args),
                "permission_version": invocation.identity.permission_version,
                "identity": to_json(invocation.identity),
                "sandboxed": invocation.sandboxed,
                "invocation": number,
                "behaviour": behaviour.value,
            }
            if spec is None or behaviour is Behaviour.UNAVAILABLE:
                reason = (f"no tool named {invocation.tool!r} in this world" if spec is None
                          else "the host could not start the tool (scripted)")
                error = ToolUnavailable(reason)
                row["reason"] = reason
                channel.record(Kind.TOOL_UNAVAILABLE, row)
                channel.raised(error)
                raise error
            execution = self._perform(spec, invocation, behaviour, entry)
            if execution.precondition_failed:
                row["precondition_failed"] = True
            self._ledger += 1
            row = {"ledger_seq": self._ledger, **row,
                   "effect": execution.effect.value,
                   "status": execution.result.status.value,
                   "output": execution.result.output,
                   "error_kind": (execution.result.error_kind.value
                                  if execution.result.error_kind else None),
                   "escalation_requested": execution.result.escalation_requested}
            channel.record(Kind.TOOL_EXECUTED, row)
            return execution.result

    def _perform(self, spec: ToolSpec, invocation: ToolInvocation, behaviour: Behaviour,
                 entry: ToolBehaviour | None) -> Execution:
        def error(kind: FailureKind, output: str) -> Execution:
            return Execution(behaviour, Effect.NONE, ToolResult(ToolStatus.ERROR, output, kind))

        if behaviour is Behaviour.PARAM_ERROR:
            return error(FailureKind.PARAM_ERROR, "invalid arguments (scripted)")
        if behaviour is Behaviour.FAIL:
            return error(FailureKind.FAILED, f"{spec.name} failed (scripted)")
        if behaviour is Behaviour.TRANSIENT:
            return error(FailureKind.TRANSIENT, "temporarily unavailable, try again (scripted)")
        if behaviour is Behaviour.HANG:
            seconds = entry.seconds if entry else DEFAULT_HANG_S
            self._clock.advance(seconds)
            return error(FailureKind.TRANSIENT, f"timed out after {seconds:g}s (scripted hang)")
        if behaviour is Behaviour.UNKNOWN:
            return Execution(behaviour, Effect.PARTIAL, ToolResult(
                ToolStatus.ERROR, "the remote end stopped answering mid-operation; its effect is "
                "unknown (scripted)", FailureKind.UNKNOWN))
        partial = behaviour is Behaviour.PARTIAL_ESCALATE
        try:
            effect, result = self._effect(spec, invocation, partial)
        except _PreconditionFailed as refused:
            return Execution(behaviour, Effect.NONE, ToolResult(
                ToolStatus.ERROR, str(refused), FailureKind.FAILED), precondition_failed=True)
        if partial and effect is not Effect.NONE:
            return Execution(behaviour, Effect.PARTIAL, ToolResult(
                ToolStatus.ERROR,
                "the sandbox blocked part of the operation; escalation requested (scripted)",
                FailureKind.PERMISSION_DENIED,
                escalation_requested=True,
            ))
        if behaviour is Behaviour.CLAIMS_NOT_EXECUTED and result.status is ToolStatus.OK:
            result = ToolResult(ToolStatus.OK, _NOT_EXECUTED_CLAIM)
        return Execution(behaviour, effect, result)

    def _effect(self, spec: ToolSpec, invocation: ToolInvocation,
                partial: bool) -> tuple[Effect, ToolResult]:
        """The ordinary effect of the tool's kind (half of it when ``partial``)."""
        args = invocation.args
        ok = Effect.PARTIAL if partial else Effect.APPLIED

        def param_error(what: str) -> tuple[Effect, ToolResult]:
            return Effect.NONE, ToolResult(ToolStatus.ERROR, what, FailureKind.PARAM_ERROR)

        def failed(what: str) -> tuple[Effect, ToolResult]:
            return Effect.NONE, ToolResult(ToolStatus.ERROR, what, FailureKind.FAILED)

        path = args.get("path")
        if spec.kind is ToolKind.READ:
            if isinstance(path, str):
                content = self.read_file(path)
                if content is None:
                    return failed(f"no such file: {path}")
                return Effect.NONE, ToolResult(ToolStatus.OK, content)
            return Effect.NONE, ToolResult(ToolStatus.OK, f"{spec.name}: ok")
        if spec.kind is ToolKind.WRITE and isinstance(path, str):
            content = args.get("content", "")
            if not isinstance(content, str):
                return param_error("'content' must be a string")
            self.write_file(path, content[: len(content) // 2] if partial else content)
            return ok, ToolResult(ToolStatus.OK, f"wrote {len(content)} characters to {path}")
        if spec.kind is ToolKind.FILE_EDIT:
            old, new = args.get("old"), args.get("new")
            if not (isinstance(path, str) and isinstance(old, str) and isinstance(new, str)):
                return param_error("file edits need string 'path', 'old' and 'new'")
            content = self.read_file(path)
            if content is None:
                return failed(f"no such file: {path}")
            expected = args.get("expect_sha")
            actual = file_sha256(content)
            if expected and expected not in (actual, actual.removeprefix("sha256:")):
                raise _PreconditionFailed(f"precondition failed: {path} is {actual}, "
                                          f"expected {expected}")
            if old not in content:
                return failed(f"{old!r} not found in {path}")
            self.write_file(path, content.replace(old, new, 1))
            return ok, ToolResult(ToolStatus.OK, f"edited {path}")
        if spec.kind is ToolKind.BASH:
            command = args.get("command")
            if not isinstance(command, str) or not command:
                return param_error("Bash needs a non-empty string 'command'")
            self._external(spec, invocation, partial)
            return ok, ToolResult(ToolStatus.OK, f"$ {command}\n(exit 0)")
        # external, terminal, web, user_app, and path-less writes
        self._external(spec, invocation, partial)
        return ok, ToolResult(ToolStatus.OK, f"{spec.name}: done")

    def _external(self, spec: ToolSpec, invocation: ToolInvocation, partial: bool) -> None:
        self.external_effects.append({
            "tool": spec.name,
            "kind": spec.kind.value,
            "execution_id": invocation.identity.execution_id,
            "args": canonical_json(to_json(invocation.args)),
            "partial": partial,
        })
