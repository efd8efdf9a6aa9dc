"""Stage X — cross-cutting criteria: three states, identity, honest outcomes, one lifecycle.

Every check is a pure function of the trace. Ground truth comes first: the ledger
(``TOOL_EXECUTED`` rows), the calls the model was served, the model requests the world
received, crashes at failpoints; the implementation's durable store (observations) is
what gets judged against it.
"""

from __future__ import annotations

from harness.contract import (
    Delivery,
    EventType,
    Outcome,
    Permission,
    ToolKind,
    args_digest,
    execution_id_for,
)
from harness.criteria import facts as F
from harness.criteria.base import Criterion, Evidence, Verdict, judge
from harness.trace import Kind, Trace

STAGE = "x"

_PERMISSIONS = frozenset(p.value for p in Permission)
_OUTCOMES = frozenset(o.value for o in Outcome)
_DELIVERIES = frozenset(d.value for d in Delivery)

ENTRY_POINT_KINDS = (ToolKind.TERMINAL.value, ToolKind.WEB.value, ToolKind.USER_APP.value)


def _ev(note: str, indexes=(), rows=()) -> Evidence:
    return Evidence(note, tuple(dict.fromkeys(i for i in indexes if i is not None)), tuple(rows))


# --------------------------------------------------------------------------- X1


def check_x1(trace: Trace) -> Verdict:
    """Each stored operation's permission/outcome/delivery are values of their own sets,
    and each follows its own rule: a pre-call denial is ``deny``/``not_started`` (never
    ``failed``), and a settled outcome (succeeded/failed) needs a run the ledger saw."""
    violations: list[Evidence] = []
    exercised = 0
    for op in F.operations(trace).values():
        if not op.views:
            continue
        exercised += 1
        for point, view in op.views:
            permission, outcome, delivery = (
                F.value(view.permission), F.value(view.outcome), F.value(view.delivery)
            )
            bad = []
            if permission not in _PERMISSIONS:
                bad.append(f"permission={permission!r}")
            if outcome not in _OUTCOMES:
                bad.append(f"outcome={outcome!r}")
            if delivery not in _DELIVERIES:
                bad.append(f"delivery={delivery!r}")
            if bad:
                violations.append(_ev(
                    f"{F.describe(op)} at '{point.label}': value(s) outside the three state sets: "
                    + ", ".join(bad), (point.index,)))
                continue
            ran_before = [r for r in op.rows if r.index <= point.index]
            if permission == "deny" and not ran_before and outcome != "not_started":
                violations.append(_ev(
                    f"{F.describe(op)} at '{point.label}': a pre-call denial (deny, no ledger row) "
                    f"is recorded with outcome {outcome!r}; a denial is deny/not_started",
                    (point.index,)))
            elif outcome in ("succeeded", "failed") and not ran_before and op.served:
                # a tool that could not start (TOOL_UNAVAILABLE, no ledger row) did not run
                # either: failed would claim a run with possible partial effects
                violations.append(_ev(
                    f"{F.describe(op)} at '{point.label}': outcome {outcome!r} but the ledger shows "
                    f"no execution before this observation; outcome must answer 'did it run'",
                    (point.index,)))
    return judge("X1", exercised, violations, "no operation was observed in the durable store")


# --------------------------------------------------------------------------- X2


def _held_by_unanswered_wait(trace: Trace, op: F.Op, served_at: int, stop: int) -> bool:
    """Was the owner prompted, after the response that served ``op``, for an earlier call
    of that same response, and never answered? The loop runs a response's calls in order
    and the turn returns ``awaiting_approval`` at the first one that waits
    (docs/lifecycle.md, steps 4-5), so the later calls are not reached yet: not lost."""
    served = trace.events[served_at].data.get("tool_call_ids") or []
    if op.tool_call_id not in served:
        return False
    earlier = set(served[:served.index(op.tool_call_id)])
    answered = {
        (event.data.get("args") or {}).get("wait_id")
        for event in F.events_between(trace, served_at, F.last_index(trace) + 1, Kind.DRIVER_CALL)
        if event.data.get("method") == "answer_approval" and not event.data.get("skipped")
    }
    return any(
        prompt.data.get("session_id") == op.session_id
        and prompt.data.get("tool_call_id") in earlier
        and prompt.data.get("wait_id") not in answered
        and None not in answered  # an answer not naming its wait may have been this one
        for prompt in F.events_between(trace, served_at, stop, Kind.APPROVAL_PROMPT)
    )


