"""The projection oracle: what the UI must show for an operation, computed from the world.

Guarantees:

* every function here is pure over a :class:`~harness.trace.record.Trace`; nothing reads a clock,
  a file or the environment;
* an operation's *result* at a moment (:func:`world_result`) comes from the world alone:
  its ledger rows (``TOOL_EXECUTED``), the world's refusals to start it
  (``TOOL_UNAVAILABLE``) and the crashes that cut it between its start record and its saved
  result (``after_start_recorded``/``after_tool_returned`` naming it). The store is never
  asked whether the operation ran;
* a pending approval wait is the world's too: a prompt shown for the operation and not yet
  answered by a driver call (no rule change or cancellation of the session since);
* the permission decision of an operation that did not run is the one input the world
  cannot give in every case (a classifier risk denial, a repeat guard, a revalidation): it
  is read from the store's record of that operation *at the same moment* and only where the
  world is silent; a call a hard constraint of its session denies is ``hard_constraint``
  whatever the store says;
* :func:`expected_view` turns those facts into the status and the exact set of recovery
  actions through the contract's ``expected_projection``; :data:`ALLOWED_ACTIONS` states,
  independently of it, which actions each status may ever offer (no plain ``retry`` for an
  unknown operation, a definite failure or a denial; a denial only offers resolutions that
  change the permission or the call first).

The vocabulary is documented in ``docs/lifecycle.md`` ("What the UI shows").
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any

from harness.contract import (
    DecisionSource,
    FailureKind,
    Outcome,
    OperationView,
    Permission,
    RecoveryAction,
    execution_id_for,
    expected_projection,
)
from harness.criteria import facts as F
from harness.criteria.trace_readings import find_op
from harness.criteria.approval_answers import first_answers
from harness.trace.identity_memo import by_identity
from harness.trace.record import Kind, ObservationPoint, Trace, TraceEvent, positions_by_kind

SETTLED_STATUSES = frozenset({
    "succeeded", "failed", "reconciliation_required", "denied", "cancelled", "not_executed",
    "invalid_arguments",
})
"""Statuses that show a saved result: publishing one before the result is durable is
projecting before the save (X1)."""

WAITING_STATUSES = frozenset({"awaiting_approval", "pending"})
"""Statuses a UI may show before any result exists."""

_A = RecoveryAction
ALLOWED_ACTIONS: dict[str, frozenset[str]] = {
    "succeeded": frozenset(),
    "failed": frozenset({_A.EDIT_ARGS.value, _A.CHANGE_RULES.value}),
    "reconciliation_required": frozenset({_A.RECONCILE.value}),
    "denied": frozenset({_A.CHANGE_RULES.value, _A.EDIT_ARGS.value}),
    "cancelled": frozenset(),
    "awaiting_approval": frozenset({_A.APPROVE.value, _A.REJECT.value}),
    "not_executed": frozenset({_A.RETRY.value, _A.EDIT_ARGS.value}),
    "invalid_arguments": frozenset({_A.EDIT_ARGS.value}),
    "pending": frozenset(),
}
"""Which recovery actions a UI may ever offer in each status (L5.4), whatever the record:
``retry`` only for an operation certainly not executed for a transient reason; never for an
unknown one (reconcile first), a definite failure (it may have had effects) or a denial
(change the rules or the call first); a hard-constraint denial offers no rule change."""

HARD_DENIAL_FORBIDDEN = frozenset({_A.CHANGE_RULES.value, _A.APPROVE.value, _A.RETRY.value})

NEEDS_REASON = frozenset({"failed", "reconciliation_required", "denied", "not_executed",
                          "invalid_arguments"})
"""Statuses whose projection must say why (the design: explain the rule and the way out)."""


@dataclass(frozen=True, slots=True)
class WorldResult:
    """What the world's events say about an operation's execution up to one moment."""

    outcome: str
    failure_kind: str | None
    reconciliation_required: bool
    grounds: str
    """Why, in words, for evidence."""
    evidence: tuple[int, ...]
    """Trace indexes of the events it rests on."""

    @property
    def ran(self) -> bool:
        return self.outcome != Outcome.NOT_STARTED.value


@dataclass(frozen=True, slots=True)
class ExpectedView:
    """What the UI must show for one operation at one moment."""

    status: str
    actions: frozenset[str]
    outcome: str
    permission: str | None
    """``None`` when the world cannot tell (an operation that ran shows ``allow``)."""
    decided_by: str | None
    result: WorldResult
    wait_pending: bool
    store_used: bool
    """True when the permission decision came from the store's record (world silent)."""


