"""Mutants of the reference (see :mod:`harness.mutants.catalogue`): area `xl5`.

Each one is a defect only a judge that looks at the world catches: the store (``inspect``)
stays right, or agrees with itself, while the UI the world received, the ledger's retries or
the model's tool list say otherwise.
"""

from __future__ import annotations

from harness.mutants.mutant import Mutant
from harness.mutants.source_patch import edit, edits
from harness.mutants.targets import EX, FP, RS, VI

MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "projection-replay-never-published",
        "a projection replayed by recovery or a catch-up only updates the store: delivery "
        "becomes projected although the UI never received it",
        ("X1",),
        edits(edit(EX, find="        try:\n            self._world.publish(projection)\n",
                   replace="        try:\n"
                           "            if with_failpoint:  # a replay only brings the store up to date\n"
                           "                self._world.publish(projection)\n")),
        trust_class="world_judges",
    ),
    Mutant(
        "ui-offers-retry-for-unknown",
        "the UI offers retry for an operation whose outcome is unknown while the stored "
        "projection (what inspect reports) keeps only reconcile",
        ("L5.4",),
        edits(edit(EX, find="        try:\n            self._world.publish(projection)\n",
                   replace="        try:\n"
                           "            shown = projection\n"
                           "            if projection.outcome is Outcome.UNKNOWN:  # let the user try again\n"
                           "                import dataclasses\n"
                           "                from harness.contract import RecoveryAction\n"
                           "                shown = dataclasses.replace(projection, recovery_actions=(\n"
                           "                    RecoveryAction.RETRY, *projection.recovery_actions))\n"
                           "            self._world.publish(shown)\n")),
        trust_class="world_judges",
    ),
    Mutant(
        "projection-before-result-saved",
        "the UI is shown the tool's result as soon as the tool returns, before the result "
        "record is saved (an optimistic UI that a crash leaves showing a result the store "
        "never had)",
        ("X1",),
        edits(edit(EX, find="        escalation = None\n        with self._store.transaction() as conn:\n",
                   replace="        from harness.contract import Projection, expected_projection\n"
                           "        status, actions = expected_projection(\n"
                           "            Permission.ALLOW, outcome.outcome, started.decided_by, outcome.failure_kind,\n"
                           "            outcome.reconciliation_required, False)\n"
                           "        self._world.publish(Projection(  # show it at once\n"
                           "            op.session_id, op.execution_id, op.tool_call_id, Permission.ALLOW,\n"
                           "            outcome.outcome, status, outcome.reason, actions))\n"
                           "        escalation = None\n        with self._store.transaction() as conn:\n")),
        trust_class="world_judges",
    ),
    Mutant(
        "unknown-answer-saved-as-failed",
        "a tool answer of kind unknown is saved as a definite failure, so store and UI agree on "
        "'failed' with edit_args where the world demands reconciliation",
        ("L5.4",),
        edits(edit(FP, find="    if result.error_kind is FailureKind.UNKNOWN:\n",
                   replace="    if result.error_kind is FailureKind.UNKNOWN and False:  # treated as a failure\n")),
        trust_class="world_judges",
    ),
    Mutant(
        "web-tool-own-retry-loop",
        "web tools are retried by their own client loop on any error, definite failures and "
        "non-idempotent calls included, outside the common retry policy",
        ("X6",),
        edits(edit(EX, find="            if failure_policy.may_retry_result(result, idempotent, attempts - 1, retries_max):\n",
                   replace="            if failure_policy.may_retry_result(result, idempotent, attempts - 1, retries_max) or (\n"
                           "                    session.tool_kind(op.tool) is ToolKind.WEB\n"
                           "                    and result.status.value == 'error' and attempts < 3):  # web client retries\n")),
        trust_class="catalogue",
    ),
    Mutant(
        "web-tool-skips-common-retry",
        "web tools opt out of the common retry policy (their client 'handles errors itself'): "
        "a transient error of an idempotent web tool is never retried while ordinary tools are",
        ("X6",),
        edits(edit(EX, find="            if failure_policy.may_retry_result(result, idempotent, attempts - 1, retries_max):\n",
                   replace="            if failure_policy.may_retry_result(result, idempotent, attempts - 1, retries_max) and (\n"
                           "                    session.tool_kind(op.tool) is not ToolKind.WEB):  # the web client handles errors\n")),
        trust_class="catalogue",
    ),
    Mutant(
        "deny-rule-hides-whole-tool",
        "a deny rule that forbids one specific operation of a tool (a command pattern, a URL) "
        "hides the whole tool from the model",
        ("L5.3",),
        edits(edit(VI, find="    return tuple(spec.name for spec in config.tools if not denied_outright(config, spec.name))\n",
                   replace="    return tuple(spec.name for spec in config.tools if not denied_outright(config, spec.name)\n"
                           "                 and not any(rule.effect.value == 'deny' and rule.tool == spec.name\n"
                           "                             for rule in config.rules))  # denied somewhere: hide it\n")),
        trust_class="catalogue",
    ),
    Mutant(
        "denial-reason-withheld-from-model",
        "the tool message of a call that did not run tells the model only that it was not "
        "executed, not why (the store and the UI keep the reason), so the model cannot change "
        "course",
        ("X3",),
        edits(edit(RS, find="        content = f\"not executed: {record.reason}\"\n",
                   replace="        content = \"not executed\"\n")),
        trust_class="world_judges",
    ),
    Mutant(
        "projection-reason-from-operation",
        "the projection (and inspect(), built by the same function) takes its reason from the "
        "operation's decision record rather than from the result record: a failed call is "
        "shown with the rule that allowed it",
        ("L5.4",),
        edits(edit(VI, find="    reason = result.reason if result else op.reason\n",
                   replace="    reason = op.reason if op.reason else (result.reason if result else \"\")\n")),
        trust_class="world_judges",
    ),
)
