"""Stage L4: production driver and execution (results, checkpoints, recovery, duplicates).

Pure checks over a Trace. The side-effect ledger (``TOOL_EXECUTED`` rows) is the ground truth
for "did it run"; crashes are located by the ``CRASH`` event and the ``FAILPOINT`` hit it
fired at; the operation a failpoint concerns is read from the hit's context (session_id +
tool_call_id, or execution_id), else derived from the world (the instance's last ledger row,
or the probe read at that failpoint).
"""

from __future__ import annotations

from harness.contract import (
    CheckpointView,
    DecisionSource,
    Delivery,
    Feature,
    Outcome,
    Permission,
    TurnStatus,
    args_digest,
    execution_id_for,
    result_digest,
)
from harness.criteria import lm_support as s
from harness.criteria.base import Criterion, Verdict, judge
from harness.trace import Kind, ObservationPoint, Trace, TraceEvent

# --------------------------------------------------------------------------- shared


def _new_checkpoints(trace: Trace, point: ObservationPoint) -> list[CheckpointView]:
    """Checkpoints first seen at ``point`` (else each session's latest one there)."""
    position = next(i for i, p in enumerate(trace.observations) if p is point)
    earlier = {(c.session_id, c.sequence) for p in trace.observations[:position] for c in p.observation.checkpoints}
    new = [c for c in point.observation.checkpoints if (c.session_id, c.sequence) not in earlier]
    if new:
        return new
    latest: dict[str, CheckpointView] = {}
    for c in point.observation.checkpoints:
        if c.session_id not in latest or c.sequence > latest[c.session_id].sequence:
            latest[c.session_id] = c
    return list(latest.values())


def _started_op(trace: Trace, crash: s.CrashAt) -> s.OpKey | None:
    """The operation whose start was recorded (or whose tool returned) when the crash hit."""
    key = s.op_from_context(trace, crash.failpoint_event)
    if key is not None:
        return key
    if crash.failpoint == "after_tool_returned":
        row = s.last_row_of_instance(trace, crash.index, crash.instance)
        return s.ledger_key(row) if row is not None else None
    if crash.failpoint_event is not None:
        probe = s.probe_for(trace, crash.failpoint_event, f"probe:failpoint:{crash.failpoint}")
        if probe is not None:
            started = [op for op in probe.observation.operations
                       if op.execution_started and op.outcome is Outcome.NOT_STARTED and op.delivery is Delivery.PENDING]
            if len(started) == 1:
                return (started[0].session_id, started[0].identity.tool_call_id)
    return None


def _points_until_next_crash(trace: Trace, start: int) -> tuple[ObservationPoint, ...]:
    later_crashes = [c.index for c in trace.crashes() if c.index > start]
    stop = later_crashes[0] if later_crashes else None
    return tuple(p for p in s.durable_points_after(trace, start) if stop is None or p.index < stop)


def _unconfirmable(trace: Trace) -> list[tuple[s.CrashAt, s.OpKey]]:
    out = []
    for crash in s.crashes_at(trace, "after_start_recorded", "after_tool_returned"):
        key = _started_op(trace, crash)
        if key is not None:
            out.append((crash, key))
    return out


def _result_problems(op, row: TraceEvent | None) -> list[str]:
    """What is wrong with a stored result that must be kept (L4.4, L4.7)."""
    problems = []
    # A tool that answered "unknown" leaves an unknown result: kept, it is unknown and
    # needs reconciliation ("结果未知：保留操作证据，进入核对流程").
    tool_said_unknown = row is not None and row.data.get("error_kind") == "unknown"
    if op.reconciliation_required and not tool_said_unknown:
        problems.append("sent to reconciliation")
    if op.delivery is Delivery.PENDING:
        problems.append("left dispatched (delivery pending)")
    if row is not None:
        wanted = Outcome.UNKNOWN.value if tool_said_unknown else s.expected_outcome(row)
        if op.outcome.value != wanted:
            problems.append(f"outcome {op.outcome.value}, the ledger says {wanted}")
        if not op.execution_started:
            problems.append("execution_started false although it executed")
        digest = result_digest(str(row.data.get("status", "")), str(row.data.get("output", "")))
        if op.result_digest != digest:
            problems.append("result digest differs from the executed result")
    elif op.outcome is not Outcome.NOT_STARTED:
        problems.append(f"outcome {op.outcome.value} although it never executed")
    return problems


