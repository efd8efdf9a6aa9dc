"""A tool call only an unfinished model stream emitted is never taken up (part of M5).

M5's seed clause: "完成观察器不把失败请求视为成功回答" (the completion observer never takes a
failed request for a successful answer). The tool calls a stream emitted are part of its
answer: a stream that ended by EOF (incomplete), a transport error (failed) or a cancellation
gave no answer, so the calls it emitted before it stopped were never asked for. Running one
later (the next turn settling "pending" calls, a recovery resuming the turn) takes the
unfinished request for a successful answer as surely as completing the turn on it would
(docs/lifecycle.md, "Sessions and turns", step 3: EOF "is never taken as an answer").

Definitions (all read from the world's events, the store only where it is the subject):

* an *unfinished stream* is a ``MODEL_STREAM_END`` whose ``how`` is ``eof``,
  ``transport_error`` or ``cancelled``; a *completed* one ends ``end``. Its *emissions* are
  the complete tool calls the world served in it (``tool_calls``: the world serves a call as
  one chunk, so every call listed was emitted whole);
* the *identity* of a call is ``(session_id, tool_call_id)``: the contract's operation
  identity (``execution_id_for(session, tool_call_id)``), the key the store, the ledger rows
  and every other operation criterion use. It is per session because scenarios reuse call
  ids across sessions: ``c1`` of another session is another call. The tool and its
  arguments (``args_digest(tool, args)``) then say *which* emission of an id a run carries
  out: a run is the completed answer's call when a completed stream of its session emitted
  the same id with the same tool and arguments before it. The digest alone would be the
  wrong key: a model that re-issues a call under a fresh id gives a new call, which runs,
  while the unfinished stream's id must still never run; keying by content would excuse
  running both;
* a call is *taken* when the world records an ``execute_tool`` of it (a ledger row,
  ``TOOL_EXECUTED``, or a refusal to start, ``TOOL_UNAVAILABLE``: both are the
  implementation invoking the tool; each is judged) or when a reading of the store holds an
  operation for it (prepared, decided, waiting or closed as not executed: the implementation
  registered the call as one to answer). The store registers a call once, so it is judged
  at the first reading that holds it: an operation already there before the unfinished
  stream emitted its id (a completed answer's, emitted again) is not that stream's.

The rule (:func:`unfinished_calls_never_taken`): a call taken at event ``i`` fails when an
unfinished stream of its session emitted its id before ``i`` and no completed stream of the
session emitted that id with the same tool and arguments before ``i``. So a call the model
emitted in an unfinished stream and again in a later completed one (re-issued after a retry
or a new turn) may run once that completed answer arrived: it is that answer's call. A run
before it is not: the lifecycle reads a stream to its end before running any of its calls
(step 3 before step 4), so nothing runs on a call whose answer has not completed. Nor is a
run of the id with other arguments than the completed answer gave (the unfinished
stream's, or anybody's): no completed answer asked for it.

Exercised only by the hard case: an unfinished stream that emitted at least one complete
tool call, after which the run went on, so that the implementation had the chance to take
the call up: a later ``run_turn`` or ``concurrent_turn`` of its session, an
``answer_approval`` or a ``recover()`` (the recovery after a crash that cut off the stream's
recorded end, or after a restart) was called after the stream ended.

Not judged here: the calls of a stream that ended normally but whose reply a crash lost
before its end was recorded (the world says the model finished; what recovery may do with
a lost answer is M1's, M2's and L4.8's), and calls whose id no unfinished stream emitted
(a run of arguments nobody emitted is X2's: it binds the digest the model emitted).

Guarantees: pure over the trace; each taken call is reported once per (session, call id,
where: ``ledger`` or ``store``), at the first record that shows it, with the stream's end
event and that record as evidence (the ledger row also by its sequence number).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from harness.contract import args_digest
from harness.criteria import trace_readings as s
from harness.trace.identity_memo import by_identity
from harness.trace.record import Kind, Trace, TraceEvent

UNFINISHED = ("eof", "transport_error", "cancelled")
"""The stream endings that give no answer (``how`` of ``MODEL_STREAM_END``)."""
COMPLETED = "end"
CONTINUATIONS = ("run_turn", "concurrent_turn", "answer_approval", "recover")
"""Driver calls after which the implementation had the chance to take a call up."""


@dataclass(frozen=True, slots=True)
class Emission:
    """One complete tool call an unfinished stream emitted."""

    stream: TraceEvent
    session_id: str
    tool_call_id: str
    digest: str | None
    """``args_digest(tool, args)`` of what the stream emitted (None if the world's record
    lacks the tool or the arguments)."""

    @property
    def how(self) -> str:
        return str(self.stream.data.get("how", ""))


@dataclass(frozen=True, slots=True)
class Taken:
    """A call only an unfinished stream had emitted, taken up by the implementation."""

    emission: Emission
    """The first unfinished stream that emitted it."""
    where: str
    """``ledger`` (the world's record of an execution or a refusal to start) or ``store``."""
    index: int
    """The ledger or refusal event, or the store reading that holds the operation."""
    row: TraceEvent | None
    """The ledger row (``TOOL_EXECUTED``), for its sequence number in the evidence."""
    note: str


@dataclass(frozen=True, slots=True)
class Reading:
    exercised: int
    """Unfinished streams with at least one emitted call, after which the run went on."""
    taken: tuple[Taken, ...]


def unfinished(how: str) -> bool:
    """Did the stream end without giving an answer ("a failed or incomplete request")?"""
    return how in UNFINISHED


def _digest(tool: Any, args: Any) -> str | None:
    if not isinstance(tool, str) or not isinstance(args, Mapping):
        return None
    return args_digest(tool, dict(args))


def _served(stream: TraceEvent) -> list[tuple[str, str | None]]:
    """(tool_call_id, digest) of each call a stream emitted, in order."""
    calls = stream.data.get("tool_calls")
    if calls:
        return [(str(c.get("tool_call_id", "")), _digest(c.get("tool"), c.get("args")))
                for c in calls if isinstance(c, Mapping)]
    return [(str(i), None) for i in stream.data.get("tool_call_ids") or ()]


def is_the_completed_answers_call(completed: Mapping[tuple[s.OpKey, str | None], int],
                                  key: s.OpKey, digest: str | None, index: int) -> bool:
    """"A failed or incomplete request is never taken as a successful answer": a run of a
    call is the completed answer's (and may happen) only when a completed stream of its
    session emitted the same id with the same tool and arguments before it."""
    first = completed.get((key, digest))
    return first is not None and first < index


def run_went_on(trace: Trace, stream: TraceEvent, session_id: str) -> bool:
    """The hard case's second half: after the stream ended, the harness drove the session on
    (a turn of that session, an answer, a recovery), so a taken call would show."""
    for call in trace.of_kind(Kind.DRIVER_CALL):
        if call.index <= stream.index or call.data.get("skipped"):
            continue
        if call.data.get("method") not in CONTINUATIONS:
            continue
        named = (call.data.get("args") or {}).get("session_id")
        if named is None or named == session_id:
            return True
    return False


@by_identity(2)
def unfinished_calls_never_taken(trace: Trace) -> Reading:
    """"部分文本返回仍标为未完整结束。完成观察器不把失败请求视为成功回答": a tool call only a
    stream ended by EOF, a transport error or a cancellation emitted is never executed,
    refused, or recorded as an operation (see the module doc for the identity and the
    timing)."""
    sessions = s.request_sessions(trace)
    first_unfinished: dict[s.OpKey, Emission] = {}
    completed: dict[tuple[s.OpKey, str | None], int] = {}
    exercised = 0
    for stream in s.stream_ends(trace):
        session_id = str(sessions.get(stream.data.get("request_id", ""), ""))
        served = _served(stream)
        how = str(stream.data.get("how", ""))
        if how == COMPLETED:
            for call_id, digest in served:
                completed.setdefault(((session_id, call_id), digest), stream.index)
        elif unfinished(how) and served:
            for call_id, digest in served:
                first_unfinished.setdefault((session_id, call_id),
                                            Emission(stream, session_id, call_id, digest))
            exercised += run_went_on(trace, stream, session_id)
    if not first_unfinished:
        return Reading(exercised, ())
    taken: list[Taken] = []
    reported: set[tuple[s.OpKey, str]] = set()

    def judge(key: s.OpKey, digest: str | None, index: int, bound: int, where: str,
              row: TraceEvent | None, what: str) -> None:
        """A record at ``index`` follows every event before ``bound``."""
        emission = first_unfinished.get(key)
        if emission is None or emission.stream.index >= bound or (key, where) in reported:
            return
        if is_the_completed_answers_call(completed, key, digest, bound):
            return
        reported.add((key, where))
        again = any(k == key and at < bound for (k, _), at in completed.items())
        why = (" (a completed answer emitted the id before it, with other arguments)"
               if again else "")
        taken.append(Taken(emission, where, index, row, (
            f"{what} {key[1]!r} of {key[0]}, which only request "
            f"{emission.stream.data.get('request_id')} emitted before its stream ended by "
            f"{emission.how}{why}: a call of an unfinished request was taken as an answer's")))

    for event in trace.of_kind(Kind.TOOL_EXECUTED, Kind.TOOL_UNAVAILABLE):
        d = event.data
        key = (str(d.get("session_id", "")), str(d.get("tool_call_id", "")))
        executed = event.kind == Kind.TOOL_EXECUTED
        judge(key, _digest(d.get("tool"), d.get("args")), event.index, event.index, "ledger",
              event if executed else None,
              "the world executed" if executed else "the implementation tried to start")
    # The store registers a call once: judged at the first reading that holds it (an
    # operation already there before the unfinished stream emitted its id is not its).
    # Successive readings share observation and view objects: each is read once.
    seen_observations: set[int] = set()
    seen_views: set[int] = set()
    sighted: set[s.OpKey] = set()
    for point in trace.observations:
        if id(point.observation) in seen_observations:
            continue
        seen_observations.add(id(point.observation))
        for op in point.observation.operations:
            if id(op) in seen_views:
                continue
            seen_views.add(id(op))
            key = (op.session_id, op.identity.tool_call_id)
            if key in first_unfinished and key not in sighted:
                sighted.add(key)
                # a reading is taken just after its event: an emission at that event precedes it
                judge(key, _digest(op.tool, op.args), point.index, point.index + 1, "store", None,
                      f"the store holds an operation ({op.outcome.value}, "
                      f"{op.delivery.value}) for")
    return Reading(exercised, tuple(taken))
