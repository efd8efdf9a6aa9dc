#!/usr/bin/env python3
"""A small lifecycle runtime that speaks the harness's wire protocol, standard library only.

It imports neither the harness nor the reference implementation: everything it relies on is
specified in docs/protocol.md (the wire), docs/lifecycle.md (the behaviour) and
docs/contract.md (every checked value; its section "Details an implementation needs" lists
what writing this file showed the other pages lacked). It takes the same steps as
reference_impl/, compacted into one file. Run it under the harness with

    lifecycle-harness run --impl "process:python examples/minimal_runtime.py"

It claims the core only (no optional feature): it publishes projections, so L5.4 judges
them (web_projection shown by behaviour); it takes a tool's escalation request as a definite
failure; it declares no checkpoint fixture; and it refuses a second live instance on a data
dir (``open`` raises), the documented way out of multi_instance. Layout of this file, top to
bottom:

1. the contract's formulas (canonical JSON, ids, digests, the projection table);
2. the wire: newline-delimited JSON-RPC 2.0 on stdin/stdout, requests in both directions;
3. the store: one SQLite file per data dir; every step is one short transaction and no
   transaction is ever open across a port call (the harness may call back in, e.g. a
   re-entrant ``update_rules`` at a failpoint);
4. the runtime: turns, the operation pipeline, approvals, recovery;
5. ``inspect``: the durable state as an Observation, and ``inspect_since``, the optional
   "unchanged" answer (docs/protocol.md "Unchanged readings");
6. the server, and the optional fork server (docs/protocol.md "Fork server"): started as a
   *template*, it forks each instance from the already-imported process instead of letting
   the harness start an interpreter per instance.
"""

from __future__ import annotations

import decimal
import fcntl
import fnmatch
import gc
import hashlib
import json
import os
import select
import signal
import socket
import sqlite3
import sys
import traceback

NAME, VERSION = "minimal-runtime", "0.1.0"
FEATURES: list[str] = []  # core only: checkpoint_import, multi_instance... not claimed
FAILURE_TABLE_CAPACITY = 16

# --------------------------------------------------------------------------- 1. the formulas


def canonical_json(value) -> str:
    """docs/contract.md "Canonical JSON": RFC 8785 (JCS), by hand in a few lines."""
    if isinstance(value, dict):
        # keys in the order of their UTF-16 code units (code points differ past U+FFFF)
        items = sorted(value.items(), key=lambda item: item[0].encode("utf-16-be"))
        return "{" + ",".join(canonical_json(key) + ":" + canonical_json(item)
                              for key, item in items) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(canonical_json(item) for item in value) + "]"
    if isinstance(value, float):
        return es_number(value)
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**53 - 1:
        # JSON numbers are doubles: past 2**53 - 1 an integer has a text only when it is
        # exactly a double's (10**20, what a reader gets back from the text of 1e20)
        if es_number(float(value)) != str(value):
            raise ValueError(f"the integer {value} is past 2**53 - 1 and no double: no canonical JSON")
    if isinstance(value, str):
        value.encode("utf-8")  # a lone surrogate has no UTF-8 form: refused (UnicodeError)
    # a string escaped only where JSON must be (non-ASCII as itself), an integer, true/false/null
    return json.dumps(value, ensure_ascii=False)


def es_number(number: float) -> str:
    """A double as ECMAScript's Number.prototype.toString writes it (RFC 8785, 3.2.2.3)."""
    if number != number or number in (float("inf"), float("-inf")):
        raise ValueError(f"{number} has no canonical JSON")
    if number == 0:
        return "0"  # -0.0 too
    # repr gives the shortest digits that read back as the same double, as ECMAScript does
    sign, digit_tuple, exponent = decimal.Decimal(repr(number)).normalize().as_tuple()
    digits = "".join(map(str, digit_tuple))
    point = len(digits) + exponent  # the value is 0.DIGITS times 10**point
    if len(digits) <= point <= 21:
        text = digits + "0" * (point - len(digits))
    elif 0 < point <= 21:
        text = digits[:point] + "." + digits[point:]
    elif -6 < point <= 0:
        text = "0." + "0" * -point + digits
    else:
        text = (digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
                + ("e+" if point > 0 else "e-") + str(abs(point - 1)))
    return ("-" if sign else "") + text


def sha256_tagged(value) -> str:
    return "sha256:" + hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def execution_id_for(session_id: str, tool_call_id: str) -> str:
    return "ex-" + hashlib.sha256(f"{session_id}\0{tool_call_id}".encode()).hexdigest()[:16]


def args_digest(tool: str, args: dict) -> str:
    return sha256_tagged({"tool": tool, "args": args})


def result_digest(status: str, output: str) -> str:
    return sha256_tagged({"status": status, "output": output})


def projection_of(permission, outcome, decided_by, failure_kind, reconcile, wait_pending):
    """docs/lifecycle.md "What the UI shows": (status, recovery actions); first row wins."""
    if reconcile or outcome == "unknown":
        return "reconciliation_required", ["reconcile"]
    if outcome == "succeeded":
        return "succeeded", []
    if outcome == "failed":
        return "failed", ["edit_args"]
    if wait_pending:
        return "awaiting_approval", ["approve", "reject"]
    if decided_by == "cancellation":
        return "cancelled", []
    if permission == "deny":
        return "denied", [] if decided_by == "hard_constraint" else ["change_rules"]
    if failure_kind == "param_error":
        return "invalid_arguments", ["edit_args"]
    if failure_kind == "transient":
        return "not_executed", ["retry"]
    if failure_kind is not None:
        return "not_executed", []
    return "pending", []


# --------------------------------------------------------------------------- 2. the wire


class PortError(Exception):
    """A world port failed; ``kind`` is the contract exception's name (e.g. ToolUnavailable)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class Wire:
    """Strictly nested JSON-RPC over two pipes: while waiting for the answer to our request,
    serve every request the harness sends (they may nest too)."""

    def __init__(self, rfile, wfile) -> None:
        self.rfile, self.wfile, self.next_id, self.handlers = rfile, wfile, 0, {}

    def send(self, message: dict) -> None:
        self.wfile.write(json.dumps(message, ensure_ascii=False, separators=(",", ":"))
                         .encode("utf-8") + b"\n")
        self.wfile.flush()

    def call(self, method: str, **params):
        self.next_id += 1
        my_id = self.next_id
        self.send({"jsonrpc": "2.0", "id": my_id, "method": method, "params": params})
        while True:
            message = self.read()
            if message is None:
                os._exit(70)  # the harness is gone (or killed us): die without cleanup
            if "method" in message:
                self.serve_one(message)
            elif message.get("id") == my_id:
                if "error" in message:
                    error = message["error"]
                    kind = (error.get("data") or {}).get("exception", "ProtocolError")
                    raise PortError(kind, error.get("message", ""))
                return message.get("result")

    def read(self):
        while True:
            line = self.rfile.readline()
            if not line:
                return None
            if line.strip():
                return json.loads(line)

    def serve_one(self, message: dict) -> None:
        handler = self.handlers.get(message["method"])
        if handler is None:
            self.send({"jsonrpc": "2.0", "id": message["id"], "error": {
                "code": -32601, "message": f"unknown method {message['method']}"}})
            return
        try:
            result = handler(**message.get("params", {}))
        except PortError as exc:  # a world exception we let out: it crosses back as itself
            self.send({"jsonrpc": "2.0", "id": message["id"], "error": {
                "code": -32000, "message": str(exc), "data": {"exception": exc.kind}}})
            return
        except Exception as exc:  # our own bug: reported as raised, with its class name
            self.send({"jsonrpc": "2.0", "id": message["id"], "error": {
                "code": -32000, "message": str(exc), "data": {"exception": type(exc).__name__}}})
            return
        self.send({"jsonrpc": "2.0", "id": message["id"], "result": result})

    def serve(self) -> None:
        while (message := self.read()) is not None:
            self.serve_one(message)
            if message["method"] == "shutdown":
                return


class World:
    """The harness's ports, as calls over the wire."""

    def __init__(self, wire: Wire) -> None:
        self.wire = wire

    def now(self) -> float:
        return self.wire.call("now")

    def emit(self, type_: str, session_id: str, execution_id: str = "", request_id: str = "",
             **data) -> None:
        self.wire.call("emit", event={"type": type_, "session_id": session_id,
                                      "execution_id": execution_id, "request_id": request_id,
                                      "data": data})

    def failpoint(self, name: str, session_id: str, execution_id: str = "",
                  tool_call_id: str = "", request_id: str = "", contain: bool = True) -> bool:
        """Reach a failpoint (outside any transaction). An exception injected there is a
        runtime fault of that point: reported, and the lifecycle goes on (the step before
        is committed, the one after still owed); False then. A crash never returns."""
        context = {"session_id": session_id}
        for key, value in (("execution_id", execution_id), ("tool_call_id", tool_call_id),
                           ("request_id", request_id)):
            if value:  # left out when it does not apply: an empty id would name an operation
                context[key] = value
        try:
            self.wire.call("failpoint", name=name, context=context)
            return True
        except PortError as exc:
            if not contain:
                raise
            self.emit("runtime_fault", session_id, execution_id, location=name,
                      error=f"{exc.kind}: {exc}")
            return False


