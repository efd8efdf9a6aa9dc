"""Stage L3: permission state and approval waits (denial counters, fallback, durable waits).

Every check is a pure function of the Trace. The denial-counter criteria (L3.5-L3.8) share
one replay of the world's classifier answers: the expected counters per (session,
permission version) are rebuilt from what the world answered (risk denials per operation
identity; allowed operations = classifier allows, ledger rows and, possibly, reported allow
decisions that never ran; answered fallback approvals; version changes) and compared with
the store's ``denial_counters`` at each observation at rest. Where the trace cannot tell
(a verdict cut off by a crash, an approval voided by a rule change...) the replay keeps
every reading, so the expectation is a set of (consecutive, cumulative) pairs. Each criterion judges the comparisons where *its* rule makes a
difference: the replay is re-run with that rule broken, and a comparison counts as an
exercise of the criterion when the broken replay expects other counts there.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Iterable

from harness.contract import (
    ClassifierOutcome,
    DecisionSource,
    Delivery,
    Feature,
    Mode,
    Permission,
    WaitStatus,
    execution_id_for,
)
from harness.criteria import lm_support as s
from harness.criteria.base import Criterion, Evidence, Verdict, judge
from harness.trace import Kind, ObservationPoint, Trace

# --------------------------------------------------------------------------- counter replay


@dataclass(frozen=True, slots=True)
class CounterRules:
    """The counting rules of the lifecycle; a criterion's lens flips one of them."""

    dedupe: bool = True
    count_deliveries: bool = False
    """Broken rule: every re-delivery or recovery replay of a risk-denied identity counts."""
    faults_count: bool = False
    faults_reset: bool = False
    allow_resets_consecutive: bool = True
    allow_resets_cumulative: bool = False
    approval_resets: bool = True
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
    what: str  # review | redeliver | allowed | prompt | answer | observe
    session: str = ""
    version: int = 0
    review: s.Review | None = None
    uncertain: bool = False
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
    """A point where the fallback rule applies: a review or a prompt, and how armed."""

    index: int
    session: str
    what: str
    armed_all: bool
    armed_any: bool
    replay: bool = False
    ask_rule: bool = False
    escalation: bool = False


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


def _uncertain(trace: Trace, review: s.Review) -> bool:
    """A verdict that may never have been applied: voided or cut off by a crash."""
    for event in trace.events:
        if event.index <= review.index:
            continue
        kind, data = event.kind, event.data
        if kind == Kind.CRASH:
            return True
        if kind == Kind.FAILPOINT:
            if data.get("name") == "during_classifier_review" and data.get("action") in (
                "change_rules", "cancel", "crash", "raise"
            ):
                return True
            if data.get("name") == "after_permission_decision":
                return False
        if kind in (Kind.CLASSIFIER_REQUEST, Kind.TOOL_EXECUTED, Kind.TOOL_UNAVAILABLE, Kind.APPROVAL_PROMPT):
            return False
        if kind == Kind.MODEL_REQUEST and data.get("session_id") == review.session_id:
            return False
    return False


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


