"""Mutants for the criteria of stages X, L1 and L2: at least one per criterion.

Each entry is a text edit of ``reference_impl`` (see :mod:`harness.mutants.source_patch`)
named after its defect, with the criteria expected to catch it.
"""

from __future__ import annotations

from harness.mutants.mutant import Mutant
from harness.mutants.source_patch import edit, edits
from harness.mutants.targets import AP, CC, CG, EX, FP, MR, PM, RC, RS, TU


# --------------------------------------------------------------------------- stage X

X_MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "denial-recorded-as-failed",
        "a pre-call denial is saved with outcome failed instead of not_started",
        ("X1",),
        edits(edit(RS, find="    return ToolOutcome(Outcome.NOT_STARTED, failure, False, False, op.reason)",
                   replace="    return ToolOutcome(Outcome.FAILED, failure, False, False, op.reason)")),
    ),
    Mutant(
        "unavailable-recorded-as-failed",
        "a tool that could not be started (ToolUnavailable) is recorded as failed, as if it had "
        "run, instead of not_started",
        ("X1",),
        edits(edit(FP, find="    return ToolOutcome(\n        Outcome.NOT_STARTED,\n        FailureKind.TRANSIENT,",
                   replace="    return ToolOutcome(\n        Outcome.FAILED,\n        FailureKind.TRANSIENT,")),
    ),
    Mutant(
        "identity-digest-is-repeat-key",
        "the operation identity's argument digest is the repeat key (Bash description dropped) "
        "instead of the digest of the arguments the model emitted",
        ("X2",),
        edits(edit(EX, find="        dedup_key = failure_policy.dedup_key(call.tool, kind, call.args, digest)\n",
                   replace="        dedup_key = failure_policy.dedup_key(call.tool, kind, call.args, digest)\n"
                           "        digest = dedup_key\n")),
    ),
    Mutant(
        "denial-ends-turn-completed",
        "the agent loop takes a permission denial as the end of the task and reports the turn "
        "completed without sending the denial back to the model",
        ("X3",),
        edits(edit(TU, find="                if outcome is StepResult.AWAITING_APPROVAL:\n",
                   replace="                last = continuation.messages(self._store.connection, session_id)[-1]\n"
                           "                if last.role == 'tool' and last.failure_kind == 'permission_denied':\n"
                           "                    return self.end(session_id, TurnStatus.COMPLETED, last.content)\n"
                           "                if outcome is StepResult.AWAITING_APPROVAL:\n")),
    ),
    Mutant(
        "denied-call-hidden-from-model",
        "tool results of denied calls are filtered out of the conversation sent to the model, "
        "so the model never learns its call was not executed",
        ("X3",),
        edits(edit(MR, find="        reply = self._read_stream(ModelRequest(request_id, session_id, conversation, tools))",
                   replace="        conversation = tuple(m for m in conversation"
                           " if m.failure_kind != 'permission_denied')\n"
                           "        reply = self._read_stream(ModelRequest(request_id, session_id, conversation, tools))")),
    ),
    Mutant(
        "recovery-marks-unstarted-unknown",
        "recovery marks every operation without a saved result as unknown/reconciliation_required, "
        "including ones decided (even denied) but never started",
        ("X4",),
        edits(
            edit(RC, find='        "SELECT execution_id FROM operations WHERE stage = ? ORDER BY rowid",\n'
                          "        (Stage.STARTED.value,),",
                 replace='        "SELECT execution_id FROM operations WHERE stage IN (?, ?) ORDER BY rowid",\n'
                         "        (Stage.STARTED.value, Stage.DECIDED.value),"),
            edit(RC, find="                                 from_stage=Stage.STARTED, attempts=1,",
                 replace="                                 from_stage=op.stage, attempts=1,"),
        ),
    ),
    Mutant(
        "reconciliation-for-denials",
        "a pre-call denial is saved with reconciliation_required, as if it might have run",
        ("X4",),
        edits(edit(RS, find="    return ToolOutcome(Outcome.NOT_STARTED, failure, False, False, op.reason)",
                   replace="    return ToolOutcome(Outcome.NOT_STARTED, failure, False, True, op.reason)")),
    ),
    Mutant(
        "tool-claim-reaches-model-as-status",
        "the tool message sent to the model takes its outcome from the tool's own text ('not "
        "executed') while the store keeps the host's record",
        ("X5",),
        edits(edit(RS, find="        outcome=record.outcome,\n",
                   replace="        outcome=Outcome.NOT_STARTED if 'not executed' in record.output.lower()"
                           " else record.outcome,\n")),
    ),
    Mutant(
        "terminal-bypasses-permission",
        "terminal tools skip the permission precedence (the terminal 'has its own approvals') "
        "and are allowed outright",
        ("X6",),
        edits(edit(EX, find="        fixed = fixed_layer_decision(config, op.tool, op.args)\n"
                            "        if fixed is not None:\n"
                            "            return fixed\n"
                            "        limit = ",
                   replace="        if session.tool_kind(op.tool) is ToolKind.TERMINAL:\n"
                           "            return Decision(Permission.ALLOW, DecisionSource.EXACT_GRANT,"
                           " 'terminal commands are approved by the terminal itself')\n"
                           "        fixed = fixed_layer_decision(config, op.tool, op.args)\n"
                           "        if fixed is not None:\n"
                           "            return fixed\n"
                           "        limit = ")),
    ),
)

