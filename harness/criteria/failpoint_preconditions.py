"""Failpoint preconditions: every hit of a failpoint is judged on where it really sits.

An implementation calls the failpoints itself, so it could call one a step early or late (or
not at all) and the fault the harness plans there would then test nothing: a crash at an
``after_result_saved`` called after the checkpoint never exercises "result saved, checkpoint
not yet". The world reads the durable store at every hit (the probe observation labelled
``probe:failpoint:<name>``, taken after the ``FAILPOINT`` event is recorded and before the
fault acts), so each hit can be judged against what the lifecycle says must hold there.

Guarantees:

* :data:`PRECONDITIONS` holds one :class:`FailpointPrecondition` for every member of
  :class:`harness.contract.Failpoint` (checked at import): the context keys the hit must
  carry, what must already be durable, what must not be yet, and the criteria whose faults
  rely on the point (``docs/lifecycle.md``, "Failpoint preconditions", is the same table);
* :func:`violations` is a pure function of a trace. It judges every hit of a catalogue
  failpoint: a context that does not name its operation (or model request) is a violation
  by itself; otherwise the operation's state is read from the probe taken at that hit, and
  what happened before the hit from the world's events (ledger rows, tool refusals, prompts,
  UI publications, classifier requests, model requests and stream ends), never from what the
  implementation says about itself alone. A probe that could not be read leaves only the
  world's side judged. Every attempt to run a tool must also sit between the operation's
  ``after_start_recorded`` and ``after_tool_returned`` hits on its instance (a missing
  failpoint is a violation like a misplaced one);
* each violation carries :class:`~harness.criteria.base.Evidence` pointing at the
  ``FAILPOINT`` event (whose index is also the probe's) and at the world events that show
  the problem;
* :func:`guard` wraps a criterion of the catalogue so that its verdict also fails on the
  violations of the failpoints it relies on (:data:`RELIED_ON`); a violation counts as an
  exercise of that criterion, so a criterion can never pass, nor stay not exercised, over a
  trace in which its failpoint was misplaced. A checker error stays an error.

Why the relying criteria, not a new criterion: the catalogue is the acceptance catalogue of
the design (55 ids, counted by reports, schema and tests), and a misplaced failpoint is
exactly a hole in the test of the criterion whose faults sit there: reporting it under that
criterion says which guarantee went untested, and the gate fails either way. Every
failpoint is relied on by at least one criterion that needs no optional feature, except the
points only reachable with one (classifier review: auto mode; waits and prompts: approvals).

How an operation's "run" is delimited: the world's attempts (``TOOL_EXECUTED`` and
``TOOL_UNAVAILABLE``) of the current run are those after the operation's latest
``after_start_recorded`` hit; "not started yet" means no attempt since its latest
``after_tool_returned`` hit (an escalation runs the same operation twice; an escalated run
refused before it called the tool is judged on the sandboxed run's saved result, which
stands). "A checkpoint folds it" is read from ``CheckpointView.last_execution_id`` (the
last operation whose result that checkpoint folded), or from a checkpoint of the session
first seen after the operation's ``after_result_saved`` hit. A "result projection" is a
``UI_PUBLISH`` for the operation whose status is not ``awaiting_approval`` (those publish
the wait, not a result).
When another instance acted while this one was working on the operation (a concurrent turn
running while this one was held), its later hits are judged only on what must already be
durable: the other instance may rightly have done the later steps. Request records are
required only of an implementation that declares ``model_events``.
"""

from __future__ import annotations

import bisect
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from harness.contract import (
    DecisionSource,
    Delivery,
    Failpoint,
    Feature,
    Observation,
    OperationView,
    Outcome,
    WaitStatus,
    canonical_json,
    execution_id_for,
    result_digest,
)
from harness.criteria import approval_answers
from harness.criteria.trace_readings import find_op
from harness.trace.sequence_delta import common_prefix
from harness.criteria.base import Criterion, Evidence, Status, Verdict, per_trace
from harness.trace.record import Kind, Source, Trace, TraceEvent

OpKey = tuple[str, str]
"""``(session_id, tool_call_id)``."""

OPERATION_CONTEXT = ("session_id", "tool_call_id", "execution_id")
MODEL_REQUEST_CONTEXT = ("session_id", "request_id")
SESSION_CONTEXT = ("session_id",)

WAIT_STATUS = "awaiting_approval"
"""The projection status that shows a pending wait, not a result."""


@dataclass(frozen=True, slots=True)
class Problem:
    """One way a hit's precondition does not hold; ``indexes``/``rows`` point at the world."""

    note: str
    indexes: tuple[int, ...] = ()
    rows: tuple[int, ...] = ()
    late: bool = False
    """True when something the hit must precede is already there (the hit came late);
    False when something missing must already be durable (the hit came early)."""


def _late(note: str, indexes: tuple[int, ...] = (), rows: tuple[int, ...] = ()) -> Problem:
    """Something the hit must precede is already there."""
    return Problem(note, indexes, rows, late=True)


