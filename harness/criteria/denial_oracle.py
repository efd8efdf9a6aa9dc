"""The denial oracle: what the lifecycle's counting and fallback rules demand, computed
from the world's events alone.

Inputs (all recorded by the world or the harness, never taken from the implementation's
word): classifier requests and their outcomes (``CLASSIFIER_REQUEST``; a verdict slower than
the timeout is a timeout), oversize operations the classifier never saw (the only input read
from the store: the world cannot see a request that was never sent), emitted tool calls,
ledger rows, approval prompts, the owner's answers (``answer_approval`` driver calls), rule
versions (``open_session`` configs, ``update_rules`` calls and ``change_rules`` faults),
cancellations, crashes and restarts.

Guarantees:

* :func:`replay` computes, per (session, permission version), the consecutive and cumulative
  risk-denial counts after every event: a risk denial counts once per operation identity
  (re-deliveries, recovery replays and concurrent duplicates do not count again; a verdict
  whose decision was recorded before a crash is not lost); an allowed operation resets the
  consecutive count; an approved fallback resets the consecutive count (a rejected one
  does not); completing the approval the cumulative threshold triggered resets the
  cumulative count; a new permission
  version starts at zero; classifier faults (timeout, service error, cancellation, oversize)
  change nothing. Where the trace cannot tell (a verdict cut off by a crash before its
  decision was recorded, an approval voided by a rule change) every reading is kept, so the
  expectation is a set of (consecutive, cumulative) pairs.
* :class:`Moment` marks every point where the fallback rule applies: a classifier review, an
  approval prompt, and an operation that needed review but got neither (a silent denial),
  each with whether the thresholds were reached then (``armed_all``: under every reading).
  In an interactive auto session whose owner can approve, the next operation needing review
  once armed must go to a persisted wait (a prompt); in any other session the denial stands.
* every rule can be broken on purpose (:class:`CounterRules`, the lenses): a behaviour or a
  reported count the real rules reject but a broken rule predicts is attributed to the
  criterion owning that rule (:func:`fallback_findings`, :func:`comparisons`).

Pure: every function reads a Trace and returns values.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable

from harness.contract import ClassifierOutcome, Mode, RuleEffect, execution_id_for
from harness.criteria import approval_answers
from harness.criteria import reading_changes
from harness.criteria import trace_readings as s
from harness.criteria.base import per_trace
from harness.trace.record import Kind, ObservationPoint, Trace

# --------------------------------------------------------------------------- counter replay


@dataclass(frozen=True, slots=True)
class CounterRules:
    """The counting rules of the lifecycle; a criterion's lens flips one of them."""

    dedupe: bool = True
    count_deliveries: bool = False
    """Broken rule: every re-delivery or recovery replay of a risk-denied identity counts."""
    crash_loses: bool = False
    """Broken rule: a risk denial whose decision a crash cut short right after it was recorded
    is lost (the count was not kept in the transaction that records the judgement)."""
    faults_count: bool = False
    faults_reset: bool = False
    allow_resets_consecutive: bool = True
    allow_resets_cumulative: bool = False
    approval_resets: bool = True
    rejection_resets: bool = False
    """Broken rule: a rejected fallback ends the streak as an approved one does."""
    cumulative_approval_resets: bool = True
    per_version: bool = True
    per_session: bool = True


REAL = CounterRules()


@dataclass(frozen=True, slots=True)
class Counts:
    consecutive: int = 0
    cumulative: int = 0
    counted: frozenset[str] = frozenset()
    fallbacks: frozenset[tuple[str, bool]] = frozenset()
    """Pending fallback waits: (wait_id, triggered by the cumulative threshold)."""

    @property
    def pair(self) -> tuple[int, int]:
        return (self.consecutive, self.cumulative)


Key = tuple[str, object]
States = frozenset[Counts]


@dataclass(frozen=True, slots=True)
class _Step:
    index: int
    what: str  # review | redeliver | allowed | prompt | answer | observe | need
    session: str = ""
    version: int = 0
    review: s.Review | None = None
    uncertain: bool = False
    crash_cut: bool = False
    """A crash came right after this verdict's decision was recorded (nothing else happened)."""
    silent: bool = False
    """An operation that needed review and got neither a review nor a prompt (``need``)."""
    wait_id: str = ""
    approve: bool = False
    ask_rule: bool = False
    escalation: bool = False
    tool_call_id: str = ""
    identity: str = ""
    point: ObservationPoint | None = None
    store_only: bool = False
    """A classifier outcome the world never saw (oversize: never sent), read from the store."""