# --------------------------------------------------------------------------- L4.1


def check_l4_1(trace: Trace) -> Verdict:
    exercised, violations = 0, []
    for crash in s.crashes_at(trace, "after_result_saved"):
        key = s.op_from_context(trace, crash.failpoint_event)
        if key is None:
            row = s.last_row_of_instance(trace, crash.index, crash.instance)
            key = s.ledger_key(row) if row is not None else None
        row = s.last_row_before(trace, key, crash.index) if key is not None else None
        if key is None or row is None:
            continue
        exercised += 1
        again = [r for r in s.ledger_rows_for(trace, key) if r.index > crash.index]
        if again:
            violations.append(s.ev(f"{key[1]} executed again after the crash that followed its saved result",
                                   crash.index, *(r.index for r in again), rows=[row, *again]))
        wanted = s.expected_outcome(row)
        stored = [(p, s.find_op(p.observation, key)) for p in s.durable_points_after(trace, crash.index)]
        stored = [(p, op) for p, op in stored if op is not None]
        if stored:
            point, op = stored[0]
            if op.outcome.value != wanted or op.reconciliation_required or op.delivery is Delivery.PENDING:
                violations.append(s.ev(
                    f"after restart {key[1]} is {op.outcome.value} (reconciliation_required="
                    f"{op.reconciliation_required}, delivery {op.delivery.value}); its saved result is {wanted}",
                    crash.index, point.index, rows=[row]))
        following = s.first_request_after(trace, key[0], crash.index)
        if following is not None:
            message = s.tool_message(following, key[1])
            output = str(row.data.get("output", ""))
            if message is None:
                violations.append(s.ev(f"the continuation after restart does not carry the saved result of {key[1]}",
                                       crash.index, following.index, rows=[row]))
            elif message.get("outcome") not in (None, wanted):
                violations.append(s.ev(f"the continuation carries {key[1]} as {message.get('outcome')}, its saved "
                                       f"result is {wanted}", following.index, rows=[row]))
            elif wanted == "succeeded" and output and output not in str(message.get("content", "")):
                violations.append(s.ev(f"the continuation carries another output for {key[1]} than the saved one",
                                       following.index, rows=[row]))
        elif trace.completed and crash.restart_index is not None and not s.interrupted_between(
                trace, crash.restart_index, None, key[0]) and not s.cancelled(trace, key[0]):
            final = s.final_point(trace)
            waiting = final is not None and any(
                w.session_id == key[0] and w.status.value == "pending" for w in final.observation.approval_waits)
            if not waiting:
                violations.append(s.ev(f"the turn of {key[1]} never continued from its saved result after restart",
                                       crash.index, crash.restart_index, rows=[row]))
    return judge("L4.1", exercised, violations, "no crash after a saved result of an executed operation")


# --------------------------------------------------------------------------- L4.2


