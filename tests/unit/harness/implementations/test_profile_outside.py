"""``profile:NAME@cli``: the profile's runtime under its real CLI's conditions (the CLI's
applicable scenarios, judged from outside), with no CLI binary needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.clis import DIALECTS
from harness.clis.driver import CliImplementation
from harness.contract.errors import ImplementationLoadError
from harness.implementations import not_applicable_of, resolve
from harness.profiles import PROFILES, expectations_of
from harness.report.result import CriterionStatus
from harness.running.suite import run_suite
from harness.scenarios.loader import load as load_scenario

ROOT = Path(__file__).resolve().parents[4]
CRASH = ROOT / "scenarios" / "l4" / "crash_after_tool_returned.toml"
AUTO = ROOT / "scenarios" / "l2" / "bash_revoked_before_review.toml"


@pytest.mark.parametrize("name", [p.name for p in PROFILES if p.cli])
def test_the_outside_view_is_named_black_box_and_carries_no_tables(name):
    impl = resolve(f"profile:{name}@cli")
    assert impl.info.name == f"profile:{name}@cli"
    assert impl.info.features == () and impl.info.checkpoint_fixtures == ()  # as a CLI's
    assert impl.black_box and f"cli:{impl.cli}" in impl.black_box
    assert expectations_of(impl) is None and not_applicable_of(impl) is None


@pytest.mark.parametrize("path", [CRASH, AUTO], ids=["applicable", "auto-mode"])
def test_it_runs_exactly_the_scenarios_its_cli_runs(path):
    scenario = load_scenario(path)
    for profile in (p for p in PROFILES if p.cli):
        cli = CliImplementation(DIALECTS[profile.cli], "/nonexistent", "0")
        assert resolve(f"profile:{profile.name}@cli").why_not(scenario) == cli.why_not(scenario)
    assert bool(resolve("profile:codex@cli").why_not(scenario)) == (path == AUTO)


def test_every_criterion_is_judged_from_outside_or_na_with_its_reason():
    result = run_suite(resolve("profile:opencode@cli"), [load_scenario(CRASH)], 0)
    statuses = {c.id: c for c in result.criteria}
    assert statuses["L4.3"].status is CriterionStatus.PASSED  # judged from outside
    unseen = statuses["L4.9"]  # a store criterion: n/a, never passed, and says why
    assert unseen.status is CriterionStatus.NOT_APPLICABLE
    assert "cannot be read here" in unseen.expectation_reason
    assert "profile:opencode judged as its real CLI cli:opencode" in unseen.expectation_reason
    # every n/a criterion gives its reason, every other one a verdict
    assert all(c.expectation_reason for c in result.criteria
               if c.status is CriterionStatus.NOT_APPLICABLE)


def test_an_unknown_profile_is_a_load_error():
    with pytest.raises(ImplementationLoadError, match="known profiles"):
        resolve("profile:aider@cli")
