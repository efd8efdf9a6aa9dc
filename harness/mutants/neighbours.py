"""Mutants whose defect shows only in a neighbour of a hand-written scenario.

Each is invisible to the single example the suite had for its situation and is caught by a
variant of a scenario template (``[matrix]``, :mod:`harness.scenarios.matrix`): the proof that
the templates cover situations by construction rather than one example each.
"""

from __future__ import annotations

from harness.mutants.mutant import Mutant
from harness.mutants.source_patch import edit, edits
from harness.mutants.targets import EX, FP

MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "repeat-key-ignores-quotes",
        "the repeat key strips shell quotes from a Bash command, so `pytest -q 'tests'` counts "
        "as a repeat of `pytest -q tests` (shell-equivalence guessing, on quoting only)",
        ("L1.5",),
        edits(edit(FP, find="        args = {name: value for name, value in args.items() if name != BASH_DISPLAY_ONLY_FIELD}\n",
                   replace="        args = {name: (value.replace(\"'\", '').replace('\"', '')\n"
                           "                       if name == 'command' and isinstance(value, str) else value)\n"
                           "                for name, value in args.items() if name != BASH_DISPLAY_ONLY_FIELD}\n")),
        trust_class="neighbours",
    ),
    Mutant(
        "timeout-resets-streak",
        "a classifier timeout resets the consecutive denial count as an allow would (a service "
        "error does not), so a streak broken by a timeout never reaches the fallback",
        # Not L3.5: its reset rules are what allows and approvals reset; a fault that resets
        # the streak is L3.8's (the denial oracle's FAULT_LENS, faults_reset).
        ("L3.1", "L3.8"),
        edits(edit(EX, find="            if decided and decision.classifier_outcome is ClassifierOutcome.ALLOW:\n",
                   replace="            if decided and decision.classifier_outcome in (ClassifierOutcome.ALLOW,\n"
                           "                                                           ClassifierOutcome.TIMEOUT):\n")),
        trust_class="neighbours",
    ),
)
