"""Chaos campaigns: random fault schedules over the scenarios, shrunk failures, regression files.

A campaign is (implementation, base scenarios, seed, budget). Guarantees of
:func:`run_campaign`:

* **What is drawn.** Each example is a :class:`Schedule`: one base scenario and 1–3 extra
  faults (crash, raise, delay, cancel, change_rules = "drop every rule, permission version
  + 1") on failpoints the base *reaches on the reference implementation*, at hit numbers the
  reference reached (learned by one plain run of each base, from its ``FAILPOINT`` events),
  never on a hit one of the base's own faults already uses, and at most one rule change per
  session (so every change installs a new, higher version). The base keeps its own faults.
  Every fault and ``concurrent_turn`` hold of the composed run is ``optional`` (also in
  the regression file): the drawn ones are exploratory, and they may divert the run from the path the base's own faults
  were planned on, which is no defect of the implementation (a planned fault that does not
  fire is an error only in the scenario as written, see ``harness.criteria.fault_coverage``).
* **The property.** The base with the schedule added runs against the implementation under
  the campaign seed; it holds when the run completed and no criterion failed or errored.
  A base that already fails without extra faults on the implementation is left out (and
  reported): chaos is about failures the faults reveal. When the implementation is the
  reference the hits were learned on, that plain run is the learning run; in-process
  implementations are run plainly base by base up front. An out-of-process implementation
  (crash mode ``process``, where a run costs a process) is run plainly only on the bases
  the search draws, once each: a drawn base that fails plainly is rejected (Hypothesis
  draws again; no example is spent on it) and reported as left out, so a campaign of 50
  schedules checks a few dozen bases, not all of them (that alone took minutes). Every
  schedule that runs still has a base that passes plainly; for an implementation on which
  every base passes (the reference as a process) the schedules are exactly those drawn
  up front; where some base fails, the draws differ from an up-front check's, and stay
  the same for the same seed.
* **Determinism.** One seed: Hypothesis is seeded with it (``@seed``), the example database
  is off, and every scenario run uses it as its run seed; so the same seed, bases and
  implementation try the same schedules in the same order and shrink to the same case.
  With ``jobs`` > 1 the schedules the search will draw are listed first (a search whose
  property only records them: a passing example changes nothing the next draw depends
  on) and run ahead in worker processes, batch by batch in draw order, up to the first
  batch with a failure; when all passed, that list is the campaign, else the search runs
  with their outcomes and goes on (shrinking) in this process: the same trials either way.
* **Shrinking.** Strategies are ordered so that Hypothesis' shrinker moves toward simpler
  cases: fewer faults (a list of 1–3), earlier bases, failpoints in lifecycle order, earlier
  hits, simpler actions (crash < raise < delay < cancel < change_rules), shorter delays.
  Each fault draws the same choices whatever its base and action, so lowering one keeps
  the others' meaning. Then every fault whose removal still fails is dropped, one at a
  time, until each remaining fault is needed. Outcomes are memoised per schedule, and at
  most ``max_shrink_runs`` new runs are spent on shrinking (after that a new candidate
  counts as passing), so shrinking is bounded and deterministic (Hypothesis also stops
  shrinking after five minutes; only a very slow implementation gets there). The shrunk
  case may fail other criteria than the first failing example (the smallest failure wins).
* **Regression file.** The shrunk failure is written atomically as a scenario TOML file in
  the regressions folder: the base file's content, its faults followed by the shrunk ones,
  id ``regression-<base-id>-<digest of base id + faults>``, and a comment header naming the
  failing criteria, the seed and the replay command. The file is loaded back with
  :func:`harness.scenarios.loader.load` and run again; :attr:`Failure.reproduced` says whether it
  failed the same criteria.

:func:`dumps_toml` writes the TOML subset scenario files use (tables, arrays of tables,
inline tables, arrays, strings, integers, floats, booleans); ``tomllib.loads(dumps_toml(d))
== d`` for any such data (NaN aside), and anything else is refused with a
:class:`ChaosError`. Hypothesis (the ``chaos`` or ``test`` extra) is imported only when a
campaign runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import math
import os
import re
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from harness.contract import Failpoint, Implementation, canonical_json
from harness.criteria.base import Criterion, Status
from harness.contract.errors import EXIT_CONFORMANCE_FAILURE, EXIT_OK, HarnessError, UsageError
from harness.faults.plan import Action, Fault, FaultPlan, make_fault, render
from harness.trace.record import Kind

if TYPE_CHECKING:
    from harness.scenarios.loader import Scenario

DEFAULT_BUDGET = 50
DEFAULT_MAX_SHRINK_RUNS = 200
DEFAULT_REGRESSIONS_DIR = os.path.join("scenarios", "regressions")
MAX_FAULTS = 3
ACTIONS: tuple[Action, ...] = (Action.CRASH, Action.RAISE, Action.DELAY, Action.CANCEL,
                               Action.CHANGE_RULES)
"""Drawable actions, simplest first (the shrinker moves toward the front)."""
DELAYS_S: tuple[float, ...] = (1.0, 60.0, 600.0, 3600.0)
"""Virtual seconds a delay fault may take, shortest first."""
HIT_PICKS = 64
"""A fault's hit is its base's free hits[pick % count], pick drawn in [0, HIT_PICKS)."""
SESSION_PICKS = 8
RUN_AHEAD_PER_JOB = 16
"""Schedules run ahead per worker in one batch (each batch forks its workers once; a batch
with a failure ends the running ahead, so at most one batch is run for nothing)."""
CHAOS_MESSAGE = "chaos: injected fault"
REGRESSION_TAGS = ("chaos", "regression")
_FAILPOINT_ORDER = {point.value: i for i, point in enumerate(Failpoint)}


class ChaosError(HarnessError):
    """The campaign cannot run as asked (missing Hypothesis, unwritable output, bad data)."""


# --------------------------------------------------------------------------- TOML writer

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f",
            "\r": "\\r"}
_INT_RANGE = (-(2 ** 63), 2 ** 63 - 1)
_LINE_WIDTH = 96


def _toml_error(where: str, problem: str) -> ChaosError:
    return ChaosError(f"TOML writer: {where or '<top>'}: {problem}; supported: tables, "
                      "arrays, strings, integers (64-bit), floats, booleans")


def _toml_string(text: str, where: str) -> str:
    out = []
    for ch in text:
        code = ord(ch)
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\u{code:04x}")
        elif 0xD800 <= code <= 0xDFFF:
            raise _toml_error(where, f"lone surrogate U+{code:04X} cannot be written as UTF-8")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _toml_key(key: Any, where: str) -> str:
    if not isinstance(key, str):
        raise _toml_error(where, f"key {key!r} is not a string")
    return key if _BARE_KEY.fullmatch(key) else _toml_string(key, where)


def _join_key(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _toml_value(value: Any, where: str, *, top: bool = False) -> str:
    """One value; arrays at a section's top level may span lines, nested ones never do."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if not _INT_RANGE[0] <= value <= _INT_RANGE[1]:
            raise _toml_error(where, f"integer {value} does not fit in 64 bits")
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return _toml_string(value, where)
    if isinstance(value, (list, tuple)):
        items = [_toml_value(item, f"{where}[{i}]") for i, item in enumerate(value)]
        one_line = "[" + ", ".join(items) + "]"
        if not top or len(one_line) <= _LINE_WIDTH:
            return one_line
        return "[\n" + "".join(f"  {item},\n" for item in items) + "]"
    if isinstance(value, Mapping):
        if not value:
            return "{}"
        parts = [f"{_toml_key(k, where)} = {_toml_value(v, _join_key(where, str(k)))}"
                 for k, v in value.items()]
        return "{ " + ", ".join(parts) + " }"
    raise _toml_error(where, f"cannot write a {type(value).__name__} ({value!r})")


