"""Scenario files: load and validate TOML (see ``docs/scenarios.md``) into frozen values.

Guarantees:

* :func:`load` returns a :class:`Scenario` whose parts are the values the runner and the
  world use as they are (``contract.SessionConfig``, ``contract.ToolSpec``, scripted model
  responses, tool behaviours, classifier config, a validated fault plan, steps);
* anything invalid raises :class:`~harness.contract.errors.ScenarioError` whose message names the
  file, the key path (``sessions[0].mode``) and, where there is a closed set, the valid
  choices: unknown keys, wrong types, bad enum values, bad failpoint names, references to
  undeclared sessions / tools / tool calls, malformed ``{{...}}`` placeholders, a
  ``concurrent_turn`` with nothing to hold at, duplicate ids;
* every reference names something the scenario declares, so a misspelling is a load error
  and never a fault or rule that silently does nothing: sessions (model entries, steps,
  faults), tools (capabilities, model tool calls, tool behaviours, and the ``tool`` pattern
  of every rule: session rules and hard constraints, ``update_rules`` steps, ``change_rules``
  faults, which must match at least one declared tool), tool-call ids (tool behaviours, and
  an ``answer`` step's ``wait``, which is ``"next"``, ``"again"`` or the id of the call the wait asks
  about), initial files (``{{sha256:...}}``);
* loading is bounded (``harness/contract/scenario_limits.py``, ``docs/scenarios.md`` "Limits"): the
  text's size and nesting are checked before the TOML parser reads it, the data's before it
  is walked (and a template's variants while they are built), then counts, hits and
  durations where they are read; values JSON cannot carry (``nan``, ``inf``, dates) are load
  errors, as are Faker providers off the allow-list; a RecursionError can only become a
  ScenarioError. So any file ends in a scenario or a ScenarioError, never another exception;
* :func:`discover` loads every ``*.toml`` below the given directories (recursively, sorted)
  and the given files, skipping nothing silently, and rejects duplicate scenario ids.

Placeholders are checked here but expanded per run (by the world, from the run seed).
"""

from __future__ import annotations

import dataclasses
import enum
import importlib.resources
import math
import re
import tomllib
import typing
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Iterable

from harness.contract import (
    FAILURE_TABLE_CAPACITY,
    OPTIONAL_FEATURES,
    ClassifierOutcome,
    Failpoint,
    Feature,
    Mode,
    Rule,
    RuleEffect,
    SessionConfig,
    Thresholds,
    ToolCall,
    ToolKind,
    ToolSpec,
)
from harness.scenarios import matrix as scenario_matrix
from harness.contract.errors import ScenarioError
from harness.contract.scenario_limits import LIMITS, at_most, check_data, check_text, one_line
from harness.contract.scenario_limits import short_repr as _short
from harness.faults.plan import Action, Fault, FaultPlan, make_fault
from harness.world import templates
from harness.world.classifier import DEFAULT_INPUT_CHARS_MAX, ClassifierConfig, ReviewOverride
from harness.world.model import ScriptedResponse, StreamEnd
from harness.world.tools import DEFAULT_HANG_S, Behaviour, ToolBehaviour

BUNDLED_SUITE_RESOURCE = "bundled_scenarios"
"""The bundled suite, as package data of ``harness``. In the repository it is a symbolic
link to the top-level ``scenarios/`` (the source of truth, never copied), so an editable
install sees every edit at once; a wheel holds the files themselves."""


def bundled_suite_dir() -> Path:
    """The bundled suite's folder, found through :mod:`importlib.resources` (so a wheel
    install finds its own scenarios, wherever it lives) and resolved (so in a source checkout
    paths read ``scenarios/l4/...`` rather than the link's name)."""
    root = importlib.resources.files("harness").joinpath(BUNDLED_SUITE_RESOURCE)
    # pip installs packages as files, so the resource is a real folder; a zip import is
    # not supported (scenario paths end up in replay commands).
    return Path(str(root)).resolve()


DEFAULT_SCENARIO_DIR = bundled_suite_dir()
"""The bundled suite (see :func:`bundled_suite_dir`)."""

STAGES = ("x", "l1", "l2", "l3", "l4", "l5", "m")
ID_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]*$")

STANDARD_TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec("read_file", ToolKind.READ, idempotent=True, description="Read a file"),
    ToolSpec("write_file", ToolKind.WRITE, description="Write content to a file"),
    ToolSpec("edit_file", ToolKind.FILE_EDIT,
             description="Replace old by new in a file (optional expect_sha precondition)"),
    ToolSpec("Bash", ToolKind.BASH, description="Run a shell command"),
    ToolSpec("send_email", ToolKind.EXTERNAL, description="Send an email"),
    ToolSpec("terminal", ToolKind.TERMINAL, description="Type into the user's terminal"),
    ToolSpec("web_action", ToolKind.WEB, description="Act in the web UI"),
    ToolSpec("app_action", ToolKind.USER_APP, description="Act in a user application"),
)
"""What ``[[tools]] library = "standard"`` adds: one tool of every kind."""
LIBRARIES = {"standard": STANDARD_TOOLS}


