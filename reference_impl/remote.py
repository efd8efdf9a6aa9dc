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
"""

from __future__ import annotations

import os
import sys
from typing import Any, BinaryIO

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
)
from harness.remote.protocol import (
    DRIVER_METHODS,
    METHOD_NOT_FOUND,
    PORT_METHODS,
    PROTOCOL_VERSION,
    VERSION_MISMATCH,
    WRONG_STATE,
    CheckpointFixtureResult,
    Endpoint,
    InitializeResult,
    RpcFault,
    StreamTransport,
)

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


class Server:
    """Answers the harness's driver requests for one implementation, one runtime at a time."""

    def __init__(self, implementation: Implementation, endpoint: Endpoint) -> None:
        self.implementation = implementation
        self.endpoint = endpoint
        self.initialized = False
        self.runtime: Runtime | None = None
        endpoint.handlers = {name: getattr(self, "do_" + name) for name in DRIVER_METHODS}

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
        return InitializeResult(PROTOCOL_VERSION, self.implementation.info)

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


def main() -> int:
    from reference_impl import implementation

    protocol_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed by accident goes to stderr, not into the protocol
    sys.stdout = sys.stderr
    return serve(implementation(), sys.stdin.buffer, protocol_out)


if __name__ == "__main__":
    sys.exit(main())
