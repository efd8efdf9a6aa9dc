"""Stage L4: production driver and execution (results, checkpoints, recovery, duplicates).

Pure checks over a Trace. The side-effect ledger (``TOOL_EXECUTED`` rows) is the ground truth
for "did it run"; crashes are located by the ``CRASH`` event and the ``FAILPOINT`` hit it
fired at.

"Exercised" means the hard case happened, never merely that a fault was planned: a crash
criterion counts only when the crash's failpoint context names the operation *and* the store
read at that failpoint (the probe) shows the state the point implies (L4.1: result saved;
L4.2: result saved, a fresh checkpoint, not yet projected; L4.3/L4.9: start recorded, no
result saved; L4.4: a checkpoint build raised after the result was saved). L4.10 counts only
a real race (see :mod:`harness.criteria.races`). Each check's docstring states its rule.
Violations are judged whether or not the hard case happened.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping

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
from harness.criteria import reading_changes
from harness.criteria import trace_readings as s
from harness.criteria import prepared_calls, races, recovery_reports, trusted_denials
from harness.criteria.base import Criterion, Evidence, Verdict, judge
from harness.trace.identity_memo import by_identity
from harness.trace.record import Kind, ObservationPoint, Trace, TraceEvent

# --------------------------------------------------------------------------- shared


def _fresh_checkpoints(trace: Trace, point: ObservationPoint, session_id: str) -> list[CheckpointView]:
    """Checkpoints of the session first seen at ``point`` (none when it shows no new one):
    no observation at an earlier index showed the same (session, sequence)."""
    first_seen = _checkpoint_first_seen(trace)
    return [c for c in point.observation.checkpoints
            if c.session_id == session_id and first_seen[(c.session_id, c.sequence)] >= point.index]


@by_identity(2)
def _checkpoint_first_seen(trace: Trace) -> Mapping[tuple[str, int], int]:
    """(session, sequence) -> the lowest index of an observation showing that checkpoint."""
    indexes = [p.index for p in trace.observations]
    if all(a <= b for a, b in zip(indexes, indexes[1:])):
        # readings in index order: a row's first sighting is where it is a new row, and a
        # key's lowest index its first new row's (reading_changes)
        found: dict[tuple[str, int], int] = {}
        for point, c in reading_changes.new_rows(trace, "checkpoints"):
            found.setdefault((c.session_id, c.sequence), point.index)
        return MappingProxyType(found)
    lowest: dict[int, tuple[Any, int]] = {}  # one pass per distinct observation object
    for p in trace.observations:
        held = lowest.get(id(p.observation))
        if held is None or p.index < held[1]:
            lowest[id(p.observation)] = (p.observation, p.index)
    first: dict[tuple[str, int], int] = {}
    for observation, index in lowest.values():
        for c in observation.checkpoints:
            key = (c.session_id, c.sequence)
            if index < first.get(key, index + 1):
                first[key] = index
    return MappingProxyType(first)


def _started_op(trace: Trace, crash: s.CrashAt) -> s.OpKey | None:
    """The operation the crash cut off between its recorded start and its saved result: the
    crash's failpoint context names it, and the store read at that failpoint shows its start
    recorded and no result saved. None otherwise (the hard case did not happen)."""
    key = s.op_from_context(trace, crash.failpoint_event)
    if key is None:
        return None
    op = s.op_at_hit(trace, crash.failpoint_event, key)
    if op is None or not op.execution_started or op.delivery is not Delivery.PENDING:
        return None
    return key


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
        seq = row.data.get("ledger_seq", "?")
        wanted = Outcome.UNKNOWN.value if tool_said_unknown else s.expected_outcome(row)
        if op.outcome.value != wanted:
            problems.append(f"outcome {op.outcome.value}, ledger row {seq} says {wanted}")
        if not op.execution_started:
            problems.append(f"execution_started false although it executed (ledger row {seq})")
        digest = result_digest(str(row.data.get("status", "")), str(row.data.get("output", "")))
        if op.result_digest != digest:
            problems.append(f"result digest {op.result_digest} differs from {digest}, the "
                            f"executed result's (ledger row {seq})")
    elif op.outcome is not Outcome.NOT_STARTED:
        problems.append(f"outcome {op.outcome.value} although it never executed")
    return problems


# --------------------------------------------------------------------------- L4.1


def _saved_crash_op(trace: Trace, crash: s.CrashAt) -> tuple[s.OpKey, TraceEvent] | None:
    """(operation, its ledger row) when the crash hit that executed operation right after its
    result was saved: the failpoint context names it and the store read there holds its
    result with the ledger's outcome."""
    key = s.op_from_context(trace, crash.failpoint_event)
    row = s.last_row_before(trace, key, crash.index) if key is not None else None
    if key is None or row is None:
        return None
    op = s.op_at_hit(trace, crash.failpoint_event, key)
    if op is None or op.delivery is Delivery.PENDING or op.outcome.value != s.expected_outcome(row):
        return None
    return key, row


