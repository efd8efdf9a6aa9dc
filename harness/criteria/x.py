"""Stage X — cross-cutting criteria: three states, identity, honest outcomes, one lifecycle.

Every check is a pure function of the trace. Ground truth comes first: the ledger
(``TOOL_EXECUTED`` rows), the calls the model was served, the model requests the world
received, crashes at failpoints; the implementation's durable store (observations) is
what gets judged against it.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from harness.contract import (
    Delivery,
    EventType,
    FailureKind,
    Outcome,
    Permission,
    ToolKind,
    args_digest,
    execution_id_for,
)
from harness.criteria import approval_answers
from harness.criteria import facts as F
from harness.criteria import projection_oracle as O
from harness.criteria import recovery_reports
from harness.criteria import result_messages as R
from harness.criteria.base import Criterion, Evidence, Verdict, judge
from harness.trace.identity_memo import by_identity
from harness.trace.record import Kind, ObservationPoint, Trace, TraceEvent
from harness.trace.sequence_delta import common_prefix

STAGE = "x"

_PERMISSIONS = frozenset(p.value for p in Permission)
_OUTCOMES = frozenset(o.value for o in Outcome)
_DELIVERIES = frozenset(d.value for d in Delivery)

ENTRY_POINT_KINDS = (ToolKind.TERMINAL.value, ToolKind.WEB.value, ToolKind.USER_APP.value)


def _ev(note: str, indexes=(), rows=()) -> Evidence:
    return Evidence(note, tuple(dict.fromkeys(i for i in indexes if i is not None)), tuple(rows))


# --------------------------------------------------------------------------- X1


def check_x1(trace: Trace) -> Verdict:
    """Three states, each set by its own rule and tied to what really happened.

    * every stored permission/outcome/delivery is a value of its own set;
    * outcome: a pre-call denial (deny, no ledger row) is ``not_started``, never ``failed``;
      only a pre-call denial or a start the world refused (``TOOL_UNAVAILABLE``, no row) is
      saved as ``not_started``; a saved succeeded/failed needs a ledger row and equals the
      outcome of the operation's last run (the projection oracle's world result);
    * delivery ``recorded``/``projected`` is tied to the real save and the real publication:
      every UI publication of a settled status finds, in the store read while the UI
      received it, the result already saved with that outcome (projection after the save,
      never before); a store that says ``projected`` has a UI publication of that outcome
      for the operation at or before that read.

    Exercised (the hard case): a saved result read back from the store and judged against
    the world — its outcome against the ledger, and for ``projected`` against the UI
    publication — or a publication of a settled status judged against the save.
    """
    violations: list[Evidence] = []
    exercised = 0
    pubs = O.publications(trace)
    ops = F.operations(trace)
    for op in ops.values():
        if not op.views:
            continue
        judged = False
        unpublished_reported = False
        rows_up_to = _up_to(op.rows)
        unavailable_up_to = _up_to(op.unavailable)
        states: dict[int, tuple[Any, Any, Any]] = {}  # by view: readings share view objects
        for view, run_points in _x1_segments(trace, op, pubs):
            # One segment: the same view, and no event of the operation (ledger row, refused
            # start, publication) nor crash between its readings, so each reading's answer
            # is the same but for its label's "probe:" and its own place in the notes. Judged
            # once each way; only a segment where either way finds fault is read reading by
            # reading (the notes name every reading, as before).
            state = states.get(id(view))
            if state is None:
                state = states[id(view)] = (
                    F.value(view.permission), F.value(view.outcome), F.value(view.delivery))
            first = run_points[0]
            if len(run_points) > 1:
                probe_way = _x1_reading(trace, op, pubs, first, view, state, rows_up_to,
                                        unavailable_up_to, unpublished_reported, probe=True)
                other_way = _x1_reading(trace, op, pubs, first, view, state, rows_up_to,
                                        unavailable_up_to, unpublished_reported, probe=False)
                if not probe_way[0] and not other_way[0] and probe_way[1:] == other_way[1:]:
                    judged = judged or probe_way[1]
                    unpublished_reported = probe_way[2]
                    continue
            for point in run_points:
                found, judged_here, unpublished_reported = _x1_reading(
                    trace, op, pubs, point, view, state, rows_up_to, unavailable_up_to,
                    unpublished_reported, probe=None)
                violations += found
                judged = judged or judged_here
        if judged:
            exercised += 1
    for pub in pubs:
        if pub.status not in O.SETTLED_STATUSES:
            continue
        op = O.op_of(ops, pub)
        probe = O.probe_at(trace, pub.event, "probe:ui_publish")
        if op is None or probe is None:
            continue
        exercised += 1
        view = O.view_in(probe, op)
        if view is None or F.value(view.delivery) == "pending":
            violations.append(_ev(
                f"{F.describe(op)}: the UI was shown {pub.status!r} before its result was saved "
                f"(the store read while the UI received it has "
                f"{'no record' if view is None else 'delivery pending'}); the projection comes after "
                f"the save", (pub.event.index, probe.index)))
        elif F.value(view.outcome) != pub.outcome:
            violations.append(_ev(
                f"{F.describe(op)}: the UI was shown outcome {pub.outcome!r} while the saved result "
                f"says {F.value(view.outcome)!r}", (pub.event.index, probe.index)))
    return judge("X1", exercised, violations, "no saved result was read back from the store")


def _x1_segments(trace: Trace, op: F.Op, pubs: tuple[O.Publication, ...]
                 ) -> Iterator[tuple[Any, Sequence[ObservationPoint]]]:
    """The operation's readings in order, cut into segments of one view with none of the
    operation's ledger rows, refused starts and publications, nor any crash, between a
    segment's readings (what X1's answer at a reading depends on, besides the view)."""
    views = op.views
    if not isinstance(views, F.ViewPairs):
        for point, view in views:
            yield view, (point,)
        return
    cuts = sorted({*(e.index for e in op.rows), *(e.index for e in op.unavailable),
                   *(p.event.index for p in O.publications_of(pubs, op)),
                   *O.crash_indexes(trace)})
    for run in views.runs:
        run_points = views.points_of(run)
        first, last = run_points[0].index, run_points[-1].index
        start = 0
        for cut in cuts[bisect.bisect_left(cuts, first):bisect.bisect_left(cuts, last)]:
            # readings at or before the cut see it, those after do not
            stop = bisect.bisect_right(run_points, cut, lo=start, key=_point_index)
            if stop > start:
                yield run.view, run_points[start:stop]
                start = stop
        if start < len(run_points):
            yield run.view, run_points[start:]


def _point_index(point: ObservationPoint) -> int:
    return point.index


def _x1_reading(trace: Trace, op: F.Op, pubs: tuple[O.Publication, ...], point: ObservationPoint,
                view: Any, state: tuple[Any, Any, Any],
                rows_up_to: Callable[[int], Sequence[TraceEvent]],
                unavailable_up_to: Callable[[int], Sequence[TraceEvent]],
                unpublished_reported: bool, probe: bool | None
                ) -> tuple[list[Evidence], bool, bool]:
    """X1 at one reading of one operation: the violations, whether a saved result was
    judged, and whether the missing publication is reported now. ``probe`` overrides
    whether the reading is a probe (None: its label says)."""
    violations: list[Evidence] = []
    permission, outcome, delivery = state
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
        return violations, False, unpublished_reported
    ran_before = rows_up_to(point.index)
    refused_before = unavailable_up_to(point.index)
    if permission == "deny" and not ran_before and outcome != "not_started":
        violations.append(_ev(
            f"{F.describe(op)} at '{point.label}': a pre-call denial (deny, no ledger row) "
            f"is recorded with outcome {outcome!r}; a denial is deny/not_started",
            (point.index,)))
        return violations, False, unpublished_reported
    if outcome in ("succeeded", "failed") and not ran_before and op.served:
        # a tool that could not start (TOOL_UNAVAILABLE, no ledger row) did not run
        # either: failed would claim a run with possible partial effects
        violations.append(_ev(
            f"{F.describe(op)} at '{point.label}': outcome {outcome!r} but the ledger shows "
            f"no execution before this observation; outcome must answer 'did it run'",
            (point.index,)))
        return violations, False, unpublished_reported
    if delivery == "pending":
        return violations, False, unpublished_reported
    if outcome == "not_started":
        if ran_before:
            violations.append(_ev(
                f"{F.describe(op)} at '{point.label}': saved as not_started though the ledger "
                f"shows its execution", (point.index, ran_before[-1].index),
                (int(ran_before[-1].data.get("ledger_seq", -1)),)))
        elif permission != "deny" and not refused_before:
            violations.append(_ev(
                f"{F.describe(op)} at '{point.label}': saved as not_started with permission "
                f"{permission!r}; only a pre-call denial or a start the world refused is "
                f"not_started", (point.index,)))
    elif outcome in ("succeeded", "failed"):
        world = O.world_result(trace, op, point.index + 1)
        # read mid-pipeline, the store may still hold the result of the run before
        # the one in flight (an escalated re-run, before its save); asked only when
        # the world's result differs (X1 asks at every reading of every operation)
        is_probe = point.label.startswith("probe:") if probe is None else probe
        in_flight_at = ran_before[-1].index if is_probe else None
        in_flight = (O.world_result(trace, op, in_flight_at).outcome
                     if in_flight_at is not None and outcome != world.outcome else None)
        if world.outcome in ("succeeded", "failed") and outcome not in (world.outcome, in_flight):
            violations.append(_ev(
                f"{F.describe(op)} at '{point.label}': saved as {outcome!r}, the world says "
                f"{world.outcome!r} ({world.grounds})", (point.index, *world.evidence),
                tuple(int(r.data.get("ledger_seq", -1)) for r in ran_before[-1:])))
    if delivery == "projected" and not unpublished_reported:
        shown = O.publications_of(pubs, op, point.index + 1)
        matching = [p for p in shown if p.outcome == outcome]
        unpublished_reported = not matching  # once per operation: the first read says it
        if not shown:
            violations.append(_ev(
                f"{F.describe(op)} at '{point.label}': delivery is projected but the UI never "
                f"received a projection of it", (point.index,)))
        elif not matching:
            violations.append(_ev(
                f"{F.describe(op)} at '{point.label}': delivery is projected with outcome "
                f"{outcome!r} but the UI only received {sorted({p.outcome for p in shown})}",
                (point.index, shown[-1].event.index)))
    return violations, True, unpublished_reported


def _up_to(events: tuple[TraceEvent, ...]) -> Callable[[int], Sequence[TraceEvent]]:
    """``index -> [e for e in events if e.index <= index]``, by bisection when the events
    are in index order (as the trace records them)."""
    indexes = [event.index for event in events]
    if any(a > b for a, b in zip(indexes, indexes[1:])):
        return lambda index: [e for e in events if e.index <= index]
    return lambda index: events[:bisect.bisect_right(indexes, index)]


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
    } | {answer.wait_id for answer in approval_answers.answers(trace)
         if answer.by_new_message and answer.call_index > served_at}
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
    response, or its answer lost a race with another instance (:func:`_superseded`)."""
    if not trace.completed:
        return True
    if _superseded(trace, op):
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


