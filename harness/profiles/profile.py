"""A profile: the reference implementation run under another runtime's documented policies.

Guarantees: a :class:`Profile` is a frozen value naming the system it models, the
:class:`~reference_impl.policy.RuntimePolicy` that differs from the reference, and its
``divergences`` table (criterion → the documented behaviour that makes the harness report
it, with the source of that behaviour). :class:`ProfileImplementation` satisfies
:class:`harness.contract.Implementation`: it opens the reference's runtime with the
profile's policy and inspects the same store, so every behaviour not named by the policy is
the reference's own. The divergence table is handed to the suite as expectations, so each
divergence reaches the reports with its explanation (``expectation_reason``), and a test
checks that the table and the harness agree exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from harness.contract import ImplementationInfo, World
from reference_impl import ReferenceImplementation, ReferenceRuntime
from reference_impl.policy import RuntimePolicy

PREFIX = "profile:"


@dataclass(frozen=True, slots=True)
class Divergence:
    criterion: str
    behaviour: str
    """The documented behaviour, and what the harness sees because of it."""
    source: str
    """Where the behaviour is documented (a document, a source file at a commit, a seed section)."""

    @property
    def explanation(self) -> str:
        return f"{self.behaviour} (source: {self.source})"


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    system: str
    summary: str
    policy: RuntimePolicy
    divergences: tuple[Divergence, ...]

    @property
    def spec(self) -> str:
        return PREFIX + self.name

    def explanations(self) -> dict[str, str]:
        """Criterion id → explanation (the suite's expectations for this profile)."""
        return {d.criterion: d.explanation for d in self.divergences}

    def __post_init__(self) -> None:
        ids = [d.criterion for d in self.divergences]
        if len(ids) != len(set(ids)):
            raise ValueError(f"profile {self.name}: a criterion is listed twice in {ids}")


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

    def open(self, data_dir: str, world: World) -> ReferenceRuntime:
        return ReferenceRuntime(data_dir, world, self.profile.policy)

    def __repr__(self) -> str:
        return f"ProfileImplementation({self.profile.name!r})"