def _saved_before(trace: Trace, key: s.OpKey, index: int) -> ObservationPoint | None:
    """The first store reading before event ``index`` that holds the executed operation's
    final result (succeeded or failed, not waiting for an escalation answer)."""
    for point in trace.observations:
        if point.index >= index:
            return None
        op = s.find_op(point.observation, key)
        if op is not None and op.delivery is not Delivery.PENDING and op.outcome in (Outcome.SUCCEEDED, Outcome.FAILED):
            return point
    return None


def _called_again_after_saved(trace: Trace) -> list[Evidence]:
    """Every crash or restart after which a tool, of any kind, ran again although its result
    had been saved before it (only an approved escalation may legitimately run it again)."""
    violations, seen = [], set()
    for crash in trace.of_kind(Kind.CRASH, Kind.RESTART):
        for key in sorted({s.ledger_key(r) for r in trace.ledger() if r.index < crash.index}):
            rows = s.ledger_rows_for(trace, key)
            again = [r for pos, r in enumerate(rows) if r.index > crash.index and pos > 0
                     and not s.retry_justified(rows[pos - 1]) and r.index not in seen]
            if not again:
                continue
            saved = _saved_before(trace, key, crash.index)
            if saved is None:
                continue
            seen.update(r.index for r in again)
            kind = again[0].data.get("kind") or "?"
            violations.append(s.ev(f"{key[1]} ({kind} tool) was called again after a {crash.kind} although its "
                                   "result was saved before it", saved.index, crash.index, *(r.index for r in again),
                                   rows=again))
    return violations


def check_l4_1(trace: Trace) -> Verdict:
    """Exercised per crash at ``after_result_saved`` that hit an executed operation there
    (:func:`_saved_crash_op`) and was followed by a restart. Fails when any tool, whatever
    its kind, runs again after a crash or restart although its result was saved before it; when the
    restarted store does not hold the saved result; or when the continuation does not carry it."""
    exercised, violations = 0, _called_again_after_saved(trace)
    for crash in s.crashes_at(trace, "after_result_saved"):
        found = _saved_crash_op(trace, crash)
        if found is None or crash.restart_index is None:
            continue
        key, row = found
        exercised += 1
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
        elif trace.completed and not s.interrupted_between(
                trace, crash.restart_index, None, key[0]) and not s.cancelled(trace, key[0]):
            final = s.final_point(trace)
            waiting = final is not None and any(
                w.session_id == key[0] and w.status.value == "pending" for w in final.observation.approval_waits)
            if not waiting:
                violations.append(s.ev(f"the turn of {key[1]} never continued from its saved result after restart",
                                       crash.index, crash.restart_index, rows=[row]))
    return judge("L4.1", exercised, violations,
                 "no crash right after the saved result of an executed operation named by the failpoint")


# --------------------------------------------------------------------------- L4.2


def _checkpointed_crash_op(trace: Trace, crash: s.CrashAt) -> s.OpKey | None:
    """The operation the crash hit between its checkpoint and its projection: the failpoint
    context names it, and the store read there holds its result (delivery ``recorded``, not
    yet ``projected``) and a checkpoint of its session first seen at that point."""
    key = s.op_from_context(trace, crash.failpoint_event)
    if key is None or crash.failpoint_event is None:
        return None
    probe = s.failpoint_probe(trace, crash.failpoint_event)
    if probe is None:
        return None
    op = s.find_op(probe.observation, key)
    if op is None or op.delivery is not Delivery.RECORDED:
        return None
    return key if _fresh_checkpoints(trace, probe, key[0]) else None