def _missing_excused(trace: Trace, op: F.Op, served_at: int) -> bool:
    """A served call may legitimately have no record when the run was cut, or a crash,
    restart or cancellation came between serving it and the next model request, or the
    turn is still waiting for the owner's answer about an earlier call of the same
    response."""
    if not trace.completed:
        return True
    nxt = F.next_model_request(trace, op.session_id, served_at)
    stop = nxt.index if nxt is not None else F.last_index(trace) + 1
    if _held_by_unanswered_wait(trace, op, served_at, stop):
        return True
    for event in F.events_between(trace, served_at, stop, Kind.CRASH, Kind.RESTART, Kind.HANG):
        return True
    for event in F.events_between(trace, served_at, stop, Kind.DRIVER_CALL, Kind.FAILPOINT):
        if event.kind == Kind.DRIVER_CALL and event.data.get("method") == "cancel":
            return True
        if event.kind == Kind.FAILPOINT and event.data.get("action") == "cancel":
            return True
    return False


def check_x2(trace: Trace) -> Verdict:
    """Each operation is bound to execution_id_for(session, call id), the call id, the
    digest of the args the model emitted and a permission version of its session; a call
    served once or several times has exactly one record (and one identity)."""
    violations: list[Evidence] = []
    exercised = 0
    pts = F.points(trace)
    for point in pts:
        by_call: dict[tuple[str, str], int] = {}
        by_exec: dict[str, set[tuple[str, str]]] = {}
        for view in point.observation.operations:
            key = (view.session_id, view.identity.tool_call_id)
            by_call[key] = by_call.get(key, 0) + 1
            by_exec.setdefault(view.identity.execution_id, set()).add(key)
        for key, count in by_call.items():
            if count > 1:
                violations.append(_ev(
                    f"{key[0]}/{key[1]}: {count} operation records for one call at '{point.label}'",
                    (point.index,)))
        for execution_id, keys in by_exec.items():
            if len(keys) > 1:
                violations.append(_ev(
                    f"execution id {execution_id} is shared by different calls {sorted(keys)} "
                    f"at '{point.label}'", (point.index,)))
    final = pts[-1] if pts else None
    for op in F.operations(trace).values():
        judged = False
        expected_exec = execution_id_for(op.session_id, op.tool_call_id)
        emitted_digest = args_digest(op.tool, op.args) if op.args_source in ("served", "ledger") else None
        known_versions = F.versions(trace, op.session_id)
        identities = set()
        for point, view in op.views:
            judged = True
            identity = view.identity
            identities.add((identity.execution_id, identity.args_digest))
            where = f"{F.describe(op)} at '{point.label}'"
            if identity.execution_id != expected_exec:
                violations.append(_ev(
                    f"{where}: execution id {identity.execution_id!r}, expected "
                    f"execution_id_for(session, call id) = {expected_exec!r}", (point.index,)))
            if identity.args_digest != args_digest(view.tool, view.args):
                violations.append(_ev(
                    f"{where}: args digest {identity.args_digest!r} is not the digest of the "
                    f"record's own tool and args", (point.index,)))
            elif emitted_digest is not None and identity.args_digest != emitted_digest:
                violations.append(_ev(
                    f"{where}: args digest is not over the args the model emitted "
                    f"(source: {op.args_source})", (point.index,) + tuple(s.end_index for s in op.served[:1])))
            if identity.permission_version not in known_versions:
                violations.append(_ev(
                    f"{where}: permission version {identity.permission_version} was never in force "
                    f"for the session (versions {sorted(known_versions)})", (point.index,)))
        if len(identities) > 1:
            violations.append(_ev(
                f"{F.describe(op)}: the identity changed between observations: {sorted(identities)}",
                tuple(p.index for p, _ in op.views)))
        for row in op.rows:
            judged = True
            seq = int(row.data.get("ledger_seq", -1))
            if row.data.get("execution_id") != expected_exec:
                violations.append(_ev(
                    f"{F.describe(op)}: executed under execution id {row.data.get('execution_id')!r}, "
                    f"expected {expected_exec!r}", (row.index,), (seq,)))
            if op.args_source == "served" and row.data.get("args") != op.args:
                violations.append(_ev(
                    f"{F.describe(op)}: executed with args different from the call the model emitted",
                    (op.served[0].end_index, row.index), (seq,)))
        complete = [s for s in op.served if s.how == "end"]
        if complete and final is not None and final.index > complete[0].end_index:
            judged = True
            count = sum(
                1 for v in final.observation.operations
                if (v.session_id, v.identity.tool_call_id) == op.key
            )
            if count == 0 and not _missing_excused(trace, op, complete[0].end_index):
                violations.append(_ev(
                    f"{F.describe(op)}: the model emitted this call "
                    f"({len(complete)} time(s)) but the final store has no record of it",
                    (complete[0].end_index, final.index)))
        if judged:
            exercised += 1
    return judge("X2", exercised, violations, "no call was served, executed or observed")


