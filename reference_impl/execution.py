"""The operation pipeline: prepare -> decide -> (wait) -> revalidate -> start -> execute ->
save result -> diagnostics -> checkpoint -> project (docs/lifecycle.md).

Guarantees:

* each step is a transaction that moves the operation from one stage to the next with
  ``UPDATE ... WHERE stage = <expected>``: a step applies at most once whoever runs it,
  so a replayed delivery, a restarted instance or a concurrent second instance continues
  from the stored stage instead of redoing it (X2, L4.10); only the instance whose start
  claim succeeded ever calls the tool;
* revalidation right before the start rechecks cancellation, the argument digest, the
  approval of this very operation, an ``expect_sha`` file precondition and the permission
  version; after a rule change only the deterministic layers re-decide (a deny refuses, an
  exact grant may still allow, anything else voids the old decision) (L2.8, L2.9, L5.2);
* the durable start record (``execution_started``) is committed before ``execute_tool``
  (L4.6, X5) and re-checks, atomically, that nothing changed since revalidation;
* a sandboxed run that asks to escalate keeps its result (failed, started: effects may be
  partial); an owner who can answer gets an approval wait of its own, and only an approved
  escalation runs again, outside the sandbox, once (L2.10, L2.11);
* a decision that is not ``allow`` never reaches the tool; a refusal is saved as a result
  record with ``execution_started=false`` and goes back to the model (X3);
* the result record is committed before the checkpoint; ``RESULT_SAVED`` is emitted after
  that commit; a failure writing diagnostics or publishing to the UI is a
  ``runtime_fault`` and a failing checkpoint build is ``checkpoint_failed``: neither changes
  the saved result, and the result still reaches the model and the UI (L4.4, L4.7);
* no transaction is open across a world call or a failpoint, and every failpoint of the
  catalogue is called at the step the lifecycle names; ``SimulatedCrash`` is never caught;
* an allowed operation takes five commits, the fewest the failpoint preconditions allow:
  prepared with its decision (every layer but the classifier decides inside the prepare
  transaction; the classifier's review is a world call, so it gets a commit of its own),
  started, result, checkpoint with the diagnostics (in a savepoint: their failure undoes only
  their row), projected. Two of them are synced (an fsync: start, result); prepared,
  checkpoint and projected are ordered (:class:`~reference_impl.store.Durability`): a power
  cut that loses them is a crash one step earlier, which recovery already handles (a lost
  checkpoint is folded again from the saved results, as after a failed build).
"""

from __future__ import annotations

import contextlib
import enum
import sqlite3
from dataclasses import dataclass

from harness.contract import (
    ClassifierOutcome,
    DecisionSource,
    Delivery,
    EventType,
    Failpoint,
    FailureKind,
    Mode,
    Outcome,
    Permission,
    ToolCall,
    ToolInvocation,
    ToolKind,
    ToolResult,
    ToolUnavailable,
    TurnStatus,
    WaitStatus,
    World,
    args_digest,
    canonical_json,
    execution_id_for,
    result_digest,
    to_json,
)
from reference_impl import (
    approvals,
    continuation,
    denial_counters,
    failure_policy,
    records,
    results,
)
from reference_impl.approvals import WaitRecord
from reference_impl.classifier_gate import ClassifierGate
from reference_impl.errors import StoreError
from reference_impl.events import Signals
from reference_impl.failure_policy import ToolOutcome
from reference_impl.policy import REFERENCE, RuntimePolicy
from reference_impl.permissions import (
    Decision,
    default_decision,
    fixed_layer_decision,
    owner_can_answer,
    rule_layer_decision,
)
from reference_impl.records import OperationRecord, SessionState, Stage
from reference_impl.store import Durability, Store
from reference_impl.visibility import projection_for


class StepResult(enum.StrEnum):
    DONE = "done"
    """The operation has a saved result (and it was delivered as far as possible)."""
    AWAITING_APPROVAL = "awaiting_approval"
    DEFERRED = "deferred"
    """Another instance started it and has not saved its result yet."""