# --------------------------------------------------------------------------- 3. the store

SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (session_id TEXT PRIMARY KEY, config TEXT, rules TEXT,
    permission_version INTEGER, turn_status TEXT, cancelled INTEGER DEFAULT 0);
CREATE TABLE IF NOT EXISTS operations (execution_id TEXT PRIMARY KEY, session_id TEXT,
    tool_call_id TEXT, tool TEXT, args TEXT, args_digest TEXT, permission_version INTEGER,
    dedup_key TEXT, stage TEXT, permission TEXT, decided_by TEXT, classifier_outcome TEXT,
    wait_trigger TEXT DEFAULT '', reason TEXT DEFAULT '', execution_started INTEGER DEFAULT 0,
    start_order INTEGER, start_mark INTEGER DEFAULT 0, delivery TEXT,
    checkpoint_sequence INTEGER,
    has_result INTEGER DEFAULT 0, outcome TEXT, failure_kind TEXT, reconcile INTEGER DEFAULT 0,
    result_digest TEXT, output TEXT DEFAULT '', attempts INTEGER DEFAULT 0);
CREATE TABLE IF NOT EXISTS waits (wait_id TEXT PRIMARY KEY, session_id TEXT,
    execution_id TEXT, tool_call_id TEXT, reason TEXT, trigger TEXT,
    permission_version INTEGER, status TEXT, prompted INTEGER DEFAULT 0);
CREATE TABLE IF NOT EXISTS denial_counters (session_id TEXT, permission_version INTEGER,
    consecutive INTEGER DEFAULT 0, cumulative INTEGER DEFAULT 0,
    PRIMARY KEY (session_id, permission_version));
CREATE TABLE IF NOT EXISTS counted_denials (session_id TEXT, permission_version INTEGER,
    execution_id TEXT, PRIMARY KEY (session_id, permission_version, execution_id));
CREATE TABLE IF NOT EXISTS failure_events (execution_id TEXT PRIMARY KEY, session_id TEXT);
CREATE TABLE IF NOT EXISTS repeat_budget (session_id TEXT, dedup_key TEXT,
    permission_version INTEGER, failures INTEGER, PRIMARY KEY (session_id, dedup_key,
    permission_version));
CREATE TABLE IF NOT EXISTS failure_table (session_id TEXT, dedup_key TEXT, tool TEXT,
    failure_kind TEXT, count INTEGER, last_execution_id TEXT, touched INTEGER,
    PRIMARY KEY (session_id, dedup_key));
CREATE TABLE IF NOT EXISTS checkpoints (session_id TEXT, sequence INTEGER, data BLOB,
    failure_entries INTEGER, last_execution_id TEXT, PRIMARY KEY (session_id, sequence));
CREATE TABLE IF NOT EXISTS projections (execution_id TEXT PRIMARY KEY, session_id TEXT,
    projection TEXT);
CREATE TABLE IF NOT EXISTS model_requests (request_id TEXT PRIMARY KEY, session_id TEXT,
    status TEXT, partial_text TEXT DEFAULT '', end_events INTEGER DEFAULT 0);
"""


class Store:
    def __init__(self, data_dir: str) -> None:
        os.makedirs(data_dir, exist_ok=True)
        self.db = sqlite3.connect(os.path.join(data_dir, "minimal.sqlite3"),
                                  isolation_level=None)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute("PRAGMA synchronous = FULL")
        with self as db:
            for statement in SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)

    def __enter__(self) -> sqlite3.Connection:
        self.db.execute("BEGIN IMMEDIATE")
        return self.db

    def __exit__(self, kind, exc, tb) -> None:
        self.db.execute("COMMIT" if kind is None else "ROLLBACK")

    def one(self, sql: str, *args):
        return self.db.execute(sql, args).fetchone()

    def all(self, sql: str, *args):
        return self.db.execute(sql, args).fetchall()


# --------------------------------------------------------------------------- 4. the runtime


def rule_matches(rule: dict, tool: str, args: dict) -> bool:
    if not fnmatch.fnmatchcase(tool, rule["tool"]):
        return False
    field = rule.get("field", "")
    subject = args.get(field, "") if field else canonical_json(args)
    if not isinstance(subject, str):
        subject = canonical_json(subject)
    return fnmatch.fnmatchcase(subject, rule.get("pattern", "*"))


class Session:
    """A session's config with the rules and permission version in force now."""

    def __init__(self, row) -> None:
        self.config = json.loads(row["config"])
        self.id = row["session_id"]
        self.rules = json.loads(row["rules"])
        self.version = row["permission_version"]
        self.cancelled = bool(row["cancelled"])
        self.thresholds = self.config.get("thresholds") or {}
        self.tools = {t["name"]: t for t in self.config.get("tools", [])}

    def threshold(self, name: str, default):
        return self.thresholds.get(name, default)

    @property
    def can_answer(self) -> bool:  # only capable interactive owners get approval waits
        return self.config.get("interactive", True) and self.config.get("owner_can_approve", True)

    def kind(self, tool: str) -> str:
        return self.tools.get(tool, {}).get("kind", "")

    def is_bash(self, tool: str) -> bool:
        return tool == "Bash" or self.kind(tool) == "bash"

    def fixed_decision(self, tool: str, args: dict):
        """The layers nothing can lift: hard constraints, capabilities, plan mode, deny rules."""
        for rule in self.config.get("hard_constraints", []):
            if rule_matches(rule, tool, args):
                return "deny", "hard_constraint", f"a hard constraint forbids {tool}"
        capabilities = self.config.get("capabilities", [])
        if capabilities and tool not in capabilities:
            return "deny", "capability", f"the owner's identity may not use {tool}"
        if self.config.get("mode", "default") == "plan" and self.kind(tool) != "read":
            return "deny", "plan_mode", f"plan mode runs read-only tools only; {tool} is not one"
        for rule in self.rules:
            if rule["effect"] == "deny" and rule_matches(rule, tool, args):
                return "deny", "explicit_deny", f"deny rule {rule['tool']} matches"
        return None

    def rule_decision(self, tool: str, args: dict):
        for rule in self.rules:
            if rule["effect"] == "ask" and rule_matches(rule, tool, args):
                if self.can_answer:
                    return "ask", "ask_rule", f"ask rule {rule['tool']} needs the owner's approval"
                return "deny", "ask_rule", "an ask rule matches and no one here can approve"
        for rule in self.rules:
            if rule["effect"] == "allow" and rule_matches(rule, tool, args):
                return "allow", "exact_grant", f"allow rule {rule['tool']} grants it"
        return None

    def visible_tools(self) -> list[str]:
        """Tools some call of which can run under the rules in force (L5.1, L5.3)."""
        def denied_outright(name: str) -> bool:
            every = [r for r in self.config.get("hard_constraints", [])]
            every += [r for r in self.rules if r["effect"] == "deny"]
            if any(r.get("pattern", "*") == "*" and fnmatch.fnmatchcase(name, r["tool"])
                   for r in every):
                return True
            capabilities = self.config.get("capabilities", [])
            return bool(capabilities and name not in capabilities) or (
                self.config.get("mode", "default") == "plan" and self.kind(name) != "read")
        return [name for name in self.tools if not denied_outright(name)]


class Deferred(Exception):
    """Another instance started this operation; it owns the turn now."""