# --------------------------------------------------------------------------- X3


def check_x3(trace: Trace) -> Verdict:
    """After a pre-call denial the loop goes on: the session's next model request carries
    the call's tool message with outcome not_started, and the turn is not reported
    ``completed`` without such a request."""
    violations: list[Evidence] = []
    exercised = 0
    returns = F.turn_returns(trace)
    for op in F.operations(trace).values():
        if not F.pre_call_denied(op) or not op.served:
            continue
        view = op.latest
        if F.value(view.decided_by) == "cancellation":
            continue
        served_at = op.served[0].end_index
        # the denial is on record once its "not executed" result is saved (a concurrent
        # instance may send a request between the serving and that save)
        recorded = [
            p.index for p, v in op.views
            if F.value(v.permission) == Permission.DENY.value and F.value(v.delivery) != "pending"
        ]
        anchor = max(served_at, recorded[0]) if recorded else served_at
        request = F.next_model_request(trace, op.session_id, anchor)
        turn_end = next(
            ((e, st) for e, s, st in returns if s == op.session_id and e.index > served_at), None
        )
        if turn_end is not None and turn_end[1] == "completed" and (
            request is None or request.index > turn_end[0].index
        ):
            exercised += 1
            violations.append(_ev(
                f"{F.describe(op)} was denied and the turn was reported completed without the "
                f"model ever seeing the denial", (served_at, turn_end[0].index)))
        elif request is not None:
            exercised += 1
            message = F.tool_message(request, op.tool_call_id)
            if message is None:
                violations.append(_ev(
                    f"{F.describe(op)} was denied but the next model request of the session "
                    f"carries no tool result for it", (served_at, request.index)))
            elif message.get("outcome") != Outcome.NOT_STARTED.value:
                violations.append(_ev(
                    f"{F.describe(op)} was denied but its tool result reached the model with "
                    f"outcome {message.get('outcome')!r} instead of 'not_started'",
                    (served_at, request.index)))
    return judge("X3", exercised, violations, "no denied call with a continuation to judge")


# --------------------------------------------------------------------------- X4


def check_x4(trace: Trace) -> Verdict:
    """reconciliation_required (or outcome unknown) only for an operation that may have
    executed and whose result is not known: a crash between its start record and its saved
    result, or a tool answer of kind unknown; never for a pre-call denial nor after its
    result was seen saved. Judged: every flagged operation, and every operation a crash's
    failpoint context names that the store was read back for after the crash."""
    violations: list[Evidence] = []
    exercised = 0
    ops = F.operations(trace)
    crashes = F.crash_points(trace)
    for op in ops.values():
        flagged = [
            (p, v) for p, v in op.views
            if v.reconciliation_required or F.value(v.outcome) == Outcome.UNKNOWN.value
        ]
        if not flagged:
            # an operation a crash interrupted, read back after it, counts as judged
            if any(
                F.context_names_op(context, op) and any(p.index > crash.index for p, _ in op.views)
                for crash, _, context in crashes
            ):
                exercised += 1
            continue
        exercised += 1
        point, view = flagged[0]
        rows = [r.data.get("ledger_seq", -1) for r in op.rows]
        if F.value(view.permission) == "deny" and not view.execution_started and not op.rows:
            violations.append(_ev(
                f"{F.describe(op)}: a pre-call denial is marked reconciliation_required/unknown",
                (point.index,)))
            continue
        # A result saved before a later attempt's start (an approved escalation runs the
        # operation again) is superseded by it: a crash between that start and its result
        # leaves the operation honestly unknown.
        later_starts = [
            crash.index for crash, name, context in crashes
            if name in F.CRASH_AFTER_START and F.context_names_op(context, op)
            and crash.index < point.index
        ]
        superseded_before = max(later_starts, default=-1)
        saved = [
            (p, v) for p, v in op.views
            if superseded_before < p.index < point.index
            and F.value(v.outcome) in ("succeeded", "failed")
            and F.value(v.delivery) in ("recorded", "projected")
        ]
        if saved:
            violations.append(_ev(
                f"{F.describe(op)}: its result was saved ({F.value(saved[-1][1].outcome)} at "
                f"'{saved[-1][0].label}') and later turned into reconciliation_required/unknown",
                (saved[-1][0].index, point.index), rows))
            continue
        tool_said_unknown = any(r.data.get("error_kind") == "unknown" for r in op.rows)
        crash = F.crashed_mid_execution(trace, op, ops)
        if not tool_said_unknown and crash is None:
            indexes = [point.index] + [c.index for c in trace.crashes()]
            violations.append(_ev(
                f"{F.describe(op)}: marked reconciliation_required/unknown without any crash "
                f"between its start record and its result ({', '.join(F.CRASH_AFTER_START)}) "
                f"and without an unknown tool answer", indexes, rows))
    return judge("X4", exercised, violations, "no operation was marked reconciliation_required")


