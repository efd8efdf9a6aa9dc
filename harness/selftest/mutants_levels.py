"""Mutants of the reference (see :mod:`harness.selftest.mutants`): area `levels`."""

from __future__ import annotations

from harness.selftest.mutant import Mutant

MUTANTS: tuple[Mutant, ...] = ()
