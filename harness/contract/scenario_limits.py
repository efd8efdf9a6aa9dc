"""The documented maxima of a scenario file, and the structural checks that enforce them.

A scenario file is input from anyone: a careless author or a fuzzer. Whatever it holds, loading
it must end with a scenario or a :class:`~harness.contract.errors.ScenarioError` (exit 2) in bounded
time and memory, and a loaded scenario must run without the harness failing on its own data.

Guarantees:

* :data:`LIMITS` is the one place the maxima are defined (``docs/scenarios.md``, "Limits",
  documents them); every check below and in the loader, the fault-hit parser and the template
  expander reads them from here;
* :func:`check_text` bounds the raw text before the TOML parser sees it: its size, and how
  deeply arrays and inline tables nest (the parser recurses once per level, so a file nested a
  few hundred levels deep would otherwise end in a RecursionError); it scans with one regular
  expression and never recurses;
* :func:`check_data` walks parsed data without recursion and rejects, naming the key path,
  the limit and the value: nesting deeper than ``nesting_depth_max``, more than
  ``values_max`` values, long strings, arrays and tables, integers outside the range every
  JSON reader keeps exactly, ``nan``/``inf`` (JSON has neither, and scenario values are
  recorded and sent as JSON), TOML dates and times (no JSON form), lone surrogates (no
  UTF-8 form) and more placeholders than ``placeholders_max``;
* every error message is one line: ``<file>: <key path>: <problem> (limit ...)``, and
  :func:`one_line` keeps any loader message short whatever value it quotes.
"""

from __future__ import annotations

import datetime
import math
import re
from dataclasses import dataclass
from typing import Any

from harness.contract.errors import ScenarioError


@dataclass(frozen=True, slots=True)
class ScenarioLimits:
    """Maxima of one scenario file (for a template: of each variant, and of all together)."""

    file_bytes_max: int = 1_048_576
    """The file's size in bytes (the bundled files are below 32 KiB)."""
    nesting_depth_max: int = 32
    """Tables and arrays enclosing a value, the document itself counting 1."""
    values_max: int = 100_000
    """Values (tables, arrays, scalars) in one file or one template variant."""
    string_chars_max: int = 200_000
    """Characters of one string or key (an oversize classifier request needs > 20,000)."""
    array_items_max: int = 1_000
    table_keys_max: int = 1_000
    integer_abs_max: int = 2**53 - 1
    """Any integer: the range an IEEE double, and so every JSON reader, keeps exactly."""
    placeholders_max: int = 1_000
    """``{{...}}`` placeholders in one file (each Faker one costs time at every run)."""
    count_max: int = 10_000
    """``repeat``, ``times``, a hit number or chain count, a classifier ``review`` number,
    a count threshold (``*_max``, ``*_limit`` of ``thresholds``)."""
    model_responses_max: int = 10_000
    """Scripted model responses of a scenario, ``repeat`` included."""
    steps_max: int = 1_000
    rules_max: int = 1_000
    """Rules of a scenario together (sessions' rules and hard constraints, ``update_rules``
    steps, ``change_rules`` faults): each is matched against every declared tool."""
    seconds_max: float = 604_800.0
    """Any duration in virtual seconds (a week): ``seconds``, ``delay_s``, ``*_s`` thresholds."""
    expanded_values_max: int = 1_000_000
    """Values of all the variants of one template together."""
    expanded_chars_max: int = 50_000_000
    """Characters of the strings of all the variants of one template together."""


LIMITS = ScenarioLimits()

_TOKENS = re.compile(
    # Unrolled loops ("normal* (special normal*)*"): linear, no backtracking on long strings.
    r'"""[^"\\]*(?:(?:\\.|"(?!""))[^"\\]*)*"""'   # multi-line basic string
    r"|'''.*?'''"                                     # multi-line literal string
    r'|"[^"\\\n]*(?:\\.[^"\\\n]*)*"'                # basic string
    r"|'[^'\n]*'"                    # literal string
    r"|#[^\n]*"                      # comment
    r"|[\[\]{}]",                    # what nests
    re.DOTALL,
)


_SURROGATE = re.compile("[\ud800-\udfff]")


