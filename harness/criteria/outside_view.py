"""What can be judged of a black box: the criteria read from the world alone.

A real agent CLI run as a black box (:mod:`harness.clis`; ``TraceMeta.black_box`` says why)
has no store the harness may read and emits no lifecycle events: what the harness sees is
what the world saw (the model requests it served and what it served to each, the ledger of
tool runs, the approval prompts shown, the answers given, the crashes and restarts) and how
each driver call ended. A criterion whose statement is about the store (operation records,
waits, counters, the failure table, checkpoints, request records, projections) or about the
implementation's own events cannot be judged there: it is ``not_applicable``, with the
reason, never passed and never failed on an empty reading.

:data:`OUTSIDE` names every criterion judged from outside and what it reads. Some are the
catalogue's own checks (they read only world facts already); the others are the part of
the criterion that the world shows, written here as one predicate each:

* **X3** — :func:`check_x3_outside`: a call the owner refused, or one that a deny rule, a
  hard constraint or the owner's capabilities forbid, is reported to the model: the
  session's next model request carries a tool message for it; and a turn is not reported
  completed with no request after the denial;
* **L3.4** — :func:`check_l3_4_outside`: a call that a hard constraint, an explicit deny or
  the owner's capabilities forbid is never shown as an approval prompt and never runs;
* **L4.3** — :func:`check_l4_3_outside`: a call cut off by a crash between the start of its
  tool run and the result reaching the CLI is not run again after the restart (no ledger row
  of the same call), and the continuation keeps it: the session's first model request after
  the restart carries a tool message for the call (its wording is quoted, not judged: from
  outside, dropping the call is what shows; what the CLI wrote there is evidence);
* **M5** — :func:`check_m5_outside`: a tool call only an unfinished stream emitted is never
  run (:mod:`harness.criteria.unfinished_stream_calls`, ledger side), and no request shows
  the model, as its own earlier answer, something the world never served
  (:mod:`harness.criteria.answer_provenance`);
* **M3**, **M4**, **L1.8** — the catalogue's checks (driver spans and stream ends; requests,
  ledger and crashes; ledger attempts).

Guarantees: pure over the trace; :func:`verdict` returns ``not_applicable`` with an
evidence line naming the criterion and the trace's ``black_box`` reason for every criterion
not in :data:`OUTSIDE`, and otherwise the outside check's verdict (a pass only when
exercised).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

from harness.criteria import answer_provenance as P
from harness.criteria import facts as F
from harness.criteria import trace_readings as s
from harness.criteria import unfinished_stream_calls
from harness.criteria.base import Criterion, Evidence, Status, Verdict, judge
from harness.trace.record import Kind, Trace, TraceEvent

DENY_SOURCES = ("hard_constraint", "capability", "explicit_deny")


@dataclass(frozen=True, slots=True)
class Outside:
    reads: str
    """What the judgement reads (for the docs and the n/a table)."""
    check: Callable[[Trace], Verdict] | None = None
    """None: the catalogue's own check (it reads world facts only)."""


def _denied_statically(trace: Trace, call: s.EmittedCall) -> str:
    """The deny layer that forbids ``call`` under the session's rules when it was served."""
    if call.tool is None or call.args is None:
        return ""
    try:
        cfg = F.config(trace, call.session_id)
    except Exception:  # noqa: BLE001 - a session the trace does not configure
        return ""
    rules = F.rules_at(trace, call.session_id, call.index).rules
    decision = F.static_decision(cfg, rules, call.tool, call.args,
                                 F.tool_kind(trace, call.tool, call.session_id))
    source = F.value(decision.source)
    return source if source in DENY_SOURCES else ""


def _completed_serving(trace: Trace, call: s.EmittedCall) -> bool:
    end = trace.events[call.index]
    return end.data.get("how") == "end"


