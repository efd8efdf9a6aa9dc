"""The harness's own reading of a checkpoint fixture it passes to ``load_checkpoint`` (L1.6).

An old checkpoint must keep its conversation and its recent-failure entries. To judge that
from the fixture's content rather than from an expectation file the implementation ships,
the runner reads the very bytes it passes and records what it found in the driver call
(``fixture_content``). Guarantees: :func:`read_fixture` is pure, never raises, and returns
``None`` for bytes in no documented layout (the harness then falls back to the fixture's
``.expect.json`` sidecar, as before). Documented layouts (docs/scenarios.md), JSON objects:

* current: ``{"messages": [Message JSON], "failure_table": [{"dedup_key", "tool",
  "failure_kind", "count", "last_execution_id"}]}`` (``format_version`` optional);
* version 2: ``{"version": 2, "turns": [{"role", "text", "calls": [{"id", "name",
  "arguments"}], "call_id", "status", "error", "partial"}], "recent_failures": [{"key",
  "tool", "kind", "count", "exec"}]}``;
* version 1: ``{"v": 1, "history": [[role, text], ...]}`` (no failure entries).

Messages come out in the shape criteria compare with model requests (role, content,
tool_call_id, tool_calls [{tool_call_id, tool, args}], outcome, failure_kind); failure entries
as ``{dedup_key, tool, failure_kind, count, last_execution_id}``, oldest first.
"""

from __future__ import annotations

import json
from typing import Any

ROLES = ("user", "assistant", "tool")


def read_fixture(data: bytes) -> dict[str, Any] | None:
    """``{"format_version", "messages", "failure_entries"}`` or None when unreadable."""
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(document, dict):
        return None
    try:
        if isinstance(document.get("messages"), list):
            return _current(document)
        if document.get("version") == 2 and isinstance(document.get("turns"), list):
            return _v2(document)
        if document.get("v") == 1 and isinstance(document.get("history"), list):
            return _v1(document)
    except (TypeError, ValueError, KeyError, AttributeError):
        return None
    return None


def _message(role: Any, content: Any, tool_call_id: Any = "", tool_calls: Any = (),
             outcome: Any = None, failure_kind: Any = None) -> dict[str, Any]:
    if role not in ROLES or not isinstance(content, str):
        raise ValueError(f"not a message: {role!r}")
    return {"role": role, "content": content, "tool_call_id": str(tool_call_id or ""),
            "tool_calls": list(tool_calls), "outcome": outcome or None,
            "failure_kind": failure_kind or None}


def _entry(dedup_key: Any, tool: Any, kind: Any, count: Any, execution_id: Any) -> dict[str, Any]:
    if not isinstance(dedup_key, str) or not isinstance(tool, str):
        raise ValueError("not a failure entry")
    return {"dedup_key": dedup_key, "tool": tool, "failure_kind": str(kind or "failed"),
            "count": int(count or 1), "last_execution_id": str(execution_id or "")}


def _current(document: dict[str, Any]) -> dict[str, Any]:
    messages = [
        _message(m["role"], m.get("content", ""), m.get("tool_call_id"),
                 [{"tool_call_id": c["tool_call_id"], "tool": c.get("tool"), "args": c.get("args")}
                  for c in m.get("tool_calls") or ()],
                 m.get("outcome"), m.get("failure_kind"))
        for m in document["messages"]
    ]
    entries = [
        _entry(e["dedup_key"], e["tool"], e.get("failure_kind"), e.get("count"), e.get("last_execution_id"))
        for e in document.get("failure_table") or ()
    ]
    version = document.get("format_version")
    return {"format_version": version if isinstance(version, int) else None,
            "messages": messages, "failure_entries": entries}


def _v2(document: dict[str, Any]) -> dict[str, Any]:
    messages = [
        _message(t["role"], t.get("text", ""), t.get("call_id"),
                 [{"tool_call_id": c["id"], "tool": c.get("name"), "args": c.get("arguments")}
                  for c in t.get("calls") or ()],
                 t.get("status"), t.get("error"))
        for t in document["turns"]
    ]
    entries = [
        _entry(e["key"], e["tool"], e.get("kind"), e.get("count"), e.get("exec"))
        for e in document.get("recent_failures") or ()
    ]
    return {"format_version": 2, "messages": messages, "failure_entries": entries}


def _v1(document: dict[str, Any]) -> dict[str, Any]:
    messages = []
    for pair in document["history"]:
        if not (isinstance(pair, list) and len(pair) == 2):
            raise ValueError("history entries are [role, text]")
        messages.append(_message(pair[0], pair[1]))
    return {"format_version": 1, "messages": messages, "failure_entries": []}
