"""fixtures/protocol.schema.json is generated from the method tables and is a valid schema."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from harness.remote import protocol
from harness.remote.schema import build_schema, render

ROOT = Path(__file__).resolve().parents[4]
FILE = ROOT / "fixtures" / "protocol.schema.json"


def test_the_committed_schema_is_the_generated_one():
    assert FILE.read_text(encoding="utf-8") == render(), (
        "fixtures/protocol.schema.json is stale: regenerate it with "
        "`python -m harness.remote.schema > fixtures/protocol.schema.json`")


def test_the_schema_is_valid_and_names_every_method_both_ways():
    schema = build_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    requests = {ref["$ref"].rsplit("/", 1)[1] for ref in schema["$defs"]["Request"]["oneOf"]}
    methods = {*protocol.DRIVER_METHODS, *protocol.PORT_METHODS}
    assert requests == {f"request.{name}" for name in methods}
    assert {f"result.{name}" for name in methods} <= set(schema["$defs"])


def test_the_schema_rejects_what_the_decoder_rejects():
    validator = jsonschema.Draft202012Validator(json.loads(FILE.read_text(encoding="utf-8")))
    bad = [
        {"jsonrpc": "2.0", "id": 1, "method": "run_turn", "params": {"session_id": "s"}},
        {"jsonrpc": "2.0", "id": 1, "method": "cancel", "params": {"session_id": 3}},
        {"jsonrpc": "2.0", "id": 1, "method": "teleport", "params": {}},
        {"jsonrpc": "1.0", "id": 1, "result": None},
        {"jsonrpc": "2.0", "id": 1, "error": {"code": "x", "message": "m"}},
    ]
    for message in bad:
        assert not validator.is_valid(message), message
