"""Which optional features a run's behaviour showed: a pure reading of what the world recorded.

An optional feature's criteria apply when the implementation declares the feature *or* when
its behaviour in the run shows it; a declaration can add a feature, never remove one the
behaviour shows. This module decides the behaviour half.

Guarantees:

* :func:`shown` is a pure function of a trace's events (memoized per trace object); it
  never reads what the implementation says about itself (``trace.meta.features``, its
  ``info``) nor its store (the observations): only what the world served and received
  (UI publications, tool executions and refusals, approval prompts) and what the harness
  did (driver calls);
* one rule per optional feature, each returning the trace indexes that show it, so a report
  can cite them:

  - ``web_projection``: the world's UI received a publication (``UI_PUBLISH``);
  - ``sandbox_escalation``: a tool result asked for escalation (a ledger row with
    ``escalation_requested``) and the implementation acted on it: the world later showed an
    approval prompt for the same call, or ran it (or was asked to start it) outside the
    sandbox. An implementation that takes the request as a definite failure, as the
    contract asks of one without the feature, shows nothing;
  - ``checkpoint_import``: the harness handed the implementation one of its checkpoint
    fixtures (a ``load_checkpoint`` driver call that was not skipped) and the call
    returned: the implementation accepted it. One that declares no fixture is never
    handed one (the step is skipped) and shows nothing;
  - ``multi_instance``: a second instance opened over the same store while the first was
    live and took the concurrent turn (instance B's ``concurrent_turn`` call: the harness
    makes it only after B's ``open`` returned). One that refuses the second ``open`` (the
    documented way for an implementation without the feature) shows nothing;

* :func:`in_force` is the declared optional features plus the shown ones, the set a
  criterion's ``required_features`` is checked against (:func:`harness.criteria.base.run_check`);
  :func:`absent` the features a scenario needs that are neither.

Depends on ``harness.contract`` and ``harness.trace`` only (no criterion or fact module), so
:mod:`harness.criteria.base` can ask it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from harness.contract import OPTIONAL_FEATURES, Feature, conformance
from harness.trace.identity_memo import by_identity
from harness.trace.record import Kind, Trace, TraceEvent

__all__ = ["Shown", "SHOWN_BY", "absent", "in_force", "shown", "shown_features"]


@dataclass(frozen=True, slots=True)
class Shown:
    """One optional feature the behaviour showed, and where."""

    feature: Feature
    note: str
    """What happened, in words (``"the UI received 3 publications"``)."""
    trace_indexes: tuple[int, ...]
    """The events that show it (the first few)."""


SHOWN_BY: dict[Feature, str] = {entry.feature: entry.shown_by for entry in conformance.OPTIONAL}
"""Per optional feature, the behaviour that shows it, in words (the one table,
:data:`harness.contract.conformance.OPTIONAL`)."""
assert frozenset(SHOWN_BY) == OPTIONAL_FEATURES, "every optional feature has a rule"

_CITED = 3
"""How many trace indexes a :class:`Shown` cites."""


def _web_projection(trace: Trace) -> Shown | None:
    published = [e.index for e in trace.of_kind(Kind.UI_PUBLISH)]
    if not published:
        return None
    return Shown(Feature.WEB_PROJECTION,
                 f"the UI received {len(published)} publication(s)", tuple(published[:_CITED]))


def _key(event: TraceEvent) -> tuple[str, str]:
    return str(event.data.get("session_id", "")), str(event.data.get("tool_call_id", ""))


def _sandbox_escalation(trace: Trace) -> Shown | None:
    asked: dict[tuple[str, str], int] = {}
    for event in trace.of_kind(Kind.TOOL_EXECUTED, Kind.TOOL_UNAVAILABLE, Kind.APPROVAL_PROMPT):
        key = _key(event)
        first = asked.get(key)
        if first is not None and event.index > first:
            if event.kind == Kind.APPROVAL_PROMPT:
                return Shown(Feature.SANDBOX_ESCALATION,
                             f"call {key[1]} asked for escalation and the implementation "
                             "prompted the owner for it", (first, event.index))
            if event.data.get("sandboxed") is False:
                return Shown(Feature.SANDBOX_ESCALATION,
                             f"call {key[1]} asked for escalation and the implementation ran "
                             "it again outside the sandbox", (first, event.index))
        if (event.kind == Kind.TOOL_EXECUTED and first is None
                and event.data.get("escalation_requested")):
            asked[key] = event.index
    return None


def _checkpoint_import(trace: Trace) -> Shown | None:
    pending: TraceEvent | None = None
    for event in trace.of_kind(Kind.DRIVER_CALL, Kind.DRIVER_RETURN, Kind.DRIVER_RAISED):
        if event.data.get("method") != "load_checkpoint":
            continue
        if event.kind == Kind.DRIVER_CALL:
            pending = None if event.data.get("skipped") else event
        elif pending is not None:
            if event.kind == Kind.DRIVER_RETURN and not event.data.get("contract_error"):
                fixture = (pending.data.get("args") or {}).get("fixture")
                return Shown(Feature.CHECKPOINT_IMPORT,
                             f"the implementation accepted its checkpoint fixture {fixture!r}",
                             (pending.index, event.index))
            pending = None
    return None


def _multi_instance(trace: Trace) -> Shown | None:
    for event in trace.of_kind(Kind.DRIVER_CALL):
        if event.data.get("method") != "concurrent_turn":
            continue
        if (event.data.get("args") or {}).get("role") == "B":
            return Shown(Feature.MULTI_INSTANCE,
                         f"instance {event.instance} opened over the store of a live instance "
                         "and took the concurrent turn", (event.index,))
    return None


_RULES: tuple[tuple[Feature, Callable[[Trace], Shown | None]], ...] = (
    (Feature.CHECKPOINT_IMPORT, _checkpoint_import),
    (Feature.MULTI_INSTANCE, _multi_instance),
    (Feature.SANDBOX_ESCALATION, _sandbox_escalation),
    (Feature.WEB_PROJECTION, _web_projection),
)
assert {f for f, _ in _RULES} == OPTIONAL_FEATURES


@by_identity(4)
def shown(trace: Trace) -> tuple[Shown, ...]:
    """Every optional feature the trace's behaviour shows, in feature-name order."""
    found = (rule(trace) for _, rule in _RULES)
    return tuple(s for s in found if s is not None)


def shown_features(trace: Trace) -> tuple[Feature, ...]:
    """The optional features the trace's behaviour shows (names only)."""
    return tuple(s.feature for s in shown(trace))


def in_force(trace: Trace) -> frozenset[Feature]:
    """The features a criterion on ``trace`` may rely on: declared (any) plus shown."""
    return frozenset(trace.meta.features) | frozenset(shown_features(trace))


def absent(trace: Trace, needed: Iterable[Feature | str]) -> tuple[Feature, ...]:
    """The optional features among ``needed`` (a scenario's) that the implementation neither
    declares nor showed in ``trace``."""
    have = {str(f) for f in in_force(trace)}
    return tuple(Feature(f) for f in needed
                 if Feature(f) in OPTIONAL_FEATURES and str(f) not in have)
