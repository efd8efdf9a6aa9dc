"""Stage L5: tool visibility and UI state projection.

Pure checks over a Trace. The rules in force at each point are rebuilt from the session
configs plus every ``update_rules`` driver call and fired ``change_rules`` fault; a tool is
"denied outright" when a hard constraint or explicit deny with pattern ``*``, a missing
capability, or plan mode (non-read tools) refuses every call of it.
"""

from __future__ import annotations

import bisect
from fnmatch import fnmatchcase
from typing import Any

from harness.contract import (
    Delivery,
    Feature,
    Observation,
    Outcome,
    Permission,
    RecoveryAction,
    WaitStatus,
    expected_projection,
)
from harness.criteria import facts as F
from harness.criteria import reading_changes
from harness.criteria import trace_readings as s
from harness.criteria import projection_oracle as O
from harness.criteria.approval_answers import first_answers
from harness.criteria.base import Criterion, Verdict, judge
from harness.trace.record import Kind, Trace

# --------------------------------------------------------------------------- L5.1

KEPT_FIELDS = ("identity", "tool", "args", "permission", "decided_by", "outcome", "execution_started", "result_digest")


def _revoked_by(trace: Trace, change: s.RuleChange, changes: tuple[s.RuleChange, ...]) -> tuple[str, ...]:
    """The session's tools a change denies outright that were not denied outright before it."""
    before = s.rules_in_force(trace, change.session_id, change.index, changes)
    after = s.rules_in_force(trace, change.session_id, change.index + 1, changes)
    return tuple(t for t in s.session_tool_names(trace, change.session_id)
                 if after.denied_outright(t) is not None and before.denied_outright(t) is None)


def _escalation_approved(trace: Trace, key: tuple[str, str], change: int) -> list[int]:
    """When escalations of ``key`` were approved before ``change`` (ascending)."""
    waits = {p.data.get("wait_id") for p in trace.of_kind(Kind.APPROVAL_PROMPT)
             if (p.data.get("session_id"), p.data.get("tool_call_id")) == key and p.index < change}
    return sorted(a.index for wait_id, a in first_answers(trace).items()
                  if a.index < change and a.approve and wait_id in waits)


def _escalated_run_started(trace: Trace, key: tuple[str, str], change: int) -> bool:
    """Was an escalation of ``key`` approved, and its run outside the sandbox started (a
    ledger row after the approval), before ``change``? That run was authorized under the
    rules before the change; its result rightly replaces the sandboxed attempt's after it."""
    approved = _escalation_approved(trace, key, change)
    return bool(approved) and any(approved[0] < row.index < change
                                  for row in s.ledger_rows_for(trace, key))


def check_l5_1(trace: Trace) -> Verdict:
    """Every model request offers only tools the rules in force when it is sent allow: after
    a rule change, a tool denied outright is absent from every request until the next change
    (a request built across the change may follow either rule set); and an operation saved
    before the change keeps its record (identity, args, decision, outcome, start, digest)
    in every later read.

    Exercised (the hard case): a model request sent after a change that revoked a tool the
    session had (denied outright after the change, not before), or an operation saved
    before such a change and read back after it.
    """
    changes = s.rule_changes(trace)
    requests = s.model_requests(trace)
    exercised, violations = 0, []
    for n, change in enumerate(changes):
        session = change.session_id
        following = [c.index for c in changes[n + 1:] if c.session_id == session]
        stop = following[0] if following else None
        revoking = bool(_revoked_by(trace, change, changes))
        for request in requests:
            if request.index <= change.index or request.data.get("session_id") != session:
                continue
            if stop is not None and request.index > stop:
                break
            exercised += int(revoking)
            states = s.request_rule_states(trace, request, changes)
            revoked = [t for t in request.data.get("tools", []) if all(st.denied_outright(t) for st in states)]
            if revoked:
                violations.append(s.ev(f"model request {request.data.get('request_id')} after the rule change still "
                                       f"offers {', '.join(revoked)}, denied outright by the rules in force",
                                       change.index, request.index))
        before = s.last_point_before(trace, change.index)
        if before is None:
            continue
        waiting = {w.execution_id for w in before.observation.approval_waits if w.status is WaitStatus.PENDING}
        saved = [op for op in before.observation.operations
                 if op.session_id == session and op.delivery is not Delivery.PENDING
                 and op.identity.execution_id not in waiting  # an open escalation is not settled
                 and not _escalated_run_started(trace, (op.session_id, op.identity.tool_call_id),
                                                change.index)]
        if revoking:
            exercised += sum(1 for op in saved if any(
                p.index > change.index and s.find_op(p.observation, (op.session_id, op.identity.tool_call_id))
                for p in trace.observations))
        for op in saved:
            key = (op.session_id, op.identity.tool_call_id)
            for point in trace.observations:
                if point.index <= change.index:
                    continue
                now = s.find_op(point.observation, key)
                if now is not None and _escalation_approved(trace, key, change.index) and (
                        now.identity.permission_version == change.permission_version
                        or (now.outcome == op.outcome and now.result_digest == op.result_digest)):
                    # An approved escalation still to run when the rules changed: revalidated,
                    # it is either bound to the version the change installed (docs/contract.md)
                    # or refused, and then the sandboxed attempt's saved result stands with the
                    # version it ran under (found by generation: rule changes right after the
                    # escalated run's start was recorded, before its tool ran).
                    continue
                changed = [f for f in KEPT_FIELDS if now is None or getattr(now, f) != getattr(op, f)]
                if changed:
                    violations.append(s.ev(f"{key[1]}, saved before the rule change, changed afterwards "
                                           f"({', '.join(changed) if now is not None else 'record gone'})",
                                           before.index, change.index, point.index))
                    break
    return judge("L5.1", exercised, violations, "no rule change revoked a tool")


