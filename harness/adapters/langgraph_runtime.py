"""LangGraph under the contract: a graph whose tool node runs the world's tools, persisted by
``langgraph-checkpoint-sqlite``'s ``SqliteSaver`` in the run's data dir.

The graph: ``agent`` asks the world's model; each tool call it answered is sent (LangGraph's
``Send``) to its own ``tool`` task, which runs the world's tool; then back to ``agent`` until
the model answers without tool calls. One thread per session (``thread_id`` = session id).
A restart is a new process on the same data dir: ``recover`` resumes every thread whose
saved state still has tasks to run (``graph.invoke(None, thread)``), as a LangGraph
application resumes after a crash. ``durability`` is LangGraph's own setting: ``sync``
(saved before the next step starts), ``async`` (saved in the background while the next step
runs), ``exit`` (saved only when the run ends).

Where the failpoints sit (the library's own durability points, nothing added):

* ``after_prepare``, ``after_start_recorded``, ``after_tool_returned``: in the tool task,
  around the world's tool call; LangGraph records no execution start;
* ``after_result_saved``: right after ``SqliteSaver.put_writes`` stored a tool task's
  message (LangGraph's per-task "pending write");
* ``during_checkpoint_build`` / ``after_checkpoint_saved``: right before / after
  ``SqliteSaver.put`` stored a checkpoint that folds a tool message for the first time;
* the model-request points around the world's model call (LangGraph keeps no record of a
  request, which the harness reports against M1/M4).

The saver runs on LangGraph's background executor; the run uses ``max_concurrency=1`` so
that executor is one thread and the saves happen in the order LangGraph submits them.

Not offered by LangGraph, declared absent (features: none): a permission layer (rules,
hard constraints, plan mode: every call the model makes runs), a classifier, approval waits
(``interrupt`` exists but is an application's choice, not a lifecycle), denial counters, a
failure table, UI projections, lifecycle events, model request records, cancellation of a
running ``invoke``, importing old checkpoints. ``answer_approval`` and ``load_checkpoint``
raise :class:`NotOffered`; ``update_rules`` and ``cancel`` are recorded and change nothing.

Findings (what the harness shows; ``docs/adapters.md`` keeps the table):

* crash between the tool's side effect and its saved result (``after_tool_returned``,
  durability ``sync`` or ``async``): recovery runs the tool task again: the side effect
  happens twice (two ledger rows; L1.8 fails). Replay:
  ``lifecycle-harness replay scenarios/l4/crash_after_tool_returned.toml --impl adapter:langgraph``
* crash once the result is saved (``after_result_saved``, durability ``sync``/``async``):
  LangGraph keeps the task's pending write and does not run the tool again; the turn goes
  on from the saved result (L4.1 passes). Replay:
  ``lifecycle-harness replay scenarios/l4/crash_after_result_saved.toml --impl adapter:langgraph``
* durability ``exit``: nothing is saved until the run ends, so a crash in the middle loses
  the turn (the user message, the tool call and its result): the world executed the tool,
  the store never heard of it (X2 fails); the result is only ever saved inside the final
  checkpoint, so ``after_result_saved`` is never reached. Replay:
  ``lifecycle-harness replay scenarios/l4/crash_after_tool_returned.toml --impl adapter:langgraph-exit``
* in every mode no start is recorded before a tool runs (L4.3, L4.6 fail), and a tool call
  id the model delivers a second time runs a second time (M4 fails in
  ``scenarios/x/duplicate_delivery_one_record.toml``).
"""

from __future__ import annotations

import operator
import sqlite3
import threading
from pathlib import Path
from typing import Annotated, Any, TypedDict

from harness.adapters import session_configs
from harness.adapters.conversation import (
    NotOffered,
    call_model,
    observation,
    operation_context,
    run_tool,
    tool_results,
    user_message,
)
from harness.adapters.serialized_world import SerializedWorld
from harness.contract import (
    Failpoint,
    ImplementationInfo,
    Observation,
    RecoveryReport,
    Rule,
    SessionConfig,
    TurnResult,
    TurnStatus,
    World,
)

DURABILITY_MODES = ("sync", "async", "exit")
DATABASE = "langgraph.sqlite"
RECURSION_LIMIT = 1000
"""LangGraph's bound on steps per run (two per tool round); an application's setting. High
enough for the longest scenario (tens of tool rounds): the scripted model ends every turn,
and the harness's time limit bounds a runaway."""


