"""Mutants for the criteria of stages X, L1 and L2: at least one per criterion.

Each entry is a text edit of ``reference_impl`` (see :mod:`harness.selftest.source_patch`)
named after its defect, with the criteria expected to catch it.
"""

from __future__ import annotations

from harness.selftest.mutant import Mutant
from harness.selftest.source_patch import edit, edits  # noqa: F401  (used by the entries)

MUTANTS: tuple[Mutant, ...] = ()
