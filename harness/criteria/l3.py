"""Stage L3: permission state and approval waits (denial counters, fallback, durable waits).

Every check is a pure function of the Trace. The world judges: the denial criteria (L3.1,
L3.5-L3.8) are decided first by *behaviour* against :mod:`harness.criteria.denial_oracle`
(which operation went to the classifier, to a wait, or was denied silently, given the counts
the world's events demand), then by the store's ``denial_counters`` compared with the
oracle's counts at every observation at rest (the second witness: a mismatch fails too).
A wrong behaviour or count is reported by the criterion whose rule, broken on purpose in
the oracle (a lens), predicts it; a missing or silent fallback always fails L3.1, an early
one fails L3.1 when no broken rule explains it.

"Exercised" means the hard case happened; each check's docstring states its rule, and a
trace without it is ``not_exercised``, never ``pass``.
"""

from __future__ import annotations

from harness.contract import (
    ClassifierOutcome,
    DecisionSource,
    Delivery,
    Feature,
    Mode,
    Outcome,
    Permission,
    WaitStatus,
    execution_id_for,
)
from harness.criteria import approval_answers
from harness.criteria import facts as F
from harness.criteria import reading_changes
from harness.criteria import trace_readings as s
from harness.criteria.base import Criterion, Evidence, Verdict, judge
from harness.criteria.denial_oracle import (
    ALL_LENSES,
    DEDUPE_LENS,
    FAULT_LENS,
    ISOLATION_LENS,
    RESET_LENS,
    Comparison,
    CounterRules,
    Finding,
    counter_replays,
    fallback_findings,
    fallback_moments_judged,
)
from harness.trace.record import Kind, Trace

# --------------------------------------------------------------------------- L3.5-L3.8 (shared)


def _counter_evidence(comp: Comparison, why: str) -> Evidence:
    expected = " or ".join(f"{c}/{u}" for c, u in sorted(comp.expected))
    return s.ev(
        f"{why}: session {comp.session} version {comp.version} at '{comp.point.label}' has "
        f"consecutive/cumulative {comp.observed[0]}/{comp.observed[1]}, expected {expected}",
        comp.point.index,
    )


_FINDING_NOTES = {
    "missing": "reached the denial threshold, yet {op} was sent to the classifier instead of a persisted approval wait",
    "silent": "reached the denial threshold, yet {op} was denied without review and without an approval wait "
              "(a silent fallback)",
    "early": "fell back to an approval wait for {op} before any denial threshold was reached",
}


def _finding_evidence(finding: Finding, why: str = "") -> Evidence:
    m = finding.moment
    note = f"session {m.session} " + _FINDING_NOTES[finding.kind].format(op=m.tool_call_id or "the operation")
    note += f" [{m.counted()}]"
    return s.ev(note + (f" ({why})" if why else ""), m.index)


def _judge_counters(criterion_id: str, trace: Trace, lens: tuple[CounterRules, ...], why: str,
                    general: bool = False) -> Verdict:
    """Behaviour first: a fallback that happened too early, too late or silently where a rule
    of ``lens``, broken, predicts exactly that behaviour fails the criterion whatever the store
    says. Then the store: a reported count the oracle rejects fails the criterion whose broken
    rule explains it; with ``general``, also when no rule does.

    Exercised: a moment of an interactive auto session (review, prompt, silent denial) where
    breaking the rule changes whether a threshold is reached, or an observation at rest where
    breaking it changes the expected counts."""
    replays = counter_replays(trace)
    judged = [i for i in range(len(replays.base)) if replays.differs(i, lens)]
    moments = fallback_moments_judged(trace, replays, lens)
    violations = []
    for finding in fallback_findings(trace, replays):
        if any(rules in lens for rules in finding.explained_by):
            violations.append(_finding_evidence(finding, why))
    for i, comp in enumerate(replays.base):
        if comp.ok:
            continue
        if replays.explains(i, lens):
            violations.append(_counter_evidence(comp, why))
        elif general and not replays.explains(i, ALL_LENSES):
            violations.append(_counter_evidence(comp, "denial counters do not follow the counting rules"))
    return judge(criterion_id, len(judged) + len(moments), violations,
                 "no moment or observed counters where this rule changes what is expected")