def check_l4_2(trace: Trace) -> Verdict:
    """Exercised per crash at ``after_checkpoint_saved`` that hit an operation there
    (:func:`_checkpointed_crash_op`) and was followed by a restart. Fails on a tool call or
    a re-sent model request for that step after the crash, or (in a completed run) when
    the operation's projection is never published after the restart."""
    exercised, violations = 0, []
    requests = s.model_requests(trace)
    for crash in s.crashes_at(trace, "after_checkpoint_saved"):
        key = _checkpointed_crash_op(trace, crash)
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
    """Exercised per crash at ``after_start_recorded`` or ``after_tool_returned`` that cut an
    operation off between its recorded start and its saved result (:func:`_started_op`: the
    context names it, the store read there shows the start and no result), followed by a
    restart and a store reading (or a re-execution). Fails on any execution after the crash,
    or when the restarted store holds it as anything but unknown + reconciliation_required."""
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
    """Exercised per checkpoint build that really failed after a saved result: a
    ``during_checkpoint_build`` hit answered with ``raise`` (``fail_checkpoint``) whose context
    names the operation, the store read there already holding its result, and a later store
    reading (or re-dispatch). Fails when the operation is dispatched again, or a later reading
    shows it pending, sent to reconciliation, or with another outcome/digest than the ledger's."""
    exercised, violations = 0, []
    for fp in trace.of_kind(Kind.FAILPOINT):
        if fp.data.get("name") != "during_checkpoint_build" or fp.data.get("action") not in ("raise", "fail_checkpoint"):
            continue
        key = s.op_from_context(trace, fp)
        if key is None:
            continue
        saved = s.op_at_hit(trace, fp, key)
        if saved is None or saved.delivery is Delivery.PENDING:
            continue  # the build failed before any result of it was saved: not this case
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
    """Exercised per ``after_checkpoint_saved`` hit whose context names an operation and whose
    store reading shows a checkpoint of that operation's session first seen there (the
    checkpoint that follows it). Fails when that operation, the one the checkpoint names
    last, or an operation of the session the same instance executed before has no saved
    result there (pending, or not started although executed); an operation already sent to
    reconciliation is not required to have one."""
    exercised, violations = 0, []
    for hit in trace.of_kind(Kind.FAILPOINT):
        if hit.data.get("name") != "after_checkpoint_saved":
            continue
        key = s.op_from_context(trace, hit)
        point = s.failpoint_probe(trace, hit)
        fresh = _fresh_checkpoints(trace, point, key[0]) if key is not None and point is not None else []
        if not fresh:
            continue
        assert key is not None and point is not None
        exercised += 1
        obs = point.observation
        named = {execution_id_for(*key)} | {cp.last_execution_id for cp in fresh if cp.last_execution_id}
        for execution_id in sorted(named):
            op = s.find_op_by_execution_id(obs, execution_id)
            if op is None or not _has_result(op):
                state = "missing" if op is None else f"{op.outcome.value}/{op.delivery.value}"
                violations.append(s.ev(f"checkpoint {fresh[-1].sequence} of {key[0]} follows {execution_id}, "
                                       f"whose result is not saved ({state})", hit.index, point.index))
        rows, indexes = _ledger_by_session_instance(trace).get((key[0], hit.instance), ((), []))
        for row in rows:
            if row.index >= hit.index:
                if indexes is not None:
                    break  # in index order: none later is before the hit
                continue
            row_key = s.ledger_key(row)
            if execution_id_for(*row_key) in named:
                continue
            op = s.find_op(obs, row_key)
            if op is not None and (op.reconciliation_required or op.outcome is Outcome.UNKNOWN):
                continue
            if op is None or op.delivery is Delivery.PENDING or op.outcome is Outcome.NOT_STARTED:
                state = "missing" if op is None else f"{op.outcome.value}/{op.delivery.value}"
                violations.append(s.ev(f"checkpoint {fresh[-1].sequence} of {key[0]} was saved before the "
                                       f"result of executed {row_key[1]} ({state})", row.index, point.index,
                                       rows=[row]))
    return judge("L4.5", exercised, violations,
                 "no after_checkpoint_saved hit naming an operation with a fresh checkpoint of its session")