@dataclass(frozen=True, slots=True)
class FailpointPrecondition:
    failpoint: Failpoint
    context_keys: tuple[str, ...]
    """Keys the hit's context must carry, non-empty (and consistent with one another)."""
    durable: str
    """What must already be durable (and have happened in the world) at the hit."""
    not_yet: str
    """What must not be durable (nor have happened) yet at the hit."""
    relied_on_by: tuple[str, ...]
    """Criteria whose faults at this point test something only if the point sits here."""
    judge: Callable[[_Hit], list[Problem]] = field(repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class PlacementViolation:
    failpoint: str
    hit: int
    """The 1-based hit number of that failpoint in the run; 0 for a tool attempt that has
    not the hit it needs next to it (the evidence then points at the attempt)."""
    relied_on_by: tuple[str, ...]
    evidence: Evidence


# --------------------------------------------------------------------------- trace index


def _projection(event: TraceEvent) -> dict[str, Any]:
    return event.data.get("projection") or {}


def _row_key(event: TraceEvent) -> OpKey:
    return (str(event.data.get("session_id", "")), str(event.data.get("tool_call_id", "")))


class _Index:
    """The world's events of one trace, grouped the ways hits are judged (built once)."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.probes: dict[tuple[int, str], Observation] = {
            (p.index, p.label): p.observation for p in trace.observations}
        self.hits: list[TraceEvent] = list(trace.of_kind(Kind.FAILPOINT))
        self.attempts: dict[OpKey, list[TraceEvent]] = {}
        for event in trace.of_kind(Kind.TOOL_EXECUTED, Kind.TOOL_UNAVAILABLE):
            self.attempts.setdefault(_row_key(event), []).append(event)
        self.prompts: dict[OpKey, list[TraceEvent]] = {}
        for event in trace.of_kind(Kind.APPROVAL_PROMPT):
            self.prompts.setdefault(_row_key(event), []).append(event)
        self.publications: dict[OpKey, list[TraceEvent]] = {}
        for event in trace.of_kind(Kind.UI_PUBLISH):
            projection = _projection(event)
            key = (str(projection.get("session_id", "")), str(projection.get("tool_call_id", "")))
            self.publications.setdefault(key, []).append(event)
        self.reviews: list[TraceEvent] = list(trace.of_kind(Kind.CLASSIFIER_REQUEST))
        self.crashes: tuple[TraceEvent, ...] = trace.crashes()
        self.requests: list[TraceEvent] = list(trace.of_kind(Kind.MODEL_REQUEST))
        self.stream_ends: dict[str, list[TraceEvent]] = {}
        for event in trace.of_kind(Kind.MODEL_STREAM_END):
            self.stream_ends.setdefault(str(event.data.get("request_id", "")), []).append(event)
        self.request_ended: dict[str, list[int]] = {}
        for event, payload in trace.lifecycle_events():
            if payload.get("type") == "model_request_ended":
                self.request_ended.setdefault(str(payload.get("request_id", "")), []).append(
                    event.index)
        self.answers: dict[str, list[int]] = {}  # the owner's, or a new message's "no"
        for answer in approval_answers.answers(trace):
            self.answers.setdefault(answer.wait_id, []).append(answer.call_index)
        self.first_event: dict[int, int] = {}
        self.acts: list[TraceEvent] = []
        for event in trace.events:
            self.first_event.setdefault(event.instance, event.index)
            if event.source != Source.HARNESS:
                self.acts.append(event)
        self.op_hits: dict[OpKey, list[TraceEvent]] = {}
        for event in self.hits:
            key = _context_key(event)
            if key is not None:
                self.op_hits.setdefault(key, []).append(event)
        self.review_owner: dict[int, OpKey] = {}
        """Review index -> the operation the reviewing instance names at its next operation
        hit after it (its ``during_classifier_review``, or the decision that follows): a
        review of identical bytes is that operation's review, whatever other call asks for
        the same operation (found by generation: two calls with the same arguments in one
        response, one instance taking up a call another prepared)."""
        op_hits_by_instance: dict[int, list[TraceEvent]] = {}
        for event in self.hits:
            if _context_key(event) is not None:
                op_hits_by_instance.setdefault(event.instance, []).append(event)
        positions = {instance: [h.index for h in hits]
                     for instance, hits in op_hits_by_instance.items()}
        for review in self.reviews:
            later = op_hits_by_instance.get(review.instance, [])
            at = bisect.bisect_right(positions.get(review.instance, []), review.index)
            if at < len(later):
                key = _context_key(later[at])
                if key is not None:
                    self.review_owner[review.index] = key
        self._model_request_readings: tuple[Any, Any, Any] | None = None

    def reviewed_for_another(self, review: TraceEvent, key: OpKey) -> bool:
        """Is ``review`` another operation's (see :attr:`review_owner`)?"""
        owner = self.review_owner.get(review.index)
        return owner is not None and owner != key

    def ends_serving(self, tool_call_id: str) -> list[TraceEvent]:
        """The stream ends that served this call id (built at the first question)."""
        by_call = self.__dict__.get("_ends_by_call")
        if by_call is None:
            by_call = {}
            for ends in self.stream_ends.values():
                for end in ends:
                    calls = end.data.get("tool_call_ids") or [
                        c.get("tool_call_id") for c in end.data.get("tool_calls") or []]
                    for call_id in dict.fromkeys(c for c in calls if isinstance(c, str)):
                        by_call.setdefault(call_id, []).append(end)
            self.__dict__["_ends_by_call"] = by_call
        return by_call.get(tool_call_id, [])

    def unended(self, rows: Any) -> list[Any]:
        """The model request views of a reading not ended yet (:func:`_ended`), in order:
        kept up to date from the head a reading shares with the one asked about before
        (the same objects: the same answer), so a long session is not read whole per hit."""
        last, positions = self.__dict__.get("_unended", ((), []))
        if rows is not last:
            kept = common_prefix(last, rows)
            positions = [at for at in positions if at < kept] + [
                at for at in range(kept, len(rows)) if not _ended(rows[at])]
            self.__dict__["_unended"] = (rows, positions)
        return [rows[at] for at in positions]

    def requests_with_id(self, request_id: Any) -> list[TraceEvent]:
        """The model requests whose id (as text) is ``request_id``, in trace order."""
        by_id = self.__dict__.get("_requests_with_id")
        if by_id is None:
            by_id = {}
            for request in self.requests:
                by_id.setdefault(str(request.data.get("request_id", "")), []).append(request)
            self.__dict__["_requests_with_id"] = by_id
        try:
            return by_id.get(request_id, [])
        except TypeError:  # an id that cannot be hashed equals no text
            return []

    def request_session_before(self, request_id: str, at: int) -> Any:
        """The session of the latest model request with this id sent before ``at`` (None:
        none was)."""
        by_id = self.__dict__.get("_requests_by_id")
        if by_id is None:
            by_id = {}
            for request in self.requests:
                indexes, sessions = by_id.setdefault(str(request.data.get("request_id", "")), ([], []))
                indexes.append(request.index)
                sessions.append(request.data.get("session_id"))
            self.__dict__["_requests_by_id"] = by_id
        indexes, sessions = by_id.get(request_id, ((), ()))
        at_or_after = bisect.bisect_left(indexes, at)
        return sessions[at_or_after - 1] if at_or_after else None

    def model_request_readings(self) -> tuple[dict[tuple[int, str], int],
                                              dict[tuple[int, str, str], list[int]],
                                              dict[tuple[int, str], list[TraceEvent]]]:
        """What :func:`_before_model_request` asks of every hit, answered by lookup instead
        of a scan of the trace per hit (built at the first question):

        * (instance, request id) -> the lowest index at which the instance had the request
          (its ``MODEL_REQUEST``, or its ``after_model_request_started`` hit naming it);
        * (instance, failpoint name, session) -> the indexes of its hits, ascending;
        * (instance, session) -> its ``MODEL_REQUEST`` events, ascending.

        Only string names and sessions are keyed: a hit's own are strings, and nothing else
        equals one."""
        if self._model_request_readings is not None:
            return self._model_request_readings
        started = Failpoint.AFTER_MODEL_REQUEST_STARTED.value
        owned: dict[tuple[int, str], int] = {}
        hits_of: dict[tuple[int, str, str], list[int]] = {}
        requests_of: dict[tuple[int, str], list[TraceEvent]] = {}
        for request in self.requests:
            key = (request.instance, str(request.data.get("request_id", "")))
            owned[key] = min(owned.get(key, request.index), request.index)
            session = request.data.get("session_id")
            if isinstance(session, str):
                requests_of.setdefault((request.instance, session), []).append(request)
        for hit in self.hits:
            name = hit.data.get("name")
            if name == started:
                key = (hit.instance, str(_context(hit).get("request_id", "")))
                owned[key] = min(owned.get(key, hit.index), hit.index)
            session = _context(hit).get("session_id")
            if isinstance(name, str) and isinstance(session, str):
                hits_of.setdefault((hit.instance, name, session), []).append(hit.index)
        for indexes in hits_of.values():
            indexes.sort()
        for events in requests_of.values():
            events.sort(key=lambda e: e.index)
        self._model_request_readings = (owned, hits_of, requests_of)
        return self._model_request_readings


def _context(event: TraceEvent) -> dict[str, Any]:
    context = event.data.get("context")
    return context if isinstance(context, dict) else {}


def _context_key(event: TraceEvent) -> OpKey | None:
    context = _context(event)
    session, call = context.get("session_id"), context.get("tool_call_id")
    if isinstance(session, str) and session and isinstance(call, str) and call:
        return (session, call)
    return None


@dataclass(frozen=True, slots=True)
class _Hit:
    """One failpoint hit and what it can be judged with."""

    index: _Index
    event: TraceEvent
    name: str
    probe: Observation | None
    key: OpKey | None
    execution_id: str
    request_id: str
    session_id: str

    @property
    def at(self) -> int:
        return self.event.index

    @property
    def instance(self) -> int:
        return self.event.instance

    def overtaken(self) -> bool:
        """Did another instance act while this one was working on the operation (a
        concurrent turn while this one was held), i.e. since this instance's first hit for
        the operation (or, for a model request, its previous hit)? Then the other may
        legitimately have done the steps this hit precedes, and only what must already be
        durable is judged."""
        own = [h.index for h in self.previous_hits() if h.instance == self.instance]
        mine = [h.index for h in self.index.hits if h.instance == self.instance and h.index < self.at]
        since = own[0] if own else (mine[-1] if mine else -1)
        since = max(since, self.index.first_event.get(self.instance, -1))
        return any(since < e.index < self.at and e.instance != self.instance
                   for e in self.index.acts)

    # -- the operation ---------------------------------------------------------------

    def op(self) -> OperationView | None:
        if self.probe is None or self.key is None:
            return None
        return find_op(self.probe, (self.key[0], self.key[1]))

    def previous_hits(self, *names: str) -> list[TraceEvent]:
        """This operation's earlier hits (any instance), optionally of the given names."""
        hits = self.index.op_hits.get(self.key, []) if self.key else []
        return [h for h in hits if h.index < self.at and (not names or h.data.get("name") in names)]

    def last_hit(self, *names: str) -> int:
        hits = self.previous_hits(*names)
        return hits[-1].index if hits else -1

    def attempts(self, after: int = -1) -> list[TraceEvent]:
        rows = self.index.attempts.get(self.key, []) if self.key else []
        return [r for r in rows if after < r.index < self.at]

    def run_anchor(self) -> int:
        """Where this run of the operation began: its latest ``after_start_recorded`` hit."""
        return self.last_hit(Failpoint.AFTER_START_RECORDED.value)

    def rerun(self) -> bool:
        """Did the operation already run before this run (an escalation runs it again)?"""
        return bool(self.attempts(after=-1)) and bool(
            [r for r in self.attempts() if r.index < self.run_anchor()])

    def result_publications(self, after: int) -> list[TraceEvent]:
        events = self.index.publications.get(self.key, []) if self.key else []
        return [e for e in events if after < e.index < self.at
                and _projection(e).get("status") != WAIT_STATUS]

    def prompts(self, after: int = -1) -> list[TraceEvent]:
        events = self.index.prompts.get(self.key, []) if self.key else []
        return [e for e in events if after < e.index < self.at]

    def waits(self, op: OperationView | None) -> list[Any]:
        if self.probe is None or self.key is None:
            return []
        execution_ids = {self.execution_id} | ({op.identity.execution_id} if op else set())
        return [w for w in self.probe.approval_waits
                if w.execution_id in execution_ids
                or (w.session_id, w.tool_call_id) == self.key]

    def folding_checkpoints(self, op: OperationView | None) -> list[Any]:
        if self.probe is None or self.key is None:
            return []
        execution_ids = {self.execution_id} | ({op.identity.execution_id} if op else set())
        return [c for c in self.probe.checkpoints
                if c.session_id == self.key[0] and c.last_execution_id in execution_ids]


def _ledger_rows(events: Iterable[TraceEvent]) -> tuple[int, ...]:
    return tuple(int(e.data["ledger_seq"]) for e in events if "ledger_seq" in e.data)


# --------------------------------------------------------------------------- shared judgements


def _state(op: OperationView) -> str:
    return (f"outcome {op.outcome.value}, delivery {op.delivery.value}, execution_started "
            f"{op.execution_started}")


def _needs_op(hit: _Hit, problems: list[Problem]) -> OperationView | None:
    """The operation at the probe; its absence is a problem (the context names it)."""
    op = hit.op()
    if op is None and hit.probe is not None and hit.key is not None:
        problems.append(Problem(f"the store holds no operation {hit.key[1]} of {hit.key[0]}"))
    return op


def _no_result_yet(hit: _Hit, op: OperationView | None, problems: list[Problem],
                   what: str = "a result is already saved") -> None:
    if op is not None and (op.delivery is not Delivery.PENDING
                           or op.outcome is not Outcome.NOT_STARTED):
        problems.append(_late(f"{what} ({_state(op)})"))


def _not_started_yet(hit: _Hit, op: OperationView | None, problems: list[Problem]) -> None:
    """No attempt of this run yet (world), and for a first run no durable start either."""
    since = hit.last_hit(Failpoint.AFTER_TOOL_RETURNED.value)
    ran = hit.attempts(after=since)
    if ran:
        problems.append(_late(f"the tool was already called for {ran[-1].data.get('tool_call_id')}",
                              tuple(e.index for e in ran), _ledger_rows(ran)))
    if op is not None and since < 0 and not hit.attempts() and op.execution_started:
        problems.append(_late("execution_started is already recorded"))


def _no_pending_wait(hit: _Hit, op: OperationView | None, problems: list[Problem]) -> None:
    pending = [w.wait_id for w in hit.waits(op) if w.status is WaitStatus.PENDING]
    if pending:
        problems.append(_late(f"an approval wait is already pending ({', '.join(pending)})"))


def _no_prompt_since(hit: _Hit, after: int, problems: list[Problem]) -> None:
    shown = hit.prompts(after)
    if shown:
        problems.append(_late("an approval prompt was already shown",
                              tuple(e.index for e in shown)))


def _review_matches(hit: _Hit, event: TraceEvent, args: dict[str, Any] | None) -> bool:
    request = event.data.get("request") or {}
    if event.instance != hit.instance or request.get("session_id") != hit.key[0]:
        return False
    op = hit.op()
    tool = op.tool if op is not None else request.get("tool")
    if request.get("tool") != tool:
        return False
    return args is None or request.get("operation") == canonical_json(args)


def _reviews_since(hit: _Hit, after: int, args: dict[str, Any] | None) -> list[TraceEvent]:
    if hit.key is None:
        return []
    return [e for e in hit.index.reviews
            if after < e.index < hit.at and _review_matches(hit, e, args)
            and not hit.index.reviewed_for_another(e, hit.key)]


def _served_at(hit: _Hit) -> int:
    """Index of the stream end that served this call (latest before the hit), else -1."""
    if hit.key is None:
        return -1
    served = -1
    for end in hit.index.ends_serving(hit.key[1]):
        # the request it ends was sent before the hit, in the call's session
        if end.index < hit.at and hit.index.request_session_before(
                str(end.data.get("request_id", "")), hit.at) == hit.key[0]:
            served = max(served, end.index)
    return served


def _cut_off(hit: _Hit) -> TraceEvent | None:
    """The crash that cut this run off between its start record and its saved result (a
    crash after its ``after_start_recorded`` hit with no ``after_result_saved`` hit of the
    run before it), if any: the result is then the ``unknown`` a recovery records."""
    anchor = hit.run_anchor()
    if anchor < 0:
        return None
    saved = [h.index for h in hit.previous_hits(Failpoint.AFTER_RESULT_SAVED.value)
             if h.index > anchor]
    for crash in hit.index.crashes:
        if anchor < crash.index < hit.at and not any(i < crash.index for i in saved):
            return crash
    return None


def _expected_result(hit: _Hit, op: OperationView) -> list[Problem]:
    """The saved result must be the one the world's attempts of this run give; for a run a
    crash cut off before its result was saved, the ``unknown`` a recovery records (its
    digest is not judged here: the host never saw the tool's answer). Found by an outside
    implementation whose ``recover()`` passes the checkpoint failpoints while it folds such
    a call (issue 31, case 1): nothing in the contract forbids that."""
    if op.outcome is Outcome.UNKNOWN and _cut_off(hit) is not None:
        return []
    run = hit.attempts(after=hit.run_anchor())
    if not run:
        standing = _standing_run(hit)
        if standing:
            return _judge_run(op, standing, " (the earlier run's result, which stands)")
        if op.outcome is not Outcome.NOT_STARTED:
            return [Problem(f"the saved outcome is {op.outcome.value} although the tool was not "
                            "called in this run")]
        return []
    return _judge_run(op, run, "")


def _standing_run(hit: _Hit) -> list[TraceEvent]:
    """For a run that never called the tool although the operation ran before (an escalated
    run refused after its start record: the rules changed, a cancel), the attempts of that
    earlier run: its saved result stands (contract.md's outcome table, escalation row), and
    delivering that standing result is a lifecycle point like any other (issue 31, case 5:
    an outside implementation passes the checkpoint failpoints while it delivers it, which
    the contract allows). Empty when the operation never ran before this run."""
    starts = hit.previous_hits(Failpoint.AFTER_START_RECORDED.value)
    if len(starts) < 2:
        return []
    earlier, this = starts[-2].index, starts[-1].index
    return [e for e in hit.attempts(after=earlier) if e.index < this]


def _judge_run(op: OperationView, run: list[TraceEvent], whose: str) -> list[Problem]:
    """The saved result against the world's attempts ``run`` of one run (not empty)."""
    last = run[-1]
    executed = [e for e in run if e.kind == Kind.TOOL_EXECUTED]
    rows = _ledger_rows(run)
    if last.kind == Kind.TOOL_UNAVAILABLE:
        wanted = (Outcome.FAILED, Outcome.UNKNOWN) if executed else (Outcome.NOT_STARTED,)
        if op.outcome not in wanted:
            return [Problem(f"the saved outcome is {op.outcome.value}; the world's last attempt{whose} "
                            f"could not start the tool (expected {'/'.join(w.value for w in wanted)})",
                            (last.index,), rows)]
        return []
    status, output = str(last.data.get("status", "")), str(last.data.get("output", ""))
    wanted = (Outcome.SUCCEEDED,) if status == "ok" else (Outcome.FAILED, Outcome.UNKNOWN)
    row = f"ledger row {last.data.get('ledger_seq', '?')}{whose}"
    problems = []
    if op.outcome not in wanted:
        problems.append(Problem(f"the saved outcome is {op.outcome.value}; the ledger's last row "
                                f"({row}) says {status} (expected "
                                f"{'/'.join(w.value for w in wanted)})", (last.index,), rows))
    expected = result_digest(status, output)
    if op.result_digest != expected:
        problems.append(Problem(f"the saved result digest {op.result_digest} is not {expected}, "
                                f"the digest of the ledger's last row ({row}: {status})",
                                (last.index,), rows))
    return problems


def _result_saved(hit: _Hit, op: OperationView | None, problems: list[Problem]) -> None:
    if op is None:
        return
    if op.delivery is Delivery.PENDING:
        problems.append(Problem(f"the result is not saved yet ({_state(op)})"))
        return
    problems.extend(_expected_result(hit, op))


def _not_folded(hit: _Hit, op: OperationView | None, problems: list[Problem]) -> None:
    folded = hit.folding_checkpoints(op)
    if folded:
        problems.append(_late(
            f"checkpoint {folded[-1].sequence} of {folded[-1].session_id} already folds it"))


def _not_projected(hit: _Hit, op: OperationView | None, after: int,
                   problems: list[Problem]) -> None:
    if op is not None and op.delivery is Delivery.PROJECTED:
        problems.append(_late("delivery is already projected"))
    shown = hit.result_publications(after)
    if shown:
        problems.append(_late("its result was already published to the UI",
                              tuple(e.index for e in shown)))


PRE_RESULT = ("after_prepare", "during_classifier_review", "after_permission_decision",
              "after_wait_persisted", "after_prompt", "after_revalidation",
              "after_start_recorded", "after_tool_returned")
"""Operation failpoints before the result record, in pipeline order."""


def _result_anchor(hit: _Hit) -> int:
    """The operation's last hit before its result was saved: publications after it show
    a result (none may be shown before the checkpoint is saved)."""
    return hit.last_hit(*PRE_RESULT)


# --------------------------------------------------------------------------- per failpoint


def _after_prepare(hit: _Hit) -> list[Problem]:
    problems: list[Problem] = []
    op = _needs_op(hit, problems)
    if op is not None:
        if op.execution_started or op.outcome is not Outcome.NOT_STARTED \
                or op.delivery is not Delivery.PENDING:
            problems.append(_late(f"the new operation is not a fresh record ({_state(op)})"))
        if op.classifier_outcome is not None:
            problems.append(_late(f"a classifier outcome ({op.classifier_outcome.value}) is "
                                  "already recorded"))
    _not_started_yet(hit, op, problems)
    _no_pending_wait(hit, op, problems)
    served = _served_at(hit)
    if served >= 0:
        _no_prompt_since(hit, served, problems)
        reviewed = _reviews_since(hit, served, op.args if op is not None else None)
        if reviewed:
            problems.append(_late("the classifier already reviewed it",
                                  tuple(e.index for e in reviewed)))
    return problems


def _during_classifier_review(hit: _Hit) -> list[Problem]:
    problems: list[Problem] = []
    op = _needs_op(hit, problems)
    anchor = max(hit.last_hit(), _served_at(hit))
    if hit.key is not None and not _reviews_since(hit, anchor, None):
        problems.append(Problem("the classifier was not called for it since its previous step"))
    _no_result_yet(hit, op, problems)
    _not_started_yet(hit, op, problems)
    _no_pending_wait(hit, op, problems)
    first_review = not hit.previous_hits(Failpoint.DURING_CLASSIFIER_REVIEW.value)
    if op is not None and first_review and op.classifier_outcome is not None:
        problems.append(_late(f"the verdict is already applied (classifier outcome "
                              f"{op.classifier_outcome.value} recorded)"))
    return problems


def _after_permission_decision(hit: _Hit) -> list[Problem]:
    problems: list[Problem] = []
    op = _needs_op(hit, problems)
    anchor = max(hit.last_hit(Failpoint.AFTER_PREPARE.value), _served_at(hit))
    reviewed = _reviews_since(hit, anchor, None)
    if op is not None and reviewed and op.classifier_outcome is None:
        answered = str((reviewed[-1].data or {}).get("outcome", "?"))
        problems.append(Problem(f"the classifier reviewed it (answer {answered}) but no "
                                f"classifier outcome is recorded with the decision "
                                f"({op.permission.value} by {op.decided_by.value})",
                                tuple(e.index for e in reviewed)))
    _no_result_yet(hit, op, problems)
    _not_started_yet(hit, op, problems)
    _no_pending_wait(hit, op, problems)
    if op is None or op.decided_by is not DecisionSource.APPROVAL:
        # An owner's answer is a decision whose question was shown before it: a recovery
        # may have shown that prompt with no after_prompt hit of its own in between.
        _no_prompt_since(hit, hit.last_hit(), problems)
    return problems


def _after_wait_persisted(hit: _Hit) -> list[Problem]:
    problems: list[Problem] = []
    op = _needs_op(hit, problems)
    if hit.probe is None or op is None:
        return problems
    pending = [w for w in hit.waits(op) if w.status is WaitStatus.PENDING]
    if not pending:
        problems.append(Problem("no pending approval wait of it is committed"))
    ids = {w.wait_id for w in pending}
    shown = [e for e in hit.prompts() if e.data.get("wait_id") in ids]
    if shown:
        problems.append(_late("its prompt was already shown", tuple(e.index for e in shown)))
    return problems


def _after_prompt(hit: _Hit) -> list[Problem]:
    problems: list[Problem] = []
    op = _needs_op(hit, problems)
    anchor = hit.last_hit(Failpoint.AFTER_WAIT_PERSISTED.value)
    shown = [e for e in hit.prompts(anchor) if e.instance == hit.instance]
    if not shown:
        problems.append(Problem("no approval prompt for it was shown since its wait was persisted"))
        return problems
    if hit.probe is None or op is None:
        return problems
    waits = {w.wait_id: w for w in hit.waits(op)}
    prompt = shown[-1]
    wait_id = str(prompt.data.get("wait_id", ""))
    wait = waits.get(wait_id)
    if wait is None:
        problems.append(Problem(f"the prompted wait {wait_id} is not in the store", (prompt.index,)))
    elif wait.status is not WaitStatus.PENDING and not [
            i for i in hit.index.answers.get(wait_id, []) if i < hit.at]:
        problems.append(_late(f"the prompted wait {wait_id} is already {wait.status.value} "
                              "although nobody answered it", (prompt.index,)))
    return problems


def _after_revalidation(hit: _Hit) -> list[Problem]:
    problems: list[Problem] = []
    op = _needs_op(hit, problems)
    if op is not None and op.permission.value != "allow":
        problems.append(Problem(f"revalidation passed an operation whose permission is "
                                f"{op.permission.value} (decided by {op.decided_by.value} under "
                                f"permission version {op.identity.permission_version})"))
    _not_started_yet(hit, op, problems)
    if not hit.attempts():
        _no_result_yet(hit, op, problems)
    return problems


def _after_start_recorded(hit: _Hit) -> list[Problem]:
    problems: list[Problem] = []
    op = _needs_op(hit, problems)
    if op is not None and not op.execution_started:
        problems.append(Problem("the start is not recorded (execution_started false)"))
    since = hit.last_hit(Failpoint.AFTER_TOOL_RETURNED.value)
    ran = hit.attempts(after=since)
    if ran:
        problems.append(_late("the tool was already called", tuple(e.index for e in ran),
                              _ledger_rows(ran)))
    if not hit.attempts():
        _no_result_yet(hit, op, problems)
    return problems


def _after_tool_returned(hit: _Hit) -> list[Problem]:
    problems: list[Problem] = []
    op = _needs_op(hit, problems)
    run = hit.attempts(after=hit.run_anchor())
    mine = [e for e in run if e.instance == hit.instance]
    if not mine:
        problems.append(Problem("the tool was not called since its start was recorded"))
    if op is not None and not op.execution_started:
        problems.append(Problem("the start is not recorded (execution_started false)"))
    if op is None or not mine:
        return problems
    if not hit.rerun():
        _no_result_yet(hit, op, problems, "its result is already saved")
        return problems
    last = mine[-1]
    if last.kind == Kind.TOOL_EXECUTED:
        digest = result_digest(str(last.data.get("status", "")), str(last.data.get("output", "")))
        earlier = [r for r in hit.attempts() if r.index < hit.run_anchor()
                   and r.kind == Kind.TOOL_EXECUTED]
        before = (result_digest(str(earlier[-1].data.get("status", "")),
                                str(earlier[-1].data.get("output", ""))) if earlier else None)
        if op.result_digest == digest and digest != before:
            problems.append(_late("the result of this run is already saved", (last.index,),
                                  _ledger_rows([last])))
    return problems


def _after_result_saved(hit: _Hit) -> list[Problem]:
    problems: list[Problem] = []
    op = _needs_op(hit, problems)
    _result_saved(hit, op, problems)
    _not_folded(hit, op, problems)
    _not_projected(hit, op, _result_anchor(hit), problems)
    return problems


def _during_diagnostics_write(hit: _Hit) -> list[Problem]:
    # Diagnostics are written after the result and before the checkpoint: the durable
    # state there is exactly the one after_result_saved requires.
    return _after_result_saved(hit)


def _during_checkpoint_build(hit: _Hit) -> list[Problem]:
    return _during_diagnostics_write(hit)


def _after_checkpoint_saved(hit: _Hit) -> list[Problem]:
    problems: list[Problem] = []
    op = _needs_op(hit, problems)
    _result_saved(hit, op, problems)
    if op is not None and hit.probe is not None and not hit.folding_checkpoints(op):
        # A checkpoint first seen since the result was saved folds it. Without an
        # after_result_saved hit (a recovery saving a cut-off call's unknown passes none,
        # and may fold several calls in one checkpoint naming another), since its previous
        # hit.
        earlier = (hit.previous_hits(Failpoint.AFTER_RESULT_SAVED.value)
                   or hit.previous_hits())
        before = (hit.index.probes.get((earlier[-1].index,
                                        f"probe:failpoint:{earlier[-1].data.get('name')}"))
                  if earlier else None)
        known = {(c.session_id, c.sequence) for c in before.checkpoints} if before else None
        newer = [c for c in hit.probe.checkpoints if c.session_id == op.session_id
                 and known is not None and (c.session_id, c.sequence) not in known]
        if not newer:
            problems.append(Problem("no checkpoint of the session folds it"))
    anchor = max(hit.last_hit(Failpoint.AFTER_RESULT_SAVED.value), _result_anchor(hit))
    _not_projected(hit, op, anchor, problems)
    return problems


def _after_projection(hit: _Hit) -> list[Problem]:
    problems: list[Problem] = []
    op = _needs_op(hit, problems)
    anchor = max(hit.last_hit(Failpoint.AFTER_RESULT_SAVED.value), _result_anchor(hit))
    shown = [e for e in hit.result_publications(anchor) if e.instance == hit.instance]
    if not shown:
        problems.append(Problem("no projection of its result was published to the UI"))
    if op is not None and op.delivery is not Delivery.PROJECTED:
        problems.append(Problem(f"delivery is {op.delivery.value}, not projected"))
    return problems


def _store_request(hit: _Hit) -> Any:
    if hit.probe is None:
        return None
    return next((r for r in hit.probe.model_requests if r.request_id == hit.request_id), None)


def _records_requests(hit: _Hit) -> bool:
    """Only an implementation that declares model events must keep request records (M1)."""
    return Feature.MODEL_EVENTS in hit.index.trace.meta.features


def _ended(view: Any) -> bool:
    return view.status is not None or view.end_events > 0


def _before_model_request(hit: _Hit) -> list[Problem]:
    problems: list[Problem] = []
    if hit.probe is None:
        return problems
    owned, hits_of, requests_of = hit.index.model_request_readings()
    # a request is this instance's when it had it before this hit
    open_ = [r.request_id for r in hit.index.unended(hit.probe.model_requests)
             if r.session_id == hit.session_id
             and owned.get((hit.instance, r.request_id), hit.at) < hit.at and not _ended(r)]
    if open_:
        problems.append(_late(f"model request {open_[-1]} of this instance is started and not "
                              "ended yet"))
    # the same instance's next hit of this failpoint for the session bounds what follows
    later_hits = hits_of.get((hit.instance, hit.name, hit.session_id), [])
    at = bisect.bisect_right(later_hits, hit.at)
    stop = later_hits[at] if at < len(later_hits) else None
    requests = requests_of.get((hit.instance, hit.session_id), [])
    at = bisect.bisect_right([r.index for r in requests], hit.at)
    following = requests[at] if at < len(requests) else None
    if following is not None and (stop is None or following.index < stop):
        request_id = str(following.data.get("request_id", ""))
        if any(r.request_id == request_id for r in hit.probe.model_requests):
            problems.append(_late(f"the start of the request it precedes ({request_id}) is "
                                  "already recorded", (following.index,)))
    return problems


def _after_model_request_started(hit: _Hit) -> list[Problem]:
    problems: list[Problem] = []
    sent = [r for r in hit.index.requests_with_id(hit.request_id) if r.index < hit.at]
    if sent:
        problems.append(_late(f"request {hit.request_id} was already sent to the model",
                              tuple(r.index for r in sent)))
    if hit.probe is None:
        return problems
    view = _store_request(hit)
    if view is None and _records_requests(hit):
        problems.append(Problem(f"the start of request {hit.request_id} is not in the store"))
    elif view is not None and _ended(view):
        problems.append(_late(f"request {hit.request_id} is already ended in the store"))
    return problems


def _after_model_stream_ended(hit: _Hit) -> list[Problem]:
    problems: list[Problem] = []
    sent = [r for r in hit.index.requests_with_id(hit.request_id) if r.index < hit.at]
    ends = [e for e in hit.index.stream_ends.get(hit.request_id, []) if e.index < hit.at]
    if sent and not ends:
        problems.append(Problem(f"the stream of request {hit.request_id} has not ended",
                                tuple(r.index for r in sent)))
    recorded = [i for i in hit.index.request_ended.get(hit.request_id, []) if i < hit.at]
    if recorded:
        problems.append(_late(f"the end of request {hit.request_id} was already reported",
                              tuple(recorded)))
    if hit.probe is None:
        return problems
    view = _store_request(hit)
    if view is None and _records_requests(hit):
        problems.append(Problem(f"the start of request {hit.request_id} is not in the store"))
    elif view is not None and _ended(view):
        problems.append(_late(f"the end of request {hit.request_id} is already recorded"))
    return problems


# --------------------------------------------------------------------------- the table

F = Failpoint
RESULT = ("the result record (the outcome and digest of this run's last ledger row; for a rerun "
          "refused before it called the tool, the earlier run's, which stands)")

PRECONDITIONS: dict[str, FailpointPrecondition] = {p.failpoint.value: p for p in (
    FailpointPrecondition(
        F.AFTER_PREPARE, OPERATION_CONTEXT,
        "the operation record: not_started, pending, execution_started false",
        "a classifier review or outcome, a wait or prompt, a tool call",
        ("X2", "L4.10"), _after_prepare),
    FailpointPrecondition(
        F.DURING_CLASSIFIER_REVIEW, OPERATION_CONTEXT,
        "the operation record; the world's classifier request for it (this instance)",
        "the verdict applied (classifier outcome recorded on a first review), a result, a "
        "pending wait, a tool call",
        ("L2.6", "L2.7", "L2.8"), _during_classifier_review),
    FailpointPrecondition(
        F.AFTER_PERMISSION_DECISION, OPERATION_CONTEXT,
        "the decision (with its classifier outcome when the classifier reviewed it)",
        "a result, a pending wait, a prompt since the previous step, a tool call",
        ("L3.7", "L5.2"), _after_permission_decision),
    FailpointPrecondition(
        F.AFTER_WAIT_PERSISTED, OPERATION_CONTEXT,
        "a pending approval wait of the operation",
        "the prompt of that wait",
        ("L3.2",), _after_wait_persisted),
    FailpointPrecondition(
        F.AFTER_PROMPT, OPERATION_CONTEXT,
        "the wait the prompt shown since after_wait_persisted names (the world's prompt, "
        "this instance)",
        "an answer nobody gave (the wait is pending unless answered)",
        ("L3.2",), _after_prompt),
    FailpointPrecondition(
        F.AFTER_REVALIDATION, OPERATION_CONTEXT,
        "the allow decision being revalidated",
        "the start record (first run), a tool call of this run, a result (first run)",
        ("L2.9", "L4.10"), _after_revalidation),
    FailpointPrecondition(
        F.AFTER_START_RECORDED, OPERATION_CONTEXT,
        "execution_started true",
        "a tool call of this run (ledger row or refusal), a result (first run)",
        ("L4.3", "L4.6"), _after_start_recorded),
    FailpointPrecondition(
        F.AFTER_TOOL_RETURNED, OPERATION_CONTEXT,
        "execution_started true; the world's attempt(s) of this run (this instance)",
        "the result of this run",
        ("L4.3",), _after_tool_returned),
    FailpointPrecondition(
        F.AFTER_RESULT_SAVED, OPERATION_CONTEXT,
        RESULT + ", delivery recorded",
        "a checkpoint folding it, a result projection (UI or delivery projected)",
        ("L4.1", "L4.5"), _after_result_saved),
    FailpointPrecondition(
        F.DURING_DIAGNOSTICS_WRITE, OPERATION_CONTEXT,
        RESULT,
        "a checkpoint folding it, a result projection",
        ("L4.7",), _during_diagnostics_write),
    FailpointPrecondition(
        F.DURING_CHECKPOINT_BUILD, OPERATION_CONTEXT,
        RESULT,
        "a checkpoint folding it, a result projection",
        ("L4.4",), _during_checkpoint_build),
    FailpointPrecondition(
        F.AFTER_CHECKPOINT_SAVED, OPERATION_CONTEXT,
        RESULT + "; a checkpoint of the session folding it",
        "a result projection",
        ("L4.2", "L4.5"), _after_checkpoint_saved),
    FailpointPrecondition(
        F.AFTER_PROJECTION, OPERATION_CONTEXT,
        "delivery projected; the world's UI publication of its result (this instance)",
        "—",
        ("X1", "L5.4"), _after_projection),
    FailpointPrecondition(
        F.BEFORE_MODEL_REQUEST, SESSION_CONTEXT,
        "the end of every request this instance started",
        "the start record of the request it precedes",
        ("M4", "M1"), _before_model_request),
    FailpointPrecondition(
        F.AFTER_MODEL_REQUEST_STARTED, MODEL_REQUEST_CONTEXT,
        "the request's start record",
        "the request sent to the model, its end record",
        ("M4", "M1"), _after_model_request_started),
    FailpointPrecondition(
        F.AFTER_MODEL_STREAM_ENDED, MODEL_REQUEST_CONTEXT,
        "the request's start record; the world's end of its stream (when it was sent)",
        "its end record, its end event",
        ("M4", "M1"), _after_model_stream_ended),
)}

_missing = {f.value for f in Failpoint} - set(PRECONDITIONS)
assert not _missing, f"failpoints without a precondition: {sorted(_missing)}"

RELIED_ON: dict[str, tuple[str, ...]] = {}
"""Criterion id -> the failpoints whose placement its verdict depends on."""
for _precondition in PRECONDITIONS.values():
    for _criterion_id in _precondition.relied_on_by:
        RELIED_ON[_criterion_id] = (*RELIED_ON.get(_criterion_id, ()),
                                    _precondition.failpoint.value)


# --------------------------------------------------------------------------- judging


def _context_problems(event: TraceEvent, precondition: FailpointPrecondition,
                      probe: Observation | None) -> list[Problem]:
    context = _context(event)
    absent = [k for k in precondition.context_keys
              if not isinstance(context.get(k), str) or not context.get(k)]
    if absent:
        return [Problem(f"its context lacks {', '.join(absent)} (has {sorted(context) or 'nothing'}): "
                        "the hit does not say which "
                        + ("operation" if "tool_call_id" in precondition.context_keys
                           else "model request" if "request_id" in precondition.context_keys
                           else "session") + " it concerns")]
    if "execution_id" not in precondition.context_keys:
        return []
    key = (context["session_id"], context["tool_call_id"])
    op = find_op(probe, (key[0], key[1])) if probe is not None else None
    bound = op.identity.execution_id if op is not None else execution_id_for(*key)
    if context["execution_id"] != bound:
        return [Problem(f"its context names execution {context['execution_id']} with call "
                        f"{key[1]}, whose execution id is {bound}")]
    return []


@per_trace  # every guarded criterion asks about the same trace in turn
def violations(trace: Trace) -> tuple[PlacementViolation, ...]:
    """Every precondition that does not hold at a failpoint hit of ``trace``, in trace order."""
    index = _Index(trace)
    found: list[PlacementViolation] = []
    for event in index.hits:
        name = str(event.data.get("name", ""))
        precondition = PRECONDITIONS.get(name)
        if precondition is None:
            continue
        probe = index.probes.get((event.index, f"probe:failpoint:{name}"))
        problems = _context_problems(event, precondition, probe)
        if not problems:
            context = _context(event)
            hit = _Hit(index, event, name, probe, _context_key(event),
                       str(context.get("execution_id", "")), str(context.get("request_id", "")),
                       str(context.get("session_id", "")))
            problems = precondition.judge(hit)
            if any(p.late for p in problems) and hit.overtaken():
                problems = [p for p in problems if not p.late]
        for problem in problems:
            number = event.data.get("hit", 0)
            found.append(PlacementViolation(name, number, precondition.relied_on_by, Evidence(
                f"failpoint placement: {name} hit {number} ({_describe(event)}): {problem.note} "
                f"(it must sit where {precondition.durable} is durable, and not yet "
                f"{precondition.not_yet})",
                (event.index, *problem.indexes), problem.rows)))
    found.extend(_attempt_violations(index))
    found.sort(key=lambda v: v.evidence.trace_indexes[0])
    return tuple(found)


def _describe(event: TraceEvent) -> str:
    context = _context(event)
    named = context.get("tool_call_id") or context.get("request_id") or context.get("session_id")
    return f"{named}, instance {event.instance}" if named else f"instance {event.instance}"


def _attempt_violations(index: _Index) -> list[PlacementViolation]:
    """Each tool attempt sits between its operation's after_start_recorded and
    after_tool_returned hits on its instance: the nearest failpoint hits of that instance
    before and after it must be those (retries of the same run share them)."""
    found: list[PlacementViolation] = []
    by_instance: dict[int, list[TraceEvent]] = {}
    for hit in index.hits:
        by_instance.setdefault(hit.instance, []).append(hit)
    positions = {instance: [h.index for h in hits] for instance, hits in by_instance.items()}
    for key, attempts in index.attempts.items():
        for attempt in attempts:
            hits = by_instance.get(attempt.instance, [])
            # the hits are in trace order: those before and after it by bisection
            at = positions.get(attempt.instance, [])
            last_before = bisect.bisect_left(at, attempt.index) - 1
            first_after = bisect.bisect_right(at, attempt.index)
            for wanted, neighbour in (
                    (F.AFTER_START_RECORDED, hits[last_before] if last_before >= 0 else None),
                    (F.AFTER_TOOL_RETURNED, hits[first_after] if first_after < len(hits) else None)):
                if wanted is F.AFTER_TOOL_RETURNED and neighbour is None:
                    continue  # the run ended right after the tool (no later hit to judge)
                if neighbour is not None and neighbour.data.get("name") == wanted.value \
                        and _context_key(neighbour) == key:
                    continue
                precondition = PRECONDITIONS[wanted.value]
                seen = (f"{neighbour.data.get('name')} of {_describe(neighbour)}"
                        if neighbour is not None else "no failpoint hit")
                side = "before" if wanted is F.AFTER_START_RECORDED else "after"
                found.append(PlacementViolation(wanted.value, 0, precondition.relied_on_by, Evidence(
                    f"failpoint placement: {key[1]} was attempted on instance {attempt.instance} "
                    f"with {seen} right {side} it instead of its own {wanted.value}",
                    (attempt.index, *((neighbour.index,) if neighbour is not None else ())),
                    _ledger_rows([attempt]))))
    return found


# --------------------------------------------------------------------------- composition


def guard(criterion: Criterion) -> Criterion:
    """``criterion`` whose verdict also fails on violations at the failpoints it relies on."""
    relied = RELIED_ON.get(criterion.id)
    if not relied:
        return criterion
    inner = criterion.check

    def check(trace: Trace) -> Verdict:
        verdict = inner(trace)
        if verdict.status is Status.ERROR:
            return verdict
        found = [v.evidence for v in violations(trace) if v.failpoint in relied]
        if not found:
            return verdict
        kept = verdict.evidence if verdict.status is Status.FAIL else ()
        return Verdict(criterion.id, Status.FAIL, (*kept, *found),
                       max(verdict.exercised, 1))

    return dataclasses.replace(criterion, check=check)