@dataclass(frozen=True, slots=True)
class Moment:
    """A point where the fallback rule applies: a review, a prompt or a silent denial of an
    operation that needed review, and whether the thresholds were reached then."""

    index: int
    session: str
    what: str  # review | prompt | silent
    armed_all: bool
    armed_any: bool
    replay: bool = False
    ask_rule: bool = False
    escalation: bool = False
    tool_call_id: str = ""
    version: int = 0
    """The permission version whose counts applied."""
    counts: tuple[tuple[int, int], ...] = ()
    """The (consecutive, cumulative) risk-denial counts the rules allow at that moment."""
    limits: tuple[int, int] = (0, 0)
    """The session's (consecutive_denials_max, cumulative_denials_max)."""

    def counted(self) -> str:
        """The compared values, in words: version, counts and thresholds."""
        counts = " or ".join(f"{c}/{u}" for c, u in self.counts) or "0/0"
        return (f"permission version {self.version}: {counts} consecutive/cumulative risk "
                f"denials, thresholds {self.limits[0]}/{self.limits[1]}")


@dataclass(frozen=True, slots=True)
class Comparison:
    point: ObservationPoint
    session: str
    version: int
    observed: tuple[int, int]
    expected: frozenset[tuple[int, int]]

    @property
    def ok(self) -> bool:
        return self.observed in self.expected


def _fate(trace: Trace, review: s.Review) -> tuple[bool, bool]:
    """(uncertain, crash_cut): a verdict that may never have been applied (voided, or cut off
    by a crash before its decision was recorded); a verdict whose recorded decision was
    followed at once by a crash (its count must survive it)."""
    decided = False
    decided_elsewhere = False
    for event in trace.events:
        if event.index <= review.index:
            continue
        kind, data = event.kind, event.data
        if event.instance != review.instance:
            # Another instance deciding this very call while the reviewing one waits for its
            # verdict: the verdict may be applied to nothing (found by generation: a
            # duplicate held during the review, the other instance's allow ran the call, so
            # the held instance's risk denial was never recorded as the call's judgement).
            context = data.get("context") or {}
            if (kind == Kind.FAILPOINT and data.get("name") == "after_permission_decision"
                    and context.get("tool_call_id") == review.tool_call_id
                    and context.get("session_id") == review.session_id):
                decided_elsewhere = True
            continue
        if kind == Kind.CRASH:
            return (not decided, decided)
        if kind == Kind.FAILPOINT:
            if not decided and data.get("name") == "during_classifier_review" and data.get("action") in (
                "change_rules", "cancel", "crash", "raise"
            ):
                return (True, False)
            if data.get("name") == "after_permission_decision":
                decided = True
                if data.get("action") == "crash":
                    return (False, True)
                continue
        if kind in (Kind.CLASSIFIER_REQUEST, Kind.TOOL_EXECUTED, Kind.TOOL_UNAVAILABLE, Kind.APPROVAL_PROMPT):
            return (decided_elsewhere and not decided, False)
        if kind == Kind.MODEL_REQUEST and data.get("session_id") == review.session_id:
            return (decided_elsewhere and not decided, False)
    return (decided_elsewhere and not decided, False)


def _redeliveries(trace: Trace, changes: tuple[s.RuleChange, ...], all_reviews: tuple[s.Review, ...]) -> list[_Step]:
    """Second deliveries of a call, and recovery replays of a risk-denied operation whose
    handling a crash cut short (no projection published before the crash)."""
    steps = []
    seen: set[s.OpKey] = set()
    for call in s.emitted_calls(trace):
        if call.key in seen:
            version = s.version_at(trace, call.session_id, call.index, changes)
            steps.append(_Step(call.index, "redeliver", call.session_id, version,
                               identity=f"{call.tool_call_id}@{version}"))
        seen.add(call.key)
    published = [(e.index, (e.data.get("projection") or {}).get("execution_id")) for e in trace.of_kind(Kind.UI_PUBLISH)]
    epoch_start = -1
    for event in trace.events:
        if event.kind != Kind.RESTART:
            continue
        crashes = [c.index for c in trace.crashes() if epoch_start < c.index < event.index]
        if crashes:
            for review in all_reviews:
                if not (epoch_start < review.index < crashes[-1]) or review.tool_call_id is None:
                    continue
                if review.outcome != ClassifierOutcome.RISK_DENY:
                    continue
                execution_id = execution_id_for(review.session_id, review.tool_call_id)
                if any(review.index < i < crashes[-1] and x == execution_id for i, x in published):
                    continue
                steps.append(_Step(event.index, "redeliver", review.session_id, review.permission_version,
                                   identity=review.identity))
        epoch_start = event.index
    return steps


