"""Policy seams: the few places where a documented runtime decides differently from the
reference, gathered in one value so that a profile (``harness.profiles``) composes the
reference's parts with its own rules instead of copying them.

Guarantees: :data:`REFERENCE` is the reference's own behaviour, and every seam defaults to
it, so ``ReferenceRuntime(data_dir, world)`` is unchanged; a policy is a frozen value read,
never written, by the runtime.

Seams: what a tripped denial limit does (:class:`~reference_impl.denial_counters.DenialPolicy`),
what a restart does with a tool call whose start was recorded but whose result was not
(:class:`RestartAction`), whether pending approval waits survive a restart, and whether an
auto-mode session has a classifier at all.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from reference_impl.denial_counters import REFERENCE_POLICY, DenialPolicy


class RestartAction(enum.StrEnum):
    MARK_UNKNOWN = "mark_unknown"
    """The reference: outcome unknown, reconciliation required, never re-run (L4.3)."""
    RERUN = "rerun"
    """Run the call again (at-least-once), at most ``restart_reruns_max`` times per call."""
    MARK_FAILED = "mark_failed"
    """Record the call as a definite failure ("Tool execution interrupted"), executed,
    without reconciliation; the resumed turn hands that result to the model, which alone
    may issue the call again."""


@dataclass(frozen=True, slots=True)
class RuntimePolicy:
    denials: DenialPolicy = REFERENCE_POLICY
    incomplete_calls_on_restart: RestartAction = RestartAction.MARK_UNKNOWN
    restart_reruns_max: int = 10
    waits_survive_restart: bool = True
    """False: pending waits live in memory only, so a restart loses them: the waiting
    operation is refused and the turn goes on."""
    classifier: bool = True
    """False: the runtime has no classifier; an auto-mode operation that no rule decides
    takes the default path of the other modes (ask an owner who can answer, else deny), and
    the classifier is never called."""


REFERENCE = RuntimePolicy()