class OperationPipeline:
    def __init__(
        self, store: Store, world: World, signals: Signals, policy: RuntimePolicy = REFERENCE
    ) -> None:
        self.policy = policy
        self._store = store
        self._world = world
        self._signals = signals
        self._gate = ClassifierGate(world, signals, self._session)
        self._digest_memo: tuple[dict, str, str] | None = None
        self._owed: dict[str, Prepared] = {}
        """Operations committed by a model request's end whose announcement is owed."""

    # ------------------------------------------------------------------ driver

    def run(self, session_id: str, call: ToolCall) -> StepResult:
        execution_id = self._prepare(session_id, call)
        fresh = False  # True once this call saved the result itself
        while True:
            op = self._operation(execution_id)
            if op.stage is Stage.PREPARED:
                self._decide(op)
            elif op.stage is Stage.DECIDED:
                if op.permission is Permission.ALLOW:
                    fresh = self._execute(op)
                elif op.permission is Permission.DENY:
                    fresh = self._save_refusal(op)
                else:
                    self._open_wait(op)
            elif op.stage is Stage.ESCALATING:
                fresh = self._execute(op)
            elif op.stage is Stage.WAITING:
                return StepResult.AWAITING_APPROVAL
            elif op.stage is Stage.STARTED:
                return StepResult.DEFERRED
            else:
                self._deliver(op, fresh)
                return StepResult.DONE

    # ------------------------------------------------------------------ prepare

    def _prepare(self, session_id: str, call: ToolCall) -> str:
        execution_id = execution_id_for(session_id, call.tool_call_id)
        owed = self._owed.pop(execution_id, None)
        if owed is not None:  # prepared in the model request's end transaction
            self._announce_prepared(owed)
            return execution_id
        # ORDERED, like the decision below: nothing outside relies on them before the start
        # record (synced, before the tool), a wait (synced, before its prompt) or a result
        # (synced); a power cut that loses them is a crash before the call was prepared.
        with self._store.transaction(Durability.ORDERED) as conn:
            prepared = self.prepare_in(conn, session_id, call, now=self._world.now())
        if prepared is not None:  # a second delivery of the same call finds the record
            self._announce_prepared(prepared)
        return execution_id

    def prepare_in(self, conn: sqlite3.Connection, session_id: str, call: ToolCall, *,
                   now: float) -> "Prepared | None":
        """Inside the caller's transaction: the operation record of ``call`` with every
        decision no one has to be asked for (every layer but the classifier, whose review is
        a world call: it is asked only once the record is committed); None when the record
        exists already (a second delivery says nothing). The caller announces what it
        returns once committed: :meth:`owe_announcement`, or :meth:`run` at once."""
        execution_id = execution_id_for(session_id, call.tool_call_id)
        session = records.load_session(conn, session_id)
        kind = session.tool_kind(call.tool)
        digest = args_digest(call.tool, call.args)
        args_json = canonical_json(call.args)
        dedup_key = failure_policy.dedup_key(call.tool, kind, call.args, digest)
        if not conn.execute(
            "INSERT OR IGNORE INTO operations (execution_id, session_id, tool_call_id, tool,"
            " tool_kind, args_json, args_digest, permission_version, dedup_key, stage,"
            " permission, decided_by, delivery, prepared_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (execution_id, session_id, call.tool_call_id, call.tool, kind.value if kind else "",
             args_json, digest, session.permission_version, dedup_key,
             Stage.PREPARED.value, Permission.ASK.value, DecisionSource.DEFAULT_ASK.value,
             Delivery.PENDING.value, now),
        ).rowcount:
            return None
        rows = self._store.rows
        if rows is not None:  # a result is only ever saved for a record that exists: none yet
            rows.put("result_records", execution_id, None)
        op = records.operation_inserted(  # the row as inserted, its defaults included
            conn, session_id, execution_id, call.tool_call_id, digest,
            session.permission_version, call.tool, args_json, dedup_key, Stage.PREPARED.value,
            Permission.ASK.value, DecisionSource.DEFAULT_ASK.value, None, "", "", 0,
            Delivery.PENDING.value, None, 0)
        decision = self._decision_for(session, op, review=False)
        if decision is not None:  # saved with the record: one commit fewer
            self._save_decision(session, op, decision, conn)
        return Prepared(session, op, decision)

    def owe_announcement(self, prepared: "Prepared") -> None:
        """``prepared`` was committed by another step's transaction (a model request's end):
        its events and failpoints come with the next :meth:`run` of its call, at the place a
        prepare of its own would have had them."""
        self._owed[prepared.op.execution_id] = prepared

    def _announce_prepared(self, prepared: "Prepared") -> None:
        session, op, decision = prepared.session, prepared.op, prepared.decision
        self._signals.emit(EventType.OPERATION_PREPARED, op.session_id, op.execution_id,
                           tool_call_id=op.tool_call_id, tool=op.tool,
                           permission_version=session.permission_version)
        self._signals.failpoint(Failpoint.AFTER_PREPARE, op.session_id, op.execution_id,
                                op.tool_call_id)
        if decision is not None:
            self._announce_decision(session, op, decision)

    # ------------------------------------------------------------------ decide

    def _decide(self, op: OperationRecord) -> None:
        session = self._session(op.session_id)
        decision = self._decision_for(session, op)
        if not self._save_decision(session, op, decision):
            return  # another instance decided first; the caller reloads its decision
        self._announce_decision(session, op, decision)

    def _save_decision(
        self, session: SessionState, op: OperationRecord, decision: Decision,
        conn: sqlite3.Connection | None = None,
    ) -> bool:
        """Save ``decision`` (in ``conn``'s transaction, or a transaction of its own);
        False when ``op`` was no longer waiting for one."""
        with (self._store.transaction(Durability.ORDERED) if conn is None
              else contextlib.nullcontext(conn)) as conn:
            (start_mark,) = conn.execute(
                "SELECT COALESCE(MAX(start_order), 0) FROM operations").fetchone()
            decided = conn.execute(
                "UPDATE operations SET stage = ?, permission = ?, decided_by = ?,"
                " permission_version = ?, classifier_outcome = ?, wait_trigger = ?, reason = ?,"
                " start_mark = ? WHERE execution_id = ? AND stage = ?",
                (Stage.DECIDED.value, decision.permission.value, decision.decided_by.value,
                 session.permission_version,
                 decision.classifier_outcome.value if decision.classifier_outcome else None,
                 decision.fallback, decision.reason, start_mark, op.execution_id,
                 Stage.PREPARED.value),
            ).rowcount
            if decided:  # only a decision moves a prepared record: ``op`` was the row
                records.operation_written(
                    conn, op, stage=Stage.DECIDED, permission=decision.permission,
                    decided_by=decision.decided_by, permission_version=session.permission_version,
                    classifier_outcome=decision.classifier_outcome,
                    wait_trigger=decision.fallback, reason=decision.reason, start_mark=start_mark)
            if decided and decision.counts_as_risk_denial:
                denial_counters.record_risk_denial(
                    conn, op.session_id, session.permission_version, op.execution_id
                )
            if decided and decision.counts_as_risk_denial:  # a policy may end the turn here
                denial_counters.end_turn_on_limit(
                    conn, op.session_id, session.permission_version, session.config.thresholds,
                    self.policy.denials, owner_can_answer(session.config))
            if decided and decision.classifier_outcome is ClassifierOutcome.ALLOW:
                denial_counters.reset_consecutive(conn, op.session_id, session.permission_version)
        return bool(decided)

    def _announce_decision(
        self, session: SessionState, op: OperationRecord, decision: Decision
    ) -> None:
        if decision.classifier_outcome is not None:
            self._signals.emit(EventType.CLASSIFIER_REVIEWED, op.session_id, op.execution_id,
                               outcome=decision.classifier_outcome.value)
        self._signals.emit(EventType.PERMISSION_DECIDED, op.session_id, op.execution_id,
                           permission=decision.permission.value,
                           decided_by=decision.decided_by.value, reason=decision.reason)
        self._signals.failpoint(Failpoint.AFTER_PERMISSION_DECISION, op.session_id,
                                op.execution_id, op.tool_call_id)

    def _decision_for(
        self, session: SessionState, op: OperationRecord, *, review: bool = True
    ) -> Decision | None:
        """The decision under the precedence; None when only the classifier can decide
        and ``review`` is False."""
        config = session.config
        if session.cancelled:
            return Decision(Permission.DENY, DecisionSource.CANCELLATION,
                            "the session was cancelled before the decision")
        fixed = fixed_layer_decision(config, op.tool, op.args)
        if fixed is not None:
            return fixed
        limit = config.thresholds.failure_repeat_limit
        if failure_policy.repeat_budget_spent(self._store.connection, op.session_id,
                                              op.dedup_key, session.permission_version, limit):
            return Decision(
                Permission.DENY,
                DecisionSource.REPEAT_GUARD,
                f"the same call already failed or was denied {limit} times under permission "
                f"version {session.permission_version}; change the arguments or the rules",
            )
        ruled = rule_layer_decision(config, op.tool, op.args)
        if ruled is not None:
            return ruled
        if config.mode is not Mode.AUTO or not self.policy.classifier:
            return default_decision(config, op.tool)
        if owner_can_answer(config) and (  # a policy may answer a limit otherwise
                self.policy.denials.with_owner is denial_counters.LimitAction.ASK_OWNER):
            counts = denial_counters.read(self._store.connection, op.session_id,
                                          session.permission_version)
            trigger = denial_counters.fallback_trigger(counts, config.thresholds)
            if trigger is not None:
                return Decision(
                    Permission.ASK,
                    DecisionSource.CLASSIFIER,
                    f"after {counts.consecutive} consecutive / {counts.cumulative} cumulative "
                    "classifier risk denials, the owner decides this one",
                    fallback=trigger.value,
                )
        if not review:
            return None
        return self._gate.review(session, op)

    # ------------------------------------------------------------------ wait

    def _open_wait(self, op: OperationRecord) -> None:
        with self._store.transaction() as conn:
            # The rules may have changed at the decision's failpoint: a wait persisted now
            # would ask for what they forbid outright (no wait may exist for an explicit deny
            # or a hard constraint, even one withdrawn later: L3.4) or for what they no longer
            # ask. The decision is void: the operation is decided again, no wait is created.
            session = records.load_session(conn, op.session_id)
            if session.permission_version != op.identity.permission_version \
                    or fixed_layer_decision(session.config, op.tool, op.args) is not None:
                conn.execute(
                    "UPDATE operations SET stage = ?, permission = ?, decided_by = ?,"
                    " reason = '', classifier_outcome = NULL, wait_trigger = ''"
                    " WHERE execution_id = ? AND stage = ? AND permission = ?",
                    (Stage.PREPARED.value, Permission.ASK.value, DecisionSource.DEFAULT_ASK.value,
                     op.execution_id, Stage.DECIDED.value, Permission.ASK.value))
                return
            wait = approvals.create(conn, op, now=self._world.now())
            if wait is not None:
                records.set_turn_status(conn, op.session_id, TurnStatus.AWAITING_APPROVAL)
        if wait is None:
            return
        self._announce_wait(op, wait)

    def _announce_wait(self, op: OperationRecord, wait: WaitRecord) -> None:
        self._signals.emit(EventType.APPROVAL_WAIT_CREATED, op.session_id, op.execution_id,
                           wait_id=wait.wait_id, purpose=wait.purpose, trigger=wait.trigger)
        self._signals.failpoint(Failpoint.AFTER_WAIT_PERSISTED, op.session_id, op.execution_id,
                                op.tool_call_id)
        self.prompt(wait, with_failpoint=True)

    def prompt(self, wait: WaitRecord, *, with_failpoint: bool) -> None:
        """Show a committed wait to the owner (also used by recovery for unshown waits),
        unless the rules changed meanwhile so that no approval could lift them (L3.4), or it
        is no longer pending (another instance's new message answered it before the prompt)."""
        op = self._operation(wait.execution_id)
        with self._store.transaction() as conn:
            current = approvals.load(conn, wait.wait_id)
            if current is None or current.status is not WaitStatus.PENDING:
                return
            session = records.load_session(conn, op.session_id)
            blocked = fixed_layer_decision(session.config, op.tool, op.args)
            stale = (wait.purpose == approvals.PERMISSION
                     and session.permission_version != wait.permission_version)
            withdrawn = (blocked is not None or stale) and approvals.withdraw(
                conn, wait,
                "the rules changed before the approval was asked"
                + (f": {blocked.reason}" if blocked else ""),
                redecide=blocked is None, now=self._world.now())
            if withdrawn:
                # The loop goes on from here (a new decision, or the escalation's attempt
                # delivered): a crash from now on must find the turn running, so that
                # recovery resumes it instead of leaving it awaiting an answer to nothing.
                records.set_turn_status(conn, op.session_id, TurnStatus.RUNNING)
        if withdrawn:
            self._signals.emit(EventType.APPROVAL_ANSWERED, op.session_id, op.execution_id,
                               wait_id=wait.wait_id, approved=False, withdrawn=True)
            if wait.purpose == approvals.ESCALATION:
                self.announce_result(op.session_id, op.execution_id)  # now final
            return
        self._world.prompt_approval(approvals.prompt_for(wait, op))
        with self._store.transaction(Durability.ORDERED) as conn:  # the prompt was shown
            approvals.mark_prompted(conn, wait.wait_id)
            still_pending = approvals.load(conn, wait.wait_id).status is WaitStatus.PENDING
        if still_pending:  # the owner may already have answered from inside the prompt
            self.project(wait.execution_id, with_failpoint=False)
        if with_failpoint:
            self._signals.failpoint(Failpoint.AFTER_PROMPT, op.session_id, op.execution_id,
                                    op.tool_call_id)

    # ------------------------------------------------------------------ execute

    def _execute(self, op: OperationRecord) -> bool:
        """Revalidate, claim the start, run the tool, save the result; True when this call
        saved the final result (False: refused, lost the claim, or waiting to escalate)."""
        self._digest_memo = None  # kept only until the arguments reach the world (below)
        refusal = self._revalidation_refusal(self._store.connection,
                                             self._session(op.session_id), op)
        if refusal is not None:
            self._refuse(op, refusal)
            return False
        self._signals.emit(EventType.REVALIDATED, op.session_id, op.execution_id, passed=True)
        self._signals.failpoint(Failpoint.AFTER_REVALIDATION, op.session_id, op.execution_id,
                                op.tool_call_id)
        with self._store.transaction() as conn:
            # Rechecked inside the claim: the rules may have changed at the failpoint above.
            session = records.load_session(conn, op.session_id)
            refusal = self._bind_to_current_rules(conn, op, session)
            current = records.load_operation(conn, op.execution_id)  # the row, in the claim
            claimed = refusal is None and bool(conn.execute(
                "UPDATE operations SET stage = ?, execution_started = 1,"
                " start_order = (SELECT COALESCE(MAX(start_order), 0) + 1 FROM operations)"
                " WHERE execution_id = ? AND stage = ? AND permission = ?",
                (Stage.STARTED.value, op.execution_id, op.stage.value, Permission.ALLOW.value),
            ).rowcount)
            if claimed and current is not None:
                records.operation_written(conn, current, stage=Stage.STARTED,
                                          execution_started=True)
            if claimed:  # an allowed operation runs: the denial streak is over (L3.5)
                denial_counters.reset_consecutive(conn, op.session_id, session.permission_version)
        if refusal is not None:
            self._refuse(op, refusal)
            return False
        if not claimed:
            return False  # another instance got there first
        self._signals.emit(EventType.EXECUTION_STARTED, op.session_id, op.execution_id)
        self._signals.failpoint(Failpoint.AFTER_START_RECORDED, op.session_id, op.execution_id,
                                op.tool_call_id)
        started = self._operation(op.execution_id)
        # Last look before the tool: a change at the failpoint above still stops it, and
        # the host knows for certain that the tool was not called. Reading is enough unless
        # the rules changed: re-binding writes, so it is decided again inside a transaction.
        current = self._session(op.session_id)
        refusal = self._revalidation_refusal(self._store.connection, current, started)
        if refusal is None and current.permission_version != started.identity.permission_version:
            with self._store.transaction() as conn:
                refusal = self._bind_to_current_rules(conn, started)
            started = self._operation(op.execution_id)
        if refusal is not None:
            self._refuse(started, refusal)
            return False
        # Only an approved escalation runs outside the sandbox, and only once.
        sandboxed = op.stage is not Stage.ESCALATING
        self._digest_memo = None  # the tool gets the arguments: nothing vouches for them after
        outcome, output, digest, attempts = self._invoke(started, sandboxed)
        self._signals.failpoint(Failpoint.AFTER_TOOL_RETURNED, op.session_id, op.execution_id,
                                op.tool_call_id)
        escalation = None
        with self._store.transaction() as conn:
            current = records.load_session(conn, op.session_id)
            asks_owner = sandboxed and outcome.escalation_requested and owner_can_answer(
                current.config)
            saved = results.save(conn, current, started, outcome, from_stage=Stage.STARTED,
                                 to_stage=Stage.WAITING if asks_owner else Stage.RECORDED,
                                 output=output, result_digest=digest, attempts=attempts,
                                 now=self._world.now())
            if saved and asks_owner:
                escalation = approvals.create_escalation(
                    conn, started, reason="the sandboxed attempt asks to run outside the sandbox",
                    permission_version=current.permission_version, now=self._world.now())
                records.set_turn_status(conn, op.session_id, TurnStatus.AWAITING_APPROVAL)
        if escalation is not None:
            # Not final yet: RESULT_SAVED follows once the owner's answer settles it.
            self._announce_wait(started, escalation)
            return False
        if saved:
            self.announce_result(op.session_id, op.execution_id)
        return saved

    def _bind_to_current_rules(
        self, conn: sqlite3.Connection, op: OperationRecord,
        current: SessionState | None = None,
    ) -> Decision | None:
        """Inside a transaction: the refusal under the rules in force now, or None; when the
        rules changed and an exact grant still allows the call, its identity is re-bound to
        the version in force, so that what runs carries that version (L2.8, L2.9).
        ``current``: the session as read in this transaction (else it is read here)."""
        if current is None:
            current = records.load_session(conn, op.session_id)
        refusal = self._revalidation_refusal(conn, current, op)
        if refusal is None and current.permission_version != op.identity.permission_version:
            grant = rule_layer_decision(current.config, op.tool, op.args)
            conn.execute(
                "UPDATE operations SET permission_version = ?, decided_by = ?, reason = ?"
                " WHERE execution_id = ? AND stage = ?",  # never touches a settled record
                (current.permission_version, DecisionSource.EXACT_GRANT.value,
                 grant.reason if grant else op.reason, op.execution_id, op.stage.value),
            )
        return refusal

    def _revalidation_refusal(
        self, conn: sqlite3.Connection, session: SessionState, op: OperationRecord
    ) -> Decision | None:
        if session.cancelled:
            return Decision(Permission.DENY, DecisionSource.CANCELLATION,
                            "the session was cancelled before execution")
        if self._args_digest(op) != op.identity.args_digest:
            return Decision(Permission.DENY, DecisionSource.REVALIDATION,
                            "the arguments no longer match the digest bound to this operation")
        if op.decided_by is DecisionSource.APPROVAL:
            purpose = approvals.ESCALATION if _escalating(conn, op) else approvals.PERMISSION
            wait = approvals.for_operation(conn, op.execution_id, purpose)
            if wait is None or wait.status is not WaitStatus.APPROVED:
                return Decision(Permission.DENY, DecisionSource.REVALIDATION,
                                "no approval is on record for this exact operation")
        writer = _writer_since_decision(conn, op)
        if writer is not None:
            return Decision(
                Permission.DENY,
                DecisionSource.REVALIDATION,
                f"{op.args['path']} may have changed since the decision ({writer} wrote to it): "
                "the expect_sha precondition no longer holds; not executed",
            )
        if session.permission_version == op.identity.permission_version:
            return None
        # The rules changed after the decision: the old decision is void. Re-decide with the
        # layers that need no one: a deny layer refuses, an exact grant may still allow.
        fixed = fixed_layer_decision(session.config, op.tool, op.args)
        if fixed is not None:
            return fixed
        ruled = rule_layer_decision(session.config, op.tool, op.args)
        if ruled is not None and ruled.permission is Permission.ALLOW:
            return None
        return Decision(
            Permission.DENY,
            DecisionSource.REVALIDATION,
            f"the permission version changed from {op.identity.permission_version} to "
            f"{session.permission_version} after the decision, which is therefore void; "
            "not executed",
        )

    def _refuse(self, op: OperationRecord, refusal: Decision) -> None:
        """Record that revalidation refused ``op`` (decided, escalating, or claimed but not
        yet run), bound to the version in force; the tool was certainly not called."""
        escalating = _escalating(self._store.connection, op)
        with self._store.transaction() as conn:
            version = records.load_session(conn, op.session_id).permission_version
            decided_by = refusal.decided_by
            if op.decided_by is DecisionSource.APPROVAL:
                # An approval is bound to the version it was given under: once that version
                # is gone the approval is void (revalidation), and the record stays bound to it.
                version = op.identity.permission_version
                if decided_by is not DecisionSource.CANCELLATION:
                    decided_by = DecisionSource.REVALIDATION
            if escalating:
                # The sandboxed attempt's saved result stands; only the escalation is refused,
                # and the operation stays bound to the version that attempt ran under (the
                # approval moved it to the escalation's).
                refused = conn.execute(
                    "UPDATE operations SET stage = ?, reason = ?, permission_version ="
                    " (SELECT permission_version FROM result_records WHERE execution_id = ?)"
                    " WHERE execution_id = ? AND stage = ?",
                    (Stage.RECORDED.value, refusal.reason, op.execution_id, op.execution_id,
                     op.stage.value),
                ).rowcount
                conn.execute(
                    "UPDATE result_records SET reason = ? WHERE execution_id = ?",
                    (f"not run outside the sandbox: {refusal.reason}", op.execution_id),
                )
            else:
                refused = conn.execute(
                    "UPDATE operations SET stage = ?, permission = ?, decided_by = ?, reason = ?,"
                    " permission_version = ?, start_order = NULL"
                    " WHERE execution_id = ? AND stage = ?",
                    (Stage.DECIDED.value, Permission.DENY.value, decided_by.value,
                     refusal.reason, version, op.execution_id, op.stage.value),
                ).rowcount
        if not refused:
            return
        self._signals.emit(EventType.REVALIDATED, op.session_id, op.execution_id,
                           passed=False, reason=refusal.reason)
        if escalating:
            self.announce_result(op.session_id, op.execution_id)  # now final
        else:
            self._signals.emit(EventType.PERMISSION_DECIDED, op.session_id, op.execution_id,
                               permission=Permission.DENY.value,
                               decided_by=decided_by.value, reason=refusal.reason)

    def _invoke(
        self, op: OperationRecord, sandboxed: bool
    ) -> tuple[ToolOutcome, str, str | None, int]:
        """Call the tool, retrying only where failure_policy allows; (outcome, output,
        result digest, attempts)."""
        session = self._session(op.session_id)
        invocation = ToolInvocation(op.identity, op.session_id, op.tool, op.args, sandboxed)
        retries_max = session.config.thresholds.auto_retries_max
        idempotent = session.tool_is_idempotent(op.tool)
        attempts = 0
        returned_before = False
        last_returned: ToolResult | None = None  # the last attempt that ran: its result stands
        while True:
            attempts += 1
            try:
                result = self._world.execute_tool(invocation)
            except ToolUnavailable as exc:
                if failure_policy.may_retry_unavailable(attempts - 1, retries_max):
                    continue
                if returned_before:  # an earlier attempt did run: not "certainly not started"
                    assert last_returned is not None
                    return (ToolOutcome(Outcome.FAILED, FailureKind.TRANSIENT,
                                        True, False, f"the retry could not start: {exc}"),
                            last_returned.output,
                            result_digest(last_returned.status.value, last_returned.output),
                            attempts)
                return failure_policy.tool_unavailable_outcome(str(exc)), "", None, attempts
            except Exception as exc:  # the world broke mid-call; SimulatedCrash passes
                return failure_policy.invocation_error_outcome(exc), "", None, attempts
            last_returned = result
            returned_before = True
            if failure_policy.may_retry_result(result, idempotent, attempts - 1, retries_max):
                continue
            digest = result_digest(result.status.value, result.output)
            return failure_policy.classify_tool_result(result), result.output, digest, attempts

    def _save_refusal(self, op: OperationRecord) -> bool:
        with self._store.transaction() as conn:
            saved = results.save(conn, records.load_session(conn, op.session_id), op,
                                 results.not_executed(op), from_stage=Stage.DECIDED,
                                 now=self._world.now())
        if saved:
            self.announce_result(op.session_id, op.execution_id)
        return saved

    def announce_result(self, session_id: str, execution_id: str) -> None:
        """The realtime events of a committed result record (same fields as the store)."""
        record = results.load(self._store.connection, execution_id)
        self._signals.emit(
            EventType.RESULT_SAVED, session_id, execution_id,
            outcome=record.outcome.value,
            failure_kind=record.failure_kind.value if record.failure_kind else None,
            execution_started=record.execution_started,
            reconciliation_required=record.reconciliation_required,
            result_digest=record.result_digest,
        )
        if record.failure_kind is not None:
            self._signals.emit(EventType.OPERATION_FAILED, session_id, execution_id,
                               failure_kind=record.failure_kind.value, reason=record.reason)
        if record.reconciliation_required:
            self._signals.emit(EventType.RECONCILIATION_REQUIRED, session_id, execution_id,
                               reason=record.reason)

    # ------------------------------------------------------------------ deliver

    def _deliver(self, op: OperationRecord, fresh: bool) -> None:
        if fresh:
            self._signals.failpoint(Failpoint.AFTER_RESULT_SAVED, op.session_id,
                                    op.execution_id, op.tool_call_id)
            display = self._write_diagnostics(op)
            self._checkpoint(op, display)
        else:  # saved earlier (replay, other instance): catch up without redoing anything
            self.fold(op.session_id, reason="catch_up", project=True)
        current = self._operation(op.execution_id)
        if current.delivery is Delivery.RECORDED:
            self.project(op.execution_id, with_failpoint=fresh, op=current)

    def _write_diagnostics(self, op: OperationRecord) -> Display | None:
        """The display state of ``op``'s result, committed with its checkpoint (one commit
        fewer per operation); None when writing it failed."""
        if self._signals.failpoint(Failpoint.DURING_DIAGNOSTICS_WRITE, op.session_id,
                                   op.execution_id, op.tool_call_id) is not None:
            return  # reported as a runtime fault; the result record is untouched (L4.7)
        try:
            record = results.load(self._store.connection, op.execution_id)
            display = {"tool": op.tool, "outcome": record.outcome.value,
                       "summary": (record.output or record.reason)[:200]}
            return Display(op.session_id, op.execution_id, canonical_json(display))
        except Exception as exc:  # optional state: report it, never touch the result
            self._signals.runtime_fault(op.session_id, op.execution_id, "diagnostics", exc)
            return None

    def _checkpoint(self, op: OperationRecord, display: Display | None) -> None:
        try:
            self._signals.failpoint(Failpoint.DURING_CHECKPOINT_BUILD, op.session_id,
                                    op.execution_id, op.tool_call_id, contain=False)
            self.fold(op.session_id, reason="operation", display=display)
        except Exception as exc:  # the result stays saved and deliverable (L4.4)
            self._signals.emit(EventType.CHECKPOINT_FAILED, op.session_id, op.execution_id,
                               error=f"{type(exc).__name__}: {exc}")
            self._write_display_alone(display)
            return
        self._signals.failpoint(Failpoint.AFTER_CHECKPOINT_SAVED, op.session_id,
                                op.execution_id, op.tool_call_id)

    def _write_display_alone(self, display: Display | None) -> None:
        if display is None:
            return
        with self._store.transaction() as conn:
            fault = _write_display(conn, display, self._world.now())
        if fault is not None:
            self._signals.runtime_fault(display.session_id, display.execution_id,
                                        "diagnostics", fault)

    def fold(
        self, session_id: str, *, reason: str, project: bool = False,
        display: Display | None = None,
    ) -> continuation.Fold:
        """Checkpoint the saved results of pending calls; with ``project``, also publish
        those not yet projected (a catch-up must not leave the UI behind); ``display`` is
        written in the same transaction. Nothing to fold and nothing to write: no
        transaction at all (the fold decides again inside its own)."""
        if display is None:
            current = continuation.state(self._store.connection, session_id)
            if not continuation.foldable(self._store.connection, session_id, current):
                return continuation.Fold(None, latest=current)
        fault = None
        now = self._world.now()  # one time for what one transaction writes
        # ORDERED: a checkpoint is derived from saved results (flushed); nothing outside
        # relies on it before the next flushed commit, and one lost on a power cut is
        # rebuilt from those results by the next fold, as after a failed build (L4.4).
        with self._store.transaction(Durability.ORDERED) as conn:
            if display is not None:
                fault = _write_display(conn, display, now)
            fold = continuation.fold_results(conn, session_id, reason=reason, now=now)
        if fault is not None:
            self._signals.runtime_fault(session_id, display.execution_id, "diagnostics", fault)
        if fold.sequence is not None:
            self._signals.emit(EventType.CHECKPOINT_SAVED, session_id,
                               fold.execution_ids[-1], sequence=fold.sequence,
                               execution_ids=list(fold.execution_ids))
        if project:
            for execution_id in fold.execution_ids:
                op = self._operation(execution_id)
                if op.delivery is Delivery.RECORDED:
                    self.project(execution_id, with_failpoint=False, op=op)
        return fold

    def project(self, execution_id: str, *, with_failpoint: bool,
                op: OperationRecord | None = None) -> None:
        """Publish what the record says; a published result moves delivery to projected.
        ``op``: the operation as the caller just read it (else it is read here)."""
        conn = self._store.connection
        if op is None:
            op = self._operation(execution_id)
        record = results.load(conn, execution_id)
        projection = projection_for(op, record, approvals.has_pending(conn, execution_id,
                                                                    op.session_id))
        try:
            self._world.publish(projection)
        except Exception as exc:  # the UI is display state: the record stands
            self._signals.runtime_fault(op.session_id, execution_id, "projection", exc)
            return
        # ORDERED: the publication already happened; losing this mark on a power cut is a
        # crash right after publishing, which recovery answers by publishing again.
        with self._store.transaction(Durability.ORDERED) as conn:
            conn.execute(
                "INSERT INTO projections (execution_id, session_id, projection_json, published_at)"
                " VALUES (?, ?, ?, ?) ON CONFLICT (execution_id) DO UPDATE SET"
                " projection_json = excluded.projection_json, published_at = excluded.published_at",
                (execution_id, op.session_id, canonical_json(to_json(projection)),
                 self._world.now()),
            )
            if record is not None and op.stage is Stage.RECORDED:  # a final result reached the UI
                conn.execute(
                    "UPDATE operations SET delivery = ? WHERE execution_id = ? AND delivery = ?",
                    (Delivery.PROJECTED.value, execution_id, Delivery.RECORDED.value),
                )
        self._signals.emit(EventType.PROJECTED, op.session_id, execution_id,
                           status=projection.status,
                           recovery_actions=[a.value for a in projection.recovery_actions])
        if with_failpoint:
            self._signals.failpoint(Failpoint.AFTER_PROJECTION, op.session_id, execution_id,
                                    op.tool_call_id)

    # ------------------------------------------------------------------ reads

    def _args_digest(self, op: OperationRecord) -> str:
        """``args_digest(op.tool, op.args)``, computed once per arguments object while
        :meth:`_execute` revalidates (up to three times before the tool; a record read again
        with the same argument text shares its parsed arguments, see ``records``). The memo
        is dropped before the arguments reach the world, which could change them."""
        memo = self._digest_memo
        if memo is not None and memo[0] is op.args and memo[1] == op.tool:
            return memo[2]
        digest = args_digest(op.tool, op.args)
        self._digest_memo = (op.args, op.tool, digest)
        return digest

    def _session(self, session_id: str) -> SessionState:
        return records.load_session(self._store.connection, session_id)

    def _operation(self, execution_id: str) -> OperationRecord:
        op = records.load_operation(self._store.connection, execution_id)
        if op is None:
            raise StoreError(f"operation {execution_id} vanished from the store")
        return op