def _attempts(op: F.Op, before: int) -> list[TraceEvent]:
    """The operation's ledger rows and refused starts before ``before``, by index (a
    prefix of them all: sorting is stable, so filtering first or last gives one order)."""
    events, indexes = _all_attempts(op)
    return list(events[:bisect.bisect_left(indexes, before)])


_ALL_ATTEMPTS: dict[int, tuple[F.Op, tuple[TraceEvent, ...], tuple[int, ...]]] = {}
_ALL_ATTEMPTS_MAX = 256


def _all_attempts(op: F.Op) -> tuple[tuple[TraceEvent, ...], tuple[int, ...]]:
    """Every attempt of ``op`` by index, and their indexes, remembered by the operation's
    identity (X1 asks before each of its readings); an entry holds ``op`` itself, so an id
    is never mistaken for a newer object's."""
    found = _ALL_ATTEMPTS.get(id(op))
    if found is not None and found[0] is op:
        return found[1], found[2]
    events = tuple(sorted((*op.rows, *op.unavailable), key=lambda e: e.index))
    indexes = tuple(e.index for e in events)
    if len(_ALL_ATTEMPTS) >= _ALL_ATTEMPTS_MAX:
        _ALL_ATTEMPTS.clear()
    _ALL_ATTEMPTS[id(op)] = (op, events, indexes)
    return events, indexes


def _mid_execution_crash(trace: Trace, op: F.Op, before: int) -> TraceEvent | None:
    """The latest crash before ``before`` at a failpoint between this op's start record and
    its saved result that names it — or names no operation while this one was the latest of
    its session seen before the crash (as :func:`facts.crashed_mid_execution` attributes it)."""
    found = None
    ops: dict[F.OpKey, F.Op] | None = None
    for crash, name, context in F.crash_points(trace):
        if crash.index >= before or name not in F.CRASH_AFTER_START:
            continue
        named = F.context_names_op(context, op)
        if named is None and op.first_seen < crash.index:
            ops = F.operations(trace) if ops is None else ops
            others = [o for o in ops.values() if o.session_id == op.session_id and o.first_seen < crash.index]
            named = bool(others) and max(others, key=lambda o: o.first_seen).key == op.key
        if named:
            found = crash
    return found


_WORLD_RESULTS: dict[int, tuple[F.Op, Trace, dict[tuple[int, int], "WorldResult"]]] = {}
_WORLD_RESULTS_MAX = 256


def world_result(trace: Trace, op: F.Op, before: int) -> WorldResult:
    """The operation's result as the world saw it through event ``before - 1``.

    It depends on ``before`` only through how many of the operation's attempts and how
    many of the trace's crashes lie before it, so it is remembered per operation (held, so
    an id is never mistaken for a newer object's) under those two counts: X1 asks at every
    reading of every operation."""
    entry = _WORLD_RESULTS.get(id(op))
    if entry is None or entry[0] is not op or entry[1] is not trace:
        if len(_WORLD_RESULTS) >= _WORLD_RESULTS_MAX:
            _WORLD_RESULTS.clear()
        entry = _WORLD_RESULTS[id(op)] = (op, trace, {})
    key = (bisect.bisect_left(_all_attempts(op)[1], before),
           bisect.bisect_left(_crash_indexes(trace), before))
    found = entry[2].get(key)
    if found is None:
        found = entry[2][key] = _world_result(trace, op, before)
    return found


def crash_indexes(trace: Trace) -> tuple[int, ...]:
    """The trace's crashes' indexes, in trace order (remembered for the trace)."""
    return _crash_indexes(trace)


