"""Allowed choices: the reference with one choice the contract leaves free made the other way.

Each value here is built like a mutant (a text edit of ``reference_impl``, applied by
:mod:`harness.mutants.source_patch` and undone after every call), but it is no defect: it
does what the docs allow and the reference happens not to do. An outside implementation
written from the docs made each of these choices and the harness failed it for them (issue
31's five false failures), so each is a test that the harness accepts the choice: every
scenario it is run on must pass with no scenario error.

* :data:`RECOVERY_PASSES_CHECKPOINT_FAILPOINTS`: ``recover()`` calls ``during_checkpoint_build``
  and ``after_checkpoint_saved`` around the checkpoint that folds the results it finds,
  including the ``unknown`` of a call a crash cut off (protocol.md: every failpoint at the
  lifecycle point it names; nothing says recovery calls none);
* :data:`DENY_PATH_WITHOUT_FAILPOINTS`: saving a denial passes no failpoint (lifecycle.md's
  pipeline table: the deny row's failpoint is "—");
* :data:`CANCELLED_CALL_NOT_DECIDED`: the decision is taken after ``after_prepare`` (its own
  step in the table, not folded into the prepare commit), and a call of a cancelled session
  is recorded not executed (decided_by cancellation) without passing
  ``after_permission_decision`` (contract.md's outcome table, lifecycle.md's recovery row);
* :data:`VOID_VERDICT_BOUND_TO_NEW_VERSION`: a classifier verdict voided by a rule change
  during the review is recorded denied, decided_by ``revalidation`` (contract.md), bound to
  the permission version in force when it was voided rather than the one it was asked under;
* :data:`DECISION_POINT_ON_EVERY_DECISION` (found by the neutrality model's choices, not by
  the outside implementation): ``after_permission_decision`` after every decision, an owner's
  answer and a revalidation refusal included, and after taking up a call another instance
  decided ("decided again", L4.8).
* :data:`STANDING_RESULT_DELIVERED_WITH_FAILPOINTS` (issue 31's fifth, found by the Node
  runtime): when revalidation refuses an approved escalated run, the sandboxed attempt's saved
  result stands (contract.md's outcome table) and is then checkpointed and projected through
  ``during_diagnostics_write``, ``during_checkpoint_build``, ``after_checkpoint_saved`` and
  ``after_projection``, like any result being delivered (protocol.md: every failpoint at the
  lifecycle point it names); the reference delivers it without failpoints.
"""

from __future__ import annotations

from harness.mutants.mutant import Mutant
from harness.mutants.source_patch import edit, edits

EX = "reference_impl.execution"
RC = "reference_impl.recovery"

RECOVERY_PASSES_CHECKPOINT_FAILPOINTS = Mutant(
    "recovery-passes-checkpoint-failpoints",
    "recover() calls during_checkpoint_build and after_checkpoint_saved for every result it "
    "folds, a crash-cut unknown included",
    (),
    edits(edit(RC,
               find='    for row in sessions:\n'
                    '        folded.extend(pipeline.fold(row["session_id"], reason="recovery").execution_ids)\n',
               replace='    from harness.contract import Failpoint\n'
                       '    for row in sessions:\n'
                       '        ops = store.connection.execute(\n'
                       '            "SELECT execution_id, tool_call_id FROM operations WHERE session_id = ?"\n'
                       '            " AND stage = ? AND checkpoint_sequence IS NULL ORDER BY rowid",\n'
                       '            (row["session_id"], Stage.RECORDED.value)).fetchall()\n'
                       '        for op in ops:\n'
                       '            pipeline._signals.failpoint(Failpoint.DURING_CHECKPOINT_BUILD,\n'
                       '                                        row["session_id"], op["execution_id"],\n'
                       '                                        op["tool_call_id"])\n'
                       '        folded.extend(pipeline.fold(row["session_id"], reason="recovery").execution_ids)\n'
                       '        for op in ops:\n'
                       '            pipeline._signals.failpoint(Failpoint.AFTER_CHECKPOINT_SAVED,\n'
                       '                                        row["session_id"], op["execution_id"],\n'
                       '                                        op["tool_call_id"])\n')),
)

DENY_PATH_WITHOUT_FAILPOINTS = Mutant(
    "deny-path-without-failpoints",
    "a saved denial is checkpointed and projected without passing any failpoint",
    (),
    edits(edit(EX,
               find="                    fresh = self._save_refusal(op)\n",
               replace="                    self._save_refusal(op)\n"
                       "                    fresh = False  # caught up without failpoints\n")),
)

