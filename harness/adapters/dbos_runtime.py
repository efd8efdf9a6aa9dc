"""DBOS under the contract: one durable workflow per turn whose steps ask the world's model
and run the world's tools, with DBOS's SQLite system database in the run's data dir.

The workflow ``lifecycle_turn(session_id, user_text, history)`` loops: a ``model_step``
asks the world's model; each tool call it answered is one ``tool_step`` running the world's
tool; until the model answers without tool calls. DBOS records each step's output in its
system database (``operation_outputs``) when the step returns; the workflow id is
``<session>/turn/<n>`` and the conversation of the next turn is the previous workflow's
output. A restart is a new process on the same data dir: ``DBOS.launch()`` finds the
workflows left ``PENDING`` and re-enqueues them (DBOS's own startup recovery), and
``recover`` waits for each to finish: DBOS re-runs the workflow function, every step whose
output was recorded returns that output without running, the others run.

Where the failpoints sit: ``after_prepare`` / ``after_start_recorded`` /
``after_tool_returned`` inside ``tool_step`` around the world's tool call (DBOS records no
start: a step's row is written when it returns); ``after_result_saved`` in the workflow
right after ``tool_step`` returned (its output is recorded); the model-request points
around the world's model call. DBOS's step record is both the result and the resume point:
there is no separate checkpoint, so no checkpoint is reported and ``during_checkpoint_build``
/ ``after_checkpoint_saved`` are never reached (a fault planned there is reported as never
fired). Each replay of a workflow calls the failpoints of its body again.

DBOS is a process-wide singleton: one runtime per process (as the wire protocol runs it).
Steps run with DBOS's default of no automatic retries.

Not offered by DBOS, declared absent (features: none): a permission layer, a classifier,
approval waits, denial counters, a failure table, UI projections, lifecycle events, model
request records, importing old checkpoints, a second live instance on one data dir (its
``open`` refuses one, the documented way out of ``multi_instance``: a second
``DBOS.launch()`` on the same SQLite system database would take up the first instance's
pending workflow and wait for it while the first still runs it, a hang). ``answer_approval`` and ``load_checkpoint``
raise :class:`NotOffered`; ``update_rules`` is recorded and changes nothing; ``cancel``
cancels the session's pending workflows (``DBOS.cancel_workflow``: the workflow stops at its
next step and the turn ends ``cancelled``).

Findings (what the harness shows; ``docs/adapters.md`` keeps the table):

* crash between the tool's side effect and its recorded output (``after_tool_returned``):
  recovery runs the step again: the side effect happens twice (L1.8 fails on the two
  ledger rows). Replay:
  ``lifecycle-harness replay scenarios/l4/crash_after_tool_returned.toml --impl adapter:dbos``
* crash once the output is recorded (``after_result_saved``): recovery returns the recorded
  output and does not run the tool again; the workflow continues with the next model step.
  Replay:
  ``lifecycle-harness replay scenarios/l4/crash_after_result_saved.toml --impl adapter:dbos``
* no start is recorded before a step runs (L4.3, L4.6 fail), and a tool call id the model
  delivers a second time is a new step and runs a second time
  (``scenarios/x/duplicate_delivery_one_record.toml``).
"""

from __future__ import annotations

import fcntl
import os
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

from dbos import DBOS, SetWorkflowID
from dbos._error import DBOSAwaitedWorkflowCancelledError

from harness.adapters import session_configs
from harness.adapters.dbos_store import DATABASE
from harness.adapters.conversation import (
    NotOffered,
    call_model,
    operation_context,
    run_tool,
    user_message,
)
from harness.adapters.serialized_world import SerializedWorld
from harness.contract import (
    Failpoint,
    RecoveryReport,
    Rule,
    SessionConfig,
    TurnResult,
    TurnStatus,
    World,
)