@by_identity(2)
def _crash_indexes(trace: Trace) -> tuple[int, ...]:
    """The trace's crashes' indexes, in trace order (what :func:`_mid_execution_crash`
    filters by ``before``)."""
    return tuple(crash.index for crash, _, _ in F.crash_points(trace))


def _world_result(trace: Trace, op: F.Op, before: int) -> WorldResult:
    attempts = _attempts(op, before)
    crash = _mid_execution_crash(trace, op, before)
    last = attempts[-1] if attempts else None
    if crash is not None and (last is None or crash.index > last.index):
        return WorldResult(
            Outcome.UNKNOWN.value, FailureKind.UNKNOWN.value, True,
            f"the process died at {crash.data.get('failpoint')} after its start was recorded "
            "and before its result was saved", (crash.index,) + ((last.index,) if last else ()))
    if last is None:
        return WorldResult(Outcome.NOT_STARTED.value, None, False,
                           "the world never ran it", ())
    ran_before = any(e.kind == Kind.TOOL_EXECUTED for e in attempts)
    if last.kind == Kind.TOOL_UNAVAILABLE:
        if ran_before:  # a retry that could not start after an attempt that did run
            return WorldResult(Outcome.FAILED.value, FailureKind.TRANSIENT.value, False,
                               "an attempt ran, its retry could not start", (last.index,))
        return WorldResult(Outcome.NOT_STARTED.value, FailureKind.TRANSIENT.value, False,
                           "the world refused to start it (certainly not executed)", (last.index,))
    if last.data.get("status") == "ok":
        return WorldResult(Outcome.SUCCEEDED.value, None, False, "its last run returned ok",
                           (last.index,))
    error_kind = last.data.get("error_kind") or FailureKind.FAILED.value
    if error_kind == FailureKind.UNKNOWN.value:
        return WorldResult(Outcome.UNKNOWN.value, FailureKind.UNKNOWN.value, True,
                           "its last run could not tell what it did", (last.index,))
    if last.data.get("escalation_requested"):
        error_kind = FailureKind.PERMISSION_DENIED.value
    return WorldResult(Outcome.FAILED.value, str(error_kind), False,
                       f"its last run failed ({error_kind})", (last.index,))


def wait_pending(trace: Trace, op: F.Op, before: int) -> bool | None:
    """Is a prompt for ``op`` shown and unanswered through ``before - 1``? An answer is the
    owner's or a new message in the session (:mod:`harness.criteria.approval_answers`).
    ``None`` when a rule change or cancellation since the prompt may have withdrawn it, or a
    new message is answering it and has not reached the model yet (the world cannot tell)."""
    answers = first_answers(trace)
    answered = {wait_id for wait_id, answer in answers.items() if answer.settled < before}
    open_prompts = [p for p in op.prompts if p.index < before
                    and str(p.data.get("wait_id")) not in answered]
    if not open_prompts:
        return False
    since = open_prompts[-1].index
    if F.rule_changes_between(trace, op.session_id, since, before):
        return None
    answer = answers.get(str(open_prompts[-1].data.get("wait_id")))
    if answer is not None and answer.index < before:
        return None  # a new message is answering it: taken effect or not, only the store knows
    for event in F.events_between(trace, since, before, Kind.DRIVER_CALL, Kind.FAILPOINT):
        if (event.kind == Kind.DRIVER_CALL and event.data.get("method") == "cancel") or (
                event.kind == Kind.FAILPOINT and event.data.get("action") == "cancel"):
            return None
    return True


def hard_constraint_denies(trace: Trace, op: F.Op) -> bool:
    cfg = F.config(trace, op.session_id)
    return any(F.rule_matches(rule, op.tool, op.args) for rule in cfg.hard_constraints)


