"""Failpoints and fault plans: which failpoint, on which hits, does what. Faults are data.

Guarantees:

* :data:`CATALOGUE` lists every failpoint of :class:`harness.contract.Failpoint` with its
  description; nothing else is a valid failpoint name;
* a :class:`Fault` is frozen and validated on construction; its ``hits`` is kept in the
  canonical form of the hit numbers it fires on (``"1"``, ``"1,3"``, ``"3+"`` = every hit
  from the third on), whatever form it was written in:

  - ``"3"`` or ``"1,3"``: those hits (1-based, counted per failpoint over the whole run);
  - fail-rs-like chains ``"2*off->1*crash"``: each term ``[N*]STATE`` with STATE ``off``,
    ``on`` or the fault's own action name; a term without ``N*`` lasts forever; after the
    last counted term the fault is off. ``"2*off->1*crash"`` fires on hit 3 only;
    ``"2*off->crash"`` on every hit from 3 on;

* ``fail_checkpoint`` is shorthand for ``raise`` at ``during_checkpoint_build`` and is
  stored in that form; two faults of a plan never fire on the same hit of one failpoint;
* :func:`render` gives one readable line per fault (printed at the start of every run);
* a fault is required unless ``optional``: a required fault must fire on every hit it
  lists and at least once in an ``N+`` range, or the run is an error
  (:mod:`harness.criteria.fault_coverage` judges that from the trace).

Validation errors are :class:`~harness.contract.errors.ScenarioError` naming the field (prefixed by the
caller's ``where``) and the valid choices. The actions themselves are carried out by the
world (crash, raise, delay) and the runner (change_rules, cancel, hold).
"""

from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from harness.contract import FAILPOINT_DESCRIPTIONS, ContractError, Failpoint, Rule, from_json, to_json
from harness.contract.errors import ScenarioError
from harness.contract.scenario_limits import LIMITS
from harness.trace.record import FaultSpec


@dataclass(frozen=True, slots=True)
class FailpointInfo:
    name: Failpoint
    description: str


CATALOGUE: tuple[FailpointInfo, ...] = tuple(
    FailpointInfo(point, FAILPOINT_DESCRIPTIONS[point]) for point in Failpoint
)


class Action(enum.StrEnum):
    CRASH = "crash"
    """The instance dies at the failpoint (SimulatedCrash); the runner restarts it."""
    RAISE = "raise"
    """An ordinary InjectedFault(message) is raised into the implementation."""
    DELAY = "delay"
    """The virtual clock advances by ``seconds``."""
    CHANGE_RULES = "change_rules"
    """The runner calls the live runtime's update_rules(session, rules, permission_version)."""
    CANCEL = "cancel"
    """The runner calls the live runtime's cancel(session)."""
    HOLD = "hold"
    """The instance is held there while a concurrent_turn step drives a second instance."""
    FAIL_CHECKPOINT = "fail_checkpoint"
    """Shorthand for ``raise`` at ``during_checkpoint_build`` (never stored as such)."""


# Parameters each action takes: name -> (type, required).
ACTION_PARAMS: dict[Action, dict[str, tuple[type, bool]]] = {
    Action.CRASH: {},
    Action.RAISE: {"message": (str, False)},
    Action.DELAY: {"seconds": (float, True)},
    Action.CHANGE_RULES: {"session": (str, True), "rules": (list, True),
                          "permission_version": (int, True)},
    Action.CANCEL: {"session": (str, True)},
    Action.HOLD: {},
    Action.FAIL_CHECKPOINT: {"message": (str, False)},
}

DEFAULT_RAISE_MESSAGE = "injected fault"
DEFAULT_CHECKPOINT_MESSAGE = "injected checkpoint build failure"


def _choices(values: Iterable[Any]) -> str:
    return ", ".join(str(v) for v in values)


def _error(where: str, problem: str) -> ScenarioError:
    return ScenarioError(f"{where}: {problem}" if where else problem)


# --------------------------------------------------------------------------- hit schedules


