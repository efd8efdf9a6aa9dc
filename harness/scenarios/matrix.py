"""Scenario templates: one file, a parameter matrix, many scenarios (the neighbours of a case).

A hand-written scenario stages one situation; a defect that shows only in a neighbouring
situation (the same classifier failure one position later in a denial streak, the same answer
after a restart instead of before) slips through. A template names the parameters that vary
and the harness expands every combination at load.

Format (beside the ordinary scenario keys, see ``docs/scenarios.md``)::

    id = "l3-streak"                 # the base id; each variant gets "<base>.<key>"
    [matrix]
    outcome = ["allow", "timeout"]   # a parameter: a non-empty list of values
    position = [1, 2, 3]
    [[matrix_exclude]]               # optional: combinations left out
    outcome = "allow"
    position = 3

and anywhere in the rest of the file ``"{{m:NAME}}"`` or ``"{{m:NAME.FIELD}}"``:

* a string that is exactly one placeholder becomes the value itself, with its TOML type
  (an integer, a table, a list...), so a parameter can stand for any part of a scenario;
* a placeholder inside a longer string, or written ``{{m:NAME|str}}``, is replaced by the
  value's text (scalars only): ``hits = "{{m:position|str}}"``;
* a value used whole may itself hold placeholders of the other parameters (one level deep).

A value may be a table; its optional ``label`` key names it in the variant key (otherwise the
key uses the scalar value, or the value's position for tables without a label).

Guarantees:

* :func:`expand` is pure and deterministic: variants come in the order of the matrix's keys
  and values (the first key varies slowest), each with a unique, stable key
  ``name-value.name-value`` (lowercase, ``[a-z0-9._-]``) and the id ``<base>.<key>``;
* a file without ``[matrix]`` expands to itself, unchanged;
* every problem is a :class:`~harness.contract.errors.ScenarioError` naming the file and the key:
  an unknown parameter in a placeholder, a parameter no placeholder uses, an exclusion naming
  an unknown parameter or value, an empty matrix, more than :data:`VARIANTS_MAX` variants, two
  variants with one key, a placeholder in ``id``/``stage``/``matrix`` itself;
* expansion is bounded: all the variants together hold at most ``expanded_values_max`` values
  and ``expanded_chars_max`` characters of strings, and no string grows past
  ``string_chars_max`` (:data:`harness.contract.scenario_limits.LIMITS`), checked while the variants
  are built, so a small file whose values are used many times over cannot exhaust memory.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Any

from harness.contract.errors import ScenarioError
from harness.contract.scenario_limits import LIMITS

VARIANTS_MAX = 512
"""At most this many variants per template (a matrix is a neighbourhood, not a search)."""
PARAMETERS_MAX = 8
VALUES_MAX = 64

MATRIX_KEY = "matrix"
EXCLUDE_KEY = "matrix_exclude"
PLACEHOLDER = re.compile(
    r"\{\{m:([A-Za-z_][A-Za-z0-9_]*)(?:\.([A-Za-z_][A-Za-z0-9_]*))?(\|str)?\}\}")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SLUG_DROP = re.compile(r"[^a-z0-9._-]+")


@dataclass(frozen=True, slots=True)
class Variant:
    """One expanded scenario: its key (``""`` for a plain file), the parameter values that
    made it, and the scenario data with every placeholder replaced."""

    key: str
    params: tuple[tuple[str, Any], ...]
    data: dict[str, Any]


def is_template(data: dict[str, Any]) -> bool:
    return MATRIX_KEY in data or EXCLUDE_KEY in data


def expand(data: dict[str, Any], file: str) -> tuple[Variant, ...]:
    """Every variant of the scenario data ``data`` read from ``file`` (see the module doc)."""
    if not is_template(data):
        return (Variant("", (), data),)
    matrix = _matrix(data, file)
    excluded = _exclusions(data, matrix, file)
    body = {k: v for k, v in data.items() if k not in (MATRIX_KEY, EXCLUDE_KEY)}
    for key in ("id", "stage"):
        if isinstance(body.get(key), str) and PLACEHOLDER.search(body[key]):
            raise ScenarioError(f"{file}: {key}: placeholders are not allowed here (the "
                                f"variant id is made from the base id and the parameter values)")
    # A parameter may be used inside another parameter's values (one level deep).
    used = _used_names(body) | _used_names(matrix)
    unknown = sorted(used - set(matrix))
    if unknown:
        raise ScenarioError(f"{file}: {{{{m:{unknown[0]}}}}}: no parameter {unknown[0]!r} in "
                            f"[matrix] (parameters: {', '.join(matrix)})")
    unused = [name for name in matrix if name not in used]
    if unused:
        raise ScenarioError(f"{file}: matrix.{unused[0]}: no {{{{m:{unused[0]}}}}} placeholder "
                            "uses this parameter; remove it or use it")
    names = list(matrix)
    budget = _Budget(file)
    variants: list[Variant] = []
    keys: dict[str, tuple[tuple[str, Any], ...]] = {}
    for combination in itertools.product(*(range(len(matrix[n])) for n in names)):
        if combination in excluded:
            continue
        params = tuple((name, matrix[name][i]) for name, i in zip(names, combination))
        key = ".".join(f"{_slug(name)}-{_label(matrix[name][i], i)}"
                       for name, i in zip(names, combination))
        if key in keys:
            raise ScenarioError(f"{file}: matrix: two variants share the key {key!r}; give "
                                "table values distinct 'label's")
        keys[key] = params
        values = dict(params)
        expanded = _substitute(body, values, file, "", budget)
        base_id = expanded.get("id")
        if isinstance(base_id, str):
            expanded["id"] = f"{base_id}.{key}"
        tags = expanded.get("tags", [])
        if isinstance(tags, list):
            expanded["tags"] = [*tags, "variant"]
        variants.append(Variant(key, params, expanded))
    if not variants:
        raise ScenarioError(f"{file}: matrix_exclude: every combination is excluded")
    return tuple(variants)


# --------------------------------------------------------------------------- reading


def _matrix(data: dict[str, Any], file: str) -> dict[str, list[Any]]:
    matrix = data.get(MATRIX_KEY)
    if not isinstance(matrix, dict) or not matrix:
        raise ScenarioError(f"{file}: matrix: expected a table of parameters, each a non-empty "
                            'list of values (e.g. [matrix] outcome = ["allow", "timeout"])')
    if len(matrix) > PARAMETERS_MAX:
        raise ScenarioError(f"{file}: matrix: {len(matrix)} parameters; at most "
                            f"{PARAMETERS_MAX}")
    total = 1
    for name, values in matrix.items():
        if not _NAME.match(name):
            raise ScenarioError(f"{file}: matrix.{name}: a parameter name is letters, digits "
                                "and '_' (not starting with a digit)")
        if not isinstance(values, list) or not values:
            raise ScenarioError(f"{file}: matrix.{name}: expected a non-empty list of values")
        if len(values) > VALUES_MAX:
            raise ScenarioError(f"{file}: matrix.{name}: {len(values)} values; at most "
                                f"{VALUES_MAX}")
        total *= len(values)
    if total > VARIANTS_MAX:
        raise ScenarioError(f"{file}: matrix: {total} combinations; at most {VARIANTS_MAX} per "
                            "template (split it, or exclude combinations)")
    return matrix


def _exclusions(data: dict[str, Any], matrix: dict[str, list[Any]], file: str
                ) -> set[tuple[int, ...]]:
    tables = data.get(EXCLUDE_KEY, [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise ScenarioError(f"{file}: matrix_exclude: expected [[matrix_exclude]] tables of "
                            "parameter = value")
    names = list(matrix)
    excluded: set[tuple[int, ...]] = set()
    for n, table in enumerate(tables):
        where = f"{file}: matrix_exclude[{n}]"
        if not table:
            raise ScenarioError(f"{where}: empty; name at least one parameter")
        chosen: dict[str, list[int]] = {}
        for name, value in table.items():
            if name not in matrix:
                raise ScenarioError(f"{where}.{name}: not a parameter (parameters: "
                                    f"{', '.join(names)})")
            matches = [i for i, v in enumerate(matrix[name])
                       if v == value or (isinstance(v, dict) and v.get("label") == value)]
            if not matches:
                raise ScenarioError(f"{where}.{name}: {value!r} is not one of its values")
            chosen[name] = matches
        for combination in itertools.product(*(chosen.get(n, range(len(matrix[n])))
                                               for n in names)):
            excluded.add(tuple(combination))
    return excluded


def _used_names(value: Any) -> set[str]:
    if isinstance(value, str):
        return {m.group(1) for m in PLACEHOLDER.finditer(value)}
    if isinstance(value, dict):
        return set().union(*(_used_names(k) | _used_names(v) for k, v in value.items()))
    if isinstance(value, list):
        return set().union(*(_used_names(v) for v in value))
    return set()


# --------------------------------------------------------------------------- substitution


def _lookup(values: dict[str, Any], match: re.Match[str], file: str, where: str) -> Any:
    name, field = match.group(1), match.group(2)
    value = values[name]
    if field is None:
        return value
    if not isinstance(value, dict) or field not in value:
        raise ScenarioError(f"{file}: {where or 'scenario'}: {{{{m:{name}.{field}}}}}: the value "
                            f"{value!r} of {name!r} has no field {field!r}")
    return value[field]


class _Budget:
    """What the variants of one template may still add (see the module docstring)."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.values = LIMITS.expanded_values_max
        self.chars = LIMITS.expanded_chars_max

    def spend(self, where: str, values: int, chars: int = 0) -> None:
        self.values -= values
        self.chars -= chars
        if self.values < 0:
            raise ScenarioError(f"{self.file}: {where or 'matrix'}: the variants together hold "
                                f"more than {LIMITS.expanded_values_max} values (limit "
                                "expanded_values_max); use fewer variants or smaller values")
        if self.chars < 0:
            raise ScenarioError(f"{self.file}: {where or 'matrix'}: the variants' strings "
                                f"together exceed {LIMITS.expanded_chars_max} characters (limit "
                                "expanded_chars_max); use fewer variants or shorter strings")