def _steps(trace: Trace) -> tuple[_Step, ...]:
    changes = s.rule_changes(trace)
    steps: list[_Step] = []
    all_reviews = s.reviews(trace)
    review_at = {r.index: r for r in all_reviews}
    steps += _redeliveries(trace, changes, all_reviews)
    unsent: set[s.OpKey] = set()
    for point in trace.observations:  # oversize operations never reach the world
        for op in point.observation.operations:
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
            steps.append(_Step(event.index, "review", review.session_id, review.permission_version,
                               review=review, uncertain=_uncertain(trace, review)))
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
        elif event.kind == Kind.DRIVER_CALL and d.get("method") == "answer_approval":
            wait_id, approve = s.answer_args(event)
            steps.append(_Step(event.index, "answer", wait_id=wait_id, approve=approve))
    for point in trace.observations:
        if point.label in s.DURABLE_LABELS and (point.label != "final" or trace.completed):
            steps.append(_Step(point.index, "observe", point=point))
    # an observation read just after event i sees everything up to and including i
    order = {"observe": 1}
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
                                      any(armed(c, st.session) for c in current), replay=replayed))
                reviewed.setdefault(k, set()).add(review.identity)
            outcome = review.outcome
            is_fault = outcome in s.FAULT_OUTCOMES
            if outcome == ClassifierOutcome.RISK_DENY or (is_fault and rules.faults_count):
                def deny(c: Counts, ident: str = review.identity) -> Iterable[Counts]:
                    if rules.dedupe and ident in c.counted:
                        return (c,)
                    return (replace(c, consecutive=c.consecutive + 1, cumulative=c.cumulative + 1,
                                    counted=c.counted | {ident}),)
                apply(k, deny, st.uncertain)
            elif outcome == ClassifierOutcome.ALLOW or (is_fault and rules.faults_reset):
                apply(k, lambda c: (reset(c),), st.uncertain)
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
                                  ask_rule=st.ask_rule, escalation=st.escalation))
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
    CounterRules(cumulative_approval_resets=False),
)
ISOLATION_LENS = (CounterRules(per_version=False), CounterRules(per_session=False))
DEDUPE_LENS = (CounterRules(dedupe=False), CounterRules(dedupe=False, count_deliveries=True))
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


def counter_replays(trace: Trace) -> CounterReplays:
    steps = _steps(trace)
    real = replay(trace, REAL, steps)
    alternatives = []
    for rules in ALL_LENSES:
        alt = replay(trace, rules, steps)
        alternatives.append((rules, alt, comparisons(trace, real, alt)))
    return CounterReplays(real, comparisons(trace, real), tuple(alternatives))


def _counter_evidence(comp: Comparison, why: str) -> Evidence:
    expected = " or ".join(f"{c}/{u}" for c, u in sorted(comp.expected))
    return s.ev(
        f"{why}: session {comp.session} version {comp.version} at '{comp.point.label}' has "
        f"consecutive/cumulative {comp.observed[0]}/{comp.observed[1]}, expected {expected}",
        comp.point.index,
    )


def _judge_counters(criterion_id: str, trace: Trace, lens: tuple[CounterRules, ...], why: str,
                    general: bool = False) -> Verdict:
    """Exercised where the lens's rule changes the expected counts. A wrong count fails the
    criterion whose broken rule explains it; with ``general``, also when no rule does."""
    replays = counter_replays(trace)
    judged = [i for i in range(len(replays.base)) if replays.differs(i, lens)]
    violations = []
    for i, comp in enumerate(replays.base):
        if comp.ok:
            continue
        if replays.explains(i, lens):
            violations.append(_counter_evidence(comp, why))
        elif general and not replays.explains(i, ALL_LENSES):
            violations.append(_counter_evidence(comp, "denial counters do not follow the counting rules"))
    return judge(criterion_id, len(judged), violations,
                 "no observed counters where this rule changes the expected counts")


# --------------------------------------------------------------------------- L3.1


def check_l3_1(trace: Trace) -> Verdict:
    configs = s.session_configs(trace)
    replays = counter_replays(trace)
    exercised, violations = 0, []
    for n, m in enumerate(replays.real.moments):
        # a prompt some broken counting rule would explain is L3.5-L3.8's to report
        lens_armed = any(alt.moments[n].armed_any for _, alt, _ in replays.alternatives)
        config = configs.get(m.session)
        if config is None or config.mode is not Mode.AUTO or not s.can_approve(config):
            continue
        if m.what == "review" and m.armed_all and not m.replay:
            exercised += 1
            violations.append(s.ev(
                f"session {m.session} reached the denial threshold, yet the next operation was "
                "sent to the classifier instead of a persisted approval wait", m.index))
        elif m.what == "prompt" and m.armed_any:
            exercised += 1
        elif m.what == "prompt" and not (m.ask_rule or m.escalation or lens_armed):
            exercised += 1
            violations.append(s.ev(
                f"session {m.session} fell back to an approval prompt before any denial threshold "
                "was reached (and no ask rule asks for it)", m.index))
    return judge("L3.1", exercised, violations, "no interactive auto session reached a denial threshold")