@by_identity(2)
def _ledger_by_session_instance(trace: Trace
                                ) -> dict[Any, tuple[tuple[TraceEvent, ...], list[int] | None]]:
    """The ledger's rows by (session, instance), in trace order, with their indexes when
    those are in order (None when not: a hand-built trace)."""
    grouped: dict[Any, list[TraceEvent]] = {}
    for row in trace.ledger():
        try:
            grouped.setdefault((s.ledger_key(row)[0], row.instance), []).append(row)
        except TypeError:  # a session id that cannot be hashed is no session's
            continue
    found: dict[Any, tuple[tuple[TraceEvent, ...], list[int] | None]] = {}
    for group, rows in grouped.items():
        indexes = [row.index for row in rows]
        ordered = all(a <= b for a, b in zip(indexes, indexes[1:]))
        found[group] = (tuple(rows), indexes if ordered else None)  # None: read them all
    return found


# --------------------------------------------------------------------------- L4.6


def check_l4_6(trace: Trace) -> Verdict:
    """Exercised per ledger row with a store reading taken while the world ran the tool.
    Fails when that reading has no operation record or execution_started false."""
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
    """Exercised per executed operation with a final result in the final store reading
    (its record must bind the call's execution id, argument digest, version, the ledger's
    outcome and result digest, execution_started, and a reason when failed), and per
    diagnostics failure (``during_diagnostics_write`` answered with raise or crash) whose
    context names an operation whose result the store already held there, with a later
    store reading (the record must be intact)."""
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
        saved = s.op_at_hit(trace, fp, key) if key is not None else None
        if key is None or saved is None or saved.delivery is Delivery.PENDING:
            continue  # the failure did not hit a saved result record
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


def _result_saved_before(trace: Trace, key: s.OpKey, index: int) -> bool:
    return any(p.index < index and (op := s.find_op(p.observation, key)) is not None
               and op.delivery is not Delivery.PENDING for p in trace.observations)


def _repair_guesses(trace: Trace, restart: TraceEvent, stop: int, point: ObservationPoint,
                    judged: set[tuple[int, s.OpKey]]) -> tuple[int, list[Evidence]]:
    """Operations in flight when the instance stopped (start recorded, no result saved, no
    ledger row) that the first reading after the restart records as not executed: each needs
    a trusted denial of that exact call (:mod:`harness.criteria.trusted_denials`)."""
    exercised, violations = 0, []
    for op in point.observation.operations:
        key = (op.session_id, op.identity.tool_call_id)
        if s.last_row_before(trace, key, point.index) is not None:
            continue  # executed: judged against the ledger
        if not s.start_recorded_before(trace, key, stop) or _result_saved_before(trace, key, stop):
            continue
        if (restart.index, key) not in judged:
            judged.add((restart.index, key))
            exercised += 1
        claims_not_run = not op.execution_started or (
            op.outcome is Outcome.NOT_STARTED and op.delivery is not Delivery.PENDING)
        if claims_not_run and trusted_denials.trusted_denial(trace, key, point.index) is None:
            others = trusted_denials.denials_of_other_calls(trace, key, point.index)
            borrowed = f" (only another call was denied: {', '.join(k[1] for k in others)})" if others else ""
            violations.append(s.ev(
                f"after restart {key[1]}, whose start was recorded and whose result was never saved, is "
                f"recorded as not executed (outcome {op.outcome.value}, execution_started={op.execution_started}) "
                f"without a trusted denial of that exact call{borrowed}", stop, point.index))
    return exercised, violations


_TURN_EFFECTS = frozenset({
    Kind.MODEL_REQUEST, Kind.MODEL_STREAM_END, Kind.CLASSIFIER_REQUEST, Kind.TOOL_EXECUTED,
    Kind.TOOL_UNAVAILABLE, Kind.APPROVAL_PROMPT, Kind.UI_PUBLISH, Kind.LIFECYCLE_EVENT,
})
"""What a turn call does that the world (the model, the classifier, the tools, the owner, the
UI, the event channel) sees: one of them inside a cut call means the call was under way."""


