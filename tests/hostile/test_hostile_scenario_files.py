"""Hostile scenario files: mutated bundled scenarios either load or raise ScenarioError.

Property (issue 12): whatever a scenario file holds, loading it ends in a scenario or a
ScenarioError (exit 2) in bounded time, never another exception (exit 3); and a scenario that
loads can be expanded and encoded the way a run does it (placeholders expanded from a seed,
tool-call arguments as canonical JSON, faults rendered), so it never fails later on its own
data. Mutations act on the parsed data (delete, duplicate, rename, retype, wrap, nest) and
on the text (lines deleted, duplicated, swapped; numbers made huge; deep nesting; cuts).

The default run is a short derandomized campaign; ``-m slow`` runs a longer random one.
"""

from __future__ import annotations

import copy
import datetime
import json
import math
import re
import tomllib
from datetime import timedelta
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.campaigns.chaos import ChaosError, dumps_toml
from harness.contract import canonical_json
from harness.contract.errors import ScenarioError
from harness.faults.plan import FaultPlan, render
from harness.contract.scenario_limits import LIMITS
from harness.scenarios.loader import DEFAULT_SCENARIO_DIR, TOP_KEYS, Scenario, loads_all, parse_all
from harness.world.templates import Templates

BUNDLED = tuple(sorted(DEFAULT_SCENARIO_DIR.rglob("*.toml")))
KEYS = (*TOP_KEYS, "matrix", "matrix_exclude", "id", "tool", "args", "hits", "repeat", "times",
        "seconds", "failpoint", "action", "rules", "effect", "session", "do", "text", "wait",
        "review", "outcome", "delay_s", "thresholds", "label", "é", "\u202e", "")


@lru_cache(maxsize=None)
def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


@lru_cache(maxsize=None)
def _data(path: Path) -> dict[str, Any]:
    return tomllib.loads(_text(path))


def _deep(depth: int, leaf: Any, kind: str) -> Any:
    value = leaf
    for _ in range(depth):
        value = [value] if kind == "array" else {"a": value}
    return value


HUGE_INTS = st.sampled_from([0, -1, 2**31, 2**53, 2**63 - 1, 2**63, -(2**63), 10**30, 10**5000])
ODD_STRINGS = st.one_of(
    st.text(max_size=40),
    st.sampled_from([
        "{{faker:enum}}", "{{faker:xml}}", "{{faker:image}}", "{{faker:date_time}}",
        "{{faker:email}}", "{{sha256:/nope}}", "{{m:nope}}", "{{ m : x }}", "{{", "}}{{",
        "1000000000*crash", "2*off->crash", "9" * 5000, "1," * 2000 + "1", "3+", "0", "-1",
        "\x00", "\ud800", "\u202e\u0301", "𝕏" * 50, "x" * 300_000, "{{faker:word}}" * 1_200,
        "allow", "deny", "turn", "answer", "crash", "hold", "write", "s1", "c1", "*",
    ]),
)
SCALARS = st.one_of(
    HUGE_INTS, st.integers(), st.floats(), st.booleans(), ODD_STRINGS,
    st.sampled_from([datetime.date(1979, 5, 27), datetime.time(7, 32), [], {}]),
)


@st.composite
def hostile_values(draw: st.DrawFn) -> Any:
    choice = draw(st.integers(0, 4))
    if choice == 0:
        return _deep(draw(st.sampled_from([8, 31, 33, 200])), draw(SCALARS),
                     draw(st.sampled_from(["array", "table"])))
    if choice == 1:
        return [draw(SCALARS)] * draw(st.sampled_from([2, 999, 1_001, 20_000]))
    if choice == 2:
        return {f"k{i}": i for i in range(draw(st.sampled_from([3, 1_001])))}
    return draw(SCALARS)


HOT_KEYS = frozenset({"repeat", "hits", "times", "seconds", "delay_s", "review", "text",
                      "content", "permission_version", "auto_retries_max", "input_chars_max",
                      "classifier_timeout_s", "matrix", "args"})


