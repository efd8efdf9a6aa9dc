"""Mutants of the reference (see :mod:`harness.mutants.catalogue`): area `placement`.

Each moves one failpoint a step away from where the lifecycle puts it (or drops the context
that says which operation a hit concerns). The reference stays otherwise correct, so what
catches them is the failpoint preconditions judged at every hit
(:mod:`harness.criteria.failpoint_preconditions`), reported under the criteria that rely on
that failpoint: a fault planned there would otherwise test another step than it names.
"""

from __future__ import annotations

from harness.mutants.mutant import Mutant
from harness.mutants.source_patch import edit, edits
from harness.mutants.targets import CG, EX, MR

_CLASS = "failpoint_placement"

MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "result-saved-failpoint-after-checkpoint",
        "after_result_saved is called after the diagnostics and the checkpoint instead of "
        "right after the result commit, so a crash there never tests 'saved, not checkpointed'",
        ("L4.1", "L4.5"),
        edits(edit(EX,
                   find="            self._signals.failpoint(Failpoint.AFTER_RESULT_SAVED, op.session_id,\n"
                        "                                    op.execution_id, op.tool_call_id)\n"
                        "            display = self._write_diagnostics(op)\n"
                        "            self._checkpoint(op, display)\n",
                   replace="            display = self._write_diagnostics(op)\n"
                           "            self._checkpoint(op, display)\n"
                           "            self._signals.failpoint(Failpoint.AFTER_RESULT_SAVED, op.session_id,\n"
                           "                                    op.execution_id, op.tool_call_id)\n")),
        trust_class=_CLASS,
    ),
    Mutant(
        "start-recorded-failpoint-before-commit",
        "after_start_recorded is called before the start claim is committed, so a crash there "
        "tests an operation that never started",
        ("L4.3", "L4.6"),
        edits(
            edit(EX,
                 find="        self._signals.failpoint(Failpoint.AFTER_REVALIDATION, op.session_id, op.execution_id,\n"
                      "                                op.tool_call_id)\n",
                 replace="        self._signals.failpoint(Failpoint.AFTER_REVALIDATION, op.session_id, op.execution_id,\n"
                         "                                op.tool_call_id)\n"
                         "        self._signals.failpoint(Failpoint.AFTER_START_RECORDED, op.session_id, op.execution_id,\n"
                         "                                op.tool_call_id)\n"),
            edit(EX,
                 find="        self._signals.emit(EventType.EXECUTION_STARTED, op.session_id, op.execution_id)\n"
                      "        self._signals.failpoint(Failpoint.AFTER_START_RECORDED, op.session_id, op.execution_id,\n"
                      "                                op.tool_call_id)\n",
                 replace="        self._signals.emit(EventType.EXECUTION_STARTED, op.session_id, op.execution_id)\n"),
        ),
        trust_class=_CLASS,
    ),
    Mutant(
        "checkpoint-saved-failpoint-after-projection",
        "after_checkpoint_saved is called after the UI projection instead of between the "
        "checkpoint commit and the projection, so a crash there never tests a missing projection",
        ("L4.2",),
        edits(
            edit(EX,
                 find="            return\n"
                      "        self._signals.failpoint(Failpoint.AFTER_CHECKPOINT_SAVED, op.session_id,\n"
                      "                                op.execution_id, op.tool_call_id)\n",
                 replace="            return\n"),
            edit(EX,
                 find="        if with_failpoint:\n"
                      "            self._signals.failpoint(Failpoint.AFTER_PROJECTION,",
                 replace="        if with_failpoint:\n"
                         "            self._signals.failpoint(Failpoint.AFTER_CHECKPOINT_SAVED, op.session_id,\n"
                         "                                    execution_id, op.tool_call_id)\n"
                         "            self._signals.failpoint(Failpoint.AFTER_PROJECTION,"),
        ),
        trust_class=_CLASS,
    ),
    Mutant(
        "wait-persisted-failpoint-before-commit",
        "after_wait_persisted is called before the approval wait is committed, so a crash there "
        "tests a wait that does not exist yet",
        ("L3.2",),
        edits(
            edit(EX,
                 find="    def _open_wait(self, op: OperationRecord) -> None:\n"
                      "        with self._store.transaction() as conn:\n",
                 replace="    def _open_wait(self, op: OperationRecord) -> None:\n"
                         "        self._signals.failpoint(Failpoint.AFTER_WAIT_PERSISTED, op.session_id,\n"
                         "                                op.execution_id, op.tool_call_id)\n"
                         "        with self._store.transaction() as conn:\n"),
            edit(EX,
                 find="        self._signals.failpoint(Failpoint.AFTER_WAIT_PERSISTED, op.session_id, op.execution_id,\n"
                      "                                op.tool_call_id)\n"
                      "        self.prompt(wait, with_failpoint=True)\n",
                 replace="        self.prompt(wait, with_failpoint=True)\n"),
        ),
        trust_class=_CLASS,
    ),
    Mutant(
        "result-saved-failpoint-without-operation",
        "after_result_saved is called with the session id alone: the hit does not say which "
        "operation's result it follows",
        ("L4.1", "L4.5"),
        edits(edit(EX,
                   find="            self._signals.failpoint(Failpoint.AFTER_RESULT_SAVED, op.session_id,\n"
                        "                                    op.execution_id, op.tool_call_id)\n",
                   replace="            self._signals.failpoint(Failpoint.AFTER_RESULT_SAVED, op.session_id)\n")),
        trust_class=_CLASS,
    ),
    Mutant(
        "tool-returned-failpoint-after-result-saved",
        "after_tool_returned is called after the result record is committed, so a crash there "
        "never tests a tool that ran without a saved result",
        ("L4.3",),
        edits(
            edit(EX,
                 find="        outcome, output, digest, attempts = self._invoke(started, sandboxed)\n"
                      "        self._signals.failpoint(Failpoint.AFTER_TOOL_RETURNED, op.session_id, op.execution_id,\n"
                      "                                op.tool_call_id)\n",
                 replace="        outcome, output, digest, attempts = self._invoke(started, sandboxed)\n"),
            edit(EX,
                 find="        if escalation is not None:\n"
                      "            # Not final yet",
                 replace="        self._signals.failpoint(Failpoint.AFTER_TOOL_RETURNED, op.session_id, op.execution_id,\n"
                         "                                op.tool_call_id)\n"
                         "        if escalation is not None:\n"
                         "            # Not final yet"),
        ),
        trust_class=_CLASS,
    ),
    Mutant(
        "classifier-review-failpoint-before-review",
        "during_classifier_review is called before the classifier is asked, so a cancellation "
        "or rule change there never lands while a verdict is in flight",
        ("L2.7", "L2.8", "L2.6"),
        edits(edit(CG,
                   find="        verdict = self._ask(request, thresholds.classifier_timeout_s)\n"
                        "        self._signals.failpoint(\n"
                        "            Failpoint.DURING_CLASSIFIER_REVIEW, op.session_id, op.execution_id, op.tool_call_id\n"
                        "        )\n",
                   replace="        self._signals.failpoint(\n"
                           "            Failpoint.DURING_CLASSIFIER_REVIEW, op.session_id, op.execution_id, op.tool_call_id\n"
                           "        )\n"
                           "        verdict = self._ask(request, thresholds.classifier_timeout_s)\n")),
        trust_class=_CLASS,
    ),
    Mutant(
        "stream-ended-failpoint-after-end-recorded",
        "after_model_stream_ended is called after the request's end is committed and reported, "
        "so a crash there never tests a request whose end is not recorded",
        ("M4", "M1"),
        edits(
            edit(MR,
                 find="        self._signals.failpoint(\n"
                      "            Failpoint.AFTER_MODEL_STREAM_ENDED, session_id, request_id=request_id\n"
                      "        )\n",
                 replace=""),
            edit(MR,
                 find="                               status=reply.status.value)\n"
                      "        return reply\n",
                 replace="                               status=reply.status.value)\n"
                         "        self._signals.failpoint(\n"
                         "            Failpoint.AFTER_MODEL_STREAM_ENDED, session_id, request_id=request_id\n"
                         "        )\n"
                         "        return reply\n"),
        ),
        trust_class=_CLASS,
    ),
)