def _size(value: Any) -> tuple[int, int]:
    """(values, string characters) of ``value``, walked without recursion."""
    values = chars = 0
    stack = [value]
    while stack:
        item = stack.pop()
        values += 1
        if isinstance(item, str):
            chars += len(item)
        elif isinstance(item, dict):
            chars += sum(len(k) for k in item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return values, chars


def _substitute(value: Any, values: dict[str, Any], file: str, where: str,
                budget: _Budget | None = None, depth: int = 0) -> Any:
    budget = budget or _Budget(file)
    if isinstance(value, str):
        whole = PLACEHOLDER.fullmatch(value)
        if whole is not None and whole.group(3) is None:
            found = _copy(_lookup(values, whole, file, where))
            # A parameter value may itself use the other parameters (one level deep).
            if depth < 1:
                return _substitute(found, values, file, where, budget, depth + 1)
            budget.spend(where, *_size(found))
            return found
        grown = len(value)

        def text(match: re.Match[str]) -> str:
            nonlocal grown
            found = _lookup(values, match, file, where)
            if isinstance(found, (dict, list)):
                raise ScenarioError(f"{file}: {where}: {match.group(0)} is a "
                                    f"{type(found).__name__} and cannot be part of a longer "
                                    "string; use it as the whole value")
            piece = str(found).lower() if isinstance(found, bool) else str(found)
            # Checked per piece, before the string is joined: 10,000 uses of a long value
            # must fail here, not after building a gigabyte.
            grown += len(piece) - len(match.group(0))
            if grown > LIMITS.string_chars_max:
                raise ScenarioError(f"{file}: {where or 'scenario'}: the string grows past "
                                    f"{LIMITS.string_chars_max} characters once {match.group(0)} "
                                    "is replaced (limit string_chars_max)")
            return piece

        result = PLACEHOLDER.sub(text, value) if "{{" in value else value
        budget.spend(where, 1, len(result))
        return result
    if isinstance(value, dict):
        budget.spend(where, 1)
        out = {}
        for k, v in value.items():
            path = f"{where}.{k}" if where else k
            new_key = _substitute(k, values, file, path, budget, depth)
            if not isinstance(new_key, str):
                raise ScenarioError(f"{file}: {path}: a key placeholder must give a string")
            out[new_key] = _substitute(v, values, file, path, budget, depth)
        return out
    if isinstance(value, list):
        budget.spend(where, 1)
        return [_substitute(v, values, file, f"{where}[{i}]", budget, depth)
                for i, v in enumerate(value)]
    budget.spend(where, 1)
    return value


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items() if k != "label"}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _slug(text: str) -> str:
    slug = _SLUG_DROP.sub("-", text.lower()).strip("-.")
    return slug or "x"


def _label(value: Any, position: int) -> str:
    if isinstance(value, dict):
        label = value.get("label")
        return _slug(str(label)) if label is not None else str(position + 1)
    if isinstance(value, list):
        return str(position + 1)
    if isinstance(value, bool):
        return "true" if value else "false"
    return _slug(str(value))