@dataclass(frozen=True, slots=True)
class HitSchedule:
    """The hits a fault fires on: the listed ones, and every hit from ``from_hit`` on."""

    hits: tuple[int, ...] = ()
    from_hit: int | None = None

    def fires(self, hit: int) -> bool:
        return hit in self.hits or (self.from_hit is not None and hit >= self.from_hit)

    def text(self) -> str:
        items = [str(h) for h in self.hits if self.from_hit is None or h < self.from_hit]
        if self.from_hit is not None:
            items.append(f"{self.from_hit}+")
        return ",".join(items) if items else "never"

    def overlaps(self, other: HitSchedule) -> bool:
        if self.from_hit is not None and other.from_hit is not None:
            return True
        # Sets, not fires(): a plan's pairwise check must stay linear in the listed hits.
        if set(self.hits) & set(other.hits):
            return True
        return any(other.fires(h) for h in self.hits if other.from_hit is not None) \
            or any(self.fires(h) for h in other.hits if self.from_hit is not None)


_CHAIN_TERM = re.compile(r"^(?:(\d+)\*)?([a-z_]+)$")
_LIST_ITEM = re.compile(r"^(\d+)(\+)?$")
HIT_MAX = LIMITS.count_max
"""No hit number, chain count or chain length beyond this (``count_max`` of the scenario
limits): a chain's hits are listed one by one, and no run reaches that many hits."""


def _hit_number(digits: str, where: str, text: str) -> int:
    """``digits`` as a number within HIT_MAX, without converting an absurdly long one."""
    if len(digits.lstrip("0")) > len(str(HIT_MAX)) or int(digits) > HIT_MAX:
        shown = digits if len(digits) <= 20 else f"a number of {len(digits)} digits"
        raise _error(where, f"{shown} in {text[:60]!r} exceeds the maximum hit number "
                            f"{HIT_MAX} (limit count_max)")
    return int(digits)


def parse_hits(text: str, action: str = "", where: str = "hits") -> HitSchedule:
    """Parse a hit expression (see the module docstring) into a :class:`HitSchedule`."""
    syntax = ('hit numbers like "1", "1,3" or "3+", or a chain like "2*off->1*on" '
              f'(states: off, on{", " + action if action else ""})')
    if not isinstance(text, str) or not text.strip():
        raise _error(where, f"expected a non-empty string: {syntax}")
    compact = text.replace(" ", "")
    if len(compact) > 1_000:
        raise _error(where, f"a hit expression of {len(compact)} characters; at most 1000")
    if "->" in compact or "*" in compact:
        position, hits = 0, []
        from_hit = None
        terms = compact.split("->")
        for i, term in enumerate(terms):
            match = _CHAIN_TERM.match(term)
            if match is None or match.group(2) not in ("off", "on", action or "on"):
                raise _error(where, f"bad term {term!r} in {text!r}: expected [N*]STATE; {syntax}")
            count, state = match.group(1), match.group(2)
            if count is None:
                if i != len(terms) - 1:
                    raise _error(where, f"term {term!r} without a count must come last in {text!r}")
                if state != "off":
                    from_hit = position + 1
                    if from_hit > HIT_MAX:
                        raise _error(where, f"the chain {text[:60]!r} starts firing at hit "
                                            f"{from_hit}; at most {HIT_MAX} (limit count_max)")
                break
            n = _hit_number(count, where, text)
            if n < 1:
                raise _error(where, f"count must be >= 1 in {term!r}")
            if position + n > HIT_MAX:
                raise _error(where, f"the chain {text[:60]!r} counts {position + n} hits or "
                                    f"more; at most {HIT_MAX} (limit count_max)")
            if state != "off":
                hits.extend(range(position + 1, position + n + 1))
            position += n
        schedule = HitSchedule(tuple(hits), from_hit)
    else:
        hits, from_hit = [], None
        for item in compact.split(","):
            match = _LIST_ITEM.match(item)
            if match is None or _hit_number(match.group(1), where, text) < 1:
                raise _error(where, f"bad hit {item[:40]!r} in {text[:60]!r}: {syntax}")
            if match.group(2):
                if from_hit is not None:
                    raise _error(where, f"only one 'N+' item is allowed in {text!r}")
                from_hit = int(match.group(1))
            else:
                hits.append(int(match.group(1)))
        schedule = HitSchedule(tuple(sorted(set(hits))), from_hit)
    if not schedule.hits and schedule.from_hit is None:
        raise _error(where, f"{text!r} never fires; {syntax}")
    return schedule


