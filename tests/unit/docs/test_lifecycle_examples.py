"""The behavioural examples of the docs stay true: each is recomputed with the harness.

docs/lifecycle.md and docs/contract.md hold two kinds of fenced examples besides
contract.md's ``contract-example`` blocks (tests/unit/docs/test_contract_doc.py):

* ``lifecycle-example rule_match``: a JSON object ``{"rule", "tool", "args", "matches"}``:
  the harness's rule matching (the one its criteria judge decisions with) and the
  reference's must both say ``matches``;
* ``lifecycle-example scenario``: a scenario file (docs/scenarios.md) plus an ``[expect]``
  table. The scenario is loaded by the harness's loader, run on the reference in process,
  judged by every criterion (none may fail, the run must complete), and the expectations
  are compared with what happened:

  - ``[[expect.operations]]``: ``call`` (a tool-call id) and any ``OperationView`` field
    (``permission_version`` is the identity's; ``"null"`` stands for null), read from the
    store's final reading;
  - ``[[expect.waits]]``: ``call``, and ``status``/``applied``, of every wait of that call in
    the final reading, oldest first (``statuses = [...]``) or of the last one (``status``);
  - ``[[expect.sessions]]``: ``session`` and ``turn_status`` in the final reading;
  - ``[[expect.turn_ended]]``: ``session`` and the ``statuses`` of its ``turn_ended`` events,
    in order;
  - ``[[expect.published]]``: ``call`` and the ``statuses`` of every projection the UI
    received for it, in order;
  - ``[[expect.prompts]]``: ``call`` and how many approval prompts the world showed for it
    (``shown``);
  - ``[[expect.ran]]``: ``call`` and how many times the world's tool ran it (``times``,
    ledger rows).

A page whose example says what the harness or the reference does not do fails here.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

import reference_impl
from harness import contract as c
from harness.criteria import facts, trace_readings
from harness.criteria.base import Status
from harness.running.runner import run_scenario
from harness.running.suite import default_criteria, evaluate
from harness.scenarios.loader import parse
from harness.trace.record import Kind, Trace
from reference_impl import permissions

ROOT = Path(__file__).resolve().parents[3]
PAGES = ("docs/lifecycle.md", "docs/contract.md")
FENCE = re.compile(r"^```lifecycle-example (\w+)\n(.*?)^```", re.M | re.S)


def _blocks(kind: str) -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        text = (ROOT / page).read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            if match.group(1) == kind:
                found.append((page, match.group(2)))
    return found


RULE_MATCHES = _blocks("rule_match")
SCENARIOS = _blocks("scenario")


def test_the_pages_hold_the_examples_this_test_knows():
    kinds = {m.group(1) for page in PAGES
             for m in FENCE.finditer((ROOT / page).read_text(encoding="utf-8"))}
    assert kinds == {"rule_match", "scenario"}
    assert len(RULE_MATCHES) >= 6 and len(SCENARIOS) >= 8


@pytest.mark.parametrize("page, body", RULE_MATCHES,
                         ids=[f"{p}:{i}" for i, (p, _) in enumerate(RULE_MATCHES)])
def test_rule_matching_is_what_the_page_says(page, body):
    example = json.loads(body)
    rule = c.from_json(c.Rule, example["rule"])
    tool, args = example["tool"], example["args"]
    assert facts.rule_matches(rule, tool, args) is example["matches"]
    assert trace_readings.rule_matches(rule, tool, args) is example["matches"]
    assert permissions.rule_matches(rule, tool, args) is example["matches"]  # the reference


def _run(body: str) -> tuple[dict[str, Any], Trace]:
    data = tomllib.loads(body)
    expect = data.pop("expect")
    scenario = parse(data, "docs example")
    trace = run_scenario(reference_impl.implementation(), scenario, 0).trace
    return expect, trace


def _final(trace: Trace) -> c.Observation:
    final = trace.final_observation()
    assert final is not None
    return final


def _operation(observation: c.Observation, call: str) -> c.OperationView:
    op = observation.operation(call)
    assert op is not None, f"no operation {call} in the store"
    return op


@pytest.mark.parametrize("page, body", SCENARIOS,
                         ids=[tomllib.loads(b).get("id", str(i)) for i, (_, b) in enumerate(SCENARIOS)])
def test_a_scenario_example_does_what_the_page_says(page, body):
    expect, trace = _run(body)
    assert trace.completed, trace.error
    failed = [v for v in evaluate(default_criteria(), trace) if v.status is Status.FAIL]
    assert not failed, [(v.criterion_id, [e.note for e in v.evidence][:2]) for v in failed]
    final = _final(trace)
    for want in expect.get("operations", ()):
        op = _operation(final, want["call"])
        for name, value in want.items():
            if name == "call":
                continue
            got = (op.identity.permission_version if name == "permission_version"
                   else getattr(op, name))
            got = got.value if hasattr(got, "value") else got
            got = [a.value for a in got] if isinstance(got, tuple) else got
            value = None if value == "null" else value  # TOML has no null
            assert got == value, (want["call"], name, got, value)
    for want in expect.get("waits", ()):
        op = _operation(final, want["call"])
        waits = [w for w in final.approval_waits
                 if w.execution_id == op.identity.execution_id]
        assert waits, f"no wait of {want['call']}"
        if "statuses" in want:
            assert [w.status.value for w in waits] == want["statuses"], want
        if "status" in want:
            assert waits[-1].status.value == want["status"], want
        if "applied" in want:
            assert waits[-1].applied is want["applied"], want
    for want in expect.get("sessions", ()):
        view = next(v for v in final.sessions if v.session_id == want["session"])
        assert view.turn_status.value == want["turn_status"], want
    for want in expect.get("turn_ended", ()):
        statuses = [payload["data"]["status"] for _, payload in trace.lifecycle_events()
                    if payload["type"] == "turn_ended"
                    and payload["session_id"] == want["session"]]
        assert statuses == want["statuses"], want
    for want in expect.get("published", ()):
        statuses = [e.data["projection"]["status"] for e in trace.of_kind(Kind.UI_PUBLISH)
                    if e.data["projection"]["tool_call_id"] == want["call"]]
        assert statuses == want["statuses"], want
    for want in expect.get("prompts", ()):
        shown = [e for e in trace.of_kind(Kind.APPROVAL_PROMPT)
                 if e.data.get("tool_call_id") == want["call"]]
        assert len(shown) == want["shown"], want
    for want in expect.get("ran", ()):
        rows = [e for e in trace.ledger() if e.data.get("tool_call_id") == want["call"]]
        assert len(rows) == want["times"], want