def needs_review(state: s.RuleState, tool: str, args: dict) -> bool:
    """In auto mode, a call no layer above the classifier decides goes to the classifier
    (or, past a threshold, to the owner)."""
    if state.mode is not Mode.AUTO or state.denial_for(tool, args) is not None or state.asks(tool, args):
        return False
    return not any(r.effect is RuleEffect.ALLOW and s.rule_matches(r, tool, args) for r in state.rules)


def _needs(trace: Trace, changes: tuple[s.RuleChange, ...], all_reviews: tuple[s.Review, ...]) -> list[_Step]:
    """One step per first emission of a call that needed review; ``silent`` when the world
    shows it got no review, no prompt and no execution, yet its denial reached the model or
    was published to the UI (it was decided by the implementation alone). Calls a failure-repeat budget may have refused,
    or that a cancellation or an interruption cut short, are not silent."""
    reviewed = {(r.session_id, r.tool_call_id) for r in all_reviews}
    prompted = {(p.data.get("session_id"), p.data.get("tool_call_id")) for p in trace.of_kind(Kind.APPROVAL_PROMPT)}
    ran = {s.ledger_key(e) for e in trace.of_kind(Kind.TOOL_EXECUTED, Kind.TOOL_UNAVAILABLE)}
    requests = s.model_requests(trace)
    refusals = approval_answers.refusals(trace)
    steps = []
    for key, call in sorted(s.first_emissions(trace).items(), key=lambda kv: kv[1].index):
        if call.tool is None or call.args is None:
            continue
        state = s.rules_in_force(trace, call.session_id, call.index + 1, changes)
        if not needs_review(state, call.tool, call.args):
            continue
        kinds = s.tool_kinds(trace, call.session_id)
        dk = s.dedup_key(call.tool, call.args, kinds.get(call.tool))
        failed_before = [row for row in trace.ledger() if row.index < call.index
                         and s.ledger_key(row)[0] == call.session_id and row.data.get("status") != "ok"
                         and s.dedup_key(str(row.data.get("tool", "")), row.data.get("args") or {},
                                         kinds.get(str(row.data.get("tool", "")))) == dk]
        # the owner's refusals of the same operation count toward the repeat budget as well
        # (docs/contract.md; found by generation: two refused fallbacks, then the repeat
        # guard refused the third call of the same command)
        failed_before = failed_before or [
            prompt for at, prompt in refusals if at < call.index
            and prompt.data.get("session_id") == call.session_id
            and s.dedup_key(str(prompt.data.get("tool", "")), prompt.data.get("args") or {},
                            kinds.get(str(prompt.data.get("tool", "")))) == dk]
        # the denial reached the model, or the UI showed it denied (a loop that stopped there)
        carried = next((r for r in requests if r.index > call.index and r.data.get("session_id") == call.session_id
                        and s.tool_message(r, call.tool_call_id) is not None), None) or next(
            (e for e in trace.of_kind(Kind.UI_PUBLISH) if e.index > call.index
             and (e.data.get("projection") or {}).get("session_id") == call.session_id
             and (e.data.get("projection") or {}).get("tool_call_id") == call.tool_call_id
             and (e.data.get("projection") or {}).get("permission") == "deny"), None)
        # a rule change between the call and its denial: revalidation may refuse (void) the
        # decision without a new review (docs/contract.md; found by generation)
        revalidated = carried is not None and any(
            call.index < c.index < carried.index for c in changes if c.session_id == call.session_id)
        silent = (key not in reviewed and key not in prompted and key not in ran and carried is not None
                  and not failed_before and not revalidated
                  and not s.cancelled(trace, call.session_id, call.index)
                  and not s.interrupted_between(trace, call.index, carried.index, call.session_id))
        version = s.version_at(trace, call.session_id, call.index + 1, changes)
        steps.append(_Step(call.index, "need", call.session_id, version, silent=silent,
                           tool_call_id=call.tool_call_id))
    return steps