APP_NAME = "lifecycle-harness-adapter"
UNFINISHED = ("PENDING", "ENQUEUED")
_active: DBOSRuntime | None = None
"""The runtime whose world the steps use (DBOS itself is a process-wide singleton)."""


def _runtime() -> DBOSRuntime:
    if _active is None:
        raise RuntimeError("a DBOS step ran with no open runtime in this process")
    return _active


@DBOS.step()
def model_step(session_id: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    runtime = _runtime()
    return call_model(runtime.world, runtime.configs[session_id], messages)


@DBOS.step()
def tool_step(session_id: str, call: dict[str, Any]) -> dict[str, Any]:
    runtime = _runtime()
    return run_tool(runtime.world, runtime.configs[session_id], call)


@DBOS.workflow()
def lifecycle_turn(session_id: str, user_text: str,
                   history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    messages = list(history) + [user_message(user_text)]
    while True:
        reply = model_step(session_id, messages)
        messages.append(reply)
        if not reply["tool_calls"]:
            return messages
        for call in reply["tool_calls"]:
            messages.append(tool_step(session_id, call))
            _runtime().world.failpoint(Failpoint.AFTER_RESULT_SAVED,
                                       operation_context(session_id, call["id"]))


def _turn_prefix(session_id: str) -> str:
    return f"{session_id}/turn/"


def _database_url(data_dir: str) -> str:
    return f"sqlite:///{Path(data_dir).resolve() / DATABASE}"


POLLING_INTERVAL_S = 0.02
"""How often DBOS polls its system database where it waits (a workflow's result in
``recover``: DBOS's default is 1 s, so every recovery waited up to a second for a workflow
its launch had already re-enqueued; its notification listener), and how often ``recover``
looks whether a workflow still runs here. Polling changes when a wait ends, never what
the world sees: ``recover`` waits for the workflow's end, not its status."""


class DBOSRuntime:
    """One DBOS launch over one data dir (a :class:`harness.contract.Runtime`)."""

    def __init__(self, data_dir: str, world: World) -> None:
        global _active
        from dbos._serialization import DBOSPortableJSON

        if _active is not None:
            raise RuntimeError("DBOS is a process-wide singleton: one runtime per process")
        self.instance_lock = _claim_data_dir(data_dir)
        self.data_dir = data_dir
        self.world = SerializedWorld(world)
        self.configs = session_configs.load_all(data_dir)
        _active = self
        config = {"name": APP_NAME, "system_database_url": _database_url(data_dir),
                  "serializer": DBOSPortableJSON, "log_level": "WARNING",
                  "application_version": "lifecycle-harness-adapter-1",
                  # DBOS's default (1 s) is real time every close waits out (destroy joins
                  # the listener thread between two polls); its docs suggest lower values
                  # for tests. Nothing here waits on notifications.
                  "notification_listener_polling_interval_sec": POLLING_INTERVAL_S}
        self.dbos = DBOS(config=config)
        DBOS.launch()

    def open_session(self, config: SessionConfig) -> None:
        session_configs.save(self.data_dir, config)
        self.configs[config.session_id] = config

    def _turns(self, session_id: str) -> list[Any]:
        return sorted(DBOS.list_workflows(workflow_id_prefix=_turn_prefix(session_id)),
                      key=lambda status: status.workflow_id)

    def run_turn(self, session_id: str, user_text: str) -> TurnResult:
        turns = self._turns(session_id)
        # the conversation so far is the last finished turn's output (a turn whose
        # workflow failed left no output: DBOS keeps its steps, not a conversation)
        finished = [turn for turn in turns if turn.status == "SUCCESS"]
        history: list[dict[str, Any]] = list(finished[-1].output or []) if finished else []
        workflow_id = f"{_turn_prefix(session_id)}{len(turns) + 1:06d}"
        try:
            with SetWorkflowID(workflow_id):
                messages = lifecycle_turn(session_id, user_text, history)
        except DBOSAwaitedWorkflowCancelledError:  # ``cancel`` reached it (DBOS's own cancel)
            return TurnResult(session_id=session_id, status=TurnStatus.CANCELLED)
        return _turn_result(session_id, messages)

    def answer_approval(self, wait_id: str, approve: bool) -> TurnResult:
        raise NotOffered(f"answer_approval({wait_id!r}): DBOS has no approval waits; this "
                         "adapter never creates one")

    def update_rules(self, session_id: str, rules: tuple[Rule, ...],
                     permission_version: int) -> None:
        from dataclasses import replace

        self.open_session(replace(self.configs[session_id], rules=tuple(rules),
                                  permission_version=permission_version))

    def cancel(self, session_id: str) -> None:
        for status in self._turns(session_id):
            if status.status in UNFINISHED:
                DBOS.cancel_workflow(status.workflow_id)

    def recover(self) -> RecoveryReport:
        """Wait for the workflows DBOS's launch re-enqueued (and any still pending) to end
        here. DBOS runs them on its own threads, so their end is not their status: a workflow
        ``cancel`` reached is ``CANCELLED`` at once, yet goes on to its next step boundary
        (the model request it was making is still served by the world). Waiting for the
        status alone let ``recover`` return before or after that request depending on
        DBOS's polling; a cancelled turn ends ``cancelled`` and is no error of recovery."""
        resumed = []
        with self.world.admitting():
            for status in sorted(DBOS.list_workflows(status=list(UNFINISHED)),
                                 key=lambda status: status.workflow_id):
                try:
                    DBOS.retrieve_workflow(status.workflow_id).get_result(
                        polling_interval_sec=POLLING_INTERVAL_S)
                except DBOSAwaitedWorkflowCancelledError:
                    pass
                self._until_it_stops_here(status.workflow_id)
                resumed.append(status.workflow_id.split("/turn/")[0])
        return RecoveryReport(turns_resumed=tuple(dict.fromkeys(resumed)))

    def _until_it_stops_here(self, workflow_id: str) -> None:
        """Until no execution of ``workflow_id`` runs in this process (DBOS's own count of
        them, a private attribute: no public API says it; there is no event to wait on, so
        this polls like DBOS's own waits do)."""
        running = getattr(self.dbos, "_active_workflows_set", None)
        if running is None:
            raise RuntimeError(
                f"dbos {version('dbos')} has no DBOS._active_workflows_set: the adapter "
                "cannot tell when a recovered workflow stopped running (tested with dbos "
                "3.4); install that version or adapt DBOSRuntime._until_it_stops_here")
        while workflow_id in running.activeList():
            time.sleep(POLLING_INTERVAL_S)

    def load_checkpoint(self, session_id: str, data: bytes) -> None:
        raise NotOffered("load_checkpoint: DBOS has no import of another runtime's "
                         "checkpoints")

    def close(self) -> None:
        global _active
        DBOS.destroy(destroy_registry=False)
        _active = None
        os.close(self.instance_lock)


INSTANCE_LOCK = "dbos-adapter.instance.lock"


def _claim_data_dir(data_dir: str) -> int:
    """One live DBOS launch per data dir: a second one raises (the way out of
    ``multi_instance``, docs/contract.md "Features") rather than take up the first one's
    pending workflows at launch and wait for them while that instance is still running
    them. The lock is the kernel's: a killed instance's goes with its process."""
    os.makedirs(data_dir, exist_ok=True)
    fd = os.open(os.path.join(data_dir, INSTANCE_LOCK), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise RuntimeError("another DBOS launch is live on this data dir: the adapter runs one "
                           "instance per data dir (multi_instance not claimed)") from None
    return fd


def _turn_result(session_id: str, messages: list[dict[str, Any]]) -> TurnResult:
    replies = [m for m in messages if m["role"] == "assistant"]
    return TurnResult(session_id=session_id, status=TurnStatus.COMPLETED,
                      final_text=replies[-1]["content"] if replies else "")