# --------------------------------------------------------------------------- L3.1


def check_l3_1(trace: Trace) -> Verdict:
    """Behaviour against the oracle, whatever ``inspect()`` says: once the thresholds are
    reached in an interactive auto session whose owner can approve, the next operation
    needing review must become a prompt (a persisted wait), neither a classifier review nor a
    silent denial; a prompt before any threshold (no ask rule, no escalation) fails unless a
    broken counting rule explains it (then L3.5-L3.8 report it).

    Exercised: such a session reached a threshold and an operation needing review came next
    (it was prompted, reviewed or silently denied), or an unexplained early prompt."""
    replays = counter_replays(trace)
    findings = fallback_findings(trace, replays)
    sessions = {sid for sid, c in s.session_configs(trace).items() if c.mode is Mode.AUTO and s.can_approve(c)}
    exercised, violations = 0, []
    for m in replays.real.moments:
        if m.session in sessions and m.what == "prompt" and m.armed_any:
            exercised += 1
    for finding in findings:
        if finding.kind in ("missing", "silent"):
            exercised += 1
            violations.append(_finding_evidence(finding))
        elif not finding.explained_by:
            exercised += 1
            violations.append(_finding_evidence(finding, "and no ask rule asks for it"))
    return judge("L3.1", exercised, violations, "no interactive auto session reached a denial threshold")


# --------------------------------------------------------------------------- L3.2


STOPPED_BEFORE_RUN = (
    DecisionSource.REVALIDATION, DecisionSource.HARD_CONSTRAINT, DecisionSource.EXPLICIT_DENY,
    DecisionSource.CAPABILITY, DecisionSource.PLAN_MODE, DecisionSource.CANCELLATION,
)
"""Who may legitimately stop an approved operation before it runs (the record must say so)."""


def _approval_voided(trace: Trace, key: tuple[str, str], since: int, final: int) -> bool:
    """Did a rule change since ``since`` void the approval (docs/lifecycle.md: an approval
    is bound to the version it was asked under; after a change only an exact grant still
    allows the call), by the harness's own precedence model?"""
    op = F.operations(trace).get(key)
    if op is None or not F.rule_changes_between(trace, key[0], since, final):
        return False
    return F.decision_at(trace, op, final).permission is not Permission.ALLOW