def _steps(trace: Trace) -> tuple[_Step, ...]:
    changes = s.rule_changes(trace)
    steps: list[_Step] = []
    all_reviews = s.reviews(trace)
    review_at = {r.index: r for r in all_reviews}
    steps += _redeliveries(trace, changes, all_reviews)
    unsent: set[s.OpKey] = set()
    # oversize operations never reach the world (each reading's new rows: a row already
    # seen at the reading before is in ``unsent`` already or no oversize one)
    for point, op in reading_changes.new_rows(trace):
        key = (op.session_id, op.identity.tool_call_id)
        if op.classifier_outcome is ClassifierOutcome.NO_VERDICT_OVERSIZE and key not in unsent:
            unsent.add(key)
            version = op.identity.permission_version
            review = s.Review(point.index, op.session_id, op.tool, "", ClassifierOutcome.NO_VERDICT_OVERSIZE.value,
                              op.identity.tool_call_id, version, 0)
            steps.append(_Step(point.index, "review", op.session_id, version, review=review, store_only=True))
    escalated: set[s.OpKey] = set()
    for event in trace.events:
        d = event.data
        if event.index in review_at:
            review = review_at[event.index]
            uncertain, crash_cut = _fate(trace, review)
            steps.append(_Step(event.index, "review", review.session_id, review.permission_version,
                               review=review, uncertain=uncertain, crash_cut=crash_cut))
        elif event.kind in (Kind.TOOL_EXECUTED, Kind.TOOL_UNAVAILABLE):
            session = d.get("session_id", "")
            if d.get("escalation_requested"):
                escalated.add(s.ledger_key(event))
            steps.append(_Step(event.index, "allowed", session, s.version_at(trace, session, event.index, changes)))
        elif event.kind == Kind.APPROVAL_PROMPT:
            session = d.get("session_id", "")
            # the wait belongs to the version in force when it was persisted
            persisted = s.op_failpoint_before(trace, (session, str(d.get("tool_call_id", ""))),
                                              ("after_wait_persisted",), event.index)
            state = s.rules_in_force(trace, session, persisted.index if persisted else event.index, changes)
            steps.append(_Step(
                event.index, "prompt", session, state.permission_version, wait_id=str(d.get("wait_id", "")),
                ask_rule=state.asks(str(d.get("tool", "")), d.get("args") or {}),
                escalation=(session, d.get("tool_call_id", "")) in escalated,
                tool_call_id=str(d.get("tool_call_id", "")),
            ))
        elif event.kind == Kind.LIFECYCLE_EVENT and (d.get("event") or {}).get("type") == "permission_decided" and (
                (d.get("event") or {}).get("data") or {}).get("permission") == "allow":
            # an allowed decision the world may never see run (cancelled, revalidation failed):
            # whether it resets the streak before it starts is left open (a start resets it)
            session = str((d.get("event") or {}).get("session_id", ""))
            steps.append(_Step(event.index, "allowed", session, s.version_at(trace, session, event.index, changes),
                               uncertain=True))
    # every answer, explicit or by a new message (a repeated one finds no armed fallback)
    steps += [_Step(a.index, "answer", wait_id=a.wait_id, approve=a.approve)
              for a in approval_answers.answers(trace)]
    steps += _needs(trace, changes, all_reviews)
    for point in trace.observations:
        if point.label in s.DURABLE_LABELS and (point.label != "final" or trace.completed):
            steps.append(_Step(point.index, "observe", point=point))
    # an observation read just after event i sees everything up to and including i
    order = {"observe": 2, "need": 1}
    return tuple(sorted(steps, key=lambda st: (st.index, order.get(st.what, 0))))


@dataclass(frozen=True, slots=True)
class Replay:
    snapshots: tuple[tuple[ObservationPoint, dict[Key, States]], ...]
    touched: frozenset[tuple[str, int]]
    moments: tuple[Moment, ...]
    rules: CounterRules

    def expected(self, snapshot: dict[Key, States], session: str, version: int) -> frozenset[tuple[int, int]]:
        key = (session if self.rules.per_session else "*", version if self.rules.per_version else "*")
        states = snapshot.get(key, frozenset({Counts()}))
        return frozenset(c.pair for c in states)


