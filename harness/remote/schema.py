"""The JSON Schema of the wire protocol, generated from its method tables.

Guarantees: :func:`build_schema` derives the schema of every message of protocol version
:data:`~harness.remote.protocol.PROTOCOL_VERSION` from
:data:`~harness.remote.protocol.DRIVER_METHODS`, :data:`~harness.remote.protocol.PORT_METHODS`
and the contract's dataclasses and enums, so the committed ``fixtures/protocol.schema.json``
cannot drift from the code without a test failing. A message validates against the root;
``$defs["result.<method>"]`` is the schema of that method's ``result`` (a response does not
name its method, so pair it with its request by id).

Regenerate with ``python -m harness.remote.schema > fixtures/protocol.schema.json``.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import json
import sys
import types
import typing
from typing import Any

from harness.remote.protocol import (
    DRIVER_METHODS,
    ERROR_NAMES,
    JSONRPC,
    PORT_METHODS,
    PROTOCOL_VERSION,
    Method,
)

SCHEMA_ID = f"https://lifecycle-harness.invalid/protocol/{PROTOCOL_VERSION}.schema.json"


class _Builder:
    def __init__(self) -> None:
        self.defs: dict[str, Any] = {}

    def ref(self, name: str) -> dict[str, Any]:
        return {"$ref": f"#/$defs/{name}"}

    def of(self, kind: Any) -> dict[str, Any]:
        if kind is None or kind is type(None):
            return {"type": "null"}
        if kind is Any:
            return {}
        if kind is bytes:
            return {"type": "string", "contentEncoding": "base64"}
        simple = {str: "string", bool: "boolean", int: "integer", float: "number"}
        if kind in simple:
            return {"type": simple[kind]}
        origin = typing.get_origin(kind)
        if origin in (typing.Union, types.UnionType):
            options = [self.of(option) for option in typing.get_args(kind)]
            return {"anyOf": options}
        if origin is tuple or origin is collections.abc.Sequence:  # on the wire: a list
            args = typing.get_args(kind)
            return {"type": "array", "items": self.of(args[0] if args else Any)}
        if origin is dict or kind is dict:
            args = typing.get_args(kind)
            return {"type": "object", "additionalProperties": self.of(args[1] if args else Any)}
        if isinstance(kind, type) and issubclass(kind, enum.Enum):
            if kind.__name__ not in self.defs:
                self.defs[kind.__name__] = {"enum": [member.value for member in kind]}
            return self.ref(kind.__name__)
        if isinstance(kind, type) and dataclasses.is_dataclass(kind):
            name = kind.__name__
            if name not in self.defs:
                self.defs[name] = {}  # placeholder: recursive types terminate
                hints = typing.get_type_hints(kind)
                fields = dataclasses.fields(kind)
                required = [f.name for f in fields
                            if f.default is dataclasses.MISSING
                            and f.default_factory is dataclasses.MISSING]
                self.defs[name] = {
                    "type": "object",
                    "properties": {f.name: self.of(hints[f.name]) for f in fields},
                    "required": required,
                    "additionalProperties": False,
                }
            return self.ref(name)
        raise TypeError(f"no JSON Schema for {kind!r}")

    def request(self, method: Method, direction: str) -> dict[str, Any]:
        params = {
            "type": "object",
            "properties": {p.name: self.of(p.type) for p in method.params},
            "required": [p.name for p in method.params],
            "additionalProperties": False,
        }
        schema: dict[str, Any] = {
            "description": f"{direction}: {method.doc}",
            "type": "object",
            "properties": {
                "jsonrpc": {"const": JSONRPC},
                "id": self.ref("Id"),
                "method": {"const": method.name},
                "params": params,
            },
            "required": ["jsonrpc", "id", "method"] + (["params"] if method.params else []),
            "additionalProperties": False,
        }
        return schema


def build_schema() -> dict[str, Any]:
    builder = _Builder()
    requests = []
    results = {}
    for direction, table in (("harness → implementation", DRIVER_METHODS),
                             ("implementation → harness", PORT_METHODS)):
        for method in table.values():
            builder.defs[f"request.{method.name}"] = builder.request(method, direction)
            requests.append(builder.ref(f"request.{method.name}"))
            results[f"result.{method.name}"] = builder.of(method.result)
    builder.defs.update(results)
    builder.defs["Id"] = {"anyOf": [{"type": "integer"}, {"type": "string"}]}
    builder.defs["Request"] = {"oneOf": requests}
    builder.defs["Result"] = {
        "type": "object",
        "properties": {"jsonrpc": {"const": JSONRPC}, "id": builder.ref("Id"), "result": {}},
        "required": ["jsonrpc", "id", "result"],
        "additionalProperties": False,
    }
    builder.defs["Error"] = {
        "type": "object",
        "properties": {
            "jsonrpc": {"const": JSONRPC},
            "id": {"anyOf": [builder.ref("Id"), {"type": "null"}]},
            "error": {
                "type": "object",
                "properties": {
                    "code": {"type": "integer",
                             "description": "; ".join(f"{code}: {name}" for code, name
                                                      in sorted(ERROR_NAMES.items()))},
                    "message": {"type": "string"},
                    "data": {
                        "type": "object",
                        "properties": {"exception": {
                            "type": "string",
                            "description": "with code -32000: the class of the exception the "
                                           "handler raised (a contract class is re-raised as "
                                           "itself)"}},
                    },
                },
                "required": ["code", "message"],
                "additionalProperties": False,
            },
        },
        "required": ["jsonrpc", "id", "error"],
        "additionalProperties": False,
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": f"lifecycle-harness wire protocol, version {PROTOCOL_VERSION}",
        "description": "One newline-delimited JSON-RPC 2.0 message (docs/protocol.md). "
                       "Generated by harness/remote/schema.py: do not edit by hand.",
        "oneOf": [builder.ref("Request"), builder.ref("Result"), builder.ref("Error")],
        "$defs": dict(sorted(builder.defs.items())),
    }


def render() -> str:
    return json.dumps(build_schema(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