# --------------------------------------------------------------------------- X5


def _claims_not_executed(row) -> bool:
    output = str(row.data.get("output") or "")
    return "not executed" in output.lower() or row.data.get("behaviour") == "claims_not_executed"


def check_x5(trace: Trace) -> Verdict:
    """A ledger row whose output claims 'not executed' is still recorded by the host as
    executed: execution_started true (already while the tool runs) and an outcome other
    than not_started, also in the tool message the model receives."""
    violations: list[Evidence] = []
    exercised = 0
    for op in F.operations(trace).values():
        for row in op.rows:
            if not _claims_not_executed(row):
                continue
            seq = int(row.data.get("ledger_seq", -1))
            judged = False
            for point, view in op.views:
                if point.index == row.index and not view.execution_started:
                    judged = True
                    violations.append(_ev(
                        f"{F.describe(op)}: while the tool ran ('{point.label}') the store had no "
                        f"execution start", (row.index, point.index), (seq,)))
            after = [(p, v) for p, v in op.views if p.index > row.index]
            if after:
                judged = True
                point, view = after[-1]
                if not view.execution_started or F.value(view.outcome) == "not_started":
                    violations.append(_ev(
                        f"{F.describe(op)}: the tool's text claimed it did not run and the store "
                        f"believed it (execution_started={view.execution_started}, outcome="
                        f"{F.value(view.outcome)!r}) though the ledger shows the execution",
                        (row.index, point.index), (seq,)))
            request = F.next_model_request(trace, op.session_id, row.index)
            message = F.tool_message(request, op.tool_call_id) if request is not None else None
            if message is not None:
                judged = True
                if message.get("outcome") == Outcome.NOT_STARTED.value:
                    violations.append(_ev(
                        f"{F.describe(op)}: the model was told the executed call did not start",
                        (row.index, request.index), (seq,)))
            if judged:
                exercised += 1
    return judge("X5", exercised, violations, "no tool output claimed 'not executed'")


# --------------------------------------------------------------------------- X6


def _kind_label(kind: str | None) -> str:
    return kind if kind in ENTRY_POINT_KINDS else "ordinary"


def _decided_before(trace: Trace, op: F.Op, index: int) -> bool:
    """A permission decision is on record before ``index``: a PERMISSION_DECIDED event for
    this operation, or a stored view (up to the probe at ``index``) that allows it."""
    exec_ids = {v.identity.execution_id for _, v in op.views} | {execution_id_for(*op.key)}
    for event, payload in trace.lifecycle_events():
        if event.index >= index or payload.get("type") != EventType.PERMISSION_DECIDED.value:
            continue
        data = payload.get("data") or {}
        if payload.get("execution_id") in exec_ids or (
            data.get("tool_call_id") == op.tool_call_id and payload.get("session_id") == op.session_id
        ):
            return True
    seen = op.view_at(index)
    return seen is not None and F.value(seen[1].permission) == Permission.ALLOW.value