def check_l3_2(trace: Trace) -> Verdict:
    """Each prompt matches a pending wait already durable when it was shown (probe), survives a
    crash after it, and its first answer (an ``answer_approval``, or a new message in its
    session, which answers "no": :mod:`harness.criteria.approval_answers`) takes effect
    exactly once, judged from the ledger: an
    approved wait leads to exactly one execution after the answer (none before), unless the
    operation's record shows it not started, stopped by revalidation or a rule that cannot be
    lifted (for an escalation, whose sandboxed result stands: unless the rules changed after
    its prompt so that they no longer allow the call); a rejected one to none; a repeated answer changes nothing (no second execution, the
    wait keeps the first answer's status).

    Exercised: a prompt probed when shown, a crash after a prompt followed by a restart
    before its answer, or an answered prompt."""
    exercised, violations = 0, []
    spans = s.driver_spans(trace)
    all_answers = approval_answers.answers(trace)
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
        mine = [a for a in all_answers if a.wait_id == wait_id and a.index >= prompt.index]
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
        approve = first_answer.approve
        rows = s.ledger_rows_for(trace, key)
        early = [r for r in rows if r.index < first_answer.index and r.index > prompt.index]
        if early:
            violations.append(s.ev(f"{key[1]} executed before its wait {wait_id} was answered",
                                   prompt.index, *(r.index for r in early), rows=early))
        late = [r for r in rows if r.index > first_answer.index]
        if not approve and late:
            violations.append(s.ev(f"{key[1]} executed although its wait {wait_id} was rejected",
                                   first_answer.index, *(r.index for r in late), rows=late))
        unavailable = [e for e in trace.of_kind(Kind.TOOL_UNAVAILABLE)
                       if s.ledger_key(e) == key and e.index > first_answer.index]
        if approve and not late and not unavailable and trace.completed and final is not None \
                and final.index > first_answer.index:
            op = s.find_op(final.observation, key)
            stopped = (op is not None and op.outcome is Outcome.NOT_STARTED and not op.execution_started
                       and op.decided_by in STOPPED_BEFORE_RUN)
            # An escalation's prompt follows its sandboxed attempt, whose saved result stands
            # (and may not change: L5.1) when the run outside the sandbox is stopped: judged
            # from the world, the rules changed since that attempt and no longer allow the call.
            sandboxed = [r.index for r in rows if r.index < prompt.index]
            if not stopped and op is not None and sandboxed:
                stopped = _approval_voided(trace, key, sandboxed[-1], final.index)
            asked_again = any(p.index > first_answer.index and (p.data.get("session_id"), p.data.get("tool_call_id")) == key
                              for p in trace.of_kind(Kind.APPROVAL_PROMPT))
            if not stopped and not asked_again and not s.cancelled(trace, key[0], first_answer.index) \
                    and not s.interrupted_between(trace, first_answer.index, None, key[0]):
                state = "missing" if op is None else f"{op.outcome.value} (decided by {op.decided_by.value})"
                violations.append(s.ev(f"wait {wait_id} was approved, yet {key[1]} never executed and its "
                                       f"record ({state}) does not say revalidation stopped it",
                                       first_answer.index, final.index))
        for again in mine[1:]:
            later = [p for p in trace.observations if p.index > again.index and p.label in s.DURABLE_LABELS]
            wanted = WaitStatus.APPROVED if approve else WaitStatus.REJECTED
            changed = [p for p in later if (w := s.find_wait(p.observation, wait_id)) is not None
                       and w.status is not wanted and w.status is not WaitStatus.PENDING]
            if changed:
                violations.append(s.ev(f"a second answer to wait {wait_id} changed it to "
                                       f"{s.find_wait(changed[0].observation, wait_id).status.value}",
                                       again.index, changed[0].index))
        repeats = [pair for pair in s.reexecutions(trace) if s.ledger_key(pair[1]) == key]
        if repeats:
            violations.append(s.ev(f"the answer to wait {wait_id} was applied more than once",
                                   first_answer.index, *(b.index for _, b in repeats),
                                   rows=[b for _, b in repeats]))
        if final is not None and trace.completed and final.index > first_answer.index:
            wait = s.find_wait(final.observation, wait_id)
            wanted = WaitStatus.APPROVED if approve else WaitStatus.REJECTED
            span = next((sp for sp in spans if sp.index == first_answer.call_index), None)
            if wait is None or wait.status is not wanted:
                state = "missing" if wait is None else wait.status.value
                violations.append(s.ev(f"wait {wait_id} answered {wanted.value} is {state} in the store",
                                       first_answer.index, final.index))
            elif span is not None and span.end_kind == "return" and not wait.applied:
                violations.append(s.ev(f"wait {wait_id} was answered and the call returned, but the answer "
                                       "is not recorded as applied", first_answer.index, final.index))
    unshown_exercised, unshown = _unshown_waits(trace, final)
    exercised += unshown_exercised
    violations += unshown
    return judge("L3.2", exercised, violations, "no approval prompt with a probe, crash or answer")


