"""Mutants of the reference (see :mod:`harness.mutants.catalogue`): area `levels`.

Conformance levels (trust class ``core_level``): an implementation that declares no
features at all must still be judged on the whole core. Each such mutant declares every
feature away *and* carries a core defect; before levels existed the criteria that catch
the defect were ``not_applicable`` for such an implementation and the gate was green.
(Declaring features away with no defect must still pass: that is a property of the
reference, tested in ``tests/unit/harness/contract/test_conformance.py``, not a mutant.)

Features judged by behaviour (trust class ``shown_features``): an implementation that
declares no optional feature but whose behaviour shows one is judged by that feature's
criteria. Each such mutant declares every feature away and carries a defect of an optional
feature its behaviour still shows; when features were taken at the implementation's word,
the criterion that catches it was ``not_applicable`` and the gate was green (the outside
review's case: projections offering retry for a definite failure, web_projection
undeclared).
"""

from __future__ import annotations

from harness.mutants.mutant import Mutant
from harness.mutants.source_patch import edit, edits
from harness.mutants.targets import CG, EX

MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "core-declared-away-800-chars",
        "declares no features (not auto_mode, approvals, model_events…) and the classifier "
        "only receives the first 800 characters of the operation",
        ("L2.2", "L2.3"),
        edits(edit(CG, find="        operation=canonical_json(args),",
                   replace="        operation=canonical_json(args)[:800],")),
        trust_class="core_level",
        features=(),
    ),
    Mutant(
        "web-projection-declared-away-offers-retry",
        "declares no features, and its projections offer retry for a definite failure (which "
        "may have had effects): the UI it publishes is still judged",
        ("L5.4",),
        edits(edit(EX, find="        try:\n            self._world.publish(projection)\n",
                   replace="        try:\n"
                           "            if projection.outcome is Outcome.FAILED:  # 'try again'\n"
                           "                import dataclasses\n"
                           "                from harness.contract import RecoveryAction\n"
                           "                projection = dataclasses.replace(projection, recovery_actions=(\n"
                           "                    RecoveryAction.RETRY, *projection.recovery_actions))\n"
                           "            self._world.publish(projection)\n")),
        trust_class="shown_features",
        features=(),
    ),
    Mutant(
        "sandbox-escalation-declared-away-retries-unapproved",
        "declares no features, and a sandboxed attempt that asks for more permission is "
        "retried outside the sandbox at once, without an approval of its own",
        ("L2.11",),
        edits(edit(EX, find="            returned_before = True\n",
                   replace="            returned_before = True\n"
                           "            if result.escalation_requested and invocation.sandboxed:\n"
                           "                invocation = ToolInvocation(op.identity, op.session_id, op.tool,"
                           " op.args, False)\n"
                           "                continue\n")),
        trust_class="shown_features",
        features=(),
    ),
)