class StepKind(enum.StrEnum):
    TURN = "turn"
    ANSWER = "answer"
    UPDATE_RULES = "update_rules"
    CANCEL = "cancel"
    RESTART = "restart"
    CONCURRENT_TURN = "concurrent_turn"
    LOAD_CHECKPOINT = "load_checkpoint"
    OBSERVE = "observe"


@dataclass(frozen=True, slots=True)
class Step:
    """One thing the harness does. Which fields matter depends on ``do`` (see STEP_KEYS)."""

    do: StepKind
    session: str = ""
    text: str = ""
    wait: str = "next"
    approve: bool = True
    rules: tuple[Rule, ...] = ()
    permission_version: int = 0
    hold_at: Failpoint | None = None
    optional: bool = False
    """concurrent_turn only: the hold may legitimately not engage (see docs/scenarios.md)."""
    fixture: str = ""
    label: str = ""


STEP_KEYS: dict[StepKind, tuple[str, ...]] = {
    StepKind.TURN: ("session", "text"),
    StepKind.ANSWER: ("wait", "approve"),
    StepKind.UPDATE_RULES: ("session", "rules", "permission_version"),
    StepKind.CANCEL: ("session",),
    StepKind.RESTART: (),
    StepKind.CONCURRENT_TURN: ("session", "text", "hold_at", "optional"),
    StepKind.LOAD_CHECKPOINT: ("session", "fixture"),
    StepKind.OBSERVE: ("label",),
}
STEP_REQUIRED: dict[StepKind, tuple[str, ...]] = {
    StepKind.UPDATE_RULES: ("rules", "permission_version"),
    StepKind.LOAD_CHECKPOINT: ("fixture",),
}


@dataclass(frozen=True, slots=True)
class Scenario:
    id: str
    stage: str
    title: str
    file: str
    tags: tuple[str, ...]
    sessions: tuple[SessionConfig, ...]
    """Every session gets every tool of ``tools``; the first is the default session."""
    tools: tuple[ToolSpec, ...]
    files: dict[str, str] = field(default_factory=dict)
    classifier: ClassifierConfig = ClassifierConfig()
    model: tuple[ScriptedResponse, ...] = ()
    tool_behaviours: tuple[ToolBehaviour, ...] = ()
    faults: tuple[Fault, ...] = ()
    steps: tuple[Step, ...] = ()
    requires: tuple[Feature, ...] = ()
    """Optional features the scenario needs; without them the suite skips it whole."""
    variant: str = ""
    """For a scenario expanded from a template (``[matrix]``), the variant's key; else ""."""

    @property
    def default_session(self) -> str:
        return self.sessions[0].session_id

    @property
    def plan(self) -> FaultPlan:
        return FaultPlan(self.faults)

    @property
    def thresholds(self) -> Thresholds:
        return self.sessions[0].thresholds


# --------------------------------------------------------------------------- reading helpers

_MISSING: Any = object()
TOP_KEYS = ("id", "stage", "title", "tags", "sessions", "tools", "files", "classifier", "model",
            "tool_behaviour", "faults", "steps", "requires")
SESSION_KEYS = ("id", "interactive", "owner_can_approve", "mode", "capabilities",
                "permission_version", "trusted_cwd", "permission_scope", "user_requirements",
                "rules", "hard_constraints", "thresholds")
TOOL_KEYS = ("name", "kind", "idempotent", "description", "library")
RULE_KEYS = ("effect", "tool", "pattern", "field")
CLASSIFIER_KEYS = ("dangerous", "input_chars_max", "script", "delay_s")
REVIEW_KEYS = ("review", "outcome", "reason", "delay_s")
MODEL_KEYS = ("session", "text", "tool_calls", "end", "repeat")
CALL_KEYS = ("id", "tool", "args")
BEHAVIOUR_KEYS = ("call", "tool", "behaviour", "times", "seconds")
FAULT_KEYS = ("failpoint", "hits", "action", "seconds", "message", "session", "rules",
              "permission_version", "optional")


def _choices(values: Iterable[Any]) -> str:
    return ", ".join(str(v) for v in values)


