"""Shared by the end-to-end tests of the real CLIs (tests/unit/harness/clis/test_*_e2e.py):
load a CLI or skip with its npm install command, run one bundled (or clis/scenarios/)
scenario through the suite, and read what the world saw.

Each case asserts on the world's facts (ledger rows, prompts, requests) and on the criteria
judged from outside; every other criterion must be ``not_applicable`` (the black-box
reason) or ``not_selected``. What each CLI did is recorded in docs/real-systems.md; these
tests keep that page true.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness import clis
from harness.criteria.outside_view import OUTSIDE
from harness.running.runner import run_scenario
from harness.running.suite import run_suite
from harness.scenarios.loader import discover
from harness.trace.record import Kind

ROOT = Path(__file__).resolve().parents[3]
CLI_SCENARIOS = Path(__file__).resolve().parent / "clis" / "scenarios"


def load_or_skip(name: str) -> Any:
    info = next(i for i in clis.available() if i.name == name)
    if not info.installed:
        pytest.skip(info.missing_reason)
    return clis.load(name)


def scenario(relative: str, variant: str = "") -> Any:
    base = CLI_SCENARIOS if relative.startswith("cli/") else ROOT / "scenarios"
    path = base / relative.removeprefix("cli/")
    found = [s for s in discover([path]) if not variant or s.variant == variant]
    assert len(found) == 1, [s.id for s in found]
    return found[0]


def run(implementation: Any, relative: str, variant: str = "", *,
        time_limit_s: float | None = None) -> tuple[Any, dict[str, str]]:
    """The trace and each criterion's status of one scenario run on ``implementation``."""
    limit = time_limit_s or implementation.time_limit_s
    traces = []

    def runner(impl, scenario_, seed, **kwargs):
        ran = run_scenario(impl, scenario_, seed, **{**kwargs, "time_limit_s": limit})
        traces.append(ran)
        return ran

    result = run_suite(implementation, [scenario(relative, variant)], 0, runner=runner,
                       impl_spec=implementation.info.name)
    (ran,) = traces
    assert ran.error == "", ran.error
    statuses = {c.id: str(c.status) for c in result.criteria}
    for criterion in result.criteria:
        if criterion.id not in OUTSIDE:
            assert str(criterion.status) in ("not_applicable", "not_selected"), criterion.id
    return ran.trace, statuses


def ledger(trace: Any) -> list[str]:
    return [e.data["tool_call_id"] for e in trace.of_kind(Kind.TOOL_EXECUTED)]


def requests(trace: Any) -> list[Any]:
    return list(trace.of_kind(Kind.MODEL_REQUEST))


def prompts(trace: Any) -> int:
    return len(list(trace.of_kind(Kind.APPROVAL_PROMPT)))


def stream_ends(trace: Any) -> list[str]:
    return [e.data["how"] for e in trace.of_kind(Kind.MODEL_STREAM_END)]


def tool_message(request: Any, call_id: str) -> dict[str, Any] | None:
    return next((m for m in request.data["messages"]
                 if m["role"] == "tool" and m["tool_call_id"] == call_id), None)