def _superseded(trace: Trace, op: F.Op) -> bool:
    """Two instances raced on one session and this call's answer lost: another instance sent
    a request of the same session whose conversation does not hold the call and is not an
    older stage of the one this call answered (the session moved on without it) — after the
    serving request, or before it when that request was a stale snapshot sent late (held
    after its start while the other instance ran the turn: found by generation, seed 102).
    An answer to a conversation that is gone is dropped, not applied to the new one; nothing
    of it is recorded. One instance alone never excuses itself this way: a second request of
    its own for the same conversation is a retry (M4)."""
    served = next((s for s in op.served if s.how == "end"), None)
    if served is None:
        return False
    serving = trace.events[served.request_index]
    mine = serving.instance
    answered = list(serving.data.get("messages", ()))
    for request in F.model_requests(trace, op.session_id):
        if request.index == served.request_index or request.instance == mine:
            continue
        messages = list(request.data.get("messages", ()))
        if request.index < served.request_index and answered[:len(messages)] == messages:
            continue  # an older stage of the answered conversation: it moved nothing on
        carried = any(
            call.get("tool_call_id") == op.tool_call_id
            for message in messages if message.get("role") == "assistant"
            for call in message.get("tool_calls") or ())
        if not carried:
            return True
    return False


def _duplicates(observation: Any) -> tuple[list[tuple[tuple[str, str], int]],
                                          list[tuple[str, set[tuple[str, str]]]]]:
    """The calls with several records in one observation (and how many), and the execution
    ids shared by different calls, in the order of their first record."""
    by_call: dict[tuple[str, str], int] = {}
    by_exec: dict[str, set[tuple[str, str]]] = {}
    for view in observation.operations:
        key = (view.session_id, view.identity.tool_call_id)
        by_call[key] = by_call.get(key, 0) + 1
        by_exec.setdefault(view.identity.execution_id, set()).add(key)
    return ([(key, count) for key, count in by_call.items() if count > 1],
            [(execution_id, keys) for execution_id, keys in by_exec.items() if len(keys) > 1])