def _lost_whole(trace: Trace, span: s.DriverSpan, session: str, crash_index: int,
                restart: int, end: int) -> bool:
    """Was the turn call ``span``, cut by the crash at ``crash_index``, lost as a whole, as a
    store loses an unacknowledged transaction (docs/contract.md, "A turn call cut before its
    first commit")? Only when all of these hold: the world saw nothing of it (no event of
    :data:`_TURN_EFFECTS` between the call and the crash); every store reading of the
    recovery that follows (``after_restart``) equals the last reading before the call; and
    the session's first model request after the restart carries the call's text no more
    often than the user sent it since the last request before the call (the store kept no
    part of the turn, its message included). Then no turn was interrupted: the store shows
    what the previous turn left, and the caller, who got no answer, sends the turn again."""
    before = s.last_point_before(trace, span.index)
    if before is None:
        return False
    readings = [p for p in trace.observations
                if p.label == "after_restart" and restart < p.index <= end]
    if not readings or any(p.observation != before.observation for p in readings):
        return False
    if any(trace.events[i].kind in _TURN_EFFECTS for i in range(span.index + 1, crash_index)):
        return False
    return not _message_kept(trace, span, session, restart)


def _message_kept(trace: Trace, span: s.DriverSpan, session: str, restart: int) -> bool:
    """Does the session's first model request after ``restart`` carry the cut call's text as
    a user message more often than the last request before the call did, plus the turn calls
    of that text made since the restart (instance B of a concurrent turn delivers its A's
    text again: not counted)?"""
    if "user_text" not in span.args:
        return False  # an answer to a wait carries no message
    text = str(span.args["user_text"])
    requests = [e for e in s.model_requests(trace) if e.data.get("session_id") == session]
    later = next((e for e in requests if e.index > restart), None)
    if later is None:
        return False  # no request to tell: the store reading decides
    earlier = [e for e in requests if e.index < span.index]

    def said(request: TraceEvent) -> int:
        return sum(1 for m in request.data.get("messages") or ()
                   if isinstance(m, dict) and m.get("role") == "user" and m.get("content") == text)

    sent = sum(1 for e in trace.of_kind(Kind.DRIVER_CALL)
               if restart < e.index < later.index and not e.data.get("skipped")
               and e.data.get("method") in s.TURN_METHODS
               and (e.data.get("args") or {}).get("role") != "B"
               and (e.data.get("args") or {}).get("session_id") == session
               and (e.data.get("args") or {}).get("user_text") == text)
    return said(later) > (said(earlier[-1]) if earlier else 0) + sent