class _Reader:
    """Typed access to parsed TOML with errors that say file, key path and valid choices."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.rules_read = 0
        """Rules read so far (each is matched against every tool: their number is bounded)."""
        self.tool_matches: dict[str, bool] = {}
        """Rule ``tool`` pattern -> matches a declared tool (the tools are fixed per file)."""

    def error(self, where: str, problem: str) -> ScenarioError:
        return ScenarioError(f"{self.file}: {where}: {problem}")

    def table(self, value: Any, where: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.error(where, f"expected a table, got {_kind(value)}")
        return value

    def tables(self, value: Any, where: str) -> list[dict[str, Any]]:
        if not isinstance(value, list):
            raise self.error(where, f"expected an array of tables, got {_kind(value)}")
        return [self.table(item, f"{where}[{i}]") for i, item in enumerate(value)]

    def keys(self, table: dict[str, Any], where: str, allowed: Iterable[str],
             required: Iterable[str] = ()) -> None:
        allowed = tuple(allowed)
        for key in table:
            if key not in allowed:
                raise self.error(_join(where, key), f"unknown key (valid: {_choices(allowed)})")
        for key in required:
            if key not in table:
                raise self.error(_join(where, key), "required key is missing")

    def value(self, table: dict[str, Any], key: str, where: str, kind: Any,
              default: Any = _MISSING) -> Any:
        path = _join(where, key)
        if key not in table:
            if default is _MISSING:
                raise self.error(path, "required key is missing")
            return default
        return self.convert(table[key], path, kind)

    def convert(self, value: Any, path: str, kind: Any) -> Any:
        if isinstance(kind, type) and issubclass(kind, enum.Enum):
            if not isinstance(value, str) or value not in {m.value for m in kind}:
                raise self.error(path, f"{_short(value)} is not valid (valid: {_choices(m.value for m in kind)})")
            return kind(value)
        if kind is bool:
            if not isinstance(value, bool):
                raise self.error(path, f"expected a boolean (true or false), got {_kind(value)}")
            return value
        if kind is int:
            if not isinstance(value, int) or isinstance(value, bool):
                raise self.error(path, f"expected an integer, got {_kind(value)}")
            return value
        if kind is float:
            if not isinstance(value, (int, float)) or isinstance(value, bool) \
                    or not math.isfinite(value):
                raise self.error(path, f"expected a number, got {_kind(value)}")
            return float(value)
        if kind is str:
            if not isinstance(value, str):
                raise self.error(path, f"expected a string, got {_kind(value)}")
            return value
        if kind == "strings":
            if not isinstance(value, list):
                raise self.error(path, f"expected an array of strings, got {_kind(value)}")
            return tuple(self.convert(item, f"{path}[{i}]", str) for i, item in enumerate(value))
        if kind == "table":
            return self.table(value, path)
        raise AssertionError(f"unknown kind {kind!r}")

    def positive(self, value: int | float, path: str, minimum: float = 1) -> None:
        if value < minimum:
            raise self.error(path, f"must be >= {minimum:g}, got {value!r}")

    def at_most(self, value: int | float, limit: int | float, name: str, path: str) -> None:
        """``value`` within the documented maximum ``LIMITS.<name>`` (see scenario_limits)."""
        at_most(value, limit, name, self.file, path)

    def member(self, value: str, path: str, valid: Iterable[str], what: str) -> None:
        # Checked per reference: ordered and hashed, so a file's references cost one lookup
        # each, whatever it declares (see scenario_limits).
        valid = valid if isinstance(valid, dict) else dict.fromkeys(valid)
        if value not in valid:
            raise self.error(path, f"{value!r} is not a declared {what} "
                                   f"(valid: {_choices(valid) or 'none declared'})")


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _kind(value: Any) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
             list: "an array", dict: "a table"}
    return f"{names.get(type(value), type(value).__name__)} ({_short(value)})"


# --------------------------------------------------------------------------- parts


def _rules(r: _Reader, value: Any, path: str, tools: tuple[ToolSpec, ...],
           default_effect: RuleEffect | None = None) -> tuple[Rule, ...]:
    if not isinstance(value, list):
        raise r.error(path, f"expected an array of rule tables, got {_kind(value)}")
    rules = []
    r.rules_read += len(value)
    r.at_most(r.rules_read, LIMITS.rules_max, "rules_max",
              f"{path} (rules of the scenario together)")
    for i, item in enumerate(value):
        where = f"{path}[{i}]"
        table = r.table(item, where)
        r.keys(table, where, RULE_KEYS, ("tool",) if default_effect else ("effect", "tool"))
        effect = r.value(table, "effect", where, RuleEffect,
                         default_effect if default_effect else _MISSING)
        tool = r.value(table, "tool", where, str)
        _names_a_tool(r, tool, f"{where}.tool", tools)
        pattern = r.value(table, "pattern", where, str, "*")
        field_ = r.value(table, "field", where, str, "")
        _absent_field_is_settled(r, pattern, field_, f"{where}.pattern")
        rules.append(Rule(effect, tool, pattern, field_))
    return tuple(rules)


def _absent_field_is_settled(r: _Reader, pattern: str, field_: str, path: str) -> None:
    """A rule on a field must not leave to the implementation whether it matches a call
    that lacks the field: docs/lifecycle.md ("Rule matching") settles `*` (matches) and every
    pattern that needs a character (does not match), and leaves the patterns other than `*`
    that match the empty text (`""`, `**`) free (reading an absent field as "" is allowed,
    and two independent implementations do), so no scenario may rely on them there."""
    if field_ and pattern != "*" and fnmatchcase("", pattern):
        raise r.error(path, f"{pattern!r} on field {field_!r} matches the empty text, so whether it "
                            "matches a call without that field is the implementation's choice "
                            "(docs/lifecycle.md, \"Rule matching\"); use '*' to match every call, "
                            "or a pattern that needs a character such as '?*'")


def _names_a_tool(r: _Reader, pattern: str, path: str, tools: tuple[ToolSpec, ...]) -> None:
    """A rule's ``tool`` is an fnmatch pattern over tool names: it must match a declared
    tool, or the rule can never apply and the scenario silently tests nothing."""
    names = [t.name for t in tools]
    if pattern not in r.tool_matches:
        r.tool_matches[pattern] = any(fnmatchcase(name, pattern) for name in names)
    if not r.tool_matches[pattern]:
        raise r.error(path, f"{pattern!r} matches no declared tool; declare it under [[tools]] "
                            f"or fix the name (valid: {_choices(names) or 'none declared'})")


def _thresholds(r: _Reader, value: Any, path: str) -> Thresholds:
    table = r.table(value, path)
    hints = typing.get_type_hints(Thresholds)
    names = [f.name for f in dataclasses.fields(Thresholds)]
    r.keys(table, path, names)
    kwargs = {}
    for name in names:
        if name in table:
            kwargs[name] = r.value(table, name, path, hints[name])
            r.positive(kwargs[name], _join(path, name), 0 if hints[name] is float else 1)
            if name.endswith("_s"):
                r.at_most(kwargs[name], LIMITS.seconds_max, "seconds_max", _join(path, name))
            elif name.endswith(("_max", "_limit")) and "chars" not in name:
                # A count the implementation loops up to (retries, denials): bounded runs.
                r.at_most(kwargs[name], LIMITS.count_max, "count_max", _join(path, name))
    capacity = kwargs.get("failure_table_capacity", FAILURE_TABLE_CAPACITY)
    if capacity != FAILURE_TABLE_CAPACITY:
        # The design fixes the capacity; a scenario cannot test another one (L1.1).
        raise r.error(_join(path, "failure_table_capacity"),
                      f"the recent-failure table's capacity is fixed at {FAILURE_TABLE_CAPACITY} "
                      f"by the design, not configurable (got {capacity})")
    return Thresholds(**kwargs)


def _tools(r: _Reader, data: dict[str, Any]) -> tuple[ToolSpec, ...]:
    specs: list[ToolSpec] = []
    seen: dict[str, str] = {}

    def add(spec: ToolSpec, where: str) -> None:
        if spec.name in seen:
            raise r.error(where, f"tool {spec.name!r} is already declared by {seen[spec.name]}")
        seen[spec.name] = where
        specs.append(spec)

    for i, table in enumerate(r.tables(data.get("tools", []), "tools")):
        where = f"tools[{i}]"
        if "library" in table:
            r.keys(table, where, ("library",))
            name = r.value(table, "library", where, str)
            if name not in LIBRARIES:
                raise r.error(f"{where}.library", f"{name!r} is not a tool library "
                                                  f"(valid: {_choices(LIBRARIES)})")
            for spec in LIBRARIES[name]:
                add(spec, f"{where} (library {name})")
            continue
        r.keys(table, where, [k for k in TOOL_KEYS if k != "library"], ("name", "kind"))
        name = r.value(table, "name", where, str)
        if not name:
            raise r.error(f"{where}.name", "must not be empty")
        add(ToolSpec(name, r.value(table, "kind", where, ToolKind),
                     r.value(table, "idempotent", where, bool, False),
                     r.value(table, "description", where, str, "")), where)
    return tuple(specs)


def _sessions(r: _Reader, data: dict[str, Any], tools: tuple[ToolSpec, ...]
              ) -> tuple[SessionConfig, ...]:
    if "sessions" not in data:
        raise r.error("sessions", "required: at least one [[sessions]] table")
    tables = r.tables(data["sessions"], "sessions")
    if not tables:
        raise r.error("sessions", "at least one session is needed")
    configs: list[SessionConfig] = []
    tool_names = dict.fromkeys(t.name for t in tools)
    for i, table in enumerate(tables):
        where = f"sessions[{i}]"
        r.keys(table, where, SESSION_KEYS, ("id",))
        session_id = r.value(table, "id", where, str)
        if not session_id:
            raise r.error(f"{where}.id", "must not be empty")
        if any(c.session_id == session_id for c in configs):
            raise r.error(f"{where}.id", f"duplicate session id {session_id!r}")
        capabilities = r.value(table, "capabilities", where, "strings", ())
        for j, name in enumerate(capabilities):
            r.member(name, f"{where}.capabilities[{j}]", tool_names, "tool")
        version = r.value(table, "permission_version", where, int, 1)
        r.positive(version, f"{where}.permission_version")
        hard = _rules(r, table.get("hard_constraints", []), f"{where}.hard_constraints",
                      tools, default_effect=RuleEffect.DENY)
        for j, rule in enumerate(hard):
            if rule.effect is not RuleEffect.DENY:
                raise r.error(f"{where}.hard_constraints[{j}].effect",
                              f"{rule.effect.value!r}: hard constraints are deny rules (valid: deny)")
        configs.append(SessionConfig(
            session_id=session_id,
            interactive=r.value(table, "interactive", where, bool, True),
            owner_can_approve=r.value(table, "owner_can_approve", where, bool, True),
            mode=r.value(table, "mode", where, Mode, Mode.DEFAULT),
            capabilities=capabilities,
            hard_constraints=hard,
            rules=_rules(r, table.get("rules", []), f"{where}.rules", tools),
            permission_version=version,
            tools=tools,
            trusted_cwd=r.value(table, "trusted_cwd", where, str, "/repo"),
            permission_scope=r.value(table, "permission_scope", where, str, "workspace-write"),
            user_requirements=r.value(table, "user_requirements", where, str, ""),
            thresholds=(_thresholds(r, table["thresholds"], f"{where}.thresholds")
                        if "thresholds" in table else Thresholds()),
        ))
    return tuple(configs)


def _placeholders(r: _Reader, value: Any, path: str, files: dict[str, str]) -> None:
    if isinstance(value, str):
        problems = templates.check(value, files)
        if problems:
            raise r.error(path, problems[0])
    elif isinstance(value, dict):
        for key, item in value.items():
            _placeholders(r, key, path, files)
            _placeholders(r, item, _join(path, str(key)), files)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _placeholders(r, item, f"{path}[{i}]", files)


def _files(r: _Reader, data: dict[str, Any]) -> dict[str, str]:
    table = r.table(data.get("files", {}), "files")
    files = {}
    for path, content in table.items():
        where = f"files.{path!r}" if not re.fullmatch(r"[\w/.-]+", path) else f"files.{path}"
        if not path.startswith("/"):
            raise r.error(where, "file paths must be absolute (start with '/')")
        files[path] = r.convert(content, where, str)
    # {{sha256:...}} may name only files whose content is literal.
    literal = {p: c for p, c in files.items() if "{{" not in c and "{{" not in p}
    for path, content in files.items():
        _placeholders(r, path, "files", {})
        _placeholders(r, content, f"files.{path}", literal)
    return files


def _classifier(r: _Reader, data: dict[str, Any]) -> ClassifierConfig:
    table = r.table(data.get("classifier", {}), "classifier")
    r.keys(table, "classifier", CLASSIFIER_KEYS)
    dangerous = r.value(table, "dangerous", "classifier", "strings", ())
    for i, marker in enumerate(dangerous):
        if not marker:
            raise r.error(f"classifier.dangerous[{i}]", "an empty marker would match everything")
    limit = r.value(table, "input_chars_max", "classifier", int, DEFAULT_INPUT_CHARS_MAX)
    r.positive(limit, "classifier.input_chars_max")
    delay = r.value(table, "delay_s", "classifier", float, 0.0)
    r.positive(delay, "classifier.delay_s", 0)
    r.at_most(delay, LIMITS.seconds_max, "seconds_max", "classifier.delay_s")
    script: list[ReviewOverride] = []
    for i, entry in enumerate(r.tables(table.get("script", []), "classifier.script")):
        where = f"classifier.script[{i}]"
        r.keys(entry, where, REVIEW_KEYS, ("review", "outcome"))
        number = r.value(entry, "review", where, int)
        r.positive(number, f"{where}.review")
        r.at_most(number, LIMITS.count_max, "count_max", f"{where}.review")
        if any(o.review == number for o in script):
            raise r.error(f"{where}.review", f"review {number} is already scripted")
        entry_delay = r.value(entry, "delay_s", where, float, None)
        if entry_delay is not None:
            r.positive(entry_delay, f"{where}.delay_s", 0)
            r.at_most(entry_delay, LIMITS.seconds_max, "seconds_max", f"{where}.delay_s")
        script.append(ReviewOverride(number, r.value(entry, "outcome", where, ClassifierOutcome),
                                     r.value(entry, "reason", where, str, ""), entry_delay))
    return ClassifierConfig(dangerous, limit, tuple(script), delay)


def _model(r: _Reader, data: dict[str, Any], sessions: list[str], files: dict[str, str],
           tools: tuple[ToolSpec, ...]) -> tuple[ScriptedResponse, ...]:
    responses = []
    served = 0
    tool_names = dict.fromkeys(t.name for t in tools)
    for i, table in enumerate(r.tables(data.get("model", []), "model")):
        where = f"model[{i}]"
        r.keys(table, where, MODEL_KEYS)
        session = r.value(table, "session", where, str, sessions[0])
        r.member(session, f"{where}.session", sessions, "session")
        text = r.value(table, "text", where, str, "")
        _placeholders(r, text, f"{where}.text", files)
        calls = []
        raw_calls = table.get("tool_calls", [])
        for j, call in enumerate(r.tables(raw_calls, f"{where}.tool_calls")):
            at = f"{where}.tool_calls[{j}]"
            r.keys(call, at, CALL_KEYS, ("id", "tool"))
            call_id, tool = r.value(call, "id", at, str), r.value(call, "tool", at, str)
            if not call_id or not tool:
                raise r.error(at, "id and tool must not be empty")
            r.member(tool, f"{at}.tool", tool_names, "tool "
                     "(a call of an undeclared tool never reaches a lifecycle step; declare it "
                     "under [[tools]] or fix the name)")
            args = r.value(call, "args", at, "table", {})
            _placeholders(r, args, f"{at}.args", files)
            calls.append(ToolCall(call_id, tool, args))
        repeat = r.value(table, "repeat", where, int, 1)
        r.positive(repeat, f"{where}.repeat")
        r.at_most(repeat, LIMITS.count_max, "count_max", f"{where}.repeat")
        served += repeat
        # The world queues every repetition: the sum, not each entry, bounds its memory.
        r.at_most(served, LIMITS.model_responses_max, "model_responses_max",
                  f"{where}.repeat (responses of model[0..{i}] together)")
        responses.append(ScriptedResponse(session, text, tuple(calls),
                                          r.value(table, "end", where, StreamEnd, StreamEnd.END),
                                          repeat))
    return tuple(responses)


def _behaviours(r: _Reader, data: dict[str, Any], tools: tuple[ToolSpec, ...],
                model: tuple[ScriptedResponse, ...]) -> tuple[ToolBehaviour, ...]:
    call_ids = dict.fromkeys(c.tool_call_id for resp in model for c in resp.tool_calls)
    tool_names = dict.fromkeys(t.name for t in tools)
    found = []
    for i, table in enumerate(r.tables(data.get("tool_behaviour", []), "tool_behaviour")):
        where = f"tool_behaviour[{i}]"
        r.keys(table, where, BEHAVIOUR_KEYS, ("behaviour",))
        if ("call" in table) == ("tool" in table):
            raise r.error(where, "give exactly one of 'call' (a tool-call id of the model "
                                 "script) or 'tool' (a tool name)")
        call = r.value(table, "call", where, str, "")
        tool = r.value(table, "tool", where, str, "")
        if call:
            r.member(call, f"{where}.call", call_ids, "tool-call id of the model script")
        if tool:
            r.member(tool, f"{where}.tool", tool_names, "tool")
        behaviour = r.value(table, "behaviour", where, Behaviour)
        times = r.value(table, "times", where, int, 1)
        r.positive(times, f"{where}.times")
        r.at_most(times, LIMITS.count_max, "count_max", f"{where}.times")
        if "seconds" in table and behaviour is not Behaviour.HANG:
            raise r.error(f"{where}.seconds", "only a 'hang' behaviour takes seconds")
        seconds = r.value(table, "seconds", where, float, DEFAULT_HANG_S)
        r.positive(seconds, f"{where}.seconds", 0)
        r.at_most(seconds, LIMITS.seconds_max, "seconds_max", f"{where}.seconds")
        found.append(ToolBehaviour(behaviour, call, tool, times, seconds))
    return tuple(found)


def _faults(r: _Reader, data: dict[str, Any], sessions: list[str], tools: tuple[ToolSpec, ...]
            ) -> tuple[Fault, ...]:
    faults = []
    for i, table in enumerate(r.tables(data.get("faults", []), "faults")):
        where = f"faults[{i}]"
        r.keys(table, where, FAULT_KEYS, ("action",))
        action = r.value(table, "action", where, Action)
        params = {k: v for k, v in table.items()
                  if k not in ("failpoint", "hits", "action", "optional")}
        optional = r.value(table, "optional", where, bool, False)
        if action is Action.CHANGE_RULES and "rules" in params:
            _rules(r, params["rules"], f"{where}.rules", tools)
        if action in (Action.CHANGE_RULES, Action.CANCEL):
            params.setdefault("session", sessions[0])
            r.member(r.convert(params["session"], f"{where}.session", str), f"{where}.session",
                     sessions, "session")
        failpoint = table.get("failpoint")
        if failpoint is not None:
            failpoint = r.convert(failpoint, f"{where}.failpoint", str)
        hits = r.value(table, "hits", where, str, "1")
        if action is Action.DELAY and isinstance(params.get("seconds"), (int, float)) \
                and not isinstance(params["seconds"], bool):
            r.at_most(params["seconds"], LIMITS.seconds_max, "seconds_max", f"{where}.seconds")
        try:
            faults.append(make_fault(failpoint, hits, action.value, params, where=where,
                                     optional=optional))
        except ScenarioError as exc:
            raise ScenarioError(f"{r.file}: {exc}") from None
    try:
        FaultPlan(tuple(faults))
    except ScenarioError as exc:
        raise ScenarioError(f"{r.file}: {exc}") from None
    return tuple(faults)


def _steps(r: _Reader, data: dict[str, Any], sessions: list[str], files: dict[str, str],
           faults: tuple[Fault, ...], tools: tuple[ToolSpec, ...],
           model: tuple[ScriptedResponse, ...]) -> tuple[Step, ...]:
    if "steps" not in data:
        raise r.error("steps", "required: at least one [[steps]] table")
    tables = r.tables(data["steps"], "steps")
    if not tables:
        raise r.error("steps", "at least one step is needed")
    r.at_most(len(tables), LIMITS.steps_max, "steps_max", "steps (number of steps)")
    planned_hold = any(f.action is Action.HOLD for f in faults)
    call_ids = dict.fromkeys(c.tool_call_id for resp in model for c in resp.tool_calls)
    steps = []
    for i, table in enumerate(tables):
        where = f"steps[{i}]"
        do = r.value(table, "do", where, StepKind)
        r.keys(table, where, ("do", *STEP_KEYS[do]), STEP_REQUIRED.get(do, ()))
        kwargs: dict[str, Any] = {}
        if "session" in STEP_KEYS[do]:
            kwargs["session"] = r.value(table, "session", where, str, sessions[0])
            r.member(kwargs["session"], f"{where}.session", sessions, "session")
        if "text" in table:
            kwargs["text"] = r.value(table, "text", where, str)
            _placeholders(r, kwargs["text"], f"{where}.text", files)
        if "wait" in table:
            kwargs["wait"] = r.value(table, "wait", where, str)
            if kwargs["wait"] not in ("next", "again") and kwargs["wait"] not in call_ids:
                # Wait ids are the implementation's own: a scenario that must run against
                # any implementation names a wait by the model's tool call it asks about.
                raise r.error(f"{where}.wait", f"{kwargs['wait']!r} is neither \"next\", \"again\" "
                              "nor a tool-call id of the model script (a wait is named by the call "
                              f"it asks about; valid: next, again, "
                              f"{_choices(call_ids) or 'no calls declared'})")
        if "approve" in table:
            kwargs["approve"] = r.value(table, "approve", where, bool)
        if "rules" in table:
            kwargs["rules"] = _rules(r, table["rules"], f"{where}.rules", tools)
        if "permission_version" in table:
            kwargs["permission_version"] = r.value(table, "permission_version", where, int)
            r.positive(kwargs["permission_version"], f"{where}.permission_version")
        if "hold_at" in table:
            kwargs["hold_at"] = r.value(table, "hold_at", where, Failpoint)
        elif do is StepKind.CONCURRENT_TURN and not planned_hold:
            raise r.error(f"{where}.hold_at", "required (a failpoint where the first instance "
                          "is held), unless a [[faults]] entry has action = \"hold\"; valid: "
                          + _choices(Failpoint))
        if "optional" in table:
            kwargs["optional"] = r.value(table, "optional", where, bool)
        if "fixture" in table:
            kwargs["fixture"] = r.value(table, "fixture", where, str)
            if not kwargs["fixture"]:
                raise r.error(f"{where}.fixture", "must name one of the implementation's "
                                                  "declared checkpoint fixtures")
        if "label" in table:
            kwargs["label"] = r.value(table, "label", where, str)
        steps.append(Step(do, **kwargs))
    if planned_hold and not any(s.do is StepKind.CONCURRENT_TURN for s in steps):
        index = next(i for i, f in enumerate(faults) if f.action is Action.HOLD)
        raise r.error(f"faults[{index}].action", "hold only acts during a concurrent_turn "
                                                 "step, and this scenario has none")
    return tuple(steps)


# --------------------------------------------------------------------------- entry points


def parse(data: dict[str, Any], file: str, variant: str = "") -> Scenario:
    """Validate parsed TOML (``file`` names it in errors) into a :class:`Scenario`; a
    template's variants are parsed one by one (``variant`` names which, in errors too)."""
    r = _Reader(f"{file} [variant {variant}]" if variant else file)
    r.table(data, "(document)")
    check_data(data, r.file)
    r.keys(data, "", TOP_KEYS, ("id", "stage"))
    scenario_id = r.value(data, "id", "", str)
    if not ID_PATTERN.match(scenario_id):
        raise r.error("id", f"{scenario_id!r} must match {ID_PATTERN.pattern} "
                            "(lowercase letters, digits, '.', '_', '-')")
    stage = r.value(data, "stage", "", str)
    if stage not in STAGES:
        raise r.error("stage", f"{stage!r} is not a stage (valid: {_choices(STAGES)})")
    tools = _tools(r, data)
    sessions = _sessions(r, data, tools)
    names = [s.session_id for s in sessions]
    files = _files(r, data)
    model = _model(r, data, names, files, tools)
    faults = _faults(r, data, names, tools)
    return Scenario(
        id=scenario_id,
        stage=stage,
        title=r.value(data, "title", "", str, ""),
        file=file,
        tags=r.value(data, "tags", "", "strings", ()),
        sessions=sessions,
        tools=tools,
        files=files,
        classifier=_classifier(r, data),
        model=model,
        tool_behaviours=_behaviours(r, data, tools, model),
        faults=faults,
        steps=_steps(r, data, names, files, faults, tools, model),
        requires=_requires(r, data),
        variant=variant,
    )