def replay(trace: Trace, rules: CounterRules = REAL, steps: tuple[_Step, ...] | None = None) -> Replay:
    steps = _steps(trace) if steps is None else steps
    configs = s.session_configs(trace)
    changes = s.rule_changes(trace)
    states: dict[Key, States] = {}
    reviewed: dict[Key, set[str]] = {}
    wait_keys: dict[str, tuple[Key, str]] = {}
    touched: set[tuple[str, int]] = set()
    moments: list[Moment] = []
    snapshots = []

    def key(session: str, version: int) -> Key:
        return (session if rules.per_session else "*", version if rules.per_version else "*")

    def get(k: Key) -> States:
        return states.get(k, frozenset({Counts()}))

    def armed(c: Counts, session: str) -> bool:
        th = s.thresholds_for(trace, session)
        return c.consecutive >= th.consecutive_denials_max or c.cumulative >= th.cumulative_denials_max

    def values(session: str, version: int, current: States) -> dict[str, Any]:
        th = s.thresholds_for(trace, session)
        return {"version": version, "counts": tuple(sorted({c.pair for c in current})),
                "limits": (th.consecutive_denials_max, th.cumulative_denials_max)}

    def apply(k: Key, fn: Callable[[Counts], Iterable[Counts]], uncertain: bool = False) -> None:
        out: set[Counts] = set()
        for c in get(k):
            out.update(fn(c))
            if uncertain:
                out.add(c)
        states[k] = frozenset(out)

    def reset(c: Counts) -> Counts:
        if rules.allow_resets_consecutive:
            c = replace(c, consecutive=0)
        if rules.allow_resets_cumulative:
            c = replace(c, cumulative=0)
        return c

    for st in steps:
        if st.what == "review":
            review = st.review
            assert review is not None
            k = key(st.session, st.version)
            touched.add((st.session, st.version))
            current = get(k)
            replayed = review.identity in reviewed.get(k, set())
            if not st.store_only:
                moments.append(Moment(st.index, st.session, "review",
                                      all(armed(c, st.session) for c in current),
                                      any(armed(c, st.session) for c in current), replay=replayed,
                                      tool_call_id=review.tool_call_id or "",
                                      **values(st.session, st.version, current)))
                reviewed.setdefault(k, set()).add(review.identity)
            outcome = review.outcome
            is_fault = outcome in s.FAULT_OUTCOMES
            if outcome == ClassifierOutcome.RISK_DENY or (is_fault and rules.faults_count):
                lost = rules.crash_loses and st.crash_cut and outcome == ClassifierOutcome.RISK_DENY

                def deny(c: Counts, ident: str = review.identity, lost: bool = lost) -> Iterable[Counts]:
                    if (rules.dedupe and ident in c.counted) or lost:
                        return (c,)
                    return (replace(c, consecutive=c.consecutive + 1, cumulative=c.cumulative + 1,
                                    counted=c.counted | {ident}),)
                apply(k, deny, st.uncertain)
            elif outcome == ClassifierOutcome.ALLOW or (is_fault and rules.faults_reset):
                apply(k, lambda c: (reset(c),), st.uncertain)
        elif st.what == "need":
            if st.silent:
                current = get(key(st.session, st.version))
                moments.append(Moment(st.index, st.session, "silent",
                                      all(armed(c, st.session) for c in current),
                                      any(armed(c, st.session) for c in current),
                                      tool_call_id=st.tool_call_id,
                                      **values(st.session, st.version, current)))
        elif st.what == "redeliver":
            k = key(st.session, st.version)
            if rules.count_deliveries and k in states:
                def recount(c: Counts, ident: str = st.identity) -> Iterable[Counts]:
                    if ident not in c.counted:
                        return (c,)
                    return (replace(c, consecutive=c.consecutive + 1, cumulative=c.cumulative + 1),)
                apply(k, recount)
        elif st.what == "allowed":
            k = key(st.session, st.version)
            if k in states:
                apply(k, lambda c: (reset(c),), st.uncertain)
        elif st.what == "prompt":
            k = key(st.session, st.version)
            current = get(k)
            moments.append(Moment(st.index, st.session, "prompt",
                                  all(armed(c, st.session) for c in current),
                                  any(armed(c, st.session) for c in current),
                                  ask_rule=st.ask_rule, escalation=st.escalation, tool_call_id=st.tool_call_id,
                                  **values(st.session, st.version, current)))
            wait_keys[st.wait_id] = (k, st.session, st.index)
            if st.ask_rule or st.escalation or not s.can_approve(configs.get(st.session)):
                continue
            th = s.thresholds_for(trace, st.session)

            def arm(c: Counts, wait_id: str = st.wait_id, session: str = st.session) -> Iterable[Counts]:
                if not armed(c, session):
                    return (c,)
                return (replace(c, fallbacks=c.fallbacks | {(wait_id, c.cumulative >= th.cumulative_denials_max)}),)
            if k in states:
                apply(k, arm)
        elif st.what == "answer":
            if st.wait_id not in wait_keys:
                continue
            k, wait_session, prompted_at = wait_keys[st.wait_id]
            if k not in states:
                continue
            # rules changed while the wait was pending: the approval may be void (no reset)
            voided = any(ch.session_id == wait_session and prompted_at < ch.index < st.index for ch in changes)

            def answer(c: Counts, wait_id: str = st.wait_id, approve: bool = st.approve,
                       voided: bool = voided) -> Iterable[Counts]:
                mine = [fb for fb in c.fallbacks if fb[0] == wait_id]
                if not mine:
                    return (c,)
                by_cumulative = any(fb[1] for fb in mine)
                c = replace(c, fallbacks=c.fallbacks - set(mine))
                if approve:
                    kept = c
                    if rules.approval_resets:
                        c = replace(c, consecutive=0)
                    if by_cumulative and rules.cumulative_approval_resets:
                        c = replace(c, cumulative=0)
                    return (c, kept) if voided else (c,)
                if rules.rejection_resets:
                    c = replace(c, consecutive=0)
                if by_cumulative and rules.cumulative_approval_resets:
                    # "completes" may or may not cover a rejection: accept either reading
                    return (c, replace(c, cumulative=0))
                return (c,)
            apply(k, answer)
        elif st.what == "observe":
            assert st.point is not None
            snapshots.append((st.point, dict(states)))
    return Replay(tuple(snapshots), frozenset(touched), tuple(moments), rules)


