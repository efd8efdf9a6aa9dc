"""Mutants for the criteria of stages L3, L4, L5 and M: at least one per criterion.

Each entry is a text edit of ``reference_impl`` (see :mod:`harness.mutants.source_patch`)
named after its defect, with the criteria expected to catch it. Every edit reintroduces one
mistake a real runtime makes: a guard dropped, a step taken in the wrong order, a recovery
that "helps" by redoing work, a status mapped to the wrong value.
"""

from __future__ import annotations

from harness.mutants.mutant import Mutant
from harness.mutants.source_patch import edit, edits
from harness.mutants.targets import AP, DC, EX, FP, MR, PM, RC, RS, TU, VI

RT = "reference_impl.runtime"

# --------------------------------------------------------------------------- stage L3

L3_MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "no-denial-fallback",
        "auto mode keeps sending operations to the classifier after the denial thresholds are "
        "reached; the fallback to a manual approval never happens",
        ("L3.1",),
        edits(edit(EX, find="            trigger = denial_counters.fallback_trigger(counts, config.thresholds)\n",
                   replace="            trigger = None  # the classifier always decides in auto mode\n")),
    ),
    Mutant(
        "fallback-threshold-off-by-one",
        "the fallback triggers only once the denial counts exceed the thresholds, one denial "
        "too late",
        ("L3.1",),
        edits(edit(DC, find="    consecutive = counts.consecutive >= thresholds.consecutive_denials_max\n",
                   replace="    consecutive = counts.consecutive > thresholds.consecutive_denials_max\n")),
    ),
    Mutant(
        "recovery-expires-pending-waits",
        "recovery rejects the approval waits a crash left pending instead of keeping them "
        "pending and answerable",
        ("L3.2",),
        edits(edit(RC, find="    for wait in approvals.unprompted(store.connection):\n",
                   replace="    with store.transaction() as conn:  # stale prompts: start over\n"
                           "        conn.execute(\"UPDATE approval_waits SET status = 'rejected'"
                           " WHERE status = 'pending'\")\n"
                           "    for wait in approvals.unprompted(store.connection):\n")),
    ),
    Mutant(
        "waits-for-non-interactive",
        "the approval capability check ignores whether the session is interactive, so "
        "non-interactive sessions get approval waits nobody will answer",
        ("L3.3", "L3.10"),
        edits(edit(PM, find="    return config.interactive and config.owner_can_approve\n",
                   replace="    return config.owner_can_approve\n")),
    ),
    Mutant(
        "hard-constraint-approvable",
        "a hard-constraint denial becomes an approval request for owners who can approve, as "
        "if the owner could override it",
        ("L3.4",),
        edits(edit(EX, find="        fixed = fixed_layer_decision(config, op.tool, op.args)\n",
                   replace="        fixed = fixed_layer_decision(config, op.tool, op.args)\n"
                           "        if fixed is not None and fixed.decided_by is DecisionSource.HARD_CONSTRAINT and (\n"
                           "                owner_can_answer(config)):  # the owner may override it\n"
                           "            fixed = Decision(Permission.ASK, fixed.decided_by, fixed.reason)\n")),
    ),
    Mutant(
        "allowed-resets-cumulative",
        "an allowed operation resets the cumulative denial count as well as the consecutive one",
        ("L3.5",),
        edits(edit(DC, find="        \"UPDATE denial_counters SET consecutive = 0\"\n"
                            "        \" WHERE session_id = ? AND permission_version = ?\",\n",
                   replace="        \"UPDATE denial_counters SET consecutive = 0, cumulative = 0\"\n"
                           "        \" WHERE session_id = ? AND permission_version = ?\",\n")),
    ),
    Mutant(
        "approval-resets-cumulative-always",
        "approving any fallback resets the cumulative count too, not only the approval the "
        "cumulative threshold triggered",
        ("L3.5",),
        edits(edit(AP, find="    if denial_counters.trigger_resets_cumulative(wait.trigger):\n",
                   replace="    if approve:\n")),
    ),
    Mutant(
        "counters-shared-across-versions",
        "the counters of a new permission version start from the previous version's counts "
        "instead of a fresh counting period",
        ("L3.6",),
        edits(edit(DC, find="        \"INSERT OR IGNORE INTO denial_counters (session_id, permission_version) VALUES (?, ?)\",\n"
                            "        (session_id, permission_version),\n",
                   replace="        \"INSERT OR IGNORE INTO denial_counters (session_id, permission_version, consecutive,\"\n"
                           "        \" cumulative) SELECT ?, ?, COALESCE(MAX(consecutive), 0), COALESCE(MAX(cumulative), 0)\"\n"
                           "        \" FROM (SELECT consecutive, cumulative FROM denial_counters WHERE session_id = ?\"\n"
                           "        \" ORDER BY permission_version DESC LIMIT 1)\",\n"
                           "        (session_id, permission_version, session_id),\n")),
    ),
    Mutant(
        "double-count-concurrent-duplicate",
        "the catch-up path for a result another instance already saved re-applies the risk "
        "denial to the counters, so a concurrent duplicate delivery counts it twice",
        ("L3.7",),
        edits(edit(EX, find="        else:  # saved earlier (replay, other instance): catch up without redoing anything\n",
                   replace="        else:  # saved earlier (replay, other instance): catch up without redoing anything\n"
                           "            if op.classifier_outcome is ClassifierOutcome.RISK_DENY:\n"
                           "                with self._store.transaction() as conn:\n"
                           "                    conn.execute(\"UPDATE denial_counters SET consecutive = consecutive + 1,"
                           " cumulative = cumulative + 1 WHERE session_id = ? AND permission_version = ?\","
                           " (op.session_id, op.identity.permission_version))\n")),
    ),
    Mutant(
        "double-count-on-recovery",
        "recovery re-applies the risk denials of operations a crash left unprojected, without "
        "the per-identity guard, so a replayed denial counts twice",
        ("L3.7",),
        edits(edit(RC, find="    unknown = _mark_unconfirmed_as_unknown(store, world, pipeline)\n",
                   replace="    unknown = _mark_unconfirmed_as_unknown(store, world, pipeline)\n"
                           "    with store.transaction() as conn:  # denials the crash may have lost\n"
                           "        for row in conn.execute(\"SELECT session_id, permission_version FROM operations\"\n"
                           "                                \" WHERE classifier_outcome = 'risk_deny'"
                           " AND delivery != 'projected'\").fetchall():\n"
                           "            conn.execute(\"UPDATE denial_counters SET consecutive = consecutive + 1,"
                           " cumulative = cumulative + 1 WHERE session_id = ? AND permission_version = ?\","
                           " (row['session_id'], row['permission_version']))\n")),
    ),
    Mutant(
        "classifier-fault-resets-streak",
        "any classifier outcome other than a risk denial (timeouts and service errors "
        "included) resets the consecutive denial count",
        ("L3.8",),
        edits(edit(EX, find="            if decided and decision.classifier_outcome is ClassifierOutcome.ALLOW:\n",
                   replace="            if decided and decision.classifier_outcome not in (None, ClassifierOutcome.RISK_DENY):\n")),
    ),
    Mutant(
        "risk-denials-consume-repeat-budget",
        "classifier risk denials use up the execution-failure repeat budget, so the repeat "
        "guard refuses the operation before the approval fallback is reached",
        ("L3.9",),
        edits(edit(FP, find="    DecisionSource.CLASSIFIER,  # risk denials must be able to reach the approval fallback\n",
                   replace="")),
    ),
    Mutant(
        "waits-for-owner-who-cannot-approve",
        "the approval capability check only asks whether the session is interactive, so an "
        "owner who cannot approve still gets approval waits",
        ("L3.10", "L3.3"),
        edits(edit(PM, find="    return config.interactive and config.owner_can_approve\n",
                   replace="    return config.interactive\n")),
    ),
    Mutant(
        "rejected-fallback-resets-streak",
        "any answer to a fallback approval ends the denial streak: a rejected fallback resets "
        "the consecutive count as an approved one does, so the next operation needing review "
        "goes back to the classifier instead of the owner",
        ("L3.5", "L3.1"),
        edits(edit(AP, find="    if approve:\n"
                            "        denial_counters.reset_consecutive(conn, wait.session_id, wait.permission_version)\n",
                   replace="    if True:  # the owner answered: the streak is over\n"
                           "        denial_counters.reset_consecutive(conn, wait.session_id, wait.permission_version)\n")),
        trust_class="catalogue",
    ),
    Mutant(
        "counters-shared-across-sessions",
        "the fallback decision reads the risk-denial counts of every session of the permission "
        "version together, so another session's denials send this session's calls to the owner",
        ("L3.6",),
        edits(edit(DC, find="        \"SELECT consecutive, cumulative FROM denial_counters\"\n"
                            "        \" WHERE session_id = ? AND permission_version = ?\",\n",
                   replace="        \"SELECT COALESCE(SUM(consecutive), 0) AS consecutive,\"\n"
                           "        \" COALESCE(SUM(cumulative), 0) AS cumulative FROM denial_counters\"\n"
                           "        \" WHERE (session_id = ? OR 1) AND permission_version = ?\",\n")),
        trust_class="catalogue",
    ),
    Mutant(
        "explicit-deny-approvable",
        "an explicit deny rule becomes an approval request when the owner can approve (the "
        "owner wrote the rule, so the owner may lift it), instead of a denial no wait can lift",
        ("L3.4",),
        edits(edit(EX, find="        fixed = fixed_layer_decision(config, op.tool, op.args)\n",
                   replace="        fixed = fixed_layer_decision(config, op.tool, op.args)\n"
                           "        if fixed is not None and fixed.decided_by is DecisionSource.EXPLICIT_DENY and (\n"
                           "                owner_can_answer(config)):  # the owner may lift the owner's rule\n"
                           "            fixed = Decision(Permission.ASK, fixed.decided_by, fixed.reason)\n")),
        trust_class="catalogue",
    ),
)