def _requires(r: _Reader, data: dict[str, Any]) -> tuple[Feature, ...]:
    """``requires``: optional features only (the core is never optional)."""
    names = r.value(data, "requires", "", "strings", ())
    valid = _choices(sorted(OPTIONAL_FEATURES))
    for i, name in enumerate(names):
        if name not in {f.value for f in Feature}:
            raise r.error(f"requires[{i}]", f"{name!r} is not a feature (valid: {valid})")
        if Feature(name) not in OPTIONAL_FEATURES:
            raise r.error(f"requires[{i}]", f"{name!r} is core, which every implementation "
                                            f"has; list optional features only (valid: {valid})")
    return tuple(sorted({Feature(n) for n in names}))


def parse_all(data: dict[str, Any], file: str) -> tuple[Scenario, ...]:
    """Every scenario of one parsed file: itself, or each variant of a template.

    The data is checked against :data:`~harness.contract.scenario_limits.LIMITS` before a template is
    expanded (the expansion has its own budget) and each variant again after."""
    try:
        check_data(data, file)
        return tuple(parse(v.data, file, v.key) for v in scenario_matrix.expand(data, file))
    except ScenarioError as exc:
        raise ScenarioError(one_line(str(exc))) from None
    except RecursionError:
        # The limits keep every walk shallow; this is the net under them.
        raise ScenarioError(f"{file}: nested too deeply to read (at most "
                            f"{LIMITS.nesting_depth_max} levels; limit nesting_depth_max)") from None