class _RecordCounts:
    """How many records each call and each execution id has in the latest reading, kept up
    to date from the change between readings (the rows past the head both share)."""

    def __init__(self) -> None:
        self._rows: Sequence[Any] = ()
        self._by_call: dict[tuple[str, str], int] = {}
        self._by_exec: dict[str, dict[tuple[str, str], int]] = {}
        self._duplicated: set[tuple[str, str]] = set()
        self._shared: set[str] = set()

    def update(self, rows: Sequence[Any]) -> bool:
        """Take ``rows`` as the latest reading's operations; does it hold a call with
        several records, or an execution id shared by different calls?"""
        if rows is not self._rows:
            kept = common_prefix(self._rows, rows)
            for view in self._rows[kept:]:
                self._count(view, -1)
            for view in rows[kept:]:
                self._count(view, 1)
            self._rows = rows
        return bool(self._duplicated or self._shared)

    def _count(self, view: Any, step: int) -> None:
        key = (view.session_id, view.identity.tool_call_id)
        count = self._by_call[key] = self._by_call.get(key, 0) + step
        if count > 1:
            self._duplicated.add(key)
        else:
            self._duplicated.discard(key)
            if not count:
                del self._by_call[key]
        execution_id = view.identity.execution_id
        keys = self._by_exec.setdefault(execution_id, {})
        keys[key] = keys.get(key, 0) + step
        if not keys[key]:
            del keys[key]
        if len(keys) > 1:
            self._shared.add(execution_id)
        else:
            self._shared.discard(execution_id)
            if not keys:
                del self._by_exec[execution_id]