# --------------------------------------------------------------------------- stage L4

L4_MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "reexecute-after-result-saved",
        "recovery rolls back operations whose saved result is not in a checkpoint yet and "
        "runs them again",
        ("L4.1",),
        edits(edit(RC, find="    completed = _fold_unsaved_results(store, pipeline)\n",
                   replace="    with store.transaction() as conn:  # not checkpointed = not done: redo it\n"
                           "        conn.execute(\"DELETE FROM result_records WHERE execution_id IN (SELECT execution_id\"\n"
                           "                     \" FROM operations WHERE stage = 'recorded' AND checkpoint_sequence IS NULL)\")\n"
                           "        conn.execute(\"UPDATE operations SET stage = 'decided', delivery = 'pending',"
                           " execution_started = 0 WHERE stage = 'recorded' AND checkpoint_sequence IS NULL\")\n"
                           "    completed = _fold_unsaved_results(store, pipeline)\n")),
    ),
    Mutant(
        "recovery-resends-checkpointed-request",
        "recovery treats a checkpointed step whose projection is missing as not done: it rolls "
        "the conversation back to the user's message and asks the model again",
        ("L4.2",),
        edits(edit(RC, find="    for row in rows:\n        pipeline.project(row[\"execution_id\"], with_failpoint=False)\n",
                   replace="    from reference_impl import continuation\n"
                           "    for row in rows:  # the step never reached the UI: take it again\n"
                           "        op = records.load_operation(store.connection, row[\"execution_id\"])\n"
                           "        with store.transaction() as conn:\n"
                           "            conversation = continuation.messages(conn, op.session_id)\n"
                           "            users = [i for i, m in enumerate(conversation) if m.role == 'user']\n"
                           "            if users:\n"
                           "                continuation.save(conn, op.session_id, conversation[:users[-1] + 1],\n"
                           "                                  last_execution_id=None, reason='redo', now=0.0)\n")),
    ),
    Mutant(
        "projection-not-replayed",
        "recovery does not replay the projections a crash left unpublished, so the UI never "
        "learns the result of that step",
        ("L4.2",),
        edits(edit(RC, find="    replayed = _replay_missing_projections(store, pipeline)\n",
                   replace="    replayed = ()\n")),
    ),
    Mutant(
        "retry-unknown-after-crash",
        "recovery treats an operation whose start was recorded but whose result was never "
        "saved as not started and dispatches it again",
        ("L4.3", "L4.9"),
        edits(edit(RC, find="        with store.transaction() as conn:\n"
                            "            saved = results.save(conn, records.load_session(conn, op.session_id), op, unknown,\n"
                            "                                 from_stage=Stage.STARTED, attempts=1, now=world.now())\n",
                   replace="        with store.transaction() as conn:  # no result: it never ran, run it again\n"
                           "            conn.execute(\"UPDATE operations SET stage = 'decided', execution_started = 0\"\n"
                           "                         \" WHERE execution_id = ?\", (op.execution_id,))\n"
                           "            saved = False\n")),
    ),
    Mutant(
        "checkpoint-failure-redispatches",
        "a failing checkpoint build rolls the operation back so the step is taken again, "
        "dispatching the tool a second time",
        ("L4.4",),
        edits(edit(EX, find="        except Exception as exc:  # the result stays saved and deliverable (L4.4)\n",
                   replace="        except Exception as exc:  # roll the step back and take it again cleanly\n"
                           "            with self._store.transaction() as conn:\n"
                           "                conn.execute(\"DELETE FROM result_records WHERE execution_id = ?\","
                           " (op.execution_id,))\n"
                           "                conn.execute(\"UPDATE operations SET stage = 'decided', delivery = 'pending',"
                           " execution_started = 0 WHERE execution_id = ?\", (op.execution_id,))\n")),
    ),
    Mutant(
        "result-saved-after-checkpoint",
        "the checkpoint carrying the tool's result is written as soon as the tool returns, "
        "before the authoritative result record is committed",
        ("L4.5",),
        edits(edit(EX, find="        escalation = None\n        with self._store.transaction() as conn:\n",
                   replace="        from harness.contract import Message\n"
                           "        with self._store.transaction() as conn:  # checkpoint first, the record follows\n"
                           "            continuation.save(conn, op.session_id, continuation.messages(conn, op.session_id) + (\n"
                           "                Message('tool', output, tool_call_id=op.tool_call_id, outcome=outcome.outcome,\n"
                           "                        failure_kind=outcome.failure_kind),),\n"
                           "                last_execution_id=op.execution_id, reason='operation', now=self._world.now())\n"
                           "        self._signals.failpoint(Failpoint.AFTER_CHECKPOINT_SAVED, op.session_id,"
                           " op.execution_id, op.tool_call_id)\n"
                           "        escalation = None\n        with self._store.transaction() as conn:\n")),
    ),
    Mutant(
        "tool-called-before-start-recorded",
        "the tool is invoked before the execution start is durably recorded",
        ("L4.6",),
        edits(edit(EX, find="        with self._store.transaction() as conn:\n"
                            "            # Rechecked inside the claim: the rules may have changed at the failpoint above.\n",
                   replace="        early = self._invoke(op, op.stage is not Stage.ESCALATING)  # record the start afterwards\n"
                           "        with self._store.transaction() as conn:\n"
                           "            # Rechecked inside the claim: the rules may have changed at the failpoint above.\n"),
              edit(EX, find="        outcome, output, digest, attempts = self._invoke(started, sandboxed)\n",
                   replace="        outcome, output, digest, attempts = early\n")),
    ),
    Mutant(
        "diagnostics-failure-corrupts-result",
        "a failure writing diagnostics is written into the authoritative result record, "
        "turning a succeeded operation into a failed one",
        ("L4.7",),
        edits(edit(EX, find="            return  # reported as a runtime fault; the result record is untouched (L4.7)\n",
                   replace="            with self._store.transaction() as conn:  # the operation did not finish cleanly\n"
                           "                conn.execute(\"UPDATE result_records SET outcome = 'failed', failure_kind = 'failed',"
                           " reason = 'diagnostics write failed' WHERE execution_id = ?\", (op.execution_id,))\n"
                           "            return\n")),
    ),
    Mutant(
        "repair-guesses-not-executed",
        "recovery decides that an operation without a saved result did not run and records it "
        "as not started",
        ("L4.8", "L4.3", "L4.9"),
        edits(edit(RC, find="    unknown = ToolOutcome(Outcome.UNKNOWN, FailureKind.UNKNOWN, True, True, UNCONFIRMED_REASON)\n",
                   replace="    unknown = ToolOutcome(Outcome.NOT_STARTED, FailureKind.TRANSIENT, False, False,\n"
                           "                          'no result was saved, so the tool did not run')\n")),
    ),
    Mutant(
        "repair-marks-task-complete",
        "recovery closes interrupted turns as completed instead of resuming them",
        ("L4.8",),
        edits(edit(RC, find="    for session_id in running:\n        turns.drive(session_id)\n",
                   replace="    for session_id in running:\n        turns.end(session_id, TurnStatus.COMPLETED)\n")),
    ),
    Mutant(
        "recovery-forgets-prepared-calls",
        "recovery ends a resumed turn whose next call its crashed instance prepared but never "
        "decided, instead of taking the call up: it stays pending and not started for ever, "
        "with no decision, no result and nothing in the conversation",
        ("L4.8",),
        edits(edit(RC, find="    for session_id in running:\n        turns.drive(session_id)\n",
                   replace="    for session_id in running:\n"
                           "        if store.connection.execute(\n"
                           "                \"SELECT 1 FROM operations WHERE session_id = ? AND stage = 'prepared'\",\n"
                           "                (session_id,)).fetchone():  # undecided: the crashed instance's\n"
                           "            turns.end(session_id, TurnStatus.INCOMPLETE)\n"
                           "            continue\n"
                           "        turns.drive(session_id)\n")),
    ),
    Mutant(
        "unknown-reported-succeeded",
        "the model-facing tool message of an operation whose outcome is unknown says it "
        "succeeded",
        ("L4.9", "L5.5"),
        edits(edit(RS, find="        outcome=record.outcome,\n        failure_kind=record.failure_kind,\n",
                   replace="        outcome=Outcome.SUCCEEDED if record.outcome is Outcome.UNKNOWN else record.outcome,\n"
                           "        failure_kind=record.failure_kind,\n")),
    ),
    Mutant(
        "claim-not-atomic",
        "the start claim does not check the stage it moves the operation from, so two "
        "instances both claim and run a duplicate",
        ("L4.10",),
        edits(edit(EX, find="                \" WHERE execution_id = ? AND stage = ? AND permission = ?\",\n"
                            "                (Stage.STARTED.value, op.execution_id, op.stage.value, Permission.ALLOW.value),\n",
                   replace="                \" WHERE execution_id = ? AND permission = ?\",\n"
                           "                (Stage.STARTED.value, op.execution_id, Permission.ALLOW.value),\n")),
    ),    Mutant(
        "deferred-turn-reported-completed",
        "an instance that finds the session's pending call held by another instance leaves it "
        "to that instance and reports the turn completed instead of deferred",
        ("L4.10",),
        edits(edit(TU, find="                    return self.end(session_id, TurnStatus.DEFERRED, persist=False)\n",
                   replace="                    return self.end(session_id, TurnStatus.COMPLETED, persist=False)\n"),
              edit(RT, find="            return self._turns.end(session_id, TurnStatus.DEFERRED, persist=False)\n",
                   replace="            return self._turns.end(session_id, TurnStatus.COMPLETED, persist=False)\n"),
              edit(RT, find="            return self._turns.end(wait.session_id, TurnStatus.DEFERRED, persist=False)\n",
                   replace="            return self._turns.end(wait.session_id, TurnStatus.COMPLETED, persist=False)\n")),
        trust_class="world_judges",
    ),
)

