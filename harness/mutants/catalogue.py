"""The mutant catalogue: each entry reintroduces one defect into ``reference_impl``.

Every mutant is a small text edit of the reference (see :mod:`source_patch`), named after
its defect, with the criteria expected to catch it. ``lifecycle-harness selftest`` runs the
suite on each and prints the kill matrix; the default test run asserts the whole matrix.

The first group are the defects the lifecycle design lists under its current problems
(``seed_defect=True``); then the classic durability bugs; then at least one mutant per
acceptance criterion (modules ``mutants_<stage>``).
"""

from __future__ import annotations

from harness.mutants import early as mutants_early
from harness.mutants import fired as mutants_fired
from harness.mutants import l1l2 as mutants_l1l2
from harness.mutants import l3 as mutants_l3
from harness.mutants import l4m as mutants_l4m
from harness.mutants import late as mutants_late
from harness.mutants import levels as mutants_levels
from harness.mutants import neighbours as mutants_neighbours
from harness.mutants import placement as mutants_placement
from harness.mutants import second as mutants_second
from harness.mutants import xl5 as mutants_xl5
from harness.mutants.mutant import Mutant
from harness.mutants.source_patch import edit, edits
from harness.mutants.targets import CG, EX, FP, MR


SEED_DEFECTS: tuple[Mutant, ...] = (
    Mutant(
        "failure-table-overflows",
        "the recent-failure table never evicts, so table and checkpoint grow past 16 entries",
        ("L1.1",),
        edits(edit(FP, find='"DELETE FROM failure_table WHERE session_id = ? AND touched NOT IN ("',
                   replace='"DELETE FROM failure_table WHERE 0 AND session_id = ? AND touched NOT IN ("')),
        seed_defect=True,
    ),
    Mutant(
        "bash-key-drops-more-than-description",
        "the Bash repeat key also drops the working directory, merging different operations",
        ("L1.3",),
        edits(edit(FP, find="if name != BASH_DISPLAY_ONLY_FIELD}",
                   replace="if name not in (BASH_DISPLAY_ONLY_FIELD, 'cwd')}")),
        seed_defect=True,
    ),
    Mutant(
        "bash-key-keeps-description",
        "the Bash repeat key keeps the display-only description, so rewording it resets the "
        "repeat judgement",
        ("L1.3",),
        edits(edit(FP, find="    if is_bash(tool, kind):\n        args = {name",
                   replace="    if False:\n        args = {name")),
        seed_defect=True,
    ),
    Mutant(
        "auto-denies-bash-by-name",
        "auto mode refuses Bash by tool name before any classifier analysis",
        ("L2.2",),
        edits(edit(CG, find="        request = build_request(session, op.tool, op.args)\n",
                   replace="        request = build_request(session, op.tool, op.args)\n"
                           "        if is_bash(op.tool, session.tool_kind(op.tool)):\n"
                           "            return Decision(Permission.DENY, DecisionSource.CLASSIFIER,"
                           " 'Bash is on the auto-mode deny list')\n")),
        seed_defect=True,
    ),
    Mutant(
        "classifier-reads-first-800-chars",
        "the classifier only receives the first 800 characters of the operation",
        ("L2.2", "L2.3"),
        edits(edit(CG, find="        operation=canonical_json(args),",
                   replace="        operation=canonical_json(args)[:800],")),
        seed_defect=True,
    ),
    Mutant(
        "fallback-prompts-without-persisted-wait",
        "after classifier denials the approval prompt is shown before any wait is committed",
        ("L3.2",),
        edits(edit(EX, find="            wait = approvals.create(conn, op, now=self._world.now())\n",
                   replace="            wait = approvals.create(conn, op, now=self._world.now())\n"
                           "            if wait is not None and op.wait_trigger:  # prompt first, commit later\n"
                           "                self._world.prompt_approval(approvals.prompt_for(wait, op))\n")),
        seed_defect=True,
    ),
    Mutant(
        "checkpoint-failure-leaves-dispatched",
        "a checkpoint build exception leaves the execution dispatched and sends it to "
        "reconciliation instead of keeping the saved result",
        ("L4.4",),
        edits(edit(EX, find="            self._signals.emit(EventType.CHECKPOINT_FAILED, op.session_id, op.execution_id,\n",
                   replace="            with self._store.transaction() as conn:\n"
                           "                conn.execute(\"UPDATE result_records SET outcome = 'unknown',"
                           " reconciliation_required = 1 WHERE execution_id = ?\", (op.execution_id,))\n"
                           "                conn.execute(\"UPDATE operations SET stage = 'started'"
                           " WHERE execution_id = ?\", (op.execution_id,))\n"
                           "            self._signals.emit(EventType.CHECKPOINT_FAILED, op.session_id, op.execution_id,\n")),
        seed_defect=True,
    ),
)

DURABILITY_CLASSICS: tuple[Mutant, ...] = (
    Mutant(
        "eof-reported-completed",
        "a model stream that ends in EOF is recorded as a completed answer",
        ("M2", "M5"),
        edits(edit(MR, find="                    return ModelReply(request.request_id, ModelRequestStatus.INCOMPLETE,",
                   replace="                    return ModelReply(request.request_id, ModelRequestStatus.COMPLETED,")),
    ),
    Mutant(
        "trusts-tool-not-executed-text",
        "a tool whose output says 'not executed' is recorded as not started",
        ("X5",),
        edits(edit(FP, find="    if result.status is ToolStatus.OK:\n",
                   replace="    if 'not executed' in result.output.lower():\n"
                           "        return ToolOutcome(Outcome.NOT_STARTED, FailureKind.FAILED, False, False,"
                           " 'the tool says it did not run')\n"
                           "    if result.status is ToolStatus.OK:\n")),
    ),
    Mutant(
        "timeout-counted-as-denial",
        "a classifier timeout is counted as a risk denial",
        ("L3.8", "L2.5"),
        edits(edit(CG, find="        return _no_verdict(verdict.outcome, verdict.reason)\n",
                   replace="        if verdict.outcome is ClassifierOutcome.TIMEOUT:\n"
                           "            return Decision(Permission.DENY, DecisionSource.CLASSIFIER, 'timed out',"
                           " classifier_outcome=ClassifierOutcome.RISK_DENY, counts_as_risk_denial=True)\n"
                           "        return _no_verdict(verdict.outcome, verdict.reason)\n")),
    ),
)

MUTANTS: tuple[Mutant, ...] = (
    SEED_DEFECTS + DURABILITY_CLASSICS + mutants_early.MUTANTS + mutants_late.MUTANTS
    + mutants_fired.MUTANTS
    + mutants_placement.MUTANTS
    + mutants_l3.MUTANTS
    + mutants_xl5.MUTANTS
    + mutants_l1l2.MUTANTS
    + mutants_l4m.MUTANTS
    + mutants_levels.MUTANTS
    + mutants_neighbours.MUTANTS
    + mutants_second.MUTANTS
)


def by_name(name: str) -> Mutant:
    for mutant in MUTANTS:
        if mutant.name == name:
            return mutant
    raise KeyError(name)


_names = [m.name for m in MUTANTS]
assert len(_names) == len(set(_names)), "mutant names must be unique"

