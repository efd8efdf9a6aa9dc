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