class TurnState(TypedDict):
    messages: Annotated[list, operator.add]


class KillPointWorld(SerializedWorld):
    """The world of ``async`` durability: while a failpoint request is on its way to the
    harness, LangGraph's background saver starts no durable write.

    A crash is the harness's ``SIGKILL`` answering a failpoint request: without this, the
    round trip (the request out, the kill back) is time in which the background thread
    commits the previous step's writes, so every kill would land after them and ``async``
    would look like ``sync``. A real kill at that point has no such grace. Here a save
    that had not started when the failpoint was called waits until the harness answers
    (no crash: it goes on) or kills (it never happens); one already running finishes, as
    it would. Which of the two it is depends on thread timing, by design of the mode: a
    finding it decides is reported as a rate over trials (``replay --trials K``)."""

    def __init__(self, world: World) -> None:
        super().__init__(world)
        self._pending: dict[int, int] = {}
        self._turn = threading.Condition()

    def failpoint(self, name: Failpoint, context: dict[str, Any]) -> None:
        me = threading.get_ident()
        with self._turn:
            self._pending[me] = self._pending.get(me, 0) + 1
        try:
            super().failpoint(name, context)
        finally:
            with self._turn:
                self._pending[me] -= 1
                if not self._pending[me]:
                    del self._pending[me]
                self._turn.notify_all()

    def wait_for_saver_turn(self) -> None:
        """Block a durable write while another thread's failpoint request is unanswered."""
        me = threading.get_ident()
        with self._turn:
            self._turn.wait_for(lambda: not (set(self._pending) - {me}))


def _wait_for_saver_turn(world: Any) -> None:
    if isinstance(world, KillPointWorld):
        world.wait_for_saver_turn()