def _is_table_array(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and bool(value) \
        and all(isinstance(item, Mapping) for item in value)


def dumps_toml(data: Mapping[str, Any]) -> str:
    """TOML text for ``data`` (see the module docstring for the subset and the guarantee).

    Top-level scalars and arrays come first, then ``[table]`` sections, then ``[[array]]``
    sections; everything below a section is written inline."""
    if not isinstance(data, Mapping):
        raise _toml_error("", f"the document must be a table, got {type(data).__name__}")
    head: list[str] = []
    sections: list[str] = []
    arrays: list[str] = []
    for key, value in data.items():
        name = _toml_key(key, str(key))
        if isinstance(value, Mapping):
            sections.append(f"\n[{name}]\n" + _toml_body(value, str(key)))
        elif _is_table_array(value):
            for i, item in enumerate(value):
                arrays.append(f"\n[[{name}]]\n" + _toml_body(item, f"{key}[{i}]"))
        else:
            head.append(f"{name} = {_toml_value(value, str(key), top=True)}\n")
    return "".join(head) + "".join(sections) + "".join(arrays)


def _toml_body(table: Mapping[str, Any], where: str) -> str:
    return "".join(
        f"{_toml_key(k, where)} = {_toml_value(v, _join_key(where, str(k)), top=True)}\n"
        for k, v in table.items()
    )


# --------------------------------------------------------------------------- values


@dataclass(frozen=True, slots=True)
class Base:
    """A base scenario, its file's TOML data, and where chaos faults may go."""

    scenario: Scenario
    raw: Mapping[str, Any] = dataclasses.field(repr=False)
    hits: tuple[tuple[str, tuple[int, ...]], ...]
    """Failpoint (lifecycle order) → hits the reference reached that no base fault uses."""
    next_versions: tuple[tuple[str, int], ...]
    """Session → the permission version a change_rules fault installs (highest seen + 1)."""

    @property
    def id(self) -> str:
        return self.scenario.id

    @property
    def sessions(self) -> tuple[str, ...]:
        return tuple(session for session, _ in self.next_versions)


@dataclass(frozen=True, slots=True)
class Schedule:
    """One drawn example: a base scenario and the chaos faults laid over it."""

    base_id: str
    faults: tuple[Fault, ...]

    def key(self) -> str:
        return canonical_json([self.base_id, [_fault_table(f) for f in self.faults]])

    def digest(self) -> str:
        return hashlib.sha256(self.key().encode("utf-8")).hexdigest()[:10]

    def brief(self) -> str:
        return f"{self.base_id}: " + "; ".join(_brief_fault(f) for f in self.faults)


@dataclass(frozen=True, slots=True)
class Outcome:
    failing: tuple[str, ...]
    """Criterion ids that failed or errored."""
    error: str
    """The run's error, or why it did not complete ("" if it completed)."""
    notes: tuple[str, ...]
    """One line per failing criterion: ``ID: first evidence note``."""
    trace_digest: str

    @property
    def failed(self) -> bool:
        return bool(self.failing or self.error)

    def brief(self) -> str:
        if not self.failed:
            return "ok"
        parts = []
        if self.failing:
            parts.append("FAIL " + ", ".join(self.failing))
        if self.error:
            parts.append("ERROR " + self.error.splitlines()[0][:120])
        return "; ".join(parts)


@dataclass(frozen=True, slots=True)
class Trial:
    """One call of the property: a schedule and what came of it."""

    number: int
    phase: str
    """"generate" or "shrink"."""
    schedule: Schedule
    outcome: Outcome | None
    """None: a new shrink candidate after the shrink budget was spent (counted as passing)."""
    cached: bool
    duration_s: float
    """Wall clock of the run (0 when cached; in its worker when run ahead); for progress
    only."""


@dataclass(frozen=True, slots=True)
class SkippedBase:
    scenario_id: str
    file: str
    reason: str


@dataclass(frozen=True, slots=True)
class LearnedBase:
    """Progress while the bases are prepared: one usable base and its free failpoint hits."""

    index: int
    total: int
    scenario_id: str
    failpoints: int
    hits: int


@dataclass(frozen=True, slots=True)
class RunAhead:
    """Progress while the drawn schedules run ahead in worker processes (``jobs`` > 1): the
    distinct schedules run so far, of all drawn."""

    done: int
    total: int
    jobs: int


@dataclass(frozen=True, slots=True)
class Failure:
    schedule: Schedule
    outcome: Outcome
    regression_file: str
    replay: str
    reproduced: bool
    """The regression file, loaded back and run again, failed the same criteria."""
    replay_outcome: Outcome


@dataclass(frozen=True, slots=True)
class CampaignResult:
    seed: int
    budget: int
    bases: tuple[str, ...]
    skipped: tuple[SkippedBase, ...]
    trials: tuple[Trial, ...]
    failure: Failure | None

    @property
    def examples(self) -> int:
        """Examples tried before a failure was found (or in all, if none was)."""
        return sum(1 for t in self.trials if t.phase == "generate")

    @property
    def runs(self) -> int:
        """Scenario runs actually made for schedules (memoised repeats excluded)."""
        return sum(1 for t in self.trials if t.outcome is not None and not t.cached)


# --------------------------------------------------------------------------- faults


def _fault_table(fault: Fault) -> dict[str, Any]:
    """A fault as a ``[[faults]]`` table (what the scenario loader reads back)."""
    table: dict[str, Any] = {"failpoint": fault.failpoint.value, "hits": fault.hits,
                             "action": fault.action.value}
    table.update(fault.params)
    if fault.optional:
        table["optional"] = True
    return table


def _brief_fault(fault: Fault) -> str:
    text = f"{fault.failpoint.value}#{fault.hits} {fault.action.value}"
    params = fault.params
    if fault.action is Action.DELAY:
        text += f" {params['seconds']:g}s"
    elif fault.action is Action.CANCEL:
        text += f" {params['session']}"
    elif fault.action is Action.CHANGE_RULES:
        text += f" {params['session']} v{params['permission_version']}"
    return text


def _hit_key(fault: Fault) -> tuple[str, str]:
    return (fault.failpoint.value, fault.hits)


def _rule_change_key(fault: Fault) -> tuple[str, str]:
    if fault.action is Action.CHANGE_RULES:
        return ("change_rules", fault.params["session"])
    return _hit_key(fault)


def _fault_order(fault: Fault) -> tuple[int, int, str]:
    return (_FAILPOINT_ORDER[fault.failpoint.value], fault.schedule.hits[0], fault.action.value)


def chaos_fault(base: Base, failpoint: str, hit: int, action: Action,
                seconds: float = DELAYS_S[0], session: str = "") -> Fault:
    """The chaos fault ``action`` at ``hit`` of ``failpoint`` for ``base`` (validated)."""
    session = session or base.sessions[0]
    params: dict[str, Any] = {}
    if action is Action.RAISE:
        params = {"message": CHAOS_MESSAGE}
    elif action is Action.DELAY:
        params = {"seconds": float(seconds)}
    elif action is Action.CANCEL:
        params = {"session": session}
    elif action is Action.CHANGE_RULES:
        params = {"session": session, "rules": [],
                  "permission_version": dict(base.next_versions)[session]}
    elif action is not Action.CRASH:
        raise ChaosError(f"chaos_fault: action {action.value!r} is not drawn by campaigns "
                         f"(valid: {', '.join(a.value for a in ACTIONS)})")
    return make_fault(failpoint, str(hit), action.value, params, where="chaos", optional=True)


def with_faults(base: Scenario, faults: Sequence[Fault]) -> Scenario:
    """``base`` with ``faults`` added after its own (validated as one plan), every fault
    optional: the drawn faults are exploratory, and they may divert the run from the path
    the base's own faults were planned on (a cancel before the tool runs leaves a crash
    after it unreached) without any defect of the implementation."""
    own = tuple(dataclasses.replace(f, optional=True) for f in base.faults)
    plan = FaultPlan(own + tuple(dataclasses.replace(f, optional=True) for f in faults))
    steps = tuple(dataclasses.replace(s, optional=True) if s.do == "concurrent_turn" else s
                  for s in base.steps)  # a drawn crash may end instance A before its hold
    return dataclasses.replace(base, faults=plan.faults, steps=steps)


# --------------------------------------------------------------------------- judging

Runner = Callable[..., Any]


def judge(run: Any, criteria: Sequence[Criterion]) -> Outcome:
    """The property's verdict on one scenario run (a ``runner.ScenarioRun``)."""
    from harness.report.text import evidence_line
    from harness.running.suite import evaluate
    from harness.trace.record import trace_digest

    verdicts = evaluate(criteria, run.trace)
    bad = [v for v in verdicts if v.status in (Status.FAIL, Status.ERROR)]
    error = run.error or ("" if run.trace.completed
                          else (run.trace.error or "the run did not complete"))
    notes = tuple(
        f"{v.criterion_id}: " + (evidence_line(v.evidence[0]) if v.evidence else v.status.value)
        for v in bad
    )
    return Outcome(tuple(v.criterion_id for v in bad), error, notes, trace_digest(run.trace))


def _reached_hits(run: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for event in run.trace.of_kind(Kind.FAILPOINT):
        name = event.data["name"]
        counts[name] = counts.get(name, 0) + 1
    for name in run.failpoints_reached:
        counts.setdefault(name, 0)
    return counts


def _next_versions(scenario: Scenario) -> tuple[tuple[str, int], ...]:
    from harness.scenarios.loader import StepKind

    highest = {s.session_id: s.permission_version for s in scenario.sessions}
    for step in scenario.steps:
        if step.do is StepKind.UPDATE_RULES and step.session in highest:
            highest[step.session] = max(highest[step.session], step.permission_version)
    for fault in scenario.faults:
        if fault.action is Action.CHANGE_RULES and fault.params.get("session") in highest:
            session = fault.params["session"]
            highest[session] = max(highest[session], int(fault.params["permission_version"]))
    return tuple((session, version + 1) for session, version in highest.items())


def read_raw(scenario: Scenario) -> dict[str, Any]:
    """The parsed TOML of the file ``scenario`` was loaded from."""
    try:
        with open(scenario.file, "rb") as handle:
            data = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ChaosError(f"{scenario.file}: cannot read base scenario {scenario.id!r} "
                         f"again: {exc}; chaos bases must be scenario files on disk") from None
    variant = getattr(scenario, "variant", "")
    if not variant:
        return data
    # A template's variant is written out expanded: a regression file is one plain scenario.
    from harness.scenarios.matrix import expand

    for candidate in expand(data, scenario.file):
        if candidate.key == variant:
            return candidate.data
    raise ChaosError(f"{scenario.file}: variant {variant!r} of {scenario.id!r} is gone")


def make_base(scenario: Scenario, reference_run: Any, raw: Mapping[str, Any] | None = None
              ) -> Base:
    """A :class:`Base` from the scenario and its plain run on the reference."""
    plan = scenario.plan
    hits = []
    counts = _reached_hits(reference_run)
    for name in sorted(counts, key=lambda n: _FAILPOINT_ORDER.get(n, len(_FAILPOINT_ORDER))):
        if name not in _FAILPOINT_ORDER:
            continue
        free = tuple(h for h in range(1, counts[name] + 1) if plan.fault_at(name, h) is None)
        if free:
            hits.append((name, free))
    return Base(scenario, read_raw(scenario) if raw is None else raw, tuple(hits),
                _next_versions(scenario))


# --------------------------------------------------------------------------- strategies


def require_hypothesis() -> Any:
    try:
        import hypothesis
    except ImportError:
        raise ChaosError("the chaos command needs Hypothesis, which is not installed; "
                         "install it with: pip install 'lifecycle-harness[chaos]'") from None
    return hypothesis


def schedules(bases: Sequence[Base], usable: Callable[[str], bool] | None = None) -> Any:
    """The Hypothesis strategy of :class:`Schedule` over ``bases`` (see the module doc);
    ``usable(base id)`` False rejects a drawn base (the example is drawn again).

    Every fault draws the same five choices whatever its base and action (lifecycle
    position, hit pick, action, delay, session pick), so that when the shrinker lowers one of
    them the others keep their meaning: position 0 is the base's earliest reached failpoint,
    hit pick 0 its first free hit, and so on."""
    st = require_hypothesis().strategies

    def faults_of(base: Base) -> Any:
        hits = dict(base.hits)
        orders = [(_FAILPOINT_ORDER[name], name) for name, _ in base.hits]

        @st.composite
        def one(draw: Any) -> Fault:
            position = draw(st.integers(0, len(_FAILPOINT_ORDER) - 1))
            hit_pick = draw(st.integers(0, HIT_PICKS - 1))
            action = draw(st.sampled_from(ACTIONS))
            seconds = draw(st.sampled_from(DELAYS_S))
            session_pick = draw(st.integers(0, SESSION_PICKS - 1))
            # the first reached failpoint at or after that lifecycle position (else the first)
            point = next((name for order, name in orders if order >= position), orders[0][1])
            hit = hits[point][hit_pick % len(hits[point])]
            session = base.sessions[session_pick % len(base.sessions)]
            return chaos_fault(base, point, hit, action, seconds, session)

        # One fault per hit; at most one rule change per session (two would install the
        # same version twice, or two versions in an order the schedule cannot fix).
        return st.lists(one(), min_size=1, max_size=MAX_FAULTS,
                        unique_by=(_hit_key, _rule_change_key))

    # One strategy per base, built at its first draw: Hypothesis reads and parses the
    # source of a composite when it is built (about 4 ms), once per schedule before.
    built: dict[int, Any] = {}

    @st.composite
    def schedule(draw: Any) -> Schedule:
        index = draw(st.integers(0, len(bases) - 1))
        base = bases[index]
        if usable is not None and not usable(base.id):
            require_hypothesis().reject()
        if index not in built:
            built[index] = faults_of(base)
        faults = draw(built[index])
        return Schedule(base.id, tuple(sorted(faults, key=_fault_order)))

    return schedule()


# --------------------------------------------------------------------------- regression files


def regression_id(schedule: Schedule) -> str:
    return f"regression-{schedule.base_id}-{schedule.digest()}"


def _comment(text: str) -> str:
    """One comment line: line breaks become spaces, leading indentation stays."""
    return " ".join(str(text).splitlines()).rstrip()


def regression_text(base: Base, schedule: Schedule, outcome: Outcome, *, seed: int,
                    replay: str, impl_spec: str, command: str = "") -> str:
    """The regression scenario file: a comment header, then the base with the faults added."""
    raw = dict(base.raw)
    tags = list(raw.get("tags", ()))
    tags += [t for t in REGRESSION_TAGS if t not in tags]
    data: dict[str, Any] = {
        "id": regression_id(schedule),
        "stage": raw.get("stage", base.scenario.stage),
        "title": f"Chaos regression of {base.id}: " + "; ".join(
            _brief_fault(f) for f in schedule.faults),
        "tags": tags,
    }
    # Optional here too, for the reason with_faults gives: the regression replays the
    # composed run, whose base faults the chaos ones may divert.
    faults = [{**table, "optional": True} for table in raw.get("faults", ())] + [
        _fault_table(f) for f in schedule.faults]
    if "steps" in raw:
        raw["steps"] = [{**step, "optional": True} if step.get("do") == "concurrent_turn" else step
                        for step in raw["steps"]]
    for key, value in raw.items():
        if key in ("faults", "steps") and "faults" not in data:
            data["faults"] = faults  # where the base had them, else just before the steps
        if key not in data:
            data[key] = value
    data.setdefault("faults", faults)
    own = len(raw.get("faults", ()))
    header = [
        "Chaos regression written by `lifecycle-harness chaos` (a shrunk failing case).",
        f"Base scenario: {base.id} ({_display(base.scenario.file)}).",
        ("The last [[faults]] entry is" if len(schedule.faults) == 1 else
         f"The last {len(schedule.faults)} [[faults]] entries are")
        + " the shrunk chaos schedule" + (f" (after the base's own {own})." if own else ":"),
        *(f"  {line}" for line in render(schedule.faults)),
        "Failing: " + (", ".join(outcome.failing) or "no criterion")
        + (f"; run error: {outcome.error.splitlines()[0]}" if outcome.error else ""),
        *(f"  {shorten(note)}" for note in outcome.notes),
        f"Seed: {seed} (campaign and run seed); implementation: {impl_spec}",
        *([f"Found by: {command}"] if command else []),
        f"Replay: {replay}",
    ]
    text = "".join(f"# {_comment(line)}\n" for line in header)
    return text + "\n" + dumps_toml(data)


def shorten(text: str, width: int = 160) -> str:
    text = _comment(text)
    return text if len(text) <= width else text[: width - 1] + "…"


def _display(path: str) -> str:
    from harness.running.suite import display_path

    return display_path(path)


# --------------------------------------------------------------------------- the campaign


class _Counterexample(Exception):
    def __init__(self, schedule: Schedule, outcome: Outcome) -> None:
        super().__init__(f"{schedule.brief()} -> {outcome.brief()}")
        self.schedule = schedule
        self.outcome = outcome


Progress = Callable[[Any], None]
"""Called with each :class:`LearnedBase` or :class:`SkippedBase`, then (``jobs`` > 1) each
:class:`RunAhead`, then each :class:`Trial`."""


def prepare_bases(implementation: Implementation, scenarios: Sequence[Scenario], seed: int, *,
                  reference: Implementation | None = None, criteria: Sequence[Criterion],
                  runner: Runner, time_limit_s: float, progress: Progress | None = None,
                  jobs: int = 1, executor: Any = None, check_plainly: bool = True
                  ) -> tuple[tuple[Base, ...], tuple[SkippedBase, ...]]:
    """Learn each scenario's reachable hits on the reference; keep the bases that reach at
    least one failpoint and pass plainly on the reference (the implementation itself when
    ``reference`` is None or it) and, with ``check_plainly``, on the implementation too
    (without it, the caller checks that base by base: see the module doc). ``jobs`` > 1
    learns them in the worker pool (:mod:`harness.running.parallel`), an ``executor`` on its
    workers (:mod:`harness.campaigns.executor`); the bases, their order and so the campaign
    are the same; a base whose worker died is skipped with the cause."""
    from harness.campaigns.executor import LocalPool
    from harness.running.parallel import CaseFailure

    bases: list[Base] = []
    skipped: list[SkippedBase] = []
    reference = implementation if reference is None else reference

    def learn(index: int) -> tuple[Base, Outcome]:
        scenario = scenarios[index]
        learned = runner(reference, scenario, seed, time_limit_s=time_limit_s, data_root=None)
        plain = learned if reference is implementation or not check_plainly else runner(
            implementation, scenario, seed, time_limit_s=time_limit_s, data_root=None)
        return make_base(scenario, learned), judge(plain, criteria)

    executor = LocalPool(jobs) if executor is None else executor
    learned_all = executor.run(learn, len(scenarios))
    for index, (scenario, item) in enumerate(zip(scenarios, learned_all), start=1):
        if isinstance(item, CaseFailure):
            lost = SkippedBase(scenario.id, _display(scenario.file),
                               f"worker process: {item.cause}")
            skipped.append(lost)
            if progress:
                progress(lost)
            continue
        base, outcome = item
        reason = ""
        if outcome.failed:
            where = "" if check_plainly or reference is implementation else " on the reference"
            reason = (f"already fails without chaos faults{where} ({outcome.brief()}); see "
                      "`lifecycle-harness run`")
        elif not base.hits:
            reason = "reaches no failpoint hit free for a chaos fault on the reference"
        if reason:
            item = SkippedBase(scenario.id, _display(scenario.file), reason)
            skipped.append(item)
            if progress:
                progress(item)
        else:
            bases.append(base)
            if progress:
                progress(LearnedBase(index, len(scenarios), scenario.id, len(base.hits),
                                     sum(len(h) for _, h in base.hits)))
    return tuple(bases), tuple(skipped)


def run_campaign(
    implementation: Implementation,
    scenarios: Sequence[Scenario],
    *,
    seed: int = 0,
    budget: int = DEFAULT_BUDGET,
    impl_spec: str = "reference",
    reference: Implementation | None = None,
    regressions_dir: str | os.PathLike[str] = DEFAULT_REGRESSIONS_DIR,
    time_limit_s: float = 20.0,
    criteria: Sequence[Criterion] | None = None,
    runner: Runner | None = None,
    progress: Progress | None = None,
    max_shrink_runs: int = DEFAULT_MAX_SHRINK_RUNS,
    command: str = "",
    jobs: int = 1,
    executor: Any = None,
) -> CampaignResult:
    """Run one campaign (see the module docstring); write the regression file on a failure.
    ``executor`` (default: ``jobs`` local worker processes) runs the cases ahead of the search
    (:mod:`harness.campaigns.executor`).

    ``reference`` (default: the implementation itself) is where reachable hits are learned;
    ``criteria`` defaults to the catalogue, ``runner`` to ``harness.running.runner.run_scenario``."""
    from harness.campaigns.executor import LocalPool
    from harness.running.suite import default_criteria, default_runner, replay_command

    hypothesis = require_hypothesis()
    executor = LocalPool(jobs) if executor is None else executor
    if budget < 1:
        raise ChaosError(f"budget {budget}: a campaign needs at least 1 example")
    criteria = tuple(default_criteria() if criteria is None else criteria)
    runner = default_runner() if runner is None else runner
    # An out-of-process run costs a process: its bases are checked plainly as drawn.
    deferred = (reference is not None and reference is not implementation
                and getattr(implementation, "crash_mode", "") == "process")
    bases, skipped_up_front = prepare_bases(
        implementation, scenarios, seed, reference=reference, criteria=criteria, runner=runner,
        time_limit_s=time_limit_s, progress=progress, executor=executor,
        check_plainly=not deferred)
    skipped = list(skipped_up_front)
    if not bases:
        return CampaignResult(seed, budget, (), tuple(skipped), (), None)
    by_id = {base.id: base for base in bases}
    plain: dict[str, bool] = {}
    """Base id -> whether it passes plainly on the implementation (deferred mode)."""

    def run_plainly(base_id: str) -> Outcome:
        return judge(runner(implementation, by_id[base_id].scenario, seed,
                            time_limit_s=time_limit_s, data_root=None), criteria)

    def note_plain(base_id: str, outcome: Outcome) -> None:
        plain[base_id] = not outcome.failed
        if outcome.failed:
            lost = SkippedBase(base_id, _display(by_id[base_id].scenario.file),
                               f"already fails without chaos faults ({outcome.brief()}); see "
                               "`lifecycle-harness run`")
            skipped.append(lost)
            if progress:
                progress(lost)

    def usable(base_id: str) -> bool:
        if base_id not in plain:
            note_plain(base_id, run_plainly(base_id))
        return plain[base_id]

    cache: dict[str, Outcome] = {}
    trials: list[Trial] = []
    state = {"found": False, "shrink_runs": 0}

    def run_one(schedule: Schedule) -> tuple[Outcome, float]:
        started = time.monotonic()
        scenario = with_faults(by_id[schedule.base_id].scenario, schedule.faults)
        run = runner(implementation, scenario, seed, time_limit_s=time_limit_s, data_root=None)
        return judge(run, criteria), time.monotonic() - started

    def result(failure: Failure | None = None) -> CampaignResult:
        kept = tuple(b.id for b in bases if plain.get(b.id, True))
        return CampaignResult(seed, budget, kept, tuple(skipped), tuple(trials), failure)

    def note(trial: Trial) -> None:
        trials.append(trial)
        if progress:
            progress(trial)

    def attempt(schedule: Schedule) -> Outcome | None:
        key = schedule.key()
        phase = "shrink" if state["found"] else "generate"
        outcome, cached, took = cache.get(key), True, 0.0
        if outcome is None:
            cached = False
            if phase == "generate" or state["shrink_runs"] < max_shrink_runs:
                state["shrink_runs"] += phase == "shrink"
                # a schedule run ahead in a worker counts as run here, as it would have been
                outcome, took = prefetched.pop(key, None) or run_one(schedule)
                cache[key] = outcome
        note(Trial(len(trials) + 1, phase, schedule, outcome, cached, took))
        return outcome

    def prop(schedule: Schedule) -> None:
        outcome = attempt(schedule)
        if outcome is not None and outcome.failed:
            state["found"] = True
            raise _Counterexample(schedule, outcome)

    settings = hypothesis.settings(
        # Hypothesis' built-in defaults, not whatever profile the caller's process loaded
        parent=hypothesis.settings.get_profile("default"),
        max_examples=budget,
        database=None,
        derandomize=False,  # the explicit @seed below is the one source of randomness
        deadline=None,
        phases=(hypothesis.Phase.generate, hypothesis.Phase.shrink),
        suppress_health_check=list(hypothesis.HealthCheck),
        report_multiple_bugs=False,
        print_blob=False,
        verbosity=hypothesis.Verbosity.quiet,
    )
    prefetched: dict[str, tuple[Outcome, float]] = {}
    if executor.width > 1 or not isinstance(executor, LocalPool):
        drawn = _drawn_schedules(hypothesis, settings, bases, seed,
                                 _CheckDrawn(plain, run_plainly, note_plain, executor.width)
                                 if deferred else None)
        prefetched = _run_ahead(drawn, run_one, executor, progress)
        if all(s.key() in prefetched and not prefetched[s.key()][0].failed for s in drawn):
            # Every example passed: the search below would draw exactly these, in this
            # order, and call each once (a repeat is a cached trial), so this is its result.
            for schedule in drawn:
                key = schedule.key()
                outcome, took = prefetched.pop(key, None) or (cache[key], None)
                cached = took is None
                cache[key] = outcome
                note(Trial(len(trials) + 1, "generate", schedule, outcome, cached, took or 0.0))
            return result()
    strategy = schedules(bases, usable if deferred else None)
    test = hypothesis.seed(seed)(settings(hypothesis.given(strategy)(prop)))
    try:
        test()
    except hypothesis.errors.Unsatisfiable:  # every base drawn fails plainly
        return result()
    except _Counterexample as found:
        schedule, outcome = _drop_needless_faults(found.schedule, found.outcome, attempt)
        failure = _record_failure(by_id[schedule.base_id], schedule, outcome,
                                  implementation=implementation, seed=seed, impl_spec=impl_spec,
                                  regressions_dir=regressions_dir, criteria=criteria,
                                  runner=runner, time_limit_s=time_limit_s, command=command,
                                  replay_command=replay_command)
        return result(failure)
    except hypothesis.errors.Flaky as exc:  # the same schedule passed and failed
        raise ChaosError(f"the implementation is not deterministic: a failing schedule passed "
                         f"when run again ({exc}); check it with `lifecycle-harness run "
                         f"--check-determinism --impl {impl_spec}`") from None
    return result()


class _CheckDrawn:
    """For :func:`_drawn_schedules` of a deferred campaign: ``usable`` answering what
    ``plain`` knows and, for a base it does not know yet, True while noting it; :meth:`check`
    runs the noted bases plainly in ``jobs`` workers, and the caller draws again until every
    drawn base is known (each round adds at least one; a base found failing changes the
    later draws)."""

    def __init__(self, plain: dict[str, bool], run_plainly: Callable[[str], Outcome],
                 note_plain: Callable[[str, Outcome], None], jobs: int) -> None:
        self.plain, self.run_plainly, self.note_plain, self.jobs = (
            plain, run_plainly, note_plain, jobs)
        self.unknown: list[str] = []

    def __call__(self, base_id: str) -> bool:
        known = self.plain.get(base_id)
        if known is None:
            if base_id not in self.unknown:
                self.unknown.append(base_id)
            return True
        return known

    def check(self) -> bool:
        """Check the bases noted since the last call in the pool; False if there were none."""
        from harness.running.parallel import CaseFailure, run_cases

        wanted, self.unknown = self.unknown, []
        outcomes = run_cases(lambda i: self.run_plainly(wanted[i]), len(wanted),
                             jobs=self.jobs, reuse_workers=True)
        for base_id, item in zip(wanted, outcomes):
            if isinstance(item, CaseFailure):  # the search checks it itself
                self.note_plain(base_id, self.run_plainly(base_id))
            else:
                self.note_plain(base_id, item)
        return bool(wanted)


def _drawn_schedules(hypothesis: Any, settings: Any, bases: Sequence[Base], seed: int,
                     check: _CheckDrawn | None = None) -> tuple[Schedule, ...]:
    """The examples the campaign's search draws, in order, when every one of them passes.

    Hypothesis draws each example from its seeded random stream and from what the earlier
    examples drew; a passing example's outcome adds nothing else (no targeting, no
    coverage phase, health checks off, no deadline), so a search whose property records the
    schedule and passes draws what the real search draws up to its first failure."""
    while True:
        drawn: list[Schedule] = []

        def record(schedule: Schedule) -> None:
            drawn.append(schedule)

        try:
            hypothesis.seed(seed)(settings(hypothesis.given(schedules(bases, check))(record)))()
        except hypothesis.errors.Unsatisfiable:
            drawn = []
        if check is None or not check.check():
            return tuple(drawn)


def _run_ahead(drawn: Sequence[Schedule], run_one: Callable[[Schedule], tuple[Outcome, float]],
               executor: Any, progress: Progress | None = None
               ) -> dict[str, tuple[Outcome, float]]:
    """The outcome and wall-clock seconds of each distinct schedule of ``drawn``, run by the
    ``executor``'s workers in batches in draw order, stopping after the first batch in
    which one failed (the search stops at its first failure; what it would not have run is
    not run). A schedule whose worker died is left out: the search runs it itself, as it
    would have without workers."""
    from harness.running.parallel import CaseFailure

    distinct = list({schedule.key(): schedule for schedule in drawn}.values())
    found: dict[str, tuple[Outcome, float]] = {}
    batch = RUN_AHEAD_PER_JOB * executor.width
    for start in range(0, len(distinct), batch):
        chunk = distinct[start:start + batch]
        outcomes = executor.run(lambda i: run_one(chunk[i]), len(chunk))
        failed = False
        for schedule, item in zip(chunk, outcomes):
            if isinstance(item, CaseFailure):
                continue
            found[schedule.key()] = item
            failed = failed or item[0].failed
        if progress:
            progress(RunAhead(start + len(chunk), len(distinct), executor.width))
        if failed:
            break
    return found


def _drop_needless_faults(schedule: Schedule, outcome: Outcome,
                          attempt: Callable[[Schedule], Outcome | None]
                          ) -> tuple[Schedule, Outcome]:
    """Hypothesis' shrinker can stop with a fault whose removal still fails; remove such
    faults one at a time (first first) until every remaining one is needed."""
    progress = True
    while progress and len(schedule.faults) > 1:
        progress = False
        for i in range(len(schedule.faults)):
            fewer = Schedule(schedule.base_id, schedule.faults[:i] + schedule.faults[i + 1:])
            again = attempt(fewer)
            if again is not None and again.failed:
                schedule, outcome, progress = fewer, again, True
                break
    return schedule, outcome


def _record_failure(base: Base, schedule: Schedule, outcome: Outcome, *,
                    implementation: Implementation, seed: int, impl_spec: str,
                    regressions_dir: str | os.PathLike[str], criteria: Sequence[Criterion],
                    runner: Runner, time_limit_s: float, command: str,
                    replay_command: Callable[[str, int, str], str]) -> Failure:
    path = Path(regressions_dir) / f"{regression_id(schedule)}.toml"
    replay = replay_command(os.fspath(path), seed, impl_spec)
    text = regression_text(base, schedule, outcome, seed=seed, replay=replay,
                           impl_spec=impl_spec, command=command)
    reproduced, again = write_and_rerun(path, text, outcome, implementation=implementation,
                                        seed=seed, criteria=criteria, runner=runner,
                                        time_limit_s=time_limit_s)
    return Failure(schedule, outcome, _display(os.fspath(path)), replay, reproduced, again)


def write_and_rerun(path: Path, text: str, outcome: Outcome, *, implementation: Implementation,
                    seed: int, criteria: Sequence[Criterion], runner: Runner,
                    time_limit_s: float) -> tuple[bool, Outcome]:
    """Write a regression scenario file atomically, load it back and run it again: whether
    it failed as ``outcome`` did (the same criteria, an error or not), and how it ended."""
    from harness.report.atomic import write_text
    from harness.scenarios.loader import load

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, text)
    except OSError as exc:
        raise ChaosError(f"cannot write the regression file {os.fspath(path)!r}: "
                         f"{exc.strerror or exc}; choose a writable --regressions-dir") from None
    scenario = load(path)
    run = runner(implementation, scenario, seed, time_limit_s=time_limit_s, data_root=None)
    again = judge(run, criteria)
    reproduced = again.failed and again.failing == outcome.failing \
        and bool(again.error) == bool(outcome.error)
    return reproduced, again


def default_bases(ctx: Any) -> tuple[Scenario, ...]:
    """The bundled scenarios, without the regression files earlier campaigns wrote."""
    root = ctx.deps.default_scenario_dir()
    regressions = os.path.abspath(os.path.join(root, "regressions")) + os.sep
    found = ctx.deps.discover([root])
    return tuple(s for s in found if not os.path.abspath(s.file).startswith(regressions))
