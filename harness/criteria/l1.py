"""Stage L1 — failure policy, agent loop and continuation.

Pure checks over a trace. What the failure policy demands is computed by
:mod:`harness.criteria.failure_oracle` from the failures the world observed (ledger rows,
tools refused to start, denials): the dedup keys (Bash: the canonical args without
``description``; every other tool: all args; no normalisation), the recent-failure table of
fixed capacity 16 and its evictions, and the repeat judgement. Behaviour is judged against
it; ``inspect()``'s table and checkpoints are cross-checked against it, never the only
witness. An old checkpoint is judged on what the harness read from the fixture bytes.
"""

from __future__ import annotations

import functools
import shlex
from types import MappingProxyType
from typing import Any, Mapping

from dataclasses import dataclass

from harness.contract import DecisionSource, EventType, Feature, Permission, execution_id_for
from harness.criteria import approval_answers
from harness.criteria import facts as F
from harness.criteria import reading_changes
from harness.criteria import failure_oracle as O
from harness.criteria.base import Criterion, Evidence, Verdict, judge
from harness.trace.identity_memo import by_identity
from harness.trace.record import Kind, Trace, TraceEvent

STAGE = "l1"


def _ev(note: str, indexes=(), rows=()) -> Evidence:
    return Evidence(note, tuple(dict.fromkeys(i for i in indexes if i is not None)), tuple(rows))


def _seq(row: TraceEvent) -> int:
    return int(row.data.get("ledger_seq", -1))


# --------------------------------------------------------------------------- failures


STRICT_FAILURE_KINDS = O.STRICT_FAILURE_KINDS
STRICT_DENIAL_SOURCES = O.STRICT_DENIAL_SOURCES
RULE_DENIAL_SOURCES = STRICT_DENIAL_SOURCES[:-1]
"""Denials by a rule layer: their failure class is permission_denied (L1.7)."""

SETTLED_LABELS = ("quiescent", "final", "after_restart")
"""Observations read when no call is in flight: every failure before them is recorded."""


def _executed_failure(op: F.Op) -> TraceEvent | None:
    """The op's last attempt when it ended in an error (escalation requests excluded)."""
    attempts = F.attempt_rows(op)
    if not attempts:
        return None
    last = attempts[-1]
    if last.data.get("status") == "error" and not last.data.get("escalation_requested"):
        return last
    return None


def _failure_strict(op: F.Op) -> bool:
    return O.strict_failure(op)


def _failure_any(op: F.Op) -> bool:
    """Any failure or denial at all (the lenient reading), an outcome a crash left unknown
    included (found by generation: the call a crash cut after its start recorded is unknown,
    never retried, so its repeat is refused)."""
    if any(r.data.get("status") == "error" for r in op.rows):
        return True
    view = op.latest
    if view is not None and (F.value(view.outcome) in ("unknown", "failed")
                             or view.reconciliation_required):
        # a stored failure with no failing ledger row counts too: a runtime that records a
        # call a crash cut as failed (the opencode profile) refuses its repeat
        return True
    return (
        view is not None
        and F.value(view.permission) == Permission.DENY.value
        and F.value(view.decided_by) != DecisionSource.CANCELLATION.value
    )


def _succeeded(op: F.Op) -> bool:
    return O.succeeded(op)


# --------------------------------------------------------------------------- L1.1


def _entry_keys(trace: Trace, ops, model: O.TableModel, session_id: str, entries) -> tuple[dict, list]:
    """Map each stored entry to the oracle's key through the execution it names (the
    implementation's own key text is opaque): ``({entry index: key}, [unresolved entries])``."""
    by_execution: dict[str, F.Op] = {}
    for op in ops.values():
        if op.session_id != session_id:
            continue
        by_execution[execution_id_for(op.session_id, op.tool_call_id)] = op
        for _, view in op.views:
            by_execution[view.identity.execution_id] = op
    loaded: dict[str, str] = {}
    for table in model.loads:
        if table.session_id == session_id:
            for item in table.entries:
                for name in ("last_execution_id", "dedup_key"):
                    if item.get(name):
                        loaded[str(item[name])] = O.fixture_key(item)
    mapped: dict[int, str] = {}
    unresolved = []
    for position, entry in enumerate(entries):
        op = by_execution.get(entry.last_execution_id)
        # An op that ran fine but whose result a crash kept from the host is honestly unknown.
        if op is not None and (not O.succeeded(op) or F.crashed_mid_execution(trace, op, ops)):
            mapped[position] = O.dedup_key(trace, op.session_id, op.tool, op.args)
        elif entry.last_execution_id in loaded or entry.dedup_key in loaded:
            mapped[position] = loaded.get(entry.last_execution_id) or loaded[entry.dedup_key]
        else:
            unresolved.append(entry)
    return mapped, unresolved


def _cut_by_crash(trace: Trace, ops, event: Any) -> bool:
    op = ops.get((event.session_id, event.tool_call_id))
    return op is not None and F.crashed_mid_execution(trace, op, ops) is not None


def _cross_check_table(trace: Trace, ops, model: O.TableModel, point, session_id: str) -> list[Evidence]:
    """inspect()'s table at a settled observation against the oracle's."""
    found = []
    entries = [e for e in point.observation.failure_table if e.session_id == session_id]
    before = [e for e in model.events if e.session_id == session_id and e.index < point.index]
    certain = {e.key for e in before if e.certain and not _cut_by_crash(trace, ops, e)}
    floor = min(O.FAILURE_TABLE_CAPACITY, len(certain))
    if len(entries) < floor:
        found.append(_ev(
            f"session {session_id}: inspect() shows {len(entries)} failure-table entries at "
            f"'{point.label}' but the world saw {len(certain)} distinct executed failures: the table "
            f"must hold at least {floor}", (point.index,)))
    mapped, unresolved = _entry_keys(trace, ops, model, session_id, entries)
    for entry in unresolved[:1]:
        found.append(_ev(
            f"session {session_id}: failure-table entry {entry.dedup_key[:40]!r} (execution "
            f"{entry.last_execution_id!r}) at '{point.label}' names no failure the world observed "
            f"and no loaded checkpoint entry", (point.index,)))
    # A failure whose run a crash cut before its result was saved is not the implementation's
    # to record (found by generation: a second instance crashed between the tool's return
    # and the save, and nothing recovered it).
    last_certain = [e for e in before if e.certain and not _cut_by_crash(trace, ops, e)]
    if last_certain and not unresolved:
        newest = last_certain[-1]
        # Denials and refusals to start may enter the table too (found by generation: 16
        # denials after the one executed failure evicted it, as a 16-entry table must).
        newer = {e.key for e in before if e.index > newest.index and e.key != newest.key}
        if newest.key not in mapped.values() and len(newer) < O.FAILURE_TABLE_CAPACITY:
            found.append(_ev(
                f"session {session_id}: the most recent failure ({newest.tool_call_id}, "
                f"{newest.tool}) is missing from the failure table at '{point.label}': the table "
                f"must evict its oldest entry, never the newest", (newest.index, point.index),
                (newest.ledger_seq,) if newest.ledger_seq is not None else ()))
    return found


