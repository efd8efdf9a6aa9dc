"""A profile: the reference implementation run under another runtime's documented policies.

Guarantees: a :class:`Profile` is a frozen value naming the system it models, the
:class:`~reference_impl.policy.RuntimePolicy` that differs from the reference, the
``behaviours`` it models (one per policy seam, each with its evidence), its ``divergences``
table (criterion → the behaviour that makes the harness report it) and its
``not_applicable`` table (criterion → why the modelled system cannot be judged on it).

Every entry carries its evidence: one or more :class:`Source` (a section of the seed book
chapter on Codex, Claude Code and OpenCode — "seed 004 §19.x.y" — with the sentence quoted
as written there, or a public document's ``https://`` address), or, where no source
supports it, an explicit ``assumption`` saying what is assumed and why. The quoted
sentences live here, in the entry itself: nothing reads the seed at run or test time.
:meth:`Profile.__post_init__` refuses an entry with neither, so an unsupported row cannot
be written; ``tests/conformance/test_profiles.py`` checks the same and that the harness
finds exactly the table.

:class:`ProfileImplementation` satisfies :class:`harness.contract.Implementation`: it opens
the reference's runtime with the profile's policy and inspects the same store, so every
behaviour not named by the policy is the reference's own. The divergence table is handed to
the suite as expectations and the n/a table as criteria it cannot judge, so each reaches
the reports with its explanation (``expectation_reason``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

from harness.contract import ImplementationInfo, World
from reference_impl import ReferenceImplementation, ReferenceRuntime
from reference_impl.policy import RuntimePolicy

PREFIX = "profile:"

SEED_SECTION = re.compile(r"^seed 004 §19(\.\d+){1,2}$")
"""How a seed source names its place: the section of the seed's chapter 19."""

SEAMS = ("denial limit", "restart", "pending waits", "classifier")
"""The policy seams (:class:`~reference_impl.policy.RuntimePolicy`): each profile says, with
its evidence, what its system does at every one of them."""


@dataclass(frozen=True, slots=True)
class Source:
    """Where a behaviour is stated: ``where`` is ``seed 004 §19.x.y`` (then ``quote`` is
    the sentence as the seed writes it) or a public document's ``https://`` address (then
    ``quote`` is the passage relied on)."""

    where: str
    quote: str

    def problem(self) -> str:
        """Empty when the source is well formed; otherwise what is wrong with it."""
        if not self.quote.strip():
            return f"source {self.where!r} quotes nothing: copy the sentence relied on"
        if SEED_SECTION.match(self.where) or self.where.startswith("https://"):
            return ""
        return (f"source {self.where!r} is neither a seed section ('seed 004 §19.4.2') nor "
                "a public document's https:// address")

    def cite(self) -> str:
        return f"{self.where}: 「{self.quote}」"


def _evidence_problem(what: str, sources: tuple[Source, ...], assumption: str) -> str:
    if not sources and not assumption.strip():
        return f"{what} has no source and is not labelled as an assumption"
    for source in sources:
        problem = source.problem()
        if problem:
            return f"{what}: {problem}"
    return ""


def _cite(sources: tuple[Source, ...], assumption: str) -> str:
    parts = [s.cite() for s in sources]
    if assumption.strip():
        parts.append(f"assumption: {assumption.strip()}")
    return "; ".join(parts)


@dataclass(frozen=True, slots=True)
class Behaviour:
    """One modelled behaviour of the system at one policy seam (:data:`SEAMS`)."""

    seam: str
    behaviour: str
    """What the system does, and how the profile's policy models it."""
    sources: tuple[Source, ...] = ()
    assumption: str = ""
    """Non-empty: the part the sources do not support, and why the profile models it so."""

    @property
    def evidence(self) -> str:
        return _cite(self.sources, self.assumption)