def check_l4_8(trace: Trace) -> Verdict:
    """Exercised, per restart, by each executed operation (ledger) found in the first and last
    store readings after it, by each operation in flight when the instance stopped (start
    recorded, no result saved) found after it, and by each session whose turn was open at
    the interruption. Fails when an executed operation is recorded as not started or not
    executed (whatever its output says); when an in-flight operation is recorded as not
    executed without a trusted denial of that exact call (never another call's); and when
    recovery marks an interrupted turn completed without a completed model answer. A turn
    call cut by the crash does not count as interrupted when another instance ended that
    session's turn ``completed`` while the call ran: recovery found it completed; nor when
    it was cut before its first commit and before anything of it reached the world
    (:func:`_lost_whole`): the store then shows the previous turn as it ended, and
    recovery marked nothing (a ``turn_ended`` ``completed`` it emits is still judged).

    Also exercised by each call whose instance died before deciding it (``after_prepare``,
    ``during_classifier_review``) and that a recovery then judged; fails when a call the
    crash left prepared (no result, not started, no pending wait) is still so after the
    restarted runtime drove its session's turn, or when the model is asked again without
    its result (:mod:`harness.criteria.prepared_calls`)."""
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
        if points:
            count, found = _repair_guesses(trace, restart, restart.index if crash_index is None else crash_index,
                                           points[0], judged_ops)
            exercised += count
            violations += found
        interrupted: set[str] = set()
        lost: set[str] = set()  # cut turn calls lost whole: the store reads as before them
        end = _recovery_window_end(trace, spans, restart.index)
        cut = [sp for sp in spans if sp.end_kind == "crash" and sp.end_index == crash_index
               and sp.method in s.TURN_METHODS]
        if cut:
            span = max(cut, key=lambda sp: sp.index)
            session = span.args.get("session_id") or _wait_session(trace, str(span.args.get("wait_id", "")))
            if session and not _completed_elsewhere(trace, str(session), span, crash_index):
                interrupted.add(str(session))
                if crash_index is not None and _lost_whole(trace, span, str(session), crash_index,
                                                           restart.index, end):
                    lost.add(str(session))
        before = s.last_point_before(trace, restart.index if crash_index is None else crash_index)
        if before is not None:
            interrupted |= {v.session_id for v in before.observation.sessions if v.turn_status in OPEN_TURN}
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
            if session in lost:
                continue  # the store shows the previous turn's end, as before the cut call
            for point in trace.observations:
                if point.label == "after_restart" and restart.index < point.index <= end:
                    view = next((v for v in point.observation.sessions if v.session_id == session), None)
                    if view is not None and view.turn_status is TurnStatus.COMPLETED:
                        violations.append(s.ev(f"recovery left session {session} completed without a completed "
                                               "model answer", restart.index, point.index))
    count, found = prepared_calls.forgotten_calls(trace)
    exercised += count
    violations += found
    judged, unreported = recovery_reports.unreported_resumptions(trace)
    exercised += judged
    for report, session, request in unreported:
        violations.append(s.ev(f"the recovery at event {report.call_index} drove the turn of {session} "
                               "on (a model request) but its RecoveryReport does not list it in "
                               "turns_resumed", report.call_index, request, report.return_index))
    return judge("L4.8", exercised, violations, "no restart over executed operations or open turns")


def _completed_elsewhere(trace: Trace, session: str, span: s.DriverSpan, crash_index: int | None) -> bool:
    """Did another instance end the session's turn ``completed`` while ``span`` (the crashed
    instance's turn call) was still running? Then that turn was superseded before the crash:
    recovery finding the session completed found it so, it did not mark it so."""
    if crash_index is None:
        return False
    return any(
        span.index < event.index < crash_index and event.instance != span.instance
        and payload.get("session_id") == session
        and (payload.get("data") or {}).get("status") == TurnStatus.COMPLETED
        for event, payload in s.lifecycle_of(trace, "turn_ended"))


# --------------------------------------------------------------------------- L4.9


def check_l4_9(trace: Trace) -> Verdict:
    """Exercised per operation cut off between its recorded start and its saved result
    (as for L4.3) that something later reports on: the restarted store, a UI publication,
    a ``result_saved`` event, a model request, or the recovery that follows the crash.
    Fails when any report is not unknown, or when that recovery's ``RecoveryReport`` (or its
    ``recovered`` event for the session) does not list it as needing reconciliation."""
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
        recovery = recovery_reports.first_after(trace, crash.index)
        if recovery is not None:
            reports.append((recovery.return_index, Outcome.UNKNOWN.value))  # judged below
            omitted_by = recovery.lists(execution_id, key[0])
            if omitted_by is not None:
                violations.append(s.ev(
                    f"{key[1]} could not be confirmed (crash after its start) yet {omitted_by} "
                    "does not list it as needing reconciliation", crash.index,
                    recovery.call_index, recovery.return_index))
        if not reports:
            continue
        exercised += 1
        wrong = [(i, outcome) for i, outcome in reports if outcome != Outcome.UNKNOWN]
        if wrong:
            violations.append(s.ev(f"{key[1]} could not be confirmed (crash after its start) yet is reported "
                                   f"{', '.join(sorted({o for _, o in wrong}))}", crash.index, *(i for i, _ in wrong)))
    return judge("L4.9", exercised, violations, "no operation whose execution could not be confirmed")


# --------------------------------------------------------------------------- L4.10