def _refusals(trace: Trace) -> list[tuple[str, str, int]]:
    """(session, tool_call_id, index of the answer) of every refusal that reached an open
    question: the first answer to a prompted wait, given while the model had not yet been
    handed a result for its call. A second answer to the same wait, or one given after a
    request already carried the call's result (the question was lost, at a restart for
    instance, and the model told then), refuses nothing: from outside, nothing is owed."""
    prompts = {e.data.get("wait_id"): e for e in trace.of_kind(Kind.APPROVAL_PROMPT)}
    requests = s.model_requests(trace)
    answered: set[Any] = set()
    found = []
    for event in trace.of_kind(Kind.DRIVER_CALL):
        args = event.data.get("args") or {}
        if event.data.get("method") != "answer_approval":
            continue
        wait_id = args.get("wait_id")
        first = wait_id not in answered
        answered.add(wait_id)
        prompt = prompts.get(wait_id)
        if prompt is None or not first or args.get("approve") is not False:
            continue
        session_id = str(prompt.data.get("session_id", ""))
        call_id = str(prompt.data.get("tool_call_id", ""))
        if any(prompt.index < r.index < event.index and r.data.get("session_id") == session_id
               and s.tool_message(r, call_id) is not None for r in requests):
            continue  # the call was settled for the model before this answer came
        found.append((session_id, call_id, event.index))
    return found


def _denials(trace: Trace) -> list[tuple[str, str, int, str]]:
    """(session, call, index from which the model must be told, why) of every denial."""
    denials = [(sid, cid, at, "the owner refused it") for sid, cid, at in _refusals(trace)]
    for call in s.emitted_calls(trace):
        if not _completed_serving(trace, call):
            continue
        source = _denied_statically(trace, call)
        if source:
            denials.append((call.session_id, call.tool_call_id, call.index,
                            f"the session's rules deny it ({source})"))
    return denials


def check_x3_outside(trace: Trace) -> Verdict:
    """A denial is reported to the model and the loop goes on (see the module docstring)."""
    violations: list[Evidence] = []
    exercised = 0
    returns = F.turn_returns(trace)
    for session_id, call_id, at, why in _denials(trace):
        request = s.first_request_after(trace, session_id, at)
        turn_end = next(((e, st) for e, sid, st in returns if sid == session_id and e.index > at),
                        None)
        if request is not None and (turn_end is None or request.index < turn_end[0].index):
            exercised += 1
            if s.tool_message(request, call_id) is None:
                violations.append(s.ev(
                    f"{call_id} of {session_id} was denied ({why}) and the next model request "
                    f"does not carry it: the model is not told", at, request.index))
        elif turn_end is not None:
            exercised += 1
            if turn_end[1] == "completed":
                violations.append(s.ev(
                    f"{call_id} of {session_id} was denied ({why}) and the turn was reported "
                    "completed with no model request after the denial", at, turn_end[0].index))
    return judge("X3", exercised, violations, "no denied call followed by a request or a turn end")


def check_l3_4_outside(trace: Trace) -> Verdict:
    """A call a deny layer forbids is never prompted and never runs."""
    violations: list[Evidence] = []
    exercised = 0
    prompts = list(trace.of_kind(Kind.APPROVAL_PROMPT))
    for call in s.emitted_calls(trace):
        if not _completed_serving(trace, call):
            continue
        source = _denied_statically(trace, call)
        if not source:
            continue
        exercised += 1
        key = call.key
        shown = [p for p in prompts if p.index > call.index
                 and (p.data.get("session_id"), p.data.get("tool_call_id")) == key]
        ran = [r for r in s.ledger_rows_for(trace, key) if r.index > call.index]
        if shown:
            violations.append(s.ev(f"{key[1]} of {key[0]} is denied by {source} and was offered "
                                   "for approval", call.index, shown[0].index))
        if ran:
            violations.append(s.ev(f"{key[1]} of {key[0]} is denied by {source} and ran",
                                   call.index, *(r.index for r in ran), rows=ran))
    return judge("L3.4", exercised, violations, "no call served that a deny layer forbids")


