"""Stage L5: tool visibility and UI state projection.

Pure checks over a Trace. The rules in force at each point are rebuilt from the session
configs plus every ``update_rules`` driver call and fired ``change_rules`` fault; a tool is
"denied outright" when a hard constraint or explicit deny with pattern ``*``, a missing
capability, or plan mode (non-read tools) refuses every call of it.
"""

from __future__ import annotations

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
from harness.criteria import lm_support as s
from harness.criteria.base import Criterion, Verdict, judge
from harness.trace import Kind, Trace

# --------------------------------------------------------------------------- L5.1

KEPT_FIELDS = ("identity", "tool", "args", "permission", "decided_by", "outcome", "execution_started", "result_digest")


def check_l5_1(trace: Trace) -> Verdict:
    changes = s.rule_changes(trace)
    requests = s.model_requests(trace)
    exercised, violations = 0, []
    for n, change in enumerate(changes):
        session = change.session_id
        following = [c.index for c in changes[n + 1:] if c.session_id == session]
        stop = following[0] if following else None
        for request in requests:
            if request.index <= change.index or request.data.get("session_id") != session:
                continue
            if stop is not None and request.index > stop:
                break
            exercised += 1
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
                 and op.identity.execution_id not in waiting]  # an open escalation is not settled
        exercised += len(saved)
        for op in saved:
            key = (op.session_id, op.identity.tool_call_id)
            for point in trace.observations:
                if point.index <= change.index:
                    continue
                now = s.find_op(point.observation, key)
                changed = [f for f in KEPT_FIELDS if now is None or getattr(now, f) != getattr(op, f)]
                if changed:
                    violations.append(s.ev(f"{key[1]}, saved before the rule change, changed afterwards "
                                           f"({', '.join(changed) if now is not None else 'record gone'})",
                                           before.index, change.index, point.index))
                    break
    return judge("L5.1", exercised, violations, "no rule or permission version change")


# --------------------------------------------------------------------------- L5.2


def check_l5_2(trace: Trace) -> Verdict:
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
                violations.append(s.ev(f"{key[1]}, generated before the rule change, executed although the "
                                       f"newest rules deny it ({source.value})",
                                       call.index, change.index, *(r.index for r in after), rows=after))
    return judge("L5.2", exercised, violations, "no call pending across a rule change")


# --------------------------------------------------------------------------- L5.3


def check_l5_3(trace: Trace) -> Verdict:
    changes = s.rule_changes(trace)
    exercised, violations = 0, []
    for request in s.model_requests(trace):
        session = str(request.data.get("session_id", ""))
        universe = set(s.session_tool_names(trace, session))
        if not universe:
            continue
        exercised += 1
        visible = set(request.data.get("tools", []))
        attempts = []
        for state in s.request_rule_states(trace, request, changes):
            problems = []
            shown = sorted(t for t in visible if state.denied_outright(t))
            if shown:
                problems.append(f"shows tools denied outright: {', '.join(shown)}")
            unknown = sorted(visible - universe)
            if unknown:
                problems.append(f"shows tools the session does not have: {', '.join(unknown)}")
            hidden = sorted(t for t in universe - visible if state.denied_outright(t) is None)
            if hidden:
                problems.append(f"hides usable tools: {', '.join(hidden)}")
            attempts.append(problems)
        problems = min(attempts, key=len)  # the request may follow either rule set of a race
        if problems:
            violations.append(s.ev(f"model request {request.data.get('request_id')} " + "; ".join(problems),
                                   request.index))
    return judge("L5.3", exercised, violations, "no model request in a session with tools")


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
    exercised, violations = 0, []
    publishes = list(trace.of_kind(Kind.UI_PUBLISH))
    final = s.final_point(trace)
    for n, event in enumerate(publishes):
        projection = event.data.get("projection") or {}
        key = (projection.get("session_id", ""), projection.get("tool_call_id", ""))
        exercised += 1
        problems = []
        actions = set(projection.get("recovery_actions") or ())
        if RecoveryAction.RETRY.value in actions and (
                projection.get("outcome") == Outcome.UNKNOWN.value or projection.get("permission") == Permission.DENY.value):
            problems.append("offers retry for an unknown or denied operation")
        rows = [r for r in s.ledger_rows_for(trace, key) if r.index < event.index]
        if projection.get("outcome") in (Outcome.SUCCEEDED.value, Outcome.FAILED.value) and not rows:
            problems.append(f"shows {projection.get('outcome')} but the ledger has no execution")
        if projection.get("outcome") == Outcome.NOT_STARTED.value and rows:
            problems.append("shows not started but the ledger has its execution")
        probe = s.probe_for(trace, event, "probe:ui_publish")
        last = not any(p.data.get("projection", {}).get("execution_id") == projection.get("execution_id")
                       for p in publishes[n + 1:])
        point = probe or (final if last and trace.completed and final is not None and final.index >= event.index else None)
        if point is not None:
            problems += _projection_problems(projection, point.observation)
        if problems:
            violations.append(s.ev(f"UI shows {key[1]} unlike the backend: " + "; ".join(problems),
                                   event.index, *((point.index,) if point is not None else ()), rows=rows[-1:]))
    cuts = s.interruptions(trace)
    restarts = [e.index for e in trace.of_kind(Kind.RESTART)]
    for point in s.durable_points_after(trace, 0, ("quiescent", "final")):
        latest: dict[str, Any] = {}
        for projection in point.observation.projections:
            latest[projection.execution_id] = projection
        for projection in latest.values():
            published = [e.index for e in publishes if e.index <= point.index
                         and (e.data.get("projection") or {}).get("execution_id") == projection.execution_id]
            since = published[-1] if published else -1
            cut = [c.index for c in cuts if since < c.index < point.index
                   and c.session_id in ("", projection.session_id)]
            if cut and not any(cut[-1] < r < point.index for r in restarts):
                continue  # its pipeline was cut short and nothing has recovered it yet
            exercised += 1
            data = {
                "session_id": projection.session_id, "tool_call_id": projection.tool_call_id,
                "execution_id": projection.execution_id, "status": projection.status,
                "recovery_actions": [a.value for a in projection.recovery_actions],
                "permission": projection.permission.value, "outcome": projection.outcome.value,
                "reason": projection.reason,
            }
            problems = _projection_problems(data, point.observation)
            if problems:
                violations.append(s.ev(f"stored projection of {projection.tool_call_id} disagrees with its record: "
                                       + "; ".join(problems), point.index))
    return judge("L5.4", exercised, violations, "no UI projection")


