"""Calls a crash left prepared are taken up by the recovery that follows (part of L4.8).

The lifecycle's recovery carries every prepared or decided call that never started on
with the pipeline (docs/lifecycle.md, "Recovery"): a model-proposed call ends with exactly
one result, and "never guess" lets recovery decide an unstarted call again or close it as
not executed, never forget it. A call forgotten so stays ``pending``/``not_started`` for
ever: no decision taken up, no result in the conversation, no projection, nothing saved.

Guarantees of :func:`forgotten_calls` (pure, over the trace):

* A *left* call is one whose record the last store reading before a restart holds with no
  result and no start (delivery ``pending``, outcome ``not_started``,
  ``execution_started`` false) and no pending approval wait naming it.
* *A recovery that should have taken it up* is a restart on the store (every instance of a
  scenario shares its data dir) after which the restarted runtime drives that session's
  turn: it ends a turn of the session (``turn_ended`` from the new instance, or a
  ``run_turn``/``answer_approval`` of the session returning from it; a turn ``deferred`` to
  another live instance is not ended), or its ``recover()`` returns (whatever the turn's
  stored status: a turn left ``awaiting_approval`` with no wait pending still has a call
  nobody decided). A drive cut short (a crash, or an injected exception the driver call
  raised, between its driver call and its end) is none; a later one is. An instance that is
  never restarted (instance B of a concurrent turn, dropped when it dies) has no recovery:
  its left calls are not judged.
* Judged on the first store reading at rest (after_restart, quiescent, final) after that
  drive, before any later crash or restart: a left call of the session still without
  result, start or pending wait fails, unless the session has a pending approval wait there
  (the loop is paused before it). Also judged on the world: every model request of the
  session sent after the restart must carry a tool message for each call it left (the
  conversation went on without its result otherwise).
* Exercised only by the hard case: the call was prepared, its instance died before
  deciding it (a crash at ``after_prepare`` or ``during_classifier_review`` whose context
  names it, the store read there holding it with no result and no start), and a recovery
  judged it afterwards (a reading or a model request as above).
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.contract import Delivery, Observation, OperationView, Outcome, TurnStatus, WaitStatus
from harness.criteria import trace_readings as s
from harness.criteria.base import Evidence
from harness.trace.record import Kind, ObservationPoint, Trace, TraceEvent

BEFORE_DECIDING = ("after_prepare", "during_classifier_review")
"""Failpoints at which an instance that dies has prepared a call and not decided it."""


@dataclass(frozen=True, slots=True)
class Recovery:
    """One restart: the instance it started, the crash before it, where its readings end."""

    restart: TraceEvent
    instance: int
    crash_index: int | None
    """The crash the restart follows (the last one before it), if any."""
    stop: int
    """The next crash or restart after this one (or past the end): its readings end there."""


def untaken(op: OperationView, observation: Observation) -> bool:
    """No result, no start, and no pending approval wait for it: the call is only prepared
    (or decided) and nothing carries it on."""
    if op.delivery is not Delivery.PENDING or op.outcome is not Outcome.NOT_STARTED or op.execution_started:
        return False
    return not any(w.execution_id == op.identity.execution_id and w.status is WaitStatus.PENDING
                   for w in observation.approval_waits)


def _recoveries(trace: Trace) -> list[Recovery]:
    stops = [e.index for e in trace.of_kind(Kind.CRASH, Kind.RESTART)]
    out = []
    for restart in trace.of_kind(Kind.RESTART):
        crashes = [c.index for c in trace.crashes() if c.index < restart.index]
        later = [i for i in stops if i > restart.index]
        instance = int(restart.data.get("instance", restart.instance))
        out.append(Recovery(restart, instance, crashes[-1] if crashes else None,
                            later[0] if later else len(trace.events)))
    return out


def _drives(trace: Trace, recovery: Recovery, session_id: str) -> int | None:
    """Where the restarted runtime first drove the session's turn through to its end (see
    the module doc): a drive cut short by a crash or an injected exception does not count,
    nor a turn deferred to another live instance that owns it from there."""
    spans = s.driver_spans(trace)
    marks: list[tuple[int, int]] = []  # (where the drive ended, where it began)
    for event, payload in s.lifecycle_of(trace, "turn_ended"):
        if (recovery.restart.index < event.index < recovery.stop and event.instance == recovery.instance
                and payload.get("session_id") == session_id
                and (payload.get("data") or {}).get("status") != TurnStatus.DEFERRED):
            span = s.innermost_span(spans, event.index)
            marks.append((event.index, span.index if span is not None else recovery.restart.index))
    for span in spans:
        if (span.end_kind != "return" or span.end_index is None or span.instance != recovery.instance
                or not recovery.restart.index < span.end_index < recovery.stop):
            continue
        result = span.end_data.get("result") or {}
        if span.method in ("run_turn", "answer_approval") and result.get("session_id") == session_id \
                and result.get("status") != TurnStatus.DEFERRED:
            marks.append((span.end_index, span.index))
        elif span.method == "recover":
            marks.append((span.end_index, span.index))
    for end, begin in sorted(marks):
        if not s.interrupted_between(trace, begin, end, session_id):
            return end
    return None


def _first_rest(trace: Trace, index: int, stop: int) -> ObservationPoint | None:
    points = [p for p in s.durable_points_after(trace, index) if p.index < stop]
    return points[0] if points else None


def _cut_before_deciding(trace: Trace, key: s.OpKey, crash_index: int | None) -> bool:
    """The hard case: the crash the restart follows hit ``key`` at a point before its
    decision, and the store read there holds it untaken."""
    if crash_index is None:
        return False
    for crash in s.crashes_at(trace, *BEFORE_DECIDING):
        if crash.index != crash_index or crash.failpoint_event is None:
            continue
        if not s.names_op(crash.failpoint_event, key):
            continue
        probe = s.failpoint_probe(trace, crash.failpoint_event)
        op = s.find_op(probe.observation, key) if probe is not None else None
        if op is not None and untaken(op, probe.observation):
            return True
    return False


def _store_verdict(key: s.OpKey, point: ObservationPoint) -> tuple[bool, str]:
    """(judged, what is wrong or "") for a left call at the reading after the drive. A call
    still left there behind a pending wait of its session is not judged: the loop is paused
    at that wait and has not reached it yet."""
    observation = point.observation
    now = s.find_op(observation, key)
    if now is not None and not untaken(now, observation):
        return True, ""
    if any(w.session_id == key[0] and w.status is WaitStatus.PENDING for w in observation.approval_waits):
        return False, ""
    if now is None:
        return True, "gone from the store"
    return True, f"{now.permission.value}/{now.outcome.value}/{now.delivery.value}, no wait pending"


def forgotten_calls(trace: Trace) -> tuple[int, list[Evidence]]:
    """(hard cases judged, violations): see the module doc."""
    exercised, violations = 0, []
    requests = s.model_requests(trace)
    for recovery in _recoveries(trace):
        before = s.last_point_before(trace, recovery.restart.index)
        if before is None:
            continue
        left: dict[str, list[OperationView]] = {}
        for op in before.observation.operations:
            if untaken(op, before.observation):
                left.setdefault(op.session_id, []).append(op)
        for session_id, ops in sorted(left.items()):
            # Any recovery that returns must take up what a crash left prepared, whatever the
            # turn's stored status: a turn left "awaiting approval" with no wait pending is
            # still a turn with a call nobody has decided.
            driven = _drives(trace, recovery, session_id)
            point = _first_rest(trace, driven, recovery.stop) if driven is not None else None
            later = [r for r in requests if recovery.restart.index < r.index < recovery.stop
                     and r.data.get("session_id") == session_id]
            for op in ops:
                key = (op.session_id, op.identity.tool_call_id)
                judged, wrong = _store_verdict(key, point) if point is not None else (False, "")
                if wrong:
                    violations.append(s.ev(
                        f"{key[1]} was left prepared (no result, not started) when its instance "
                        f"stopped, and after the restart the runtime drove the turn of {session_id} "
                        f"without taking it up: {wrong}", before.index, recovery.restart.index,
                        driven, point.index))
                for request in later:
                    judged = True
                    if s.tool_message(request, key[1]) is None:
                        violations.append(s.ev(
                            f"after the restart the model was asked again in {session_id} without a "
                            f"result for {key[1]}, left prepared when its instance stopped",
                            before.index, recovery.restart.index, request.index))
                        break
                if judged and _cut_before_deciding(trace, key, recovery.crash_index):
                    exercised += 1
    return exercised, violations