def check_l1_1(trace: Trace) -> Verdict:
    """The recent-failure table has the fixed capacity of 16, judged on what the world saw.

    Exercised: the world observed more distinct failure keys in one session than the
    capacity (ledger failures, tools refused to start, denials — the oracle's events, never
    the size the store reports). Judged on every trace: at every observation no session's
    table and no checkpoint holds more than 16 entries; at every settled observation (no call
    in flight) inspect()'s table is cross-checked against the oracle: it holds at least
    min(16, distinct executed failures so far), each entry names a failure the world observed
    (or an entry of a checkpoint the harness loaded), and the newest executed failure is in
    it. When exercised: every failure past the capacity is still recorded, no unexpected
    exception is raised, and the durable log holds one failure event per failed operation."""
    violations: list[Evidence] = []
    exercised = 0
    cap = O.FAILURE_TABLE_CAPACITY
    ops = F.operations(trace)
    model = O.table_model(trace, ops)
    pts = F.points(trace)
    # a checkpoint's fault depends on the row alone: when no reading's new rows carry one,
    # no reading does, and the checkpoints need not be read reading by reading
    checkpoints_at_fault = any(c.failure_entries > cap
                               for _, c in reading_changes.new_rows(trace, "checkpoints"))
    for point in pts:
        per_session: dict[str, int] = {}
        for entry in point.observation.failure_table:
            per_session[entry.session_id] = per_session.get(entry.session_id, 0) + 1
        for session_id, size in sorted(per_session.items()):
            if size > cap:
                violations.append(_ev(
                    f"session {session_id}: recent-failure table holds {size} entries at "
                    f"'{point.label}', capacity is {cap}", (point.index,)))
        for checkpoint in point.observation.checkpoints if checkpoints_at_fault else ():
            if checkpoint.failure_entries > cap:
                violations.append(_ev(
                    f"session {checkpoint.session_id}: checkpoint {checkpoint.sequence} carries "
                    f"{checkpoint.failure_entries} failure entries at '{point.label}', capacity is {cap}",
                    (point.index,)))
        if point.label in SETTLED_LABELS:
            for session_id in sorted({e.session_id for e in model.events} | set(per_session)):
                violations += _cross_check_table(trace, ops, model, point, session_id)
    failed_ops = [op for op in ops.values() if _executed_failure(op) is not None]
    triggered = [s for s in model.sessions() if len(model.distinct_keys(s)) > cap]
    for session_id in triggered:
        exercised += 1
        for op in failed_ops:
            if op.session_id != session_id:
                continue
            row = _executed_failure(op)
            after = [v for p, v in op.views if p.index > row.index]
            if not after or F.value(after[-1].delivery) == "pending":
                violations.append(_ev(
                    f"{F.describe(op)}: a failure beyond the table's capacity was not recorded "
                    f"(delivery {F.value(after[-1].delivery) if after else 'absent'})",
                    (row.index,) + ((op.latest_point.index,) if op.latest_point else ()), (_seq(row),)))
        for event in trace.of_kind(Kind.DRIVER_RAISED):
            # a documented refusal (a second live instance refused) is no failure of the table
            if not event.data.get("expected") and not event.data.get("refused"):
                violations.append(_ev(
                    f"the runtime raised {event.data.get('exception')} while more failures than the "
                    f"table's capacity were recorded: {event.data.get('message', '')}", (event.index,)))
    if triggered and pts:
        final = pts[-1]
        logged = final.observation.failure_events_logged
        if logged < len(failed_ops):
            violations.append(_ev(
                f"the durable log holds {logged} failure events at '{final.label}' but "
                f"{len(failed_ops)} operations failed: history was lost with the table's evictions",
                (final.index,), tuple(_seq(_executed_failure(op)) for op in failed_ops)))
    return judge("L1.1", exercised, violations,
                 "no session had more distinct failures than the table's capacity")


# --------------------------------------------------------------------------- L1.2


def _disturbed(trace: Trace, lo: int, hi: int) -> bool:
    """Anything between two observations that may legitimately change a stored decision
    (a new message among them: it may answer a wait "no")."""
    if any(lo <= answer.call_index <= hi and answer.by_new_message
           for answer in approval_answers.answers(trace)):
        return True
    for event in F.events_between(trace, lo, hi + 1):
        if event.kind in (Kind.APPROVAL_PROMPT, Kind.CRASH, Kind.RESTART):
            return True
        if event.kind == Kind.DRIVER_CALL and event.data.get("method") in (
            "answer_approval", "answer", "update_rules", "cancel", "recover", "load_checkpoint"
        ):
            return True
        if event.kind == Kind.FAILPOINT and event.data.get("action") in ("change_rules", "cancel"):
            return True
    return False


def _across(trace: Trace, pts, session_id: str, a, b, keys: int) -> list[Evidence]:
    """Counters and settled decisions must survive the eviction between ``a`` and ``b``."""
    found: list[Evidence] = []
    between = F.events_between(trace, a.index, b.index + 1)
    approved = any(
        e.kind == Kind.DRIVER_CALL and e.data.get("method") in F.ANSWER_METHODS
        and F.driver_args(e).get("approve") for e in between
    )
    allowed = approved or any(
        (e.kind == Kind.TOOL_EXECUTED and e.data.get("session_id") == session_id
         and e.data.get("status") == "ok")
        or (e.kind == Kind.CLASSIFIER_REQUEST and e.data.get("outcome") == "allow")
        for e in between
    )
    # any answer completes an approval, the one the cumulative threshold triggered included,
    # and a new message answers a pending one "no" (found by generation: that refusal evicted
    # a failure entry at the moment it reset the cumulative count, as L3.5 asks)
    answered = any(a.index < answer.index <= b.index or a.index < answer.settled <= b.index
                   for answer in approval_answers.answers(trace))
    after = {(c.session_id, c.permission_version): c for c in b.observation.denial_counters}
    for before in a.observation.denial_counters:
        if before.session_id != session_id:
            continue
        now = after.get((before.session_id, before.permission_version))
        cumulative = now.cumulative if now else 0
        consecutive = now.consecutive if now else 0
        if cumulative < before.cumulative and not approved and not answered:
            found.append(_ev(
                f"session {session_id} v{before.permission_version}: cumulative denials "
                f"dropped {before.cumulative} -> {cumulative} across the eviction of "
                f"{keys} failure entr(y/ies) ('{a.label}' -> '{b.label}')", (a.index, b.index)))
        if consecutive < before.consecutive and not allowed:
            found.append(_ev(
                f"session {session_id} v{before.permission_version}: consecutive denials "
                f"dropped {before.consecutive} -> {consecutive} across an eviction with no "
                f"allowed operation in between", (a.index, b.index)))
    views_b = {(v.session_id, v.identity.tool_call_id): v for v in b.observation.operations}
    for view in a.observation.operations:
        settled = F.value(view.delivery) != "pending" and F.value(view.permission) != "ask"
        if not settled:
            continue
        key = (view.session_id, view.identity.tool_call_id)
        now = views_b.get(key)
        if now is None:
            found.append(_ev(
                f"{key[0]}/{key[1]}: the operation record vanished across a failure-table "
                f"eviction", (a.index, b.index)))
        elif not _disturbed(trace, a.index, b.index) and (
            F.value(now.permission) != F.value(view.permission)
            or F.value(now.decided_by) != F.value(view.decided_by)
        ):
            found.append(_ev(
                f"{key[0]}/{key[1]}: permission changed {F.value(view.permission)}/"
                f"{F.value(view.decided_by)} -> {F.value(now.permission)}/"
                f"{F.value(now.decided_by)} across a failure-table eviction", (a.index, b.index)))
    return found


