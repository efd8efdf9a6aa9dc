"""What a restarted instance does with what it finds in the store (docs/lifecycle.md).

| found                                   | action                                              |
|-----------------------------------------|-----------------------------------------------------|
| start recorded, no result               | outcome ``unknown``, reconciliation required; never |
|                                         | re-executed (L4.3, X4, L4.9)                        |
| result saved, not in a checkpoint       | fold it into a new checkpoint, no tool call (L4.1)  |
| result saved, projection missing        | replay the projection only (L4.2)                   |
| model request without an end            | end it ``incomplete`` (one end per request, M1)     |
| wait committed but never shown          | show it; pending waits stay pending and answerable  |
| turn interrupted while running          | resume it; prepared/decided operations carry on     |
|                                         | from their stored decision                          |

Guarantees: recovery calls no tool and sends no model request for a step already taken; it
changes no counter (counters change only with decisions and answers, each applied once);
it never marks a task complete on its own: a resumed turn ends as its loop says. Running it
twice is harmless. It assumes no other live instance is mid-operation on the same data dir
(it is called after a restart).
"""

from __future__ import annotations

from harness.contract import (
    EventType,
    FailureKind,
    ModelRequestStatus,
    Outcome,
    RecoveryReport,
    TurnStatus,
    World,
)
from reference_impl import approvals, model_requests, records, results
from reference_impl.events import Signals
from reference_impl.execution import OperationPipeline
from reference_impl.failure_policy import ToolOutcome
from reference_impl.policy import RestartAction, RuntimePolicy
from reference_impl.records import Stage
from reference_impl.store import Store
from reference_impl.turns import TurnLoop

UNCONFIRMED_REASON = (
    "the execution start was recorded but no result was saved before the process stopped; "
    "the tool may have run: reconcile its effects before acting again"
)


def recover(
    store: Store, world: World, signals: Signals, pipeline: OperationPipeline, turns: TurnLoop
) -> RecoveryReport:
    _apply_restart_policy(store, world, signals, pipeline)
    unknown = _mark_unconfirmed_as_unknown(store, world, pipeline)
    _end_interrupted_model_requests(store, world, signals)
    completed = _fold_unsaved_results(store, pipeline)
    replayed = _replay_missing_projections(store, pipeline)
    for wait in approvals.unprompted(store.connection):
        pipeline.prompt(wait, with_failpoint=False)
    running = tuple(
        row["session_id"]
        for row in store.connection.execute(
            "SELECT session_id FROM sessions WHERE turn_status = ? ORDER BY rowid",
            (TurnStatus.RUNNING.value,),
        ).fetchall()
    )
    report = RecoveryReport(
        results_completed=completed,
        projections_replayed=replayed,
        reconciliation_required=unknown,
        turns_resumed=running,
    )
    for session_id in _sessions(store):
        signals.emit(EventType.RECOVERED, session_id,
                     results_completed=list(completed), projections_replayed=list(replayed),
                     reconciliation_required=list(unknown),
                     turn_resumed=session_id in running)
    for session_id in running:
        turns.drive(session_id)
    # A cancelled turn's emitted calls are recorded (not executed), never left undecided:
    # the turn loop does this when it sees the cancellation, recovery when a crash came first.
    for row in store.connection.execute(
            "SELECT session_id FROM sessions WHERE cancelled = 1 AND turn_status != ?"
            " ORDER BY rowid", (TurnStatus.RUNNING.value,)).fetchall():
        turns.settle_pending_calls(row["session_id"])
    return report


def _mark_unconfirmed_as_unknown(
    store: Store, world: World, pipeline: OperationPipeline
) -> tuple[str, ...]:
    marked = []
    rows = store.connection.execute(
        "SELECT execution_id FROM operations WHERE stage = ? ORDER BY rowid",
        (Stage.STARTED.value,),
    ).fetchall()
    unknown = ToolOutcome(Outcome.UNKNOWN, FailureKind.UNKNOWN, True, True, UNCONFIRMED_REASON)
    for row in rows:
        op = records.load_operation(store.connection, row["execution_id"])
        with store.transaction() as conn:
            saved = results.save(conn, records.load_session(conn, op.session_id), op, unknown,
                                 from_stage=Stage.STARTED, attempts=1, now=world.now())
        if saved:
            pipeline.announce_result(op.session_id, op.execution_id)
            marked.append(op.execution_id)
    return tuple(marked)


def _end_interrupted_model_requests(store: Store, world: World, signals: Signals) -> None:
    with store.transaction() as conn:
        ended = model_requests.end_interrupted(conn, world.now())
    for session_id, request_id in ended:
        signals.emit(EventType.MODEL_REQUEST_ENDED, session_id, request_id=request_id,
                     status=ModelRequestStatus.INCOMPLETE.value, interrupted=True)


def _fold_unsaved_results(store: Store, pipeline: OperationPipeline) -> tuple[str, ...]:
    sessions = store.connection.execute(
        "SELECT DISTINCT session_id FROM operations WHERE stage = ?"
        " AND checkpoint_sequence IS NULL ORDER BY session_id",
        (Stage.RECORDED.value,),
    ).fetchall()
    folded: list[str] = []
    for row in sessions:
        folded.extend(pipeline.fold(row["session_id"], reason="recovery").execution_ids)
    return tuple(folded)


def _replay_missing_projections(store: Store, pipeline: OperationPipeline) -> tuple[str, ...]:
    rows = store.connection.execute(
        "SELECT execution_id FROM operations WHERE stage = ? AND delivery = 'recorded'"
        " ORDER BY rowid",
        (Stage.RECORDED.value,),
    ).fetchall()
    for row in rows:
        pipeline.project(row["execution_id"], with_failpoint=False)
    return tuple(row["execution_id"] for row in rows)