def _unshown_waits(trace: Trace, final) -> tuple[int, list[Evidence]]:
    """A wait is for the owner to answer, and the owner answers only what was shown. A wait
    the store still holds pending at the end of a completed run must have been shown (an
    ``APPROVAL_PROMPT`` for it in the world), unless the instance that committed it was cut
    off before showing it and no ``recover()`` has returned since: a recovery must show the
    waits a crash left unshown (docs/lifecycle.md, recovery table).

    Exercised once per wait committed, cut off before its prompt, then recovered."""
    first_seen: dict[str, int] = {}
    for point in trace.observations:
        for wait in point.observation.approval_waits:
            first_seen.setdefault(wait.wait_id, point.index)
    if not first_seen:
        return 0, []
    prompts: dict[str, list[int]] = {}
    for prompt in trace.of_kind(Kind.APPROVAL_PROMPT):
        prompts.setdefault(str(prompt.data.get("wait_id", "")), []).append(prompt.index)
    pending_at_end = {}
    if final is not None and trace.completed:
        pending_at_end = {w.wait_id: w for w in final.observation.approval_waits
                          if w.status is WaitStatus.PENDING}
    exercised, violations = 0, []
    for wait_id, seen in first_seen.items():
        shown = prompts.get(wait_id, [])
        # A probe at a failpoint shares the index of the hit a crash there is dated by.
        cut = s.first_interruption(trace, seen - 1, min(shown, default=None))
        recovery = s.recovery_after(trace, cut.index) if cut is not None else None
        if recovery is not None:
            exercised += 1
        if wait_id not in pending_at_end or shown:
            continue
        if cut is None:
            violations.append(s.ev(f"wait {wait_id} is pending at the end but was never shown to the "
                                   "owner, and nothing cut its instance off before the prompt",
                                   seen, final.index))
        elif recovery is not None:
            violations.append(s.ev(f"wait {wait_id} was committed, its instance cut off before showing "
                                   f"it, and the recovery at event {recovery.index} never showed it: "
                                   "still pending at the end, unanswerable", seen, cut.index,
                                   recovery.index, final.index))
    return exercised, violations


# --------------------------------------------------------------------------- L3.3


def check_l3_3(trace: Trace) -> Verdict:
    """A session that is not interactive, or whose owner cannot approve, gets no prompt and no
    wait (the world's prompts, the store's waits, no operation left asking); every denial of
    its operations reaches the model in a later request (the loop goes on), unless the run
    was cancelled or interrupted.

    Exercised: such a session had a call denied (classifier, rule or fallback), or got a
    prompt or wait, or left a call asking."""
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
    """A call a hard constraint or an explicit deny rule forbids (judged from the rules in
    force, not the implementation's label) gets no approval wait, no prompt and no execution
    in the world, and is stored as deny/not_started; a wait the store keeps open for a call
    it says such a layer decided is one too ("硬约束和明确禁止不能变成可覆盖的审批").

    Exercised: a call the rules in force forbid that way was emitted (or so recorded)."""
    judge_state = _Unliftable(trace)
    violations = [*_prompted_or_executed_although_unliftable(trace, judge_state),
                  *_wait_created_although_unliftable(trace, judge_state),
                  *_stored_unliftable_not_denied_or_waiting(trace, judge_state)]
    for call in s.emitted_calls(trace):
        if call.tool is not None and call.args is not None and call.key not in judge_state.judged \
                and judge_state.source(call.session_id, call.tool, call.args, call.index + 1):
            judge_state.judged.add(call.key)
    return judge("L3.4", len(judge_state.judged), violations,
                 "no call denied by a hard constraint or an explicit deny")