def _completed_without_an_answer(trace: Trace, turn: races.ConcurrentTurn) -> tuple[int, list[Evidence]]:
    """Each instance's return of the concurrent turn that says ``completed``: the world's last
    model answer of the session before it must be a final one (a normal end without tool
    calls). An instance that leaves a duplicate call to the other (which holds it, its result
    not saved) has no answer to complete the turn with: it must say so (``deferred``),
    not report the turn done while the call's result is still owed. Returns how many
    returns were judged and the violations."""
    sessions = s.request_sessions(trace)
    judged, found = 0, []
    for span in (turn.a, turn.b):
        if span is None or span.end_kind != "return" or span.end_index is None:
            continue
        result = span.end_data.get("result")
        if not isinstance(result, dict) or result.get("session_id", turn.session_id) != turn.session_id:
            continue
        judged += 1
        if result.get("status") != TurnStatus.COMPLETED.value:
            continue
        answers = [e for e in s.stream_ends(trace) if e.index < span.end_index
                   and sessions.get(e.data.get("request_id", "")) == turn.session_id]
        last = answers[-1] if answers else None
        if last is None or last.data.get("how") != "end" or last.data.get("tool_call_ids"):
            owed = ", ".join(str(c) for c in (last.data.get("tool_call_ids") or [])) if last else ""
            found.append(s.ev(
                f"instance {span.instance} reported the concurrent turn of session {turn.session_id} "
                "completed, but the model's last answer before it "
                + (f"asked for {owed}, whose result this call did not settle" if owed
                   else "was not a completed final answer"),
                span.end_index, *((last.index,) if last is not None else ())))
    return judged, found


def check_l4_10(trace: Trace) -> Verdict:
    """Exercised per operation both instances of a ``concurrent_turn`` really raced for
    (:func:`harness.criteria.races.raced_operations`: the hold engaged, A was held in the
    operation before its result was saved, and B reached the same identity meanwhile), and
    per instance's return of such a raced turn. A hold that never engaged, or engaged before
    or after the operation, exercises nothing. Whether raced or not, every call served
    during a concurrent turn is judged: more than one execution (ledger), more than one
    operation record, or more result records than operations with a result fail; so does
    an instance's return that reports the turn ``completed`` when the model's last answer
    before it was not a final one (it left a call to the other instance: ``deferred``)."""
    exercised, violations = 0, []
    repeats = s.reexecutions(trace)
    for turn in races.concurrent_turns(trace):
        end = turn.end if turn.end is not None else len(trace.events)
        keys = sorted({c.key for c in s.emitted_calls(trace)
                       if turn.a.index < c.index < end and c.session_id == turn.session_id})
        raced = races.raced_operations(trace, turn)
        exercised += len(raced)
        judged, found = _completed_without_an_answer(trace, turn)
        exercised += judged if raced else 0
        violations += found
        after = list(s.durable_points_after(trace, end))
        point = after[0] if after else None
        for key in keys:
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
    return judge("L4.10", exercised, violations,
                 "no concurrent turn in which both instances reached one operation while A was held")


# --------------------------------------------------------------------------- catalogue

CRITERIA: tuple[Criterion, ...] = (
    Criterion(
        "L4.1", "l4", "Saved result, then crash",
        "After a crash between saving an operation's result and building the checkpoint, the "
        "restarted runtime continues from the saved result; no tool of any kind (read, write, "
        "web, terminal, user app...) is called again after a crash once its result was saved.",
        "结果已保存，检查点未更新 | 使用结果补齐继续执行状态，不再次调用工具。",
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
        "Recovery matches each exact call against trusted permission events: an executed "
        "operation is never recorded as not started (whatever its output says), an operation "
        "in flight counts as not executed only when a trusted denial of that exact call says so "
        "(never another call's), an interrupted turn is never marked complete without a "
        "completed model answer (a turn call a crash cut before its first commit, and before "
        "the world saw anything of it, may be lost whole: the store then reads as before the "
        "call), and a call left prepared and not started is taken up when "
        "the restarted runtime drives its turn (decided again or closed as not executed, "
        "never forgotten).",
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
        "record and one result record; the instance that leaves the call to the other does not "
        "report the turn completed.",
        "每次操作通过 execution ID、tool call ID、参数摘要、权限版本绑定。",
        check_l4_10, (Feature.MULTI_INSTANCE,),
    ),
)