# --------------------------------------------------------------------------- stage L5

L5_MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "visibility-ignores-revocation",
        "the tool list of model requests is computed from the session's rules as opened, so "
        "a later revocation never removes a tool",
        ("L5.1", "L5.3"),
        edits(edit(TU, find="            config = records.load_session(conn, session_id).config\n",
                   replace="            import json\n"
                           "            from harness.contract import SessionConfig, from_json\n"
                           "            row = conn.execute('SELECT config_json FROM sessions"
                           " WHERE session_id = ?', (session_id,)).fetchone()\n"
                           "            config = from_json(SessionConfig, json.loads(row['config_json']))"
                           "  # set up once\n")),
    ),
    Mutant(
        "partial-deny-hides-tool",
        "a deny rule or hard constraint for some calls of a tool hides the whole tool from "
        "the model",
        ("L5.3",),
        edits(edit(PM, find="    return rule.pattern == \"*\" and fnmatchcase(tool, rule.tool)\n",
                   replace="    return rule.effect is RuleEffect.DENY and fnmatchcase(tool, rule.tool)\n")),
    ),
    Mutant(
        "old-call-checked-against-old-rules",
        "after a rule change, a call decided under the old rules still runs on its old "
        "decision; revalidation does not apply the newest rules",
        ("L5.2",),
        edits(edit(EX, find="        # The rules changed after the decision: the old decision is void. Re-decide with the\n",
                   replace="        return None  # the decision taken stands until the operation is done\n"
                           "        # The rules changed after the decision: the old decision is void. Re-decide with the\n")),
    ),
    Mutant(
        "projection-offers-retry-for-denied",
        "the UI offers retry for every operation that did not succeed, denied and unknown ones "
        "included",
        ("L5.4",),
        edits(edit(VI, find="    reason = result.reason if result else op.reason\n",
                   replace="    if outcome is not Outcome.SUCCEEDED and RecoveryAction.RETRY not in actions:\n"
                           "        actions = (*actions, RecoveryAction.RETRY)\n"
                           "    reason = result.reason if result else op.reason\n")),
    ),
    Mutant(
        "realtime-event-status-differs",
        "the result_saved event derives the status from the failure kind, announcing "
        "not-started refusals and unknown outcomes as failed",
        ("L5.5",),
        edits(edit(EX, find="            outcome=record.outcome.value,\n",
                   replace="            outcome=(Outcome.FAILED if record.failure_kind else Outcome.SUCCEEDED).value,\n")),
    ),
)