def expected_view(trace: Trace, op: F.Op, before: int, store: OperationView | None,
                  store_wait_pending: bool = False) -> ExpectedView | None:
    """What the UI must show for ``op`` through event ``before - 1``; ``None`` when the
    operation neither ran nor has a record saying how it was decided (nothing to expect).

    ``store_wait_pending``: the store holds a pending approval wait for it. A wait committed
    but not yet prompted may already be shown as awaiting approval (the UI can be where the
    owner answers), so it counts as pending although the world saw no prompt yet."""
    result = world_result(trace, op, before)
    pending = wait_pending(trace, op, before)
    store_used = False
    if pending is False and store_wait_pending:
        pending, store_used = True, True
    permission: str | None = Permission.ALLOW.value if result.ran else None
    decided_by: str | None = None
    if not result.ran and result.failure_kind is None:
        if hard_constraint_denies(trace, op):
            permission, decided_by = Permission.DENY.value, DecisionSource.HARD_CONSTRAINT.value
            pending = False
        if store is not None and F.value(store.decided_by) == DecisionSource.CANCELLATION.value:
            permission, decided_by = Permission.DENY.value, DecisionSource.CANCELLATION.value
            store_used = True
        elif decided_by is None:
            if store is None:
                return None
            permission, decided_by = F.value(store.permission), F.value(store.decided_by)
            store_used = True
        if pending is None:  # withdrawn or not: only the store knows
            pending, store_used = store_wait_pending, True
    elif store is not None and not result.ran:
        permission, decided_by = F.value(store.permission), F.value(store.decided_by)
    status, actions = expected_projection(
        Permission(permission) if permission else Permission.ALLOW,
        Outcome(result.outcome),
        DecisionSource(decided_by) if decided_by else DecisionSource.EXACT_GRANT,
        FailureKind(result.failure_kind) if result.failure_kind else None,
        result.reconciliation_required,
        bool(pending),
    )
    return ExpectedView(status, frozenset(a.value for a in actions), result.outcome, permission,
                        decided_by, result, bool(pending), store_used)


# --------------------------------------------------------------------------- publications


@dataclass(frozen=True, slots=True)
class Publication:
    """One projection the world's UI received."""

    event: TraceEvent
    key: F.OpKey
    execution_id: str
    data: dict[str, Any]

    @property
    def status(self) -> str:
        return str(self.data.get("status", ""))

    @property
    def outcome(self) -> str:
        return str(self.data.get("outcome", ""))

    @property
    def actions(self) -> frozenset[str]:
        return frozenset(str(a) for a in self.data.get("recovery_actions") or ())

    @property
    def reason(self) -> str:
        return str(self.data.get("reason", ""))


@by_identity(2)  # L5.4 asks again for each publication's reason (read-only: shared)
def publications(trace: Trace) -> tuple[Publication, ...]:
    found = []
    for event in trace.of_kind(Kind.UI_PUBLISH):
        data = event.data.get("projection") or {}
        key = (str(data.get("session_id", "")), str(data.get("tool_call_id", "")))
        found.append(Publication(event, key, str(data.get("execution_id", "")), dict(data)))
    return tuple(found)


@by_identity(32)  # an operation is asked about once per publication check
def _execution_ids(op: F.Op) -> frozenset[str]:
    return frozenset({execution_id_for(*op.key)} | {v.identity.execution_id for v in F.distinct_views(op)})


def publications_of(pubs: tuple[Publication, ...], op: F.Op, before: int | None = None) -> tuple[Publication, ...]:
    """Publications of ``op`` (matched by session and call id, or by its execution id)."""
    mine = _all_publications_of(pubs, op)
    if before is None:
        return mine
    return tuple(p for p in mine if p.event.index < before)


_PUBLICATIONS_OF: dict[tuple[int, int], tuple[Any, Any, tuple[Publication, ...]]] = {}
_PUBLICATIONS_OF_MAX = 256


def _all_publications_of(pubs: tuple[Publication, ...], op: F.Op) -> tuple[Publication, ...]:
    """Every publication of ``op``, remembered by the identity of both (the checks ask for
    one operation's publications before each of its readings); an entry holds ``pubs`` and
    ``op`` themselves, so an id is never mistaken for a newer object's."""
    key = (id(pubs), id(op))
    found = _PUBLICATIONS_OF.get(key)
    if found is not None and found[0] is pubs and found[1] is op:
        return found[2]
    exec_ids = _execution_ids(op)
    by_key, by_execution_id = _publication_index(pubs)
    positions = set(by_key.get(op.key, ()))
    for execution_id in exec_ids:
        positions.update(by_execution_id.get(execution_id, ()))
    mine = tuple(pubs[at] for at in sorted(positions))
    if len(_PUBLICATIONS_OF) >= _PUBLICATIONS_OF_MAX:
        _PUBLICATIONS_OF.clear()
    _PUBLICATIONS_OF[key] = (pubs, op, mine)
    return mine


