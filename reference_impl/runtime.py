"""The ``Runtime`` driver: one running instance of the reference over one data dir.

Guarantees: every driver call is a short transaction followed, where the call continues
the agent loop, by :class:`~reference_impl.turns.TurnLoop`; the instance keeps no state of
its own beyond its connection, so a second instance on the same data dir, or a restarted
one, sees and continues exactly what this one committed. ``update_rules`` and ``cancel``
may be called re-entrantly (from inside a world call or a failpoint of this instance): no
transaction is ever open at those moments.
"""

from __future__ import annotations

from harness.contract import (
    FAILURE_TABLE_CAPACITY,
    DecisionSource,
    EventType,
    Message,
    Permission,
    RecoveryReport,
    Rule,
    SessionConfig,
    ToolCall,
    TurnResult,
    TurnStatus,
    World,
    canonical_json,
    to_json,
)
from reference_impl import (
    approvals,
    checkpoint_codec,
    continuation,
    failure_policy,
    records,
    recovery,
)
from reference_impl.errors import RuntimeClosedError, UnknownSessionError, UnknownWaitError
from reference_impl.events import Signals
from reference_impl.execution import OperationPipeline, StepResult
from reference_impl.model_requests import ModelRequester
from reference_impl.policy import REFERENCE, RuntimePolicy
from reference_impl.store import Durability, Store
from reference_impl.turns import TurnLoop
from reference_impl.watched_world import WatchedWorld


