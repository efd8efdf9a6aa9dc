"""Profiles of Claude Code's auto mode (classifier) and its ``-p`` non-interactive mode.

Behaviours, each with its source (Anthropic, "Permission modes" documentation, checked
2026-10-22, as cited by the seed ``004_44be0d36e098c514`` §19.4.2 and §19.2.3; Claude Code's
core is not published, so only documented behaviour is modelled):

* auto mode: after 3 consecutive or 20 total classifier blocks, auto mode pauses and falls
  back to prompting for each action; the thresholds are not configurable; an allowed action
  resets the consecutive count; the total resets only when its limit triggered the fallback;
  classifier outages are not counted as blocks. These are the reference's own rules
  (``denial_counters``), so ``claude-code`` differs from the reference only where nobody can
  be prompted;
* ``-p`` (print, non-interactive) mode: there is nobody to prompt, so a blocked action does
  not run and Claude goes on, but repeated blocks (the same 3 / 20 limits) abort the run.
  Policy: ``without_owner=END_TURN`` — the turn that reaches the limit ends (cancelled).
  ``claude-code`` applies it to the scenarios' non-interactive sessions (the harness's
  model of ``-p``); ``claude-code-print`` applies it to every session, interactive ones
  included (``--impl profile:claude-code-print``).

Not modelled in ``claude-code-print``: ``-p`` without auto mode denies every action that
would need an approval (Manual default, seed §19.2.3); the approvals a scenario scripts are
still answered, so this profile shows the denial-limit rule of ``-p`` alone.
"""

from __future__ import annotations

from harness.profiles.profile import Divergence, Profile
from reference_impl.denial_counters import DenialPolicy, LimitAction
from reference_impl.policy import RuntimePolicy

PERMISSION_MODES = "Anthropic docs 'Permission modes' (auto mode, -p); seed 004 §19.4.2"

CLAUDE_CODE = Profile(
    name="claude-code",
    system="Claude Code (auto mode; -p for non-interactive sessions)",
    summary="3 consecutive / 20 total classifier blocks fall back to prompting; in -p they abort",
    policy=RuntimePolicy(denials=DenialPolicy(
        with_owner=LimitAction.ASK_OWNER,
        without_owner=LimitAction.END_TURN,
    )),
    divergences=(
        Divergence(
            "L3.3",
            "in -p (non-interactive) mode there is nobody to prompt, so repeated blocks abort "
            "the run: the 3rd consecutive block ends the turn, that denial never reaches the "
            "model and the loop does not go on with other work",
            PERMISSION_MODES,
        ),
    ),
)

CLAUDE_CODE_PRINT = Profile(
    name="claude-code-print",
    system="Claude Code in -p (print) mode",
    summary="every session as `claude -p`: repeated classifier blocks abort instead of prompting",
    policy=RuntimePolicy(denials=DenialPolicy(
        with_owner=LimitAction.END_TURN,
        without_owner=LimitAction.END_TURN,
    )),
    divergences=(
        Divergence(
            "L3.1",
            "as `claude -p`, repeated classifier blocks abort instead of falling back to "
            "prompting: the 3rd consecutive (or 20th) block ends the turn, so no later action "
            "goes to the owner (not exercised)",
            PERMISSION_MODES,
        ),
        Divergence(
            "L3.3",
            "in -p mode repeated blocks abort the run: the 3rd consecutive block ends the turn, "
            "that denial never reaches the model and the loop does not go on with other work",
            PERMISSION_MODES,
        ),
    ),
)