def check_l4_2(trace: Trace) -> Verdict:
    exercised, violations = 0, []
    requests = s.model_requests(trace)
    for crash in s.crashes_at(trace, "after_checkpoint_saved"):
        key = s.op_from_context(trace, crash.failpoint_event)
        if key is None and crash.failpoint_event is not None:
            probe = s.probe_for(trace, crash.failpoint_event, "probe:failpoint:after_checkpoint_saved")
            if probe is not None:
                for cp in _new_checkpoints(trace, probe):
                    key = key or s.key_for_execution_id(trace, cp.last_execution_id)
        if key is None:
            row = s.last_row_of_instance(trace, crash.index, crash.instance)
            key = s.ledger_key(row) if row is not None else None
        if key is None or crash.restart_index is None:
            continue
        exercised += 1
        again = [r for r in s.ledger_rows_for(trace, key) if r.index > crash.index]
        if again:
            violations.append(s.ev(f"{key[1]} executed again although its checkpoint was saved",
                                   crash.index, *(r.index for r in again), rows=again))
        before = {s.messages_key(r) for r in requests if r.index < crash.index and r.data.get("session_id") == key[0]}
        resent = [r for r in requests if r.index > crash.index and r.data.get("session_id") == key[0]
                  and s.messages_key(r) in before]
        if resent:
            violations.append(s.ev("recovery sent a model request for a step already checkpointed",
                                   crash.index, *(r.index for r in resent)))
        execution_id = execution_id_for(*key)
        replayed = [e for e in trace.of_kind(Kind.UI_PUBLISH) if e.index > crash.index
                    and (e.data.get("projection") or {}).get("execution_id") == execution_id]
        if not replayed and trace.completed:
            violations.append(s.ev(f"the projection of {key[1]} was not replayed after restart",
                                   crash.index, crash.restart_index))
    return judge("L4.2", exercised, violations, "no crash between a saved checkpoint and its projection")


# --------------------------------------------------------------------------- L4.3


def check_l4_3(trace: Trace) -> Verdict:
    exercised, violations = 0, []
    for crash, key in _unconfirmable(trace):
        if crash.restart_index is None:
            continue
        again = [r for r in s.ledger_rows_for(trace, key) if r.index > crash.index]
        points = _points_until_next_crash(trace, crash.restart_index)
        if not points and not again:
            continue
        exercised += 1
        if again:
            violations.append(s.ev(f"{key[1]}, whose result was never saved, was executed again after restart",
                                   crash.index, *(r.index for r in again), rows=again))
        for point in points:
            op = s.find_op(point.observation, key)
            if op is None:
                violations.append(s.ev(f"{key[1]} vanished from the store after the crash", crash.index, point.index))
                break
            if op.outcome is not Outcome.UNKNOWN or not op.reconciliation_required:
                violations.append(s.ev(
                    f"after restart {key[1]} is {op.outcome.value} (reconciliation_required="
                    f"{op.reconciliation_required}); its start was recorded and no result saved",
                    crash.index, point.index))
                break
    return judge("L4.3", exercised, violations, "no crash between a recorded start and a saved result")


# --------------------------------------------------------------------------- L4.4


def check_l4_4(trace: Trace) -> Verdict:
    exercised, violations = 0, []
    fps = list(trace.of_kind(Kind.FAILPOINT))
    for fp in fps:
        if fp.data.get("name") != "during_checkpoint_build" or fp.data.get("action") not in ("raise", "fail_checkpoint"):
            continue
        key = s.op_from_context(trace, fp)
        if key is None:
            since = max((e.index for e in fps if e.index < fp.index and e.instance == fp.instance
                         and e.data.get("name") in ("during_checkpoint_build", "after_checkpoint_saved")), default=-1)
            row = s.last_row_of_instance(trace, fp.index, fp.instance, since)
            key = s.ledger_key(row) if row is not None else None
        if key is None:
            continue
        row = s.last_row_before(trace, key, fp.index)
        points = [(p, s.find_op(p.observation, key)) for p in s.durable_points_after(trace, fp.index)]
        points = [(p, op) for p, op in points if op is not None]
        again = [r for r in s.ledger_rows_for(trace, key) if r.index > fp.index]
        if not points and not again:
            continue
        exercised += 1
        if again:
            violations.append(s.ev(f"{key[1]} was dispatched again after its checkpoint failed",
                                   fp.index, *(r.index for r in again), rows=again))
        for point, op in points:
            problems = _result_problems(op, row)
            if problems:
                violations.append(s.ev(f"after the checkpoint build failed, {key[1]} is " + "; ".join(problems),
                                       fp.index, point.index, rows=[row] if row is not None else []))
                break
    return judge("L4.4", exercised, violations, "no failed checkpoint build")


# --------------------------------------------------------------------------- L4.5


