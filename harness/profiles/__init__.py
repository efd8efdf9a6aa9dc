"""Profiles of documented agent runtimes, selectable as ``--impl profile:NAME``.

Guarantees: :data:`PROFILES` names every profile once; :func:`load` returns a fresh
:class:`~harness.profiles.profile.ProfileImplementation` for a known name or raises
:class:`~harness.contract.errors.ImplementationLoadError` listing the known ones;
:func:`expectations_of` gives the divergence table of a profile implementation (None for
any other implementation), which the ``run`` command uses as its expectations;
a profile's n/a table (criteria its system cannot be judged on) is read by
``harness.implementations.not_applicable_of``.
"""

from __future__ import annotations

from typing import Any

from harness.contract.errors import ImplementationLoadError
from harness.profiles.claude_code import CLAUDE_CODE, CLAUDE_CODE_PRINT
from harness.profiles.codex import CODEX
from harness.profiles.opencode import OPENCODE
from harness.profiles.profile import (
    PREFIX,
    Behaviour,
    Divergence,
    Inapplicable,
    Observed,
    Profile,
    ProfileImplementation,
    Source,
)

__all__ = ["PREFIX", "PROFILES", "Behaviour", "Divergence", "Inapplicable", "Observed",
           "Profile", "ProfileImplementation", "Source", "expectations_of", "load"]

PROFILES: tuple[Profile, ...] = (CODEX, CLAUDE_CODE, CLAUDE_CODE_PRINT, OPENCODE)


def load(name: str) -> ProfileImplementation:
    for profile in PROFILES:
        if profile.name == name.strip():
            return ProfileImplementation(profile)
    known = ", ".join(p.spec for p in PROFILES)
    raise ImplementationLoadError(
        f"--impl {PREFIX}{name}: no such profile; known profiles: {known} "
        "(`lifecycle-harness list profiles`)"
    )


def expectations_of(implementation: Any) -> dict[str, str] | None:
    profile = getattr(implementation, "profile", None)
    return profile.explanations() if isinstance(profile, Profile) else None


def disagreements(result: Any, profile: Profile) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(criteria the harness did not pass that the tables do not explain, criteria the
    tables explain that the harness passed), from a RunResult of ``profile``. Not passing:
    failed, error, not exercised, expected_fail (a failure the table expected), or n/a (a
    criterion the n/a table names, reported so only when nothing exercised it)."""
    from harness.report.result import CriterionStatus

    not_passing = {CriterionStatus.FAILED, CriterionStatus.ERROR, CriterionStatus.NOT_EXERCISED,
                   CriterionStatus.EXPECTED_FAIL, CriterionStatus.NOT_APPLICABLE}
    found = {c.id for c in result.criteria if c.status in not_passing}
    explained = {d.criterion for d in profile.divergences} | {
        n.criterion for n in profile.not_applicable}
    return tuple(sorted(found - explained)), tuple(sorted(explained - found))