CANCELLED_CALL_NOT_DECIDED = Mutant(
    "cancelled-call-not-decided",
    "the decision is its own step after after_prepare, and a call of a cancelled session is "
    "recorded not executed without passing after_permission_decision",
    (),
    edits(
        edit(EX,
             find="        decision = self._decision_for(session, op, review=False)\n",
             replace="        decision = None  # decided in a step of its own\n"),
        edit(EX,
             find="        self._signals.failpoint(Failpoint.AFTER_PERMISSION_DECISION, op.session_id,\n"
                  "                                op.execution_id, op.tool_call_id)\n",
             replace="        if decision.decided_by is not DecisionSource.CANCELLATION:\n"
                     "            self._signals.failpoint(Failpoint.AFTER_PERMISSION_DECISION,\n"
                     "                                    op.session_id, op.execution_id,\n"
                     "                                    op.tool_call_id)\n"),
    ),
)

VOID_VERDICT_BOUND_TO_NEW_VERSION = Mutant(
    "void-verdict-bound-to-new-version",
    "a classifier verdict voided by a rule change is recorded denied by revalidation under "
    "the new permission version",
    (),
    edits(edit(EX,
               find="        decision = self._decision_for(session, op)\n"
                    "        if not self._save_decision(session, op, decision):\n",
               replace="        decision = self._decision_for(session, op)\n"
                       "        if decision.decided_by is DecisionSource.REVALIDATION:\n"
                       "            session = self._session(op.session_id)  # the version now\n"
                       "        if not self._save_decision(session, op, decision):\n")),
)

DECISION_POINT_ON_EVERY_DECISION = Mutant(
    "decision-point-on-every-decision",
    "after_permission_decision is also passed for the decisions the reference records "
    "without it: an owner's answer, a refusal at revalidation, and a call decided by another "
    "(restarted or second) instance that this one takes up",
    (),
    edits(
        edit(EX,
             find="            elif op.stage is Stage.DECIDED:\n"
                  "                if op.permission is Permission.ALLOW:\n",
             replace="            elif op.stage is Stage.DECIDED:\n"
                     "                if op.execution_id not in self.__dict__.setdefault('_seen', set()):\n"
                     "                    self._seen.add(op.execution_id)\n"
                     "                    self._signals.failpoint(Failpoint.AFTER_PERMISSION_DECISION,\n"
                     "                                            op.session_id, op.execution_id,\n"
                     "                                            op.tool_call_id)\n"
                     "                if op.permission is Permission.ALLOW:\n"),
        edit(EX,
             find="        self._signals.failpoint(Failpoint.AFTER_PERMISSION_DECISION, op.session_id,\n"
                  "                                op.execution_id, op.tool_call_id)\n",
             replace="        self.__dict__.setdefault('_seen', set()).add(op.execution_id)\n"
                     "        self._signals.failpoint(Failpoint.AFTER_PERMISSION_DECISION, op.session_id,\n"
                     "                                op.execution_id, op.tool_call_id)\n"),
    ),
)

STANDING_RESULT_DELIVERED_WITH_FAILPOINTS = Mutant(
    "standing-result-delivered-with-failpoints",
    "a refused escalated run's standing sandboxed result is delivered through the diagnostics, "
    "checkpoint and projection failpoints",
    (),
    edits(edit(EX,
               find="        if escalating:\n"
                    "            self.announce_result(op.session_id, op.execution_id)  # now final\n",
               replace="        if escalating:\n"
                       "            self.announce_result(op.session_id, op.execution_id)  # now final\n"
                       "            standing = self._operation(op.execution_id)\n"
                       "            self._checkpoint(standing, self._write_diagnostics(standing))\n"
                       "            standing = self._operation(op.execution_id)\n"
                       "            if standing.delivery is Delivery.RECORDED:\n"
                       "                self.project(op.execution_id, with_failpoint=True, op=standing)\n")),
)

ALLOWED_CHOICES = (RECOVERY_PASSES_CHECKPOINT_FAILPOINTS, DENY_PATH_WITHOUT_FAILPOINTS,
                   CANCELLED_CALL_NOT_DECIDED, VOID_VERDICT_BOUND_TO_NEW_VERSION,
                   DECISION_POINT_ON_EVERY_DECISION, STANDING_RESULT_DELIVERED_WITH_FAILPOINTS)