def _has_result(op) -> bool:
    if op.delivery is Delivery.PENDING:
        return False
    if op.outcome is not Outcome.NOT_STARTED:
        return True
    return (op.permission is Permission.DENY or op.failure_kind is not None
            or op.decided_by is DecisionSource.CANCELLATION)


def check_l4_5(trace: Trace) -> Verdict:
    exercised, violations = 0, []
    fps = [e for e in trace.of_kind(Kind.FAILPOINT) if e.data.get("name") == "after_checkpoint_saved"]
    for point in trace.observations_labelled("probe:failpoint:after_checkpoint_saved"):
        obs = point.observation
        hit = [e for e in fps if e.index <= point.index]
        instance = hit[-1].instance if hit else None
        judged = False
        for cp in _new_checkpoints(trace, point):
            if cp.last_execution_id:
                judged = True
                op = s.find_op_by_execution_id(obs, cp.last_execution_id)
                if op is None or not _has_result(op):
                    state = "missing" if op is None else f"{op.outcome.value}/{op.delivery.value}"
                    violations.append(s.ev(f"checkpoint {cp.sequence} of {cp.session_id} covers "
                                           f"{cp.last_execution_id}, whose result is not saved ({state})", point.index))
            for row in trace.ledger():
                if row.index >= point.index or s.ledger_key(row)[0] != cp.session_id:
                    continue
                if instance is not None and row.instance != instance:
                    continue
                key = s.ledger_key(row)
                op = s.find_op(obs, key)
                judged = True
                if op is not None and (op.reconciliation_required or op.outcome is Outcome.UNKNOWN):
                    continue
                if op is None or op.delivery is Delivery.PENDING or op.outcome is Outcome.NOT_STARTED:
                    state = "missing" if op is None else f"{op.outcome.value}/{op.delivery.value}"
                    violations.append(s.ev(f"checkpoint {cp.sequence} of {cp.session_id} was saved before the "
                                           f"result of executed {key[1]} ({state})", row.index, point.index, rows=[row]))
        exercised += judged
    return judge("L4.5", exercised, violations, "no probe at after_checkpoint_saved")


# --------------------------------------------------------------------------- L4.6


def check_l4_6(trace: Trace) -> Verdict:
    exercised, violations = 0, []
    for row in trace.ledger():
        probe = s.probe_for(trace, row, "probe:tool_executed")
        if probe is None:
            continue
        exercised += 1
        key = s.ledger_key(row)
        op = s.find_op(probe.observation, key)
        if op is None or not op.execution_started:
            state = "no operation record" if op is None else "execution_started false"
            violations.append(s.ev(f"{key[1]} ran while the store had {state}: the start was not recorded first",
                                   row.index, probe.index, rows=[row]))
    return judge("L4.6", exercised, violations, "no ledger row with a probe of the store")


# --------------------------------------------------------------------------- L4.7


def check_l4_7(trace: Trace) -> Verdict:
    exercised, violations = 0, []
    final = s.final_point(trace)
    if final is not None:
        for op in final.observation.operations:
            key = (op.session_id, op.identity.tool_call_id)
            row = s.last_row_before(trace, key, final.index + 1)
            if row is None or op.outcome not in (Outcome.SUCCEEDED, Outcome.FAILED) or op.reconciliation_required:
                continue
            exercised += 1
            problems = _result_problems(op, row)
            if op.identity.execution_id != execution_id_for(*key):
                problems.append("execution id not bound to the call")
            if op.identity.args_digest != args_digest(str(row.data.get("tool", "")), row.data.get("args") or {}):
                problems.append("argument digest differs from the executed arguments")
            if row.data.get("permission_version") is not None and op.identity.permission_version != row.data.get("permission_version"):
                problems.append("permission version differs from the one it executed under")
            if op.outcome is Outcome.FAILED and op.failure_kind is None and not op.reason:
                problems.append("failed without an error reason")
            if problems:
                violations.append(s.ev(f"result record of {key[1]}: " + "; ".join(problems), final.index, rows=[row]))
    for fp in trace.of_kind(Kind.FAILPOINT):
        if fp.data.get("name") != "during_diagnostics_write" or fp.data.get("action") not in ("raise", "crash"):
            continue
        key = s.op_from_context(trace, fp)
        if key is None:
            row = s.last_row_of_instance(trace, fp.index, fp.instance)
            key = s.ledger_key(row) if row is not None else None
        if key is None:
            continue
        row = s.last_row_before(trace, key, fp.index)
        points = [(p, s.find_op(p.observation, key)) for p in s.durable_points_after(trace, fp.index)]
        points = [(p, op) for p, op in points if op is not None]
        if not points:
            continue
        exercised += 1
        for point, op in points:
            problems = _result_problems(op, row)
            if problems:
                violations.append(s.ev(f"after the diagnostics write failed, {key[1]} is " + "; ".join(problems),
                                       fp.index, point.index, rows=[row] if row is not None else []))
                break
    return judge("L4.7", exercised, violations, "no executed operation with a stored result")