# --------------------------------------------------------------------------- L3.2


def check_l3_2(trace: Trace) -> Verdict:
    exercised, violations = 0, []
    spans = s.driver_spans(trace)
    all_answers = s.answers(trace)
    final = s.final_point(trace)
    for prompt in trace.of_kind(Kind.APPROVAL_PROMPT):
        d = prompt.data
        wait_id = str(d.get("wait_id", ""))
        key = (d.get("session_id", ""), d.get("tool_call_id", ""))
        probe = s.probe_for(trace, prompt, "probe:approval_prompt")
        if probe is not None:
            exercised += 1
            wait = s.find_wait(probe.observation, wait_id)
            if wait is None:
                violations.append(s.ev(f"prompt for wait {wait_id} was shown before the wait was durable", prompt.index, probe.index))
            elif wait.status is not WaitStatus.PENDING or (wait.session_id, wait.tool_call_id) != key:
                violations.append(s.ev(
                    f"wait {wait_id} stored when its prompt was shown is {wait.status.value} for "
                    f"{wait.session_id}/{wait.tool_call_id}, expected pending for {key[0]}/{key[1]}",
                    prompt.index, probe.index))
        mine = [a for a in all_answers if s.answer_args(a)[0] == wait_id and a.index > prompt.index]
        first_answer = mine[0] if mine else None
        horizon = first_answer.index if first_answer else None
        for crash in trace.crashes():
            if crash.index <= prompt.index or (horizon is not None and crash.index > horizon):
                continue
            after = [p for p in trace.observations if p.label == "after_restart" and p.index > crash.index
                     and (horizon is None or p.index < horizon)]
            if not after:
                continue
            exercised += 1
            wait = s.find_wait(after[0].observation, wait_id)
            if wait is None or wait.status is not WaitStatus.PENDING:
                state = "missing" if wait is None else wait.status.value
                violations.append(s.ev(f"after the crash following its prompt, wait {wait_id} is {state}, not pending",
                                       prompt.index, crash.index, after[0].index))
        if first_answer is None:
            continue
        exercised += 1
        approve = s.answer_args(first_answer)[1]
        rows = s.ledger_rows_for(trace, key)
        early = [r for r in rows if r.index < first_answer.index and r.index > prompt.index]
        if early:
            violations.append(s.ev(f"{key[1]} executed before its wait {wait_id} was answered",
                                   prompt.index, *(r.index for r in early), rows=early))
        late = [r for r in rows if r.index > first_answer.index]
        if not approve and late:
            violations.append(s.ev(f"{key[1]} executed although its wait {wait_id} was rejected",
                                   first_answer.index, *(r.index for r in late), rows=late))
        repeats = [pair for pair in s.reexecutions(trace) if s.ledger_key(pair[1]) == key]
        if repeats:
            violations.append(s.ev(f"the answer to wait {wait_id} was applied more than once",
                                   first_answer.index, *(b.index for _, b in repeats),
                                   rows=[b for _, b in repeats]))
        if final is not None and trace.completed and final.index > first_answer.index:
            wait = s.find_wait(final.observation, wait_id)
            wanted = WaitStatus.APPROVED if approve else WaitStatus.REJECTED
            span = next((sp for sp in spans if sp.index == first_answer.index), None)
            if wait is None or wait.status is not wanted:
                state = "missing" if wait is None else wait.status.value
                violations.append(s.ev(f"wait {wait_id} answered {wanted.value} is {state} in the store",
                                       first_answer.index, final.index))
            elif span is not None and span.end_kind == "return" and not wait.applied:
                violations.append(s.ev(f"wait {wait_id} was answered and the call returned, but the answer "
                                       "is not recorded as applied", first_answer.index, final.index))
    return judge("L3.2", exercised, violations, "no approval prompt with a probe, crash or answer")


# --------------------------------------------------------------------------- L3.3