def _recorded_after(pts, op: F.Op | None, index: int):
    """The first observation after ``index`` at which the evicting failure is recorded (the
    store can only have evicted by then), else the first settled one."""
    for point in pts:
        if point.index <= index or op is None:
            continue
        view = next((v for p, v in op.views if p is point), None)
        if view is not None and F.value(view.delivery) != "pending":
            return point
    return next((p for p in pts if p.index > index and p.label in SETTLED_LABELS), None)


def check_l1_2(trace: Trace) -> Verdict:
    """Eviction from the full table changes nothing else.

    Exercised: once per eviction the oracle computes from the failures the world observed
    (a distinct failure arriving while 16 keys are held evicts the least recently failed),
    and once per call whose key had failed up to the repeat limit before such an eviction of
    its key. Judged: across each eviction (the observations just before and after it) no
    denial count drops without an approval or allowed operation to explain it, every settled
    operation keeps its record, permission and deciding layer; and the repeat judgement
    survives: a call whose key had already failed up to the limit under its permission
    version before its entry was evicted is not executed (ledger)."""
    violations: list[Evidence] = []
    exercised = 0
    pts = F.points(trace)
    ops = F.operations(trace)
    model = O.table_model(trace, ops)
    for eviction in model.evictions:
        exercised += 1
        a = next((p for p in reversed(pts) if p.index < eviction.index), None)
        b = _recorded_after(pts, ops.get((eviction.session_id, eviction.by_call)), eviction.index)
        if a is not None and b is not None:
            violations += _across(trace, pts, eviction.session_id, a, b, 1)
    if model.evictions:
        listed = list(ops.values())
        for op in listed:
            if op.latest is None or not op.served:
                continue
            counted = O.must_refuse(trace, listed, op)
            if not counted:
                continue
            key = O.dedup_key(trace, op.session_id, op.tool, op.args)
            gone = [
                e for e in model.evictions
                if e.session_id == op.session_id and e.key == key
                and counted[-1].first_seen < e.index < op.served[0].end_index
            ]
            if not gone:
                continue
            exercised += 1
            attempts = F.attempt_rows(op)
            if attempts:
                limit = F.thresholds(trace, op.session_id).failure_repeat_limit
                violations.append(_ev(
                    f"{F.describe(op)}: executed although its key already failed {len(counted)} "
                    f"times ({', '.join(p.tool_call_id for p in counted)}; limit {limit}) under "
                    f"permission version {op.latest.identity.permission_version}; the eviction "
                    f"of its failure-table entry (event {gone[0].index}) reset the repeat "
                    "judgement",
                    (counted[-1].first_seen, gone[0].index, attempts[0].index),
                    tuple(_seq(r) for r in attempts[:1])))
    return judge("L1.2", exercised, violations, "the world's failures never evicted a table entry")


# --------------------------------------------------------------------------- L1.3–L1.5


def _collapse(text: str) -> str:
    return " ".join(text.split())


def looks_equivalent(a: object, b: object) -> bool:
    """Different texts a shell-equivalence guesser would merge: equal after collapsing
    whitespace, case-folding, or reordering characters (``ls -la`` / ``ls -al``)."""
    if not (isinstance(a, str) and isinstance(b, str)) or a == b:
        return False
    return (
        _collapse(a) == _collapse(b)
        or _collapse(a).casefold() == _collapse(b).casefold()
        or sorted("".join(a.split())) == sorted("".join(b.split()))
        or _shell_words(a) == _shell_words(b) is not None
    )


@functools.lru_cache(maxsize=4096)  # the same command lines are compared pair by pair
def _shell_words(text: str) -> tuple[str, ...] | None:
    """The words a POSIX shell would pass (quoting and whitespace removed), or None."""
    try:
        return tuple(shlex.split(text))
    except ValueError:  # unbalanced quotes: no shell would run it as the same words
        return None


@dataclass(frozen=True, slots=True, eq=False)
class Pair:
    a: F.Op
    b: F.Op
    bash: bool
    diff: frozenset[str]
    kind: str
    """"identical", "description_only", "normalised" or "other"."""


def _classify(bash: bool, a: dict, b: dict) -> tuple[frozenset[str], str]:
    diff = frozenset(k for k in set(a) | set(b) if a.get(k, _MISSING) != b.get(k, _MISSING))
    if not diff:
        return diff, "identical"
    relevant = diff - {"description"} if bash else diff
    if not relevant or diff == {"description"}:
        return diff, "description_only"
    if all(k in a and k in b and looks_equivalent(a[k], b[k]) for k in relevant):
        return diff, "normalised"
    return diff, "other"


_MISSING = object()


def _pairs(trace: Trace, ops: dict[F.OpKey, F.Op]) -> list[Pair]:
    """The pairs of stored operations of one session and tool (in order) that can say
    anything: of kind other than "other", or whose expected and stored keys disagree on
    equality. Every other pair (different args a shell guesser would not merge, different
    expected and stored keys) is neither counted nor faulted, and a session of N calls of
    one tool has N²/2 of them: they are never formed. A pair that can say something shares
    one of these signatures (:func:`_signatures`), so only pairs of operations sharing one
    are classified."""
    listed = [op for op in ops.values() if op.latest is not None]
    groups: dict[Any, list[int]] = {}
    for at, op in enumerate(listed):
        bash = F.is_bash(trace, op.tool, op.session_id)
        for signature in _signatures(trace, op, bash):
            groups.setdefault((op.session_id, op.tool, signature), []).append(at)
    candidates: set[tuple[int, int]] = set()
    for members in groups.values():
        for number, i in enumerate(members):
            for j in members[number + 1:]:
                candidates.add((i, j))
    found = []
    for i, j in sorted(candidates):
        a, b = listed[i], listed[j]
        bash = F.is_bash(trace, a.tool, a.session_id)
        diff, kind = _classify(bash, a.args, b.args)
        found.append(Pair(a, b, bash, diff, kind))
    return found


_QUOTING = frozenset("'\"\\")


def _signatures(trace: Trace, op: F.Op, bash: bool) -> tuple[Any, ...]:
    """Values two operations (of one session and tool) share whenever their pair is not
    "other" or their keys' equalities disagree: the args without ``description`` (equal
    for "identical" and "description_only" pairs), the args with each string reduced to its
    characters case-folded, sorted, without whitespace and quoting (equal whenever every
    differing value is a text :func:`looks_equivalent` merges: collapsing whitespace, case
    folding, reordering characters and shell quoting all keep that multiset; for Bash
    without the description, which may differ), the expected key and the stored key."""
    args = op.args
    rest = {k: v for k, v in args.items() if k != "description"}
    normal = {k: (("text", "".join(sorted(c for c in v.casefold()
                                          if not c.isspace() and c not in _QUOTING)))
                  if isinstance(v, str) else ("value", _frozen(v)))
              for k, v in (rest if bash else args).items()}
    return (("args", _frozen(rest)), ("normal", _frozen(normal)),
            ("expected", F.expected_dedup_key(trace, op.session_id, op.tool, args)),
            ("stored", _frozen(op.latest.dedup_key)))