# --------------------------------------------------------------------------- L5.2


def check_l5_2(trace: Trace) -> Verdict:
    """A call the model generated before a rule change, not yet started (no ledger row, no
    start record) and not yet settled when the change landed, is judged by the newest rules:
    when they deny it (hard constraint, capability, plan mode or explicit deny for this very
    call), the ledger shows no execution of it before the next change.

    Exercised (the hard case): such a call — generated under the old rules, still pending
    when the change landed, and denied by the new ones.
    """
    changes = s.rule_changes(trace)
    firsts = s.first_emissions(trace)
    exercised, violations = 0, []
    for n, change in enumerate(changes):
        session = change.session_id
        following = [c.index for c in changes[n + 1:] if c.session_id == session]
        stop = following[0] if following else len(trace.events)
        state = s.rules_in_force(trace, session, change.index + 1, changes)
        for key, call in firsts.items():
            if call.session_id != session or call.index >= change.index or call.tool is None or call.args is None:
                continue
            rows = s.ledger_rows_for(trace, key)
            if any(r.index < change.index for r in rows) or s.start_recorded_before(trace, key, change.index):
                continue  # already executing when the rules changed
            settled = any(
                p.index < change.index and (op := s.find_op(p.observation, key)) is not None
                and op.delivery is not Delivery.PENDING
                for p in trace.observations)
            if settled:
                continue
            after = [r for r in rows if change.index < r.index < stop]
            source = state.denial_for(call.tool, call.args)
            if source is None:
                continue
            exercised += 1
            if after:
                seqs = ", ".join(str(r.data.get("ledger_seq", "?")) for r in after)
                violations.append(s.ev(f"{key[1]}, generated before the rule change to permission "
                                       f"version {state.permission_version}, executed (ledger row "
                                       f"{seqs}) although the newest rules deny it ({source.value})",
                                       call.index, change.index, *(r.index for r in after), rows=after))
    return judge("L5.2", exercised, violations, "no call pending across a rule change")


# --------------------------------------------------------------------------- L5.3


def _partly_denied(state: s.RuleState, tool: str) -> bool:
    """A deny rule or hard constraint forbids some calls of ``tool`` but not all of them."""
    if state.denied_outright(tool) is not None:
        return False
    rules = (*state.hard_constraints, *state.rules)
    return any(F.value(r.effect) == "deny" and fnmatchcase(tool, r.tool) for r in rules)