def comparisons(trace: Trace, real: Replay, other: Replay | None = None) -> tuple[Comparison, ...]:
    """Observed counters vs. ``other`` (default: the real replay) at every point at rest,
    for every (session, version) the real replay touched or the store reports."""
    other = other or real
    out = []
    for (point, snapshot), (_, other_snapshot) in zip(real.snapshots, other.snapshots):
        observed = {(c.session_id, c.permission_version): (c.consecutive, c.cumulative)
                    for c in point.observation.denial_counters}
        pairs = set(real.touched) | set(observed)
        for session, version in sorted(pairs, key=lambda p: (p[0], p[1])):
            out.append(Comparison(point, session, version, observed.get((session, version), (0, 0)),
                                  other.expected(other_snapshot, session, version)))
    return tuple(out)


RESET_LENS = (
    CounterRules(allow_resets_consecutive=False),
    CounterRules(allow_resets_cumulative=True),
    CounterRules(approval_resets=False),
    CounterRules(rejection_resets=True),
    CounterRules(cumulative_approval_resets=False),
)
ISOLATION_LENS = (CounterRules(per_version=False), CounterRules(per_session=False))
DEDUPE_LENS = (CounterRules(dedupe=False), CounterRules(dedupe=False, count_deliveries=True),
               CounterRules(crash_loses=True))
FAULT_LENS = (CounterRules(faults_count=True), CounterRules(faults_reset=True))
ALL_LENSES = RESET_LENS + ISOLATION_LENS + DEDUPE_LENS + FAULT_LENS


