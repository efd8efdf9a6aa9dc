"""The shared vocabulary between the harness and every implementation under test (IUT).

This is the only harness module an implementation may import. It guarantees:

* the closed sets of values for the three independent states of an operation (permission,
  outcome, delivery) and for every other status the harness reasons about;
* frozen, slotted value types (calls, requests, verdicts, observations, session config)
  that round-trip exactly through JSON via :func:`to_json` / :func:`from_json`, so the
  out-of-process wire protocol can reuse them unchanged;
* the canonical argument digest (:func:`args_digest`) that binds an operation's identity;
* the ports the world offers an IUT (:class:`World`) and the driver every IUT offers the
  harness (:class:`Runtime`, :class:`Implementation`), as Protocols;
* the catalogue of failpoint names an IUT must call at each lifecycle point.

Nothing here performs I/O or keeps state. See ``docs/lifecycle.md`` for the behaviour the
harness expects behind these types.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import hashlib
import json
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

CONTRACT_VERSION = 1


class ContractError(Exception):
    """Root of every error raised by this module (bad JSON shape, unknown enum value...)."""


# --------------------------------------------------------------------------- enums


class Permission(enum.StrEnum):
    """May this operation start under the identity and rules in force?"""

    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


class Outcome(enum.StrEnum):
    """Did the operation run, and is its result certain? ``failed`` may have partial effects."""

    NOT_STARTED = "not_started"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    UNKNOWN = "unknown"


class Delivery(enum.StrEnum):
    """Has the result been saved, and has it reached the session and the UI?"""

    PENDING = "pending"
    RECORDED = "recorded"
    PROJECTED = "projected"


class ClassifierOutcome(enum.StrEnum):
    ALLOW = "allow"
    RISK_DENY = "risk_deny"
    TIMEOUT = "timeout"
    SERVICE_ERROR = "service_error"
    CANCELLED = "cancelled"
    NO_VERDICT_OVERSIZE = "no_verdict_oversize"


class ModelRequestStatus(enum.StrEnum):
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INCOMPLETE = "incomplete"


class FailureKind(enum.StrEnum):
    PARAM_ERROR = "param_error"
    PERMISSION_DENIED = "permission_denied"
    TRANSIENT = "transient"
    FAILED = "failed"
    UNKNOWN = "unknown"
    RUNTIME_FAULT = "runtime_fault"


class Mode(enum.StrEnum):
    DEFAULT = "default"
    AUTO = "auto"
    PLAN = "plan"


class ToolKind(enum.StrEnum):
    """What a fake tool does; entry points (terminal/web/user_app) are kinds too (X6)."""

    READ = "read"
    WRITE = "write"
    EXTERNAL = "external"
    BASH = "bash"
    FILE_EDIT = "file_edit"
    TERMINAL = "terminal"
    WEB = "web"
    USER_APP = "user_app"


class RuleEffect(enum.StrEnum):
    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


class DecisionSource(enum.StrEnum):
    """Which layer of the precedence (L2.1) decided the permission, highest first."""

    HARD_CONSTRAINT = "hard_constraint"
    CAPABILITY = "capability"
    PLAN_MODE = "plan_mode"
    EXPLICIT_DENY = "explicit_deny"
    ASK_RULE = "ask_rule"
    EXACT_GRANT = "exact_grant"
    CLASSIFIER = "classifier"
    REPEAT_GUARD = "repeat_guard"
    APPROVAL = "approval"
    REVALIDATION = "revalidation"
    CANCELLATION = "cancellation"
    DEFAULT_ASK = "default_ask"
    DEFAULT_DENY = "default_deny"


class RecoveryAction(enum.StrEnum):
    """Actions a UI may offer for an operation; only valid ones may be offered (L5.4)."""

    RETRY = "retry"
    EDIT_ARGS = "edit_args"
    APPROVE = "approve"
    REJECT = "reject"
    CHANGE_RULES = "change_rules"
    RECONCILE = "reconcile"


class WaitStatus(enum.StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"


class TurnStatus(enum.StrEnum):
    IDLE = "idle"
    RUNNING = "running"
    AWAITING_APPROVAL = "awaiting_approval"
    COMPLETED = "completed"
    INCOMPLETE = "incomplete"
    FAILED = "failed"
    CANCELLED = "cancelled"
    DEFERRED = "deferred"


class ChunkKind(enum.StrEnum):
    TEXT = "text"
    TOOL_CALL = "tool_call"
    END = "end"
    EOF = "eof"


class ToolStatus(enum.StrEnum):
    OK = "ok"
    ERROR = "error"


class EventType(enum.StrEnum):
    """Canonical lifecycle events an IUT emits through ``World.emit`` (realtime channel)."""

    OPERATION_PREPARED = "operation_prepared"
    PERMISSION_DECIDED = "permission_decided"
    CLASSIFIER_REVIEWED = "classifier_reviewed"
    APPROVAL_WAIT_CREATED = "approval_wait_created"
    APPROVAL_ANSWERED = "approval_answered"
    REVALIDATED = "revalidated"
    EXECUTION_STARTED = "execution_started"
    RESULT_SAVED = "result_saved"
    OPERATION_FAILED = "operation_failed"
    CHECKPOINT_SAVED = "checkpoint_saved"
    CHECKPOINT_FAILED = "checkpoint_failed"
    PROJECTED = "projected"
    RECONCILIATION_REQUIRED = "reconciliation_required"
    RUNTIME_FAULT = "runtime_fault"
    MODEL_REQUEST_STARTED = "model_request_started"
    MODEL_REQUEST_ENDED = "model_request_ended"
    TURN_ENDED = "turn_ended"
    RECOVERED = "recovered"


EVENT_FIELDS_READ: dict[EventType, tuple[str, ...]] = {
    EventType.PERMISSION_DECIDED: ("execution_id", "data.permission"),
    EventType.EXECUTION_STARTED: ("execution_id",),
    EventType.RESULT_SAVED: ("execution_id", "data.outcome"),
    EventType.RUNTIME_FAULT: ("session_id", "execution_id"),
    EventType.MODEL_REQUEST_STARTED: ("session_id", "request_id"),
    EventType.MODEL_REQUEST_ENDED: ("session_id", "request_id", "data.status"),
    EventType.TURN_ENDED: ("session_id", "data.status"),
    EventType.RECOVERED: ("session_id", "data.reconciliation_required"),
}
"""The lifecycle events whose fields the criteria read (``data.<key>`` is a key of
``LifecycleEvent.data``); the others are recorded only. ``docs/contract.md`` lists the same
table; ``tests/unit/docs`` keeps the page equal to it and fails when a criterion starts
reading an event type missing here."""


class Feature(enum.StrEnum):
    """Capabilities an implementation may declare (values are stable: old traces name them).

    Only the :data:`OPTIONAL_FEATURES` can be left out: the criteria an optional feature gates
    are ``not_applicable`` when the implementation neither declares it nor shows it by its
    behaviour in the run (every scenario runs; a declaration adds a feature, never removes
    one the behaviour shows). The :data:`CORE_FEATURES`
    are part of the lifecycle itself: declaring one changes nothing and leaving it out
    changes nothing either, their criteria always apply (see ``harness.contract.conformance``).
    """

    AUTO_MODE = "auto_mode"
    APPROVALS = "approvals"
    PLAN_MODE = "plan_mode"
    WEB_PROJECTION = "web_projection"
    MODEL_EVENTS = "model_events"
    MULTI_INSTANCE = "multi_instance"
    CHECKPOINT_IMPORT = "checkpoint_import"
    SANDBOX_ESCALATION = "sandbox_escalation"


CORE_FEATURES: frozenset[Feature] = frozenset(
    {Feature.AUTO_MODE, Feature.APPROVALS, Feature.PLAN_MODE, Feature.MODEL_EVENTS}
)
"""Behaviour every implementation of the lifecycle has by construction (no opt-out)."""
OPTIONAL_FEATURES: frozenset[Feature] = frozenset(Feature) - CORE_FEATURES
"""Behaviour an implementation claims by declaring it or shows by doing it; the report names
the level reached."""


# --------------------------------------------------------------------------- failpoints


class Failpoint(enum.StrEnum):
    """Every named lifecycle point at which an IUT must call ``World.failpoint``.

    An IUT calls each point outside any open store transaction, so that a second instance
    on the same data dir can proceed while the first is held there. Each point has a
    precondition (what must be durable, what must not be yet) and a required context
    (``session_id``, plus ``tool_call_id`` and ``execution_id`` at operation points, or
    ``request_id`` after a model request started): ``docs/lifecycle.md``, "Failpoint
    preconditions". The harness judges both at every hit.
    """

    AFTER_PREPARE = "after_prepare"
    AFTER_PERMISSION_DECISION = "after_permission_decision"
    DURING_CLASSIFIER_REVIEW = "during_classifier_review"
    AFTER_WAIT_PERSISTED = "after_wait_persisted"
    AFTER_PROMPT = "after_prompt"
    AFTER_REVALIDATION = "after_revalidation"
    AFTER_START_RECORDED = "after_start_recorded"
    AFTER_TOOL_RETURNED = "after_tool_returned"
    AFTER_RESULT_SAVED = "after_result_saved"
    DURING_CHECKPOINT_BUILD = "during_checkpoint_build"
    AFTER_CHECKPOINT_SAVED = "after_checkpoint_saved"
    DURING_DIAGNOSTICS_WRITE = "during_diagnostics_write"
    AFTER_PROJECTION = "after_projection"
    BEFORE_MODEL_REQUEST = "before_model_request"
    AFTER_MODEL_REQUEST_STARTED = "after_model_request_started"
    AFTER_MODEL_STREAM_ENDED = "after_model_stream_ended"


FAILPOINT_DESCRIPTIONS: dict[Failpoint, str] = {
    Failpoint.AFTER_PREPARE: "operation record created with its identity, no decision yet",
    Failpoint.AFTER_PERMISSION_DECISION: "permission decided and saved, nothing executed",
    Failpoint.DURING_CLASSIFIER_REVIEW: "classifier called, verdict not yet applied",
    Failpoint.AFTER_WAIT_PERSISTED: "approval wait committed, prompt not yet shown",
    Failpoint.AFTER_PROMPT: "approval prompt shown to the human",
    Failpoint.AFTER_REVALIDATION: "revalidation passed, start not yet recorded",
    Failpoint.AFTER_START_RECORDED: "execution start committed, tool not yet called",
    Failpoint.AFTER_TOOL_RETURNED: "tool returned, result not yet saved",
    Failpoint.AFTER_RESULT_SAVED: "result record committed, checkpoint not yet built",
    Failpoint.DURING_CHECKPOINT_BUILD: "checkpoint being built (raise = build failure)",
    Failpoint.AFTER_CHECKPOINT_SAVED: "checkpoint committed, UI not yet updated",
    Failpoint.DURING_DIAGNOSTICS_WRITE: "optional diagnostics/display state being written",
    Failpoint.AFTER_PROJECTION: "UI projection published",
    Failpoint.BEFORE_MODEL_REQUEST: "model request about to be sent",
    Failpoint.AFTER_MODEL_REQUEST_STARTED: "model request start recorded",
    Failpoint.AFTER_MODEL_STREAM_ENDED: "model stream ended, end event not yet recorded",
}


# --------------------------------------------------------------------------- exceptions
# Raised by world ports into the IUT. They are part of the contract so that an IUT can
# tell a transport failure from its own bugs and propagate it unchanged (M3).


class WorldError(Exception):
    """Root of the errors a world port raises into an implementation."""


class ModelTransportError(WorldError):
    """The model stream broke (connection reset...); the request must end ``failed``."""


class ModelStreamCancelled(WorldError):
    """The model request was cancelled by the user; it must end ``cancelled``."""


class ToolUnavailable(WorldError):
    """The host could not start the tool at all: it certainly did not execute."""


class InjectedFault(WorldError):
    """An ordinary exception injected at a failpoint (e.g. checkpoint build failure)."""


class SimulatedCrash(BaseException):
    """The process 'dies' at a failpoint. Not an ``Exception``: an IUT must not catch it.

    An implementation that catches it (``except BaseException``) and goes on is itself a
    defect the harness reports.
    """


# --------------------------------------------------------------------------- canonical JSON


SAFE_INTEGER_MAX = 2**53 - 1
"""The largest integer an IEEE double keeps exactly. RFC 8785 writes every number as the
double it is (as JavaScript does), so past ``±SAFE_INTEGER_MAX`` an integer has a canonical
text only when it is exactly the text of a double (``53401225956765130``, what a reader gets
back from the canonical text of the double ``5.340122595676513e16``); any other
(``9007199254740993``, which no double holds) is refused: send such a value as a string."""


class CanonicalJsonError(ContractError, ValueError):
    """A value canonical JSON (RFC 8785) has no text for: an integer no double holds, NaN or
    an infinity, a lone surrogate, a key that is not a string. The message names the value's
    path. (A ``ValueError`` too, as ``json`` raises for NaN.)"""


_PLAIN_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                                  allow_nan=False)
"""Python's C encoder: for JSON data without floats, astral or surrogate characters and
integers of 16 digits or more, its text *is* the RFC 8785 text (same escapes, integers, and
key order: code points and UTF-16 units sort alike below U+10000). One encoder, not
``json.dumps`` per call (which builds one each time)."""

_MAYBE_NOT_PLAIN = re.compile(r"[:,\[]-?(?:\d++(?:\.|e[-+])|\d{16})")
"""Where Python's text may differ from RFC 8785's, in the plain encoder's compact output: a
number after ``:``/``,``/``[`` written as a float (Python writes ``1.0``, ``1e-07``; RFC 8785
``1``, ``1e-7``) or an integer of 16+ digits (maybe past ``SAFE_INTEGER_MAX``). A match inside
a string (``"x:1.5"``) only sends the value the exact way; a float can never be missed."""

_WIDE = re.compile("[\ud800-\udfff\U00010000-\U0010ffff]")
"""A surrogate (refused) or an astral character (keys sort by UTF-16 units, not code
points): searched only in a text that is not ASCII."""

_SURROGATE = re.compile("[\ud800-\udfff]")
_STRING = json.encoder.encode_basestring  # type: ignore[attr-defined]
"""JSON's C string function (``ensure_ascii=False``): the escapes RFC 8785 asks for exactly
(``\\"``, ``\\\\``, ``\\b \\f \\n \\r \\t``, other controls as ``\\u00xx``; the rest as itself)."""


def canonical_json(value: Any) -> str:
    """The RFC 8785 (JSON Canonicalization Scheme) text of JSON data: keys sorted by UTF-16
    code units, no whitespace, strings escaped only where JSON must be (non-ASCII written as
    itself), numbers as ECMAScript writes a double (``1.0`` -> ``1``, ``1e-7``, ``1e+21``).
    Hashed as UTF-8. Raises :class:`CanonicalJsonError` for a value RFC 8785 has no text for
    (see :data:`SAFE_INTEGER_MAX`; NaN, infinities, lone surrogates).

    Two ways, one text: Python's C encoder (:data:`_PLAIN_ENCODER`), whose text is RFC 8785's
    for nearly every value the harness encodes, and :func:`_jcs`, which writes the rules
    out, for a value where the two may differ (a float, a long integer, a non-BMP or
    surrogate character). ``tests/unit/harness/contract/test_canonical_json.py`` holds both
    to the RFC's examples and to the ``rfc8785`` library (Trail of Bits). That library is
    not used here: written in Python through a byte buffer it takes about 4x the C encoder's
    time on the suite's values (``benchmarks/bench_canonical.py``), and this package imports
    nothing outside the standard library (an implementation may copy it, docs/protocol.md)."""
    if isinstance(value, (int, float)):  # a number alone: no separator before it
        return _exact(value)
    try:
        text = _PLAIN_ENCODER.encode(value)
    except ValueError:  # NaN or an infinity (allow_nan=False); a circular reference
        return _exact(value)
    if _MAYBE_NOT_PLAIN.search(text) is None and (text.isascii() or _WIDE.search(text) is None):
        return text
    return _exact(value)


def _exact(value: Any) -> str:
    try:
        return _jcs(value)
    except (CanonicalJsonError, RecursionError) as exc:
        problem = canonical_json_problem(value) or f"{type(exc).__name__}: {exc}"
        raise CanonicalJsonError(f"no canonical JSON (RFC 8785) for this value: {problem}") \
            from None


def _jcs(value: Any) -> str:
    """RFC 8785, rule by rule (section 3.2)."""
    if isinstance(value, str):
        if _SURROGATE.search(value):
            raise CanonicalJsonError("a lone surrogate")
        return _STRING(value)
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, int):
        if -SAFE_INTEGER_MAX <= value <= SAFE_INTEGER_MAX:
            return int.__repr__(value)
        if integer_problem(value):
            raise CanonicalJsonError("an integer no double holds")
        return es_number(float(value))
    if isinstance(value, float):
        return es_number(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join([_jcs(item) for item in value]) + "]"
    if isinstance(value, dict):
        for key in value:
            if not isinstance(key, str):
                raise CanonicalJsonError("a key that is not a string")
        # 3.2.3: members sorted by the UTF-16 code units of their names
        members = sorted(value.items(), key=lambda member: member[0].encode("utf-16-be",
                                                                             "surrogatepass"))
        return "{" + ",".join([_jcs(key) + ":" + _jcs(item) for key, item in members]) + "}"
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def es_number(number: float) -> str:
    """A double as ECMAScript's ``Number.prototype.toString`` writes it (RFC 8785, 3.2.2.3):
    the shortest digits that read back as the same double (Python's ``repr`` finds them), in
    plain notation from 1e-6 up to below 1e21, else as ``d.ddde±x``; ``-0`` is ``0``."""
    if number != number or number in (_INFINITY, -_INFINITY):
        raise CanonicalJsonError(f"{number!r} has no JSON text")
    if number == 0:
        return "0"
    mantissa, _, exponent = repr(abs(number)).partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = (whole + fraction).lstrip("0")
    # the value is 0.DIGITS times 10**point (each leading zero dropped moves the point)
    point = len(whole) + int(exponent or 0) - (len(whole) + len(fraction) - len(digits))
    digits = digits.rstrip("0")
    if len(digits) <= point <= 21:
        text = digits + "0" * (point - len(digits))
    elif 0 < point <= 21:
        text = digits[:point] + "." + digits[point:]
    elif -6 < point <= 0:
        text = "0." + "0" * -point + digits
    else:
        text = (digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
                + ("e+" if point > 0 else "e-") + str(abs(point - 1)))
    return "-" + text if number < 0 else text


_INFINITY = float("inf")


def integer_problem(number: int) -> str:
    """``""`` when canonical JSON writes the integer ``number``, else why not. Within
    ``±SAFE_INTEGER_MAX`` every integer is written; past it JSON numbers are doubles (every
    reader that keeps doubles, JavaScript's ``JSON.parse`` among them, reads the integer as
    the double nearest to it), so an integer is written only when it is exactly that
    double's canonical text, as a canonical text read back gives it (``53401225956765130``):
    then every reader writes it back the same. Any other (``9007199254740993``, ``2**60``)
    would be written otherwise by some reader, and is refused."""
    if -SAFE_INTEGER_MAX <= number <= SAFE_INTEGER_MAX:
        return ""
    digits = str(number)
    try:
        text = es_number(float(number))
    except OverflowError:
        text = ""
    if text == digits:
        return ""
    shown = digits if len(digits) <= 40 else f"{digits[:20]}... ({len(digits)} digits)"
    reading = f"the double written {text}" if text else "infinity (past the largest double)"
    return (f"the integer {shown} is past \u00b1{SAFE_INTEGER_MAX} (2**53 - 1), where JSON "
            f"numbers are doubles: a reader takes it for {reading}; send it as a string")


def canonical_json_problem(value: Any, where: str = "$") -> str:
    """``""`` if :func:`canonical_json` has a text for ``value``, else one sentence naming
    the first part it has none for and its path (``$.args.n: the integer 9007199254740993 is
    past ...``). Used where values enter the harness (the wire, an in-process
    implementation's values) to refuse them with the path rather than fail later at a
    digest."""
    stack: list[tuple[Any, str]] = [(value, where)]
    while stack:
        item, path = stack.pop()
        if item is None or isinstance(item, bool):
            continue
        if isinstance(item, int):
            problem = integer_problem(item)
            if problem:
                return f"{path}: {problem}"
        elif isinstance(item, float):
            if item != item or item in (float("inf"), float("-inf")):
                return f"{path}: {item!r} has no JSON text (RFC 8785 refuses NaN and infinities)"
        elif isinstance(item, str):
            found = _SURROGATE.search(item)
            if found:
                return (f"{path}: the text holds a lone surrogate U+{ord(found.group()):04X}, "
                        "which has no UTF-8 form (RFC 8785 refuses it)")
        elif isinstance(item, dict):
            for key, member in reversed(list(item.items())):
                if not isinstance(key, str):
                    return f"{path}: the key {key!r} is not a string"
                found = _SURROGATE.search(key)
                if found:
                    return (f"{path}: the key {key!r} holds a lone surrogate "
                            f"U+{ord(found.group()):04X} (RFC 8785 refuses it)")
                stack.append((member, f"{path}.{key}"))
        elif isinstance(item, (list, tuple)):
            stack.extend((member, f"{path}[{at}]")
                         for at, member in reversed(list(enumerate(item))))
        else:
            return f"{path}: a {type(item).__name__} is not JSON data"
    return ""


def args_digest(tool: str, args: dict[str, Any]) -> str:
    """The argument digest bound into an operation's identity (over tool name and args)."""
    payload = canonical_json({"tool": tool, "args": args}).encode("utf-8")
    return "sha256:" + hashlib.sha256(payload).hexdigest()


def result_digest(status: str, output: str) -> str:
    payload = canonical_json({"status": status, "output": output}).encode("utf-8")
    return "sha256:" + hashlib.sha256(payload).hexdigest()


def execution_id_for(session_id: str, tool_call_id: str) -> str:
    """The execution id of a call: one call delivered twice has one execution id (X2)."""
    digest = hashlib.sha256(f"{session_id}\x00{tool_call_id}".encode()).hexdigest()
    return "ex-" + digest[:16]


# --------------------------------------------------------------------------- values


FAILURE_TABLE_CAPACITY = 16
"""The recent-failure table's capacity, fixed by the design ("固定容量", "统一限制为 16 条"):
not a setting. ``Thresholds.failure_table_capacity`` stays only so old traces still load."""


@dataclass(frozen=True, slots=True)
class Thresholds:
    failure_table_capacity: int = FAILURE_TABLE_CAPACITY
    """Always :data:`FAILURE_TABLE_CAPACITY` (a scenario setting another value does not
    load); kept so traces recorded before the capacity was fixed still deserialize."""
    consecutive_denials_max: int = 3
    cumulative_denials_max: int = 20
    legacy_classifier_window_chars: int = 800
    classifier_input_chars_max: int = 20_000
    auto_retries_max: int = 2
    failure_repeat_limit: int = 2
    classifier_timeout_s: float = 30.0


@dataclass(frozen=True, slots=True)
class Rule:
    """A permission rule. ``pattern`` is an fnmatch pattern over ``field`` of the args
    (``"*"`` matches any call of the tool; ``field=""`` means the whole canonical args)."""

    effect: RuleEffect
    tool: str
    pattern: str = "*"
    field: str = ""


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    kind: ToolKind
    idempotent: bool = False
    description: str = ""


@dataclass(frozen=True, slots=True)
class SessionConfig:
    session_id: str
    interactive: bool = True
    owner_can_approve: bool = True
    mode: Mode = Mode.DEFAULT
    capabilities: tuple[str, ...] = ()
    """Tool names the owner's identity may use at all; empty means every tool."""
    hard_constraints: tuple[Rule, ...] = ()
    """Deny rules no approval, grant or classifier can lift."""
    rules: tuple[Rule, ...] = ()
    permission_version: int = 1
    tools: tuple[ToolSpec, ...] = ()
    trusted_cwd: str = "/repo"
    permission_scope: str = "workspace-write"
    user_requirements: str = ""
    thresholds: Thresholds = Thresholds()


@dataclass(frozen=True, slots=True)
class ToolCall:
    tool_call_id: str
    tool: str
    args: dict[str, Any]


@dataclass(frozen=True, slots=True)
class OperationIdentity:
    execution_id: str
    tool_call_id: str
    args_digest: str
    permission_version: int


@dataclass(frozen=True, slots=True)
class Message:
    """One entry of the conversation sent to the model.

    Tool results carry the host's status for the call (``outcome``/``failure_kind``)."""

    role: str  # "user" | "assistant" | "tool"
    content: str = ""
    tool_call_id: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    outcome: Outcome | None = None
    failure_kind: FailureKind | None = None
    incomplete: bool = False


@dataclass(frozen=True, slots=True)
class ModelRequest:
    request_id: str
    session_id: str
    messages: collections.abc.Sequence[Message]
    """The whole conversation, oldest first: a tuple, or any read-only sequence that stays
    as it is (a view of an append-only log spares a long session a copy per request). The
    harness reads it before the port returns; decoded from JSON it is a tuple."""
    tools: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ModelChunk:
    kind: ChunkKind
    text: str = ""
    tool_call: ToolCall | None = None


@dataclass(frozen=True, slots=True)
class ClassifierRequest:
    """What a classifier reviews. Trusted and untrusted inputs travel apart (L2.4)."""

    session_id: str
    tool: str
    operation: str
    """Canonical JSON of the complete arguments, byte-identical to what would execute."""
    trusted_cwd: str
    permission_scope: str
    user_requirements: str
    untrusted_description: str = ""
    untrusted_context: str = ""


@dataclass(frozen=True, slots=True)
class ClassifierVerdict:
    outcome: ClassifierOutcome
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ToolInvocation:
    identity: OperationIdentity
    session_id: str
    tool: str
    args: dict[str, Any]
    sandboxed: bool = True


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a tool returned. Its text is data for the model, never execution state (X5)."""

    status: ToolStatus
    output: str = ""
    error_kind: FailureKind | None = None
    escalation_requested: bool = False


@dataclass(frozen=True, slots=True)
class ApprovalPrompt:
    wait_id: str
    session_id: str
    execution_id: str
    tool_call_id: str
    tool: str
    args: dict[str, Any]
    reason: str


@dataclass(frozen=True, slots=True)
class Projection:
    """What the UI shows for one operation."""

    session_id: str
    execution_id: str
    tool_call_id: str
    permission: Permission
    outcome: Outcome
    status: str
    reason: str
    recovery_actions: tuple[RecoveryAction, ...]


@dataclass(frozen=True, slots=True)
class LifecycleEvent:
    type: EventType
    session_id: str
    execution_id: str = ""
    request_id: str = ""
    data: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- observation


@dataclass(frozen=True, slots=True)
class OperationView:
    session_id: str
    identity: OperationIdentity
    tool: str
    args: dict[str, Any]
    dedup_key: str
    permission: Permission
    decided_by: DecisionSource
    outcome: Outcome
    delivery: Delivery
    execution_started: bool
    failure_kind: FailureKind | None
    reason: str
    recovery_actions: tuple[RecoveryAction, ...]
    reconciliation_required: bool
    classifier_outcome: ClassifierOutcome | None
    result_digest: str | None
    attempts: int
    """How many times the runtime invoked the tool for this operation (retries included)."""


@dataclass(frozen=True, slots=True)
class ApprovalWaitView:
    wait_id: str
    session_id: str
    execution_id: str
    tool_call_id: str
    reason: str
    status: WaitStatus
    applied: bool
    """True once the answer took effect (executed or recorded as rejected)."""


@dataclass(frozen=True, slots=True)
class DenialCounterView:
    session_id: str
    permission_version: int
    consecutive: int
    cumulative: int


@dataclass(frozen=True, slots=True)
class FailureEntryView:
    session_id: str
    dedup_key: str
    tool: str
    failure_kind: FailureKind
    count: int
    last_execution_id: str


@dataclass(frozen=True, slots=True)
class CheckpointView:
    session_id: str
    format_version: int
    sequence: int
    failure_entries: int
    size_bytes: int
    last_execution_id: str


@dataclass(frozen=True, slots=True)
class ModelRequestView:
    request_id: str
    session_id: str
    start_events: int
    end_events: int
    status: ModelRequestStatus | None
    partial_text: str
    incomplete: bool


@dataclass(frozen=True, slots=True)
class SessionView:
    session_id: str
    turn_status: TurnStatus
    permission_version: int
    mode: Mode
    interactive: bool


@dataclass(frozen=True, slots=True)
class Observation:
    """A normalized snapshot of an implementation's *durable* state, read from its store."""

    sessions: tuple[SessionView, ...] = ()
    operations: tuple[OperationView, ...] = ()
    approval_waits: tuple[ApprovalWaitView, ...] = ()
    denial_counters: tuple[DenialCounterView, ...] = ()
    failure_table: tuple[FailureEntryView, ...] = ()
    checkpoints: tuple[CheckpointView, ...] = ()
    projections: tuple[Projection, ...] = ()
    model_requests: tuple[ModelRequestView, ...] = ()
    failure_events_logged: int = 0
    """Failure events in the durable event log (the full history behind the table, L1.1)."""
    result_records: int = 0
    """Authoritative result records in the store (one per executed identity, L4.10)."""

    def operation(self, tool_call_id: str, session_id: str | None = None) -> OperationView | None:
        for op in self.operations:
            if op.identity.tool_call_id == tool_call_id and session_id in (None, op.session_id):
                return op
        return None


@dataclass(frozen=True, slots=True)
class ImplementationInfo:
    name: str
    version: str
    features: tuple[Feature, ...] = ()
    checkpoint_fixtures: tuple[str, ...] = ()
    """Names of old-format checkpoint fixtures (paths relative to the implementation's
    package, by convention). The harness never opens them itself: it asks the implementation
    for each one's content (:class:`CheckpointFixtureSource`, or the protocol method
    ``checkpoint_fixture``); only in process without that method does it read one below the
    implementation's own package folder, confined to it."""


CHECKPOINT_FIXTURE_BYTES_MAX = 4 * 1024 * 1024
"""The largest checkpoint fixture the harness accepts from an implementation."""


@dataclass(frozen=True, slots=True)
class CheckpointFixture:
    """A declared checkpoint fixture as the implementation hands it over. The harness never
    opens a path an implementation names: it asks for the content (optional method
    ``Implementation.checkpoint_fixture(name) -> CheckpointFixture``, or ``bytes``)."""

    content: bytes
    expected_messages: tuple[dict[str, Any], ...] | None = None
    """The messages a session continued from it must carry (the old ``.expect.json``
    sidecar), for a fixture in no layout the harness reads itself; None when not given."""


@dataclass(frozen=True, slots=True)
class TurnResult:
    session_id: str
    status: TurnStatus
    final_text: str = ""


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    results_completed: tuple[str, ...] = ()
    """Execution ids whose saved result was folded into a new checkpoint (no tool call)."""
    projections_replayed: tuple[str, ...] = ()
    reconciliation_required: tuple[str, ...] = ()
    turns_resumed: tuple[str, ...] = ()


# --------------------------------------------------------------------------- ports


@runtime_checkable
class ModelStream(Protocol):
    def next_chunk(self) -> ModelChunk:
        """Next chunk; ``ChunkKind.EOF`` when the stream closes. May raise
        :class:`ModelTransportError` or :class:`ModelStreamCancelled`."""


@runtime_checkable
class World(Protocol):
    """Every effect an implementation has goes through these ports."""

    def open_model_stream(self, request: ModelRequest) -> ModelStream: ...

    def review(self, request: ClassifierRequest) -> ClassifierVerdict: ...

    def execute_tool(self, invocation: ToolInvocation) -> ToolResult: ...

    def prompt_approval(self, prompt: ApprovalPrompt) -> None: ...

    def publish(self, projection: Projection) -> None: ...

    def now(self) -> float: ...

    def emit(self, event: LifecycleEvent) -> None: ...

    def failpoint(self, name: Failpoint, context: dict[str, Any]) -> None: ...


@runtime_checkable
class Runtime(Protocol):
    """One running instance of an implementation over one data dir."""

    def open_session(self, config: SessionConfig) -> None: ...

    def run_turn(self, session_id: str, user_text: str) -> TurnResult: ...

    def answer_approval(self, wait_id: str, approve: bool) -> TurnResult: ...

    def update_rules(
        self, session_id: str, rules: tuple[Rule, ...], permission_version: int
    ) -> None: ...

    def cancel(self, session_id: str) -> None: ...

    def recover(self) -> RecoveryReport: ...

    def load_checkpoint(self, session_id: str, data: bytes) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class Implementation(Protocol):
    """How the harness starts, restarts and inspects an implementation."""

    info: ImplementationInfo

    def open(self, data_dir: str, world: World) -> Runtime: ...

    def inspect(self, data_dir: str) -> Observation:
        """Read the durable store alone (fresh connection, no running instance needed)."""


@runtime_checkable
class CheckpointFixtureSource(Protocol):
    """Optional on an :class:`Implementation`: the content of one declared checkpoint
    fixture (``name`` is an entry of ``info.checkpoint_fixtures``), at most
    :data:`CHECKPOINT_FIXTURE_BYTES_MAX` bytes. Without it the harness reads the fixture
    from below the implementation's own package, confined to it."""

    def checkpoint_fixture(self, name: str) -> CheckpointFixture | bytes: ...


# --------------------------------------------------------------------------- JSON round trip


_PLAIN = (str, int, float, bool, type(None))


def to_json(value: Any) -> Any:
    """Convert a contract value (dataclass, enum, tuple, dict...) to plain JSON data."""
    encode = _ENCODERS.get(type(value))
    if encode is not None:
        return encode(value)
    return _encode_new_type(value)


# Every value of one exact type is encoded the same way, so the way is found once per type
# and kept (the harness and the reference encode millions of values: a chain of isinstance
# tests per value was the cost). Exact types: a StrEnum member is not a plain str here.
_ENCODERS: dict[type, Any] = {}


def _as_is(value: Any) -> Any:
    return value


def _encode_dict(value: Any) -> dict[str, Any]:
    return {str(key): to_json(item) for key, item in value.items()}


def _encode_sequence(value: Any) -> list[Any]:
    return [to_json(item) for item in value]


def _encode_enum(value: enum.Enum) -> Any:
    return value.value


def _dataclass_encoder(names: tuple[str, ...]) -> Any:
    plain = _ENCODERS  # a field's value of a plain type is returned as is, without a call

    def encode(value: Any) -> dict[str, Any]:
        out = {}
        for name in names:
            item = getattr(value, name)
            encoder = plain.get(type(item))
            out[name] = item if encoder is _as_is else to_json(item)
        return out

    return encode


for _kind in _PLAIN:
    _ENCODERS[_kind] = _as_is
_ENCODERS[dict] = _encode_dict
_ENCODERS[tuple] = _ENCODERS[list] = _encode_sequence


def _encode_new_type(value: Any) -> Any:
    """The first value of its exact type: find its encoding, keep it, apply it."""
    if isinstance(value, enum.Enum):
        encode = _encode_enum
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        encode = _dataclass_encoder(tuple(f.name for f in dataclasses.fields(value)))
    elif isinstance(value, dict):
        encode = _encode_dict
    elif isinstance(value, (list, tuple)):
        encode = _encode_sequence
    elif isinstance(value, (str, int, float, bool)):
        encode = _as_is
    elif (isinstance(value, collections.abc.Sequence)
          and not isinstance(value, (bytes, bytearray, memoryview))):
        encode = _encode_sequence  # a read-only view, e.g. of a conversation log
    else:
        raise ContractError(f"cannot encode {type(value).__name__} as contract JSON")
    _ENCODERS[type(value)] = encode
    return encode(value)


_HINTS_CACHE: dict[type, dict[str, Any]] = {}


def type_hints(cls: type) -> dict[str, Any]:
    """``typing.get_type_hints(cls)``, computed once per class and shared by every decoder
    of contract values (:func:`from_json` and the wire's own decoders)."""
    hints = _HINTS_CACHE.get(cls)
    if hints is None:
        hints = typing.get_type_hints(cls)
        _HINTS_CACHE[cls] = hints
    return hints


def from_json(cls: Any, data: Any, where: str = "$") -> Any:
    """Rebuild a value of type ``cls`` from :func:`to_json` output; errors name the path."""
    origin = typing.get_origin(cls)
    if cls is Any:
        return data
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(cls)
        if data is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return from_json(option, data, where)
            except ContractError as exc:
                errors.append(str(exc))
        raise ContractError(f"{where}: no variant of {cls} accepts {data!r}: {errors}")
    if origin is tuple or origin is collections.abc.Sequence:
        if not isinstance(data, list):
            raise ContractError(f"{where}: expected a list, got {type(data).__name__}")
        args = typing.get_args(cls)
        item_type = args[0] if args else Any
        return tuple(from_json(item_type, item, f"{where}[{i}]") for i, item in enumerate(data))
    if origin is dict or cls is dict:
        if not isinstance(data, dict):
            raise ContractError(f"{where}: expected an object, got {type(data).__name__}")
        args = typing.get_args(cls)
        value_type = args[1] if args else Any
        return {key: from_json(value_type, item, f"{where}.{key}") for key, item in data.items()}
    if isinstance(cls, type) and issubclass(cls, enum.Enum):
        try:
            return cls(data)
        except ValueError:
            valid = ", ".join(member.value for member in cls)
            raise ContractError(f"{where}: {data!r} is not a {cls.__name__} ({valid})") from None
    if isinstance(cls, type) and dataclasses.is_dataclass(cls):
        if not isinstance(data, dict):
            raise ContractError(f"{where}: expected an object for {cls.__name__}")
        hints = type_hints(cls)
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise ContractError(f"{where}: unknown field(s) {sorted(unknown)} for {cls.__name__}")
        kwargs = {
            name: from_json(hints[name], data[name], f"{where}.{name}")
            for name in names
            if name in data
        }
        try:
            return cls(**kwargs)
        except TypeError as exc:
            raise ContractError(f"{where}: {cls.__name__}: {exc}") from None
    if cls is float and isinstance(data, int) and not isinstance(data, bool):
        return float(data)
    if cls in (str, int, float, bool):
        if not isinstance(data, cls) or (cls is int and isinstance(data, bool)):
            raise ContractError(f"{where}: expected {cls.__name__}, got {data!r}")
        return data
    raise ContractError(f"{where}: unsupported type {cls!r}")


# --------------------------------------------------------------------------- projection rule


def expected_projection(
    permission: Permission,
    outcome: Outcome,
    decided_by: DecisionSource,
    failure_kind: FailureKind | None,
    reconciliation_required: bool,
    wait_pending: bool,
) -> tuple[str, tuple[RecoveryAction, ...]]:
    """The UI status and the only valid recovery actions for an authoritative record (L5.4).

    Shared by implementations (to project) and the harness (to check what was projected).
    No retry is ever offered for an unknown or a denied operation.
    """
    if reconciliation_required or outcome is Outcome.UNKNOWN:
        return "reconciliation_required", (RecoveryAction.RECONCILE,)
    if outcome is Outcome.SUCCEEDED:
        return "succeeded", ()
    if outcome is Outcome.FAILED:
        return "failed", (RecoveryAction.EDIT_ARGS,)
    # not started
    if wait_pending:
        return "awaiting_approval", (RecoveryAction.APPROVE, RecoveryAction.REJECT)
    if decided_by is DecisionSource.CANCELLATION:
        return "cancelled", ()
    if permission is Permission.DENY:
        if decided_by is DecisionSource.HARD_CONSTRAINT:
            return "denied", ()
        return "denied", (RecoveryAction.CHANGE_RULES,)
    if failure_kind is FailureKind.PARAM_ERROR:
        return "invalid_arguments", (RecoveryAction.EDIT_ARGS,)
    if failure_kind is FailureKind.TRANSIENT:
        return "not_executed", (RecoveryAction.RETRY,)
    if failure_kind is not None:
        return "not_executed", ()
    return "pending", ()
