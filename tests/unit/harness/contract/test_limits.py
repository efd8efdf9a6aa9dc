"""Limits: parsed from $LIFECYCLE_HARNESS_LIMITS, named in messages; the JSON depth check of
the wire codec and the events-per-scenario cap of the event log."""

from __future__ import annotations

import json

import pytest

from harness.contract.errors import UsageError
from harness.contract.limits import (
    DEFAULT_LIMITS,
    LIMITS_ENV,
    LimitExceeded,
    Limits,
    current_limits,
    parse_limits,
)
from harness.remote.protocol import BadMessage, json_depth_over, parse_message
from harness.world.log import EventLog


def test_limits_parse_sizes_and_counts():
    limits = parse_limits("line_bytes=1MiB, inspect_bytes=64k,events_per_scenario=50")
    assert limits.line_bytes == 1024 * 1024
    assert limits.inspect_bytes == 64 * 1024
    assert limits.events_per_scenario == 50
    assert limits.json_depth == DEFAULT_LIMITS.json_depth


@pytest.mark.parametrize("text, says", [
    ("line_bytes", "not name=value"),
    ("nope=3", "known: "),
    ("line_bytes=lots", "not a number"),
    ("json_depth=0", "must be positive"),
])
def test_bad_limits_are_usage_errors_naming_the_problem(text, says):
    with pytest.raises(UsageError, match=says):
        parse_limits(text)


def test_current_limits_read_the_environment(monkeypatch):
    monkeypatch.setenv(LIMITS_ENV, "json_depth=7")
    assert current_limits() == Limits(json_depth=7)
    monkeypatch.delenv(LIMITS_ENV)
    assert current_limits() == DEFAULT_LIMITS


def test_a_limit_message_names_the_limit_the_amount_and_the_fix():
    text = str(LimitExceeded("line_bytes", 1024 * 1024, "3.0MiB read so far", "too long"))
    assert "line_bytes=1MiB" in text and "3.0MiB read so far" in text and LIMITS_ENV in text
    assert not issubclass(LimitExceeded, Exception)  # an IUT's `except Exception` cannot eat it


def test_json_depth_is_measured_without_recursion():
    deep = nested = []
    for _ in range(5000):
        nested.append([])
        nested = nested[0]
    assert json_depth_over(deep, 200) > 200
    assert json_depth_over({"a": [{"b": 1}]}, 3) == 0
    assert json_depth_over({"a": [{"b": [1]}]}, 3) == 4


@pytest.mark.parametrize("depth, code", [(300, -32600), (100_000, -32700)])
def test_a_message_nested_too_deep_is_a_bad_message_naming_the_limit(depth, code):
    line = '{"jsonrpc":"2.0","id":1,"method":"now","params":{"a":' + "[" * depth \
        + "]" * depth + "}}"
    with pytest.raises(BadMessage, match="json_depth=200") as raised:
        parse_message(line)
    assert raised.value.code == code
    assert parse_message(json.dumps({"jsonrpc": "2.0", "id": 1, "result": [[1]]})).result == [[1]]


def test_the_event_log_stops_the_implementation_past_its_event_limit():
    log = EventLog(max_events=3)
    for _ in range(3):
        log.append("world", "emit", 0, {}, guarded=True)
    log.append("runner", "observed", 0, {})  # the harness's own events are not counted
    with pytest.raises(LimitExceeded, match="events_per_scenario=3"):
        log.append("world", "emit", 0, {}, guarded=True)
    assert len(log) == 4
