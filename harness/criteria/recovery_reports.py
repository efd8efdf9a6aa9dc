"""What ``recover()`` says it did: its ``RecoveryReport`` and the ``recovered`` events it
emitted, read from the trace so that the checks owning each claim can hold it against the
world.

A UI learns from the report which operations need the owner to reconcile them; a report
that leaves one out hides an operation nobody can confirm, one that lists a confirmed
operation sends the owner to check what is known. The world judges both: L4.9 asks every
operation a crash cut off between its recorded start and its saved result to be listed by
the recovery that follows the crash, X4 asks every listed operation to be one that may have
run without a result (a crash between its start and its result, or a tool that answered
unknown). Which sessions it resumed is judged the same way: L4.8 asks every session whose
turn the recovery drove on (the world served it a model request during the call) to be in
``turns_resumed``.

Guarantees: pure over the trace; only a ``recover`` call that returned a report counts (one
cut off reported nothing); the report's and the events' lists are read as given (execution
ids).
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.criteria.trace_readings import driver_spans
from harness.trace.identity_memo import by_identity
from harness.trace.record import Kind, Trace


@dataclass(frozen=True, slots=True)
class Report:
    """One ``recover()`` that returned."""

    call_index: int
    return_index: int
    reconciliation_required: frozenset[str]
    """The returned report's list."""
    announced: dict[str, frozenset[str]]
    """Per session, the ``reconciliation_required`` list of the ``recovered`` event it emitted
    during the call (sessions without an event are absent)."""
    turns_resumed: frozenset[str]
    """The returned report's ``turns_resumed``."""

    def listed(self) -> frozenset[str]:
        """Every execution id the report or one of its events lists."""
        return self.reconciliation_required.union(*self.announced.values())

    def lists(self, execution_id: str, session_id: str) -> str | None:
        """``None`` when both the report and the session's event list ``execution_id``,
        else what leaves it out."""
        if execution_id not in self.reconciliation_required:
            return "the RecoveryReport it returned"
        announced = self.announced.get(session_id)
        if announced is not None and execution_id not in announced:
            return f"the recovered event of {session_id}"
        return None


@by_identity(2)
def reports(trace: Trace) -> tuple[Report, ...]:
    found = []
    for span in driver_spans(trace):
        if span.method != "recover" or span.end_kind != "return" or span.end_index is None:
            continue
        result = span.end_data.get("result")
        if not isinstance(result, dict):
            continue  # no report to hold against the world (the driver recorded none)
        listed = result.get("reconciliation_required")
        announced: dict[str, frozenset[str]] = {}
        for event, payload in trace.lifecycle_events():
            if (span.index < event.index < span.end_index and payload.get("type") == "recovered"
                    and event.instance == span.instance):
                data = payload.get("data") or {}
                announced[str(payload.get("session_id", ""))] = frozenset(
                    str(x) for x in data.get("reconciliation_required") or ())
        found.append(Report(span.index, span.end_index,
                            frozenset(str(x) for x in listed or ()), announced,
                            frozenset(str(x) for x in result.get("turns_resumed") or ())))
    return tuple(found)


def unreported_resumptions(trace: Trace) -> tuple[int, list[tuple[Report, str, int]]]:
    """Sessions whose turn a ``recover()`` drove on (the world served the session a model
    request while the call ran) that its report does not list in ``turns_resumed``, as
    ``(report, session, request index)``; and how many resumptions were judged. A session
    listed without a request is not held against it: a resumed turn may end at once (its
    calls settled, deferred to another instance, cancelled)."""
    judged, missing = 0, []
    requests = tuple(trace.of_kind(Kind.MODEL_REQUEST))
    for report in reports(trace):
        asked: dict[str, int] = {}
        for request in requests:
            if report.call_index < request.index < report.return_index:
                asked.setdefault(str(request.data.get("session_id", "")), request.index)
        for session, index in asked.items():
            judged += 1
            if session not in report.turns_resumed:
                missing.append((report, session, index))
    return judged, missing


def first_after(trace: Trace, index: int) -> Report | None:
    """The first ``recover()`` called after ``index``, if it returned (one cut off first, or
    a later one, is not the recovery of what happened at ``index``)."""
    calls = [e.index for e in trace.of_kind(Kind.DRIVER_CALL)
             if e.index > index and e.data.get("method") == "recover"]
    if not calls:
        return None
    return next((r for r in reports(trace) if r.call_index == calls[0]), None)
