"""Run the conformance suite inside a user's pytest (entry point ``pytest11``).

Inactive unless ``--lifecycle-impl SPEC`` is given; then the suite runs once per session
against that implementation and every acceptance criterion becomes one test item
(``lifecycle::L4.1``): passed → pass, failed / error / not exercised → fail with the
evidence and the replay command, not applicable → skip, expected by ``--lifecycle-expectations``
→ xfail (an unexpected pass fails, so the expectation file gets tightened). Reports are
written to ``--lifecycle-report-dir`` when given. ``--lifecycle-require-features A,B`` (or
``all``) adds one item per demanded optional feature (``lifecycle::requires::A``) that fails
when the implementation does not declare it or does not meet it; an unknown feature name is
a pytest usage error. The session's terminal summary prints the conformance level headline.

Guarantees: importing this module costs nothing (the harness is imported lazily), so
installing the package does not slow down or change unrelated pytest runs.
"""

from __future__ import annotations

from typing import Any

import pytest

_RESULT_KEY = pytest.StashKey[Any]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("lifecycle-harness", "agent-runtime lifecycle conformance")
    group.addoption("--lifecycle-impl", metavar="SPEC", default=None,
                    help="run the lifecycle conformance suite against SPEC "
                    "(reference, python:MODULE:FACTORY, process:COMMAND, mutant:NAME)")
    group.addoption("--lifecycle-scenarios", metavar="PATH", action="append", default=None,
                    help="scenario files or folders (default: the bundled suite)")
    group.addoption("--lifecycle-seed", metavar="N", type=int, default=0, help="run seed")
    group.addoption("--lifecycle-expectations", metavar="FILE", default=None,
                    help="TOML file of criteria expected to fail")
    group.addoption("--lifecycle-report-dir", metavar="DIR", default=None,
                    help="also write report.json/junit.xml/report.md/report.html here")
    group.addoption("--lifecycle-require-features", metavar="A,B", default="",
                    help="optional features the implementation must declare and meet "
                    "(comma-separated, or 'all'); the core is always required")


def _required(config: pytest.Config) -> tuple[str, ...]:
    text = config.getoption("--lifecycle-require-features") or ""
    if not text:
        return ()
    from harness.conformance import parse_feature_list
    from harness.errors import UsageError

    try:
        return tuple(f.value for f in parse_feature_list(text, "--lifecycle-require-features"))
    except UsageError as exc:
        raise pytest.UsageError(str(exc)) from None


def _run(config: pytest.Config) -> Any:
    result = config.stash.get(_RESULT_KEY, None)
    if result is not None:
        return result
    from harness.expectations import load_expectations
    from harness.implementations import resolve
    from harness.scenarios import DEFAULT_SCENARIO_DIR, discover
    from harness.suite import run_suite

    spec = config.getoption("--lifecycle-impl")
    paths = config.getoption("--lifecycle-scenarios") or [str(DEFAULT_SCENARIO_DIR)]
    expectations_file = config.getoption("--lifecycle-expectations")
    result = run_suite(
        resolve(spec), discover(paths), config.getoption("--lifecycle-seed"),
        expectations=load_expectations(expectations_file) if expectations_file else None,
        impl_spec=spec,
        required_features=_required(config),
    )
    report_dir = config.getoption("--lifecycle-report-dir")
    if report_dir:
        from harness.report import write_reports

        write_reports(result, report_dir)
    config.stash[_RESULT_KEY] = result
    return result


class LifecycleSuite(pytest.Collector):
    """The parent of the criterion items (they are generated, not collected from files)."""

    def collect(self) -> list[Any]:
        return []


class CriterionItem(pytest.Item):
    def __init__(self, *, criterion_id: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.criterion_id = criterion_id

    def runtest(self) -> None:
        from harness.report._text import evidence_line
        from harness.result import CriterionStatus

        result = _run(self.config)
        criterion = next(c for c in result.criteria if c.id == self.criterion_id)
        status = criterion.status
        if status is CriterionStatus.PASSED:
            return
        if status is CriterionStatus.NOT_APPLICABLE:
            pytest.skip(f"{criterion.id} not applicable: the implementation lacks a feature")
        if status is CriterionStatus.EXPECTED_FAIL:
            pytest.xfail(f"{criterion.id} expected to fail: {criterion.expectation_reason}")
        lines = [f"{criterion.id} {criterion.title}: {status.value}"]
        if status is CriterionStatus.NOT_EXERCISED:
            lines.append("no scenario exercised it (a criterion never exercised does not pass)")
        if status is CriterionStatus.UNEXPECTED_PASS:
            lines.append(f"listed as expected to fail ({criterion.expectation_reason}) but "
                         "passed: remove it from the expectations file")
        for violation in criterion.violations[:5]:
            lines.append(f"scenario {violation.scenario}:")
            lines += [f"    {evidence_line(item)}" for item in violation.evidence]
            lines.append(f"    replay: {violation.replay}")
        if criterion.seed_clause:
            lines.append(f"design clause: {criterion.seed_clause}")
        pytest.fail("\n".join(lines), pytrace=False)

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.config.rootpath / "lifecycle", None, f"lifecycle::{self.criterion_id}"


class RequiredFeatureItem(pytest.Item):
    """One optional feature demanded by ``--lifecycle-require-features``."""

    def __init__(self, *, feature: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.feature = feature

    def runtest(self) -> None:
        result = _run(self.config)
        level = result.conformance
        unmet = [m for m in level.required_unmet if m.startswith(f"{self.feature} ")]
        if unmet:
            pytest.fail(f"{unmet[0]}\n{level.headline}", pytrace=False)

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.config.rootpath / "lifecycle", None, f"lifecycle::requires::{self.feature}"


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    result = config.stash.get(_RESULT_KEY, None)
    if result is not None:
        from harness.report._text import level_line

        terminalreporter.write_line(f"lifecycle conformance: {level_line(result)}")


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    if not config.getoption("--lifecycle-impl"):
        return
    from harness.criteria.catalogue import CRITERIA

    suite = LifecycleSuite.from_parent(session, name="lifecycle", nodeid="lifecycle")
    for criterion in CRITERIA:
        items.append(CriterionItem.from_parent(
            suite, name=criterion.id, nodeid=f"lifecycle::{criterion.id}",
            criterion_id=criterion.id))
    for feature in _required(config):
        items.append(RequiredFeatureItem.from_parent(
            suite, name=f"requires::{feature}", nodeid=f"lifecycle::requires::{feature}",
            feature=feature))
