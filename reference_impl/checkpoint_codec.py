"""Versioned checkpoint format: one writer (current), one reader per version ever written.

A checkpoint is the session's continuation state: the conversation the next model request
is built from, the recent-failure table (at most ``FAILURE_TABLE_CAPACITY`` = 16 entries), the
last execution folded into it, and its sequence number.

Guarantees:

* :func:`encode` writes only the current format, version 3, as canonical JSON bytes;
  :func:`decode` reads versions 1, 2 and 3 and returns the same :class:`Continuation`
  value; ``decode(encode(c)) == c`` for every continuation;
* each reader is independent of the writer: it knows only the layout that version had,
  so the writer can change without breaking old files (L1.6);
* readers never infer an outcome from message text: an old message without a recorded
  host status keeps ``outcome=None`` (L4.8);
* anything else is a :class:`CheckpointFormatError` that says what is wrong and where.

The store keeps most checkpoints as a *delta* of the one before (:class:`Delta`, written by
:func:`encode_delta`, its own format ``reference_impl.checkpoint_delta`` that :func:`decode`
refuses: a delta is never a checkpoint one can load); :mod:`reference_impl.continuation`
rebuilds the full checkpoint from the snapshot it extends.

Layouts::

    v1 {"v": 1, "session": str, "history": [[role, text], ...]}
    v2 {"version": 2, "session": str, "seq": int, "last_exec": str,
        "turns": [{"role", "text", "calls": [{"id", "name", "arguments"}],
                   "call_id", "status", "error", "partial"}],
        "recent_failures": [{"key", "tool", "kind", "count", "exec"}]}
    v3 {"format": "reference_impl.checkpoint", "format_version": 3, "session_id": str,
        "sequence": int, "last_execution_id": str, "messages": [Message JSON],
        "failure_table": [{"dedup_key", "tool", "failure_kind", "count",
                           "last_execution_id"}]}
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from harness.contract import (
    ContractError,
    FailureKind,
    Message,
    Outcome,
    ToolCall,
    canonical_json,
    from_json,
    to_json,
)
from reference_impl.errors import CheckpointFormatError
from reference_impl.failure_policy import FailureEntry

CURRENT_FORMAT_VERSION = 3
SUPPORTED_FORMAT_VERSIONS = (1, 2, 3)
FORMAT_NAME = "reference_impl.checkpoint"


@dataclass(frozen=True, slots=True)
class Continuation:
    session_id: str
    sequence: int
    last_execution_id: str
    messages: tuple[Message, ...]
    failure_entries: tuple[FailureEntry, ...]
    format_version: int = CURRENT_FORMAT_VERSION
    """The version it was read from (encoding always writes the current one)."""


def encode(continuation: Continuation, message_texts: list[str] | None = None) -> bytes:
    """``message_texts``: :func:`message_text` of each message, when the caller kept them
    (a snapshot then costs a join, not the conversation's encoding); the same bytes."""
    texts = message_texts if message_texts is not None else [
        message_text(message) for message in continuation.messages]
    return _document(
        format=FORMAT_NAME,
        format_version=CURRENT_FORMAT_VERSION,
        session_id=continuation.session_id,
        sequence=continuation.sequence,
        last_execution_id=continuation.last_execution_id,
        messages=_Encoded("[" + ",".join(texts) + "]"),
        failure_table=[to_json(entry) for entry in continuation.failure_entries],
    )


def message_text(message: Message) -> str:
    """One message as the ``messages`` of a checkpoint or delta carry it."""
    return canonical_json(to_json(message))


class _Encoded(str):
    """A value already in canonical JSON (inserted as is by :func:`_document`)."""


def _document(**fields: Any) -> bytes:
    """``canonical_json(fields)`` as UTF-8, with each :class:`_Encoded` value inserted as
    the text it is: the encoder writes an object as its sorted keys, each ``"key":value``,
    joined by commas, and nothing else; a string as ``encode_basestring`` (the encoder's
    own, UTF-8 kept) and an int as its ``repr``, as it does (``test_ref_checkpoint_codec``
    compares the two)."""
    parts = []
    for key in sorted(fields):
        value = fields[key]
        kind = type(value)
        if kind is _Encoded:
            text = value
        elif kind is str:
            text = _encode_string(value)
        elif kind is int:
            text = int.__repr__(value)
        elif kind is list and not value:
            text = "[]"
        else:
            text = canonical_json(value)
        parts.append(_encode_string(key) + ":" + text)
    return ("{" + ",".join(parts) + "}").encode("utf-8")


_encode_string = json.encoder.encode_basestring
"""The canonical encoder's string encoding (``ensure_ascii=False``)."""


def decode(data: bytes) -> Continuation:
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointFormatError(f"checkpoint is not UTF-8 JSON: {exc}") from None
    if not isinstance(document, dict):
        raise CheckpointFormatError("checkpoint: expected a JSON object at the top level")
    version = _format_version(document)
    reader = _READERS[version]
    try:
        return reader(document)
    except CheckpointFormatError as exc:
        raise CheckpointFormatError(f"checkpoint v{version}: {exc}") from None
    except (ContractError, AttributeError, KeyError, TypeError, ValueError) as exc:
        raise CheckpointFormatError(f"checkpoint v{version}: {type(exc).__name__}: {exc}") from None


def format_version_of(data: bytes) -> int:
    return decode(data).format_version


def _format_version(document: dict[str, Any]) -> int:
    if document.get("format") == FORMAT_NAME:
        version = document.get("format_version")
    elif "version" in document:
        version = document["version"]
    elif "v" in document:
        version = document["v"]
    else:
        raise CheckpointFormatError(
            "checkpoint: no format version (expected 'format_version', 'version' or 'v')"
        )
    if version not in SUPPORTED_FORMAT_VERSIONS:
        raise CheckpointFormatError(
            f"checkpoint format version {version!r} is not supported "
            f"(supported: {', '.join(map(str, SUPPORTED_FORMAT_VERSIONS))})"
        )
    return version


def _read_v1(document: dict[str, Any]) -> Continuation:
    messages = []
    for index, pair in enumerate(_list(document, "history")):
        well_formed = isinstance(pair, list) and len(pair) == 2
        if not (well_formed and all(isinstance(part, str) for part in pair)):
            raise CheckpointFormatError(f"history[{index}] must be [role, text]")
        role, text = pair
        messages.append(Message(role=_role(role, f"history[{index}]"), content=text))
    return Continuation(
        session_id=_str(document, "session"),
        sequence=0,
        last_execution_id="",
        messages=tuple(messages),
        failure_entries=(),
        format_version=1,
    )


def _read_v2(document: dict[str, Any]) -> Continuation:
    messages = []
    for index, turn in enumerate(_list(document, "turns")):
        where = f"turns[{index}]"
        if not isinstance(turn, dict):
            raise CheckpointFormatError(f"{where} must be an object")
        role = _role(_str(turn, "role"), where)
        calls = tuple(
            ToolCall(_str(call, "id"), _str(call, "name"), dict(call.get("arguments", {})))
            for call in turn.get("calls", [])
        )
        status = turn.get("status")
        error = turn.get("error")
        messages.append(
            Message(
                role=role,
                content=_str(turn, "text"),
                tool_call_id=turn.get("call_id", ""),
                tool_calls=calls,
                # the host status recorded at the time, if any; never guessed from the text
                outcome=Outcome(status) if status else None,
                failure_kind=FailureKind(error) if error else None,
                incomplete=bool(turn.get("partial", False)),
            )
        )
    failures = tuple(
        FailureEntry(
            dedup_key=_str(entry, "key"),
            tool=_str(entry, "tool"),
            failure_kind=FailureKind(_str(entry, "kind")),
            count=int(entry.get("count", 1)),
            last_execution_id=entry.get("exec", ""),
        )
        for entry in _list(document, "recent_failures")
    )
    return Continuation(
        session_id=_str(document, "session"),
        sequence=int(document.get("seq", 0)),
        last_execution_id=document.get("last_exec", ""),
        messages=tuple(messages),
        failure_entries=failures,
        format_version=2,
    )


def _read_v3(document: dict[str, Any]) -> Continuation:
    return Continuation(
        session_id=_str(document, "session_id"),
        sequence=int(document["sequence"]),
        last_execution_id=_str(document, "last_execution_id"),
        messages=from_json(tuple[Message, ...], document["messages"], "$.messages"),
        failure_entries=from_json(
            tuple[FailureEntry, ...], document["failure_table"], "$.failure_table"
        ),
        format_version=3,
    )


_READERS = {1: _read_v1, 2: _read_v2, 3: _read_v3}

DELTA_FORMAT_NAME = "reference_impl.checkpoint_delta"
DELTA_FORMAT_VERSION = 1


@dataclass(frozen=True, slots=True)
class Delta:
    """Checkpoint ``sequence`` as the messages it appends to checkpoint ``sequence - 1``
    (which held ``base_messages`` messages), with its own failure table and last execution."""

    session_id: str
    sequence: int
    base_messages: int
    last_execution_id: str
    messages: tuple[Message, ...]
    failure_entries: tuple[FailureEntry, ...]


def encode_delta(delta: Delta, message_texts: list[str] | None = None) -> bytes:
    """``message_texts``: as for :func:`encode`."""
    texts = message_texts if message_texts is not None else [
        message_text(message) for message in delta.messages]
    return _document(
        format=DELTA_FORMAT_NAME,
        format_version=DELTA_FORMAT_VERSION,
        session_id=delta.session_id,
        sequence=delta.sequence,
        base_messages=delta.base_messages,
        last_execution_id=delta.last_execution_id,
        messages=_Encoded("[" + ",".join(texts) + "]"),
        failure_table=[to_json(entry) for entry in delta.failure_entries],
    )


def decode_delta(data: bytes) -> Delta:
    try:
        document = json.loads(data.decode("utf-8"))
        if not isinstance(document, dict) or document.get("format") != DELTA_FORMAT_NAME:
            raise CheckpointFormatError(f"not a {DELTA_FORMAT_NAME}")
        if document.get("format_version") != DELTA_FORMAT_VERSION:
            raise CheckpointFormatError(
                f"delta format version {document.get('format_version')!r} is not "
                f"{DELTA_FORMAT_VERSION}")
        return Delta(
            session_id=_str(document, "session_id"),
            sequence=int(document["sequence"]),
            base_messages=int(document["base_messages"]),
            last_execution_id=_str(document, "last_execution_id"),
            messages=from_json(tuple[Message, ...], document["messages"], "$.messages"),
            failure_entries=from_json(
                tuple[FailureEntry, ...], document["failure_table"], "$.failure_table"
            ),
        )
    except CheckpointFormatError as exc:
        raise CheckpointFormatError(f"checkpoint delta: {exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError, ContractError, KeyError, TypeError,
            ValueError) as exc:
        raise CheckpointFormatError(f"checkpoint delta: {type(exc).__name__}: {exc}") from None


def _list(document: dict[str, Any], key: str) -> list[Any]:
    value = document.get(key, [])
    if not isinstance(value, list):
        raise CheckpointFormatError(f"{key!r} must be a list")
    return value


def _str(document: dict[str, Any], key: str) -> str:
    value = document.get(key)
    if not isinstance(value, str):
        raise CheckpointFormatError(f"{key!r} must be a string, got {value!r}")
    return value


def _role(role: str, where: str) -> str:
    if role not in ("user", "assistant", "tool"):
        raise CheckpointFormatError(
            f"{where}: role {role!r} is not one of user, assistant, tool"
        )
    return role
