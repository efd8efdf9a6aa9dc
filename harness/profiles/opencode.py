"""Profile of OpenCode 2.x's execution claim, restart resumption and permission requests.

Behaviours, each with its source (anomalyco/opencode, pinned commit c93aaae37157 as cited by
the seed ``004_44be0d36e098c514`` §19.1.5, §19.4.4 and §19.4.2 — source facts, not documented
promises):

* the ``Started`` event and the execution claim are written in one transaction —
  ``packages/core/src/session/execution.ts``; the reference's start claim is already one
  transaction with ``execution_started``;
* on restart, the interrupted turn is resumed and its incomplete tool calls are run again:
  recovery is at-least-once (local coordination prevents concurrent drains, not repeated
  external effects after a crash); at most 10 restart attempts, persisted —
  ``packages/core/src/session/execution/restart.ts``. Policy: ``RestartAction.RERUN`` with
  ``restart_reruns_max=10`` (counted per call here; OpenCode counts per turn and then fails
  the turn, while this profile leaves a call past its 10th re-run to the reference's
  unknown marking — no scenario restarts that often);
* pending permission requests live in an in-memory map and are cancelled when their
  location closes — ``packages/core/src/permission`` (seed §19.5: "only an in-memory map").
  Policy: ``waits_survive_restart=False``: a restart refuses the waiting operation and the
  turn goes on.

Not modelled: the synthetic "The server restarted while you were working" message, and the
resumption being installed only in service mode.
"""

from __future__ import annotations

from harness.profiles.profile import Divergence, Profile
from reference_impl.policy import RestartAction, RuntimePolicy

RESTART_SOURCE = ("anomalyco/opencode packages/core/src/session/execution/restart.ts "
                  "@c93aaae37157; seed 004 §19.4.4")
PERMISSION_SOURCE = ("anomalyco/opencode packages/core/src/permission (in-memory map) "
                     "@c93aaae37157; seed 004 §19.5")

OPENCODE = Profile(
    name="opencode",
    system="OpenCode 2.x (service mode)",
    summary="restart re-runs incomplete tool calls (at-least-once, 10 attempts); waits in memory",
    policy=RuntimePolicy(
        incomplete_calls_on_restart=RestartAction.RERUN,
        restart_reruns_max=10,
        waits_survive_restart=False,
    ),
    divergences=(),
)