def check_l3_3(trace: Trace) -> Verdict:
    configs = s.session_configs(trace)
    closed = {sid for sid, config in configs.items() if not s.can_approve(config)}
    if not closed:
        return judge("L3.3", 0, [], "no non-interactive session")
    exercised, violations = 0, []
    for prompt in trace.of_kind(Kind.APPROVAL_PROMPT):
        if prompt.data.get("session_id") in closed:
            exercised += 1
            violations.append(s.ev(f"non-interactive session {prompt.data.get('session_id')} got an approval "
                                   "prompt nobody can answer", prompt.index))
    reported: set[str] = set()
    for point in trace.observations:
        for wait in point.observation.approval_waits:
            if wait.session_id in closed and wait.wait_id not in reported:
                reported.add(wait.wait_id)
                exercised += 1
                violations.append(s.ev(f"non-interactive session {wait.session_id} has approval wait "
                                       f"{wait.wait_id} in the store", point.index))
    cancels = [e for e in trace.of_kind(Kind.DRIVER_CALL) if e.data.get("method") == "cancel"]
    denials: dict[s.OpKey, int] = {}
    loose: list[tuple[str, int]] = []
    for review in s.reviews(trace):
        if review.session_id in closed and review.outcome != ClassifierOutcome.ALLOW:
            if review.tool_call_id is None:
                loose.append((review.session_id, review.index))
            else:
                denials.setdefault((review.session_id, review.tool_call_id), review.index)
    emitted = s.first_emissions(trace)
    asking: set[s.OpKey] = set()
    for point in trace.observations:
        if point.label not in s.DURABLE_LABELS:
            continue
        for op in point.observation.operations:
            key = (op.session_id, op.identity.tool_call_id)
            if op.session_id not in closed:
                continue
            if op.permission is Permission.DENY:
                first = emitted[key].index if key in emitted else point.index
                denials.setdefault(key, first)
            if (op.permission is Permission.ASK and op.delivery is Delivery.PENDING and key not in asking
                    and not s.interrupted_between(trace, emitted[key].index if key in emitted else -1,
                                                  point.index + 1, op.session_id)):
                asking.add(key)
                exercised += 1
                violations.append(s.ev(f"{op.identity.tool_call_id} of non-interactive session {op.session_id} "
                                       "is left asking for an approval nobody can give", point.index))
    requests = s.model_requests(trace)

    def cancelled_after(session: str, index: int) -> bool:
        return any(c.index > index and (c.data.get("args") or {}).get("session_id", session) == session
                   for c in cancels)

    for (session, tool_call_id), index in sorted(denials.items(), key=lambda kv: kv[1]):
        exercised += 1
        if not trace.completed or cancelled_after(session, index) or s.interrupted_between(
                trace, index, None, session):
            continue
        carried = [r for r in requests if r.index > index and r.data.get("session_id") == session
                   and s.tool_message(r, tool_call_id) is not None]
        if not carried:
            violations.append(s.ev(f"after {tool_call_id} was denied in non-interactive session {session}, "
                                   "no model request carried the denial: the loop did not go on", index))
    for session, index in loose:
        exercised += 1
        if trace.completed and not cancelled_after(session, index) and not s.interrupted_between(
                trace, index, None, session) and s.first_request_after(
                trace, session, index) is None:
            violations.append(s.ev(f"after a classifier denial in non-interactive session {session}, "
                                   "no further model request: the loop did not go on", index))
    return judge("L3.3", exercised, violations, "no denial in a non-interactive session")


# --------------------------------------------------------------------------- L3.4

UNLIFTABLE = (DecisionSource.HARD_CONSTRAINT, DecisionSource.EXPLICIT_DENY)


