"""The wire protocol between the harness and an out-of-process implementation (version 1).

Newline-delimited JSON-RPC 2.0 over the child's stdin/stdout, requests in both directions:
the harness sends *driver* requests (:data:`DRIVER_METHODS`), the implementation sends *port*
requests (:data:`PORT_METHODS`) while a driver request is in flight, and each side answers
the other's requests synchronously, possibly nested (the harness may answer a ``failpoint``
by first sending ``update_rules`` back in). ``docs/protocol.md`` is the prose version;
``fixtures/protocol.schema.json`` is generated from the tables here.

Guarantees:

* one message per line, UTF-8 JSON without raw newlines; values are exactly the contract's
  :func:`~harness.contract.to_json` forms (``bytes`` travel as base64 text), decoded back
  as :func:`~harness.contract.from_json` does (through
  :func:`~harness.remote.value_decoders.decoder_for`), so every value round-trips exactly;
* an :class:`Endpoint` is single-threaded and strictly nested: the only response it accepts
  is the one to its innermost pending request; while waiting it serves the peer's requests;
* a request whose handler raises is answered with a JSON-RPC error; for an exception
  ``data.exception`` names its class, and a contract exception (:data:`CONTRACT_EXCEPTIONS`)
  is re-raised on the other side as the same class with the same message; any other is
  re-raised as a :class:`RemoteException` subclass carrying the same class name;
* a malformed message is answered with a JSON-RPC error whose message says what is wrong
  (parse error, missing field, unknown method, bad parameter path...);
* ``BaseException`` s that are not ``Exception`` s (e.g. ``SimulatedCrash``) are never
  answered or translated: they propagate out of :meth:`Endpoint.call` untouched.

This module imports only :mod:`harness.contract`, :mod:`harness.remote.value_decoders` (one
decoder per contract type, same values and errors as ``from_json``) and the standard library:
an implementation's server may import it (``reference_impl.remote`` does). Its errors derive
from :class:`ProtocolError`; the harness side wraps them into
``harness.remote.errors.RemoteError`` before they leave ``harness.remote``.
"""

from __future__ import annotations

import base64
import binascii
import json
import typing
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol

from harness.contract import (
    CHECKPOINT_FIXTURE_BYTES_MAX,
    ApprovalPrompt,
    CheckpointFixture,
    ClassifierRequest,
    ClassifierVerdict,
    ContractError,
    ImplementationInfo,
    InjectedFault,
    LifecycleEvent,
    ModelChunk,
    ModelRequest,
    ModelStreamCancelled,
    ModelTransportError,
    Observation,
    Projection,
    RecoveryReport,
    Rule,
    SessionConfig,
    ToolInvocation,
    ToolResult,
    ToolUnavailable,
    TurnResult,
    WorldError,
    canonical_json_problem,
    integer_problem,
    to_json,
    type_hints,
)
from harness.remote.value_decoders import decoder_for

PROTOCOL_VERSION = 1
JSONRPC = "2.0"

# --------------------------------------------------------------------------- error codes

PARSE_ERROR = -32700
"""The line is not UTF-8 JSON."""
INVALID_REQUEST = -32600
"""JSON, but not a JSON-RPC 2.0 request or response of this protocol."""
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
"""The handler returned a value that does not encode as the method's result type."""
RAISED = -32000
"""The handler raised; ``data.exception`` names the class, ``message`` is ``str(exc)``."""
VERSION_MISMATCH = -32001
"""``initialize`` asked for a protocol version the server does not speak."""
WRONG_STATE = -32002
"""A request that is valid but not now (before ``initialize``, before ``open``...)."""

ERROR_NAMES: dict[int, str] = {
    PARSE_ERROR: "parse error",
    INVALID_REQUEST: "invalid request",
    METHOD_NOT_FOUND: "method not found",
    INVALID_PARAMS: "invalid params",
    INTERNAL_ERROR: "internal error",
    RAISED: "raised",
    VERSION_MISMATCH: "version mismatch",
    WRONG_STATE: "wrong state",
}

CONTRACT_EXCEPTIONS: dict[str, type[Exception]] = {
    cls.__name__: cls
    for cls in (ModelTransportError, ModelStreamCancelled, ToolUnavailable, InjectedFault,
                WorldError, ContractError)
}
"""Exceptions re-raised as themselves on the other side (named in ``data.exception``)."""

EXCERPT_CHARS = 200


# --------------------------------------------------------------------------- errors


class ProtocolError(Exception):
    """Root of this module's errors: the conversation itself went wrong."""