# --------------------------------------------------------------------------- stage L1

L1_MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "eviction-prunes-failure-log",
        "evicting entries from the recent-failure table also deletes their rows from the "
        "durable failure log, so the full history is lost",
        ("L1.1",),
        edits(edit(FP, find="        (session_id, session_id, max(capacity, 0)),\n    )\n",
                   replace="        (session_id, session_id, max(capacity, 0)),\n    )\n"
                           "    conn.execute(\n"
                           '        "DELETE FROM failure_events WHERE session_id = ? AND dedup_key NOT IN ("\n'
                           '        " SELECT dedup_key FROM failure_table WHERE session_id = ?)",\n'
                           "        (session_id, session_id),\n"
                           "    )\n")),
    ),
    Mutant(
        "eviction-resets-counters",
        "evicting entries from the recent-failure table also clears the session's classifier "
        "denial counters",
        ("L1.2",),
        edits(edit(FP, find="        (session_id, session_id, max(capacity, 0)),\n    )\n",
                   replace="        (session_id, session_id, max(capacity, 0)),\n    )\n"
                           "    if conn.execute('SELECT changes()').fetchone()[0]:\n"
                           "        conn.execute(\n"
                           '            "UPDATE denial_counters SET consecutive = 0, cumulative = 0"\n'
                           '            " WHERE session_id = ?", (session_id,))\n')),
    ),
    Mutant(
        "repeat-guard-reads-failure-table",
        "the repeat guard counts a key's failures from the bounded recent-failure table, so "
        "evicting the entry resets the repeat judgement",
        ("L1.2",),
        edits(edit(FP, find='        "SELECT failures FROM repeat_budget WHERE session_id = ? AND dedup_key = ?"\n'
                            '        " AND permission_version = ?",\n'
                            "        (session_id, dedup_key, permission_version),",
                   replace='        "SELECT count AS failures FROM failure_table WHERE session_id = ? AND dedup_key = ?",\n'
                           "        (session_id, dedup_key),")),
    ),
    Mutant(
        "repeat-budget-keyed-by-full-args",
        "failures are counted under the call's full argument digest instead of its repeat key, "
        "so rewording a Bash description resets the repeat judgement",
        ("L1.3",),
        edits(edit(RS, find="            dedup_key=op.dedup_key,\n",
                   replace="            dedup_key=op.identity.args_digest,\n")),
    ),
    Mutant(
        "user-tool-drops-description",
        "the dedup key drops a field named description from every tool, not only from Bash",
        ("L1.4",),
        edits(edit(FP, find="    if is_bash(tool, kind):\n        args = {name",
                   replace="    if True:\n        args = {name")),
    ),
    Mutant(
        "shell-equivalence-normalised",
        "the Bash dedup key collapses whitespace in the command, merging commands whose text differs",
        ("L1.5",),
        edits(edit(FP, find="        args = {name: value for name, value in args.items() if name != BASH_DISPLAY_ONLY_FIELD}\n",
                   replace="        args = {name: value for name, value in args.items() if name != BASH_DISPLAY_ONLY_FIELD}\n"
                           "        if isinstance(args.get('command'), str):\n"
                           "            args['command'] = ' '.join(args['command'].split())\n")),
    ),
    Mutant(
        "old-checkpoint-v1-unreadable",
        "format detection no longer recognises the 'v' key of version-1 checkpoints, so they "
        "fail to load",
        ("L1.6",),
        edits(edit(CC, find='    elif "v" in document:\n        version = document["v"]\n',
                   replace="")),
    ),
    Mutant(
        "old-checkpoint-v2-read-as-v1",
        "the reader table sends version-2 checkpoints to the version-1 reader, which finds no "
        "'history' and loads an empty conversation",
        ("L1.6",),
        edits(edit(CC, find="_READERS = {1: _read_v1, 2: _read_v2, 3: _read_v3}",
                   replace="_READERS = {1: _read_v1, 2: _read_v1, 3: _read_v3}")),
    ),
    Mutant(
        "param-error-recorded-as-failed",
        "the host records a tool's parameter error as a generic failure",
        ("L1.7",),
        edits(edit(FP, find="    kind = result.error_kind or FailureKind.FAILED\n",
                   replace="    kind = result.error_kind or FailureKind.FAILED\n"
                           "    if kind is FailureKind.PARAM_ERROR:\n"
                           "        kind = FailureKind.FAILED\n")),
    ),
    Mutant(
        "runtime-fault-marks-result-unknown",
        "a failure writing diagnostics turns the already saved result into unknown / "
        "reconciliation_required",
        ("L1.7",),
        edits(edit(EX, find="            return  # reported as a runtime fault; the result record is untouched (L4.7)\n",
                   replace="            with self._store.transaction() as conn:\n"
                           "                conn.execute(\"UPDATE result_records SET outcome = 'unknown',"
                           " reconciliation_required = 1 WHERE execution_id = ?\", (op.execution_id,))\n"
                           "            return\n")),
    ),
    Mutant(
        "retries-non-idempotent-transient",
        "transient errors are retried automatically whether or not the tool is idempotent",
        ("L1.8",),
        edits(edit(FP, find="        and not result.escalation_requested\n        and idempotent\n",
                   replace="        and not result.escalation_requested\n")),
    ),
    Mutant(
        "retry-limit-off-by-one",
        "transient errors of idempotent tools are retried one time more than auto_retries_max",
        ("L1.8",),
        edits(edit(FP, find="        and retries_done < retries_max\n",
                   replace="        and retries_done <= retries_max\n")),
    ),    Mutant(
        "retry-that-cannot-start-forgets-the-run",
        "when the retry of an attempt that ran cannot start, the saved failure keeps neither the "
        "output nor the digest of the attempt that ran (the result record no longer binds the "
        "executed result); the reference's own defect until a scenario reached this path",
        ("L4.7",),
        edits(edit(EX, find="                            last_returned.output,\n"
                            "                            result_digest(last_returned.status.value, last_returned.output),\n",
                   replace="                            \"\", None,\n")),
        trust_class="catalogue",
    ),
    Mutant(
        "unavailable-after-run-reported-not-started",
        "when the retry of an attempt that ran cannot start, the operation is saved as "
        "certainly not executed (not_started, retry offered), though its first attempt ran",
        ("L2.10", "L5.4"),
        edits(edit(EX, find="                if returned_before:  # an earlier attempt did run: not \"certainly not started\"\n",
                   replace="                if False:  # the last attempt could not start\n")),
        trust_class="catalogue",
    ),
)