# --------------------------------------------------------------------------- stage M

M_MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "duplicate-end-event",
        "the turn loop announces the end of a failed or cancelled model request itself, on "
        "top of the requester's end event",
        ("M1",),
        edits(edit(TU, find="            if reply.error is not None:\n",
                   replace="            if reply.error is not None:\n"
                           "                self._signals.emit(EventType.MODEL_REQUEST_ENDED, session_id,"
                           " request_id=reply.request_id, status=reply.status.value)\n")),
    ),
    Mutant(
        "cancel-recorded-failed",
        "a cancelled model stream is caught by the generic error handler and recorded as failed",
        ("M2",),
        edits(edit(MR, find="        except ModelStreamCancelled as exc:\n"
                            "            return ModelReply(request.request_id, ModelRequestStatus.CANCELLED, \"\".join(text),\n"
                            "                              error=exc)\n",
                   replace="")),
    ),
    Mutant(
        "transport-error-swallowed",
        "a transport error or cancellation of the model stream ends the turn quietly instead "
        "of propagating out of the driver call",
        ("M3",),
        edits(edit(TU, find="                self.end(session_id, _STATUS_OF_FAILED_REQUEST[reply.status], persist=False)\n"
                            "                raise reply.error  # the very exception the stream raised (M3)\n",
                   replace="                return self.end(session_id, _STATUS_OF_FAILED_REQUEST[reply.status], persist=False)\n")),
    ),
    Mutant(
        "extra-model-retry",
        "a failed model request is retried once with the same conversation",
        ("M4",),
        edits(edit(TU, find="            reply = self._ask_model(session_id, opening)\n",
                   replace="            reply = self._ask_model(session_id, opening)\n"
                           "            if reply is not None and reply is not SUPERSEDED"
                           " and reply.status is ModelRequestStatus.FAILED:  # one retry for flaky transports\n"
                           "                reply = self._ask_model(session_id)\n")),
    ),
    Mutant(
        "partial-text-dropped",
        "the partial text of a stream that ended in EOF is not kept with the request",
        ("M5",),
        edits(edit(MR, find="    return \"\" if reply.status is ModelRequestStatus.COMPLETED else reply.text\n",
                   replace="    return \"\"\n")),
    ),
    Mutant(
        "partial-text-taken-as-answer",
        "the partial text of a stream that ended in EOF joins the conversation as an ordinary, "
        "complete assistant answer",
        ("M5",),
        edits(edit(TU, find="                    partial = Message(\"assistant\", reply.text, incomplete=True)\n",
                   replace="                    partial = Message(\"assistant\", reply.text)\n")),
    ),
)

MUTANTS: tuple[Mutant, ...] = L3_MUTANTS + L4_MUTANTS + L5_MUTANTS + M_MUTANTS