def _first_of_each_run(op: F.Op, clean: set[int]) -> Iterator[tuple[ObservationPoint, Any]]:
    """The operation's (reading, view) pairs, but of a run of readings sharing one view
    object only the first once that view is in ``clean`` (it passed X2's record checks,
    which read the view and the operation alone: every other reading of it would pass
    again); every reading of a view that is not clean is given, as before."""
    views = op.views
    if not isinstance(views, F.ViewPairs):
        yield from views
        return
    for run in views.runs:
        run_points = views.points_of(run)
        yield run_points[0], run.view
        if id(run.view) in clean:
            continue
        for point in run_points[1:]:
            yield point, run.view


def check_x2(trace: Trace) -> Verdict:
    """Each operation is bound to execution_id_for(session, call id), the call id, the
    digest of the args the model emitted and a permission version of its session; a call
    served once or several times has exactly one record (and one identity), and every
    ledger row of it runs under that execution id with the args the model emitted. In
    every model request, each tool message answers a call an assistant message before it
    emitted, and no call is answered twice after the message that emitted it.

    Exercised (the hard case): a call delivered more than once — served twice, or read back
    after a crash/restart that came after it was first seen — whose records were judged.
    """
    violations: list[Evidence] = []
    exercised = 0
    pts = F.points(trace)
    # successive points share observation objects: each one's duplicates are found once
    duplicates_of: dict[int, tuple[list[tuple[tuple[str, str], int]],
                                   list[tuple[str, set[tuple[str, str]]]]]] = {}
    counts = _RecordCounts()
    for point in pts:
        found = duplicates_of.get(id(point.observation))
        if found is None:
            # counted as the readings change (linear in the changes); read whole only when
            # a reading holds a duplicate, to list them as before
            found = duplicates_of[id(point.observation)] = (
                _duplicates(point.observation) if counts.update(point.observation.operations)
                else ([], []))
        for key, count in found[0]:
            violations.append(_ev(
                f"{key[0]}/{key[1]}: {count} operation records for one call at '{point.label}'",
                (point.index,)))
        for execution_id, keys in found[1]:
            violations.append(_ev(
                f"execution id {execution_id} is shared by different calls {sorted(keys)} "
                f"at '{point.label}'", (point.index,)))
    final = pts[-1] if pts else None
    restarts = [e.index for e in trace.of_kind(Kind.CRASH, Kind.RESTART)]
    final_counts: dict[tuple[str, str], int] = {}
    if final is not None:
        for v in final.observation.operations:
            key = (v.session_id, v.identity.tool_call_id)
            final_counts[key] = final_counts.get(key, 0) + 1
    for op in F.operations(trace).values():
        judged = False
        last_read = op.views[-1][0].index if op.views else None  # readings in index order
        redelivered = len(op.served) > 1 or any(
            op.first_seen < r and last_read is not None and last_read > r for r in restarts)
        expected_exec = execution_id_for(op.session_id, op.tool_call_id)
        emitted_digest = args_digest(op.tool, op.args) if op.args_source in ("served", "ledger") else None
        known_versions = F.versions(trace, op.session_id)
        identities = set()
        own_digests: dict[int, str] = {}  # by view: successive readings share view objects
        clean: set[int] = set()
        """Views (by id, held by ``op.views``) that passed every check below: the checks
        read the view and the operation alone, so the same object passes again."""
        for point, view in _first_of_each_run(op, clean):
            judged = True
            if id(view) in clean:
                continue
            identity = view.identity
            identities.add((identity.execution_id, identity.args_digest))
            before = len(violations)
            where = f"{F.describe(op)} at '{point.label}'"
            if identity.execution_id != expected_exec:
                violations.append(_ev(
                    f"{where}: execution id {identity.execution_id!r}, expected "
                    f"execution_id_for(session, call id) = {expected_exec!r}", (point.index,)))
            own_digest = own_digests.get(id(view))
            if own_digest is None:
                own_digest = own_digests[id(view)] = args_digest(view.tool, view.args)
            if identity.args_digest != own_digest:
                violations.append(_ev(
                    f"{where}: args digest {identity.args_digest!r} is not {own_digest!r}, the "
                    f"digest of the record's own tool and args", (point.index,)))
            elif emitted_digest is not None and identity.args_digest != emitted_digest:
                violations.append(_ev(
                    f"{where}: args digest {identity.args_digest!r} is not {emitted_digest!r}, "
                    f"the digest of the args the model emitted (source: {op.args_source})",
                    (point.index,) + tuple(s.end_index for s in op.served[:1])))
            if identity.permission_version not in known_versions:
                violations.append(_ev(
                    f"{where}: permission version {identity.permission_version} was never in force "
                    f"for the session (versions {sorted(known_versions)})", (point.index,)))
            if len(violations) == before:
                clean.add(id(view))
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
                executed = args_digest(op.tool, row.data.get("args") or {})
                violations.append(_ev(
                    f"{F.describe(op)}: executed (ledger row {seq}) with args (digest "
                    f"{executed}) different from the call the model emitted (digest "
                    f"{args_digest(op.tool, op.args)})", (op.served[0].end_index, row.index), (seq,)))
        complete = [s for s in op.served if s.how == "end"]
        if complete and final is not None and final.index > complete[0].end_index:
            judged = True
            count = final_counts.get(op.key, 0)
            if count == 0 and not _missing_excused(trace, op, complete[0].end_index):
                violations.append(_ev(
                    f"{F.describe(op)}: the model emitted this call "
                    f"({len(complete)} time(s)) but the final store has no record of it",
                    (complete[0].end_index, final.index)))
        if judged and redelivered:
            exercised += 1
    violations += _results_in_conversation(trace)
    return judge("X2", exercised, violations, "no call was delivered twice or read back after a restart")