# --------------------------------------------------------------------------- L4.8

OPEN_TURN = (TurnStatus.RUNNING, TurnStatus.AWAITING_APPROVAL, TurnStatus.INCOMPLETE, TurnStatus.DEFERRED)


def _recovery_window_end(trace: Trace, spans: tuple[s.DriverSpan, ...], restart: int) -> int:
    """Where what recovery did after ``restart`` ends: the end of its ``recover`` call, else
    the next driver call. Reopening the instance (``open``) comes before ``recover`` and does
    not end the window."""
    for span in spans:
        if span.via_failpoint or (span.index > restart and span.method == "open"):
            continue
        if span.index > restart and span.method == "recover":
            return span.end_index if span.end_index is not None else len(trace.events)
        if span.index > restart:
            return span.index
    return len(trace.events)


def _wait_session(trace: Trace, wait_id: str) -> str:
    for prompt in trace.of_kind(Kind.APPROVAL_PROMPT):
        if prompt.data.get("wait_id") == wait_id:
            return str(prompt.data.get("session_id", ""))
    return ""


def check_l4_8(trace: Trace) -> Verdict:
    exercised, violations = 0, []
    spans = s.driver_spans(trace)
    sessions = s.request_sessions(trace)
    judged_ops: set[tuple[int, s.OpKey]] = set()
    for restart in trace.of_kind(Kind.RESTART):
        points = _points_until_next_crash(trace, restart.index)
        for point in points[:1] + points[1:][-1:]:
            for op in point.observation.operations:
                key = (op.session_id, op.identity.tool_call_id)
                rows = [r for r in s.ledger_rows_for(trace, key) if r.index < point.index]
                if not rows:
                    continue
                if (restart.index, key) not in judged_ops:
                    judged_ops.add((restart.index, key))
                    exercised += 1
                if op.outcome is Outcome.NOT_STARTED or not op.execution_started:
                    violations.append(s.ev(f"after restart {key[1]} is {op.outcome.value} (execution_started="
                                           f"{op.execution_started}) although the ledger shows it executed",
                                           point.index, *(r.index for r in rows), rows=rows))
        # sessions whose turn recovery found open: the crashed turn, and open turns in the store
        crashes = [c.index for c in trace.crashes() if c.index < restart.index]
        restarts = [r.index for r in trace.of_kind(Kind.RESTART) if r.index < restart.index]
        crash_index = crashes[-1] if crashes and (not restarts or crashes[-1] > restarts[-1]) else None
        interrupted: set[str] = set()
        cut = [sp for sp in spans if sp.end_kind == "crash" and sp.end_index == crash_index
               and sp.method in s.TURN_METHODS]
        if cut:
            span = max(cut, key=lambda sp: sp.index)
            session = span.args.get("session_id") or _wait_session(trace, str(span.args.get("wait_id", "")))
            if session:
                interrupted.add(str(session))
        before = s.last_point_before(trace, restart.index if crash_index is None else crash_index)
        if before is not None:
            interrupted |= {v.session_id for v in before.observation.sessions if v.turn_status in OPEN_TURN}
        end = _recovery_window_end(trace, spans, restart.index)
        since = restart.index if crash_index is None else crash_index
        for session in sorted(interrupted):
            exercised += 1
            # a final answer after the interruption (another instance may have given it
            # before the restart) legitimately completes the turn
            answered = any(
                since < e.index < end and e.data.get("how") == "end" and not e.data.get("tool_call_ids")
                and sessions.get(e.data.get("request_id", "")) == session
                for e in s.stream_ends(trace))
            if answered:
                continue
            for event, payload in s.lifecycle_of(trace, "turn_ended"):
                if restart.index < event.index < end and payload.get("session_id") == session and (
                        (payload.get("data") or {}).get("status") == TurnStatus.COMPLETED):
                    violations.append(s.ev(f"recovery marked the turn of session {session} completed without a "
                                           "completed model answer", restart.index, event.index))
            for point in trace.observations:
                if point.label == "after_restart" and restart.index < point.index <= end:
                    view = next((v for v in point.observation.sessions if v.session_id == session), None)
                    if view is not None and view.turn_status is TurnStatus.COMPLETED:
                        violations.append(s.ev(f"recovery left session {session} completed without a completed "
                                               "model answer", restart.index, point.index))
    return judge("L4.8", exercised, violations, "no restart over executed operations or open turns")