class _Unliftable:
    """The rules in force, read once per trace, asked whether they forbid a call by a layer
    no approval may lift; and the calls judged so far."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.changes = s.rule_changes(trace)
        self.judged: set[s.OpKey] = set()

    def source(self, session: str, tool: str, args: dict, index: int) -> DecisionSource | None:
        """The unliftable layer forbidding ``tool(args)`` for what the world saw after
        event ``index - 1``, or None."""
        found = s.rules_in_force(self.trace, session, index, self.changes).denial_for(tool, args)
        return found if found in UNLIFTABLE else None


def _prompted_or_executed_although_unliftable(trace: Trace, rules: _Unliftable) -> list[Evidence]:
    """"硬约束和明确禁止不能变成可覆盖的审批": no prompt is shown and nothing executes for a call
    the rules in force forbid by a hard constraint or an explicit deny. A deny that landed
    after the wait was persisted (or the start recorded) came too late to stop the wait (or
    the run): L5.2 judges what happens next."""
    violations = []
    for event in trace.of_kind(Kind.APPROVAL_PROMPT, Kind.TOOL_EXECUTED):
        d = event.data
        key = (d.get("session_id", ""), d.get("tool_call_id", ""))
        tool, args = str(d.get("tool", "")), d.get("args") or {}
        source = rules.source(key[0], tool, args, event.index)
        if source is None:
            continue
        committed = s.op_failpoint_before(
            trace, key, ("after_wait_persisted",) if event.kind == Kind.APPROVAL_PROMPT else ("after_start_recorded",),
            event.index)
        if committed is not None and rules.source(key[0], tool, args, committed.index) is None:
            continue
        rules.judged.add(key)
        what = "an approval prompt" if event.kind == Kind.APPROVAL_PROMPT else "an execution"
        violations.append(s.ev(f"{key[1]} is denied by {source.value}, yet it got {what}", event.index,
                               rows=[event] if event.kind == Kind.TOOL_EXECUTED else []))
    return violations


def _wait_created_although_unliftable(trace: Trace, rules: _Unliftable) -> list[Evidence]:
    """"硬约束和明确禁止不能变成可覆盖的审批": no approval wait is created for a call the rules
    in force forbid by a hard constraint or an explicit deny, even one withdrawn before any
    prompt. A wait is judged when it first shows (its ``approval_wait_created`` event or the
    first reading of the store that holds it), by the rules in force then: a wait created
    while the call was only asked for, and closed when a later rule change denied it, is the
    revocation working (L5.2), not a deny made approvable."""
    first: dict[str, tuple[int, str, str]] = {}  # wait id -> (index, session, execution id)

    def seen(index: int, wait_id: str, session: str, execution_id: str) -> None:
        if wait_id and (wait_id not in first or index < first[wait_id][0]):
            first[wait_id] = (index, session, execution_id)

    for event in trace.of_kind(Kind.LIFECYCLE_EVENT):
        body = event.data.get("event") or {}
        if body.get("type") == "approval_wait_created":
            seen(event.index, str((body.get("data") or {}).get("wait_id", "")),
                 str(body.get("session_id", "")), str(body.get("execution_id", "")))
    for point in trace.observations:
        for wait in point.observation.approval_waits:
            seen(point.index, wait.wait_id, wait.session_id, wait.execution_id)
    calls = _calls_by_execution_id(trace)
    violations = []
    for wait_id, (index, session, execution_id) in sorted(first.items(), key=lambda item: item[1][0]):
        call = calls.get(execution_id)
        if call is None:
            continue
        key, tool, args = call
        source = rules.source(session or key[0], tool, args, index)
        if source is None:
            continue
        rules.judged.add(key)
        violations.append(s.ev(f"{key[1]} is denied by {source.value} (the rules in force when its "
                               f"approval wait {wait_id} first showed), yet that wait was created",
                               index))
    return violations


def _calls_by_execution_id(trace: Trace) -> dict[str, tuple[s.OpKey, str, dict]]:
    """Execution id -> (operation key, tool, args): the calls the world served, then the
    store's operations (for a call only the store names)."""
    found: dict[str, tuple[s.OpKey, str, dict]] = {}
    for call in s.emitted_calls(trace):
        if call.tool is not None and call.args is not None:
            found.setdefault(execution_id_for(*call.key), (call.key, call.tool, call.args))
    for _, op in reading_changes.new_rows(trace):  # each reading's new rows (setdefault)
        found.setdefault(op.identity.execution_id,
                         ((op.session_id, op.identity.tool_call_id), op.tool, op.args))
    return found