def _results_in_conversation(trace: Trace) -> list[Evidence]:
    """A call is bound to one result in the conversation the model is sent, as in the
    store: each tool message answers a call emitted before it, once
    (:mod:`harness.criteria.result_messages`)."""
    return [_ev(item.describe(), (item.request.index,)) for item in R.misplaced_results(trace)]


# --------------------------------------------------------------------------- X3


def check_x3(trace: Trace) -> Verdict:
    """After a pre-call denial the loop goes on: the session's next model request carries
    the call's tool message with outcome not_started and the denial's reason (the one the
    UI was shown, else the one the host saved: :func:`_untold_why`), and the turn is not
    reported ``completed`` without such a request.

    Exercised (the hard case): a call denied before it ran (not by a cancellation) followed
    by the session's next model request or by the end of its turn.
    """
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
            else:
                untold = _untold_why(trace, op, request, message)
                if untold is not None:
                    violations.append(untold)
    violations += _dangling_calls(trace)
    return judge("X3", exercised, violations, "no denied call with a continuation to judge")


@by_identity(4)  # asked once per denied call of the trace
def _publications(trace: Trace) -> tuple[O.Publication, ...]:
    return O.publications(trace)


def _plain(text: str) -> str:
    return " ".join(text.split())


def _untold_why(trace: Trace, op: F.Op, request: TraceEvent, message: dict) -> Evidence | None:
    """The denial reaches the model with its reason (the contract: the tool message of a
    call that did not run "says why in content"), so that the model can change course
    instead of trying the same call again. The wording is the implementation's; what is
    judged is that the model is told the same why as the owner: the reason of the last
    settled publication the world's UI received for the operation before the request, or,
    when none was published yet, the reason of the host's saved record read last before it
    (each must be in the tool message's content, whitespace aside). With no reason on either
    side the content must still say something."""
    content = _plain(str(message.get("content") or ""))
    shown = [p for p in O.publications_of(_publications(trace), op, request.index)
             if p.status in O.SETTLED_STATUSES and p.reason.strip()]
    if shown:
        why, where, at = _plain(shown[-1].reason), "the UI was shown", shown[-1].event.index
    else:
        saved = [(p, v) for p, v in op.views
                 if p.index < request.index and F.value(v.delivery) != "pending" and v.reason.strip()]
        if not saved:
            if content:
                return None
            return _ev(f"{F.describe(op)} was denied and its tool result reached the model empty: "
                       f"the model is not told why", (op.served[0].end_index, request.index))
        why, where, at = _plain(saved[-1][1].reason), "the host recorded", saved[-1][0].index
    if why in content:
        return None
    return _ev(
        f"{F.describe(op)} was denied and the model was not told why: {where} {why[:80]!r}, the "
        f"tool message says {content[:80]!r}", (at, request.index))


