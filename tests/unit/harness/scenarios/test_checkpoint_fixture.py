"""The harness's own reader of checkpoint fixtures: documented layouts, or None."""

from __future__ import annotations

import json
from pathlib import Path

from harness.scenarios.checkpoint_fixture import read_fixture

FIXTURES = Path(__file__).resolve().parents[4] / "reference_impl" / "fixtures" / "checkpoints"


def test_reads_the_reference_v1_and_v2_fixtures_like_their_sidecars():
    for name, entries in (("v1_basic", 0), ("v2_with_failures", 18)):
        content = read_fixture((FIXTURES / f"{name}.json").read_bytes())
        sidecar = json.loads((FIXTURES / f"{name}.expect.json").read_text())["messages"]
        assert len(content["failure_entries"]) == entries
        assert [(m["role"], m["content"], m["tool_call_id"], m["outcome"], m["failure_kind"])
                for m in content["messages"]] == \
            [(m["role"], m["content"], m["tool_call_id"], m["outcome"], m["failure_kind"]) for m in sidecar]
    v2 = read_fixture((FIXTURES / "v2_with_failures.json").read_bytes())
    assert v2["format_version"] == 2
    assert v2["failure_entries"][-1] == {
        "dedup_key": "sha256:" + "0" * 62 + "11", "tool": "Bash", "failure_kind": "failed", "count": 3,
        "last_execution_id": "ex-legacy00000017"}


def test_reads_the_current_layout():
    data = {"format_version": 3, "messages": [{"role": "user", "content": "hi"}],
            "failure_table": [{"dedup_key": "k", "tool": "t", "failure_kind": "param_error",
                               "count": 2, "last_execution_id": "ex-1"}]}
    content = read_fixture(json.dumps(data).encode())
    assert content["format_version"] == 3 and content["messages"][0]["content"] == "hi"
    assert content["failure_entries"] == [{"dedup_key": "k", "tool": "t", "failure_kind": "param_error",
                                           "count": 2, "last_execution_id": "ex-1"}]


def test_anything_else_is_none_never_an_exception():
    for data in (b"\xff\xfe", b"[1, 2]", b'{"v": 9}', b'{"v": 1, "history": [["robot", "x"]]}',
                 b'{"messages": [{"role": "user"}], "failure_table": [{"tool": 3}]}', b"not json"):
        assert read_fixture(data) is None