def _stored_unliftable_not_denied_or_waiting(trace: Trace, rules: _Unliftable) -> list[Evidence]:
    """A call the store says a hard constraint or an explicit deny decided is stored as
    deny/not_started, and no wait of it stays pending ("回退至人工审批不解除任何显式禁止"); a
    wait already closed (withdrawn or answered) when the deny came is history, not an
    approvable wait."""
    violations = []
    reported: set[tuple[str, str]] = set()
    if not any(op.decided_by in UNLIFTABLE for _, op in reading_changes.new_rows(trace)):
        return violations  # no reading holds such a row (each row is some reading's new one)
    for point in trace.observations:
        obs = point.observation
        for op in obs.operations:
            if op.decided_by not in UNLIFTABLE:
                continue
            key = (op.session_id, op.identity.tool_call_id)
            rules.judged.add(key)
            if (op.permission is not Permission.DENY or op.outcome.value != "not_started") and (key[1], "state") not in reported:
                reported.add((key[1], "state"))
                violations.append(s.ev(f"{key[1]} decided by {op.decided_by.value} is stored as "
                                       f"{op.permission.value}/{op.outcome.value}, expected deny/not_started",
                                       point.index))
            for wait in obs.approval_waits:
                if wait.execution_id == op.identity.execution_id and wait.status is WaitStatus.PENDING \
                        and (wait.wait_id, "wait") not in reported:
                    reported.add((wait.wait_id, "wait"))
                    violations.append(s.ev(f"{key[1]} decided by {op.decided_by.value} has pending approval "
                                           f"wait {wait.wait_id}", point.index))
    return violations


# --------------------------------------------------------------------------- L3.5-L3.8


def check_l3_5(trace: Trace) -> Verdict:
    """Reset rules (allowed operations and approved fallbacks reset only the consecutive
    count; the cumulative count resets when the approval its threshold triggered completes),
    judged by behaviour and then by the stored counts (see :func:`_judge_counters`); also
    reports stored counts no counting rule explains.

    Exercised: a moment or observation where breaking one reset rule changes what is
    expected (an allow or an approval happened between denials that matter)."""
    return _judge_counters("L3.5", trace, RESET_LENS, "denial counters do not follow the reset rules",
                           general=True)


def check_l3_6(trace: Trace) -> Verdict:
    """Counts per (session, permission version); a new version starts at zero.

    Exercised: a moment or observation where sharing counts across versions or sessions
    would change what is expected (denials in one period, then a review, prompt or
    observation in another)."""
    return _judge_counters("L3.6", trace, ISOLATION_LENS,
                           "denial counters are not isolated per session and permission version")


def check_l3_7(trace: Trace) -> Verdict:
    """A risk denial counts once per operation identity: re-deliveries, recovery replays and
    concurrent duplicates do not count again, and a crash right after the decision does not
    lose it.

    Exercised: a moment or observation where counting a replay or duplicate again, or losing
    a denial to the crash that followed its decision, changes what is expected."""
    return _judge_counters("L3.7", trace, DEDUPE_LENS,
                           "a replayed or duplicated operation changed the denial counters again")


def check_l3_8(trace: Trace) -> Verdict:
    """Classifier timeouts, service errors, cancellations and oversize no-verdicts change
    neither count: a fallback that comes early because a fault was counted (or late because
    it reset the streak) fails, whatever the store says; so do stored counts that moved.

    Exercised: a classifier fault happened where counting it, or letting it reset the
    streak, changes a later fallback moment or an observed count."""
    return _judge_counters("L3.8", trace, FAULT_LENS,
                           "a classifier fault (no verdict) changed the denial counters")


# --------------------------------------------------------------------------- L3.9