def _dangling_calls(trace: Trace) -> list[Evidence]:
    """A call's result goes back to the model before the conversation goes on: no model
    request carries an assistant tool call whose tool result is missing while a later
    message (a user message, another assistant answer) follows it. Judged on the world's
    model requests alone (each request's own messages); a call the conversation ends with
    is the loop asking again (a call still pending at a request's end is not carried on)."""
    found: list[Evidence] = []
    # Per session, the latest request's messages and what its walk found at the calls of
    # those before its last message that is not a tool result (their walks ended inside
    # it): a request carrying the very message objects of its session's previous one finds
    # the same there, and walks afresh from that message on.
    latest: dict[Any, tuple[list[Any], int, list[tuple[int, list[Any], Any]]]] = {}
    for request in F.model_requests(trace):
        messages = request.data.get("messages") or ()
        session = repr(request.data.get("session_id"))
        start, problems = 0, []
        before = latest.get(session)
        if type(messages) is list and before is not None and len(before[0]) <= len(messages) \
                and common_prefix(before[0], messages) == len(before[0]):
            start = before[1]
            problems = [problem for problem in before[2] if problem[0] < start]
        for position in range(start, len(messages)):
            message = messages[position]
            if message.get("role") != "assistant" or not message.get("tool_calls"):
                continue
            calls = [c.get("tool_call_id") for c in message.get("tool_calls") or ()]
            answered: set[str] = set()
            for later in messages[position + 1:]:
                if later.get("role") == "tool":
                    answered.add(later.get("tool_call_id"))
                    continue
                missing = [c for c in calls if c not in answered]
                if missing:
                    problems.append((position, missing, later.get("role")))
                break
        for _, missing, role in problems:
            found.append(_ev(
                f"request {request.data.get('request_id')} of {request.data.get('session_id')} "
                f"carries call(s) {', '.join(map(str, missing))} without their result, "
                f"followed by a {role} message: the result never went back to "
                "the model before the conversation went on", (request.index,)))
        if type(messages) is list:
            last_other = len(messages) - 1
            while last_other >= 0 and messages[last_other].get("role") == "tool":
                last_other -= 1
            latest[session] = (messages, max(last_other, 0), problems)
    return found


# --------------------------------------------------------------------------- X4