def check_x6(trace: Trace) -> Verdict:
    """Terminal, web, user-app and ordinary tools pass the same gates: no kind runs an
    operation the precedence in force does not authorize, none runs without a permission
    decision on record, and none is stored as allowed when a deny layer forbids it."""
    ops = F.operations(trace)
    kinds = {key: F.tool_kind(trace, op.tool, op.session_id) for key, op in ops.items()}
    if not any(kind in ENTRY_POINT_KINDS for kind in kinds.values()):
        return judge("X6", 0, [], "no terminal, web or user-app operation in the trace")
    all_reviews = F.reviews(trace, ops)
    violations: list[Evidence] = []
    exercised = 0
    for key, op in ops.items():
        label = _kind_label(kinds[key])
        judged = False
        attempts = F.attempt_rows(op)
        if attempts:
            judged = True
            first = attempts[0]
            seq = int(first.data.get("ledger_seq", -1))
            auth = F.authorization(trace, op, first.index, all_reviews)
            if not auth.ok:
                violations.append(_ev(
                    f"[{label}] {F.describe(op)} executed although {auth.how}",
                    (first.index,), (seq,)))
            elif not _decided_before(trace, op, first.index):
                violations.append(_ev(
                    f"[{label}] {F.describe(op)} executed with no permission decision on record "
                    f"before it (no permission_decided event, no stored allow)",
                    (first.index,), (seq,)))
        view = op.latest
        if view is not None:
            decision = F.decision_for_version(trace, op, view.identity.permission_version)
            if decision is not None and decision.permission is Permission.DENY and decision.source in F.STATIC_DENY_SOURCES:
                judged = True
                if F.value(view.permission) != Permission.DENY.value:
                    violations.append(_ev(
                        f"[{label}] {F.describe(op)} is stored as {F.value(view.permission)!r} though "
                        f"{decision.source.value} denies it", F.op_indexes(op)))
        if judged:
            exercised += 1
    return judge("X6", exercised, violations, "no operation reached a permission gate")


# --------------------------------------------------------------------------- catalogue


CRITERIA: tuple[Criterion, ...] = (
    Criterion(
        id="X1",
        stage=STAGE,
        title="Three independent states",
        statement=(
            "Every operation exposes a permission (allow/ask/deny), an outcome (not_started/"
            "succeeded/failed/unknown) and a delivery (pending/recorded/projected), each set "
            "by its own rule: a pre-call denial is deny with outcome not_started, never failed, "
            "and an outcome that says the operation ran needs a real execution."
        ),
        seed_clause=(
            "| 权限 | allow / ask / deny | 当前身份与规则是否允许这次操作开始？ | … "
            "| 执行结果 | not_started / succeeded / failed / unknown | 操作是否执行，结果是否确定？失败可能已有部分副作用。 | … "
            "| 结果交付 | pending / recorded / projected | 结果是否保存，是否同步到会话和界面？ |"
        ),
        check=check_x1,
    ),
    Criterion(
        id="X2",
        stage=STAGE,
        title="Identity binding",
        statement=(
            "Each operation is bound to its execution id, its tool call id, a digest of the "
            "arguments the model emitted and the permission version; a call delivered twice "
            "maps to the same identity and a single record."
        ),
        seed_clause="每次操作通过 execution ID、tool call ID、参数摘要、权限版本绑定。",
        check=check_x2,
    ),
    Criterion(
        id="X3",
        stage=STAGE,
        title="A denial is not task completion",
        statement=(
            "A permission denial is saved as 'not executed', returned to the model in the next "
            "request of the loop, and never ends the turn as completed by itself."
        ),
        seed_clause=(
            "权限拒绝表示这次操作未开始，不表示整个任务完成。 … "
            "↘ 拒绝 → 保存“未执行” → 模型继续其他工作或说明阻碍"
        ),
        check=check_x3,
    ),
    Criterion(
        id="X4",
        stage=STAGE,
        title="reconciliation_required only when honest",
        statement=(
            "An operation is marked reconciliation_required (or unknown) only when it may have "
            "executed and its result cannot be confirmed; never for a pre-call denial, never "
            "once its result was saved."
        ),
        seed_clause="只有操作可能执行、结果无法确认时，才使用 reconciliation_required。",
        check=check_x4,
    ),
    Criterion(
        id="X5",
        stage=STAGE,
        title="Host-authoritative execution state",
        statement=(
            "The host records the execution start itself before the tool runs and ignores "
            "execution claims in tool output: a tool whose text says it did not run is still "
            "recorded, and reported to the model, as executed."
        ),
        seed_clause="仅宿主在已授权实现开始前记录执行；已完成和未执行结果均先于检查点保存，不信任应用返回的执行状态。",
        check=check_x5,
    ),
    Criterion(
        id="X6",
        stage=STAGE,
        title="One lifecycle for every entry point",
        statement=(
            "Terminal, web, user-app and ordinary tools go through the same permission gates: "
            "no kind of tool executes what the rules in force do not authorize, and none skips "
            "the permission decision."
        ),
        seed_clause="Terminal、Web、用户应用和普通工具通过现有公共入口使用同一生命周期，不建立各自的权限与重试框架。",
        check=check_x6,
    ),
)
