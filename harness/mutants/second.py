"""A second mutant for criteria the self-test covered with one: each guards its checker
against a loosening that the first mutant would not notice (a different defect of the same
rule). Found by probing the reference with realistic defects, all caught as they are."""

from __future__ import annotations

from harness.mutants.mutant import Mutant
from harness.mutants.source_patch import edit, edits
from harness.mutants.targets import EX, FP, MR, RC, TU

MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "tools-cached-per-session",
        "the turn loop computes the tools it offers once per session and reuses them: a tool "
        "revoked later is still offered in every later request",
        ("L5.1",),
        edits(edit(TU, find="            return (current.conversation if current else ()), visible_tools(config)\n",
                   replace="            return (current.conversation if current else ()), self.__dict__.setdefault(\n"
                           "                \"_tools_\" + session_id, visible_tools(config))\n")),
    ),
    Mutant(
        "cancel-reraised-as-transport-error",
        "a cancelled model stream is recorded failed and re-raised as another error, not as "
        "the cancellation the world raised",
        ("M3",),
        edits(edit(MR, find="        except ModelStreamCancelled as exc:\n"
                            "            return ModelReply(request.request_id, ModelRequestStatus.CANCELLED, \"\".join(text),\n"
                            "                              error=exc)\n",
                   replace="        except ModelStreamCancelled as exc:\n"
                           "            return ModelReply(request.request_id, ModelRequestStatus.FAILED, \"\".join(text),\n"
                           "                              error=RuntimeError(str(exc)))\n")),
    ),
    Mutant(
        "risk-denials-use-repeat-budget",
        "classifier risk denials count against the execution-failure repeat budget, so a call "
        "the classifier keeps denying is refused as a repeat before the approval fallback",
        ("L3.9",),
        edits(edit(FP, find="    DecisionSource.CLASSIFIER,  # risk denials must be able to reach the approval fallback\n",
                   replace="")),
    ),
    Mutant(
        "description-dropped-for-every-tool",
        "a field named description is left out of every tool's dedup key, not only Bash's "
        "display-only one",
        ("L1.4",),
        edits(edit(FP, find="    if is_bash(tool, kind):\n        args = {name",
                   replace="    if True:\n        args = {name")),
    ),
    Mutant(
        "cancel-ignored-after-approval",
        "revalidation checks the cancellation only for calls a rule or the classifier allowed: "
        "a call the owner approved runs although the session was cancelled before its start",
        ("L2.7",),
        edits(edit(EX, find="        if session.cancelled:\n"
                            "            return Decision(Permission.DENY, DecisionSource.CANCELLATION,\n"
                            "                            \"the session was cancelled before execution\")\n",
                   replace="        if session.cancelled and op.decided_by is not DecisionSource.APPROVAL:\n"
                           "            return Decision(Permission.DENY, DecisionSource.CANCELLATION,\n"
                           "                            \"the session was cancelled before execution\")\n")),
    ),
    Mutant(
        "recovery-report-omits-unknown",
        "recover() marks an interrupted write unknown in the store but its RecoveryReport and "
        "recovered events list nothing as needing reconciliation: the UI never asks the owner "
        "to reconcile it",
        ("L4.9",),
        edits(edit(RC, find="        reconciliation_required=unknown,\n        turns_resumed=running,\n",
                   replace="        reconciliation_required=(),\n        turns_resumed=running,\n"),
              edit(RC, find="                     reconciliation_required=list(unknown),\n",
                   replace="                     reconciliation_required=[],\n")),
    ),
    Mutant(
        "recovery-report-lists-completed-as-unknown",
        "recover() lists the results it only folded into a checkpoint (known, saved before the "
        "crash) as needing reconciliation too",
        ("X4",),
        edits(edit(RC, find="        reconciliation_required=unknown,\n        turns_resumed=running,\n",
                   replace="        reconciliation_required=unknown + completed,\n        turns_resumed=running,\n")),
    ),
    Mutant(
        "user-text-never-reaches-the-model",
        "run_turn records the user's message without its text: every request of the turn asks "
        "the model about a message that says nothing",
        ("M5",),
        edits(edit("reference_impl.runtime",
                   find="        message = Message(\"user\", user_text)\n",
                   replace="        message = Message(\"user\", \"\")\n")),
    ),
    Mutant(
        "recovery-report-omits-resumed",
        "recover() resumes the turns a crash interrupted but its RecoveryReport lists none: a UI "
        "never learns the session is running again",
        ("L4.8",),
        edits(edit(RC, find="        reconciliation_required=unknown,\n        turns_resumed=running,\n",
                   replace="        reconciliation_required=unknown,\n        turns_resumed=(),\n")),
    ),
)