def check_x4(trace: Trace) -> Verdict:
    """reconciliation_required (or outcome unknown) only for an operation that may have
    executed and whose result is not known: a crash between its start record and its saved
    result, or a tool answer of kind unknown; never for a pre-call denial nor after its
    result was seen saved.

    Exercised (the hard case): an operation flagged reconciliation_required/unknown, or an
    operation a crash's failpoint context names and that the store was read back for after
    the crash (where a dishonest runtime would flag it).
    """
    violations: list[Evidence] = []
    exercised = 0
    ops = F.operations(trace)
    crashes = F.crash_points(trace)
    for op in ops.values():
        flagged = F.pairs_where(
            op, lambda v: v.reconciliation_required or F.value(v.outcome) == Outcome.UNKNOWN.value)
        if not flagged:
            # an operation a crash interrupted, read back after it, counts as judged
            last_read = F.last_read_index(op)  # readings in index order
            if any(
                F.context_names_op(context, op) and last_read > crash.index
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
    exercised_reports, dishonest = _listed_by_recovery(trace, ops)
    return judge("X4", exercised + exercised_reports, violations + dishonest,
                 "no operation was marked reconciliation_required")


def _listed_by_recovery(trace: Trace, ops) -> tuple[int, list[Evidence]]:
    """Every operation a ``RecoveryReport`` (or one of its ``recovered`` events) lists as
    needing reconciliation may have run without a known result: a crash before that recovery
    cut it off between its start record and its result, or the tool answered unknown
    (:mod:`harness.criteria.recovery_reports`)."""
    by_execution = {execution_id_for(*key): op for key, op in ops.items()}
    exercised, found = 0, []
    for report in recovery_reports.reports(trace):
        for execution_id in sorted(report.listed()):
            exercised += 1
            op = by_execution.get(execution_id)
            if op is None:
                found.append(_ev(f"the recovery at event {report.call_index} lists {execution_id} "
                                 "as needing reconciliation, an operation nobody saw",
                                 (report.return_index,)))
                continue
            crash = F.crashed_mid_execution(trace, op, ops)
            tool_said_unknown = any(r.data.get("error_kind") == "unknown"
                                    and r.index < report.call_index for r in op.rows)
            if not tool_said_unknown and (crash is None or crash.index > report.call_index):
                found.append(_ev(
                    f"the recovery at event {report.call_index} lists {F.describe(op)} as needing "
                    "reconciliation, yet no crash cut it off between its start record and its "
                    "result before it and no tool answered unknown", (report.return_index,)))
    return exercised, found


# --------------------------------------------------------------------------- X5


def _claims_not_executed(row) -> bool:
    output = str(row.data.get("output") or "")
    return "not executed" in output.lower() or row.data.get("behaviour") == "claims_not_executed"


def check_x5(trace: Trace) -> Verdict:
    """A ledger row whose output claims 'not executed' is still recorded by the host as
    executed: execution_started true (already while the tool runs) and an outcome other
    than not_started, also in the tool message the model receives.

    Exercised (the hard case): a ledger row whose output claims the tool did not run, with
    the store read while or after it ran, or the model's next request carrying its result.
    """
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
    exec_ids = {v.identity.execution_id for v in F.distinct_views(op)} | {execution_id_for(*op.key)}
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


@dataclass(frozen=True, slots=True)
class RetryDecision:
    """One moment the retry policy had to decide: an attempt of an operation did not succeed."""

    attempt: TraceEvent
    label: str
    """The tool's kind label: terminal, web, user_app or ordinary."""
    failure: str
    """"unavailable" (the world refused to start it) or the row's error kind."""
    idempotent: bool
    retries_done: int
    retried: bool
    next_attempt: TraceEvent | None

    @property
    def situation(self) -> tuple[str, bool, int]:
        return (self.failure, self.idempotent, self.retries_done)


def policy_allows_retry(failure: str, idempotent: bool, retries_done: int, retries_max: int) -> bool:
    """The one retry policy (docs/lifecycle.md, failure policy): only a start the world
    refused, or a transient error of an idempotent tool, and at most ``retries_max`` times."""
    if retries_done >= retries_max:
        return False
    return failure == "unavailable" or (failure == FailureKind.TRANSIENT.value and idempotent)


def retry_decisions(trace: Trace, op: F.Op, label: str) -> tuple[RetryDecision, ...]:
    """Every failed attempt of ``op`` and whether the runtime tried again right after it.

    The chain is the operation's ledger rows (escalated re-runs excluded) and the world's
    refusals, in order; a crash or restart between two attempts ends a chain (re-running
    after a crash is L4.1's business, not a retry). An attempt followed by nothing counts as
    "not retried" only once the operation visibly moved on (a later model request of the
    session, or a saved result in the store); otherwise it is left undecided."""
    chain = sorted((*F.attempt_rows(op), *op.unavailable), key=lambda e: e.index)
    idempotent = F.is_idempotent(trace, op.tool, op.session_id)
    boundaries = [e.index for e in trace.of_kind(Kind.CRASH, Kind.RESTART)]
    found = []
    retries_done = 0
    for position, attempt in enumerate(chain):
        if position and any(chain[position - 1].index < b < attempt.index for b in boundaries):
            retries_done = 0
        if attempt.kind == Kind.TOOL_UNAVAILABLE:
            failure = "unavailable"
        elif attempt.data.get("status") == "ok":
            failure = "ok"
        elif attempt.data.get("escalation_requested"):
            continue  # an escalation request is answered by the owner, not retried
        else:
            failure = str(attempt.data.get("error_kind") or FailureKind.FAILED.value)
        following = chain[position + 1] if position + 1 < len(chain) else None
        if following is not None and any(attempt.index < b < following.index for b in boundaries):
            following = None
            if failure == "ok":
                continue
            retries_done = 0
            continue
        if following is None:
            if failure == "ok":
                continue
            moved_on = F.next_model_request(trace, op.session_id, attempt.index) is not None or any(
                p.index > attempt.index and F.value(v.delivery) != "pending" for p, v in op.views)
            cut = any(b > attempt.index for b in boundaries) and not moved_on
            if not moved_on or cut:
                continue
        found.append(RetryDecision(attempt, label, failure, idempotent, retries_done,
                                   following is not None, following))
        if following is not None:
            retries_done += 1
    return tuple(found)


def check_x6(trace: Trace) -> Verdict:
    """Terminal, web, user-app and ordinary tools share one lifecycle: the same gates and the
    same retry policy.

    Gates: no kind runs an operation the precedence in force does not authorize, none runs
    without a permission decision on record, and none is stored as allowed when a deny
    layer forbids it.

    Retries, judged from the ledger per kind: after an attempt that did not succeed the
    runtime tries again only where the one policy allows it (a start the world refused, or a
    transient error of an idempotent tool, at most ``auto_retries_max`` times) — a kind with
    its own retry loop (retrying a definite failure, a non-idempotent tool, an unknown
    result, a success, or past the bound) fails; and the same situation (failure, idempotent,
    retries so far) is decided the same way whatever the kind, so two kinds retrying
    differently are two policies.

    Exercised (the hard case): a terminal, web or user-app operation met a gate that denies
    it, or one of its attempts failed so that the retry policy had to decide.
    """
    ops = F.operations(trace)
    kinds = {key: F.tool_kind(trace, op.tool, op.session_id) for key, op in ops.items()}
    if not any(kind in ENTRY_POINT_KINDS for kind in kinds.values()):
        return judge("X6", 0, [], "no terminal, web or user-app operation in the trace")
    all_reviews = F.reviews(trace, ops)
    violations: list[Evidence] = []
    exercised = 0
    decisions: list[RetryDecision] = []
    for key, op in ops.items():
        label = _kind_label(kinds[key])
        entry_point = label != "ordinary"
        hard_case = False
        attempts = F.attempt_rows(op)
        if attempts:
            first = attempts[0]
            seq = int(first.data.get("ledger_seq", -1))
            auth = F.authorization(trace, op, first.index, all_reviews)
            if not auth.ok:
                hard_case = True
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
                hard_case = True
                if F.value(view.permission) != Permission.DENY.value:
                    violations.append(_ev(
                        f"[{label}] {F.describe(op)} is stored as {F.value(view.permission)!r} "
                        f"(by {F.value(view.decided_by)}) though {decision.source.value} of "
                        f"permission version {view.identity.permission_version} denies it",
                        F.op_indexes(op)))
        own = retry_decisions(trace, op, label)
        decisions.extend(own)
        retries_max = F.thresholds(trace, op.session_id).auto_retries_max
        for decision in own:
            hard_case = True
            if decision.retried and not policy_allows_retry(decision.failure, decision.idempotent,
                                                            decision.retries_done, retries_max):
                nxt = decision.next_attempt
                violations.append(_ev(
                    f"[{label}] {F.describe(op)} was tried again after attempt "
                    f"{decision.retries_done + 1} ended {decision.failure!r} "
                    f"({'idempotent' if decision.idempotent else 'not idempotent'}, "
                    f"auto_retries_max {retries_max}): a retry loop of its own; the one policy "
                    f"retries only a refused start or a transient error of an idempotent tool",
                    (decision.attempt.index, nxt.index if nxt is not None else None),
                    tuple(int(e.data.get("ledger_seq", -1)) for e in (decision.attempt, nxt)
                          if e is not None and e.kind == Kind.TOOL_EXECUTED)))
        if hard_case and entry_point:
            exercised += 1
    by_situation: dict[tuple[str, bool, int], dict[bool, list[RetryDecision]]] = {}
    for decision in decisions:
        retries_max = F.thresholds(trace, decision.attempt.data.get("session_id", "")).auto_retries_max
        if policy_allows_retry(decision.failure, decision.idempotent, decision.retries_done, retries_max):
            by_situation.setdefault(decision.situation, {}).setdefault(decision.retried, []).append(decision)
    for situation, split in by_situation.items():
        if len(split) < 2:
            continue
        retried_by = sorted({d.label for d in split[True]})
        stopped_by = sorted({d.label for d in split[False]})
        if set(retried_by) == set(stopped_by) and len(retried_by) == 1:
            continue  # one kind deciding both ways is L1.8's business, not two policies
        violations.append(_ev(
            f"two retry policies: after {situation[0]!r} (attempt {situation[2] + 1}, "
            f"{'idempotent' if situation[1] else 'not idempotent'}) {', '.join(retried_by)} retried "
            f"but {', '.join(stopped_by)} did not",
            tuple(d.attempt.index for d in split[True][:1] + split[False][:1])))
    return judge("X6", exercised, violations,
                 "no entry-point operation met a denying gate or a retry decision")


# --------------------------------------------------------------------------- catalogue


CRITERIA: tuple[Criterion, ...] = (
    Criterion(
        id="X1",
        stage=STAGE,
        title="Three independent states",
        statement=(
            "Every operation exposes a permission (allow/ask/deny), an outcome (not_started/"
            "succeeded/failed/unknown) and a delivery (pending/recorded/projected), each set "
            "by its own rule: a pre-call denial is deny with outcome not_started, never failed "
            "(only it, or a start the host refused, is not_started); an outcome that says the "
            "operation ran needs a real execution; recorded means the result is durably saved "
            "and projected that the UI received it, after the save, never before."
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
            "maps to the same identity and a single record, and to a single result in the "
            "conversation the model is sent (a tool message answers a call emitted before it, "
            "once)."
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
            "request of the loop with its reason (the why the owner is shown), and never ends "
            "the turn as completed by itself; no request carries a call without its result "
            "while the conversation goes on past it."
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
            "Terminal, web, user-app and ordinary tools go through the same permission gates "
            "and the same retry policy: no kind of tool executes what the rules in force do not "
            "authorize, none skips the permission decision, and none runs a retry loop of its "
            "own."
        ),
        seed_clause="Terminal、Web、用户应用和普通工具通过现有公共入口使用同一生命周期，不建立各自的权限与重试框架。",
        check=check_x6,
    ),
)