# --------------------------------------------------------------------------- faults


@dataclass(frozen=True, slots=True)
class Fault:
    """One fault: at ``failpoint``, on the hits of ``hits``, do ``action`` with ``params``.

    ``params`` are JSON data: ``message`` (raise), ``seconds`` (delay), ``session``,
    ``rules`` (list of Rule JSON objects) and ``permission_version`` (change_rules),
    ``session`` (cancel)."""

    failpoint: Failpoint
    hits: str
    action: Action
    params: dict[str, Any] = field(default_factory=dict)
    optional: bool = False
    """May legitimately not fire (the branch varies between correct implementations); a
    required fault that does not fire on each of its hits makes the run an error."""
    schedule: HitSchedule = field(default=HitSchedule(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        try:
            point = Failpoint(self.failpoint)
        except ValueError:
            raise _error("failpoint", f"{self.failpoint!r} is not a failpoint "
                         f"(valid: {_choices(Failpoint)})") from None
        try:
            action = Action(self.action)
        except ValueError:
            raise _error("action", f"{self.action!r} is not an action "
                         f"(valid: {_choices(Action)})") from None
        if action is Action.FAIL_CHECKPOINT:
            raise _error("action", "fail_checkpoint is shorthand; build the fault with "
                         "make_fault() (it becomes raise at during_checkpoint_build)")
        schedule = parse_hits(self.hits, action.value)
        object.__setattr__(self, "failpoint", point)
        object.__setattr__(self, "action", action)
        object.__setattr__(self, "hits", schedule.text())
        object.__setattr__(self, "schedule", schedule)

    def fires(self, hit: int) -> bool:
        return self.schedule.fires(hit)

    def rules(self) -> tuple[Rule, ...]:
        """The rules of a change_rules fault, as contract values."""
        return tuple(from_json(Rule, item) for item in self.params.get("rules", ()))

    def spec(self) -> FaultSpec:
        return FaultSpec(self.failpoint.value, self.action.value, self.hits, dict(self.params),
                         self.optional)


def make_fault(failpoint: str | None, hits: str, action: str, params: Mapping[str, Any] | None = None,
               *, where: str = "", optional: bool = False) -> Fault:
    """Validate and build one fault; errors name ``where`` + the field and the valid choices."""
    prefix = f"{where}." if where else ""
    params = dict(params or {})
    try:
        act = Action(action)
    except ValueError:
        raise _error(f"{prefix}action", f"{action!r} is not an action "
                     f"(valid: {_choices(Action)})") from None
    if act is Action.FAIL_CHECKPOINT and failpoint is None:
        failpoint = Failpoint.DURING_CHECKPOINT_BUILD.value
    if failpoint is None:
        raise _error(f"{prefix}failpoint", f"missing (valid: {_choices(Failpoint)})")
    try:
        point = Failpoint(failpoint)
    except ValueError:
        raise _error(f"{prefix}failpoint", f"{failpoint!r} is not a failpoint "
                     f"(valid: {_choices(Failpoint)})") from None
    if act is Action.FAIL_CHECKPOINT and point is not Failpoint.DURING_CHECKPOINT_BUILD:
        raise _error(f"{prefix}failpoint", "fail_checkpoint only applies at "
                     f"during_checkpoint_build, not {point.value}")
    allowed = ACTION_PARAMS[act]
    for name in params:
        if name not in allowed:
            raise _error(f"{prefix}{name}", f"not a parameter of action {act.value} "
                         f"(valid: {_choices(allowed) or 'none'})")
    for name, (kind, required) in allowed.items():
        if name not in params:
            if required:
                raise _error(f"{prefix}{name}", f"required by action {act.value}")
            continue
        value = params[name]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = params[name] = float(value)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise _error(f"{prefix}{name}", f"expected {kind.__name__}, got {value!r}")
    if act is Action.DELAY and not (math.isfinite(params["seconds"]) and params["seconds"] >= 0):
        raise _error(f"{prefix}seconds", f"must be a finite number >= 0, got {params['seconds']!r}")
    if act is Action.CHANGE_RULES:
        if params["permission_version"] < 1:
            raise _error(f"{prefix}permission_version", "must be >= 1")
        rules = []
        for i, item in enumerate(params["rules"]):
            try:
                rules.append(from_json(Rule, item, f"{prefix}rules[{i}]"))
            except ContractError as exc:
                raise _error("", f"{exc} (Rule fields: effect, tool, pattern, field)") from None
        params["rules"] = to_json(tuple(rules))
    # Parsed with the action as written, so "2*off->1*fail_checkpoint" reads naturally.
    schedule = parse_hits(hits, act.value, f"{prefix}hits")
    if act is Action.FAIL_CHECKPOINT:
        act = Action.RAISE
        params = {"message": params.get("message", DEFAULT_CHECKPOINT_MESSAGE)}
    elif act is Action.RAISE:
        params.setdefault("message", DEFAULT_RAISE_MESSAGE)
    return Fault(point, schedule.text(), act, params, optional)


@dataclass(frozen=True, slots=True)
class FaultPlan:
    faults: tuple[Fault, ...] = ()

    def __post_init__(self) -> None:
        for i, first in enumerate(self.faults):
            for j in range(i + 1, len(self.faults)):
                second = self.faults[j]
                if first.failpoint is second.failpoint and first.schedule.overlaps(second.schedule):
                    raise _error(f"faults[{j}].hits", f"fires on the same hit of "
                                 f"{first.failpoint.value} as faults[{i}] ({first.hits} vs "
                                 f"{second.hits}); one hit can do one thing")

    def fault_at(self, failpoint: str, hit: int) -> tuple[int, Fault] | None:
        """The fault (with its index in the plan) that fires on this hit, if any."""
        for index, fault in enumerate(self.faults):
            if fault.failpoint.value == failpoint and fault.fires(hit):
                return index, fault
        return None

    def __len__(self) -> int:
        return len(self.faults)

    def __iter__(self):
        return iter(self.faults)


# --------------------------------------------------------------------------- rendering


def _hits_phrase(fault: Fault) -> str:
    if fault.schedule.from_hit is not None and not fault.schedule.hits:
        return f"every hit from #{fault.schedule.from_hit}"
    if "," in fault.hits or "+" in fault.hits:
        return f"hits {fault.hits}"
    return f"hit #{fault.hits}"


def describe(fault: Fault) -> str:
    """What the fault does, in words."""
    params = fault.params
    if fault.action is Action.CRASH:
        return ("crash (the instance dies there without closing; restart + recover(); "
                "instance B of a concurrent_turn is dropped instead)")
    if fault.action is Action.RAISE:
        return f"raise InjectedFault({params.get('message', DEFAULT_RAISE_MESSAGE)!r})"
    if fault.action is Action.DELAY:
        return f"delay {params['seconds']:g}s of virtual time"
    if fault.action is Action.CHANGE_RULES:
        rules = "; ".join(
            f"{r['effect']} {r['tool']}" + (f" {r['field'] or 'args'}~{r['pattern']}"
                                            if r.get("pattern", "*") != "*" else "")
            for r in params["rules"]) or "no rules"
        return (f"change_rules on session {params['session']} -> permission_version "
                f"{params['permission_version']} [{rules}]")
    if fault.action is Action.CANCEL:
        return f"cancel session {params['session']}"
    if fault.action is Action.HOLD:
        return "hold this instance while a second instance runs the same turn"
    return fault.action.value


def render(plan: FaultPlan | Iterable[Fault]) -> tuple[str, ...]:
    """One readable line per fault, e.g.
    ``fault 1: after_result_saved, hit #1 -> crash (...)``."""
    return tuple(
        f"fault {number}: {fault.failpoint.value}, {_hits_phrase(fault)} -> {describe(fault)}"
        + (" [optional]" if fault.optional else "")
        for number, fault in enumerate(plan, start=1)
    )


def from_spec(spec: FaultSpec) -> Fault:
    """The fault a trace's :class:`~harness.trace.record.FaultSpec` records (hits already canonical)."""
    return Fault(Failpoint(spec.failpoint), spec.hits, Action(spec.action), dict(spec.params),
                 spec.optional)
