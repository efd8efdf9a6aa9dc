"""What a mutant is, and how it becomes an implementation the harness can drive.

Guarantees: a :class:`Mutant` is frozen data plus a ``patches`` factory returning a context
manager that applies its defect to ``reference_impl`` in this process and undoes it on exit.
:class:`MutantImplementation` satisfies ``contract.Implementation``: every driver call of
every runtime it opens, and every ``inspect``, runs with the defect applied, so a mutant can
be run, replayed and gated exactly like any implementation (``--impl mutant:NAME``).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any, Callable, ContextManager

from harness.contract import Feature, ImplementationInfo, Observation, Runtime, World


@dataclass(frozen=True, slots=True)
class Mutant:
    name: str
    """Named after the defect, kebab-case: ``reexecute-after-result-saved``."""
    defect: str
    """One sentence: what the mutated implementation does wrong."""
    expected: tuple[str, ...]
    """Criterion ids expected to catch it (at least one of them must)."""
    patches: Callable[[], ContextManager[Any]] = dataclasses.field(repr=False, compare=False)
    seed_defect: bool = False
    """True for the defects the lifecycle design lists under its current problems."""
    trust_class: str = ""
    """Which class of trust defect it proves caught (a key of :data:`TRUST_CLASSES`), or ""
    for the per-criterion and durability mutants."""
    features: tuple[str, ...] | None = None
    """Features the mutated implementation declares instead of the reference's (None: the
    reference's); lets a mutant try to declare part of the lifecycle away."""


TRUST_CLASSES: dict[str, str] = {
    "faults_fire": "a planned fault or hold that never happened must not count",
    "failpoint_placement": "the implementation must not choose where the harness tests it",
    "world_judges": "behaviour is judged from the world; inspect() is only cross-checked",
    "core_level": "the core cannot be declared away",
    "shown_features": "an optional feature the behaviour shows cannot be declared away",
    "neighbours": "situations covered by construction, not one example each",
    "catalogue": "the catalogue as sharpened against the design",
}
"""The trust classes a mutant can belong to; selftest scores each."""


class _PatchedRuntime:
    """Proxies a runtime; each call runs inside the mutant's patches."""

    def __init__(self, runtime: Runtime, patches: Callable[[], ContextManager[Any]]) -> None:
        self._runtime = runtime
        self._patches = patches

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._runtime, name)
        if not callable(attribute):
            return attribute

        @functools.wraps(attribute)
        def call(*args: Any, **kwargs: Any) -> Any:
            with self._patches():
                # Looked up again inside the patches: a mutant may edit this very method.
                return getattr(self._runtime, name)(*args, **kwargs)

        return call


class MutantImplementation:
    """The reference implementation with one mutant's defect applied."""

    def __init__(self, base: Any, mutant: Mutant) -> None:
        self._base = base
        self.mutant = mutant
        info = base.info
        self.info = ImplementationInfo(
            name=f"{info.name}+{mutant.name}",
            version=info.version,
            features=(info.features if mutant.features is None
                      else tuple(Feature(f) for f in mutant.features)),
            checkpoint_fixtures=info.checkpoint_fixtures,
        )

    @property
    def fixture_module(self) -> str:
        """Checkpoint fixtures are the base implementation's files."""
        return type(self._base).__module__

    def open(self, data_dir: str, world: World) -> Runtime:
        with self.mutant.patches():
            runtime = self._base.open(data_dir, world)
        return _PatchedRuntime(runtime, self.mutant.patches)  # type: ignore[return-value]

    def inspect(self, data_dir: str) -> Observation:
        with self.mutant.patches():
            return self._base.inspect(data_dir)