def check_l5_3(trace: Trace) -> Verdict:
    """The tools a model request offers (as the world received it) are exactly the
    session's tools not denied outright by the rules in force: no tool denied outright is
    shown, no tool the session lacks is shown, and no usable tool is hidden — in particular
    a rule that forbids one specific operation (a deny rule or hard constraint with a
    pattern) leaves the tool visible, since its other calls can run.

    Exercised (the hard case): a model request under rules that tell the two apart — some
    tool of the session denied outright, or forbidden for specific operations only.
    """
    changes = s.rule_changes(trace)
    exercised, violations = 0, []
    for request in s.model_requests(trace):
        session = str(request.data.get("session_id", ""))
        universe = set(s.session_tool_names(trace, session))
        if not universe:
            continue
        visible = set(request.data.get("tools", []))
        attempts = []
        states = s.request_rule_states(trace, request, changes)
        if any(st.denied_outright(t) is not None or _partly_denied(st, t) for st in states for t in universe):
            exercised += 1
        for state in states:
            problems = []
            shown = sorted(t for t in visible if state.denied_outright(t))
            if shown:
                problems.append(f"shows tools denied outright: {', '.join(shown)}")
            unknown = sorted(visible - universe)
            if unknown:
                problems.append(f"shows tools the session does not have: {', '.join(unknown)}")
            hidden = sorted(t for t in universe - visible if state.denied_outright(t) is None)
            if hidden:
                partly = [t for t in hidden if _partly_denied(state, t)]
                problems.append(f"hides usable tools: {', '.join(hidden)}" + (
                    f" ({', '.join(partly)} forbidden for specific operations only: the rest of its "
                    "calls can run)" if partly else ""))
            attempts.append(problems)
        problems = min(attempts, key=len)  # the request may follow either rule set of a race
        if problems:
            violations.append(s.ev(f"model request {request.data.get('request_id')} " + "; ".join(problems),
                                   request.index))
    return judge("L5.3", exercised, violations,
                 "no model request under rules denying a tool outright or in part")


# --------------------------------------------------------------------------- L5.4


def _projection_problems(projection: dict[str, Any], obs: Observation) -> list[str]:
    key = (projection.get("session_id", ""), projection.get("tool_call_id", ""))
    op = s.find_op(obs, key) or s.find_op_by_execution_id(obs, str(projection.get("execution_id", "")))
    if op is None:
        return ["projects an operation the store does not hold"]
    pending = any(w.execution_id == op.identity.execution_id and w.status is WaitStatus.PENDING
                  for w in obs.approval_waits)
    status, actions = expected_projection(op.permission, op.outcome, op.decided_by, op.failure_kind,
                                          op.reconciliation_required, pending)
    problems = []
    if projection.get("status") != status:
        problems.append(f"status {projection.get('status')}, the record gives {status}")
    shown = set(projection.get("recovery_actions") or ())
    if shown != {a.value for a in actions}:
        problems.append(f"actions {sorted(shown)}, the record gives {sorted(a.value for a in actions)}")
    if projection.get("permission") != op.permission.value or projection.get("outcome") != op.outcome.value:
        problems.append(f"{projection.get('permission')}/{projection.get('outcome')}, the record is "
                        f"{op.permission.value}/{op.outcome.value}")
    if projection.get("reason", "") != op.reason:
        problems.append("reason differs from the record's")
    return problems