def _toml(text: str, file: str) -> dict[str, Any]:
    try:
        check_text(text, file)
    except ScenarioError as exc:
        raise ScenarioError(one_line(str(exc))) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(one_line(f"{file}: not valid TOML: {exc}")) from None
    except ValueError as exc:
        # int() refuses literals beyond sys.get_int_max_str_digits() (4,300 digits).
        raise ScenarioError(f"{file}: not a readable TOML value ({str(exc).split(';')[0]}); "
                            f"integers must be within ±{LIMITS.integer_abs_max} "
                            "(limit integer_abs_max)") from None
    except RecursionError:
        raise ScenarioError(f"{file}: nested too deeply to read (at most "
                            f"{LIMITS.nesting_depth_max} levels; limit nesting_depth_max)") from None


def loads_all(text: str, file: str = "<string>") -> tuple[Scenario, ...]:
    return parse_all(_toml(text, file), file)


def loads(text: str, file: str = "<string>", variant: str | None = None) -> Scenario:
    """The one scenario of ``text``; for a template, the variant named ``variant`` (needed
    when the template has more than one)."""
    return _choose(loads_all(text, file), file, variant)


def _choose(scenarios: tuple[Scenario, ...], file: str, variant: str | None) -> Scenario:
    if variant is None:
        if len(scenarios) == 1:
            return scenarios[0]
        keys = ", ".join(s.variant for s in scenarios[:6])
        more = ", ..." if len(scenarios) > 6 else ""
        raise ScenarioError(f"{file}: a template with {len(scenarios)} variants; name one with "
                            f"--variant KEY (e.g. {keys}{more})")
    for scenario in scenarios:
        if scenario.variant == variant or scenario.id == variant:
            return scenario
    keys = ", ".join(s.variant or "(none)" for s in scenarios[:6])
    raise ScenarioError(f"{file}: no variant {variant!r} (variants: {keys}"
                        f"{', ...' if len(scenarios) > 6 else ''})")