class BadMessage(ProtocolError):
    """A line that is not a valid message of this protocol; ``code`` is the JSON-RPC code
    to answer it with, ``id`` the request id when one could be read (else ``None``)."""

    def __init__(self, code: int, message: str, id: int | str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.id = id


class PeerGone(ProtocolError):
    """The peer closed its output (exited, was killed) while a response was awaited."""


class PeerSilent(ProtocolError):
    """The peer wrote nothing within the reply timeout while a response was awaited."""


class PeerRejected(ProtocolError):
    """The peer answered our request with a protocol-level error (not an exception of its
    own code): unknown method, invalid params, wrong state, version mismatch..."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{message} (JSON-RPC error {code}, {ERROR_NAMES.get(code, 'error')})")
        self.code = code
        self.data = data


class RpcFault(Exception):
    """Raise from a handler to answer with a specific protocol-level error code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class RemoteException(Exception):
    """The peer's own code raised an exception that is not a contract class.

    :func:`remote_exception_type` makes one subclass per remote class name, so
    ``type(exc).__name__`` reads the same on both sides of the wire."""

    remote_type = "RemoteException"


_REMOTE_TYPES: dict[str, type[RemoteException]] = {}


def remote_exception_type(name: str) -> type[RemoteException]:
    """The :class:`RemoteException` subclass standing for the peer's class ``name``."""
    if not isinstance(name, str) or not name.isidentifier():
        return RemoteException
    kind = _REMOTE_TYPES.get(name)
    if kind is None:
        kind = type(name, (RemoteException,), {"remote_type": name, "__module__": __name__})
        _REMOTE_TYPES[name] = kind
    return kind


def error_for_exception(exc: BaseException) -> tuple[int, str, dict[str, Any]]:
    """``(code, message, data)`` of the error answering a request whose handler raised."""
    if isinstance(exc, RpcFault):
        return exc.code, str(exc), {}
    name = exc.remote_type if isinstance(exc, RemoteException) else type(exc).__name__
    return RAISED, str(exc), {"exception": name}


def exception_for_error(code: int, message: str, data: Any) -> Exception:
    """The exception a caller raises for an error answer (see the module guarantees)."""
    name = data.get("exception") if isinstance(data, dict) else None
    if code == RAISED and isinstance(name, str):
        kind = CONTRACT_EXCEPTIONS.get(name) or remote_exception_type(name)
        return kind(message)
    return PeerRejected(code, message, data)


# --------------------------------------------------------------------------- methods


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    type: Any
    """A contract type (dataclass, enum, ``tuple[...]``, ``dict[str, Any]``, scalar) or
    ``bytes`` (sent as base64 text)."""
    doc: str = ""


@dataclass(frozen=True, slots=True)
class Method:
    name: str
    params: tuple[Param, ...]
    result: Any
    """The result type; ``None`` means the result is JSON ``null``."""
    doc: str


@dataclass(frozen=True, slots=True)
class InitializeResult:
    """What a server answers to ``initialize``."""

    protocol_version: int
    info: ImplementationInfo
    fixture_root: str = ""
    """Obsolete and ignored: the harness never reads a path an implementation names; it asks
    for a fixture's content with ``checkpoint_fixture``. Accepted so older servers still load."""
    inspect_since: bool = False
    """True: the server answers ``inspect_since`` (a reading, or "unchanged since the reading
    you name"); the harness then uses it instead of ``inspect``."""
    inspect_parts: bool = False
    """True: the server answers ``inspect_parts`` (like ``inspect_since``, and it may leave
    out the row parts unchanged since the reading you name); the harness then uses it instead
    of ``inspect_since`` and ``inspect``."""
    fork_server: bool = False
    """True: this process is a fork *template* (it was started with :data:`FORK_FD_ENV` and
    serves fork requests on that socket, see "Fork server" below); it answers nothing on
    stdin but ``shutdown`` from now on. Servers that leave it out are spawned per instance."""


@dataclass(frozen=True, slots=True)
class InspectSinceResult:
    """What a server answers to ``inspect_since``."""

    reading: str
    """The server's token for the reading it answers (non-empty; opaque to the harness)."""
    observation: Observation | None = None
    """The reading; null means "identical to the reading ``since`` named", which a server may
    only answer when it answered that very token for the same data dir and the store did not
    change since (the harness fails an "unchanged" for any other token)."""


OBSERVATION_ROW_PARTS: tuple[str, ...] = tuple(
    name for name, kind in type_hints(Observation).items() if typing.get_origin(kind) is tuple)
"""The Observation's row parts (its tuple fields: ``sessions``, ``operations``, ...): what an
``inspect_parts`` answer may name ``unchanged``."""


@dataclass(frozen=True, slots=True)
class InspectPartsResult:
    """What a server answers to ``inspect_parts``."""

    reading: str
    """The server's token for the reading it answers (non-empty; opaque to the harness)."""
    observation: Observation | None = None
    """The reading without the parts named in ``unchanged``; null: identical to the reading
    ``since`` named (as for ``inspect_since``)."""
    unchanged: tuple[str, ...] = ()
    """Row parts of the observation (``sessions``, ``operations``, ...) identical to those of
    the reading ``since`` named, left out of ``observation``; only for the token the server
    answered last for that data dir (the harness fails them for any other)."""


@dataclass(frozen=True, slots=True)
class CheckpointFixtureResult:
    """What a server answers to ``checkpoint_fixture``: the fixture's bytes as base64 text
    (at most ``CHECKPOINT_FIXTURE_BYTES_MAX`` bytes once decoded) and, optionally, the
    messages a session continued from it must carry (its ``.expect.json`` sidecar)."""

    content_base64: str
    expected_messages: tuple[dict[str, Any], ...] | None = None

    @classmethod
    def of(cls, fixture: CheckpointFixture | bytes) -> CheckpointFixtureResult:
        if not isinstance(fixture, CheckpointFixture):
            fixture = CheckpointFixture(bytes(fixture))
        return cls(base64.b64encode(fixture.content).decode("ascii"), fixture.expected_messages)

    def fixture(self, where: str = "checkpoint_fixture.result") -> CheckpointFixture:
        """The decoded fixture; raises ContractError when too large or not base64."""
        if len(self.content_base64) > 4 * (CHECKPOINT_FIXTURE_BYTES_MAX // 3 + 1):
            raise ContractError(f"{where}.content_base64: larger than "
                                f"{CHECKPOINT_FIXTURE_BYTES_MAX} bytes once decoded")
        content = decode_value(bytes, self.content_base64, f"{where}.content_base64")
        if len(content) > CHECKPOINT_FIXTURE_BYTES_MAX:
            raise ContractError(f"{where}.content_base64: larger than "
                                f"{CHECKPOINT_FIXTURE_BYTES_MAX} bytes once decoded")
        return CheckpointFixture(content, self.expected_messages)


def _methods(*methods: Method) -> dict[str, Method]:
    return {method.name: method for method in methods}


DRIVER_METHODS: dict[str, Method] = _methods(
    Method("initialize", (Param("protocol_version", int), Param("contract_version", int)),
           InitializeResult, "Handshake; first request on every connection."),
    Method("open", (Param("data_dir", str),), None,
           "Start (or restart) a runtime instance over the data dir; one per process."),
    Method("open_session", (Param("config", SessionConfig),), None, "Runtime.open_session"),
    Method("run_turn", (Param("session_id", str), Param("user_text", str)), TurnResult,
           "Runtime.run_turn"),
    Method("answer_approval", (Param("wait_id", str), Param("approve", bool)), TurnResult,
           "Runtime.answer_approval"),
    Method("update_rules", (Param("session_id", str), Param("rules", tuple[Rule, ...]),
                            Param("permission_version", int)), None, "Runtime.update_rules"),
    Method("cancel", (Param("session_id", str),), None, "Runtime.cancel"),
    Method("recover", (), RecoveryReport, "Runtime.recover"),
    Method("load_checkpoint", (Param("session_id", str), Param("data", bytes, "base64")),
           None, "Runtime.load_checkpoint"),
    Method("close", (), None, "Runtime.close; the process stays up for inspect/shutdown."),
    Method("inspect", (Param("data_dir", str),), Observation,
           "Implementation.inspect: read the durable store alone (no open runtime needed)."),
    Method("inspect_since", (Param("data_dir", str), Param("since", str)), InspectSinceResult,
           "Like inspect, but answers observation null when the store is unchanged since the "
           "reading `since` (a token from an earlier answer on this connection; \"\" for none). "
           "Only sent to servers whose initialize said inspect_since."),
    Method("inspect_parts", (Param("data_dir", str), Param("since", str)), InspectPartsResult,
           "Like inspect_since, and the answer may leave out the row parts (sessions, "
           "operations, ...) unchanged since the reading `since`, naming them in `unchanged`. "
           "Only sent to servers whose initialize said inspect_parts."),
    Method("checkpoint_fixture", (Param("name", str),), CheckpointFixtureResult,
           "The content of the declared checkpoint fixture `name` (an entry of "
           "info.checkpoint_fixtures); the harness never reads fixture paths itself."),
    Method("shutdown", (), None, "Answer, then exit with status 0."),
)
"""Harness → implementation requests."""

PORT_METHODS: dict[str, Method] = _methods(
    Method("open_model_stream", (Param("request", ModelRequest),), str,
           "World.open_model_stream; the result is a stream id for next_chunk."),
    Method("next_chunk", (Param("stream_id", str),), ModelChunk, "ModelStream.next_chunk"),
    Method("review", (Param("request", ClassifierRequest),), ClassifierVerdict, "World.review"),
    Method("execute_tool", (Param("invocation", ToolInvocation),), ToolResult,
           "World.execute_tool"),
    Method("prompt_approval", (Param("prompt", ApprovalPrompt),), None,
           "World.prompt_approval"),
    Method("publish", (Param("projection", Projection),), None, "World.publish"),
    Method("now", (), float, "World.now (virtual seconds)"),
    Method("emit", (Param("event", LifecycleEvent),), None, "World.emit"),
    Method("failpoint", (Param("name", str), Param("context", dict[str, Any])), None,
           "World.failpoint; a crash there is a SIGKILL of the caller (no answer ever comes)."),
)
"""Implementation → harness requests (the world's ports), sent while a driver request is in
flight."""


def prepare_decoders() -> None:
    """Build now the decoder of every value type the method tables carry (they are otherwise
    built at first use): a fork template calls it once, so no forked instance builds them
    again."""
    for method in (*DRIVER_METHODS.values(), *PORT_METHODS.values()):
        for kind in (*(param.type for param in method.params), method.result):
            if kind is not None and kind is not bytes:
                decoder_for(kind)


# --------------------------------------------------------------------------- values


def encode_value(kind: Any, value: Any) -> Any:
    """``value`` of type ``kind`` as JSON data (``bytes`` as base64 text)."""
    if kind is None:
        return None
    if kind is bytes:
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise ContractError(f"expected bytes, got {type(value).__name__}")
        return base64.b64encode(bytes(value)).decode("ascii")
    return to_json(value)


def decode_value(kind: Any, data: Any, where: str) -> Any:
    """The value of type ``kind`` that :func:`encode_value` turned into ``data``."""
    if kind is None:
        if data is not None:
            raise ContractError(f"{where}: expected null, got {_excerpt(data)}")
        return None
    if kind is bytes:
        if not isinstance(data, str):
            raise ContractError(f"{where}: expected base64 text, got {type(data).__name__}")
        try:
            return base64.b64decode(data.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError) as exc:
            raise ContractError(f"{where}: not valid base64 ({exc})") from None
    return decoder_for(kind)(data, where)


def encode_params(method: Method, params: Mapping[str, Any]) -> dict[str, Any]:
    return {p.name: encode_value(p.type, params[p.name]) for p in method.params}


_PARAM_NAMES: dict[str, tuple[Method, frozenset[str]]] = {}
"""Per method name: the method and its param names (a frozen Method hashes all its fields)."""


def decode_params(method: Method, params: Mapping[str, Any]) -> dict[str, Any]:
    """Typed keyword arguments for ``method``; raises :class:`BadMessage` (INVALID_PARAMS)
    naming the missing, unknown or ill-typed parameter."""
    known = _PARAM_NAMES.get(method.name)
    if known is None or known[0] is not method:
        known = _PARAM_NAMES[method.name] = (method, frozenset(p.name for p in method.params))
    if params.keys() == known[1]:  # the usual case: exactly the params, nothing to report
        try:
            return {param.name: decode_value(param.type, params[param.name],
                                             f"params.{param.name}")
                    for param in method.params}
        except ContractError as exc:
            raise BadMessage(INVALID_PARAMS, f"{method.name}: {exc}") from None
    expected = [p.name for p in method.params]
    unknown = sorted(set(params) - set(expected))
    if unknown:
        raise BadMessage(INVALID_PARAMS, f"{method.name}: unknown param(s) {unknown}; "
                         f"expected: {', '.join(expected) or 'none'}")
    values = {}
    for param in method.params:
        if param.name not in params:
            raise BadMessage(INVALID_PARAMS, f"{method.name}: missing param {param.name!r}; "
                             f"expected: {', '.join(expected)}")
        try:
            values[param.name] = decode_value(param.type, params[param.name],
                                              f"params.{param.name}")
        except ContractError as exc:
            raise BadMessage(INVALID_PARAMS, f"{method.name}: {exc}") from None
    return values


# --------------------------------------------------------------------------- messages


@dataclass(frozen=True, slots=True)
class Request:
    id: int | str
    method: str
    params: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Response:
    id: int | str | None
    result: Any = None
    error: dict[str, Any] | None = None
    """``{"code": int, "message": str, "data"?: any}`` when the request failed."""


_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
"""What ``json.dumps`` with these options does, without building an encoder per message."""


def dumps(message: Mapping[str, Any]) -> bytes:
    """One message as one line (with its ``\\n``)."""
    return _ENCODE(message).encode("utf-8") + b"\n"


def request_message(id: int | str, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": JSONRPC, "id": id, "method": method, "params": dict(params)}


def result_message(id: int | str, result: Any) -> dict[str, Any]:
    return {"jsonrpc": JSONRPC, "id": id, "result": result}


def error_message(id: int | str | None, code: int, message: str,
                  data: Mapping[str, Any] | None = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data:
        error["data"] = dict(data)
    return {"jsonrpc": JSONRPC, "id": id, "error": error}


def _excerpt(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS] + "..."


def _id_of(data: Any) -> int | str | None:
    msg_id = data.get("id") if isinstance(data, dict) else None
    return msg_id if _is_id(msg_id) else None


def _is_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


DEFAULT_MAX_DEPTH = 200
"""Nesting depth of arrays and objects a message may have (``harness.contract.limits.Limits``)."""


def json_depth_over(data: Any, limit: int) -> int:
    """0 if ``data`` nests at most ``limit`` deep, else a depth past ``limit`` it reaches
    (iterative: a deep value cannot exhaust the stack)."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children: Any = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > limit:
            return depth
        stack.extend((child, depth + 1) for child in children
                     if isinstance(child, (dict, list)))
    return 0


class _NotCanonical(ValueError):
    """A JSON number the contract's canonical form (RFC 8785) has no text for."""


def _constant(name: str) -> Any:
    raise _NotCanonical(f"{name} is not JSON (RFC 8259) and has no canonical text (RFC 8785)")


def _integer(text: str) -> int:
    value = int(text)
    if len(text) > 15:
        problem = integer_problem(value)
        if problem:
            raise _NotCanonical(problem)
    return value


def _number(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise _NotCanonical(f"{_excerpt(text)} is past the largest double (it would read as an "
                            "infinity, which canonical JSON (RFC 8785) has no text for)")
    return value


_DECODER = json.JSONDecoder(parse_int=_integer, parse_float=_number, parse_constant=_constant)
"""``json.loads`` that also refuses what the contract's digests cannot be computed over:
``NaN``/``Infinity`` (which Python's reader accepts), numbers that overflow to infinity,
integers past ``SAFE_INTEGER_MAX`` that are not the text of a double (``integer_problem``).
(Lone surrogates are looked for after decoding.)"""


_REQUEST_MEMBERS = frozenset({"jsonrpc", "id", "method", "params"})
_RESULT_MEMBERS = frozenset({"jsonrpc", "id", "result"})
_ID_TYPES = frozenset({int, str})
"""Exact types of an id (``bool`` is not an ``int`` here: :func:`_is_id`)."""


def parse_message(line: bytes | str, max_depth: int = DEFAULT_MAX_DEPTH) -> Request | Response:
    """Decode one line; raises :class:`BadMessage` saying what is wrong with it (also when
    it nests deeper than ``max_depth``)."""
    if isinstance(line, bytes):
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadMessage(PARSE_ERROR, f"not UTF-8 ({exc.reason} at byte {exc.start})") \
                from None
    try:
        data = _DECODER.decode(line)
    except _NotCanonical as exc:
        raise BadMessage(INVALID_REQUEST, f"{exc} (docs/contract.md, \"Canonical JSON\"): "
                         f"{_excerpt(line.rstrip())}") from None
    except ValueError as exc:
        raise BadMessage(PARSE_ERROR, f"not JSON ({exc}): {_excerpt(line.rstrip())}") from None
    except RecursionError:
        raise BadMessage(PARSE_ERROR, f"JSON nested deeper than the decoder can follow, past "
                         f"the limit json_depth={max_depth}") from None
    # Nesting cannot exceed the number of opening brackets (those inside strings only
    # overcount): most lines are shallow and skip the walk.
    brackets = line.count("[") + line.count("{")
    too_deep = json_depth_over(data, max_depth) if brackets > max_depth else 0
    if too_deep:
        raise BadMessage(INVALID_REQUEST, f"JSON nested at least {too_deep} deep, past the "
                         f"limit json_depth={max_depth}", _id_of(data))
    if "\\ud" in line or "\\uD" in line:  # maybe a lone surrogate, written as an escape
        problem = canonical_json_problem(data, "message")
        if problem:
            raise BadMessage(INVALID_REQUEST, f"{problem} (docs/contract.md, \"Canonical "
                             f"JSON\")", _id_of(data))
    if not isinstance(data, dict):
        raise BadMessage(INVALID_REQUEST, f"a message must be a JSON object, got "
                         f"{type(data).__name__}: {_excerpt(line.rstrip())}")
    # Nearly every message is a well-formed request or result: those take one look at their
    # members; anything else goes through the checks below, which say what is wrong.
    keys = data.keys()
    if keys == _REQUEST_MEMBERS:
        msg_id = data["id"]
        if data["jsonrpc"] == JSONRPC and type(data["method"]) is str \
                and type(data["params"]) is dict and type(msg_id) in _ID_TYPES:
            return Request(msg_id, data["method"], data["params"])
    elif keys == _RESULT_MEMBERS:
        msg_id = data["id"]
        if data["jsonrpc"] == JSONRPC and type(msg_id) in _ID_TYPES:
            return Response(msg_id, result=data["result"])
    msg_id = data.get("id")
    known_id = msg_id if _is_id(msg_id) else None
    if data.get("jsonrpc") != JSONRPC:
        raise BadMessage(INVALID_REQUEST, f'"jsonrpc" must be "2.0", got '
                         f'{_excerpt(data.get("jsonrpc"))}', known_id)
    if "method" in data:
        extra = sorted(set(data) - {"jsonrpc", "id", "method", "params"})
        if extra:
            raise BadMessage(INVALID_REQUEST, f"unknown request member(s) {extra}", known_id)
        method = data["method"]
        if not isinstance(method, str):
            raise BadMessage(INVALID_REQUEST, '"method" must be a string', known_id)
        if "id" not in data:
            raise BadMessage(INVALID_REQUEST, f"request {method!r} has no id (notifications "
                             "are not part of protocol version 1)")
        if not _is_id(msg_id):
            raise BadMessage(INVALID_REQUEST, f'request {method!r}: "id" must be an integer '
                             f"or a string, got {_excerpt(msg_id)}")
        params = data.get("params", {})
        if not isinstance(params, dict):
            raise BadMessage(INVALID_REQUEST, f'request {method!r}: "params" must be an '
                             "object (by-name parameters)", known_id)
        return Request(msg_id, method, params)
    extra = sorted(set(data) - {"jsonrpc", "id", "result", "error"})
    if extra:
        raise BadMessage(INVALID_REQUEST, f"unknown response member(s) {extra} (a request "
                         'needs "method")', known_id)
    if "id" not in data or not (msg_id is None or _is_id(msg_id)):
        raise BadMessage(INVALID_REQUEST, 'a response needs an "id" (integer, string or null)')
    if ("result" in data) == ("error" in data):
        raise BadMessage(INVALID_REQUEST, 'a response has exactly one of "result" and "error"',
                         known_id)
    if "error" in data:
        error = data["error"]
        if (not isinstance(error, dict) or not isinstance(error.get("code"), int)
                or isinstance(error.get("code"), bool) or not isinstance(error.get("message"), str)):
            raise BadMessage(INVALID_REQUEST, '"error" must be an object with an integer '
                             '"code" and a string "message"', known_id)
        return Response(msg_id, error=error)
    return Response(msg_id, result=data["result"])


# --------------------------------------------------------------------------- endpoint


class Transport(Protocol):
    def read_line(self, timeout: float | None) -> bytes:
        """The next line (with or without its ``\\n``); ``b""`` at end of input. Raises
        :class:`PeerSilent` when ``timeout`` seconds pass without one (``None``: wait)."""

    def write_line(self, data: bytes) -> None:
        """Write and flush one line; raises :class:`PeerGone` if the peer is gone."""


class StreamTransport:
    """A transport over two binary file objects (a child's stdin/stdout). It ignores read
    timeouts: a child waits for its harness as long as it takes."""

    def __init__(self, rfile: Any, wfile: Any) -> None:
        self._rfile = rfile
        self._wfile = wfile

    def read_line(self, timeout: float | None) -> bytes:
        return self._rfile.readline()

    def write_line(self, data: bytes) -> None:
        try:
            self._wfile.write(data)
            self._wfile.flush()
        except (BrokenPipeError, ValueError, OSError) as exc:
            raise PeerGone(f"cannot write to the peer ({exc})") from None


Handler = Callable[..., Any]


class Endpoint:
    """One side of a connection: sends requests, answers the peer's requests.

    ``incoming``/``handlers`` are the methods this side serves; ``outgoing`` those it calls.
    ``strict``: a malformed line received while waiting for a response ends the call with
    :class:`BadMessage` (after answering it); otherwise it is answered and ignored.
    ``on_eof_in_call`` runs when the peer's output ends while a response is awaited
    (a child uses it to die at once, as a killed process would), before :class:`PeerGone`.
    """

    def __init__(self, transport: Transport, *, incoming: Mapping[str, Method],
                 outgoing: Mapping[str, Method], handlers: Mapping[str, Handler],
                 strict: bool = False, reply_timeout_s: float | None = None,
                 on_eof_in_call: Callable[[], None] | None = None,
                 max_depth: int = DEFAULT_MAX_DEPTH) -> None:
        self.transport = transport
        self.max_depth = max_depth
        self.incoming = incoming
        self.outgoing = outgoing
        self.handlers = dict(handlers)
        self.strict = strict
        self.reply_timeout_s = reply_timeout_s
        self.on_eof_in_call = on_eof_in_call
        self.encoders: dict[str, Callable[[Any], Any]] = {}
        """Per incoming method, an encoder of its handler's result used instead of
        :func:`encode_value` (same JSON; e.g. reusing the encoding of unchanged objects)."""
        self.decoders: dict[str, Callable[[Any, str], Any]] = {}
        """Per outgoing method, a decoder of its result used instead of
        :func:`decode_value` (same value and errors; e.g. reusing earlier objects)."""
        self.stopping = False
        """Set once a ``shutdown`` request has been answered."""
        self._next_id = 1
        self._pending: list[int] = []

    @property
    def depth(self) -> int:
        """How many of our requests are awaiting their response (nesting depth)."""
        return len(self._pending)

    # -- calling -----------------------------------------------------------------------------

    def call(self, method: str, **params: Any) -> Any:
        """Send ``method`` and serve the peer until its response; the typed result."""
        spec = self.outgoing[method]
        request_id = self._next_id
        self._next_id += 1
        self._send(request_message(request_id, method, encode_params(spec, params)))
        self._pending.append(request_id)
        try:
            while True:
                message = self._receive(method)
                if message is None:
                    continue
                if isinstance(message, Request):
                    self._answer(message)
                    continue
                if message.id != request_id:
                    bad = BadMessage(INVALID_REQUEST, f"response id {message.id!r} answers no "
                                     f"pending request (awaiting {request_id}, {method!r})",
                                     message.id)
                    if self._rejected(bad):
                        raise bad
                    continue
                if message.error is not None:
                    error = message.error
                    raise exception_for_error(error["code"], error["message"], error.get("data"))
                decoder = self.decoders.get(method)
                try:
                    if decoder is not None:
                        return decoder(message.result, f"{method}.result")
                    return decode_value(spec.result, message.result, f"{method}.result")
                except ContractError as exc:
                    raise BadMessage(INVALID_REQUEST, f"bad result for {method!r}: {exc}",
                                     request_id) from None
        finally:
            self._pending.pop()

    def _receive(self, method: str) -> Request | Response | None:
        line = self.transport.read_line(self.reply_timeout_s)
        if not line:
            if self.on_eof_in_call is not None:
                self.on_eof_in_call()
            raise PeerGone(f"the peer closed its output while {method!r} awaited its response")
        if not line.strip():
            return None
        try:
            return parse_message(line, self.max_depth)
        except BadMessage as bad:
            if self._rejected(bad):
                raise
            return None

    def _rejected(self, bad: BadMessage) -> bool:
        """Answer a malformed message; True if that ends the current call (strict)."""
        try:
            self._send(error_message(bad.id, bad.code, str(bad)))
        except PeerGone:
            pass
        return self.strict

    # -- serving -----------------------------------------------------------------------------

    def serve(self) -> str:
        """Answer the peer's requests until ``shutdown`` ("shutdown") or end of input
        ("eof"). Malformed lines and stray responses are answered with errors."""
        while not self.stopping:
            line = self.transport.read_line(None)
            if not line:
                return "eof"
            self.serve_line(line)
        return "shutdown"

    def serve_line(self, line: bytes) -> None:
        """Answer one line read outside :meth:`serve` (a server that waits on more than its
        stdin, e.g. a fork template); malformed lines and stray responses get errors."""
        if not line.strip():
            return
        try:
            message = parse_message(line, self.max_depth)
        except BadMessage as bad:
            self._rejected(bad)
            return
        if isinstance(message, Response):
            self._rejected(BadMessage(INVALID_REQUEST, f"response id {message.id!r} "
                                      "answers no pending request", message.id))
            return
        self._answer(message)

    def _answer(self, request: Request) -> None:
        spec = self.incoming.get(request.method)
        handler = self.handlers.get(request.method)
        if spec is None or handler is None:
            served = ", ".join(name for name in self.incoming if name in self.handlers)
            self._send(error_message(request.id, METHOD_NOT_FOUND,
                                     f"unknown method {request.method!r}; this side serves: "
                                     f"{served}"))
            return
        try:
            kwargs = decode_params(spec, request.params)
        except BadMessage as bad:
            self._send(error_message(request.id, bad.code, str(bad)))
            return
        try:
            value = handler(**kwargs)
        except Exception as exc:  # noqa: BLE001 - the handler's error is the peer's answer
            code, message, data = error_for_exception(exc)
            self._send(error_message(request.id, code, message, data))
            return
        encoder = self.encoders.get(request.method)
        try:
            result = encode_value(spec.result, value) if encoder is None else encoder(value)
        except ContractError as exc:
            self._send(error_message(request.id, INTERNAL_ERROR,
                                     f"{request.method}: the handler's result does not encode "
                                     f"as its result type: {exc}"))
            return
        self._send(result_message(request.id, result))
        if request.method == "shutdown":
            self.stopping = True

    def _send(self, message: Mapping[str, Any]) -> None:
        self.transport.write_line(dumps(message))


# --------------------------------------------------------------------------- fork server


CHILD_MARK_ENV = "LIFECYCLE_HARNESS_CHILD"
"""Set in every child's environment to a token of its own (a forked instance sets it to the
``mark`` of its fork request); whatever it starts inherits it, so the harness's sweep finds
descendants that left its session and lost their parent."""
FORK_FD_ENV = "LIFECYCLE_HARNESS_FORK_FD"
"""Set only in a fork template's environment: the number of an inherited ``AF_UNIX``
``SOCK_SEQPACKET`` socket on which fork requests arrive (``docs/protocol.md``, "Fork
server")."""
FORK_REQUEST_FDS = 4
"""A fork request carries exactly these descriptors (``SCM_RIGHTS``), in this order: the new
instance's stdin (read end), stdout (write end), stderr (write end), and its *reply* socket
(one end of a fresh ``SOCK_SEQPACKET`` pair)."""
FORK_MESSAGE_BYTES_MAX = 4096
"""Longest fork request or reply datagram (JSON)."""


def fork_datagram(**fields: Any) -> bytes:
    """One fork-server message: a JSON object in one datagram."""
    data = json.dumps(fields, separators=(",", ":")).encode("utf-8")
    if len(data) > FORK_MESSAGE_BYTES_MAX:
        raise ProtocolError(f"a fork message is at most {FORK_MESSAGE_BYTES_MAX} bytes, "
                            f"this one {len(data)}")
    return data


def read_fork_datagram(data: bytes, kind: str) -> dict[str, Any]:
    """The fields of a fork-server message ``kind`` (``"request"``: ``{"mark": str}``;
    ``"reply"``: ``{"pid": int}``, ``{"pid": int, "exit_status": int}`` or
    ``{"error": str}``); raises :class:`ProtocolError` saying what is wrong."""
    try:
        fields = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProtocolError(f"fork {kind}: not UTF-8 JSON ({exc}): "
                            f"{_excerpt(data[:EXCERPT_CHARS])}") from None
    if not isinstance(fields, dict):
        raise ProtocolError(f"fork {kind}: a JSON object is expected, got {_excerpt(fields)}")
    if kind == "request":
        if set(fields) != {"mark"} or not isinstance(fields["mark"], str) \
                or not fields["mark"] or "\0" in fields["mark"] or "=" in fields["mark"]:
            raise ProtocolError(f'fork request: expected {{"mark": non-empty text}}, got '
                                f"{_excerpt(fields)}")
        return fields
    shapes = ({"pid"}, {"pid", "exit_status"}, {"error"})
    if set(fields) not in shapes or not all(
            isinstance(fields[name], int) and not isinstance(fields[name], bool)
            for name in ("pid", "exit_status") if name in fields) \
            or not isinstance(fields.get("error", ""), str) \
            or ("pid" in fields and fields["pid"] <= 0):
        raise ProtocolError(f'fork reply: expected {{"pid": int}}, {{"pid": int, '
                            f'"exit_status": int}} or {{"error": text}}, got {_excerpt(fields)}')
    return fields