def check_l5_4(trace: Trace) -> Verdict:
    """What the UI shows is what the projection oracle expects, and the store agrees.

    First witness, the world: every ``UI_PUBLISH`` is judged against
    :func:`~harness.criteria.projection_oracle.expected_view` at that moment (outcome from
    the ledger, refusals and crashes; pending wait from prompts and answers; status and the
    exact set of recovery actions through ``expected_projection``), and against
    ``ALLOWED_ACTIONS`` (no plain retry for an unknown operation, a definite failure or a
    denial; a denial only offers a rule change or an edit of the call; a hard-constraint
    denial no rule change). A non-success status must carry a reason, and the reason must be
    the result record's: the tool message the world's model received for the same result
    (no other publication of the operation between them) says it in its content. At every
    point at rest,
    the latest publication of each operation the store calls ``projected`` must still be what
    the oracle expects (a UI left showing a stale state fails).

    Second witness, ``inspect()``: the record read while the UI received the publication
    holds the operation, its reason equals the published one, and its recovery actions are
    the oracle's; each stored projection equals what the UI last received for it.

    Exercised (the hard case): a publication of an operation in a state that offers or
    forbids recovery actions — anything but a plain success — judged against the oracle.
    """
    exercised, violations = 0, []
    ops = F.operations(trace)
    pubs = O.publications(trace)
    for pub in pubs:
        op = O.op_of(ops, pub)
        if op is None:
            violations.append(s.ev(f"UI shows {pub.key[1] or pub.execution_id}, an operation the world "
                                   "never served, ran or prompted for", pub.event.index))
            continue
        store, store_waiting = O.store_view_for(trace, op, pub)
        expected, problems = O.judge_publication(trace, op, pub, store, store_waiting)
        probe = O.probe_at(trace, pub.event, "probe:ui_publish")
        if probe is not None:
            problems += _projection_problems(pub.data, probe.observation)
            if store is not None and expected is not None and not expected.store_used:
                stored = {F.value(a) for a in store.recovery_actions}
                if store.delivery is not Delivery.PENDING and stored != expected.actions:
                    problems.append(f"inspect() gives actions {sorted(stored)}, the oracle "
                                    f"{sorted(expected.actions)}")
        if expected is not None and expected.status != "succeeded":
            exercised += 1
        if problems:
            rows = op.rows[-1:]
            violations.append(s.ev(f"UI shows {pub.key[1]} unlike the oracle: " + "; ".join(dict.fromkeys(problems)),
                                   pub.event.index, *((probe.index,) if probe is not None else ()),
                                   *(expected.result.evidence if expected is not None else ()), rows=rows))
    cuts = s.interruptions(trace)
    restarts = [e.index for e in trace.of_kind(Kind.RESTART)]
    for point in s.durable_points_after(trace, 0, ("quiescent", "final")):
        def cut_since(since: int, session_id: str) -> bool:
            cut = [c.index for c in cuts if since < c.index < point.index and c.session_id in ("", session_id)]
            return bool(cut) and not any(cut[-1] < r < point.index for r in restarts)

        for op in ops.values():
            view = O.view_in(point, op)
            if view is None or view.delivery is not Delivery.PROJECTED:
                continue
            shown = O.publications_of(pubs, op, point.index + 1)
            if not shown or cut_since(shown[-1].event.index, op.session_id):
                continue  # no publication is X1's business; a cut pipeline is not at rest
            latest = shown[-1]
            expected = O.expected_view(trace, op, point.index + 1, view, O.waits_pending_in(point, op))
            if expected is None:
                continue
            stale = []
            if latest.status != expected.status or latest.outcome != expected.outcome:
                stale.append(f"shows {latest.status}/{latest.outcome}, the oracle expects "
                             f"{expected.status}/{expected.outcome}")
            if latest.actions != expected.actions:
                stale.append(f"offers {sorted(latest.actions)}, the oracle expects {sorted(expected.actions)}")
            if stale:
                violations.append(s.ev(f"at '{point.label}' the UI still shows {op.tool_call_id} unlike the "
                                       "oracle: " + "; ".join(stale), latest.event.index, point.index))
        latest_stored: dict[str, Any] = {}
        for projection in point.observation.projections:
            latest_stored[projection.execution_id] = projection
        for projection in latest_stored.values():
            received = [p for p in pubs if p.event.index <= point.index and p.execution_id == projection.execution_id]
            if received and cut_since(received[-1].event.index, projection.session_id):
                continue  # its pipeline was cut short and nothing has recovered it yet
            data = {
                "session_id": projection.session_id, "tool_call_id": projection.tool_call_id,
                "execution_id": projection.execution_id, "status": projection.status,
                "recovery_actions": [a.value for a in projection.recovery_actions],
                "permission": projection.permission.value, "outcome": projection.outcome.value,
                "reason": projection.reason,
            }
            problems = _projection_problems(data, point.observation)
            if not received:
                problems.append("the store holds a projection the UI never received")
            elif (received[-1].status, received[-1].actions, received[-1].outcome) != (
                    projection.status, frozenset(data["recovery_actions"]), projection.outcome.value):
                problems.append(f"the store says the UI shows {projection.status} "
                                f"{sorted(data['recovery_actions'])}, the UI received {received[-1].status} "
                                f"{sorted(received[-1].actions)}")
            if problems:
                violations.append(s.ev(f"stored projection of {projection.tool_call_id} disagrees: "
                                       + "; ".join(problems), point.index,
                                       *((received[-1].event.index,) if received else ())))
    return judge("L5.4", exercised, violations, "no publication of a non-success state")


