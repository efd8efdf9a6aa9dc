"""Conformance levels: the core every implementation meets, and the optional features in force.

Guarantees:

* the core cannot be declared away: every criterion that no optional feature gates applies
  to every implementation, whatever it declares (:func:`core_always_applies` drops core
  features from any criterion's ``required_features``; the suite never lets a core criterion
  end ``not_applicable``);
* :data:`OPTIONAL` is the one table of optional features, each with the criteria it gates,
  the behaviour that shows it, what an implementation without it does in the scenarios
  written for it, and why the lifecycle design leaves it optional; :func:`gate_criteria`
  makes the catalogue's ``required_features`` exactly that table (the criteria modules' own
  lists do not decide);
* an optional feature is *in force* when the implementation declares it **or** its
  behaviour in the run shows it (judged from the world's events by
  :mod:`harness.criteria.feature_evidence`): a declaration can add a feature, never remove
  one the behaviour shows, and its criteria are ``not_applicable`` only when the behaviour
  never appeared and nothing declared it;
* every scenario runs for every implementation, whatever it declares: a scenario written for
  a feature (its ``requires`` plus what its content implies, :func:`scenario_requirements`:
  a concurrent turn ``multi_instance``, loading an old checkpoint ``checkpoint_import``, a
  tool that asks for sandbox escalation ``sandbox_escalation``) gives the behaviour its
  chance to show; an implementation without the feature takes the documented way out
  (:attr:`OptionalFeature.without`) and is judged on the core only;
* :func:`assess` is a pure function of criterion statuses, scenario statuses, declared,
  shown and required features: the level reached and its one-line headline
  ("conformant: core + sandbox_escalation + web_projection (shown, not declared); not
  claimed: multi_instance").

Depends on ``harness.contract`` and ``harness.contract.errors`` only, so criteria, suite, result and
reports can all use it.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Any, Iterable, Sequence, TypeVar

from harness.contract import CORE_FEATURES, OPTIONAL_FEATURES, Feature
from harness.contract.errors import UsageError

__all__ = [
    "CORE_FEATURES",
    "OPTIONAL_FEATURES",
    "OPTIONAL",
    "OptionalFeature",
    "FeatureState",
    "FeatureLevel",
    "ConformanceLevel",
    "assess",
    "core_always_applies",
    "gate_criteria",
    "gates_of",
    "parse_feature_list",
    "scenario_requirements",
]


@dataclass(frozen=True, slots=True)
class OptionalFeature:
    feature: Feature
    criteria: tuple[str, ...]
    """Criterion ids that apply only when the feature is in force (declared or shown)."""
    implied_by: str
    """Which scenario content is written for the feature (besides an explicit ``requires``);
    "" when no content is (its scenarios also test core behaviour)."""
    shown_by: str
    """The behaviour that shows the feature in a run, whatever the implementation declares
    (:mod:`harness.criteria.feature_evidence` judges it from the world's events)."""
    without: str
    """What an implementation without the feature does in the scenarios written for it
    (the documented way out: the scenario then judges the core only)."""
    why_optional: str
    """Why the lifecycle design lets an implementation leave it out."""


OPTIONAL: tuple[OptionalFeature, ...] = (
    OptionalFeature(
        Feature.CHECKPOINT_IMPORT, ("L1.6",),
        "a load_checkpoint step",
        "it accepts one of its checkpoint fixtures (load_checkpoint returns)",
        "it declares no checkpoint fixture (the harness skips the load step), or its "
        "load_checkpoint raises (a refusal: the session goes on without it)",
        "only an implementation that shipped an earlier checkpoint format has old "
        "checkpoints to read; one without a previous format has nothing to import",
    ),
    OptionalFeature(
        Feature.SANDBOX_ESCALATION, ("L2.11",),
        "a tool behaviour partial_escalate",
        "a tool result asks for escalation and it acts on the request (an approval prompt "
        "for that call, or a run of it outside the sandbox)",
        "it takes the escalation request as a definite failure (failed, permission_denied, "
        "execution_started true) and never runs the call outside the sandbox",
        "only an implementation that runs tools in a sandbox can be asked for more "
        "permission after an attempt started; the pre-call lifecycle stays core",
    ),
    OptionalFeature(
        Feature.MULTI_INSTANCE, ("L4.10",),
        "a concurrent_turn step",
        "a second instance opens over the store of a live one and takes the concurrent turn",
        "its open of a second instance, while another instance is live on the data dir, "
        "raises (over the wire: an error answer to open) instead of blocking",
        "two live runtime instances on one store is a deployment choice; duplicates "
        "after a restart (one instance at a time) stay core",
    ),
    OptionalFeature(
        Feature.WEB_PROJECTION, ("L5.4",),
        "",
        "it publishes a projection to the world's UI",
        "it publishes nothing (World.publish is never called)",
        "the projection step and the delivery states stay core (X1, L4); a web view "
        "that shows each state's reason and recovery actions exists only where there "
        "is a web front end",
    ),
)
"""The optional features, each with the criteria it gates."""

_BY_FEATURE: dict[Feature, OptionalFeature] = {o.feature: o for o in OPTIONAL}
assert frozenset(_BY_FEATURE) == OPTIONAL_FEATURES, "every optional feature has one entry"

_GATES: dict[str, tuple[Feature, ...]] = {}
for _entry in OPTIONAL:
    for _criterion_id in _entry.criteria:
        _GATES[_criterion_id] = (*_GATES.get(_criterion_id, ()), _entry.feature)


def gates_of(criterion_id: str) -> tuple[Feature, ...]:
    """The optional features a criterion needs (empty: a core criterion)."""
    return _GATES.get(criterion_id, ())


# --------------------------------------------------------------------------- criteria

C = TypeVar("C")


def gate_criteria(criteria: Sequence[C]) -> tuple[C, ...]:
    """The catalogue's criteria with ``required_features`` taken from :data:`OPTIONAL`."""
    return tuple(
        dataclasses.replace(c, required_features=gates_of(c.id))  # type: ignore[type-var]
        for c in criteria
    )


def core_always_applies(criteria: Sequence[C]) -> tuple[C, ...]:
    """``criteria`` with every core feature dropped from their ``required_features``.

    Declaring a core feature is harmless and leaving it out changes nothing: a criterion can
    only be made n/a by an optional feature, whoever built it."""
    out = []
    for c in criteria:
        needed = tuple(f for f in c.required_features if f not in CORE_FEATURES)  # type: ignore[attr-defined]
        out.append(c if needed == tuple(c.required_features)  # type: ignore[attr-defined]
                   else dataclasses.replace(c, required_features=needed))  # type: ignore[type-var]
    return tuple(out)


# --------------------------------------------------------------------------- scenarios


def _implied(scenario: Any) -> set[Feature]:
    needs: set[Feature] = set()
    for step in getattr(scenario, "steps", ()):
        kind = str(getattr(step, "do", ""))
        if kind == "concurrent_turn":
            needs.add(Feature.MULTI_INSTANCE)
        elif kind == "load_checkpoint":
            needs.add(Feature.CHECKPOINT_IMPORT)
    for behaviour in getattr(scenario, "tool_behaviours", ()):
        if str(getattr(behaviour, "behaviour", "")) == "partial_escalate":
            needs.add(Feature.SANDBOX_ESCALATION)
    return needs


def scenario_requirements(scenario: Any) -> tuple[Feature, ...]:
    """Optional features a scenario is written for: its ``requires`` plus what its content
    implies. The scenario runs whatever the implementation declares; when one of these
    features is neither declared nor shown in its trace, a planned fault or hold that did
    not happen is excused rather than an error (the path it sat on belongs to the feature),
    and the scenario's passes are not counted."""
    declared = {Feature(f) for f in getattr(scenario, "requires", ())}
    return tuple(sorted((declared | _implied(scenario)) - CORE_FEATURES))


def parse_feature_list(text: str, option: str = "--require-features") -> tuple[Feature, ...]:
    """``"a,b"`` or ``"all"`` → optional features (sorted). A core feature is accepted and
    dropped (the core is always required); an unknown name is a :class:`UsageError`."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise UsageError(f"{option}: give feature names separated by commas, or 'all'")
    chosen: set[Feature] = set()
    for name in names:
        if name == "all":
            chosen |= OPTIONAL_FEATURES
            continue
        try:
            feature = Feature(name)
        except ValueError:
            raise UsageError(
                f"{option}: unknown feature {name!r}; optional features: "
                f"{', '.join(sorted(OPTIONAL_FEATURES))} (or 'all'); the core "
                f"({', '.join(sorted(CORE_FEATURES))}) is always required"
            ) from None
        if feature in OPTIONAL_FEATURES:
            chosen.add(feature)
    return tuple(sorted(chosen))


# --------------------------------------------------------------------------- the level


class FeatureState(enum.StrEnum):
    MET = "met"
    """In force (declared, or shown by the run's behaviour), and every criterion it gates
    passed."""
    FAILING = "failing"
    """In force, and a criterion it gates did not pass."""
    NOT_CLAIMED = "not_claimed"
    """Neither declared nor shown by any scenario: its criteria are n/a."""


SHOWN_NOT_DECLARED = "shown, not declared"
"""How the headline marks a feature in force by behaviour alone."""


@dataclass(frozen=True, slots=True)
class FeatureLevel:
    feature: str
    state: FeatureState
    criteria: tuple[str, ...]
    """The criteria of this run it gates."""
    not_passed: tuple[str, ...] = ()
    """``"L2.11 failed"``-style entries for the gated criteria that did not pass."""
    required: bool = False
    """Demanded by ``--require-features``."""
    declared: bool = False
    """The implementation declares it."""
    shown: bool = False
    """Some scenario of the run showed it by behaviour."""

    @property
    def name(self) -> str:
        """The feature as the headline names it: marked when in force by behaviour alone."""
        if self.shown and not self.declared:
            return f"{self.feature} ({SHOWN_NOT_DECLARED})"
        return self.feature


@dataclass(frozen=True, slots=True)
class ConformanceLevel:
    core_criteria: tuple[str, ...]
    core_not_passed: tuple[str, ...]
    """``"L2.3 failed"``-style entries: any core criterion that did not pass."""
    features: tuple[FeatureLevel, ...]
    scenarios_errored: int = 0
    required: tuple[str, ...] = ()

    @property
    def core_met(self) -> bool:
        return not self.core_not_passed and not self.scenarios_errored

    @property
    def claimed(self) -> tuple[str, ...]:
        """The features met, declared or shown."""
        return tuple(f.feature for f in self.features if f.state is FeatureState.MET)

    @property
    def shown_not_declared(self) -> tuple[str, ...]:
        """The features in force by behaviour alone (met or failing)."""
        return tuple(f.feature for f in self.features if f.shown and not f.declared)

    @property
    def failing(self) -> tuple[FeatureLevel, ...]:
        return tuple(f for f in self.features if f.state is FeatureState.FAILING)

    @property
    def not_claimed(self) -> tuple[str, ...]:
        return tuple(f.feature for f in self.features if f.state is FeatureState.NOT_CLAIMED)

    @property
    def required_unmet(self) -> tuple[str, ...]:
        """One message per ``--require-features`` feature the run does not establish."""
        messages = []
        for f in self.features:
            if not f.required or f.state is FeatureState.MET:
                continue
            if f.state is FeatureState.NOT_CLAIMED:
                messages.append(f"{f.feature} is required but the implementation does not "
                                "declare it (and no scenario showed it)")
            else:
                messages.append(f"{f.feature} is required but not met "
                                f"({', '.join(f.not_passed)})")
        return tuple(messages)

    @property
    def conformant(self) -> bool:
        return self.core_met and not self.failing and not self.required_unmet

    @property
    def level(self) -> str:
        """``"core + a + b (shown, not declared)"``: what this run establishes (empty when
        the core is not met)."""
        met = [f.name for f in self.features if f.state is FeatureState.MET]
        return " + ".join(("core", *met)) if self.core_met else ""

    @property
    def headline(self) -> str:
        tail = f"; not claimed: {', '.join(self.not_claimed)}" if self.not_claimed else ""
        if self.conformant:
            return f"conformant: {self.level}{tail}"
        problems = []
        if self.core_not_passed:
            problems.append(f"core not met ({_shorten(self.core_not_passed)})")
        if self.scenarios_errored:
            problems.append(f"{self.scenarios_errored} scenario(s) errored")
        for f in self.failing:
            how = "declared " + f.feature if f.declared else f.name
            problems.append(f"{how} not met ({_shorten(f.not_passed)})")
        problems += [m for m in self.required_unmet if "does not declare" in m]
        reached = f"; level reached: {self.level}" if self.level and self.failing else ""
        return "not conformant: " + "; ".join(problems) + reached + tail


def _shorten(items: Sequence[str], limit: int = 6) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f", … {len(items) - limit} more" if len(items) > limit else "")


def assess(
    criteria: Iterable[Any],
    declared: Iterable[str],
    *,
    shown: Iterable[str] = (),
    required: Iterable[str] = (),
    scenarios_errored: int = 0,
) -> ConformanceLevel:
    """The level a run reached.

    ``criteria`` are run-level results with ``id``, ``status`` (value ``"passed"`` counts as
    passed, anything else — expected_fail included — does not) and ``required_features``;
    ``declared`` the implementation's features; ``shown`` the optional features some
    scenario's behaviour showed (a feature declared or shown is in force); ``required`` the
    optional features a CI demands. A criterion gated by several features counts for each
    of them."""
    have = {str(f) for f in declared}
    seen = {str(f) for f in shown}
    wanted = {str(f) for f in required}
    core: list[str] = []
    core_bad: list[str] = []
    per_feature: dict[str, list[str]] = {f.value: [] for f in sorted(OPTIONAL_FEATURES)}
    bad: dict[str, list[str]] = {f: [] for f in per_feature}
    for c in criteria:
        status = str(getattr(c.status, "value", c.status))
        gates = [str(f) for f in getattr(c, "required_features", ())
                 if str(f) not in {x.value for x in CORE_FEATURES}]
        entry = f"{c.id} {status.replace('_', ' ')}"
        if not gates:
            core.append(c.id)
            if status != "passed":
                core_bad.append(entry)
            continue
        for feature in gates:
            per_feature.setdefault(feature, []).append(c.id)
            bad.setdefault(feature, [])
            if status != "passed" and (feature in have or feature in seen):
                bad[feature].append(entry)
    features = []
    for feature, ids in per_feature.items():
        in_force = feature in have or feature in seen
        if in_force and not ids:
            bad[feature].append("none of its criteria was judged")
        if not in_force:
            state = FeatureState.NOT_CLAIMED
        else:
            state = FeatureState.FAILING if bad[feature] else FeatureState.MET
        features.append(FeatureLevel(feature, state, tuple(ids), tuple(bad[feature]),
                                     feature in wanted, feature in have, feature in seen))
    return ConformanceLevel(tuple(core), tuple(core_bad), tuple(features), scenarios_errored,
                            tuple(sorted(wanted)))