@by_identity(2)
def _publication_index(pubs: tuple[Publication, ...]
                       ) -> tuple[dict[F.OpKey, list[int]], dict[str, list[int]]]:
    """The publications' positions by (session, call id) and by execution id (so an
    operation's are found without reading every publication)."""
    by_key: dict[F.OpKey, list[int]] = {}
    by_execution_id: dict[str, list[int]] = {}
    for at, pub in enumerate(pubs):
        by_key.setdefault(pub.key, []).append(at)
        by_execution_id.setdefault(pub.execution_id, []).append(at)
    return by_key, by_execution_id


def probe_at(trace: Trace, event: TraceEvent, label: str) -> ObservationPoint | None:
    """The store read while the world handled ``event`` (labelled ``label``, before any
    later event of the same kind)."""
    kinds, labels = positions_by_kind(trace), _readings_by_label(trace)
    if kinds is None or labels is None:  # indexes not as recorded (a hand-built trace): scan
        bound = next((e.index for e in trace.events
                      if e.kind == event.kind and e.index > event.index), None)
        for point in trace.observations:
            if point.label == label and point.index >= event.index and (
                    bound is None or point.index < bound):
                return point
        return None
    kind_indexes = kinds.get(event.kind, ())
    after = bisect.bisect_right(kind_indexes, event.index)
    bound = kind_indexes[after] if after < len(kind_indexes) else None
    point_indexes, points = labels.get(label, ((), ()))
    at = bisect.bisect_left(point_indexes, event.index)
    if at < len(points) and (bound is None or points[at].index < bound):
        return points[at]
    return None


@by_identity(2)
def _readings_by_label(trace: Trace) -> dict[str, tuple[list[int], list[ObservationPoint]]] | None:
    """Per label its points' indexes and points in recording order, when those indexes never
    decrease along it (then the first point past an index is found by bisection); None
    otherwise. The events' side is :func:`harness.trace.record.positions_by_kind`."""
    labels: dict[str, tuple[list[int], list[ObservationPoint]]] = {}
    for point in trace.observations:
        point_indexes, points = labels.setdefault(point.label, ([], []))
        if point_indexes and point.index < point_indexes[-1]:
            return None
        point_indexes.append(point.index)
        points.append(point)
    return labels


def view_in(point: ObservationPoint | None, op: F.Op) -> OperationView | None:
    if point is None:
        return None
    return find_op(point.observation, (op.session_id, op.tool_call_id))


def action_problems(status: str, actions: frozenset[str], hard_denial: bool) -> list[str]:
    """What ``actions`` offers that ``status`` may never offer (ALLOWED_ACTIONS)."""
    allowed = ALLOWED_ACTIONS.get(status)
    if allowed is None:
        return [f"status {status!r} is not in the projection vocabulary"]
    problems = []
    extra = sorted(actions - allowed)
    if extra:
        problems.append(f"a {status} operation offers {', '.join(extra)} (allowed: "
                        f"{', '.join(sorted(allowed)) or 'none'})")
    if hard_denial and status == "denied":
        forbidden = sorted(actions & HARD_DENIAL_FORBIDDEN)
        if forbidden:
            problems.append(f"a hard-constraint denial offers {', '.join(forbidden)}; no approval or "
                            "rule change can lift it")
    return problems