def check_l3_4(trace: Trace) -> Verdict:
    changes = s.rule_changes(trace)
    exercised, violations = 0, []
    judged: set[s.OpKey] = set()

    def unliftable(session: str, tool: str, args: dict, index: int) -> DecisionSource | None:
        source = s.rules_in_force(trace, session, index, changes).denial_for(tool, args)
        return source if source in UNLIFTABLE else None

    for call in s.emitted_calls(trace):
        if call.tool is None or call.args is None or call.key in judged:
            continue
        if unliftable(call.session_id, call.tool, call.args, call.index + 1):
            judged.add(call.key)
    for event in trace.of_kind(Kind.APPROVAL_PROMPT, Kind.TOOL_EXECUTED):
        d = event.data
        key = (d.get("session_id", ""), d.get("tool_call_id", ""))
        tool, args = str(d.get("tool", "")), d.get("args") or {}
        source = unliftable(key[0], tool, args, event.index)
        if source is None:
            continue
        # a deny that landed after the wait was persisted (or the start recorded) came too late
        # to stop the wait (or the run): L5.2 judges what happens next
        committed = s.op_failpoint_before(
            trace, key, ("after_wait_persisted",) if event.kind == Kind.APPROVAL_PROMPT else ("after_start_recorded",),
            event.index)
        if committed is not None and unliftable(key[0], tool, args, committed.index) is None:
            continue
        judged.add(key)
        what = "an approval prompt" if event.kind == Kind.APPROVAL_PROMPT else "an execution"
        violations.append(s.ev(f"{key[1]} is denied by {source.value}, yet it got {what}", event.index,
                               rows=[event] if event.kind == Kind.TOOL_EXECUTED else []))
    reported: set[tuple[str, str]] = set()
    for point in trace.observations:
        obs = point.observation
        for op in obs.operations:
            if op.decided_by not in UNLIFTABLE:
                continue
            key = (op.session_id, op.identity.tool_call_id)
            judged.add(key)
            if (op.permission is not Permission.DENY or op.outcome.value != "not_started") and (key[1], "state") not in reported:
                reported.add((key[1], "state"))
                violations.append(s.ev(f"{key[1]} decided by {op.decided_by.value} is stored as "
                                       f"{op.permission.value}/{op.outcome.value}, expected deny/not_started",
                                       point.index))
            for wait in obs.approval_waits:
                if wait.execution_id == op.identity.execution_id and (wait.wait_id, "wait") not in reported:
                    reported.add((wait.wait_id, "wait"))
                    violations.append(s.ev(f"{key[1]} decided by {op.decided_by.value} has approval wait "
                                           f"{wait.wait_id}", point.index))
    exercised = len(judged)
    return judge("L3.4", exercised, violations, "no call denied by a hard constraint or an explicit deny")


# --------------------------------------------------------------------------- L3.5-L3.8


def check_l3_5(trace: Trace) -> Verdict:
    return _judge_counters("L3.5", trace, RESET_LENS, "denial counters do not follow the reset rules",
                           general=True)


def check_l3_6(trace: Trace) -> Verdict:
    return _judge_counters("L3.6", trace, ISOLATION_LENS,
                           "denial counters are not isolated per session and permission version")


def check_l3_7(trace: Trace) -> Verdict:
    return _judge_counters("L3.7", trace, DEDUPE_LENS,
                           "a replayed or duplicated operation changed the denial counters again")


def check_l3_8(trace: Trace) -> Verdict:
    return _judge_counters("L3.8", trace, FAULT_LENS,
                           "a classifier fault (no verdict) changed the denial counters")


# --------------------------------------------------------------------------- L3.9