# --------------------------------------------------------------------------- L5.5


def check_l5_5(trace: Trace) -> Verdict:
    """The host result status a realtime ``result_saved`` event carries equals the world's
    (the projection oracle's result from the ledger, refusals and crashes), the outcome the
    store holds for the operation once saved, and the outcome of the tool message the model
    next receives for it (until a later result of the same operation supersedes it).

    Exercised (the hard case): an event whose status is not a plain success (not started,
    failed, unknown) compared with the stored history or the conversation — where a runtime
    that reports one status live and another in history would show; and a result saved by
    ``recover()`` that went live (:func:`_unannounced_results`: history that never went live
    fails).
    """
    exercised, violations = 0, []
    ops = F.operations(trace)
    saved = list(s.lifecycle_of(trace, "result_saved"))
    # the positions of each execution id's events in ``saved``, and readings and requests
    # found from an index by bisection (each event compares what follows it only)
    saved_at: dict[Any, list[int]] = {}
    for n, (_, payload) in enumerate(saved):
        saved_at.setdefault(payload.get("execution_id"), []).append(n)
    points = trace.observations
    point_indexes = [p.index for p in points]
    points_sorted = all(a <= b for a, b in zip(point_indexes, point_indexes[1:]))
    requests = s.model_requests(trace)
    request_indexes = [r.index for r in requests]
    requests_sorted = all(a <= b for a, b in zip(request_indexes, request_indexes[1:]))
    for n, (event, payload) in enumerate(saved):
        execution_id = str(payload.get("execution_id", ""))
        key = s.key_for_execution_id(trace, execution_id)
        if key is None:
            continue
        # a later result of the same operation (an approved escalation...) supersedes this one
        later = saved_at.get(execution_id, [])
        superseded = [saved[m][0].index for m in later[bisect.bisect_right(later, n):]]
        horizon = superseded[0] if superseded else len(trace.events)
        compared = False
        outcome = (payload.get("data") or {}).get("outcome")
        if outcome is None:
            violations.append(s.ev(f"result_saved event of {key[1]} carries no host result status", event.index))
            continue
        rows = [r for r in s.ledger_rows_for(trace, key) if r.index < event.index]
        world = None
        if outcome in (Outcome.SUCCEEDED.value, Outcome.FAILED.value):
            if not rows:
                world = f"event says {outcome} but the ledger has no execution"
            elif s.expected_outcome(rows[-1]) != outcome:
                world = f"event says {outcome} but the ledger says {s.expected_outcome(rows[-1])}"
        elif outcome == Outcome.NOT_STARTED.value and rows:
            world = "event says not_started but the ledger has its execution"
        if world is None and key in ops:
            result = O.world_result(trace, ops[key], event.index)
            if result.outcome != outcome and (result.ran or outcome != Outcome.UNKNOWN.value):
                world = f"event says {outcome} but the world says {result.outcome} ({result.grounds})"
        if world:
            violations.append(s.ev(f"{key[1]}: {world}", event.index, *(r.index for r in rows[-1:]), rows=rows[-1:]))
        first = bisect.bisect_left(point_indexes, event.index) if points_sorted else 0
        for point in points[first:] if first else points:
            if point.index < event.index or point.index >= horizon:
                if points_sorted and point.index >= horizon:
                    break  # none later is before the horizon
                continue
            op = s.find_op(point.observation, key)
            if op is None or op.delivery is Delivery.PENDING:
                continue
            compared = True
            if op.outcome.value != outcome:
                violations.append(s.ev(f"realtime event says {key[1]} {outcome}, the stored history says "
                                       f"{op.outcome.value}", event.index, point.index))
            break
        first = bisect.bisect_left(request_indexes, event.index) if requests_sorted else 0
        for request in requests[first:] if first else requests:
            if request.index < event.index or request.index >= horizon or request.data.get("session_id") != key[0]:
                if requests_sorted and request.index >= horizon:
                    break  # none later is before the horizon
                continue
            message = s.tool_message(request, key[1])
            if message is None or message.get("outcome") is None:
                continue
            compared = True
            if message.get("outcome") != outcome:
                violations.append(s.ev(f"realtime event says {key[1]} {outcome}, the conversation history says "
                                       f"{message.get('outcome')}", event.index, request.index))
            break
        exercised += int(compared and outcome != Outcome.SUCCEEDED.value)
    unannounced_exercised, unannounced = _unannounced_results(trace, saved)
    exercised += unannounced_exercised
    violations += unannounced
    return judge("L5.5", exercised, violations, "no result_saved event of a non-success compared with history")