class ReferenceRuntime:
    def __init__(self, data_dir: str, world: World, policy: RuntimePolicy = REFERENCE) -> None:
        self._store = Store.open(data_dir)
        world = WatchedWorld(world, self._store.rows)
        self._world = world
        self._signals = Signals(world, self._store)
        self._pipeline = OperationPipeline(self._store, world, self._signals, policy)
        self._turns = TurnLoop(
            self._store, world, self._signals, self._pipeline,
            ModelRequester(self._store, world, self._signals),
        )
        self._closed = False

    # ------------------------------------------------------------------ sessions

    def open_session(self, config: SessionConfig) -> None:
        self._require_open()
        with self._store.transaction() as conn:
            _insert_session(conn, config)  # an existing session keeps its state

    def run_turn(self, session_id: str, user_text: str) -> TurnResult:
        self._require_open()
        records.load_session(self._store.connection, session_id)
        message = Message("user", user_text)
        while True:
            # Calls of an earlier turn still pending (interrupted, waiting for an answer, or
            # held by another instance) are settled first, so their results reach the model
            # before the new message; the message answers "no" to every question they ask.
            if self._settle_before_message(session_id) is StepResult.DEFERRED:
                return self._turns.end(session_id, TurnStatus.DEFERRED, persist=False)
            if records.load_session(self._store.connection, session_id).cancelled:
                # The message clears the session's cancellation: committed on its own, so that
                # a cancellation arriving before the first model request is told from this one.
                # ORDERED: nobody relies on it before the turn's next synced commit.
                with self._store.transaction(Durability.ORDERED) as conn:
                    continuation.append(conn, session_id, message,
                                        reason="user_message", now=self._world.now())
                    _start_running(conn, session_id)
                return self._turns.drive(session_id)
            # The common case: the message is committed with the first request's start, so
            # a crash before it loses the unacknowledged turn call as a whole (the store as
            # before the call; docs/contract.md, "A turn call cut before its first commit").
            result = self._turns.open_turn(session_id, message)
            if result is not None:
                return result

    def _settle_before_message(self, session_id: str) -> StepResult:
        """Settle what an earlier turn left (see :meth:`run_turn`); DEFERRED when another
        instance holds one of its calls."""
        self._refuse_unanswered_waits(session_id)
        while True:
            settled = self._turns.settle_pending_calls(session_id)
            if settled is StepResult.DEFERRED:
                return settled
            # A later call of the same answer asked in turn: the message answers it too
            # (nothing left to refuse would mean a wait without a pending record: stop).
            if settled is not StepResult.AWAITING_APPROVAL or not self._refuse_unanswered_waits(session_id):
                return settled

    def _refuse_unanswered_waits(self, session_id: str) -> bool:
        """A new message while calls wait for approval is the owner moving on: each wait is
        answered "no" (its call is not executed), so that its result reaches the model before
        the message; a model request never carries a call without its result (X3)."""
        if not approvals.pending_of_session(self._store.connection, session_id):
            return False  # the common case: nothing waits, and no transaction is opened
        with self._store.transaction() as conn:
            refused = [wait for wait in approvals.pending_of_session(conn, session_id)
                       if approvals.apply_answer(conn, wait, False, now=self._world.now(),
                                                 rejection_reason=approvals.MOVED_ON_REASON)]
            if refused:  # a crash from here on must find the turn to resume, not awaiting
                conn.execute("UPDATE sessions SET turn_status = ? WHERE session_id = ?"
                             " AND turn_status = ?", (TurnStatus.RUNNING.value, session_id,
                                                      TurnStatus.AWAITING_APPROVAL.value))
        for wait in refused:
            self._signals.emit(EventType.APPROVAL_ANSWERED, wait.session_id, wait.execution_id,
                               wait_id=wait.wait_id, approved=False, purpose=wait.purpose,
                               by="new_message")
            if wait.purpose == approvals.ESCALATION:  # the sandboxed attempt's result is final
                self._pipeline.announce_result(wait.session_id, wait.execution_id)
            else:
                self._signals.emit(
                    EventType.PERMISSION_DECIDED, wait.session_id, wait.execution_id,
                    permission=Permission.DENY.value, decided_by=DecisionSource.APPROVAL.value)
        return bool(refused)

    def answer_approval(self, wait_id: str, approve: bool) -> TurnResult:
        self._require_open()
        with self._store.transaction() as conn:
            wait = approvals.load(conn, wait_id)
            if wait is None:
                raise UnknownWaitError(f"no approval wait {wait_id!r} in this store")
            applied = approvals.apply_answer(conn, wait, approve, now=self._world.now())
            if applied:
                _start_running(conn, wait.session_id)
        if applied:
            self._signals.emit(EventType.APPROVAL_ANSWERED, wait.session_id, wait.execution_id,
                               wait_id=wait_id, approved=approve, purpose=wait.purpose)
            if wait.purpose == approvals.ESCALATION:
                if not approve:  # the sandboxed attempt's result is final now
                    self._pipeline.announce_result(wait.session_id, wait.execution_id)
            else:
                self._signals.emit(
                    EventType.PERMISSION_DECIDED, wait.session_id, wait.execution_id,
                    permission=(Permission.ALLOW if approve else Permission.DENY).value,
                    decided_by=DecisionSource.APPROVAL.value)
        if not applied:
            # A lost wait (answered before, or closed by a rule change): the answer changes
            # nothing and drives nothing (docs/contract.md). Driving the session here would
            # re-ask the model after a request that failed: a hidden retry (M4; found by
            # generation: a turn ended by a transport error, then an answer to its lost wait).
            session = records.load_session(self._store.connection, wait.session_id)
            return TurnResult(wait.session_id, session.turn_status, "")
        # The answered operation is carried to its result first, even if the conversation
        # has moved on since.
        op = records.load_operation(self._store.connection, wait.execution_id)
        call = ToolCall(op.tool_call_id, op.tool, op.args)
        if self._pipeline.run(wait.session_id, call) is StepResult.DEFERRED:
            return self._turns.end(wait.session_id, TurnStatus.DEFERRED, persist=False)
        return self._turns.drive(wait.session_id)

    def update_rules(
        self, session_id: str, rules: tuple[Rule, ...], permission_version: int
    ) -> None:
        self._require_open()
        with self._store.transaction() as conn:
            records.load_session(conn, session_id)
            # The caller numbers the versions; any decision bound to another version is
            # re-checked before its operation runs.
            conn.execute(
                "UPDATE sessions SET rules_json = ?, permission_version = ? WHERE session_id = ?",
                (canonical_json(to_json(tuple(rules))), permission_version, session_id),
            )

    def cancel(self, session_id: str) -> None:
        self._require_open()
        with self._store.transaction() as conn:
            records.load_session(conn, session_id)
            conn.execute(
                "UPDATE sessions SET cancelled = 1, turn_status = CASE WHEN turn_status IN (?, ?)"
                " THEN ? ELSE turn_status END WHERE session_id = ?",
                (TurnStatus.RUNNING.value, TurnStatus.AWAITING_APPROVAL.value,
                 TurnStatus.CANCELLED.value, session_id),
            )

    # ------------------------------------------------------------------ restart, import

    def recover(self) -> RecoveryReport:
        self._require_open()
        return recovery.recover(self._store, self._world, self._signals, self._pipeline,
                                self._turns)

    def load_checkpoint(self, session_id: str, data: bytes) -> None:
        """Continue ``session_id`` from a checkpoint of any supported format version."""
        self._require_open()
        loaded = checkpoint_codec.decode(data)
        with self._store.transaction() as conn:
            try:
                session = records.load_session(conn, session_id)
            except UnknownSessionError:
                _insert_session(conn, SessionConfig(session_id=session_id))
                session = records.load_session(conn, session_id)
            failure_policy.replace_table(conn, session_id, loaded.failure_entries,
                                         FAILURE_TABLE_CAPACITY)
            sequence = continuation.save(
                conn, session_id, loaded.messages, last_execution_id=loaded.last_execution_id,
                reason=f"import_v{loaded.format_version}", now=self._world.now(),
            )
            records.set_turn_status(conn, session_id, TurnStatus.IDLE)
        self._signals.emit(EventType.CHECKPOINT_SAVED, session_id, sequence=sequence,
                           imported_format_version=loaded.format_version)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._store.close()

    def _require_open(self) -> None:
        if self._closed:
            raise RuntimeClosedError("this runtime instance was closed; open a new one")
        if self._store.rows is not None:  # each driver call: others may have run since
            self._store.rows.others_may_have_run()


def _insert_session(conn, config: SessionConfig) -> None:
    conn.execute(
        "INSERT OR IGNORE INTO sessions (session_id, config_json, rules_json,"
        " permission_version, turn_status, cancelled) VALUES (?, ?, ?, ?, ?, 0)",
        (config.session_id, canonical_json(to_json(config)),
         canonical_json(to_json(config.rules)), config.permission_version,
         TurnStatus.IDLE.value),
    )


def _start_running(conn, session_id: str) -> None:
    records.set_turn_status(conn, session_id, TurnStatus.RUNNING, uncancel=True)