@dataclass(frozen=True, slots=True)
class CounterReplays:
    """The real replay and its comparisons, and every lens's replay and expectations at the
    same points (same order)."""

    real: Replay
    base: tuple[Comparison, ...]
    alternatives: tuple[tuple[CounterRules, Replay, tuple[Comparison, ...]], ...]

    def _alts(self, lens: Iterable[CounterRules]):
        wanted = tuple(lens)
        return [comps for rules, _, comps in self.alternatives if rules in wanted]

    def differs(self, i: int, lens: Iterable[CounterRules]) -> bool:
        return any(comps[i].expected != self.base[i].expected for comps in self._alts(lens))

    def explains(self, i: int, lens: Iterable[CounterRules]) -> bool:
        return any(self.base[i].observed in comps[i].expected for comps in self._alts(lens))


@per_trace  # five criteria judge the same trace in a row
def counter_replays(trace: Trace) -> CounterReplays:
    return _counter_replays(trace)


def _counter_replays(trace: Trace) -> CounterReplays:
    steps = _steps(trace)
    real = replay(trace, REAL, steps)
    alternatives = []
    for rules in ALL_LENSES:
        alt = replay(trace, rules, steps)
        alternatives.append((rules, alt, comparisons(trace, real, alt)))
    return CounterReplays(real, comparisons(trace, real), tuple(alternatives))


# --------------------------------------------------------------------------- behaviour


@dataclass(frozen=True, slots=True)
class Finding:
    """Behaviour the real rules reject at one moment of an interactive auto session whose
    owner can approve, and the broken rules (lenses) that would predict it."""

    moment: Moment
    kind: str
    """``missing``: reviewed by the classifier although the thresholds were reached;
    ``silent``: denied without review or wait although they were reached; ``early``: sent
    to a wait although no threshold was reached (and no ask rule or escalation asked)."""
    explained_by: tuple[CounterRules, ...]


def _fallback_sessions(trace: Trace) -> frozenset[str]:
    return frozenset(sid for sid, config in s.session_configs(trace).items()
                     if config.mode is Mode.AUTO and s.can_approve(config))


def _agrees(m: Moment, predicted: Moment) -> bool:
    """Does the behaviour seen at ``m`` agree with a replay that predicts ``predicted``?"""
    if m.replay or (m.what == "prompt" and (m.ask_rule or m.escalation)):
        return True
    if m.what == "prompt":
        return predicted.armed_any
    if m.what == "review":
        return not predicted.armed_all
    return False  # a silent denial agrees with no counting rule


def fallback_findings(trace: Trace, replays: CounterReplays) -> tuple[Finding, ...]:
    """Every moment where the behaviour the world saw contradicts the fallback rule, with the
    broken rules that explain it: those whose replay agrees with the session's behaviour at
    that moment *and at every other moment* (a runtime that never falls back is not
    explained by a counting rule that would have armed it later)."""
    sessions = _fallback_sessions(trace)
    moments = replays.real.moments
    consistent: dict[tuple[int, str], bool] = {}
    for k, (_, alt, _) in enumerate(replays.alternatives):
        for n, m in enumerate(moments):
            ok = consistent.get((k, m.session), True)
            consistent[(k, m.session)] = ok and _agrees(m, alt.moments[n])
    out = []
    for n, m in enumerate(moments):
        if m.session not in sessions:
            continue
        if (m.what in ("review", "silent") and m.armed_all and not m.replay) or (
                m.what == "prompt" and not m.armed_any and not (m.ask_rule or m.escalation)):
            explained = tuple(rules for k, (rules, alt, _) in enumerate(replays.alternatives)
                              if consistent[(k, m.session)])
            kind = {"review": "missing", "silent": "silent", "prompt": "early"}[m.what]
            out.append(Finding(m, kind, explained))
    return tuple(out)


def fallback_moments_judged(trace: Trace, replays: CounterReplays, lens: Iterable[CounterRules]) -> tuple[Moment, ...]:
    """Moments of fallback sessions where a rule of ``lens`` changes whether the thresholds
    were reached: the behaviour there tells whether the implementation follows that rule."""
    wanted = tuple(lens)
    sessions = _fallback_sessions(trace)
    out = []
    for n, m in enumerate(replays.real.moments):
        if m.session not in sessions or m.replay or (m.what == "prompt" and (m.ask_rule or m.escalation)):
            continue
        for rules, alt, _ in replays.alternatives:
            a = alt.moments[n]
            if rules in wanted and (a.armed_all, a.armed_any) != (m.armed_all, m.armed_any):
                out.append(m)
                break
    return tuple(out)
