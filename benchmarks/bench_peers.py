"""The reference against the durable runtimes users would pick instead, on one disk in one run.

    python benchmarks/bench_peers.py [--sizes 1 100 1000] [--shapes turns batch]
                                     [--systems reference dbos dbos-wal langgraph-sync]
                                     [--json PATH] [--dir DIR]

Needs the ``adapters`` extra (``pip install -e '.[adapters]'``: LangGraph with its SQLite
saver, DBOS); a system whose library is missing is reported as such and skipped.

Each system runs the same agent session as ``bench_ops.py`` (``turns``: N turns of one
write call; ``batch``: one answer of N write calls), against the same scripted model and a
tool that does nothing, in a fresh interpreter of its own per row (DBOS is a process-wide
singleton; no row inherits another's imports or caches), on a store in the same directory:

* ``reference``: ``reference_impl`` (durable start mark, result, checkpoint, projection);
* ``dbos``: DBOS as shipped: one workflow per turn, a step for each model request and each
  tool call, its SQLite system database in SQLite's default journal (``DELETE``: a commit
  flushes the journal and the database, several fsyncs);
* ``dbos-wal``: the same, its database switched to WAL before DBOS creates its tables (one
  fsync per commit). DBOS records a step when it returns: no durable start mark, so after a
  crash it cannot tell a tool that ran from one that did not;
* ``langgraph-sync``: LangGraph's agent loop (an ``agent`` node, a ``tool`` task per call
  through ``Send``) checkpointed by ``SqliteSaver`` with ``durability="sync"`` (saved before
  the next step starts); every checkpoint holds the whole message list.

The DBOS and LangGraph loops are written here the way their documentation shows an agent
loop, smallest form: the workflow's input is the turn's user message only (the scripted model
needs only the last message), so DBOS pays for its step records and nothing else.

The **floor** is ``bench_ops.py``'s (three ``synchronous=FULL`` WAL commits of an
operation-sized row in an allocated log), sampled inside the tool calls and around each
session, in the same directory. Per row: time per op, its ratio to the floor and to the
reference's same row, CPU per op (process time, the floor samples' left out), database bytes
per op. Ratios measured in one run compare across machines; absolute times do not. Writes a
JSON result (default ``benchmarks/results/peers.json``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import operator
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any, TypedDict

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_ops  # noqa: E402  (the session shapes, the world and the floor are its)

SYSTEMS = ("reference", "dbos", "dbos-wal", "langgraph-sync")
SIZES = (1, 100, 1_000)
SHAPES = ("turns", "batch")
NEEDS = {"dbos": ("dbos",), "dbos-wal": ("dbos",),
         "langgraph-sync": ("langgraph", "langgraph.checkpoint.sqlite")}
INSTALL_HINT = "pip install -e '.[adapters]'"


@dataclass(frozen=True, slots=True)
class Row:
    system: str
    shape: str
    size: int
    ops_done: int
    per_op_us: float
    cpu_per_op_us: float
    floor_us: float
    ratio_to_floor: float
    ratio_to_reference: float | None
    database_bytes_per_op: float
    note: str = ""


def _missing(system: str) -> str:
    for module in NEEDS.get(system, ()):
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            return f"module {module!r} is not installed ({INSTALL_HINT})"
    return ""


def _directory_bytes(path: str) -> int:
    """The bytes of every database under ``path``, each log checkpointed into its file
    first (as ``bench_ops.py`` measures the reference's): what the store keeps, not how
    much log it has not folded yet."""
    for root, _, names in os.walk(path):
        for name in names:
            if name.endswith((".sqlite", ".sqlite3", ".db")):
                connection = sqlite3.connect(os.path.join(root, name))
                try:
                    connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                except sqlite3.OperationalError:
                    pass  # busy (the system still holds it): counted with its log
                finally:
                    connection.close()
    return sum(os.path.getsize(os.path.join(root, name))
               for root, _, names in os.walk(path) for name in names)


# --------------------------------------------------------------------------- the systems

class _Scripted:
    """The model and the tool of ``bench_ops._BenchWorld``, as plain functions for the
    peers' loops (a user message: N write calls; anything else: "done")."""

    def __init__(self, world: bench_ops._BenchWorld) -> None:
        self.world = world

    def model(self, last_role: str) -> dict[str, Any]:
        if last_role != "user":
            return {"role": "assistant", "content": "done", "tool_calls": []}
        calls = []
        for _ in range(self.world.calls_per_response):
            self.world._call_seq += 1
            number = self.world._call_seq
            calls.append({"id": f"call-{number}", "name": bench_ops.TOOL,
                          "args": {"path": f"/repo/out/{number}.txt", "content": "x" * 64}})
        return {"role": "assistant", "content": "", "tool_calls": calls}

    def tool(self, call: dict[str, Any]) -> dict[str, Any]:
        from harness.contract import ToolCall, ToolInvocation, OperationIdentity

        result = self.world.execute_tool(ToolInvocation(
            OperationIdentity(call["id"], call["id"], "", 1), bench_ops.SESSION,
            call["name"], call["args"], False))
        return {"role": "tool", "content": result.output, "tool_call_id": call["id"]}


def _run_reference(shape: str, size: int, data_dir: str, floor: bench_ops._Floor,
                   budget_s: float) -> dict[str, Any]:
    return bench_ops._session(shape, size, data_dir, budget_s, traced=False, floor=floor)


def _run_dbos(shape: str, size: int, data_dir: str, floor: bench_ops._Floor,
              budget_s: float, wal: bool) -> dict[str, Any]:
    from dbos import DBOS

    database = Path(data_dir) / "dbos.sqlite"
    if wal:  # the journal mode is kept in the file: DBOS then creates its tables in WAL
        connection = sqlite3.connect(database)
        connection.execute("PRAGMA journal_mode = WAL")
        connection.close()
    world, scripted = _world(shape, size, floor, budget_s)

    @DBOS.step()
    def model_step(last_role: str) -> dict[str, Any]:
        return scripted.model(last_role)

    @DBOS.step()
    def tool_step(call: dict[str, Any]) -> dict[str, Any]:
        return scripted.tool(call)

    @DBOS.workflow()
    def agent_turn(user_text: str) -> str:
        reply = model_step("user")
        while reply["tool_calls"]:
            for call in reply["tool_calls"]:
                tool_step(call)
            reply = model_step("tool")
        return reply["content"]

    DBOS(config={"name": "bench-peers", "system_database_url": f"sqlite:///{database}",
                 "log_level": "WARNING", "notification_listener_polling_interval_sec": 0.02})
    DBOS.launch()
    empty = _directory_bytes(data_dir)
    try:
        return _timed(shape, size, world, lambda: agent_turn("write the next file"),
                      data_dir, empty)
    finally:
        DBOS.destroy()


def _run_langgraph(shape: str, size: int, data_dir: str, floor: bench_ops._Floor,
                   budget_s: float) -> dict[str, Any]:
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import Send

    world, scripted = _world(shape, size, floor, budget_s)

    def agent(state: _GraphState) -> dict[str, Any]:
        return {"messages": [scripted.model(state["messages"][-1]["role"])]}

    def tool(task: dict[str, Any]) -> dict[str, Any]:
        return {"messages": [scripted.tool(task["call"])]}

    def route(state: _GraphState) -> Any:
        last = state["messages"][-1]
        if last["role"] == "assistant" and last["tool_calls"]:
            return [Send("tool", {"call": call}) for call in last["tool_calls"]]
        return END

    builder = StateGraph(_GraphState)
    builder.add_node("agent", agent)
    builder.add_node("tool", tool)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, ["tool", END])
    builder.add_edge("tool", "agent")
    connection = sqlite3.connect(str(Path(data_dir) / "langgraph.sqlite"),
                                 check_same_thread=False)
    graph = builder.compile(checkpointer=SqliteSaver(connection))
    config = {"configurable": {"thread_id": bench_ops.SESSION}, "max_concurrency": 1,
              "recursion_limit": 10_000}
    empty = _directory_bytes(data_dir)

    def turn() -> None:
        graph.invoke({"messages": [{"role": "user", "content": "write the next file"}]},
                     config, durability="sync")

    try:
        return _timed(shape, size, world, turn, data_dir, empty)
    finally:
        connection.close()