# --------------------------------------------------------------------------- stage L2

L2_MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "classifier-overrides-explicit-deny",
        "in auto mode an explicit deny rule is left to the classifier, so the classifier's allow "
        "runs a call a deny rule forbids",
        ("L2.1",),
        edits(edit(EX, find="        fixed = fixed_layer_decision(config, op.tool, op.args)\n"
                            "        if fixed is not None:\n"
                            "            return fixed\n"
                            "        limit = ",
                   replace="        fixed = fixed_layer_decision(config, op.tool, op.args)\n"
                           "        if fixed is not None and not (config.mode is Mode.AUTO"
                           " and fixed.decided_by is DecisionSource.EXPLICIT_DENY):\n"
                           "            return fixed\n"
                           "        limit = ")),
    ),
    Mutant(
        "exact-grant-before-ask-rule",
        "ask rules and exact grants are matched in one pass in declaration order, so a broader "
        "allow rule declared before an ask rule grants what the ask rule reserves for the owner",
        ("L2.1",),
        edits(edit(
            PM,
            find="    for rule in config.rules:\n"
                 "        if rule.effect is RuleEffect.ASK and rule_matches(rule, tool, args):\n",
            replace="    for rule in config.rules:\n"
                    "        if rule.effect is RuleEffect.ALLOW and rule_matches(rule, tool, args):\n"
                    "            return Decision(Permission.ALLOW, DecisionSource.EXACT_GRANT,\n"
                    "                            f'allow rule {rule.tool}:{rule.pattern!r} grants it')\n"
                    "        if rule.effect is RuleEffect.ASK and rule_matches(rule, tool, args):\n",
        )),
    ),
    Mutant(
        "trusted-cwd-omitted",
        "the classifier request leaves the trusted working directory empty",
        ("L2.2",),
        edits(edit(CG, find="        trusted_cwd=config.trusted_cwd,",
                   replace='        trusted_cwd="",')),
    ),
    Mutant(
        "classifier-reviews-first-command-only",
        "for Bash the classifier receives only the first command of a compound command line "
        "(up to the first ';'), so a dangerous tail is never reviewed",
        ("L2.3", "L2.2"),
        edits(edit(CG, find="        operation=canonical_json(args),\n",
                   replace="        operation=canonical_json(\n"
                           "            {**args, 'command': str(args.get('command', '')).split(';')[0]}\n"
                           "            if is_bash(tool, session.tool_kind(tool)) else args),\n")),
    ),
    Mutant(
        "description-sent-as-trusted",
        "the model-written Bash description is appended to the trusted user requirements of the "
        "classifier request",
        ("L2.4",),
        edits(edit(CG, find="        user_requirements=config.user_requirements,",
                   replace="        user_requirements=(config.user_requirements + ' '"
                           " + untrusted_description).strip(),")),
    ),
    Mutant(
        "pre-approved-wording-skips-review",
        "a model-written description claiming the call is pre-approved makes the gate allow it "
        "without asking the classifier",
        ("L2.4",),
        edits(edit(CG, find="        request = build_request(session, op.tool, op.args)\n",
                   replace="        request = build_request(session, op.tool, op.args)\n"
                           "        if 'pre-approved' in request.untrusted_description.lower():\n"
                           "            return Decision(Permission.ALLOW, DecisionSource.CLASSIFIER,"
                           " 'pre-approved', classifier_outcome=ClassifierOutcome.ALLOW)\n")),
    ),
    Mutant(
        "classifier-timeout-fails-open",
        "a classifier timeout is taken as an allow (fail-open) and the operation runs",
        ("L2.5",),
        edits(edit(CG, find="        if verdict.outcome is ClassifierOutcome.ALLOW:\n",
                   replace="        if verdict.outcome in (ClassifierOutcome.ALLOW, ClassifierOutcome.TIMEOUT):\n")),
    ),
    Mutant(
        "start-registered-before-review",
        "the execution start is registered (execution_started, EXECUTION_STARTED) before the "
        "classifier review, so the UI shows it running while it is still being reviewed",
        ("L2.6",),
        edits(edit(EX, find="        return self._gate.review(session, op)\n",
                   replace="        with self._store.transaction() as conn:\n"
                           "            conn.execute('UPDATE operations SET execution_started = 1"
                           " WHERE execution_id = ?', (op.execution_id,))\n"
                           "        self._signals.emit(EventType.EXECUTION_STARTED, op.session_id,"
                           " op.execution_id)\n"
                           "        return self._gate.review(session, op)\n")),
    ),
    Mutant(
        "cancel-ignored-during-review",
        "cancellation is honoured only by the turn loop between steps: neither the classifier "
        "gate after its review nor revalidation checks it (two layers disabled), so an operation "
        "under review when the session is cancelled still runs",
        ("L2.7",),
        edits(
            edit(CG, find="        if after.cancelled:\n"
                          "            return Decision(\n"
                          "                Permission.DENY,\n"
                          "                DecisionSource.CANCELLATION,\n"
                          '                "the session was cancelled during the classifier review",\n'
                          "                classifier_outcome=ClassifierOutcome.CANCELLED,\n"
                          "            )\n",
                 replace=""),
            edit(EX, find="        if session.cancelled:\n"
                          "            return Decision(Permission.DENY, DecisionSource.CANCELLATION,\n"
                          '                            "the session was cancelled before execution")\n',
                 replace=""),
        ),
    ),
    Mutant(
        "revocation-ignored-during-review",
        "the classifier gate does not compare permission versions after its review and the "
        "decision is stamped with the version in force when it is saved, not the one it was "
        "taken under (two layers), so a verdict given under revoked rules runs",
        ("L2.8",),
        edits(
            edit(CG, find="        if after.permission_version != session.permission_version:\n"
                          "            return Decision(\n"
                          "                Permission.DENY,\n"
                          "                DecisionSource.REVALIDATION,\n"
                          '                f"the permission version changed from {session.permission_version} to "\n'
                          '                f"{after.permission_version} during the review; its verdict is void",\n'
                          "                classifier_outcome=verdict.outcome,\n"
                          "            )\n",
                 replace=""),
            edit(EX, find="        decision = self._decision_for(session, op)\n",
                 replace="        decision = self._decision_for(session, op)\n"
                         "        session = self._session(op.session_id)\n"),
        ),
    ),
    Mutant(
        "approval-not-revalidated",
        "an owner's approval is treated as final: revalidation skips the permission-version "
        "check for approved operations, so an approval given under old rules still runs",
        ("L2.9",),
        edits(edit(EX, find="        if session.permission_version == op.identity.permission_version:\n",
                   replace="        if session.permission_version == op.identity.permission_version"
                           " or op.decided_by is DecisionSource.APPROVAL:\n")),
    ),
    Mutant(
        "file-precondition-not-revalidated",
        "revalidation leaves the expect_sha file precondition to the tool: an edit whose file "
        "another operation rewrote while its approval was pending is still sent to the tool",
        ("L2.9",),
        edits(edit(EX, find="        writer = _writer_since_decision(conn, op)\n",
                   replace="        writer = None  # the tool checks expect_sha itself\n")),
    ),
    Mutant(
        "escalation-denial-marks-not-started",
        "refusing an escalation rewrites the sandboxed attempt's result as not started "
        "(execution_started=false), though it ran with partial effects",
        ("L2.10",),
        edits(edit(AP, find='    conn.execute(\n        "UPDATE result_records SET reason = ? WHERE execution_id = ?",\n'
                            '        ("the owner refused',
                   replace='    conn.execute("UPDATE operations SET execution_started = 0 WHERE execution_id = ?",'
                           " (wait.execution_id,))\n"
                           '    conn.execute(\n        "UPDATE result_records SET reason = ?, outcome = \'not_started\','
                           ' execution_started = 0 WHERE execution_id = ?",\n'
                           '        ("the owner refused')),
    ),
    Mutant(
        "retry-escalates-without-approval",
        "a sandboxed attempt that asks for more permission is retried outside the sandbox "
        "automatically, without an approval of its own",
        ("L2.11",),
        edits(edit(EX, find="            returned_before = True\n",
                   replace="            returned_before = True\n"
                           "            if result.escalation_requested and invocation.sandboxed:\n"
                           "                invocation = ToolInvocation(op.identity, op.session_id, op.tool,"
                           " op.args, False)\n"
                           "                continue\n")),
    ),
    Mutant(
        "revalidation-refusal-marks-started",
        "an operation refused at revalidation (its approval or rules went stale) is saved with "
        "execution_started=true, as if the tool had been called",
        ("L2.10",),
        edits(edit(RS, find="    return ToolOutcome(Outcome.NOT_STARTED, failure, False, False, op.reason)\n",
                   replace="    return ToolOutcome(Outcome.NOT_STARTED, failure,\n"
                           "                       op.decided_by is DecisionSource.REVALIDATION, False, op.reason)\n")),
        trust_class="catalogue",
    ),
    Mutant(
        "cancel-before-start-runs-tool",
        "the revalidation before the start forgets the cancellation: a session cancelled after "
        "the permission decision and before the start still runs the allowed tool",
        ("L2.7",),
        edits(edit(EX, find="        if session.cancelled:\n"
                            "            return Decision(Permission.DENY, DecisionSource.CANCELLATION,\n"
                            "                            \"the session was cancelled before execution\")\n",
                   replace="")),
        trust_class="catalogue",
    ),
)

MUTANTS: tuple[Mutant, ...] = X_MUTANTS + L1_MUTANTS + L2_MUTANTS