def _unannounced_results(trace: Trace, saved: list[tuple[Any, dict[str, Any]]]) -> tuple[int, list]:
    """History that never went live: a result the store holds at the end of a completed run
    must have been carried by a realtime ``result_saved`` event, unless the driver call
    during which it was saved was cut off by a crash (the instance may have died between its
    commit and its event) or it still waits for the owner (a sandboxed attempt's result
    under a pending escalation wait is not final). A result saved by ``recover()`` is the
    hard case: recovery settles what a crash left open, and a UI following the realtime
    channel would otherwise show the call running for ever.

    Exercised once per result saved during a ``recover()`` that was announced."""
    final = s.final_point(trace)
    if final is None or not trace.completed:
        return 0, []
    announced = {str(payload.get("execution_id", "")) for _, payload in saved}
    # A sandboxed attempt's result waiting for the owner's escalation answer is not final yet
    # (its event comes with the answer).
    waiting = {w.execution_id for w in final.observation.approval_waits
               if w.status is WaitStatus.PENDING}
    settled = {view.identity.execution_id: view for view in final.observation.operations
               if view.delivery is not Delivery.PENDING and view.identity.execution_id not in waiting}
    first_seen: dict[str, int] = {}
    for point, view in reading_changes.new_rows(trace):  # each reading's new rows (setdefault)
        execution_id = view.identity.execution_id
        if execution_id in settled and view.delivery is not Delivery.PENDING:
            first_seen.setdefault(execution_id, point.index)
    spans = s.driver_spans(trace)
    exercised, violations = 0, []
    for execution_id, view in settled.items():
        seen = first_seen.get(execution_id, final.index)
        span = s.innermost_span(spans, seen)
        if execution_id in announced:
            exercised += int(span is not None and span.method == "recover")
            continue
        if span is not None and span.end_kind == "crash":
            continue  # cut off after the commit, perhaps before the event
        during = f" (saved during {span.method}, event {span.index})" if span is not None else ""
        violations.append(s.ev(
            f"the store holds {view.identity.tool_call_id}'s result {view.outcome.value}{during}, but no "
            "realtime result_saved event ever carried it", seen, final.index))
    return exercised, violations


# --------------------------------------------------------------------------- catalogue

CRITERIA: tuple[Criterion, ...] = (
    Criterion(
        "L5.1", "l5", "Revocation is immediate",
        "Every model request offers only the tools the rules in force when it is sent allow; a "
        "revoked tool is gone from the very next request, and operations saved before the change "
        "keep their records.",
        "每次模型请求按适用规则过滤工具，保留已保存执行契约。",
        check_l5_1,
    ),
    Criterion(
        "L5.2", "l5", "Old calls meet the newest rules",
        "A call generated before a rule change and still pending when it lands is judged by the "
        "newest rules: when they deny it, it is not executed.",
        "已生成的旧调用仍须经过最新权限检查。",
        check_l5_2,
    ),
    Criterion(
        "L5.3", "l5", "Visibility equals capability",
        "The tools offered to the model are exactly the session's tools not denied outright by "
        "the rules in force; a rule that forbids one specific operation does not hide the tool.",
        "权限规则区分整个工具禁用和具体操作禁止。 … 工具可见性与实际能力一致；",
        check_l5_3,
    ),
    Criterion(
        "L5.4", "l5", "UI agrees with backend",
        "Each projected status, reason and set of recovery actions equals what the authoritative "
        "result (as the world saw it) gives: no plain retry for an unknown operation or a "
        "definite failure, and for a denial only resolutions that change the permission or the "
        "conditions first.",
        "界面与后端一致显示原因和有效恢复动作。",
        check_l5_4, (Feature.WEB_PROJECTION,),
    ),
    Criterion(
        "L5.5", "l5", "Events and history agree",
        "The result status carried by realtime result events equals the host result in the "
        "ledger, the store and the conversation history, and every result the store keeps "
        "(recovery's included) was carried by one.",
        "实时事件和历史记录传递宿主结果状态。",
        check_l5_5,
    ),
)