def check_l4_3_outside(trace: Trace) -> Verdict:
    """A call cut off mid-run is not run again and is kept in the continuation."""
    violations: list[Evidence] = []
    exercised = 0
    for crash in s.crashes_at(trace, *F.CRASH_AFTER_START):
        key = s.op_from_context(trace, crash.failpoint_event)
        if key is None or crash.restart_index is None:
            continue
        again = [r for r in s.ledger_rows_for(trace, key) if r.index > crash.index]
        request = s.first_request_after(trace, key[0], crash.restart_index)
        if request is None and not again:
            continue
        exercised += 1
        if again:
            violations.append(s.ev(f"{key[1]} of {key[0]}, cut off by the crash at "
                                   f"{crash.failpoint}, ran again after the restart",
                                   crash.index, *(r.index for r in again), rows=again))
        if request is not None and s.tool_message(request, key[1]) is None:
            violations.append(s.ev(
                f"after the restart the conversation no longer carries {key[1]} of {key[0]}: "
                f"the model is never told that the call, cut off by the crash at "
                f"{crash.failpoint}, may have run", crash.index, request.index))
    return judge("L4.3", exercised, violations,
                 "no crash between the start of a tool run and its result, then a restart")


def check_m5_outside(trace: Trace) -> Verdict:
    """Unfinished streams' calls never run; no unsourced assistant message."""
    violations: list[Evidence] = []
    calls = unfinished_stream_calls.unfinished_calls_never_taken(trace)
    exercised = calls.exercised
    for taken in calls.taken:
        violations.append(s.ev(taken.note, taken.emission.stream.index, taken.index,
                               rows=() if taken.row is None else (taken.row,)))
    found = P.provenance(trace)
    for item in found.unsourced:
        exercised += 1
        violations.append(s.ev(P.describe(item), item.request.index))
    return judge("M5", exercised, violations,
                 "no unfinished stream that emitted a call, no request carrying an answer")


OUTSIDE: dict[str, Outside] = {
    "X3": Outside("denials (refused answers, deny rules) and the next model request",
                  check_x3_outside),
    "L1.8": Outside("the ledger's attempts of each call"),
    "L3.4": Outside("deny layers of the session's rules, prompts shown, the ledger",
                    check_l3_4_outside),
    "L4.3": Outside("crashes mid-run, the ledger after the restart, the continuation's request",
                    check_l4_3_outside),
    "M3": Outside("stream ends and how the turn's driver call ended"),
    "M4": Outside("model requests (no identical one twice without a crash), the ledger"),
    "M5": Outside("unfinished streams' calls in the ledger; the provenance of every assistant "
                  "message the model was shown", check_m5_outside),
}


def verdict(criterion_id: str, trace: Trace, own: Callable[[Trace], Verdict]) -> Verdict:
    """The criterion judged on a black box's trace (see the module docstring)."""
    found = OUTSIDE.get(criterion_id)
    if found is None:
        return Verdict(criterion_id, Status.NOT_APPLICABLE, (Evidence(
            f"{criterion_id} is judged on the implementation's store or its lifecycle events, "
            f"which cannot be read here: {trace.meta.black_box}"),))
    return (found.check or own)(trace)


def judged_from_outside(raw: Criterion, judged: Criterion) -> Criterion:
    """``judged`` (the catalogue's criterion, guarded) that judges a black box's trace by
    :func:`verdict` on ``raw``'s own check instead: a black box has no store, so the failpoint
    preconditions' store side (the guard) has nothing to read."""
    inner = judged.check

    def check(trace: Trace) -> Verdict:
        if trace.meta.black_box:
            return verdict(raw.id, trace, raw.check)
        return inner(trace)

    return dataclasses.replace(judged, check=check)


def judged_outside() -> dict[str, str]:
    """Criterion id -> what it reads, for the docs' table."""
    return {cid: found.reads for cid, found in OUTSIDE.items()}