def hold_instance_lock(data_dir: str) -> int:
    """One live instance per data dir. This runtime claims the core only, not
    multi_instance, so it refuses a second instance while another one is live on the same
    data dir: ``open`` raises instead of blocking (docs/contract.md, "Features"). The lock is
    the kernel's, so a killed instance's goes with its process."""
    os.makedirs(data_dir, exist_ok=True)
    fd = os.open(os.path.join(data_dir, "minimal.instance.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise RuntimeError(f"another live instance holds {data_dir}: this runtime runs one "
                           "instance per data dir (multi_instance is not claimed)") from None
    return fd


class Runtime:
    def __init__(self, data_dir: str, world: World) -> None:
        self.lock = hold_instance_lock(data_dir)
        self.store, self.world = Store(data_dir), world

    def close(self) -> None:
        self.store.db.close()
        os.close(self.lock)

    # ---- small reads
    def session(self, session_id: str) -> Session:
        row = self.store.one("SELECT * FROM sessions WHERE session_id = ?", session_id)
        if row is None:
            raise KeyError(f"session {session_id!r} was never opened")
        return Session(row)

    def op(self, execution_id: str):
        return self.store.one("SELECT * FROM operations WHERE execution_id = ?", execution_id)

    def messages(self, session_id: str) -> list[dict]:
        row = self.store.one("SELECT data FROM checkpoints WHERE session_id = ? ORDER BY"
                             " sequence DESC LIMIT 1", session_id)
        return json.loads(row["data"])["messages"] if row else []

    # ---- driver methods
    def open_session(self, config: dict) -> None:
        with self.store as db:
            db.execute("INSERT OR IGNORE INTO sessions VALUES (?, ?, ?, ?, 'idle', 0)",
                       (config["session_id"], canonical_json(config),
                        canonical_json(config.get("rules", [])),
                        config.get("permission_version", 1)))

    def run_turn(self, session_id: str, user_text: str) -> dict:
        self.session(session_id)
        # Calls an earlier turn left pending are settled before the new message, which
        # answers "no" to every approval they still wait for: no model request may carry a
        # call without its result (X3).
        self.refuse_waits(session_id)
        try:
            while (self.settle_pending(session_id) == "awaiting_approval"
                   and self.refuse_waits(session_id)):
                pass
        except Deferred:
            return self.end(session_id, "deferred", persist=False)
        with self.store as db:
            self.append(db, session_id, message("user", user_text))
            db.execute("UPDATE sessions SET turn_status = 'running', cancelled = 0"
                       " WHERE session_id = ?", (session_id,))
        return self.drive(session_id)

    def apply_answer(self, db, wait, approve: bool, reason: str) -> bool:
        """Apply an answer to a pending wait (False: it was answered already)."""
        applied = db.execute(
            "UPDATE waits SET status = ? WHERE wait_id = ? AND status = 'pending'",
            ("approved" if approve else "rejected", wait["wait_id"])).rowcount
        if not applied:
            return False
        db.execute("UPDATE operations SET stage = 'decided', permission = ?,"
                   " decided_by = 'approval', reason = ?, permission_version = ?"
                   " WHERE execution_id = ? AND stage = 'waiting'",
                   ("allow" if approve else "deny", reason, wait["permission_version"],
                    wait["execution_id"]))
        key = (wait["session_id"], wait["permission_version"])
        if approve:
            db.execute("UPDATE denial_counters SET consecutive = 0 WHERE session_id = ?"
                       " AND permission_version = ?", key)
        if "cumulative" in wait["trigger"]:
            db.execute("UPDATE denial_counters SET cumulative = 0 WHERE session_id = ?"
                       " AND permission_version = ?", key)
        return True

    def announce_answer(self, wait, approve: bool) -> None:
        session_id, execution_id = wait["session_id"], wait["execution_id"]
        self.world.emit("approval_answered", session_id, execution_id,
                        wait_id=wait["wait_id"], approved=approve)
        self.world.emit("permission_decided", session_id, execution_id,
                        permission="allow" if approve else "deny", decided_by="approval")

    def refuse_waits(self, session_id: str) -> bool:
        """A new message is the owner moving on: it answers "no" to the session's waits."""
        with self.store as db:
            pending = db.execute("SELECT * FROM waits WHERE session_id = ? AND"
                                 " status = 'pending' ORDER BY rowid", (session_id,)).fetchall()
            refused = [wait for wait in pending if self.apply_answer(
                db, wait, False, "the owner sent a new message instead of answering")]
            if refused:  # a crash from here on must find the turn to resume
                db.execute("UPDATE sessions SET turn_status = 'running' WHERE session_id = ?"
                           " AND turn_status = 'awaiting_approval'", (session_id,))
        for wait in refused:
            self.announce_answer(wait, False)
        return bool(refused)

    def answer_approval(self, wait_id: str, approve: bool) -> dict:
        with self.store as db:
            wait = db.execute("SELECT * FROM waits WHERE wait_id = ?", (wait_id,)).fetchone()
            if wait is None:
                raise KeyError(f"no approval wait {wait_id!r} in this store")
            applied = self.apply_answer(
                db, wait, approve, "approved by the owner" if approve else "rejected by the owner")
            if applied:
                db.execute("UPDATE sessions SET turn_status = 'running', cancelled = 0"
                           " WHERE session_id = ?", (wait["session_id"],))
        session_id, execution_id = wait["session_id"], wait["execution_id"]
        if not applied:
            # a lost wait: the answer changes nothing and drives nothing (driving the session
            # after a failed request would ask the model again: a hidden retry, M4)
            row = self.store.one("SELECT turn_status FROM sessions WHERE session_id = ?",
                                 session_id)
            return {"session_id": session_id, "status": row["turn_status"], "final_text": ""}
        self.announce_answer(wait, approve)
        op = self.op(execution_id)
        try:  # the answered operation is carried to its result, then the loop goes on
            self.pipeline(session_id, {"tool_call_id": op["tool_call_id"], "tool": op["tool"],
                                       "args": json.loads(op["args"])})
        except Deferred:
            return self.end(session_id, "deferred", persist=False)
        return self.drive(session_id)

    def update_rules(self, session_id: str, rules: list, permission_version: int) -> None:
        self.session(session_id)
        with self.store as db:
            db.execute("UPDATE sessions SET rules = ?, permission_version = ?"
                       " WHERE session_id = ?",
                       (canonical_json(rules), permission_version, session_id))

    def cancel(self, session_id: str) -> None:
        self.session(session_id)
        with self.store as db:
            db.execute("UPDATE sessions SET cancelled = 1, turn_status = CASE WHEN turn_status"
                       " IN ('running', 'awaiting_approval') THEN 'cancelled' ELSE turn_status"
                       " END WHERE session_id = ?", (session_id,))

    # ---- conversation (the latest checkpoint is the session's continuation state)
    def save_checkpoint(self, db, session_id: str, messages: list, last_execution_id=None) -> int:
        previous = db.execute("SELECT sequence, last_execution_id FROM checkpoints WHERE"
                              " session_id = ? ORDER BY sequence DESC LIMIT 1",
                              (session_id,)).fetchone()
        sequence = previous["sequence"] + 1 if previous else 1
        if last_execution_id is None:
            last_execution_id = previous["last_execution_id"] if previous else ""
        entries = [dict(r) for r in db.execute(
            "SELECT dedup_key, tool, failure_kind, count, last_execution_id FROM failure_table"
            " WHERE session_id = ? ORDER BY touched", (session_id,))]
        data = canonical_json({"format_version": 1, "session_id": session_id,
                               "sequence": sequence, "last_execution_id": last_execution_id,
                               "messages": messages, "failure_table": entries}).encode()
        db.execute("INSERT INTO checkpoints VALUES (?, ?, ?, ?, ?)",
                   (session_id, sequence, data, len(entries), last_execution_id))
        return sequence

    def append(self, db, session_id: str, entry: dict) -> int:
        return self.save_checkpoint(db, session_id, self.messages(session_id) + [entry])

    def fold(self, session_id: str, project: bool = False) -> list[str]:
        """Checkpoint the saved results of pending calls, in call order, once each."""
        with self.store as db:
            conversation = self.messages(session_id)
            folded, ids = [], []
            for call in pending_calls(conversation):
                execution_id = execution_id_for(session_id, call["tool_call_id"])
                op = self.op(execution_id)
                if op is None or op["stage"] != "recorded":
                    break  # later calls wait: tool messages keep the call order
                folded.append(tool_message(op))
                ids.append(execution_id)
            if folded:
                sequence = self.save_checkpoint(db, session_id, conversation + folded, ids[-1])
                for execution_id in ids:
                    db.execute("UPDATE operations SET checkpoint_sequence = ? WHERE"
                               " execution_id = ? AND checkpoint_sequence IS NULL",
                               (sequence, execution_id))
        if folded:
            self.world.emit("checkpoint_saved", session_id, ids[-1], sequence=sequence)
            if project:
                for execution_id in ids:
                    if self.op(execution_id)["delivery"] == "recorded":
                        self.project(execution_id)
        return ids

    # ---- the agent loop
    def drive(self, session_id: str) -> dict:
        for _ in range(1000):
            if self.session(session_id).cancelled:
                try:
                    self.settle_pending(session_id)
                except Deferred:
                    pass
                return self.end(session_id, "cancelled")
            self.fold(session_id, project=True)
            conversation = self.messages(session_id)
            pending = pending_calls(conversation)
            if pending:
                try:
                    if self.pipeline(session_id, pending[0]) == "awaiting_approval":
                        return self.end(session_id, "awaiting_approval")
                except Deferred:
                    return self.end(session_id, "deferred", persist=False)
                continue
            if conversation and conversation[-1]["role"] == "assistant" and \
                    not conversation[-1]["tool_calls"]:
                last = conversation[-1]
                status = "incomplete" if last["incomplete"] else "completed"
                return self.end(session_id, status, last["content"])
            status, error = self.ask_model(session_id, conversation)
            if status is None or (error is None and status == "cancelled"):
                return self.end(session_id, "cancelled")
            if error is not None:  # recorded; now let the very same exception out (M3)
                self.end(session_id, status, persist=False)
                raise error
            if status == "incomplete":
                return self.end(session_id, "incomplete", persist=False)
        return self.end(session_id, "incomplete")

    def settle_pending(self, session_id: str) -> str:
        while True:
            self.fold(session_id, project=True)
            pending = pending_calls(self.messages(session_id))
            if not pending:
                return "done"
            outcome = self.pipeline(session_id, pending[0])
            if outcome != "done":
                return outcome

    def end(self, session_id: str, status: str, text: str = "", persist: bool = True) -> dict:
        if persist:
            with self.store as db:
                db.execute("UPDATE sessions SET turn_status = ? WHERE session_id = ?",
                           (status, session_id))
        self.world.emit("turn_ended", session_id, status=status)
        return {"session_id": session_id, "status": status, "final_text": text}

    def ask_model(self, session_id: str, conversation: list):
        """One model request with one durable start and one durable end (M1-M5)."""
        self.world.failpoint("before_model_request", session_id)
        if self.session(session_id).cancelled:
            return None, None
        with self.store as db:
            (count,) = db.execute("SELECT COUNT(*) FROM model_requests WHERE session_id = ?",
                                  (session_id,)).fetchone()
            request_id = f"{session_id}:req-{count + 1}"
            db.execute("INSERT INTO model_requests (request_id, session_id) VALUES (?, ?)",
                       (request_id, session_id))
        self.world.emit("model_request_started", session_id, request_id=request_id)
        self.world.failpoint("after_model_request_started", session_id, request_id=request_id)
        text, calls, status, error = [], [], "cancelled", None
        if not self.session(session_id).cancelled:
            try:
                stream = self.world.wire.call("open_model_stream", request={
                    "request_id": request_id, "session_id": session_id,
                    "messages": conversation,
                    "tools": self.session(session_id).visible_tools()})
                while True:
                    chunk = self.world.wire.call("next_chunk", stream_id=stream)
                    if chunk["kind"] == "text":
                        text.append(chunk["text"])
                    elif chunk["kind"] == "tool_call":
                        calls.append(chunk["tool_call"])
                    else:
                        status = "completed" if chunk["kind"] == "end" else "incomplete"
                        break
            except PortError as exc:
                status = "cancelled" if exc.kind == "ModelStreamCancelled" else "failed"
                error = exc
        self.world.failpoint("after_model_stream_ended", session_id, request_id=request_id)
        text = "".join(text)
        with self.store as db:
            ended = db.execute(
                "UPDATE model_requests SET status = ?, partial_text = ?, end_events = 1"
                " WHERE request_id = ? AND status IS NULL",
                (status, "" if status == "completed" else text, request_id)).rowcount
            if ended and status == "completed":
                self.append(db, session_id, message("assistant", text, tool_calls=calls))
            elif ended and status == "incomplete" and text:  # kept, never taken as an answer
                self.append(db, session_id, message("assistant", text, incomplete=True))
            if ended and status != "completed":
                db.execute("UPDATE sessions SET turn_status = ? WHERE session_id = ?",
                           (status, session_id))
        if ended:
            self.world.emit("model_request_ended", session_id, request_id=request_id,
                            status=status)
        return status, error

    # ---- the operation pipeline (docs/lifecycle.md "The operation pipeline")
    def pipeline(self, session_id: str, call: dict) -> str:
        """Carry one call as far as it can go: "done", "awaiting_approval" (or Deferred)."""
        execution_id = self.prepare(session_id, call)
        fresh = False
        while True:
            op = self.op(execution_id)
            stage = op["stage"]
            if stage == "prepared":
                self.decide(op)
            elif stage == "decided" and op["permission"] == "allow":
                fresh = self.execute(op)
            elif stage == "decided" and op["permission"] == "deny":
                fresh = self.save_result(op, not_started(op), from_stage="decided")
            elif stage == "decided":
                self.open_wait(op)
            elif stage == "waiting":
                return "awaiting_approval"
            elif stage == "started":
                raise Deferred()
            else:
                self.deliver(op, fresh)
                return "done"

    def prepare(self, session_id: str, call: dict) -> str:
        execution_id = execution_id_for(session_id, call["tool_call_id"])
        session = self.session(session_id)
        args = call["args"]
        dedup_args = {k: v for k, v in args.items()
                      if not (session.is_bash(call["tool"]) and k == "description")}
        with self.store as db:
            prepared = db.execute(
                "INSERT OR IGNORE INTO operations (execution_id, session_id, tool_call_id, tool,"
                " args, args_digest, permission_version, dedup_key, stage, permission,"
                " decided_by, delivery) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'prepared', 'ask',"
                " 'default_ask', 'pending')",
                (execution_id, session_id, call["tool_call_id"], call["tool"],
                 canonical_json(args), args_digest(call["tool"], args), session.version,
                 args_digest(call["tool"], dedup_args))).rowcount
        if prepared:  # a second delivery finds the record and says nothing
            self.world.emit("operation_prepared", session_id, execution_id,
                            tool_call_id=call["tool_call_id"])
            self.world.failpoint("after_prepare", session_id, execution_id,
                                 call["tool_call_id"])
        return execution_id

    def decide(self, op) -> None:
        session = self.session(op["session_id"])
        permission, decided_by, reason, verdict, trigger = self.decision(session, op)
        risk_denial = verdict == "risk_deny" and decided_by == "classifier"
        key = (op["session_id"], session.version)
        with self.store as db:
            decided = db.execute(
                "UPDATE operations SET stage = 'decided', permission = ?, decided_by = ?,"
                " permission_version = ?, classifier_outcome = ?, wait_trigger = ?, reason = ?,"
                " start_mark = (SELECT COALESCE(MAX(start_order), 0) FROM operations)"
                " WHERE execution_id = ? AND stage = 'prepared'",
                (permission, decided_by, session.version, verdict, trigger, reason,
                 op["execution_id"])).rowcount
            if decided and risk_denial and db.execute(  # once per identity (L3.7)
                    "INSERT OR IGNORE INTO counted_denials VALUES (?, ?, ?)",
                    (*key, op["execution_id"])).rowcount:
                db.execute("INSERT OR IGNORE INTO denial_counters (session_id,"
                           " permission_version) VALUES (?, ?)", key)
                db.execute("UPDATE denial_counters SET consecutive = consecutive + 1,"
                           " cumulative = cumulative + 1 WHERE session_id = ? AND"
                           " permission_version = ?", key)
            if decided and verdict == "allow" and decided_by == "classifier":
                db.execute("UPDATE denial_counters SET consecutive = 0 WHERE session_id = ?"
                           " AND permission_version = ?", key)
        if not decided:
            return
        if verdict is not None:
            self.world.emit("classifier_reviewed", op["session_id"], op["execution_id"],
                            outcome=verdict)
        self.world.emit("permission_decided", op["session_id"], op["execution_id"],
                        permission=permission, decided_by=decided_by, reason=reason)
        self.world.failpoint("after_permission_decision", op["session_id"],
                             op["execution_id"], op["tool_call_id"])

    def decision(self, session: Session, op):
        """(permission, decided_by, reason, classifier outcome, fallback trigger); L2.1."""
        tool, args = op["tool"], json.loads(op["args"])
        if session.cancelled:
            return "deny", "cancellation", "the session was cancelled", None, ""
        fixed = session.fixed_decision(tool, args)
        if fixed:
            return (*fixed, None, "")
        limit = session.threshold("failure_repeat_limit", 2)
        spent = self.store.one("SELECT failures FROM repeat_budget WHERE session_id = ? AND"
                               " dedup_key = ? AND permission_version = ?",
                               session.id, op["dedup_key"], session.version)
        if spent is not None and spent["failures"] >= limit:
            return ("deny", "repeat_guard", f"the same call already failed {limit} times under"
                    " this permission version; change the arguments or the rules", None, "")
        ruled = session.rule_decision(tool, args)
        if ruled:
            return (*ruled, None, "")
        if session.config.get("mode", "default") != "auto":
            if session.can_answer:
                return "ask", "default_ask", f"no rule covers {tool}; asking the owner", None, ""
            return "deny", "default_deny", f"no rule allows {tool}; no one can approve", None, ""
        if session.can_answer:
            counts = self.store.one("SELECT * FROM denial_counters WHERE session_id = ? AND"
                                    " permission_version = ?", session.id, session.version)
            consecutive = counts is not None and counts["consecutive"] >= session.threshold(
                "consecutive_denials_max", 3)
            cumulative = counts is not None and counts["cumulative"] >= session.threshold(
                "cumulative_denials_max", 20)
            if consecutive or cumulative:
                trigger = "fallback_" + "_and_".join(
                    n for n, hit in (("consecutive", consecutive), ("cumulative", cumulative))
                    if hit)
                return ("ask", "classifier", "after repeated classifier denials the owner"
                        " decides this one", None, trigger)
        return self.review(session, op, tool, args)

    def review(self, session: Session, op, tool: str, args: dict):
        operation = canonical_json(args)  # complete, byte-identical, never truncated
        if len(operation) > session.threshold("classifier_input_chars_max", 20000):
            return ("deny", "classifier", "too large for the classifier; not run",
                    "no_verdict_oversize", "")
        description = args.get("description", "") if session.is_bash(tool) else ""
        request = {
            "session_id": session.id, "tool": tool, "operation": operation,
            "trusted_cwd": session.config.get("trusted_cwd", "/repo"),
            "permission_scope": session.config.get("permission_scope", "workspace-write"),
            "user_requirements": session.config.get("user_requirements", ""),
            "untrusted_description": description if isinstance(description, str)
            else canonical_json(description),
            "untrusted_context": ""}
        started = self.world.now()
        try:
            verdict = self.world.wire.call("review", request=request)
            outcome, why = verdict["outcome"], verdict.get("reason", "")
            if self.world.now() - started > session.threshold("classifier_timeout_s", 30.0):
                outcome = "timeout"  # a verdict slower than the limit is no verdict
        except PortError as exc:
            outcome, why = "service_error", str(exc)
        self.world.failpoint("during_classifier_review", session.id, op["execution_id"],
                             op["tool_call_id"])
        after = self.session(session.id)
        if after.cancelled:
            return ("deny", "cancellation", "cancelled during the classifier review",
                    "cancelled", "")
        if after.version != session.version:
            return ("deny", "revalidation", "the permission version changed during the"
                    " review; its verdict is void", outcome, "")
        if outcome == "allow":
            return "allow", "classifier", f"the classifier allowed it {why}".strip(), outcome, ""
        return ("deny", "classifier", f"classifier outcome {outcome} {why}; without an explicit"
                " allow it does not run", outcome, "")

    def open_wait(self, op) -> None:
        session = self.session(op["session_id"])
        if session.version != op["permission_version"] or session.fixed_decision(
                op["tool"], json.loads(op["args"])):
            # The rules changed at the decision's failpoint: that decision is void. It is
            # taken again; no wait is created for it, not even one withdrawn at once (L3.4).
            with self.store as db:
                db.execute("UPDATE operations SET stage = 'prepared', permission = 'ask',"
                           " decided_by = 'default_ask', reason = '', classifier_outcome ="
                           " NULL, wait_trigger = '' WHERE execution_id = ? AND stage ="
                           " 'decided' AND permission = 'ask'", (op["execution_id"],))
            return
        with self.store as db:
            if not db.execute("UPDATE operations SET stage = 'waiting' WHERE execution_id = ?"
                              " AND stage = 'decided' AND permission = 'ask'",
                              (op["execution_id"],)).rowcount:
                return
            (earlier,) = db.execute("SELECT COUNT(*) FROM waits WHERE execution_id = ?",
                                    (op["execution_id"],)).fetchone()
            wait_id = f"wait-{op['execution_id']}" + (f"-{earlier + 1}" if earlier else "")
            db.execute("INSERT INTO waits VALUES (?, ?, ?, ?, ?, ?, ?, 'pending', 0)",
                       (wait_id, op["session_id"], op["execution_id"], op["tool_call_id"],
                        op["reason"], op["wait_trigger"] or op["decided_by"],
                        op["permission_version"]))
            db.execute("UPDATE sessions SET turn_status = 'awaiting_approval'"
                       " WHERE session_id = ?", (op["session_id"],))
        self.world.emit("approval_wait_created", op["session_id"], op["execution_id"],
                        wait_id=wait_id)
        self.world.failpoint("after_wait_persisted", op["session_id"], op["execution_id"],
                             op["tool_call_id"])
        self.prompt(wait_id, with_failpoint=True)

    def prompt(self, wait_id: str, with_failpoint: bool) -> None:
        """Show a committed wait, unless the rules changed since it was asked (then it is
        withdrawn: refused when no approval could lift the rules, else decided again)."""
        wait = self.store.one("SELECT * FROM waits WHERE wait_id = ?", wait_id)
        if wait["status"] != "pending":  # answered meanwhile (a new message, elsewhere)
            return
        op = self.op(wait["execution_id"])
        session = self.session(op["session_id"])
        blocked = session.fixed_decision(op["tool"], json.loads(op["args"]))
        if blocked or session.version != wait["permission_version"]:
            with self.store as db:
                if db.execute("UPDATE waits SET status = 'rejected' WHERE wait_id = ? AND"
                              " status = 'pending'", (wait_id,)).rowcount:
                    if blocked:
                        db.execute("UPDATE operations SET stage = 'decided', permission ="
                                   " 'deny', decided_by = 'revalidation', reason = ? WHERE"
                                   " execution_id = ? AND stage = 'waiting'",
                                   (f"the rules changed before the approval was asked:"
                                    f" {blocked[2]}", op["execution_id"]))
                    else:
                        db.execute("UPDATE operations SET stage = 'prepared', permission ="
                                   " 'ask', decided_by = 'default_ask', reason = '',"
                                   " classifier_outcome = NULL, wait_trigger = '' WHERE"
                                   " execution_id = ? AND stage = 'waiting'",
                                   (op["execution_id"],))
                    # The turn goes on (a new decision): a crash from here must find it
                    # running, so recovery resumes it (L4.8).
                    db.execute("UPDATE sessions SET turn_status = 'running' WHERE"
                               " session_id = ?", (op["session_id"],))
            return
        self.world.wire.call("prompt_approval", prompt={
            "wait_id": wait_id, "session_id": op["session_id"],
            "execution_id": op["execution_id"], "tool_call_id": op["tool_call_id"],
            "tool": op["tool"], "args": json.loads(op["args"]), "reason": wait["reason"]})
        with self.store as db:
            db.execute("UPDATE waits SET prompted = 1 WHERE wait_id = ?", (wait_id,))
        if self.store.one("SELECT status FROM waits WHERE wait_id = ?", wait_id)["status"] \
                == "pending":
            self.project(op["execution_id"])
        if with_failpoint:
            self.world.failpoint("after_prompt", op["session_id"], op["execution_id"],
                                 op["tool_call_id"])

    def refusal(self, op, session: Session):
        """Revalidation right before the start: None, or (decided_by, reason)."""
        args = json.loads(op["args"])
        if session.cancelled:
            return "cancellation", "the session was cancelled before execution"
        if args_digest(op["tool"], args) != op["args_digest"]:
            return "revalidation", "the arguments no longer match their digest"
        if op["decided_by"] == "approval":
            wait = self.store.one("SELECT status FROM waits WHERE execution_id = ? ORDER BY"
                                  " rowid DESC LIMIT 1", op["execution_id"])
            if wait is None or wait["status"] != "approved":
                return "revalidation", "no approval is on record for this exact operation"
        if "expect_sha" in args and isinstance(args.get("path"), str):
            # The host cannot read files; it knows which operations it started. A non-read
            # call on the same path started since the decision voids the precondition.
            for other in self.store.all("SELECT tool, args FROM operations WHERE"
                                        " execution_id != ? AND start_order > ?",
                                        op["execution_id"], op["start_mark"]):
                if session.kind(other["tool"]) != "read" and \
                        json.loads(other["args"]).get("path") == args["path"]:
                    return "revalidation", (f"{args['path']} may have changed since the"
                                            " decision; the expect_sha precondition no longer"
                                            " holds; not executed")
        if session.version == op["permission_version"]:
            return None
        fixed = session.fixed_decision(op["tool"], args)
        if fixed:
            return fixed[1], fixed[2]
        ruled = session.rule_decision(op["tool"], args)
        if ruled and ruled[0] == "allow":
            return None
        return "revalidation", (f"the permission version changed from "
                                f"{op['permission_version']} to {session.version} after the"
                                " decision, which is therefore void; not executed")

    def refuse(self, op, decided_by: str, reason: str) -> None:
        version = self.session(op["session_id"]).version
        if op["decided_by"] == "approval":  # an approval is void once its version is gone
            version = op["permission_version"]
            decided_by = decided_by if decided_by == "cancellation" else "revalidation"
        with self.store as db:
            refused = db.execute(
                "UPDATE operations SET stage = 'decided', permission = 'deny', decided_by = ?,"
                " reason = ?, permission_version = ?, start_order = NULL,"
                " execution_started = 0 WHERE execution_id = ? AND stage = ?",
                (decided_by, reason, version, op["execution_id"], op["stage"])).rowcount
        if refused:
            self.world.emit("permission_decided", op["session_id"], op["execution_id"],
                            permission="deny", decided_by=decided_by, reason=reason)

    def rebind(self, db, op, session: Session) -> None:
        """An exact grant that still allows after a rule change: run under the new version."""
        if session.version != op["permission_version"]:
            db.execute("UPDATE operations SET permission_version = ?, decided_by ="
                       " 'exact_grant' WHERE execution_id = ? AND stage = ?",
                       (session.version, op["execution_id"], op["stage"]))

    def execute(self, op) -> bool:
        refusal = self.refusal(op, self.session(op["session_id"]))
        if refusal:
            self.refuse(op, *refusal)
            return False
        self.world.emit("revalidated", op["session_id"], op["execution_id"], passed=True)
        self.world.failpoint("after_revalidation", op["session_id"], op["execution_id"],
                             op["tool_call_id"])
        session = self.session(op["session_id"])
        op = self.op(op["execution_id"])
        refusal = self.refusal(op, session)  # the rules may have changed at the failpoint
        if refusal:
            self.refuse(op, *refusal)
            return False
        with self.store as db:
            self.rebind(db, op, session)
            claimed = db.execute(
                "UPDATE operations SET stage = 'started', execution_started = 1, start_order ="
                " (SELECT COALESCE(MAX(start_order), 0) + 1 FROM operations)"
                " WHERE execution_id = ? AND stage = 'decided' AND permission = 'allow'",
                (op["execution_id"],)).rowcount
            if claimed:  # an allowed operation runs: the denial streak is over
                db.execute("UPDATE denial_counters SET consecutive = 0 WHERE session_id = ?"
                           " AND permission_version = ?", (op["session_id"], session.version))
        if not claimed:
            return False
        self.world.emit("execution_started", op["session_id"], op["execution_id"])
        self.world.failpoint("after_start_recorded", op["session_id"], op["execution_id"],
                             op["tool_call_id"])
        op = self.op(op["execution_id"])
        session = self.session(op["session_id"])
        refusal = self.refusal(op, session)  # last look: a change at the failpoint stops it
        if refusal:
            self.refuse(op, *refusal)
            return False
        with self.store as db:
            self.rebind(db, op, session)
        op = self.op(op["execution_id"])
        result = self.invoke(op, session)
        self.world.failpoint("after_tool_returned", op["session_id"], op["execution_id"],
                             op["tool_call_id"])
        return self.save_result(op, result, from_stage="started")

    def invoke(self, op, session: Session) -> dict:
        """Call the tool; retry only what certainly did not run or is transient and
        idempotent, at most auto_retries_max times (L1.8)."""
        invocation = {"identity": {"execution_id": op["execution_id"],
                                   "tool_call_id": op["tool_call_id"],
                                   "args_digest": op["args_digest"],
                                   "permission_version": op["permission_version"]},
                      "session_id": op["session_id"], "tool": op["tool"],
                      "args": json.loads(op["args"]), "sandboxed": True}
        retries = session.threshold("auto_retries_max", 2)
        idempotent = session.tools.get(op["tool"], {}).get("idempotent", False)
        attempts, last_returned = 0, None  # the last attempt that ran: its result stands
        while True:
            attempts += 1
            try:
                r = self.world.wire.call("execute_tool", invocation=invocation)
            except PortError as exc:
                if exc.kind != "ToolUnavailable":  # the world broke mid-call: it may have run
                    return result("unknown", "unknown", True, True, attempts,
                                  f"the invocation broke ({exc.kind}: {exc}); effect unknown")
                if attempts - 1 < retries:
                    continue
                if last_returned is not None:  # an attempt ran: keep its output (L4.7)
                    output = last_returned.get("output", "")
                    return result("failed", "transient", True, False, attempts,
                                  f"the retry could not start: {exc}", output,
                                  result_digest(last_returned["status"], output))
                return result("not_started", "transient", False, False, attempts,
                              f"the tool could not be started, so it did not run: {exc}")
            last_returned = r
            if (r["status"] == "error" and r.get("error_kind") == "transient" and idempotent
                    and not r.get("escalation_requested") and attempts - 1 < retries):
                continue
            digest = result_digest(r["status"], r.get("output", ""))
            output = r.get("output", "")
            if r["status"] == "ok":  # structured status only, never the output text (X5)
                return result("succeeded", None, True, False, attempts, "", output, digest)
            if r.get("escalation_requested"):
                return result("failed", "permission_denied", True, False, attempts,
                              "the sandboxed attempt asked for more permission, which this"
                              " runtime does not grant", output, digest)
            if r.get("error_kind") == "unknown":
                return result("unknown", "unknown", True, True, attempts, "the tool could not"
                              " confirm what it did; reconcile before acting again",
                              output, digest)
            kind = r.get("error_kind") or "failed"
            return result("failed", kind, True, False, attempts, f"the tool failed ({kind})",
                          output, digest)

    def save_result(self, op, res: dict, from_stage: str) -> bool:
        """The authoritative result record, with the failure policy's bookkeeping."""
        session = self.session(op["session_id"])
        with self.store as db:
            if not db.execute(
                    "UPDATE operations SET stage = 'recorded', delivery = 'recorded',"
                    " has_result = 1, outcome = ?, failure_kind = ?, execution_started = ?,"
                    " reconcile = ?, result_digest = ?, reason = ?, output = ?, attempts = ?"
                    " WHERE execution_id = ? AND stage = ?",
                    (res["outcome"], res["failure_kind"], int(res["started"]),
                     int(res["reconcile"]), res["digest"], res["reason"] or op["reason"],
                     res["output"], res["attempts"], op["execution_id"],
                     from_stage)).rowcount:
                return False
            if res["failure_kind"] is not None:
                self.record_failure(db, op, res, session.version)
            if res["outcome"] == "succeeded":
                db.execute("DELETE FROM repeat_budget WHERE session_id = ? AND dedup_key = ?",
                           (op["session_id"], op["dedup_key"]))
        self.announce(op["session_id"], op["execution_id"])
        return True

    def record_failure(self, db, op, res: dict, version: int) -> None:
        if not db.execute("INSERT OR IGNORE INTO failure_events VALUES (?, ?)",
                          (op["execution_id"], op["session_id"])).rowcount:
            return
        budget = (res["outcome"] == "not_started" and res["failure_kind"] == "permission_denied"
                  and op["decided_by"] not in ("classifier", "cancellation", "revalidation")) or (
            res["outcome"] in ("failed", "unknown")
            and res["failure_kind"] in ("failed", "param_error", "unknown"))
        if budget:
            db.execute("INSERT INTO repeat_budget VALUES (?, ?, ?, 1) ON CONFLICT DO UPDATE"
                       " SET failures = failures + 1",
                       (op["session_id"], op["dedup_key"], version))
        (touched,) = db.execute("SELECT COALESCE(MAX(touched), 0) + 1 FROM failure_table"
                                " WHERE session_id = ?", (op["session_id"],)).fetchone()
        db.execute("INSERT INTO failure_table VALUES (?, ?, ?, ?, 1, ?, ?) ON CONFLICT DO"
                   " UPDATE SET failure_kind = excluded.failure_kind, count = count + 1,"
                   " last_execution_id = excluded.last_execution_id, touched = excluded.touched",
                   (op["session_id"], op["dedup_key"], op["tool"], res["failure_kind"],
                    op["execution_id"], touched))
        db.execute("DELETE FROM failure_table WHERE session_id = ? AND touched NOT IN (SELECT"
                   " touched FROM failure_table WHERE session_id = ? ORDER BY touched DESC"
                   " LIMIT ?)", (op["session_id"], op["session_id"], FAILURE_TABLE_CAPACITY))

    def announce(self, session_id: str, execution_id: str) -> None:
        op = self.op(execution_id)
        self.world.emit("result_saved", session_id, execution_id, outcome=op["outcome"],
                        failure_kind=op["failure_kind"], result_digest=op["result_digest"])
        if op["failure_kind"] is not None:
            self.world.emit("operation_failed", session_id, execution_id,
                            failure_kind=op["failure_kind"])
        if op["reconcile"]:
            self.world.emit("reconciliation_required", session_id, execution_id)

    def op_failpoint(self, name: str, op, contain: bool = True) -> bool:
        return self.world.failpoint(name, op["session_id"], op["execution_id"],
                                    op["tool_call_id"], contain=contain)

    def deliver(self, op, fresh: bool) -> None:
        if fresh:
            self.op_failpoint("after_result_saved", op)
            self.op_failpoint("during_diagnostics_write", op)  # display state: none kept
            try:
                self.op_failpoint("during_checkpoint_build", op, contain=False)
                self.fold(op["session_id"])
                checkpointed = True
            except PortError as exc:  # the result stays saved and deliverable (L4.4)
                self.world.emit("checkpoint_failed", op["session_id"], op["execution_id"],
                                error=f"{exc.kind}: {exc}")
                checkpointed = False
            if checkpointed:
                self.op_failpoint("after_checkpoint_saved", op)
        else:  # saved earlier (replay, restart): catch up without redoing anything
            self.fold(op["session_id"], project=True)
        if self.op(op["execution_id"])["delivery"] == "recorded":
            self.project(op["execution_id"], with_failpoint=fresh)

    def project(self, execution_id: str, with_failpoint: bool = False) -> None:
        op = self.op(execution_id)
        pending = self.store.one("SELECT 1 FROM waits WHERE execution_id = ? AND"
                                 " status = 'pending'", execution_id) is not None
        projection = view_of(op, pending)
        projection = {k: projection[k] for k in (
            "session_id", "execution_id", "tool_call_id", "permission", "outcome", "status",
            "reason", "recovery_actions")}
        try:
            self.world.wire.call("publish", projection=projection)
        except PortError as exc:  # the UI is display state: the record stands
            self.world.emit("runtime_fault", op["session_id"], execution_id,
                            location="projection", error=f"{exc.kind}: {exc}")
            return
        with self.store as db:
            db.execute("INSERT OR REPLACE INTO projections VALUES (?, ?, ?)",
                       (execution_id, op["session_id"], canonical_json(projection)))
            if op["stage"] == "recorded":
                db.execute("UPDATE operations SET delivery = 'projected' WHERE execution_id = ?"
                           " AND delivery = 'recorded'", (execution_id,))
        self.world.emit("projected", op["session_id"], execution_id, status=projection["status"])
        if with_failpoint:
            self.op_failpoint("after_projection", op)

    # ---- restart (docs/lifecycle.md "Recovery")
    def recover(self) -> dict:
        unknown = []
        for row in self.store.all("SELECT * FROM operations WHERE stage = 'started'"
                                  " ORDER BY rowid"):
            if self.save_result(row, result(
                    "unknown", "unknown", True, True, 1, "the start was recorded but no result"
                    " was saved before the process stopped; reconcile before acting again"),
                    from_stage="started"):
                unknown.append(row["execution_id"])
        with self.store as db:
            open_requests = db.execute("SELECT request_id, session_id FROM model_requests"
                                       " WHERE status IS NULL ORDER BY rowid").fetchall()
            db.execute("UPDATE model_requests SET status = 'incomplete', end_events = 1"
                       " WHERE status IS NULL")
        for row in open_requests:
            self.world.emit("model_request_ended", row["session_id"],
                            request_id=row["request_id"], status="incomplete")
        completed = []
        for row in self.store.all("SELECT DISTINCT session_id FROM operations WHERE stage ="
                                  " 'recorded' AND checkpoint_sequence IS NULL"):
            completed += self.fold(row["session_id"])
        replayed = [row["execution_id"] for row in self.store.all(
            "SELECT execution_id FROM operations WHERE stage = 'recorded' AND"
            " delivery = 'recorded' ORDER BY rowid")]
        for execution_id in replayed:
            self.project(execution_id)
        for wait in self.store.all("SELECT wait_id FROM waits WHERE status = 'pending' AND"
                                   " prompted = 0 ORDER BY rowid"):
            self.prompt(wait["wait_id"], with_failpoint=False)
        running = [row["session_id"] for row in self.store.all(
            "SELECT session_id FROM sessions WHERE turn_status = 'running' ORDER BY rowid")]
        for session_id in running:
            self.drive(session_id)
        # A cancelled turn's calls are recorded not executed, never left undecided: the loop
        # does it when it sees the cancellation, recovery when a crash came first.
        for row in self.store.all("SELECT session_id FROM sessions WHERE cancelled = 1 AND"
                                  " turn_status != 'running' ORDER BY rowid"):
            self.settle_pending(row["session_id"])
        return {"results_completed": completed, "projections_replayed": replayed,
                "reconciliation_required": unknown, "turns_resumed": running}


def message(role: str, content: str = "", tool_call_id: str = "", tool_calls=(),
            outcome=None, failure_kind=None, incomplete: bool = False) -> dict:
    return {"role": role, "content": content, "tool_call_id": tool_call_id,
            "tool_calls": list(tool_calls), "outcome": outcome, "failure_kind": failure_kind,
            "incomplete": incomplete}


def tool_message(op) -> dict:
    """The host's result as the model reads it (X3): status fields plus output or reason."""
    if op["outcome"] == "not_started":
        content = f"not executed: {op['reason']}"
    elif op["outcome"] == "unknown":
        content = f"outcome unknown, reconciliation required: {op['reason']}"
    elif op["outcome"] == "failed":
        content = "\n".join(part for part in (op["output"], op["reason"]) if part)
    else:
        content = op["output"]
    return message("tool", content, op["tool_call_id"], outcome=op["outcome"],
                   failure_kind=op["failure_kind"])


def pending_calls(conversation: list) -> list:
    """Calls of the last assistant message that no tool message after it answers yet."""
    for index in range(len(conversation) - 1, -1, -1):
        if conversation[index]["role"] == "assistant":
            later = conversation[index + 1:]
            if any(m["role"] == "user" for m in later):
                return []
            answered = {m["tool_call_id"] for m in later if m["role"] == "tool"}
            pending, seen = [], set()
            for call in conversation[index]["tool_calls"]:
                if call["tool_call_id"] not in answered | seen:
                    pending.append(call)
                    seen.add(call["tool_call_id"])
            return pending
    return []


def result(outcome, failure_kind, started, reconcile, attempts, reason, output="", digest=None):
    return {"outcome": outcome, "failure_kind": failure_kind, "started": started,
            "reconcile": reconcile, "attempts": attempts, "reason": reason, "output": output,
            "digest": digest}


def not_started(op) -> dict:
    cancelled = op["decided_by"] == "cancellation"
    return result("not_started", None if cancelled else "permission_denied", False, False, 0,
                  op["reason"])


# --------------------------------------------------------------------------- 5. inspect


def view_of(op, wait_pending: bool) -> dict:
    """One OperationView (the projection's fields are a subset of it)."""
    outcome = op["outcome"] if op["has_result"] else "not_started"
    failure_kind = op["failure_kind"] if op["has_result"] else None
    status, actions = projection_of(op["permission"], outcome, op["decided_by"], failure_kind,
                                    bool(op["reconcile"]), wait_pending)
    return {
        "session_id": op["session_id"], "execution_id": op["execution_id"],
        "tool_call_id": op["tool_call_id"], "status": status,
        "identity": {"execution_id": op["execution_id"], "tool_call_id": op["tool_call_id"],
                     "args_digest": op["args_digest"],
                     "permission_version": op["permission_version"]},
        "tool": op["tool"], "args": json.loads(op["args"]), "dedup_key": op["dedup_key"],
        "permission": op["permission"], "decided_by": op["decided_by"], "outcome": outcome,
        "delivery": op["delivery"], "execution_started": bool(op["execution_started"]),
        "failure_kind": failure_kind, "reason": op["reason"], "recovery_actions": actions,
        "reconciliation_required": bool(op["reconcile"]),
        "classifier_outcome": op["classifier_outcome"], "result_digest": op["result_digest"],
        "attempts": op["attempts"] if op["has_result"] else int(op["stage"] == "started"),
    }


def store_path(data_dir: str) -> str:
    return os.path.join(data_dir, "minimal.sqlite3")


def empty_observation() -> dict:
    return {"sessions": [], "operations": [], "approval_waits": [], "denial_counters": [],
            "failure_table": [], "checkpoints": [], "projections": [], "model_requests": [],
            "failure_events_logged": 0, "result_records": 0}


def read_only(path: str) -> sqlite3.Connection:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    db.row_factory = sqlite3.Row
    return db


def inspect(data_dir: str) -> dict:
    if not os.path.exists(store_path(data_dir)):
        return empty_observation()
    db = read_only(store_path(data_dir))
    try:
        return observe(db)
    finally:
        db.close()


class Inspector:
    """``inspect_since`` (docs/protocol.md, "Unchanged readings"): about half of all readings
    find the store as the previous one did, and then answer ``null`` instead of the whole
    Observation. One read-only connection per data dir is kept while the path names the same
    file; SQLite's ``data_version`` moves whenever another connection commits, so an
    unmoved one means nothing changed since the reading it was taken with."""

    KEPT = 8  # data dirs with an open connection; the oldest is closed past it

    def __init__(self) -> None:
        self.kept: dict[str, dict] = {}  # data dir -> {db, file, version, token}
        self.readings = 0

    def connection(self, data_dir: str):
        try:
            stat = os.stat(store_path(data_dir))
        except FileNotFoundError:
            stat = None
        kept = self.kept.get(data_dir)
        file = None if stat is None else (stat.st_dev, stat.st_ino)
        if kept is not None and kept["file"] != file:  # removed, or another file there now
            self.kept.pop(data_dir)["db"].close()
            kept = None
        if kept is None and file is not None:
            if len(self.kept) >= self.KEPT:
                self.kept.pop(next(iter(self.kept)))["db"].close()
            kept = self.kept[data_dir] = {"db": read_only(store_path(data_dir)), "file": file,
                                          "version": None, "token": ""}
        return kept

    def inspect_since(self, data_dir: str, since: str) -> dict:
        kept = self.connection(data_dir)
        self.readings += 1
        if kept is None:
            return {"reading": str(self.readings), "observation": empty_observation()}
        # Read before the snapshot: a commit in between makes the next reading a full one.
        version = kept["db"].execute("PRAGMA data_version").fetchone()[0]
        if since and since == kept["token"] and version == kept["version"]:
            return {"reading": since, "observation": None}
        observation = observe(kept["db"])
        kept["version"], kept["token"] = version, str(self.readings)
        return {"reading": kept["token"], "observation": observation}


def observe(db: sqlite3.Connection) -> dict:
    """The Observation of the store behind ``db``, in one read transaction."""
    empty = empty_observation()
    db.execute("BEGIN")  # one consistent snapshot of every table
    try:
        if db.execute("SELECT 1 FROM sqlite_master WHERE name = 'model_requests'").fetchone() \
                is None:
            return empty
        rows = lambda sql: db.execute(sql).fetchall()  # noqa: E731
        pending = {r["execution_id"] for r in rows("SELECT execution_id FROM waits"
                                                   " WHERE status = 'pending'")}
        operations = []
        for op in rows("SELECT * FROM operations ORDER BY rowid"):
            view = view_of(op, op["execution_id"] in pending)
            for key in ("execution_id", "tool_call_id", "status"):
                del view[key]
            operations.append(view)
        return {
            "sessions": [{"session_id": s["session_id"], "turn_status": s["turn_status"],
                          "permission_version": s["permission_version"],
                          "mode": json.loads(s["config"]).get("mode", "default"),
                          "interactive": json.loads(s["config"]).get("interactive", True)}
                         for s in rows("SELECT * FROM sessions ORDER BY rowid")],
            "operations": operations,
            "approval_waits": [
                {"wait_id": w["wait_id"], "session_id": w["session_id"],
                 "execution_id": w["execution_id"], "tool_call_id": w["tool_call_id"],
                 "reason": w["reason"], "status": w["status"],
                 "applied": w["status"] != "pending" and w["stage"] == "recorded"}
                for w in rows("SELECT waits.*, operations.stage FROM waits JOIN operations"
                              " USING (execution_id) ORDER BY waits.rowid")],
            "denial_counters": [dict(r) for r in rows("SELECT * FROM denial_counters"
                                                      " ORDER BY rowid")],
            "failure_table": [dict(r) for r in rows(
                "SELECT session_id, dedup_key, tool, failure_kind, count, last_execution_id"
                " FROM failure_table ORDER BY rowid")],
            "checkpoints": [
                {"session_id": c["session_id"], "format_version": 1, "sequence": c["sequence"],
                 "failure_entries": c["failure_entries"], "size_bytes": len(c["data"]),
                 "last_execution_id": c["last_execution_id"]}
                for c in rows("SELECT * FROM checkpoints ORDER BY rowid")],
            "projections": [json.loads(p["projection"])
                            for p in rows("SELECT projection FROM projections ORDER BY rowid")],
            "model_requests": [
                {"request_id": m["request_id"], "session_id": m["session_id"],
                 "start_events": 1, "end_events": m["end_events"], "status": m["status"],
                 "partial_text": m["partial_text"], "incomplete": m["status"] == "incomplete"}
                for m in rows("SELECT * FROM model_requests ORDER BY rowid")],
            "failure_events_logged": db.execute("SELECT COUNT(*) FROM failure_events")
            .fetchone()[0],
            "result_records": db.execute("SELECT COUNT(*) FROM operations WHERE has_result")
            .fetchone()[0],
        }
    finally:
        db.execute("COMMIT")  # ends the read: the writers' checkpoints are not held back


# --------------------------------------------------------------------------- 6. the server


def handshake(fork_server: bool = False) -> dict:
    answer = {"protocol_version": 1, "info": {"name": NAME, "version": VERSION,
                                              "features": FEATURES, "checkpoint_fixtures": []},
              "inspect_since": True}
    if fork_server:
        answer["fork_server"] = True
    return answer


def serve(rfile, wfile) -> int:
    """One runtime instance: ``initialize``, ``open``, driver requests, ``shutdown``."""
    wire = Wire(rfile, wfile)
    world, state, inspector = World(wire), {}, Inspector()

    def runtime() -> Runtime:
        if "runtime" not in state:
            raise RuntimeError("no runtime is open; send open first")
        return state["runtime"]

    def do_open(data_dir):
        state["runtime"] = Runtime(data_dir, world)

    def do_close():
        state.pop("runtime").close()

    wire.handlers = {
        "initialize": lambda protocol_version, contract_version: handshake(),
        "open": do_open,
        "open_session": lambda config: runtime().open_session(config),
        "run_turn": lambda session_id, user_text: runtime().run_turn(session_id, user_text),
        "answer_approval": lambda wait_id, approve: runtime().answer_approval(wait_id, approve),
        "update_rules": lambda session_id, rules, permission_version:
            runtime().update_rules(session_id, rules, permission_version),
        "cancel": lambda session_id: runtime().cancel(session_id),
        "recover": lambda: runtime().recover(),
        "close": do_close,
        "inspect": inspect,
        "inspect_since": inspector.inspect_since,
        "shutdown": lambda: None,
    }
    wire.serve()
    return 0


FORK_FD_ENV, CHILD_MARK_ENV = "LIFECYCLE_HARNESS_FORK_FD", "LIFECYCLE_HARNESS_CHILD"
PROTOCOL_FD, REPLY_FD = 3, 4  # an instance's protocol output, and its reply socket at start


def fork_socket():
    """The socket the harness offers fork requests on, or None (then we are an instance).
    The variable is removed either way: nothing this process starts may see it."""
    text = os.environ.pop(FORK_FD_ENV, None)
    if text is None or not hasattr(socket, "recv_fds"):
        return None
    try:
        sock = socket.socket(fileno=int(text))
    except (ValueError, OSError) as exc:
        sys.stderr.write(f"{FORK_FD_ENV}={text!r} is no socket ({exc}); no fork server\n")
        return None
    if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_SEQPACKET:
        sock.detach()
        return None
    return sock


def send_datagram(sock, **fields) -> None:
    try:
        sock.send(json.dumps(fields).encode("utf-8"))
    except OSError:
        pass  # the requester is gone: nobody is left to tell


class ForkServer:
    """The template: answers ``initialize`` and ``shutdown`` on stdin, forks one instance per
    request on the fork socket, reaps each and reports its exit status. It stays
    single-threaded (forking with other threads alive would copy their locks mid-use)."""

    def __init__(self, sock, protocol_out) -> None:
        self.sock, self.wire = sock, Wire(None, protocol_out)
        self.replies: dict[int, socket.socket] = {}  # live instance pid -> its reply socket
        self.initialized = False

    def run(self) -> int:
        signal.signal(signal.SIGCHLD, self.reap)
        gc.freeze()  # what exists now is shared by every fork; no collection copies it
        pending = b""
        while True:
            waiting = [0] + ([self.sock] if self.sock is not None else [])
            ready = select.select(waiting, [], [])[0]
            if 0 in ready:
                chunk = os.read(0, 65_536)
                if not chunk:
                    return 0  # the harness is gone; the instances have pipes of their own
                pending += chunk
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    if line.strip() and self.answer(json.loads(line)) == "shutdown":
                        return 0
            elif self.sock is not None:
                self.fork_one()

    def answer(self, message: dict) -> str:
        method = message.get("method")
        if method == "initialize":
            self.initialized = True
            self.wire.send({"jsonrpc": "2.0", "id": message["id"], "result": handshake(True)})
        elif method == "shutdown":
            self.wire.send({"jsonrpc": "2.0", "id": message["id"], "result": None})
        else:
            self.wire.send({"jsonrpc": "2.0", "id": message.get("id"), "error": {
                "code": -32002, "message": "this process is a fork template: it answers "
                "initialize and shutdown, and forks instances on its fork socket"}})
        return method

    def fork_one(self) -> None:
        try:
            data, fds, _, _ = socket.recv_fds(self.sock, 4096, 4)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data, fds = b"", []
        if not data and not fds:  # every harness end is closed: no more requests
            self.sock.close()
            self.sock = None
            return
        if len(fds) != 4:
            for fd in fds:
                os.close(fd)
            return  # no reply socket to answer on
        reply = socket.socket(fileno=fds[3])
        reply.setblocking(False)
        try:
            mark = json.loads(data)["mark"]
            if not isinstance(mark, str) or not mark or "=" in mark or "\0" in mark:
                raise ValueError(f"the mark must be non-empty text without = or NUL: {mark!r}")
            if not self.initialized:
                raise ValueError("send initialize on stdin before the first fork request")
        except (ValueError, KeyError, TypeError) as exc:
            send_datagram(reply, error=f"bad fork request: {exc}")
            reply.close()
            for fd in fds[:3]:
                os.close(fd)
            return
        sys.stderr.flush()
        # Registered before SIGCHLD may reap it: the signal waits until the pid is known.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
        try:
            try:
                pid = os.fork()
            except OSError as exc:
                send_datagram(reply, error=f"fork failed: {exc}")
                reply.close()
                pid = -1
            if pid == 0:
                self.become_instance(fds, mark)  # never returns
            if pid > 0:
                self.replies[pid] = reply
        finally:
            for fd in fds[:3]:  # the instance's pipes: the template must not hold them
                os.close(fd)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})

    def reap(self, *_) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            reply = self.replies.pop(pid, None)
            if reply is not None:
                send_datagram(reply, pid=pid, exit_status=os.waitstatus_to_exitcode(status))
                reply.close()

    @staticmethod
    def become_instance(fds: list, mark: str) -> None:
        """In the new process: leave the template's session, take the request's pipes as
        0, 1 and 2 (the protocol's output on 3, 1 pointing at stderr, as in main), close
        everything else of the template's, report our pid, serve, and exit."""
        code = 1
        try:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
            os.setsid()
            stdin_r, stdout_w, stderr_w, reply = (fcntl.fcntl(fd, fcntl.F_DUPFD, 100)
                                                  for fd in fds)  # out of the way first
            for fd, target in ((stdin_r, 0), (stderr_w, 1), (stderr_w, 2),
                               (stdout_w, PROTOCOL_FD), (reply, REPLY_FD)):
                os.dup2(fd, target)
            os.closerange(REPLY_FD + 1, os.sysconf("SC_OPEN_MAX"))
            os.environ[CHILD_MARK_ENV] = mark
            os.write(REPLY_FD, json.dumps({"pid": os.getpid()}).encode("utf-8"))
            os.close(REPLY_FD)
            code = serve(os.fdopen(0, "rb"), os.fdopen(PROTOCOL_FD, "wb"))
        except BaseException:  # noqa: BLE001 - reported like an uncaught exception
            traceback.print_exc()
        finally:
            sys.stderr.flush()
            os._exit(code)  # never run anything of the template's


def main() -> int:
    protocol_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a stray print goes to stderr, never into the protocol stream
    sock = fork_socket()
    if sock is not None:
        return ForkServer(sock, protocol_out).run()
    return serve(sys.stdin.buffer, protocol_out)


if __name__ == "__main__":
    sys.exit(main())
