"""Each installed real CLI over the whole applicable bundled suite (slow: minutes for Claude
Code and Codex, over an hour for OpenCode on two shared cores; ``pytest -m slow``).

Every applicable scenario runs without a harness error; every criterion judged from outside
is exercised and has the verdict docs/real-systems.md records for the CLI; every other
criterion is ``not_applicable``, with its reason. Skipped, with the npm install command, for a CLI that is not
installed.
"""

from __future__ import annotations

import pytest

from cli_cases import ROOT, load_or_skip
from harness.criteria.outside_view import OUTSIDE
from harness.report.result import CriterionStatus, ScenarioStatus
from harness.running.suite import run_suite
from harness.scenarios.loader import discover

pytestmark = [pytest.mark.slow, pytest.mark.process]

PASS, FAIL = CriterionStatus.PASSED, CriterionStatus.FAILED
DOCUMENTED = {
    "claude-code": {"X3": PASS, "L3.4": PASS, "L1.8": FAIL, "L4.3": FAIL, "M3": FAIL,
                    "M4": FAIL, "M5": FAIL},
    "codex": {"X3": PASS, "L3.4": PASS, "L4.3": PASS, "L1.8": FAIL, "M3": FAIL, "M4": FAIL,
              "M5": FAIL},
    "opencode": {"L3.4": PASS, "L4.3": PASS, "X3": FAIL, "L1.8": FAIL, "M3": FAIL,
                 "M4": FAIL, "M5": FAIL},
}
APPLICABLE = 77
"""Bundled scenarios each of the three CLIs can run (docs/real-systems.md)."""


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_the_whole_applicable_suite(name):
    implementation = load_or_skip(name)
    scenarios = [s for s in discover([ROOT / "scenarios"]) if not implementation.why_not(s)]
    assert len(scenarios) == APPLICABLE
    result = run_suite(implementation, scenarios, 0, time_limit_s=implementation.time_limit_s,
                       impl_spec=implementation.info.name, jobs=2)
    errored = [s.id for s in result.scenarios if s.status is ScenarioStatus.ERROR]
    assert errored == []
    statuses = {c.id: c.status for c in result.criteria}
    assert {cid: statuses[cid] for cid in OUTSIDE} == DOCUMENTED[name]
    assert {status for cid, status in statuses.items() if cid not in OUTSIDE} == {
        CriterionStatus.NOT_APPLICABLE}
    # every criterion is pass, fail or n/a with its reason (issue 27's Done-when)
    assert all(c.expectation_reason for c in result.criteria
               if c.status is CriterionStatus.NOT_APPLICABLE)