# --------------------------------------------------------------------------- L4.9


def check_l4_9(trace: Trace) -> Verdict:
    exercised, violations = 0, []
    for crash, key in _unconfirmable(trace):
        execution_id = execution_id_for(*key)
        reports: list[tuple[int, str]] = []
        for point in trace.observations:
            if point.index > crash.index:
                op = s.find_op(point.observation, key)
                # without a restart nothing recovered the operation: its in-flight record claims nothing
                if op is not None and crash.restart_index is not None and point.index > crash.restart_index:
                    reports.append((point.index, op.outcome.value))
        for event in trace.of_kind(Kind.UI_PUBLISH):
            projection = event.data.get("projection") or {}
            if event.index > crash.index and projection.get("execution_id") == execution_id:
                reports.append((event.index, str(projection.get("outcome"))))
        for event, payload in s.lifecycle_of(trace, "result_saved"):
            if event.index > crash.index and payload.get("execution_id") == execution_id:
                reports.append((event.index, str((payload.get("data") or {}).get("outcome"))))
        for request in s.model_requests(trace):
            if request.index > crash.index and request.data.get("session_id") == key[0]:
                message = s.tool_message(request, key[1])
                if message is not None and message.get("outcome") is not None:
                    reports.append((request.index, str(message.get("outcome"))))
        if not reports:
            continue
        exercised += 1
        wrong = [(i, outcome) for i, outcome in reports if outcome != Outcome.UNKNOWN]
        if wrong:
            violations.append(s.ev(f"{key[1]} could not be confirmed (crash after its start) yet is reported "
                                   f"{', '.join(sorted({o for _, o in wrong}))}", crash.index, *(i for i, _ in wrong)))
    return judge("L4.9", exercised, violations, "no operation whose execution could not be confirmed")


# --------------------------------------------------------------------------- L4.10


def check_l4_10(trace: Trace) -> Verdict:
    exercised, violations = 0, []
    repeats = s.reexecutions(trace)
    for span in s.driver_spans(trace):
        if span.method != "concurrent_turn":
            continue
        session = str(span.args.get("session_id") or s.default_session(trace))
        end = span.end_index if span.end_index is not None else len(trace.events)
        keys = sorted({c.key for c in s.emitted_calls(trace) if span.index < c.index < end and c.session_id == session})
        after = list(s.durable_points_after(trace, end))
        point = after[0] if after else None
        for key in keys:
            exercised += 1
            mine = [(a, b) for a, b in repeats if s.ledger_key(b) == key]
            if mine:
                violations.append(s.ev(f"{key[1]}, delivered to two instances, executed more than once",
                                       *(b.index for _, b in mine), rows=[mine[0][0], *(b for _, b in mine)]))
            if point is not None and len(s.ops_for(point.observation, key)) > 1:
                violations.append(s.ev(f"{key[1]} has {len(s.ops_for(point.observation, key))} operation records",
                                       point.index))
        if point is not None and keys:
            with_result = sum(1 for op in point.observation.operations if op.delivery is not Delivery.PENDING)
            if point.observation.result_records > with_result:
                violations.append(s.ev(f"{point.observation.result_records} result records for {with_result} "
                                       "operations with a result: a duplicate saved a second record", point.index))
    return judge("L4.10", exercised, violations, "no concurrent duplicate delivery")