def _frozen(value: Any) -> Any:
    """A hashable value equal for equal JSON-like values (dicts, lists, scalars); anything
    else is one marker (grouped with every other such value: a candidate, never a miss)."""
    if isinstance(value, dict):
        return ("dict", frozenset((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return ("list", tuple(_frozen(v) for v in value))
    try:
        hash(value)
    except TypeError:
        return ("unhashable",)
    return value


def _pair_owner(pair: Pair) -> str:
    if pair.kind == "normalised":
        return "L1.5"
    return "L1.3" if pair.bash else "L1.4"


def _pair_counts(pair: Pair) -> bool:
    """Does this pair exercise its owner criterion (beyond a routine comparison)?

    L1.3 only on a Bash retry that differs only in ``description`` from an earlier call
    that failed or was denied; L1.4 on non-Bash calls differing only in a ``description``
    field; L1.5 on texts a shell-equivalence guesser would merge."""
    if pair.kind == "normalised":
        return True
    if pair.kind == "description_only":
        return not pair.bash or _failure_any(pair.a)
    return False


def _repeat_findings(trace: Trace, ops: dict[F.OpKey, F.Op]) -> dict[str, tuple[int, list[Evidence]]]:
    """Key-equivalence and repeat-guard findings, attributed to L1.3, L1.4 or L1.5."""
    result: dict[str, list] = {"L1.3": [0, []], "L1.4": [0, []], "L1.5": [0, []]}

    def expected(op: F.Op) -> str:
        return F.expected_dedup_key(trace, op.session_id, op.tool, op.args)

    # 1. stored key equivalence == recomputed key equivalence
    for pair in _pairs(trace, ops):
        owner = _pair_owner(pair)
        if _pair_counts(pair):
            result[owner][0] += 1
        want_equal = expected(pair.a) == expected(pair.b)
        got_equal = pair.a.latest.dedup_key == pair.b.latest.dedup_key
        if want_equal != got_equal:
            what = "share one dedup key" if got_equal else "got different dedup keys"
            should = "the same operation" if want_equal else "different operations"
            result[owner][1].append(_ev(
                f"{F.describe(pair.a)} and {pair.b.tool_call_id} {what} but are {should} under the "
                f"failure policy (args differ in {sorted(pair.diff) or 'nothing'})",
                (pair.a.latest_point.index, pair.b.latest_point.index)))

    # 2. behaviour of the repeat guard
    listed = list(ops.values())
    # Of the earlier operations of the same session and tool, only those that failed, share
    # the expected key or share the failure oracle's key are read below: each operation
    # is compared with those (in order), not with every earlier one.
    relevant: dict[Any, list[int]] = {}
    for at, p in enumerate(listed):
        group = (p.session_id, p.tool)
        if _failure_any(p):
            relevant.setdefault((group, "failed"), []).append(at)
        relevant.setdefault((group, "expected", expected(p)), []).append(at)
        if p.latest is not None:
            relevant.setdefault((group, "oracle", O.dedup_key(trace, p.session_id, p.tool, p.args)),
                                []).append(at)
    for op in listed:
        view = op.latest
        if view is None or not op.served:
            continue
        bash = F.is_bash(trace, op.tool, op.session_id)
        group = (op.session_id, op.tool)
        near_by = sorted({*relevant.get((group, "failed"), ()),
                          *relevant.get((group, "expected", expected(op)), ()),
                          *relevant.get((group, "oracle", O.dedup_key(
                              trace, op.session_id, op.tool, op.args)), ())})
        prior = [
            p for p in (listed[at] for at in near_by)
            if p is not op and p.session_id == op.session_id and p.tool == op.tool and p.precedes(op)
        ]
        my_key = expected(op)
        same_key_any = [p for p in prior if expected(p) == my_key and _failure_any(p)]
        near = [(p, *_classify(bash, p.args, op.args)) for p in prior if expected(p) != my_key and _failure_any(p)]

        # strict count under the same permission version, since the last success of the key
        count = len(O.counted_failures(trace, prior, op))
        limit = F.thresholds(trace, op.session_id).failure_repeat_limit
        reworded = bash and any(
            p.args.get("description") != op.args.get("description")
            for p in prior if expected(p) == my_key
        )
        if reworded and count >= limit:
            result["L1.3"][0] += 1
            if op.rows:
                result["L1.3"][1].append(_ev(
                    f"{F.describe(op)}: executed although its command already failed {count} times "
                    f"(limit {limit}) under permission version "
                    f"{view.identity.permission_version}; only the description was reworded",
                    (op.served[0].end_index, op.rows[0].index), tuple(op.ledger_seqs)))
        for _, _, kind in near:
            owner = "L1.5" if kind == "normalised" else ("L1.4" if (kind == "description_only" and not bash) else None)
            if owner:
                result[owner][0] += 1
        if F.value(view.decided_by) == DecisionSource.REPEAT_GUARD.value and not same_key_any:
            culprit = next((n for n in near if n[2] == "normalised"), None) or \
                next((n for n in near if n[2] == "description_only"), None) or \
                (near[0] if near else None)
            if culprit is None:
                owner = "L1.3" if bash else "L1.4"
                note = "no earlier failure of this tool at all"
            else:
                owner = "L1.5" if culprit[2] == "normalised" else ("L1.3" if bash else "L1.4")
                note = (f"the nearest earlier failure {culprit[0].tool_call_id} differs in "
                        f"{sorted(culprit[1])}")
            result[owner][1].append(_ev(
                f"{F.describe(op)}: refused by the repeat guard though no earlier failure has its "
                f"key; {note}", (op.served[0].end_index, op.latest_point.index)))
    return {k: (v[0], v[1]) for k, v in result.items()}


@by_identity(2)  # L1.3, L1.4 and L1.5 each take their share of one computation per trace
def _repeat_findings_of(trace: Trace) -> Mapping[str, tuple[int, tuple[Evidence, ...]]]:
    """:func:`_repeat_findings` of the trace's operations (read-only: shared by three checks)."""
    found = _repeat_findings(trace, F.operations(trace))
    return MappingProxyType({criterion_id: (count, tuple(evidence))
                             for criterion_id, (count, evidence) in found.items()})


def check_l1_3(trace: Trace) -> Verdict:
    """Bash: ``description`` is left out of the key, and only it.

    Exercised: only by a Bash retry that differs only in ``description`` from an earlier
    call that failed or was denied (a pair, or a reworded call past the repeat limit).
    Judged on every pair of Bash calls of a session: the stored keys are equal exactly when
    the policy's keys are (command, cwd and every other field stay in); a call differing
    only in description from a call that failed or was denied up to the repeat limit under
    its permission version is not executed; the guard refuses no call whose key never
    failed."""
    exercised, violations = _repeat_findings_of(trace)["L1.3"]
    return judge("L1.3", exercised, violations,
                 "no pair of Bash calls differing in description or execution fields")


def check_l1_4(trace: Trace) -> Verdict:
    """A non-Bash tool's own ``description`` field stays in its dedup key.

    Exercised: two calls of one non-Bash tool that differ only in a ``description`` field
    (a pair, or a call whose only earlier failures of the tool differ from it there).
    Judged: their stored keys differ, and the call is not refused as their repeat."""
    exercised, violations = _repeat_findings_of(trace)["L1.4"]
    return judge("L1.4", exercised, violations,
                 "no pair of non-Bash calls differing only in a 'description' field")


def check_l1_5(trace: Trace) -> Verdict:
    """No shell-equivalence guessing.

    Exercised: two calls of one tool whose texts differ only in ways a shell might ignore
    (spacing, flag order, case). Judged: they have different stored keys and neither is
    refused as a repeat of the other's failures."""
    exercised, violations = _repeat_findings_of(trace)["L1.5"]
    return judge("L1.5", exercised, violations,
                 "no pair of calls differing only by whitespace, order or case")


# --------------------------------------------------------------------------- L1.6


def _message_matches(expected: dict, actual: dict) -> bool:
    for key in ("role", "content", "tool_call_id", "outcome", "failure_kind"):
        if expected.get(key) not in (None, "") and expected.get(key) != actual.get(key):
            return False
    wanted = [c.get("tool_call_id") for c in expected.get("tool_calls") or ()]
    if wanted and wanted != [c.get("tool_call_id") for c in actual.get("tool_calls") or ()]:
        return False
    return True


def _missing_messages(expected: list, actual: list) -> list:
    """Expected messages not found, in order, as a subsequence of the actual ones."""
    position = 0
    missing = []
    for wanted in expected:
        while position < len(actual) and not _message_matches(wanted, actual[position]):
            position += 1
        if position == len(actual):
            missing.append(wanted)
        else:
            position += 1
    return missing


def _missing_entries(trace: Trace, call: TraceEvent, session_id: str, entries: list) -> tuple[list, object]:
    """The loaded entries (the 16 most recent) absent from the session's failure table at the
    first observation after the load returned, before any later failure could evict them."""
    kept = entries[-O.FAILURE_TABLE_CAPACITY:]
    if not kept:
        return [], None
    returned = next((e.index for e in trace.events if e.index > call.index
                     and e.kind in (Kind.DRIVER_RETURN, Kind.DRIVER_RAISED)
                     and e.data.get("method") == "load_checkpoint"), call.index)
    model = O.table_model(trace)
    later = [e.index for e in model.events if e.session_id == session_id and e.index > returned]
    point = next((p for p in F.points(trace)
                  if p.index >= returned and (not later or p.index < later[0])), None)
    if point is None:
        return [], None
    table = [e for e in point.observation.failure_table if e.session_id == session_id]
    missing = [e for e in kept if _loaded_as(e, table) is None]
    return missing, point


def _loaded_as(entry: dict, table: list) -> Any:
    """The table entry a fixture entry was loaded as: same key, or same last execution (an
    implementation may re-key old entries), or None."""
    for loaded in table:
        if loaded.dedup_key == entry.get("dedup_key") or (
                entry.get("last_execution_id") and loaded.last_execution_id == entry.get("last_execution_id")):
            return loaded
    return None


def _changed_entries(trace: Trace, call: TraceEvent, session_id: str, entries: list) -> tuple[list[str], object]:
    """Loaded entries whose count or failure kind is not the fixture's (what the harness
    read from the bytes it passed): the table must carry the old failures as they were."""
    kept = entries[-O.FAILURE_TABLE_CAPACITY:]
    _, point = _missing_entries(trace, call, session_id, entries)
    if point is None:
        return [], None
    table = [e for e in point.observation.failure_table if e.session_id == session_id]
    changed = []
    for entry in kept:
        loaded = _loaded_as(entry, table)
        if loaded is None:
            continue
        wanted = (int(entry.get("count") or 1), str(entry.get("failure_kind") or "failed"))
        got = (loaded.count, F.value(loaded.failure_kind))
        if got != wanted:
            changed.append(f"{entry.get('tool')} {str(entry.get('dedup_key', ''))[:24]!r}: "
                           f"count {got[0]}, kind {got[1]} (the fixture: count {wanted[0]}, kind {wanted[1]})")
    return changed, point


def check_l1_6(trace: Trace) -> Verdict:
    """An old-format checkpoint loads with its conversation and its failure entries.

    Exercised: a checkpoint fixture was loaded and the session's next model request
    followed (or the load raised). A load step the harness skipped (the implementation
    declares no such fixture: the documented way to have no old format) loads nothing and
    is not judged. Judged on what the harness itself read from the fixture
    bytes it passed (``fixture_content``): the load returns normally, the next model request
    of the session carries the fixture's messages in order, the failure table right after
    the load holds the fixture's failure entries (its 16 most recent) with their counts and
    failure kinds, and the continuing
    turn does not fail. A fixture in no documented layout is judged on the messages of the
    implementation's ``.expect.json`` sidecar, and without one only on carrying history."""
    violations: list[Evidence] = []
    exercised = 0
    skipped: list[str] = []
    for call in trace.of_kind(Kind.DRIVER_CALL):
        if call.data.get("method") != "load_checkpoint":
            continue
        if call.data.get("skipped"):
            skipped.append(str(call.data["skipped"]))
            continue
        args = F.driver_args(call)
        session_id = F.arg_session(args, F.default_session(trace))
        fixture = args.get("fixture", "?")
        outcome = next(
            (e for e in trace.events if e.index > call.index
             and e.kind in (Kind.DRIVER_RETURN, Kind.DRIVER_RAISED)
             and e.data.get("method") == "load_checkpoint"), None)
        if outcome is not None and outcome.kind == Kind.DRIVER_RAISED:
            exercised += 1
            violations.append(_ev(
                f"session {session_id}: loading the valid checkpoint fixture {fixture!r} raised "
                f"{outcome.data.get('exception')}: {outcome.data.get('message', '')}",
                (call.index, outcome.index)))
            continue
        request = F.next_model_request(trace, session_id, call.index)
        if request is None:
            continue
        exercised += 1
        messages = list(request.data.get("messages", ()))
        content = args.get("fixture_content") if isinstance(args.get("fixture_content"), dict) else None
        expected = content.get("messages") if content is not None else args.get("expected_messages")
        source = "fixture" if content is not None else "sidecar"
        if isinstance(expected, list) and expected:
            missing = _missing_messages(expected, messages)
            if missing:
                violations.append(_ev(
                    f"session {session_id}: the first model request after loading {fixture!r} lacks "
                    f"{len(missing)} of the {len(expected)} messages the {source} holds (first missing: "
                    f"{missing[0].get('role')} {str(missing[0].get('content', ''))[:60]!r})",
                    (call.index, request.index)))
        elif not any(m.get("role") != "user" for m in messages) and len(messages) <= 1:
            violations.append(_ev(
                f"session {session_id}: the first model request after loading {fixture!r} carries "
                f"no history from the checkpoint", (call.index, request.index)))
        if content is not None and isinstance(content.get("failure_entries"), list):
            lost, point = _missing_entries(trace, call, session_id, content["failure_entries"])
            if lost:
                violations.append(_ev(
                    f"session {session_id}: after loading {fixture!r} the failure table at "
                    f"'{point.label}' lacks {len(lost)} of the fixture's "
                    f"{min(len(content['failure_entries']), O.FAILURE_TABLE_CAPACITY)} most recent "
                    f"failure entries (first: {lost[0].get('tool')} {lost[0].get('dedup_key', '')[:24]!r})",
                    (call.index, point.index)))
            changed, point = _changed_entries(trace, call, session_id, content["failure_entries"])
            if changed:
                violations.append(_ev(
                    f"session {session_id}: after loading {fixture!r} {len(changed)} failure entries "
                    f"at '{point.label}' differ from the fixture's (first: {changed[0]})",
                    (call.index, point.index)))
        for event, sid, status in F.turn_returns(trace):
            if sid == session_id and event.index > request.index:
                if status == "failed":
                    violations.append(_ev(
                        f"session {session_id}: the turn continuing from {fixture!r} failed",
                        (call.index, event.index)))
                break
        for event in F.events_between(trace, request.index, F.last_index(trace) + 1, Kind.DRIVER_RAISED):
            origin = _call_of(trace, event)
            if (not event.data.get("expected") and event.data.get("method") in F.TURN_METHODS
                    and origin is not None and F.arg_session(F.driver_args(origin)) == session_id):
                violations.append(_ev(
                    f"session {session_id}: {event.data.get('method')} raised "
                    f"{event.data.get('exception')} after loading {fixture!r}", (call.index, event.index)))
                break
    idle = "no checkpoint fixture was loaded and continued"
    if skipped:
        idle += f" (load step skipped: {skipped[0]})"
    return judge("L1.6", exercised, violations, idle)


def _call_of(trace: Trace, outcome: TraceEvent) -> TraceEvent | None:
    """The DRIVER_CALL a DRIVER_RETURN/DRIVER_RAISED answers (the last one of its method)."""
    found = None
    for event in trace.of_kind(Kind.DRIVER_CALL):
        if event.index < outcome.index and event.data.get("method") == outcome.data.get("method"):
            found = event
    return found


# --------------------------------------------------------------------------- L1.7


def _runtime_faults(trace: Trace) -> list[tuple[TraceEvent, str, dict]]:
    """(event, session, context) of every runtime fault: RUNTIME_FAULT events the
    implementation emitted and injected ``raise`` faults at points after a saved result."""
    found = []
    for event, payload in trace.lifecycle_events():
        if payload.get("type") == EventType.RUNTIME_FAULT.value:
            context = {"execution_id": payload.get("execution_id")} if payload.get("execution_id") else {}
            found.append((event, str(payload.get("session_id", "")), context))
    for event in trace.of_kind(Kind.FAILPOINT):
        if event.data.get("action") in ("raise", "fail_checkpoint") and event.data.get("name") in F.POST_RESULT_FAILPOINTS:
            context = event.data.get("context") if isinstance(event.data.get("context"), dict) else {}
            found.append((event, str(context.get("session_id", "")), context))
    return sorted(found, key=lambda item: item[0].index)


def check_l1_7(trace: Trace) -> Verdict:
    """Each failure class is its own result.

    Exercised: once per executed failure the tool answered with a class (ledger
    ``error_kind``), per rule denial, per call with the key of a rule-denied call served
    under another permission version, and per known result a runtime fault could touch.
    Judged: the class the tool answered is what the store keeps and what the model is told;
    a definite failure (may have partial effects) is never retried automatically, its
    complete ledger output is in the tool message of the session's next model request, and
    other granted calls of its batch still run; unknown is never retried; a corrected
    param_error call is a new operation; a rule denial is permission_denied with a reason,
    and once the permission version changed the same call is not refused as its repeat; a
    runtime fault never turns a known result into unknown."""
    violations: list[Evidence] = []
    exercised = 0
    ops = F.operations(trace)
    listed = list(ops.values())
    for position, op in enumerate(listed):
        view = op.latest
        attempts = F.attempt_rows(op)
        for i, row in enumerate(attempts):
            answered = row.data.get("error_kind")
            if (row.data.get("status") == "error" and answered in ("unknown", "failed")
                    and i + 1 < len(attempts)):
                why = ("a definite failure may already have had partial effects"
                       if answered == "failed" else "its effect is unknown")
                violations.append(_ev(
                    f"{F.describe(op)}: retried automatically after the tool answered "
                    f"{answered!r} ({why})",
                    (row.index, attempts[i + 1].index), (_seq(row), _seq(attempts[i + 1]))))
        row = _executed_failure(op)
        if row is not None and row.data.get("error_kind"):
            kind = str(row.data["error_kind"])
            crash = F.crashed_mid_execution(trace, op, ops)
            if crash is not None and crash.index > row.index:
                # The process died before the host saved what the tool answered: the host
                # cannot know the class, so the honest record is unknown (L4.3) -- once a
                # recovery ran; before that nothing has settled it (found by generation: the
                # second instance of a concurrent turn crashed, and is dropped without one).
                if not any(e.index > crash.index for e in trace.of_kind(Kind.RESTART)):
                    continue
                kind = "unknown"
            seq = _seq(row)
            exercised += 1
            after = [(p, v) for p, v in op.views if p.index > row.index]
            if after:
                point, stored = after[-1]
                if kind == "unknown":
                    if not (stored.reconciliation_required or F.value(stored.outcome) == "unknown"):
                        violations.append(_ev(
                            f"{F.describe(op)}: the tool's result is unknown but the store records "
                            f"outcome {F.value(stored.outcome)!r} without reconciliation",
                            (row.index, point.index), (seq,)))
                elif F.value(stored.failure_kind) != kind:
                    violations.append(_ev(
                        f"{F.describe(op)}: the tool answered {kind!r}, the store keeps failure_kind "
                        f"{F.value(stored.failure_kind)!r}", (row.index, point.index), (seq,)))
            request = F.next_model_request(trace, op.session_id, row.index)
            message = F.tool_message(request, op.tool_call_id) if request is not None else None
            if kind == "failed" and request is not None and message is None and crash is None:
                violations.append(_ev(
                    f"{F.describe(op)}: the next model request carries no result for the definite "
                    f"failure: the model cannot judge it", (row.index, request.index), (seq,)))
            if message is not None:
                if kind != "unknown" and message.get("failure_kind") != kind:
                    violations.append(_ev(
                        f"{F.describe(op)}: the tool answered {kind!r}, the model was told "
                        f"{message.get('failure_kind')!r}", (row.index, request.index), (seq,)))
                output = str(row.data.get("output") or "")
                if kind == "failed" and output and output not in str(message.get("content", "")):
                    violations.append(_ev(
                        f"{F.describe(op)}: the definite failure's complete output ({len(output)} "
                        f"characters in the ledger) did not reach the model in the next request",
                        (row.index, request.index), (seq,)))
            if kind == "param_error":
                for later in listed[position + 1:]:
                    # "Corrected" means the executing arguments changed: a Bash call that
                    # only rewords its display-only description is the same operation.
                    if (later.session_id == op.session_id and later.tool == op.tool
                            and F.expected_dedup_key(trace, later.session_id, later.tool, later.args)
                            != F.expected_dedup_key(trace, op.session_id, op.tool, op.args)
                            and later.latest is not None
                            and F.value(later.latest.decided_by) == DecisionSource.REPEAT_GUARD.value
                            # refused for its own key's failures, not as a repeat of this one
                            # (found by generation: the corrected call's own earlier failure,
                            # or an earlier call of its key that a crash or the tool left unknown)
                            and not O.must_refuse(trace, listed, later)
                            and not any(
                                prior.precedes(later) and prior.session_id == later.session_id
                                and prior.tool == later.tool and _failure_any(prior)
                                and F.expected_dedup_key(trace, prior.session_id, prior.tool, prior.args)
                                == F.expected_dedup_key(trace, later.session_id, later.tool, later.args)
                                for prior in listed)):
                        violations.append(_ev(
                            f"{F.describe(later)}: a corrected call after the parameter error of "
                            f"{op.tool_call_id} was refused as a repeat",
                            (row.index, later.latest_point.index), (seq,)))
            if kind == "failed" and op.served:
                violations += _abandoned_batch(trace, ops, op, row)
        elif (
            F.pre_call_denied(op)
            and F.value(view.decided_by) in RULE_DENIAL_SOURCES
            and not F.never_decided(trace, op)  # only the record's pre-decision value
        ):
            exercised += 1
            point = op.latest_point
            if F.value(view.failure_kind) != "permission_denied":
                violations.append(_ev(
                    f"{F.describe(op)}: denied by {F.value(view.decided_by)} but stored with "
                    f"failure_kind {F.value(view.failure_kind)!r}, not 'permission_denied'",
                    (point.index,)))
            if not view.reason.strip():
                violations.append(_ev(
                    f"{F.describe(op)}: a rule denial without a reason naming the rule", (point.index,)))
            if op.served:
                request = F.next_model_request(trace, op.session_id, op.served[0].end_index)
                message = F.tool_message(request, op.tool_call_id) if request is not None else None
                if message is not None and message.get("failure_kind") != "permission_denied":
                    violations.append(_ev(
                        f"{F.describe(op)}: the model was told failure_kind "
                        f"{message.get('failure_kind')!r} for a rule denial",
                        (op.served[0].end_index, request.index)))
    for earlier, later in _retries_after_change(trace, listed):
        exercised += 1
        if F.value(later.latest.decided_by) == DecisionSource.REPEAT_GUARD.value:
            violations.append(_ev(
                f"{F.describe(later)}: refused as a repeat of the denied {earlier.tool_call_id} "
                f"although the permission version changed (v{earlier.latest.identity.permission_version}"
                f" -> v{later.latest.identity.permission_version}): a denied call may be retried "
                f"once the permission changed", (earlier.latest_point.index, later.latest_point.index)))
    for fault, session_id, context in _runtime_faults(trace):
        victims = _fault_victims(trace, ops, fault.index, session_id, context)
        for op in victims:
            exercised += 1
            for point, stored in op.views:
                if point.index > fault.index and (
                    stored.reconciliation_required or F.value(stored.outcome) == "unknown"
                ):
                    violations.append(_ev(
                        f"{F.describe(op)}: its known result became unknown/reconciliation_required "
                        f"after a runtime fault", (fault.index, point.index), op.ledger_seqs))
                    break
    return judge("L1.7", exercised, violations, "no failure of any class happened")


def _retries_after_change(trace: Trace, listed: list[F.Op]) -> list[tuple[F.Op, F.Op]]:
    """(denied call, later call with the same key under another permission version)."""
    found = []
    for position, earlier in enumerate(listed):
        if not (F.pre_call_denied(earlier) and F.value(earlier.latest.decided_by) in STRICT_DENIAL_SOURCES):
            continue
        key = O.dedup_key(trace, earlier.session_id, earlier.tool, earlier.args)
        for later in listed[position + 1:]:
            if (later.session_id == earlier.session_id and later.tool == earlier.tool
                    and later.latest is not None and later.served
                    and later.latest.identity.permission_version
                    != earlier.latest.identity.permission_version
                    and O.dedup_key(trace, later.session_id, later.tool, later.args) == key):
                found.append((earlier, later))
                break
    return found


def _fault_victims(trace: Trace, ops, index: int, session_id: str, context: dict) -> list[F.Op]:
    """Operations with a known result before a runtime fault: the one its context names,
    else the last one executed (in the fault's session, when known) before it."""
    known = []
    for op in ops.values():
        rows = [r for r in F.attempt_rows(op) if r.index < index]
        if not rows or (session_id and op.session_id != session_id):
            continue
        if rows[-1].data.get("error_kind") == "unknown" or F.crashed_mid_execution(trace, op, ops):
            continue
        known.append((rows[-1].index, op))
    if not known:
        return []
    named = [op for _, op in known if F.context_names_op(context, op)]
    if named:
        return named
    if F.context_names_op(context, known[-1][1]) is False:
        return []
    return [max(known, key=lambda item: item[0])[1]]


def _paused_at_a_wait(trace: Trace, session_id: str, after: int) -> bool:
    """Did the session's turn stop at an approval prompt shown after ``after`` that nobody
    answered? Its batch's other calls then wait for the owner (found by generation: a
    sandboxed attempt of the batch asked to escalate, and the run ended before an answer)."""
    answered = {str(e.data.get("args", {}).get("wait_id", "")) for e in trace.of_kind(Kind.DRIVER_CALL)
                if e.data.get("method") == "answer_approval" and not e.data.get("skipped")}
    return any(str(p.data.get("wait_id", "")) not in answered
               for p in trace.of_kind(Kind.APPROVAL_PROMPT)
               if p.index > after and p.data.get("session_id") == session_id)


def _abandoned_batch(trace: Trace, ops, failed: F.Op, row: TraceEvent) -> list[Evidence]:
    """Calls served after ``failed`` in the same stream, granted outright, yet never run."""
    served = failed.served[0]
    batch = [s for s in F.served_calls(trace) if s.end_index == served.end_index]
    ids = [s.tool_call_id for s in batch]
    later = batch[ids.index(failed.tool_call_id) + 1:] if failed.tool_call_id in ids else []
    cut = (
        not trace.completed
        or F.events_between(trace, served.end_index, F.last_index(trace) + 1, Kind.CRASH, Kind.HANG)
        or any(e.data.get("method") == "cancel" for e in trace.of_kind(Kind.DRIVER_CALL)
               if e.index > served.end_index)
    )
    if cut or _paused_at_a_wait(trace, served.session_id, served.end_index):
        return []
    found = []
    for sibling in later:
        op = ops.get((sibling.session_id, sibling.tool_call_id))
        if op is None or op.rows or op.unavailable:
            continue
        # Granted when served and still under the rules in force at the end: a rule change
        # in between is re-checked before the call runs ("已生成的旧调用仍须经过最新权限检查").
        # (and under every rule set in force in between: a change while the batch ran may
        # have stopped granting it for a while; found by generation)
        between = [state.start + 1 for state in F.rule_timeline(trace, op.session_id)
                   if served.end_index < state.start <= F.last_index(trace)]
        if any(F.decision_at(trace, op, at).permission is not Permission.ALLOW
               for at in (served.end_index, *between, F.last_index(trace) + 1)):
            continue
        if op.latest is not None and F.value(op.latest.decided_by) in (
            DecisionSource.REPEAT_GUARD.value, DecisionSource.REVALIDATION.value,
            DecisionSource.CANCELLATION.value,
        ):
            continue
        found.append(_ev(
            f"{F.describe(op)}: granted by an exact rule but never run after the definite failure "
            f"of {failed.tool_call_id} in the same batch", (row.index, served.end_index), (_seq(row),)))
    return found


# --------------------------------------------------------------------------- L1.8


def check_l1_8(trace: Trace) -> Verdict:
    """Bounded, safe automatic retry.

    Exercised: an operation whose attempt was refused by the world (tool unavailable) or
    answered transient, or that the ledger shows attempted more than once. Judged: at most
    1 + ``auto_retries_max`` attempts, and a retry follows only an attempt that certainly did
    not execute (tool unavailable) or a transient error of a tool declared idempotent."""
    violations: list[Evidence] = []
    exercised = 0
    for op in F.operations(trace).values():
        attempts = sorted([*F.attempt_rows(op), *op.unavailable], key=lambda e: e.index)
        if not attempts:
            continue
        transient = any(
            a.kind == Kind.TOOL_UNAVAILABLE or a.data.get("error_kind") == "transient" for a in attempts
        )
        if not transient and len(attempts) == 1:
            continue
        exercised += 1
        limit = F.thresholds(trace, op.session_id).auto_retries_max
        rows = tuple(_seq(a) for a in attempts if a.kind == Kind.TOOL_EXECUTED)
        if len(attempts) > 1 + limit:
            violations.append(_ev(
                f"{F.describe(op)}: {len(attempts)} attempts, more than 1 + auto_retries_max ({limit})",
                tuple(a.index for a in attempts), rows))
        idempotent = F.is_idempotent(trace, op.tool, op.session_id)
        for previous, current in zip(attempts, attempts[1:]):
            if previous.kind == Kind.TOOL_UNAVAILABLE:
                continue
            kind = previous.data.get("error_kind")
            if kind == "transient" and idempotent:
                continue
            why = (
                "the tool is not declared idempotent" if kind == "transient"
                else f"the previous attempt ended {previous.data.get('status')!r}"
                + (f" ({kind})" if kind else "") + " and may have executed"
            )
            violations.append(_ev(
                f"{F.describe(op)}: retried automatically although {why}",
                (previous.index, current.index),
                tuple(_seq(a) for a in (previous, current) if a.kind == Kind.TOOL_EXECUTED)))
    return judge("L1.8", exercised, violations, "no transient failure or retry happened")


# --------------------------------------------------------------------------- catalogue


CRITERIA: tuple[Criterion, ...] = (
    Criterion(
        id="L1.1",
        stage=STAGE,
        title="Failure table capacity",
        statement=(
            "The recent-failure table never holds more than its fixed capacity of 16, "
            "failures beyond it are still recorded, every checkpoint stays within capacity, "
            "and the durable event log keeps the full failure history."
        ),
        seed_clause=(
            "近期失败表与检查点统一限制为 16 条，新增失败不会使检查点容量溢出。 … "
            "近期失败表使用固定容量；完整历史保留在事件记录中。"
        ),
        check=check_l1_1,
    ),
    Criterion(
        id="L1.2",
        stage=STAGE,
        title="Eviction changes nothing else",
        statement=(
            "Evicting entries from the recent-failure table resets no denial count and "
            "changes no stored operation or permission; a call refused as a repeat before "
            "the eviction is still refused after it."
        ),
        seed_clause="存储淘汰不重置累计拒绝计数，也不改变权限。",
        check=check_l1_2,
    ),
    Criterion(
        id="L1.3",
        stage=STAGE,
        title="Bash: description excluded, and only it",
        statement=(
            "For Bash only the display-only description is left out of the repeat/dedup key; "
            "command, working directory and other execution fields stay in, and rewording the "
            "description does not reset the repeat judgement of a failed or denied call."
        ),
        seed_clause=(
            "Bash 只排除明确属于显示用途的 description，保留 command、工作目录和权限等执行字段； … "
            "改描述不重置判断"
        ),
        check=check_l1_3,
    ),
    Criterion(
        id="L1.4",
        stage=STAGE,
        title="User tools keep their fields",
        statement=(
            "For every tool other than Bash, a field that happens to be named description is "
            "part of the dedup key like any other field."
        ),
        seed_clause="不能对用户工具任意删除同名字段，",
        check=check_l1_4,
    ),
    Criterion(
        id="L1.5",
        stage=STAGE,
        title="No shell-equivalence guessing",
        statement=(
            "Commands whose text differs (flag order, extra spaces, case) are different "
            "operations: no normalisation merges their keys or their repeat judgements."
        ),
        seed_clause="不能猜测任意 Shell 脚本是否等价。",
        check=check_l1_5,
    ),
    Criterion(
        id="L1.6",
        stage=STAGE,
        title="Old checkpoints readable",
        statement=(
            "A valid checkpoint written by an earlier format version loads with its "
            "conversation and its recent-failure entries, and the session continues from it."
        ),
        seed_clause="旧合法检查点可读。",
        check=check_l1_6,
        required_features=(Feature.CHECKPOINT_IMPORT,),
    ),
    Criterion(
        id="L1.7",
        stage=STAGE,
        title="Failure classes are distinct results",
        statement=(
            "Parameter errors, permission denials, transient faults, definite failures, unknown "
            "results and runtime faults are kept and reported as distinct classes, each with its "
            "own consequence: corrected parameters make a new operation, denials name their rule "
            "and may be retried once the permission changed, definite failures (possibly with "
            "partial effects) are never retried automatically, return their complete output to the "
            "model and let other approved work go on, unknown results are never retried, runtime "
            "faults never make a known result unknown."
        ),
        seed_clause=(
            "参数错误：返回结构化错误，允许修正实际参数。 … "
            "权限拒绝：说明规则和有效解决方式；未改变权限或实际条件，不因修改描述重复尝试。 … "
            "确定失败：返回完整必要输出供模型判断；其他获准且有意义的工作继续。 … "
            "结果未知：保留操作证据，进入核对流程，不能直接重试。 … "
            "运行时故障：单独报告，不能把已知工具结果重新变成未知。"
        ),
        check=check_l1_7,
    ),
    Criterion(
        id="L1.8",
        stage=STAGE,
        title="Bounded, safe automatic retry",
        statement=(
            "A transient failure is retried automatically only when the operation certainly did "
            "not execute or the tool declares reliable idempotency, and never more than the "
            "configured number of times."
        ),
        seed_clause="临时故障：只有确定未执行或具备可靠幂等支持时，才进行有次数限制的自动重试。",
        check=check_l1_8,
    ),
)