def check_l3_9(trace: Trace) -> Verdict:
    configs = s.session_configs(trace)
    changes = s.rule_changes(trace)
    all_reviews = s.reviews(trace)
    reviewed = {(r.session_id, r.tool_call_id) for r in all_reviews if r.tool_call_id}
    prompted = {(p.data.get("session_id"), p.data.get("tool_call_id")) for p in trace.of_kind(Kind.APPROVAL_PROMPT)}
    prompted |= {(w.session_id, w.tool_call_id) for p in trace.observations for w in p.observation.approval_waits}
    exercised, violations = 0, []
    emitted = s.first_emissions(trace)
    for key, call in sorted(emitted.items(), key=lambda kv: kv[1].index):
        config = configs.get(call.session_id)
        if config is None or config.mode is not Mode.AUTO or call.tool is None or call.args is None:
            continue
        th = s.thresholds_for(trace, call.session_id)
        kinds = s.tool_kinds(trace, call.session_id)
        version = s.version_at(trace, call.session_id, call.index + 1, changes)
        dk = s.dedup_key(call.tool, call.args, kinds.get(call.tool))

        def same_key(tool_call_id: str) -> bool:
            other = emitted.get((call.session_id, tool_call_id))
            return (other is not None and other.tool is not None and other.args is not None
                    and s.dedup_key(other.tool, other.args, kinds.get(other.tool)) == dk)

        history = [r for r in all_reviews if r.index < call.index and r.session_id == call.session_id
                   and r.permission_version == version and r.tool_call_id and r.tool_call_id != call.tool_call_id
                   and same_key(r.tool_call_id)]
        failures = [row for row in trace.ledger() if row.index < call.index and s.ledger_key(row)[0] == call.session_id
                    and same_key(row.data.get("tool_call_id", "")) and row.data.get("status") != "ok"]
        denied_ids = {r.tool_call_id for r in history if r.outcome == ClassifierOutcome.RISK_DENY}
        if len(denied_ids) < th.failure_repeat_limit or failures or any(
                r.outcome != ClassifierOutcome.RISK_DENY for r in history):
            continue
        if not s.can_approve(config):
            streak = {r.identity for r in all_reviews if r.index < call.index and r.session_id == call.session_id
                      and r.permission_version == version and r.outcome == ClassifierOutcome.RISK_DENY}
            if len(streak) >= th.consecutive_denials_max:
                continue  # a closed session past the threshold may keep the denial unreviewed
        stored = [(p, s.find_op(p.observation, key)) for p in trace.observations]
        stored = [(p, op) for p, op in stored if op is not None]
        processed = key in reviewed or key in prompted or bool(stored)
        if not processed:
            continue
        guard = [(p, op) for p, op in stored if op.decided_by is DecisionSource.REPEAT_GUARD]
        if (not guard and key not in reviewed and key not in prompted
                and s.cancelled(trace, call.session_id, after=call.index)):
            continue  # cancelled before its review: "审查期间取消…不执行", no repeat judged
        exercised += 1
        if guard:
            violations.append(s.ev(f"{call.tool_call_id} was refused by the repeat guard after "
                                   f"{len(denied_ids)} classifier risk denials of the same operation",
                                   call.index, guard[0][0].index))
        elif key not in reviewed and key not in prompted:
            violations.append(s.ev(f"{call.tool_call_id} repeats an operation risk-denied {len(denied_ids)} "
                                   "times and never reached the classifier or an approval",
                                   call.index, *(r.index for r in history)))
    return judge("L3.9", exercised, violations, "no operation repeated after repeated risk denials")


# --------------------------------------------------------------------------- L3.10


def check_l3_10(trace: Trace) -> Verdict:
    configs = s.session_configs(trace)
    exercised, violations = 0, []
    for prompt in trace.of_kind(Kind.APPROVAL_PROMPT):
        session = prompt.data.get("session_id", "")
        exercised += 1
        if not s.can_approve(configs.get(session)):
            violations.append(s.ev(f"session {session} (not an interactive owner who can approve) got an "
                                   "approval prompt", prompt.index))
    seen: set[str] = {str(p.data.get("wait_id")) for p in trace.of_kind(Kind.APPROVAL_PROMPT)}
    closed_denied: set[str] = set()
    for point in trace.observations:
        for wait in point.observation.approval_waits:
            if wait.wait_id in seen:
                continue
            seen.add(wait.wait_id)
            exercised += 1
            if not s.can_approve(configs.get(wait.session_id)):
                violations.append(s.ev(f"session {wait.session_id} (not an interactive owner who can approve) "
                                       f"has approval wait {wait.wait_id}", point.index))
        for op in point.observation.operations:
            if s.can_approve(configs.get(op.session_id)) or op.session_id not in configs:
                continue
            if op.decided_by is DecisionSource.APPROVAL:
                violations.append(s.ev(f"{op.identity.tool_call_id} of session {op.session_id} was decided by an "
                                       "approval its owner cannot give", point.index))
            if op.permission is Permission.DENY and op.session_id not in closed_denied:
                closed_denied.add(op.session_id)
                exercised += 1
    return judge("L3.10", exercised, violations, "no approval prompt, wait or denial in a closed session")