# --------------------------------------------------------------------------- L5.5


def check_l5_5(trace: Trace) -> Verdict:
    exercised, violations = 0, []
    saved = list(s.lifecycle_of(trace, "result_saved"))
    for n, (event, payload) in enumerate(saved):
        execution_id = str(payload.get("execution_id", ""))
        key = s.key_for_execution_id(trace, execution_id)
        if key is None:
            continue
        # a later result of the same operation (an approved escalation...) supersedes this one
        superseded = [e.index for e, p in saved[n + 1:] if p.get("execution_id") == execution_id]
        horizon = superseded[0] if superseded else len(trace.events)
        exercised += 1
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
        if world:
            violations.append(s.ev(f"{key[1]}: {world}", event.index, *(r.index for r in rows[-1:]), rows=rows[-1:]))
        for point in trace.observations:
            if point.index < event.index or point.index >= horizon:
                continue
            op = s.find_op(point.observation, key)
            if op is None or op.delivery is Delivery.PENDING:
                continue
            if op.outcome.value != outcome:
                violations.append(s.ev(f"realtime event says {key[1]} {outcome}, the stored history says "
                                       f"{op.outcome.value}", event.index, point.index))
            break
        for request in s.model_requests(trace):
            if request.index < event.index or request.index >= horizon or request.data.get("session_id") != key[0]:
                continue
            message = s.tool_message(request, key[1])
            if message is None or message.get("outcome") is None:
                continue
            if message.get("outcome") != outcome:
                violations.append(s.ev(f"realtime event says {key[1]} {outcome}, the conversation history says "
                                       f"{message.get('outcome')}", event.index, request.index))
            break
    return judge("L5.5", exercised, violations, "no result_saved event")


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
        "the rules in force.",
        "工具可见性与实际能力一致；",
        check_l5_3,
    ),
    Criterion(
        "L5.4", "l5", "UI agrees with backend",
        "Each projected status, reason and set of recovery actions equals what the authoritative "
        "record gives, and the UI never offers retry for an unknown or denied operation.",
        "界面与后端一致显示原因和有效恢复动作。",
        check_l5_4, (Feature.WEB_PROJECTION,),
    ),
    Criterion(
        "L5.5", "l5", "Events and history agree",
        "The result status carried by realtime result events equals the host result in the "
        "ledger, the store and the conversation history.",
        "实时事件和历史记录传递宿主结果状态。",
        check_l5_5,
    ),
)