@dataclass(frozen=True, slots=True)
class Divergence:
    criterion: str
    behaviour: str
    """The documented behaviour, and what the harness sees because of it."""
    sources: tuple[Source, ...] = ()
    assumption: str = ""

    @property
    def explanation(self) -> str:
        return f"{self.behaviour} (source: {_cite(self.sources, self.assumption)})"


@dataclass(frozen=True, slots=True)
class Inapplicable:
    """A criterion the modelled system cannot be judged on: the concept it needs is absent
    from the system (the harness reports it n/a with this reason, never passed)."""

    criterion: str
    reason: str
    sources: tuple[Source, ...] = ()
    assumption: str = ""

    @property
    def explanation(self) -> str:
        return f"{self.reason} (source: {_cite(self.sources, self.assumption)})"


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    system: str
    summary: str
    policy: RuntimePolicy
    behaviours: tuple[Behaviour, ...]
    divergences: tuple[Divergence, ...]
    not_applicable: tuple[Inapplicable, ...] = field(default=())
    not_modelled: tuple[Behaviour, ...] = field(default=())
    """Documented behaviours the profile leaves out (seam ``"not modelled"``), each with
    its source, so a reader sees what the rows do not cover."""
    cli: str = ""
    """The real CLI (``cli:NAME``, :mod:`harness.clis`) of the system modelled, if any:
    ``profile:NAME@cli`` runs the profile on that CLI's applicable scenarios, judged from
    outside as the CLI is, and ``compare`` puts the two side by side."""

    @property
    def spec(self) -> str:
        return PREFIX + self.name

    def explanations(self) -> dict[str, str]:
        """Criterion id → explanation (the suite's expectations for this profile)."""
        return {d.criterion: d.explanation for d in self.divergences}

    def inapplicable(self) -> dict[str, str]:
        """Criterion id → why the system cannot be judged on it (reported n/a)."""
        return {n.criterion: n.explanation for n in self.not_applicable}

    def evidence_problems(self) -> tuple[str, ...]:
        """Every entry without evidence (empty for a well-sourced profile)."""
        problems = []
        for b in (*self.behaviours, *self.not_modelled):
            problems.append(_evidence_problem(f"behaviour {b.seam!r}", b.sources, b.assumption))
        for d in self.divergences:
            problems.append(_evidence_problem(f"divergence {d.criterion}", d.sources,
                                              d.assumption))
        for n in self.not_applicable:
            problems.append(_evidence_problem(f"n/a {n.criterion}", n.sources, n.assumption))
        return tuple(p for p in problems if p)

    def __post_init__(self) -> None:
        ids = [d.criterion for d in self.divergences] + [n.criterion for n in self.not_applicable]
        if len(ids) != len(set(ids)):
            raise ValueError(f"profile {self.name}: a criterion is listed twice in {ids}")
        seams = [b.seam for b in self.behaviours]
        if sorted(seams) != sorted(SEAMS):
            raise ValueError(f"profile {self.name}: behaviours must name each seam of "
                             f"{SEAMS} once (found {seams})")
        problems = self.evidence_problems()
        if problems:
            raise ValueError(f"profile {self.name}: " + "; ".join(problems))


class ProfileImplementation(ReferenceImplementation):
    """The reference's parts under a profile's policy (checkpoint fixtures: the reference's)."""

    fixture_module = "reference_impl"

    def __init__(self, profile: Profile) -> None:
        super().__init__()
        self.profile = profile
        self.info = ImplementationInfo(
            name=profile.spec,
            version=self.info.version,
            features=self.info.features,
            checkpoint_fixtures=self.info.checkpoint_fixtures,
        )

    @property
    def divergences(self) -> Mapping[str, str]:
        return self.profile.explanations()

    @property
    def not_applicable(self) -> Mapping[str, str]:
        return self.profile.inapplicable()

    def open(self, data_dir: str, world: World) -> ReferenceRuntime:
        return ReferenceRuntime(data_dir, world, self.profile.policy)

    def __repr__(self) -> str:
        return f"ProfileImplementation({self.profile.name!r})"