# --------------------------------------------------------------------------- catalogue

CRITERIA: tuple[Criterion, ...] = (
    Criterion(
        "L4.1", "l4", "Saved result, then crash",
        "After a crash between saving an operation's result and building the checkpoint, the "
        "restarted runtime does not execute the operation again and continues from the saved result.",
        "结果保存后故障，重启不重复执行写操作",
        check_l4_1,
    ),
    Criterion(
        "L4.2", "l4", "Checkpoint saved, projection not",
        "After a crash between the checkpoint and the UI projection, recovery only replays the "
        "projection: no tool call and no model request for that step.",
        "只重放界面投影。",
        check_l4_2,
    ),
    Criterion(
        "L4.3", "l4", "Truly unknown stays unknown",
        "After a crash between the recorded start and the saved result, the operation is outcome "
        "unknown with reconciliation required, and it is never executed again automatically.",
        "真正未知的结果仍要求核对。",
        check_l4_3,
    ),
    Criterion(
        "L4.4", "l4", "Checkpoint failure loses no result",
        "A failing checkpoint build keeps the saved result: the operation is neither left "
        "dispatched nor sent to reconciliation, and it is not dispatched again.",
        "检查点构建失败不能丢掉已知结果。",
        check_l4_4,
    ),
    Criterion(
        "L4.5", "l4", "Results before checkpoint",
        "Completed and not-executed results are durably saved before the checkpoint that follows them.",
        "仅宿主在已授权实现开始前记录执行；已完成和未执行结果均先于检查点保存，不信任应用返回的执行状态。",
        check_l4_5,
    ),
    Criterion(
        "L4.6", "l4", "Start recorded before the tool runs",
        "When a tool runs, the store already holds its operation with execution_started set.",
        "仅宿主在已授权实现开始前记录执行",
        check_l4_6,
    ),
    Criterion(
        "L4.7", "l4", "Authoritative record apart from diagnostics",
        "The result record binds the call identity, result digest, execution_started and error "
        "reason, and a failure writing diagnostics or display state leaves it intact.",
        "结果记录绑定调用身份、结果摘要、是否开始执行和错误原因",
        check_l4_7,
    ),
    Criterion(
        "L4.8", "l4", "Repair does not guess",
        "Recovery never turns an executed operation into not-started (whatever its output says) "
        "and never marks an interrupted turn complete without a completed model answer.",
        "修复旧会话必须核对精确调用与可信权限事件，不能只根据一段任意工具文字猜测未执行，更不能把整个任务标成完成。",
        check_l4_8,
    ),
    Criterion(
        "L4.9", "l4", "No exactly-once claim",
        "An operation whose execution cannot be confirmed is reported unknown everywhere (store, "
        "UI, events, model history), never succeeded or failed.",
        "外部系统操作不能与本地 SQLite 普遍组成一个事务，因此不承诺所有副作用只执行一次。",
        check_l4_9,
    ),
    Criterion(
        "L4.10", "l4", "Concurrent duplicates execute once",
        "Two concurrent deliveries of one operation produce at most one execution, one operation "
        "record and one result record.",
        "每次操作通过 execution ID、tool call ID、参数摘要、权限版本绑定。",
        check_l4_10, (Feature.MULTI_INSTANCE,),
    ),
)