def _thread(session_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": session_id, "checkpoint_ns": ""}}


def _saver_class() -> type:
    from langgraph.checkpoint.sqlite import SqliteSaver

    class FailpointSaver(SqliteSaver):
        """``SqliteSaver`` calling the failpoints right at its durable writes."""

        world: World | None = None

        def put_writes(self, config, writes, task_id, task_path=""):  # noqa: ANN001
            _wait_for_saver_turn(self.world)
            super().put_writes(config, writes, task_id, task_path)
            session_id = str(config["configurable"]["thread_id"])
            for channel, value in writes:
                if channel == "messages" and self.world is not None:
                    for message in tool_results(value):
                        self.world.failpoint(Failpoint.AFTER_RESULT_SAVED, operation_context(
                            session_id, message["tool_call_id"]))

        def put(self, config, checkpoint, metadata, new_versions):  # noqa: ANN001
            _wait_for_saver_turn(self.world)
            session_id = str(config["configurable"]["thread_id"])
            newly_folded = self._newly_folded(config, checkpoint)
            for tool_call_id in newly_folded:
                self.world.failpoint(Failpoint.DURING_CHECKPOINT_BUILD,
                                     operation_context(session_id, tool_call_id))
            saved = super().put(config, checkpoint, metadata, new_versions)
            for tool_call_id in newly_folded:
                self.world.failpoint(Failpoint.AFTER_CHECKPOINT_SAVED,
                                     operation_context(session_id, tool_call_id))
            return saved

        def _newly_folded(self, config, checkpoint) -> list[str]:  # noqa: ANN001
            if self.world is None:
                return []
            now = tool_results(checkpoint.get("channel_values", {}).get("messages", ()))
            if not now:
                return []
            before: set[str] = set()
            if config["configurable"].get("checkpoint_id"):
                parent = self.get_tuple(config)
                if parent is not None:
                    before = {m["tool_call_id"] for m in tool_results(
                        parent.checkpoint.get("channel_values", {}).get("messages", ()))}
            return [m["tool_call_id"] for m in now if m["tool_call_id"] not in before]

    return FailpointSaver


class LangGraphRuntime:
    """One instance of the graph over one data dir (a :class:`harness.contract.Runtime`)."""

    def __init__(self, data_dir: str, world: World, durability: str) -> None:
        from langgraph.config import get_config
        from langgraph.graph import END, START, StateGraph
        from langgraph.types import Send

        self.data_dir = data_dir
        self.world = (KillPointWorld(world) if durability == "async"
                      else SerializedWorld(world))
        self.durability = durability
        self.configs = session_configs.load_all(data_dir)
        self.connection = sqlite3.connect(str(Path(data_dir) / DATABASE),
                                          check_same_thread=False)
        self.saver = _saver_class()(self.connection)
        self.saver.world = self.world

        def agent(state: TurnState) -> dict[str, Any]:
            session = self.configs[get_config()["configurable"]["thread_id"]]
            return {"messages": [call_model(self.world, session, state["messages"])]}

        def tool(task: dict[str, Any]) -> dict[str, Any]:
            return {"messages": [run_tool(self.world, self.configs[task["session_id"]],
                                          task["call"])]}

        def route(state: TurnState) -> Any:
            last = state["messages"][-1]
            if last["role"] == "assistant" and last["tool_calls"]:
                session_id = get_config()["configurable"]["thread_id"]
                return [Send("tool", {"session_id": session_id, "call": call})
                        for call in last["tool_calls"]]
            return END

        builder = StateGraph(TurnState)
        builder.add_node("agent", agent)
        builder.add_node("tool", tool)
        builder.add_edge(START, "agent")
        builder.add_conditional_edges("agent", route, ["tool", END])
        builder.add_edge("tool", "agent")
        self.graph = builder.compile(checkpointer=self.saver)

    def _run(self, session_id: str, payload: Any) -> TurnResult:
        config = {**_thread(session_id), "max_concurrency": 1,
                  "recursion_limit": RECURSION_LIMIT}
        with self.world.admitting():  # the saver runs on LangGraph's executor thread
            state = self.graph.invoke(payload, config, durability=self.durability)
        replies = [m for m in state["messages"] if m["role"] == "assistant"]
        return TurnResult(session_id=session_id, status=TurnStatus.COMPLETED,
                          final_text=replies[-1]["content"] if replies else "")

    def open_session(self, config: SessionConfig) -> None:
        session_configs.save(self.data_dir, config)
        self.configs[config.session_id] = config

    def run_turn(self, session_id: str, user_text: str) -> TurnResult:
        return self._run(session_id, {"messages": [user_message(user_text)]})

    def answer_approval(self, wait_id: str, approve: bool) -> TurnResult:
        raise NotOffered(f"answer_approval({wait_id!r}): LangGraph has no approval waits; "
                         "this adapter never creates one")

    def update_rules(self, session_id: str, rules: tuple[Rule, ...],
                     permission_version: int) -> None:
        from dataclasses import replace

        config = replace(self.configs[session_id], rules=tuple(rules),
                         permission_version=permission_version)
        self.open_session(config)  # kept for the record; LangGraph decides nothing with it

    def cancel(self, session_id: str) -> None:
        """LangGraph cannot cancel a synchronous ``invoke`` from outside: nothing happens."""

    def recover(self) -> RecoveryReport:
        resumed = []
        for session_id in sorted(self.configs):
            # ``tasks`` (not ``next``): a task whose write was saved is no longer "next",
            # but the step is unfinished and LangGraph resumes it from the saved write
            if self.graph.get_state(_thread(session_id)).tasks:
                self._run(session_id, None)
                resumed.append(session_id)
        return RecoveryReport(turns_resumed=tuple(resumed))

    def load_checkpoint(self, session_id: str, data: bytes) -> None:
        raise NotOffered("load_checkpoint: LangGraph has no import of another runtime's "
                         "checkpoints")

    def close(self) -> None:
        self.connection.close()


class LangGraphImplementation:
    """The :class:`harness.contract.Implementation` for one durability mode."""

    def __init__(self, durability: str = "sync") -> None:
        if durability not in DURABILITY_MODES:
            raise ValueError(f"durability {durability!r} is not one of LangGraph's modes "
                             f"({', '.join(DURABILITY_MODES)})")
        from importlib.metadata import version

        self.durability = durability
        self.info = ImplementationInfo(
            name=f"langgraph-{durability}",
            version=f"langgraph {version('langgraph')}, "
                    f"langgraph-checkpoint-sqlite {version('langgraph-checkpoint-sqlite')}")

    def open(self, data_dir: str, world: World) -> LangGraphRuntime:
        return LangGraphRuntime(data_dir, world, self.durability)

    def inspect(self, data_dir: str) -> Observation:
        from harness.adapters.langgraph_store import read_sessions

        configs = session_configs.load_all(data_dir)
        return observation(read_sessions(Path(data_dir) / DATABASE, configs))
