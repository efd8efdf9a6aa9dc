"""Mutants of the reference (see :mod:`harness.mutants.catalogue`): area `fired`.

Each one skips a failpoint on some path, so a fault the suite plans there never fires.
Before issue 13 such a scenario "passed" on the happy path and its criteria counted as
exercised; now the run is an error naming the unfired fault, which the kill matrix counts
as a kill by :data:`~harness.criteria.fault_coverage.FAULT_FIRED` (``"fault-fired"``).
"""

from __future__ import annotations

from harness.criteria.fault_coverage import FAULT_FIRED
from harness.mutants.mutant import Mutant
from harness.mutants.source_patch import edit, edits
from harness.mutants.targets import EX

MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "result-saved-failpoint-only-for-idempotent-tools",
        "after_result_saved is signalled only for idempotent tools, so a crash planned between "
        "a write's saved result and its checkpoint never happens",
        (FAULT_FIRED,),
        edits(edit(EX, find="        if fresh:\n"
                            "            self._signals.failpoint(Failpoint.AFTER_RESULT_SAVED,",
                   replace="        if fresh:\n"
                           "            if self._session(op.session_id).tool_is_idempotent(op.tool):\n"
                           "             self._signals.failpoint(Failpoint.AFTER_RESULT_SAVED,")),
        trust_class="faults_fire",
    ),
    Mutant(
        "prompt-failpoint-only-for-escalations",
        "after_prompt is signalled only for sandbox-escalation prompts, never for permission "
        "prompts, so a crash planned right after a permission prompt never happens",
        (FAULT_FIRED,),
        edits(edit(EX, find="        if with_failpoint:\n"
                            "            self._signals.failpoint(Failpoint.AFTER_PROMPT,",
                   replace="        if with_failpoint and wait.purpose != approvals.PERMISSION:\n"
                           "            self._signals.failpoint(Failpoint.AFTER_PROMPT,")),
        trust_class="faults_fire",
    ),
)