def check_l3_9(trace: Trace) -> Verdict:
    """Risk denials do not use up the execution-failure repeat budget: an auto-mode call that
    repeats an operation risk-denied at least ``failure_repeat_limit`` times (no execution
    failure of it) still reaches the classifier or an approval, and is not refused by the
    repeat guard.

    Exercised: such a repeat was emitted and processed (reviewed, prompted or stored)."""
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
        # the owner's refusals of the same operation do use the budget (docs/contract.md;
        # found by generation: a refused fallback, then the repeat guard)
        refused = [prompt for at, prompt in approval_answers.refusals(trace) if at < call.index
                   and prompt.data.get("session_id") == call.session_id
                   and same_key(str(prompt.data.get("tool_call_id", "")))]
        # a run of the same operation a crash cut after its start is unknown, never retried
        # (L1.7), and uses the budget too (found by generation in process mode)
        cut = [e for e in trace.of_kind(Kind.FAILPOINT) if e.index < call.index
               and e.data.get("action") == "crash"
               and e.data.get("name") in ("after_start_recorded", "after_tool_returned")
               and (e.data.get("context") or {}).get("session_id") == call.session_id
               and same_key(str((e.data.get("context") or {}).get("tool_call_id", "")))]
        if len(denied_ids) < th.failure_repeat_limit or failures or refused or cut or any(
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


def _open_at(trace: Trace, session: str, index: int) -> bool:
    """The session had not been cancelled before event ``index``."""
    return not any(e.index < index and e.data.get("method") == "cancel"
                   and (e.data.get("args") or {}).get("session_id", session) == session
                   for e in trace.of_kind(Kind.DRIVER_CALL))


def _needs_owner(state: s.RuleState, tool: str, args: dict) -> bool:
    """Rules alone send this call to a human: an ask rule, or no rule at all in default mode."""
    if state.denial_for(tool, args) is not None:
        return False
    if state.asks(tool, args):
        return True
    granted = any(r.effect.value == "allow" and s.rule_matches(r, tool, args) for r in state.rules)
    return state.mode is Mode.DEFAULT and not granted


def check_l3_10(trace: Trace) -> Verdict:
    """Prompts and waits exist only for interactive sessions whose owner can approve; in any
    other session an operation that would need an owner's approval is denied without a wait,
    and nothing is decided by an approval.

    Exercised, only for sessions still open (not cancelled) at that moment: a prompt or a
    wait in such a session (the capability check let it through), or an operation of a
    session whose owner cannot approve that the rules send to a human (ask rule, or no rule
    in default mode) - the capability check had to refuse the wait. A wait or denial in a
    cancelled session is judged but exercises nothing: cancellation alone explains it."""
    configs = s.session_configs(trace)
    changes = s.rule_changes(trace)
    exercised, violations = 0, []
    for prompt in trace.of_kind(Kind.APPROVAL_PROMPT):
        session = prompt.data.get("session_id", "")
        exercised += _open_at(trace, session, prompt.index)
        if not s.can_approve(configs.get(session)):
            violations.append(s.ev(f"session {session} (not an interactive owner who can approve) got an "
                                   "approval prompt", prompt.index))
    seen: set[str] = {str(p.data.get("wait_id")) for p in trace.of_kind(Kind.APPROVAL_PROMPT)}
    # A row's fault below depends on the row alone: when no reading's new rows have one,
    # no reading has one, and only the waits need reading point by point.
    rows_at_fault = any(
        not (s.can_approve(configs.get(op.session_id)) or op.session_id not in configs)
        and op.decided_by is DecisionSource.APPROVAL for _, op in reading_changes.new_rows(trace))
    for point in trace.observations:
        for wait in point.observation.approval_waits:
            if wait.wait_id in seen:
                continue
            seen.add(wait.wait_id)
            exercised += _open_at(trace, wait.session_id, point.index)
            if not s.can_approve(configs.get(wait.session_id)):
                violations.append(s.ev(f"session {wait.session_id} (not an interactive owner who can approve) "
                                       f"has approval wait {wait.wait_id}", point.index))
        for op in point.observation.operations if rows_at_fault else ():
            if s.can_approve(configs.get(op.session_id)) or op.session_id not in configs:
                continue
            if op.decided_by is DecisionSource.APPROVAL:
                violations.append(s.ev(f"{op.identity.tool_call_id} of session {op.session_id} was decided by an "
                                       "approval its owner cannot give", point.index))
    for key, call in s.first_emissions(trace).items():
        if call.tool is None or call.args is None or s.can_approve(configs.get(call.session_id)):
            continue
        if call.session_id in configs and _open_at(trace, call.session_id, call.index) and _needs_owner(
                s.rules_in_force(trace, call.session_id, call.index + 1, changes), call.tool, call.args):
            exercised += 1
    return judge("L3.10", exercised, violations,
                 "no prompt, wait, or call needing an owner in a session still open")


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
        "takes effect exactly once; a wait committed but not shown before a crash is shown by "
        "the recovery that follows.",
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
