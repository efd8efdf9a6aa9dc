"""A profile: the reference implementation run under another runtime's documented policies.

Guarantees: a :class:`Profile` is a frozen value naming the system it models, the
:class:`~reference_impl.policy.RuntimePolicy` that differs from the reference, the
``behaviours`` it models (one per policy seam, each with its evidence), its ``divergences``
table (criterion → the behaviour that makes the harness report it) and its
``not_applicable`` table (criterion → why the modelled system cannot be judged on it).

Every entry carries its evidence: one or more :class:`Source` (a section of the seed book
chapter on Codex, Claude Code and OpenCode — "seed 004 §19.x.y" — with the sentence quoted
as written there, or a public document's ``https://`` address), one or more
:class:`Observed` (what the real CLI did under the harness: its version, the scenario and
the replay command), or, where neither supports it, an explicit ``assumption`` saying what
is assumed and why. Where the real CLI did otherwise than the seed says, the observation is
the evidence and the seed's sentence is kept in ``docs_claimed`` (what the docs claimed), never
as support. The quoted sentences live here, in the entry itself: nothing reads the seed at run
or test time. :meth:`Profile.__post_init__` refuses an entry with none of the three (a
``docs_claimed`` alone is not evidence), so an unsupported row cannot be written;
``tests/conformance/test_profiles.py`` checks the same and that the harness finds exactly the
table.

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


REPLAY = re.compile(r"^lifecycle-harness replay \S+\.toml( .*)? --impl cli:[a-z-]+( .*)?$")
"""How an observation names its replay: a ``lifecycle-harness replay`` of a bundled scenario
file on the real CLI (``--impl cli:NAME``)."""


@dataclass(frozen=True, slots=True)
class Observed:
    """What the real CLI did under the harness (``--impl cli:NAME``): the evidence that
    corrects a profile entry where the docs said otherwise, or confirms it."""

    cli: str
    """The CLI and its version as ``--version`` gave it: ``Claude Code 2.1.197``."""
    scenario: str
    """The scenario id (variant included) it was seen in."""
    replay: str
    """The command that shows it again: ``lifecycle-harness replay FILE.toml … --impl cli:NAME``."""
    saw: str
    """What the CLI did, as the trace shows it."""

    def problem(self) -> str:
        """Empty when the observation is complete; otherwise what is missing."""
        for name in ("cli", "scenario", "saw"):
            if not getattr(self, name).strip():
                return (f"an observation without its {name}: give the CLI with its version, "
                        "the scenario and what the CLI did")
        if not any(ch.isdigit() for ch in self.cli):
            return f"observation of {self.cli!r} names no version: write the CLI's version"
        if not REPLAY.match(self.replay):
            return (f"observation replay {self.replay!r} is not a replay command on the real "
                    "CLI: write `lifecycle-harness replay FILE.toml [--variant V] --impl cli:NAME`")
        return ""

    def cite(self) -> str:
        return f"observed, {self.cli}, {self.scenario} (`{self.replay}`): {self.saw}"


def _evidence_problem(what: str, sources: tuple[Source, ...], assumption: str,
                      observed: tuple[Observed, ...] = (),
                      docs_claimed: tuple[Source, ...] = ()) -> str:
    if not sources and not observed and not assumption.strip():
        return (f"{what} has no source or observation and is not labelled as an assumption"
                + (" (what the docs claimed is not evidence)" if docs_claimed else ""))
    if docs_claimed and not observed:
        return (f"{what} keeps what the docs claimed without the observation that contradicts "
                "it: add the Observed entry, or move the quote to sources")
    for item in (*sources, *docs_claimed, *observed):
        problem = item.problem()
        if problem:
            return f"{what}: {problem}"
    return ""


def _cite(sources: tuple[Source, ...], assumption: str, observed: tuple[Observed, ...] = (),
          docs_claimed: tuple[Source, ...] = ()) -> str:
    parts = [o.cite() for o in observed] + [s.cite() for s in sources]
    parts += [f"the docs claimed otherwise: {s.cite()}" for s in docs_claimed]
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
    observed: tuple[Observed, ...] = ()
    docs_claimed: tuple[Source, ...] = ()
    """The seed's sentences the observation contradicts (kept as what the docs claimed)."""

    @property
    def evidence(self) -> str:
        return _cite(self.sources, self.assumption, self.observed, self.docs_claimed)


@dataclass(frozen=True, slots=True)
class Divergence:
    criterion: str
    behaviour: str
    """The documented behaviour, and what the harness sees because of it."""
    sources: tuple[Source, ...] = ()
    assumption: str = ""
    observed: tuple[Observed, ...] = ()
    docs_claimed: tuple[Source, ...] = ()

    @property
    def explanation(self) -> str:
        cited = _cite(self.sources, self.assumption, self.observed, self.docs_claimed)
        return f"{self.behaviour} (source: {cited})"


@dataclass(frozen=True, slots=True)
class Inapplicable:
    """A criterion the modelled system cannot be judged on: the concept it needs is absent
    from the system (the harness reports it n/a with this reason, never passed)."""

    criterion: str
    reason: str
    sources: tuple[Source, ...] = ()
    assumption: str = ""
    observed: tuple[Observed, ...] = ()
    docs_claimed: tuple[Source, ...] = ()

    @property
    def explanation(self) -> str:
        cited = _cite(self.sources, self.assumption, self.observed, self.docs_claimed)
        return f"{self.reason} (source: {cited})"


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
        entries = [*((f"behaviour {b.seam!r}", b) for b in (*self.behaviours, *self.not_modelled)),
                   *((f"divergence {d.criterion}", d) for d in self.divergences),
                   *((f"n/a {n.criterion}", n) for n in self.not_applicable)]
        problems = [_evidence_problem(what, e.sources, e.assumption, e.observed, e.docs_claimed)
                    for what, e in entries]
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