def _extreme(value: Any) -> st.SearchStrategy[Any]:
    if isinstance(value, bool):
        return st.booleans()
    if isinstance(value, int):
        return HUGE_INTS
    if isinstance(value, float):
        return st.sampled_from([math.nan, math.inf, -math.inf, 1e308, 5e-324, -0.0])
    if isinstance(value, str):
        return ODD_STRINGS
    if isinstance(value, dict):
        return hostile_values().map(lambda extra: {**value, "hostile": extra})
    if isinstance(value, list):
        return hostile_values().map(lambda extra: [*value, extra])
    return hostile_values()


def _slots(data: Any) -> list[tuple[Any, Any]]:
    """Every (container, key-or-index) of ``data``, walked without recursion."""
    slots, stack = [], [data]
    while stack:
        item = stack.pop()
        pairs = item.items() if isinstance(item, dict) else enumerate(item)
        for key, value in pairs:
            slots.append((item, key))
            if isinstance(value, (dict, list)):
                stack.append(value)
    return slots


@st.composite
def mutated_data(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    path = draw(st.sampled_from(BUNDLED))
    data = copy.deepcopy(_data(path))
    for _ in range(draw(st.integers(1, 4))):
        slots = _slots(data)
        if not slots:
            break
        hot = [slot for slot in slots if slot[1] in HOT_KEYS]
        if hot and draw(st.booleans()):
            # Where the dangerous values live: counts, durations, hits, arguments, texts.
            container, key = hot[draw(st.integers(0, len(hot) - 1))]
            operation = "extreme"
        else:
            container, key = slots[draw(st.integers(0, len(slots) - 1))]
            operation = draw(st.sampled_from(["delete", "duplicate", "rename", "retype", "wrap",
                                              "copy_elsewhere", "extreme"]))
        if operation == "extreme":
            # Same type, extreme value: gets past the type checks to the limits behind them.
            container[key] = draw(_extreme(container[key]))
        elif operation == "delete":
            del container[key]
        elif operation == "duplicate":
            if isinstance(container, list):
                container.insert(key, copy.deepcopy(container[key]))
            else:
                container[draw(st.sampled_from(KEYS))] = copy.deepcopy(container[key])
        elif operation == "rename" and isinstance(container, dict):
            container[draw(st.sampled_from(KEYS))] = container.pop(key)
        elif operation == "wrap":
            container[key] = draw(st.sampled_from([[container[key]], {"a": container[key]}]))
        elif operation == "copy_elsewhere":
            other, other_key = slots[draw(st.integers(0, len(slots) - 1))]
            if other is not container[key]:
                other[other_key] = copy.deepcopy(container[key])
        else:
            container[key] = draw(hostile_values())
    return path.name, data


_NUMBER = re.compile(r"(?<![\w.\"'])\d+(?![\w.\"'])")


@st.composite
def mutated_text(draw: st.DrawFn) -> tuple[str, str]:
    path = draw(st.sampled_from(BUNDLED))
    lines = _text(path).splitlines()
    for _ in range(draw(st.integers(1, 3))):
        if not lines:
            break
        i = draw(st.integers(0, len(lines) - 1))
        operation = draw(st.sampled_from(["delete", "duplicate", "swap", "number", "nest",
                                          "nan", "cut", "unicode"]))
        if operation == "delete":
            del lines[i]
        elif operation == "duplicate":
            lines.insert(i, lines[i])
        elif operation == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif operation == "number":
            huge = draw(st.sampled_from(["1000000000", "9223372036854775808", "9" * 4_400,
                                         "0", "-5", "1e400", "0x7fffffffffffffff"]))
            lines[i] = _NUMBER.sub(huge, lines[i], count=1)
        elif operation == "nest":
            depth = draw(st.sampled_from([30, 40, 340, 2_000]))
            opener, closer = draw(st.sampled_from([("[", "]"), ("{a=", "}")]))
            lines.insert(i, f"deep = {opener * depth}1{closer * depth}")
        elif operation == "nan":
            lines[i] = re.sub(r"=\s*\S.*$", f"= {draw(st.sampled_from(['nan', 'inf', '-inf']))}",
                              lines[i], count=1)
        elif operation == "cut":
            lines[i] = lines[i][: draw(st.integers(0, len(lines[i])))]
        else:
            lines[i] = lines[i] + draw(st.text(max_size=10))
    return path.name, "\n".join(lines)


def _runs_cleanly(scenarios: tuple[Scenario, ...]) -> None:
    """What a run does with a loaded scenario's data must not fail on that data."""
    for scenario in scenarios:
        templates = Templates(7)
        files = {templates.expand(p): templates.expand(c) for p, c in sorted(scenario.files.items())}
        templates.set_files(files)
        for response in scenario.model:
            templates.expand(response.text)
            for call in response.tool_calls:
                encoded = canonical_json({"tool": call.tool, "args": templates.expand(call.args)})
                # JSON has no nan/inf: a strict reader must accept what the harness sends.
                json.loads(encoded, parse_constant=_no_constant)
        for step in scenario.steps:
            templates.expand(step.text)
        render(FaultPlan(scenario.faults))
        canonical_json([fault.spec().params for fault in scenario.faults])
        assert sum(r.repeat for r in scenario.model) <= LIMITS.model_responses_max


def _no_constant(name: str) -> Any:
    raise AssertionError(f"the harness encoded {name}, which is not JSON")


def _text_size(data: Any) -> int:
    """About how many characters ``data`` takes written out (strings and items)."""
    size, stack = 0, [data]
    while stack:
        item = stack.pop()
        size += len(item) + 2 if isinstance(item, str) else 4
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        if size > 8 * LIMITS.file_bytes_max:
            break
    return size


def _load_data(name: str, data: dict[str, Any]) -> None:
    try:
        loaded = parse_all(data, name)
    except ScenarioError as exc:
        assert "\n" not in str(exc) and len(str(exc)) <= 1_000 and str(exc).startswith(name), \
            str(exc)
    else:
        _runs_cleanly(loaded)
    if _text_size(data) > 4 * LIMITS.file_bytes_max:
        return  # shared references (one long string 20,000 times) would make gigabytes of text
    try:
        text = dumps_toml(data)
    except (ChaosError, RecursionError, ValueError):
        return  # not writable as TOML (a date, a huge integer, a very deep value)
    _load_text(name, text)


def _load_text(name: str, text: str) -> None:
    try:
        loaded = loads_all(text, name)
    except ScenarioError as exc:
        assert "\n" not in str(exc) and len(str(exc)) <= 1_000 and str(exc).startswith(name), \
            str(exc)
    else:
        _runs_cleanly(loaded)


COMMON = dict(deadline=timedelta(seconds=20), suppress_health_check=list(HealthCheck),
              database=None)


@settings(max_examples=120, derandomize=True, **COMMON)
@given(mutated_data())
def test_mutated_scenario_data_loads_or_is_a_scenario_error(case):
    _load_data(*case)


@settings(max_examples=120, derandomize=True, **COMMON)
@given(mutated_text())
def test_mutated_scenario_text_loads_or_is_a_scenario_error(case):
    _load_text(*case)


@pytest.mark.slow
@settings(max_examples=1_500, **COMMON)
@given(mutated_data())
def test_mutated_scenario_data_long_campaign(case):
    _load_data(*case)


@pytest.mark.slow
@settings(max_examples=1_500, **COMMON)
@given(mutated_text())
def test_mutated_scenario_text_long_campaign(case):
    _load_text(*case)


def test_every_bundled_scenario_loads_within_the_limits():
    """The limits leave the suite's own files room: none is near a maximum."""
    for path in BUNDLED:
        _runs_cleanly(loads_all(_text(path), str(path)))
