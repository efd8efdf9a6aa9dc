"""Mutants of the reference (see :mod:`harness.mutants.catalogue`): area `l4m`.

Each proves one of the sharpened L4/M rules caught, including the hard cases a weaker
"exercised" rule would let pass: a claim that only fails when two instances really race
under an engaged hold, a re-execution that only touches non-write tools, a repair that
borrows another call's denial, a model retry that only follows an incomplete stream, the
calls of an incomplete stream run only once a later turn settles them.
"""

from __future__ import annotations

from harness.mutants.mutant import Mutant
from harness.mutants.source_patch import edit, edits
from harness.mutants.targets import EX, MR, RC, TU

MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "claim-guarded-in-memory",
        "the start claim is guarded by the instance's in-memory set of claims instead of the "
        "stored stage, so a second instance on the same store claims and runs the operation "
        "again (sequential turns never show it: only a race under an engaged hold does)",
        ("L4.10",),
        edits(edit(EX, find="            claimed = refusal is None and bool(conn.execute(\n"
                            "                \"UPDATE operations SET stage = ?, execution_started = 1,\"\n"
                            "                \" start_order = (SELECT COALESCE(MAX(start_order), 0) + 1 FROM operations)\"\n"
                            "                \" WHERE execution_id = ? AND stage = ? AND permission = ?\",\n"
                            "                (Stage.STARTED.value, op.execution_id, op.stage.value, Permission.ALLOW.value),\n"
                            "            ).rowcount)\n",
                   replace="            claims = self.__dict__.setdefault('_claims_in_memory', set())\n"
                           "            claimed = refusal is None and (op.execution_id, op.stage.value) not in claims and bool(conn.execute(\n"
                           "                \"UPDATE operations SET stage = ?, execution_started = 1,\"\n"
                           "                \" start_order = (SELECT COALESCE(MAX(start_order), 0) + 1 FROM operations)\"\n"
                           "                \" WHERE execution_id = ? AND permission = ?\",\n"
                           "                (Stage.STARTED.value, op.execution_id, Permission.ALLOW.value),\n"
                           "            ).rowcount)\n"
                           "            claims.add((op.execution_id, op.stage.value))\n")),
        trust_class="world_judges",
    ),
    Mutant(
        "reexecute-non-write-after-result-saved",
        "recovery treats read, web, terminal, user-app and Bash operations whose saved result "
        "is not checkpointed yet as safe to repeat and runs them again (writes are left alone)",
        ("L4.1",),
        edits(edit(RC, find="    completed = _fold_unsaved_results(store, pipeline)\n",
                   replace="    with store.transaction() as conn:  # not checkpointed, and only a read/UI action: redo it\n"
                           "        repeat = (\"SELECT execution_id FROM operations WHERE stage = 'recorded'\"\n"
                           "                  \" AND checkpoint_sequence IS NULL\"\n"
                           "                  \" AND tool_kind IN ('read', 'web', 'terminal', 'user_app', 'bash')\")\n"
                           "        conn.execute(f\"DELETE FROM result_records WHERE execution_id IN ({repeat})\")\n"
                           "        conn.execute(f\"UPDATE operations SET stage = 'decided', delivery = 'pending',\"\n"
                           "                     f\" execution_started = 0 WHERE execution_id IN ({repeat})\")\n"
                           "    completed = _fold_unsaved_results(store, pipeline)\n")),
        trust_class="catalogue",
    ),
    Mutant(
        "repair-borrows-other-denial",
        "recovery records an operation whose start was recorded but whose result was never "
        "saved as not executed whenever another call of its session was denied",
        ("L4.8", "L4.3"),
        edits(edit(RC, find="        op = records.load_operation(store.connection, row[\"execution_id\"])\n"
                            "        with store.transaction() as conn:\n"
                            "            saved = results.save(conn, records.load_session(conn, op.session_id), op, unknown,\n",
                   replace="        op = records.load_operation(store.connection, row[\"execution_id\"])\n"
                           "        denied_nearby = store.connection.execute(\n"
                           "            \"SELECT 1 FROM operations WHERE session_id = ? AND permission = 'deny'\"\n"
                           "            \" AND execution_id != ?\", (op.session_id, op.execution_id)).fetchone()\n"
                           "        guessed = ToolOutcome(Outcome.NOT_STARTED, FailureKind.PERMISSION_DENIED, False, False,\n"
                           "                              'a denial in this session: not executed')\n"
                           "        with store.transaction() as conn:\n"
                           "            saved = results.save(conn, records.load_session(conn, op.session_id), op,\n"
                           "                                 guessed if denied_nearby else unknown,\n")),
        trust_class="catalogue",
    ),
    Mutant(
        "repair-matches-denial-by-tool",
        "recovery records an operation whose start was recorded but whose result was never "
        "saved as not executed when a call of the same tool (other arguments) was denied: it "
        "matches the tool, not the exact call",
        ("L4.8", "L4.3"),
        edits(edit(RC, find="        op = records.load_operation(store.connection, row[\"execution_id\"])\n"
                            "        with store.transaction() as conn:\n"
                            "            saved = results.save(conn, records.load_session(conn, op.session_id), op, unknown,\n",
                   replace="        op = records.load_operation(store.connection, row[\"execution_id\"])\n"
                           "        same_tool_denied = store.connection.execute(\n"
                           "            \"SELECT 1 FROM operations WHERE session_id = ? AND tool = ? AND permission = 'deny'\"\n"
                           "            \" AND execution_id != ?\", (op.session_id, op.tool, op.execution_id)).fetchone()\n"
                           "        guessed = ToolOutcome(Outcome.NOT_STARTED, FailureKind.PERMISSION_DENIED, False, False,\n"
                           "                              f'{op.tool} is denied in this session: not executed')\n"
                           "        with store.transaction() as conn:\n"
                           "            saved = results.save(conn, records.load_session(conn, op.session_id), op,\n"
                           "                                 guessed if same_tool_denied else unknown,\n")),
        trust_class="catalogue",
    ),
    Mutant(
        "model-retry-after-eof",
        "a model stream that ended by EOF without any text is asked again once with the same "
        "conversation, as a hidden retry",
        ("M4",),
        edits(
            edit(TU, find="        for _ in range(MAX_STEPS_PER_DRIVE):\n",
                 replace="        retried = False\n        for _ in range(MAX_STEPS_PER_DRIVE):\n"),
            edit(TU, find="            if reply.status is ModelRequestStatus.INCOMPLETE:\n"
                          "                return self.end(session_id, TurnStatus.INCOMPLETE, reply.text, persist=False)\n",
                 replace="            if reply.status is ModelRequestStatus.INCOMPLETE and not reply.text and not retried:\n"
                         "                retried = True  # a dropped connection: ask once more\n"
                         "                continue\n"
                         "            if reply.status is ModelRequestStatus.INCOMPLETE:\n"
                         "                return self.end(session_id, TurnStatus.INCOMPLETE, reply.text, persist=False)\n"),
        ),
        trust_class="world_judges",
    ),
    Mutant(
        "eof-calls-left-pending",
        "the tool calls a model stream emitted before it ended by EOF are kept with its "
        "partial text as calls of the conversation: the turn still ends incomplete and nothing "
        "runs in it, but the next turn settles them as pending calls and runs them",
        ("M5",),
        edits(
            edit(MR, find="                    return ModelReply(request.request_id, ModelRequestStatus.INCOMPLETE,\n"
                          "                                      \"\".join(text))\n",
                 replace="                    return ModelReply(request.request_id, ModelRequestStatus.INCOMPLETE,\n"
                         "                                      \"\".join(text), tuple(calls))\n"),
            edit(TU, find="                if reply.text:  # kept, and marked so that nobody takes it as an answer\n"
                          "                    partial = Message(\"assistant\", reply.text, incomplete=True)\n",
                 replace="                if reply.text or reply.tool_calls:  # kept, with the calls it emitted\n"
                         "                    partial = Message(\"assistant\", reply.text, tool_calls=reply.tool_calls,\n"
                         "                                      incomplete=True)\n"),
        ),
        trust_class="catalogue",
    ),
    Mutant(
        "recovery-leaves-model-requests-open",
        "recovery does not end the model requests a crash left without an end: the request "
        "stays started and never ended in the store and in the event channel, after the "
        "restart as before it",
        ("M1",),
        edits(edit(RC, find="    _end_interrupted_model_requests(store, world, signals)\n", replace="")),
    ),
    Mutant(
        "recovery-settles-unknown-silently",
        "recovery saves an interrupted write as unknown (store, projection and conversation "
        "all say so) but never announces it on the realtime channel, so a UI that follows "
        "the events shows the call running for ever",
        ("L5.5",),
        edits(edit(RC, find="        if saved:\n"
                            "            pipeline.announce_result(op.session_id, op.execution_id)\n"
                            "            marked.append(op.execution_id)\n",
                   replace="        if saved:\n            marked.append(op.execution_id)\n")),
        trust_class="world_judges",
    ),
    Mutant(
        "withdrawn-escalation-settles-silently",
        "an escalation withdrawn before its prompt (the rules now forbid the call) makes the "
        "sandboxed attempt's saved result final without announcing it on the realtime channel",
        ("L5.5",),
        edits(edit(EX, find="            if wait.purpose == approvals.ESCALATION:\n"
                            "                self.announce_result(op.session_id, op.execution_id)  # now final\n"
                            "            return\n",
                   replace="            return\n")),
        trust_class="world_judges",
    ),
    Mutant(
        "withdrawn-wait-leaves-turn-awaiting",
        "a wait withdrawn before its prompt (the rules changed) sends its call back for a new "
        "decision but leaves the turn stored as awaiting approval, so a crash during that "
        "decision is followed by a recovery that does not resume the turn: the call stays "
        "prepared for ever",
        ("L4.8",),
        edits(edit(EX, find="            if withdrawn:\n"
                            "                # The loop goes on from here (a new decision, or the escalation's attempt\n"
                            "                # delivered): a crash from now on must find the turn running, so that\n"
                            "                # recovery resumes it instead of leaving it awaiting an answer to nothing.\n"
                            "                records.set_turn_status(conn, op.session_id, TurnStatus.RUNNING)\n",
                   replace="")),
        trust_class="world_judges",
    ),
    Mutant(
        "new-turn-abandons-pending-calls",
        "a new user message does not settle the calls an earlier turn left pending: the "
        "message is appended after them and the model is sent calls without their results",
        ("X3",),
        edits(edit("reference_impl.runtime",
                   find="        self._refuse_unanswered_waits(session_id)\n"
                        "        while True:\n"
                        "            settled = self._turns.settle_pending_calls(session_id)\n",
                   replace="        while False:\n"
                           "            settled = self._turns.settle_pending_calls(session_id)\n")),
    ),
    Mutant(
        "new-message-leaves-waits-pending",
        "a new user message while calls wait for approval leaves the waits pending and is "
        "appended after the unanswered calls: the model is sent calls without their results, "
        "and a late approval still runs a call the conversation has moved past",
        ("X3",),
        edits(edit("reference_impl.runtime",
                   find="        self._refuse_unanswered_waits(session_id)\n        while True:\n",
                   replace="        while True:\n"),
              edit("reference_impl.runtime",
                   find="or not self._refuse_unanswered_waits(session_id):\n",
                   replace="or True:\n")),
    ),
    Mutant(
        "prompt-shows-an-answered-wait",
        "an instance shows the prompt of a wait it committed although another instance's new "
        "message answered it meanwhile: the owner is asked about a call already refused",
        ("L3.2",),
        edits(edit("reference_impl.execution",
                   find="            if current is None or current.status is not WaitStatus.PENDING:\n"
                        "                return\n",
                   replace="")),
    ),
    Mutant(
        "stale-answer-appended",
        "a model answer that comes back after another instance moved the conversation on is "
        "appended to the new conversation anyway: the model is later sent an answer it gave "
        "to a conversation that is gone (and its calls run after the turn was done)",
        ("M5",),
        edits(edit(TU, find="                if (current.sequence if current else 0) != sent_at_sequence[0]:\n"
                            "                    # Another instance moved the conversation on while this request ran: the\n"
                            "                    # answer is to a conversation that is gone; the loop asks from the new one.\n"
                            "                    return\n",
                   replace="")),
        trust_class="world_judges",
    ),
    Mutant(
        "recovery-refolds-projected-results",
        "recovery that finds a result checkpointed but not projected appends its tool message "
        "to the conversation again before replaying the projection: the model is told the "
        "call returned twice (no tool runs again, the store keeps one record)",
        ("X2",),
        edits(edit(RC, find="    for row in rows:\n"
                            "        pipeline.project(row[\"execution_id\"], with_failpoint=False)\n",
                   replace="    from reference_impl import continuation\n"
                           "    for row in rows:\n"
                           "        with store.transaction() as conn:  # make sure the model has it\n"
                           "            op = records.load_operation(conn, row[\"execution_id\"])\n"
                           "            record = results.load(conn, row[\"execution_id\"])\n"
                           "            if record is not None:\n"
                           "                continuation.append(conn, op.session_id, results.tool_message(record),\n"
                           "                                    reason=\"recovery\", now=0.0)\n"
                           "        pipeline.project(row[\"execution_id\"], with_failpoint=False)\n")),
        trust_class="world_judges",
    ),
)