def load(path: str | Path, variant: str | None = None) -> Scenario:
    """The scenario of one file (for a template: the variant ``variant``)."""
    path = Path(path)
    return _choose(load_all(path), str(path), variant)


def load_all(path: str | Path) -> tuple[Scenario, ...]:
    """Every scenario one file holds: itself, or each variant of a template."""
    path = Path(path)
    try:
        if path.exists() and not path.is_file():
            # A FIFO would block the open, a device (/dev/zero) never end.
            raise ScenarioError(f"{path}: not a regular file")
        with path.open("rb") as handle:
            # Read at most one byte past the limit: a huge file is never read into memory.
            raw = handle.read(LIMITS.file_bytes_max + 1)
        if len(raw) > LIMITS.file_bytes_max:
            raise ScenarioError(f"{path}: the file is larger than {LIMITS.file_bytes_max} "
                                "bytes (limit file_bytes_max)")
        # As text-mode reading did: universal newlines.
        text = raw.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read the scenario file: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"{path}: not UTF-8 text: {exc}") from None
    return loads_all(text, str(path))


def discover(paths: Iterable[str | Path]) -> tuple[Scenario, ...]:
    """Every scenario of the given files and directories (``*.toml``, recursive, sorted).

    A path that does not exist, an invalid file or two scenarios with one id are errors."""
    files: list[Path] = []
    seen: set[Path] = set()
    for given in paths:
        path = Path(given)
        if path.is_dir():
            found = sorted(p for p in path.rglob("*.toml") if p.is_file())
        elif path.is_file():
            found = [path]
        elif path.exists():
            raise ScenarioError(f"{path}: not a regular file or a directory")
        else:
            raise ScenarioError(f"{path}: no such scenario file or directory")
        for item in found:
            key = item.resolve()
            if key not in seen:
                seen.add(key)
                files.append(item)
    scenarios = [scenario for file in files for scenario in load_all(file)]
    by_id: dict[str, Scenario] = {}
    for scenario in scenarios:
        if scenario.id in by_id:
            raise ScenarioError(f"{scenario.file}: id: duplicate scenario id {scenario.id!r} "
                                f"(also in {by_id[scenario.id].file})")
        by_id[scenario.id] = scenario
    return tuple(scenarios)