def judge_publication(trace: Trace, op: F.Op, pub: Publication, store: OperationView | None,
                      store_wait_pending: bool = False) -> tuple[ExpectedView | None, list[str]]:
    """Problems of one publication against the oracle (status, outcome, actions, reason)."""
    expected = expected_view(trace, op, pub.event.index, store, store_wait_pending)
    problems = []
    if expected is None:
        problems += action_problems(pub.status, pub.actions, False) if pub.status in ALLOWED_ACTIONS else []
        return None, problems
    hard = expected.decided_by == DecisionSource.HARD_CONSTRAINT.value
    problems += action_problems(expected.status, pub.actions, hard)
    if pub.outcome != expected.outcome:
        problems.append(f"shows outcome {pub.outcome!r}, the world says {expected.outcome!r} "
                        f"({expected.result.grounds})")
    if pub.status != expected.status:
        problems.append(f"shows status {pub.status!r}, the oracle expects {expected.status!r}")
    if pub.actions != expected.actions:
        problems.append(f"offers {sorted(pub.actions)}, the oracle expects {sorted(expected.actions)}")
    if expected.permission is not None and str(pub.data.get("permission")) != expected.permission:
        problems.append(f"shows permission {pub.data.get('permission')!r}, expected {expected.permission!r}")
    if expected.status in NEEDS_REASON and not pub.reason.strip():
        problems.append(f"a {expected.status} operation is shown without a reason")
    elif expected.status in NEEDS_REASON:
        told = told_the_model(trace, op, pub, publications_of(publications(trace), op))
        if told and not any(pub.reason.strip() in message.content for message in told):
            problems.append(f"shows the reason {pub.reason.strip()!r}, which the result the model "
                            f"received for it does not give (request "
                            f"{told[0].request.data.get('request_id')}: {told[0].content!r})")
    return expected, problems


@dataclass(frozen=True, slots=True)
class ToldResult:
    """A tool message of one call as the world's model received it."""

    request: TraceEvent
    content: str


def told_the_model(trace: Trace, op: F.Op, pub: Publication,
                   shown: tuple[Publication, ...]) -> tuple[ToldResult, ...]:
    """The tool messages for ``op`` with the outcome ``pub`` shows that the world's model
    received with no other publication of ``op`` between them and ``pub`` (before or after
    it: a recovery may replay the projection after the loop went on): the same result
    record, read back by the loop. A message's ``content`` says why a call did not run or
    failed (docs/contract.md), so the reason the UI shows for that result must be said
    there too: a reason taken from anywhere else (the decision, a diagnostic) is not the
    authoritative record's. A result superseded before the loop read it (a sandboxed
    attempt's, until the owner answers its escalation) has no message to compare with."""
    others = [p.event.index for p in shown if p.event.index != pub.event.index]
    found = []
    for request in F.model_requests(trace, op.session_id):
        low, high = sorted((request.index, pub.event.index))
        if any(low < index < high for index in others):
            continue
        message = F.tool_message(request, op.tool_call_id)
        if message is None or message.get("outcome") != pub.outcome:
            continue
        found.append(ToldResult(request, str(message.get("content") or "")))
    return tuple(found)


def op_of(ops: dict[F.OpKey, F.Op], pub: Publication) -> F.Op | None:
    """The operation a publication names: by (session, call id), else by execution id."""
    if pub.key in ops:
        return ops[pub.key]
    for op in ops.values():
        if execution_id_for(*op.key) == pub.execution_id or any(
                v.identity.execution_id == pub.execution_id for v in F.distinct_views(op)):
            return op
    return None


def waits_pending_in(point: ObservationPoint | None, op: F.Op) -> bool:
    """Does the store read at ``point`` hold a pending approval wait for ``op``?"""
    if point is None:
        return False
    exec_ids = _execution_ids(op)
    return any(F.value(w.status) == "pending" and (w.execution_id in exec_ids or (
        w.session_id, w.tool_call_id) == op.key) for w in point.observation.approval_waits)


def store_view_for(trace: Trace, op: F.Op, pub: Publication) -> tuple[OperationView | None, bool]:
    """The store's record of ``op`` while the UI received ``pub`` (its probe), else the
    latest read before it; and whether that read holds a pending wait for it."""
    probe = probe_at(trace, pub.event, "probe:ui_publish")
    if probe is not None:
        return view_in(probe, op), waits_pending_in(probe, op)
    seen = op.view_at(pub.event.index)
    if seen is None:
        return None, False
    return seen[1], waits_pending_in(seen[0], op)