@dataclass(frozen=True, slots=True)
class Prepared:
    """An operation record just written (with its decision, when no one had to be asked)."""

    session: SessionState
    op: OperationRecord
    decision: Decision | None


@dataclass(frozen=True, slots=True)
class Display:
    """Optional display state of one result (never authoritative), as written."""

    session_id: str
    execution_id: str
    display_json: str


def _write_display(conn: sqlite3.Connection, display: Display, now: float) -> Exception | None:
    """Write ``display`` inside the caller's transaction, in a savepoint of its own: its
    failure undoes only this row, never the checkpoint or the result beside it (L4.7)."""
    conn.execute("SAVEPOINT display")
    try:
        conn.execute(
            "INSERT OR REPLACE INTO diagnostics (execution_id, session_id, display_json,"
            " written_at) VALUES (?, ?, ?, ?)",
            (display.execution_id, display.session_id, display.display_json, now),
        )
    except Exception as exc:  # optional state: reported by the caller after the commit
        conn.execute("ROLLBACK TO display")
        conn.execute("RELEASE display")
        return exc
    conn.execute("RELEASE display")
    return None


def _writer_since_decision(conn: sqlite3.Connection, op: OperationRecord) -> str | None:
    """The tool call that may have changed the file ``op`` has a precondition on.

    The host cannot read files through the contract; what it knows is which operations it
    started. Any non-read operation on the same ``path`` started after ``op`` was decided
    (e.g. while its approval was pending) voids an ``expect_sha`` precondition (L2.9); the
    tool's own check of ``expect_sha`` stays the last line of defence."""
    path = op.args.get("path")
    if "expect_sha" not in op.args or not isinstance(path, str):
        return None
    row = conn.execute(
        "SELECT tool_call_id FROM operations WHERE execution_id != ? AND start_order > ?"
        " AND tool_kind != ? AND json_extract(args_json, '$.path') = ?"
        " ORDER BY start_order LIMIT 1",
        (op.execution_id, op.start_mark, ToolKind.READ.value, path),
    ).fetchone()
    return row["tool_call_id"] if row else None


def _escalating(conn: sqlite3.Connection, op: OperationRecord) -> bool:
    """Is ``op`` the approved run outside the sandbox (about to start, or started)?"""
    if op.stage is Stage.ESCALATING:
        return True
    return op.stage is Stage.STARTED and approvals.for_operation(
        conn, op.execution_id, approvals.ESCALATION) is not None
