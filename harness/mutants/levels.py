"""Mutants of the reference (see :mod:`harness.mutants.catalogue`): area `levels`.

Conformance levels (trust class ``core_level``): an implementation that declares no
features at all must still be judged on the whole core. Each mutant here declares every
feature away *and* carries a core defect; before levels existed the criteria that catch
the defect were ``not_applicable`` for such an implementation and the gate was green.
(Declaring features away with no defect must still pass the core: that is a property of
the reference, tested in ``tests/unit/harness/test_conformance.py``, not a mutant.)
"""

from __future__ import annotations

from harness.mutants.mutant import Mutant
from harness.mutants.source_patch import edit, edits
from harness.mutants.targets import CG

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
)