def check_text(text: str, file: str, limits: ScenarioLimits = LIMITS) -> None:
    """Reject text too large, or nested too deeply for the TOML parser to read safely.

    Brackets inside strings and comments do not count. A table header ``[[name]]`` counts
    2 while it is open, which never exceeds the depth of the values it declares."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > limits.file_bytes_max:
        raise ScenarioError(f"{file}: the file is {size} bytes; at most "
                            f"{limits.file_bytes_max} (limit file_bytes_max)")
    depth = 0
    for token in _TOKENS.finditer(text):
        char = token.group(0)
        if char in "[{":
            depth += 1
            # +1: the document itself is level 1.
            if depth + 1 > limits.nesting_depth_max:
                line = text.count("\n", 0, token.start()) + 1
                raise ScenarioError(
                    f"{file}: line {line}: arrays and tables nested more than "
                    f"{limits.nesting_depth_max} levels deep (limit nesting_depth_max)")
        elif char in "]}":
            depth = max(0, depth - 1)


def _at(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def short_repr(value: Any) -> str:
    """``repr(value)`` cut to one short line for an error message."""
    if isinstance(value, int) and value.bit_length() > 64:
        # repr() refuses integers beyond 4,300 digits, and nobody reads 40 of them.
        return f"an integer of {value.bit_length() * 30103 // 100000 + 1} digits"
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}... ({len(text)} characters)"


def check_data(data: Any, file: str, limits: ScenarioLimits = LIMITS) -> int:
    """Reject parsed scenario data beyond :data:`LIMITS` or not representable as JSON;
    returns how many values it holds. Iterative: any depth is safe to walk."""
    def error(path: str, problem: str) -> ScenarioError:
        return ScenarioError(f"{file}: {path or '(document)'}: {problem}")

    count = 0
    placeholders = 0
    # depth: the tables and arrays enclosing a value, the document included (it has 0).
    stack: list[tuple[Any, int, str]] = [(data, 0, "")]
    while stack:
        value, depth, path = stack.pop()
        count += 1
        if count > limits.values_max:
            raise error(path, f"more than {limits.values_max} values in the file "
                              "(limit values_max)")
        if depth > limits.nesting_depth_max:
            raise error(path, f"nested more than {limits.nesting_depth_max} levels deep "
                              "(limit nesting_depth_max)")
        if isinstance(value, dict):
            if len(value) > limits.table_keys_max:
                raise error(path, f"a table of {len(value)} keys; at most "
                                  f"{limits.table_keys_max} (limit table_keys_max)")
            for key, item in value.items():
                key = str(key)
                where = _at(path, key if len(key) <= 60 else key[:40] + "...")
                if len(key) > limits.string_chars_max:
                    raise error(where, f"a key of {len(key)} characters; at most "
                                       f"{limits.string_chars_max} (limit string_chars_max)")
                placeholders += key.count("{{")
                stack.append((item, depth + 1, where))
        elif isinstance(value, list):
            if len(value) > limits.array_items_max:
                raise error(path, f"an array of {len(value)} items; at most "
                                  f"{limits.array_items_max} (limit array_items_max)")
            stack.extend((item, depth + 1, f"{path}[{i}]") for i, item in enumerate(value))
        elif isinstance(value, str):
            if len(value) > limits.string_chars_max:
                raise error(path, f"a string of {len(value)} characters; at most "
                                  f"{limits.string_chars_max} (limit string_chars_max)")
            placeholders += value.count("{{")
            if _SURROGATE.search(value):
                raise error(path, "a lone surrogate (U+D800..U+DFFF) has no UTF-8 form")
        elif isinstance(value, bool):
            pass
        elif isinstance(value, int):
            if abs(value) > limits.integer_abs_max:
                raise error(path, f"the integer {short_repr(value)} is outside "
                                  f"±{limits.integer_abs_max} (limit integer_abs_max: larger "
                                  "integers do not survive JSON)")
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise error(path, f"{value!r} is not allowed: scenario values are recorded "
                                  "and sent as JSON, which has no nan or infinity")
        elif isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
            raise error(path, f"a TOML date/time ({value.isoformat()}) has no JSON form; "
                              "write it as a string")
        else:
            raise error(path, f"a {type(value).__name__} is not a scenario value")
        if placeholders > limits.placeholders_max:
            raise error(path, f"more than {limits.placeholders_max} {{{{...}}}} placeholders "
                              "in the file (limit placeholders_max)")
    return count


MESSAGE_CHARS_MAX = 1_000


def one_line(message: str) -> str:
    """An error message as one line of at most MESSAGE_CHARS_MAX characters: a value quoted
    from a hostile file (a 200,000-character string) is elided in the middle, so the start
    (file, key path) and the end (limit, valid choices) stay readable."""
    message = message.replace("\r", "\\r").replace("\n", "\\n")
    if len(message) <= MESSAGE_CHARS_MAX:
        return message
    head, tail = MESSAGE_CHARS_MAX * 2 // 3, MESSAGE_CHARS_MAX // 3 - 40
    return f"{message[:head]} ...[{len(message) - head - tail} characters]... {message[-tail:]}"


def at_most(value: int | float, limit: int | float, name: str, file: str, path: str) -> None:
    """Raise unless ``value <= limit`` (the message names the limit ``name``)."""
    if value > limit:
        shown = f"{limit:g}" if isinstance(limit, float) else str(limit)
        raise ScenarioError(f"{file}: {path}: {short_repr(value)} exceeds the maximum of {shown} "
                            f"(limit {name})")