def _sessions(store: Store) -> tuple[str, ...]:
    rows = store.connection.execute("SELECT session_id FROM sessions ORDER BY rowid").fetchall()
    return tuple(row["session_id"] for row in rows)


# --------------------------------------------------------------------------- policy seam
# The reference needs nothing here (its policy is the table above). A profile of a runtime
# that re-runs interrupted calls, marks them failed, or keeps pending approvals in memory
# only, gets that behaviour from the same store: the started operations go back to
# ``decided`` so the resumed turn runs them again (or are saved as definite failures the
# resumed turn hands to the model), and pending waits are refused as lost.

RERUN_REASON = "the process restarted while the call was running; it runs again"
LOST_WAIT_REASON = (
    "the process restarted; pending approval requests were held in memory only and are gone"
)


def _apply_restart_policy(
    store: Store, world: World, signals: Signals, pipeline: OperationPipeline
) -> None:
    policy: RuntimePolicy = pipeline.policy
    if policy.incomplete_calls_on_restart is RestartAction.RERUN:
        _rerun_started(store, policy.restart_reruns_max)
    if policy.incomplete_calls_on_restart is RestartAction.MARK_FAILED:
        _mark_started_failed(store, world, pipeline)
    if not policy.waits_survive_restart:
        _drop_pending_waits(store, world, signals, pipeline)


def _rerun_started(store: Store, reruns_max: int) -> None:
    """Started operations without a result go back to the stage they were started from
    (``decided``: their allow stands; ``escalating``: their approved escalation stands) and
    their turn to ``running``; past ``reruns_max`` re-runs of one call it is left started,
    so the reference's marking (unknown, reconciliation required) settles it."""
    with store.transaction() as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS restart_reruns ("
                     " execution_id TEXT PRIMARY KEY, reruns INTEGER NOT NULL)")
        rows = conn.execute(
            "SELECT o.execution_id, o.session_id, COALESCE(r.reruns, 0) AS reruns"
            " FROM operations o LEFT JOIN restart_reruns r USING (execution_id)"
            " WHERE o.stage = ? ORDER BY o.rowid",
            (Stage.STARTED.value,),
        ).fetchall()
        for row in rows:
            if row["reruns"] >= reruns_max:
                continue
            conn.execute("INSERT INTO restart_reruns (execution_id, reruns) VALUES (?, 1)"
                         " ON CONFLICT (execution_id) DO UPDATE SET reruns = reruns + 1",
                         (row["execution_id"],))
            # Back to the stage it was started from: an approved escalation runs outside the
            # sandbox again, anything else from its allow decision.
            escalated = approvals.for_operation(conn, row["execution_id"], approvals.ESCALATION)
            restart_from = Stage.ESCALATING if escalated is not None else Stage.DECIDED
            conn.execute("UPDATE operations SET stage = ?, reason = ? WHERE execution_id = ?"
                         " AND stage = ?", (restart_from.value, RERUN_REASON,
                                            row["execution_id"], Stage.STARTED.value))
            conn.execute("UPDATE sessions SET turn_status = ? WHERE session_id = ?",
                         (TurnStatus.RUNNING.value, row["session_id"]))


INTERRUPTED_REASON = "Tool execution interrupted"


def _mark_started_failed(store: Store, world: World, pipeline: OperationPipeline) -> None:
    """Started operations without a result are saved as definite failures (executed, no
    reconciliation) with the reason "Tool execution interrupted"; their turn resumes and
    the model sees that result."""
    failed = ToolOutcome(Outcome.FAILED, FailureKind.FAILED, True, False, INTERRUPTED_REASON)
    started = Stage.STARTED
    query = "SELECT execution_id FROM operations WHERE stage = ? ORDER BY rowid"
    for row in store.connection.execute(query, (started.value,)).fetchall():
        op = records.load_operation(store.connection, row["execution_id"])
        with store.transaction() as conn:
            session = records.load_session(conn, op.session_id)
            saved = results.save(conn, session, op, failed, from_stage=started, attempts=1,
                                 now=world.now())
            if saved:
                conn.execute("UPDATE sessions SET turn_status = ? WHERE session_id = ?",
                             (TurnStatus.RUNNING.value, op.session_id))
        if saved:
            pipeline.announce_result(op.session_id, op.execution_id)


def _drop_pending_waits(
    store: Store, world: World, signals: Signals, pipeline: OperationPipeline
) -> None:
    """Every pending wait is closed as refused (the operation is not run; an escalation's
    sandboxed result stands) and its turn goes on running."""
    with store.transaction() as conn:
        pending = conn.execute(
            "SELECT wait_id FROM approval_waits WHERE status = 'pending' ORDER BY rowid"
        ).fetchall()
        dropped = []
        for row in pending:
            wait = approvals.load(conn, row["wait_id"])
            if approvals.withdraw(conn, wait, LOST_WAIT_REASON, redecide=False, now=world.now()):
                dropped.append(wait)
                conn.execute("UPDATE sessions SET turn_status = ? WHERE session_id = ?",
                             (TurnStatus.RUNNING.value, wait.session_id))
    for wait in dropped:
        signals.emit(EventType.APPROVAL_ANSWERED, wait.session_id, wait.execution_id,
                     wait_id=wait.wait_id, approved=False, withdrawn=True)
        if wait.purpose == approvals.ESCALATION:  # the sandboxed attempt's result is final
            pipeline.announce_result(wait.session_id, wait.execution_id)
