"""Profile of OpenCode 2.x's execution claim, restart resumption and permission requests.

Behaviours, each with its source (sst/opencode by Anomaly Innovations, pinned commit
c93aaae37157 as cited by the seed ``004_44be0d36e098c514`` §19.1.5, §19.4.4 and §19.4.8 —
source facts, not documented promises):

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
  location closes — ``packages/core/src/permission.ts`` (seed §19.4.8, which lists their
  survival across a restart among the guarantees public evidence does not cover).
  Policy: ``waits_survive_restart=False``: a restart refuses the waiting operation and the
  turn goes on.

Not modelled: the synthetic "The server restarted while you were working" message, and the
resumption being installed only in service mode.
"""

from __future__ import annotations

from harness.profiles.profile import Divergence, Profile
from reference_impl.policy import RestartAction, RuntimePolicy

RESTART_SOURCE = ("sst/opencode packages/core/src/session/execution/restart.ts "
                  "@c93aaae37157; seed 004 §19.4.4")
PERMISSION_SOURCE = ("sst/opencode packages/core/src/permission.ts (an in-memory map) "
                     "@c93aaae37157; seed 004 §19.4.8")

OPENCODE = Profile(
    name="opencode",
    system="OpenCode 2.x (service mode)",
    summary="restart re-runs incomplete tool calls (at-least-once, 10 attempts); waits in memory",
    policy=RuntimePolicy(
        incomplete_calls_on_restart=RestartAction.RERUN,
        restart_reruns_max=10,
        waits_survive_restart=False,
    ),
    divergences=(
        Divergence(
            "L4.3",
            "on restart a call whose start was recorded and whose result was not saved is run "
            "again instead of being left unknown for reconciliation (at-least-once resumption)",
            RESTART_SOURCE,
        ),
        Divergence(
            "L4.9",
            "the re-run after a restart reports a call whose first run could not be confirmed as "
            "an ordinary result (e.g. succeeded): the possible first effect is not surfaced",
            RESTART_SOURCE,
        ),
        Divergence(
            "L1.8",
            "the restart re-run is an automatic retry of a call whose previous attempt may "
            "already have executed (a write or a non-idempotent command runs twice)",
            RESTART_SOURCE,
        ),
        Divergence(
            "L1.7",
            "a call whose tool had already answered 'failed' before the crash is run again after "
            "the restart: a definite failure is retried automatically",
            RESTART_SOURCE,
        ),
        Divergence(
            "X1",
            "the re-run of an approved escalation whose unsandboxed start was recorded before the "
            "crash executes while the store still shows the sandboxed attempt's 'failed' result: "
            "the unconfirmed attempt in between is never recorded",
            RESTART_SOURCE,
        ),
        Divergence(
            "L2.9",
            "the re-run passes revalidation again for an operation whose start record from the "
            "first run is kept (the claim survives a shutdown), so revalidation no longer sits "
            "before the start record",
            RESTART_SOURCE,
        ),
        Divergence(
            "L4.10",
            "the same kept start record: the re-run reaches its revalidation failpoint with "
            "execution_started already durable, which this criterion's failpoint-placement "
            "check refuses",
            RESTART_SOURCE,
        ),
        Divergence(
            "L3.2",
            "pending permission requests live in an in-memory map: after a restart the wait is "
            "gone (refused), not pending and answerable",
            PERMISSION_SOURCE,
        ),
        Divergence(
            "L5.4",
            "after a restart the lost wait's operation is shown refused, while the owner's view "
            "of the world still has the prompt open (approve / reject)",
            PERMISSION_SOURCE,
        ),
    ),
)
