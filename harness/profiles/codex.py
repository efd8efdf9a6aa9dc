"""Profile of the OpenAI Codex CLI's auto-review (guardian) and approval behaviour.

Behaviours, each with its source (pinned Codex commit 86e17e98c7f9 as cited by the seed,
``004_44be0d36e098c514`` §19.4.2 and §19.3.3):

* auto-review circuit breaker: 3 consecutive denials, or 10 denials among the last 50
  reviews, interrupt the turn (``TurnAborted``) instead of handing the action to the owner
  — ``ext/guardian-reviewer/src/circuit_breaker.rs`` (constants 3, 10, 50); the Codex
  "Auto-review" documentation. Policy: ``DenialPolicy(END_TURN, END_TURN, window 50, max 10)``;
  the counts are not reset by a trip (no reset is documented), so only an allowed review
  ends a streak;
* review timeouts and fail-closed reviews (build, session, parse failures) are not counted
  as denials: the action does not run either — same documentation; the reference already
  counts only risk denials (``denial_counters``);
* a denial (``Denied``) returns a refusal to the model and the turn goes on; ``Abort`` ends
  the turn — ``core/src/tools/approvals.rs``, ``protocol/src/protocol.rs``; the reference's
  rejected approval is a denial, as in Codex;
* a retry that asks to leave the sandbox needs its own approval, with a fresh id —
  ``core/src/tools/orchestrator.rs`` (header comment: an auto-review approval covers only the
  reviewed scope); the reference's escalation wait has its own id (``wait-<id>-escalation``).

Not modelled: the ``circuit_break_action = "strict"`` distinction (the seed notes it is
unverified under defaults) and the 900-token truncation of refusal texts.
"""

from __future__ import annotations

from harness.profiles.profile import Divergence, Profile
from reference_impl.denial_counters import DenialPolicy, LimitAction
from reference_impl.policy import RuntimePolicy

CIRCUIT_BREAKER_SOURCE = ("openai/codex ext/guardian-reviewer/src/circuit_breaker.rs @86e17e98c7f9; "
                          "Codex docs 'Auto-review'; seed 004 §19.4.2")

CODEX = Profile(
    name="codex",
    system="OpenAI Codex CLI",
    summary="auto-review circuit breaker (3 consecutive / 10 of the last 50) interrupts the turn",
    policy=RuntimePolicy(denials=DenialPolicy(
        with_owner=LimitAction.END_TURN,
        without_owner=LimitAction.END_TURN,
        cumulative_window_reviews=50,
        cumulative_denials_max=10,
    )),
    divergences=(
        Divergence(
            "L3.1",
            "the auto-review circuit breaker interrupts the turn at the 3rd consecutive denial "
            "(or the 10th of the last 50 reviews) instead of sending the next action to the "
            "owner, so the fallback to manual approval never happens (not exercised)",
            CIRCUIT_BREAKER_SOURCE,
        ),
        Divergence(
            "L3.5",
            "the breaker counts denials in a window of the last 50 reviews (10 of them trip it), "
            "not by the session's thresholds and reset rules: after a cumulative count the "
            "reset rules expect to send the next action to the owner, it goes to the reviewer "
            "again (seen on a generated workload, regression-generated-f9c38200e1)",
            CIRCUIT_BREAKER_SOURCE,
        ),
        Divergence(
            "L3.3",
            "in a non-interactive session the breaker ends the turn too (TurnAborted): the "
            "denial that trips it is not handed back to the model and the loop does not go on "
            "with other work",
            CIRCUIT_BREAKER_SOURCE,
        ),
    ),
)