# --------------------------------------------------------------------------- catalogue

CRITERIA: tuple[Criterion, ...] = (
    Criterion(
        "L3.1", "l3", "Fallback to manual approval",
        "In an interactive auto session, once classifier risk denials reach 3 in a row or 20 in "
        "total for the session and permission version, the next operation that needs review goes "
        "to a persisted approval wait instead of the classifier.",
        "交互式 auto 回退采用连续 3 次、累计 20 次分类拒绝的默认值。",
        check_l3_1, (Feature.AUTO_MODE, Feature.APPROVALS),
    ),
    Criterion(
        "L3.2", "l3", "Waits are durable",
        "Every approval prompt matches a pending wait already committed when the prompt is "
        "shown; a crash after the prompt leaves the wait pending and answerable, and its answer "
        "takes effect exactly once.",
        "分类拒绝后直接弹审批会缺少可恢复的持久化等待记录。",
        check_l3_2, (Feature.APPROVALS,),
    ),
    Criterion(
        "L3.3", "l3", "Non-interactive creates no unanswerable waits",
        "A session that is not interactive, or whose owner cannot approve, gets no approval "
        "prompt and no wait; its denials stand and the agent loop goes on with other work.",
        "非交互任务保留拒绝并继续其他获准工作。",
        check_l3_3,
    ),
    Criterion(
        "L3.4", "l3", "Hard constraints and explicit deny are never approvable",
        "An operation denied by a hard constraint or an explicit deny rule never becomes an "
        "approval wait or prompt, and no fallback or approval makes it execute.",
        "硬约束和明确禁止不能变成可覆盖的审批。",
        check_l3_4,
    ),
    Criterion(
        "L3.5", "l3", "Counter reset rules",
        "Allowed operations and approved fallback operations reset only the consecutive denial "
        "count; the cumulative count resets only when the approval its threshold triggered "
        "completes, or with a new permission version.",
        "允许的操作及经审批的回退操作只重置连续次数，累计次数在累计阈值触发的审批完成或周期变化时重置。",
        check_l3_5, (Feature.AUTO_MODE,),
    ),
    Criterion(
        "L3.6", "l3", "Counter isolation",
        "Denial counts are kept per session and permission version; an explicit version change "
        "starts a new counting period.",
        "拒绝计数按会话和用户权限版本隔离。显式权限版本变化开始新的计数周期。",
        check_l3_6, (Feature.AUTO_MODE,),
    ),
    Criterion(
        "L3.7", "l3", "No double counting",
        "Recovery replays and concurrent duplicate deliveries of one operation identity change "
        "the denial counters at most once.",
        "恢复和并发调用通过操作身份避免重复计数。",
        check_l3_7, (Feature.AUTO_MODE,),
    ),
    Criterion(
        "L3.8", "l3", "Faults do not count",
        "Classifier timeouts, service errors, cancellations and missing verdicts leave both "
        "denial counts unchanged.",
        "没有布尔判断的分类器故障不改变计数。",
        check_l3_8, (Feature.AUTO_MODE,),
    ),
    Criterion(
        "L3.9", "l3", "Risk denials are not execution failures",
        "Classifier risk denials do not use up the execution-failure repeat budget: the same "
        "operation keeps reaching the classifier until the approval threshold is reached.",
        "自动风险拒绝不占执行失败重复次数，使相同操作能够达到人工审批阈值。",
        check_l3_9, (Feature.AUTO_MODE,),
    ),
    Criterion(
        "L3.10", "l3", "Only capable interactive owners get waits",
        "Approval prompts and waits exist only for interactive sessions whose owner can approve.",
        "仅对具备相应能力的交互式所有者创建持久化审批。",
        check_l3_10, (Feature.APPROVALS,),
    ),
)
