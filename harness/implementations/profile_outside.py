"""``profile:NAME@cli``: a profile seen the way its real CLI is seen, for a side by side.

A profile (:mod:`harness.profiles`) is the reference under a documented runtime's policies;
the real CLI it models (``cli:NAME``, :mod:`harness.clis`) is a black box, judged from outside
on the scenarios its driver can express. Comparing the two reports is fair only when both are
judged the same way on the same scenarios, so this form gives the profile exactly the real
CLI's conditions:

Guarantees: :func:`load` returns an implementation that runs the profile's runtime
(``ProfileImplementation.open``: the reference with the profile's policy), named
``profile:NAME@cli``, declaring no features and no checkpoint fixtures (as a CLI does), whose
``why_not`` is the CLI driver's own applicability (:func:`harness.clis.applicability.why_not`
with that CLI's dialect: the same scenarios run, the others are named), and whose
``black_box`` reason makes the suite judge every criterion from outside
(:mod:`harness.criteria.outside_view`), n/a with the reason where the CLI's would be. It
carries no divergence table and no n/a table: its verdicts are the raw ones, to be put beside
the CLI's, not expectations. A profile without a CLI, or an unknown name, is an
:class:`~harness.contract.errors.ImplementationLoadError` naming the valid ones. No CLI binary
is needed: the dialect only reads scenarios.
"""

from __future__ import annotations

from typing import Any

from harness.contract import ImplementationInfo, Observation, World
from harness.contract.errors import ImplementationLoadError

SUFFIX = "@cli"


def black_box_reason(profile_name: str, cli: str) -> str:
    return (f"profile:{profile_name} judged as its real CLI cli:{cli} is: from outside only "
            "(model requests, tool runs, approval requests), never its store or lifecycle "
            "events")


class ProfileFromOutside:
    """The profile's runtime under a CLI's conditions (see the module docstring)."""

    def __init__(self, inner: Any, dialect: Any) -> None:
        self._inner = inner
        self._dialect = dialect
        profile = inner.profile
        self.profile_name = profile.name
        self.cli = profile.cli
        self.black_box = black_box_reason(profile.name, profile.cli)
        self.info = ImplementationInfo(name=f"profile:{profile.name}{SUFFIX}",
                                       version=inner.info.version)

    def open(self, data_dir: str, world: World) -> Any:
        return self._inner.open(data_dir, world)

    def inspect(self, data_dir: str) -> Observation:
        return self._inner.inspect(data_dir)

    def release(self, data_dir: str) -> None:
        self._inner.release(data_dir)

    def why_not(self, scenario: Any) -> str:
        """Empty when the real CLI's driver can run ``scenario``, else why not."""
        from harness.clis.applicability import why_not

        return why_not(self._dialect, scenario.sessions,
                       [step.do.value for step in scenario.steps],
                       [(f.failpoint.value, f.action.value) for f in scenario.faults])

    def __repr__(self) -> str:
        return f"ProfileFromOutside({self.profile_name!r}, cli={self.cli!r})"


def load(name: str) -> ProfileFromOutside:
    """``name``: a profile's name followed by ``@cli`` (``codex@cli``)."""
    from harness.clis import DIALECTS
    from harness.profiles import PROFILES
    from harness.profiles import load as load_profile

    base = name.strip().removesuffix(SUFFIX)
    inner = load_profile(base)
    dialect = DIALECTS.get(inner.profile.cli)
    if dialect is None:
        with_cli = ", ".join(f"profile:{p.name}{SUFFIX}" for p in PROFILES if p.cli)
        raise ImplementationLoadError(
            f"--impl profile:{name}: profile {base!r} models no real CLI the harness drives; "
            f"profiles with one: {with_cli}")
    return ProfileFromOutside(inner, dialect)
