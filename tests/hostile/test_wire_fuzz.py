"""Fuzz the wire decoder: whatever bytes an implementation sends, decoding them ends in a
protocol error the harness reports (exit 1), never in another exception (exit 3).

Three layers are fuzzed: a line of bytes into a message (:func:`parse_message`), a request's
params into a port call's typed arguments (:func:`decode_params`), and a driver call's result
into its contract type (:func:`decode_value`). The default run is a short derandomized
campaign; the long one is marked slow.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.contract import ContractError
from harness.remote.protocol import (
    DRIVER_METHODS,
    PORT_METHODS,
    BadMessage,
    Request,
    Response,
    decode_params,
    decode_value,
    parse_message,
)

SHORT = settings(max_examples=150, derandomize=True, deadline=None, database=None,
                 suppress_health_check=list(HealthCheck))
LONG = settings(max_examples=3000, deadline=None, database=None,
                suppress_health_check=list(HealthCheck))

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2 ** 70), 2 ** 70)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=20,
)
methods = st.sampled_from(sorted({**PORT_METHODS, **DRIVER_METHODS}))


def _message_lines():
    requests = st.builds(
        lambda id_, method, params: {"jsonrpc": "2.0", "id": id_, "method": method,
                                     "params": params},
        st.integers(0, 10) | st.text(max_size=4) | json_values, methods | st.text(max_size=8),
        json_values)
    responses = st.builds(lambda id_, result: {"jsonrpc": "2.0", "id": id_, "result": result},
                          st.integers(0, 10) | json_values, json_values)
    shaped = (requests | responses | json_values).map(lambda d: json.dumps(d).encode())
    deep = st.integers(1, 3000).map(lambda n: ("[" * n + "]" * n).encode())
    return shaped | deep | st.binary(max_size=200)


def _decode_line(line: bytes) -> None:
    try:
        message = parse_message(line)
    except BadMessage:
        return
    assert isinstance(message, (Request, Response))
    if isinstance(message, Request) and message.method in {**PORT_METHODS, **DRIVER_METHODS}:
        method = {**PORT_METHODS, **DRIVER_METHODS}[message.method]
        try:
            decode_params(method, message.params)
        except BadMessage:
            pass
    if isinstance(message, Response) and message.error is None:
        for method in DRIVER_METHODS.values():
            try:
                decode_value(method.result, message.result, "result")
            except ContractError:
                pass


@SHORT
@given(_message_lines())
def test_any_line_decodes_or_is_a_protocol_error(line):
    _decode_line(line)


@SHORT
@given(methods, json_values)
def test_any_params_decode_or_are_invalid_params(name, params):
    method = {**PORT_METHODS, **DRIVER_METHODS}[name]
    if not isinstance(params, dict):
        params = {"value": params}
    try:
        decode_params(method, params)
    except BadMessage:
        pass


@SHORT
@given(methods, json_values)
def test_any_result_decodes_or_is_a_contract_error(name, result):
    method = {**PORT_METHODS, **DRIVER_METHODS}[name]
    try:
        decode_value(method.result, result, "result")
    except ContractError:
        pass


def test_a_line_nested_100000_deep_is_a_protocol_error():
    with pytest.raises(BadMessage, match="json_depth"):
        parse_message(b"[" * 100_000 + b"]" * 100_000)


@pytest.mark.slow
@LONG
@given(_message_lines())
def test_any_line_long_campaign(line):
    _decode_line(line)