class _GraphState(TypedDict):
    """LangGraph's state: the message list, each step's messages appended (its reducer)."""

    messages: Annotated[list, operator.add]


def _world(shape: str, size: int, floor: bench_ops._Floor,
           budget_s: float) -> tuple[bench_ops._BenchWorld, _Scripted]:
    floor_every = max(1, size // bench_ops.FLOOR_SAMPLES_PER_SESSION)
    world = bench_ops._BenchWorld(size if shape == "batch" else 1, budget_s, floor, floor_every)
    return world, _Scripted(world)


def _timed(shape: str, size: int, world: bench_ops._BenchWorld, turn: Any, data_dir: str,
           empty: int) -> dict[str, Any]:
    started = time.perf_counter()
    cpu_started = time.process_time()
    stopped = False
    try:
        for _ in range(1 if shape == "batch" else size):
            turn()
    except bench_ops._OverBudget:
        stopped = True
    elapsed_s = time.perf_counter() - started - sum(world.floor_s)
    cpu_s = time.process_time() - cpu_started - world.floor_cpu_s
    return {"elapsed_s": elapsed_s, "cpu_s": cpu_s, "ops": len(world.tool_times),
            "stopped": stopped, "bytes": _directory_bytes(data_dir) - empty}


def measure_one(system: str, shape: str, size: int, directory: str,
                budget_s: float) -> dict[str, Any]:
    """One row, in this process: the session and the floor sampled around and inside it."""
    floor = bench_ops._Floor(directory, name=f"floor-{system}")
    for _ in range(bench_ops.FLOOR_SAMPLES_AROUND):
        floor.sample()
    data_dir = tempfile.mkdtemp(prefix=f"{system}-{shape}-{size}-", dir=directory)
    try:
        if system == "reference":
            result = _run_reference(shape, size, data_dir, floor, budget_s)
            result.setdefault("bytes", result.get("bytes", 0))
        elif system in ("dbos", "dbos-wal"):
            result = _run_dbos(shape, size, data_dir, floor, budget_s, wal=system == "dbos-wal")
        elif system == "langgraph-sync":
            result = _run_langgraph(shape, size, data_dir, floor, budget_s)
        else:
            raise ValueError(f"unknown system {system!r} (one of {', '.join(SYSTEMS)})")
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    for _ in range(bench_ops.FLOOR_SAMPLES_AROUND):
        floor.sample()
    floor.close()
    return {"elapsed_s": result["elapsed_s"], "cpu_s": result["cpu_s"], "ops": result["ops"],
            "stopped": result["stopped"], "bytes": result["bytes"],
            "floor_us": statistics.fmean(floor.samples_s) * 1e6}


def _child(system: str, shape: str, size: int, directory: str, budget_s: float) -> dict[str, Any]:
    """``measure_one`` in a fresh interpreter; its JSON result."""
    completed = subprocess.run(
        [sys.executable, __file__, "--one", system, shape, str(size), "--dir", directory,
         "--budget-s", str(budget_s)],
        capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        raise RuntimeError(f"{system} {shape} x {size} failed (exit {completed.returncode}):\n"
                           f"{completed.stderr[-2000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def _rows(results: dict[tuple[str, str, int], dict[str, Any]]) -> list[Row]:
    rows = []
    for (system, shape, size), result in results.items():
        ops = max(result["ops"], 1)
        per_op_us = result["elapsed_s"] / ops * 1e6
        reference = results.get(("reference", shape, size))
        reference_us = (reference["elapsed_s"] / max(reference["ops"], 1) * 1e6
                        if reference else None)
        rows.append(Row(
            system=system, shape=shape, size=size, ops_done=result["ops"],
            per_op_us=round(per_op_us, 1), cpu_per_op_us=round(result["cpu_s"] / ops * 1e6, 1),
            floor_us=round(result["floor_us"], 1),
            ratio_to_floor=round(per_op_us / result["floor_us"], 2),
            ratio_to_reference=round(per_op_us / reference_us, 2) if reference_us else None,
            database_bytes_per_op=round(result["bytes"] / ops, 1),
            note="stopped at the time budget" if result["stopped"] else ""))
    return rows


def _print(rows: list[Row], skipped: dict[str, str]) -> None:
    header = (f"{'system':<15} {'shape':<6} {'ops':>6} {'per op':>9} {'cpu/op':>8} "
              f"{'floor':>8} {'x floor':>8} {'x reference':>11} {'DB B/op':>10}")
    print(header)
    print("-" * len(header))
    for row in rows:
        vs = "-" if row.ratio_to_reference is None else f"{row.ratio_to_reference:.2f}"
        ops = f"{row.ops_done}" + ("!" if row.note else "")
        print(f"{row.system:<15} {row.shape:<6} {ops:>6} {row.per_op_us / 1000:>7.2f}ms "
              f"{row.cpu_per_op_us / 1000:>6.2f}ms {row.floor_us / 1000:>6.2f}ms "
              f"{row.ratio_to_floor:>8.2f} {vs:>11} {row.database_bytes_per_op:>10.0f}")
    for system, reason in skipped.items():
        print(f"skipped {system}: {reason}")
    if any(row.note for row in rows):
        print("! stopped at the time budget (--budget-s): the figures cover the ops done")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--shapes", nargs="+", choices=SHAPES, default=list(SHAPES))
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    parser.add_argument("--budget-s", type=float, default=300.0,
                        help="stop a session after this many seconds (default 300)")
    parser.add_argument("--dir", help="where the stores go (default: a temporary directory)")
    parser.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "peers.json"))
    parser.add_argument("--one", nargs=3, metavar=("SYSTEM", "SHAPE", "SIZE"),
                        help=argparse.SUPPRESS)  # one row, in this process (the child's side)
    args = parser.parse_args(argv)
    if any(size < 1 for size in args.sizes):
        print("bench_peers: --sizes must be positive integers", file=sys.stderr)
        return 2
    directory = args.dir or tempfile.mkdtemp(prefix="bench-peers-")
    os.makedirs(directory, exist_ok=True)
    if args.one:
        system, shape, size = args.one
        print(json.dumps(measure_one(system, shape, int(size), directory, args.budget_s)))
        return 0
    skipped = {system: reason for system in args.systems if (reason := _missing(system))}
    results: dict[tuple[str, str, int], dict[str, Any]] = {}
    try:
        for shape in args.shapes:
            for size in args.sizes:
                for system in args.systems:  # interleaved: the disk's hour is the same
                    if system in skipped:
                        continue
                    results[(system, shape, size)] = _child(system, shape, size, directory,
                                                            args.budget_s)
                    print(f"  measured {system} {shape} x {size}", file=sys.stderr, flush=True)
    finally:
        if not args.dir:
            shutil.rmtree(directory, ignore_errors=True)
    rows = _rows(results)
    _print(rows, skipped)
    document = {"benchmark": "bench_peers", "python": sys.version.split()[0],
                "sqlite": sqlite3.sqlite_version, "skipped": skipped,
                "rows": [asdict(row) for row in rows]}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    print(f"JSON: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
