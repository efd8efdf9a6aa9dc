"""Run the conformance suite inside a user's pytest (entry point ``pytest11``).

Inactive unless ``--lifecycle-impl SPEC`` is given. Then:

* **Bad input is a usage error.** The implementation, the scenarios, the expectations file,
  ``--lifecycle-require-features`` and ``--lifecycle-report-dir`` are all loaded and checked
  in ``pytest_configure``; any :class:`~harness.contract.errors.HarnessError` becomes one
  ``pytest.UsageError`` line (exit 4) before anything is collected or run.
* **One item per scenario, collected at collection time** (``lifecycle::<scenario id>``, a
  template variant being a scenario of its own): ``--collect-only`` lists them and "collected
  N items" counts them. An item runs its scenario and judges every criterion on the trace
  (:func:`harness.running.suite.judge_scenario`); it fails with the evidence, the trace excerpt and
  the replay command when a judged criterion has a violation in it or the scenario errored,
  is xfailed when every violation is of a criterion expected to fail. Every scenario runs,
  whatever the implementation declares: an optional feature's criteria judge it when it is
  declared or its behaviour shows it (:mod:`harness.contract.conformance`).
* **The gate is judged from every item's result.** Each item's judgement rides on its call
  report as plain JSON (``report.lifecycle_judgement``), so with pytest-xdist (``-n 2``) the
  workers' results reach the controller like any report. At session finish the controller
  (or the only process) combines them in scenario order with
  :func:`harness.running.suite.combine_judgements` — the rules of ``lifecycle-harness run``: no
  vacuous pass, an errored scenario's passes do not count — prints the criterion table and,
  when a judged criterion failed, errored or was not exercised, a scenario errored, a
  selected item produced no result, or a demanded feature is unmet, sets exit status 1. The
  verdicts do not depend on how items were spread over workers.
* **Selection** is pytest's (``-k L4``, ``-k L4.1``, ``-k crash``, ``-m``, node ids); only
  the selected scenarios run. Which criteria that judges is
  :mod:`harness.running.keyword_selection`: those ``-k`` names, else all of them in a full run,
  else those the scenarios that ran exercised or violated. The others are reported
  "not selected", never "not exercised", and a partial run claims no conformance level.
* **Expectations are strict** (as in the CLI): a criterion listed in
  ``--lifecycle-expectations`` that passes fails the gate with a message telling to remove
  it from the file; ``--lifecycle-lenient-expectations`` reports it without failing.
* ``--lifecycle-report-dir DIR`` writes report.json/junit.xml/report.md/report.html of the
  judged criteria; ``--lifecycle-require-features A,B`` (or ``all``) makes an unmet demanded
  feature fail the gate of a full run.

Guarantees: importing this module costs nothing (the harness is imported lazily), so
installing the package does not slow down or change unrelated pytest runs. pytest does not
rewrite the asserts of the harness's and the reference's modules (see
:func:`_not_rewritten`): a run that uses the plugin imports them as Python does, from the
bytecode the install wrote.
"""

from __future__ import annotations

import datetime as _dt
import json
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import pytest

ITEM_PREFIX = "lifecycle::"
REPORT_ATTRIBUTE = "lifecycle_judgement"
_STATE = pytest.StashKey["_Lifecycle"]()


OWN_PACKAGES = ("harness", "reference_impl")
"""The packages of this distribution (what pytest marks for assert rewriting)."""


def _not_rewritten(pluginmanager: pytest.PytestPluginManager) -> None:
    """Unmark :data:`OWN_PACKAGES` for pytest's assert rewriting. pytest rewrites every
    package of a plugin's distribution: in a wheel install, all of the harness and the
    reference. Where it cannot cache the rewritten code (``PYTHONDONTWRITEBYTECODE``, a
    read-only site-packages, as in many CI images) it compiles each of their modules from
    source at every run that uses the plugin: about 5 s of CPU, measured in a wheel install.
    Their asserts are the harness's own invariants, never a test's assertion, so nothing
    is lost. The set of marked names is pytest's private state; where it is not there, the
    modules are rewritten as before."""
    hook = getattr(pluginmanager, "rewrite_hook", None)
    marked = getattr(hook, "_must_rewrite", None)
    if isinstance(marked, set):
        marked.difference_update(OWN_PACKAGES)
        answered = getattr(hook, "_marked_for_rewrite_cache", None)
        if isinstance(answered, dict):
            answered.clear()  # as pytest's own mark_rewrite does after a change


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    _not_rewritten(pluginmanager)  # the earliest hook: before any of them is imported
    group = parser.getgroup("lifecycle-harness", "agent-runtime lifecycle conformance")
    group.addoption("--lifecycle-impl", metavar="SPEC", default=None,
                    help="run the lifecycle conformance suite against SPEC "
                    "(reference, python:MODULE:FACTORY, process:COMMAND, mutant:NAME)")
    group.addoption("--lifecycle-scenarios", metavar="PATH", action="append", default=None,
                    help="scenario files or folders (default: the bundled suite)")
    group.addoption("--lifecycle-seed", metavar="N", type=int, default=0, help="run seed")
    group.addoption("--lifecycle-expectations", metavar="FILE", default=None,
                    help="TOML file of criteria expected to fail")
    group.addoption("--lifecycle-no-freeze-clock", action="store_true", default=False,
                    help="let a python: implementation read the real clock (default: the "
                    "process clock is held at the world's virtual time while each scenario "
                    "runs; see harness.running.process_clock)")
    group.addoption("--lifecycle-lenient-expectations", action="store_true", default=False,
                    help="a criterion expected to fail that passes is reported, not a failure "
                    "(default: strict, it fails the gate)")
    group.addoption("--lifecycle-report-dir", metavar="DIR", default=None,
                    help="also write report.json/junit.xml/report.md/report.html here")
    group.addoption("--lifecycle-require-features", metavar="A,B", default="",
                    help="optional features the run must establish, declared or shown by "
                    "behaviour, and met (comma-separated, or 'all'); the core is always "
                    "required")


# --------------------------------------------------------------------------- session state


@dataclass(slots=True)
class _Lifecycle:
    """What one pytest process (controller, worker or the only one) knows of the run."""

    spec: str
    implementation: Any
    scenarios: tuple[Any, ...]
    criteria: tuple[Any, ...]
    seed: int
    expectations: Mapping[str, str]
    lenient: bool
    required: tuple[str, ...]
    report_dir: str | None
    named: frozenset[str] | None
    """Criteria the ``-k`` expression names (None: judge by the run, see keyword_selection)."""
    bundled: bool
    """The scenarios are the bundled suite (no ``--lifecycle-scenarios``): only then can a
    run be full and claim a conformance level."""
    expected_errors: tuple[Any, ...] = ()
    """The expectations file's ``[[expected_error]]`` entries."""


def _load(config: pytest.Config, spec: str) -> _Lifecycle:
    """Everything the run needs, loaded and checked now; HarnessError for bad input."""
    from harness.running import keyword_selection
    from harness.contract.conformance import core_always_applies, parse_feature_list
    from harness.contract.errors import UsageError
    from harness.contract.expectations import load_expectation_file
    from harness.implementations.specs import resolve
    from harness.report.report_set import check_report_dir
    from harness.scenarios.loader import bundled_suite_dir, discover
    from harness.running.suite import default_criteria

    criteria = core_always_applies(default_criteria())
    required_text = config.getoption("--lifecycle-require-features") or ""
    required = tuple(f.value for f in parse_feature_list(
        required_text, "--lifecycle-require-features")) if required_text else ()
    report_dir = config.getoption("--lifecycle-report-dir")
    if report_dir is not None:
        problem = check_report_dir(report_dir)
        if problem:
            raise UsageError(f"--lifecycle-report-dir: {problem}")
    expectations_file = config.getoption("--lifecycle-expectations")
    expectation_file = load_expectation_file(expectations_file) if expectations_file else None
    expectations = expectation_file.criteria if expectation_file else {}
    unknown = sorted(set(expectations) - {c.id for c in criteria})
    if unknown:
        raise UsageError(f"--lifecycle-expectations {expectations_file}: unknown criterion id(s) "
                         f"{', '.join(unknown)}; valid ids: {', '.join(c.id for c in criteria)}")
    paths = config.getoption("--lifecycle-scenarios") or [str(bundled_suite_dir())]
    scenarios = tuple(discover(paths))
    if not scenarios:
        raise UsageError(f"--lifecycle-scenarios: no scenario files under {', '.join(paths)}; "
                         "give folders holding *.toml scenario files")
    implementation = resolve(spec)
    if config.getoption("--lifecycle-no-freeze-clock") and hasattr(
            implementation, "freeze_process_clock"):
        implementation.freeze_process_clock = False  # type: ignore[attr-defined]
    return _Lifecycle(
        spec=spec,
        implementation=implementation,
        scenarios=scenarios,
        criteria=tuple(criteria),
        seed=config.getoption("--lifecycle-seed"),
        expectations=expectations,
        lenient=bool(config.getoption("--lifecycle-lenient-expectations")),
        required=required,
        report_dir=report_dir,
        named=keyword_selection.named_criteria(criteria, _keyword_matcher(config)),
        bundled=not config.getoption("--lifecycle-scenarios"),
        expected_errors=expectation_file.errors if expectation_file else (),
    )


def _keyword_matcher(config: pytest.Config) -> Any:
    """``-k`` as a predicate over a set of keywords, matched the way pytest matches items
    (case-insensitive substrings), or None without ``-k`` or when pytest cannot parse it
    (pytest itself then reports the expression)."""
    text = (config.getoption("keyword", "") or "").strip()
    if not text:
        return None
    # pytest's own expression language, so criteria are named exactly as items are selected
    from _pytest.mark.expression import Expression

    try:
        expression = Expression.compile(text)
    except Exception:  # a bad expression: pytest reports it to the user itself
        return None

    def matches(keywords: frozenset[str]) -> bool:
        lowered = [k.lower() for k in keywords]

        def match(name: str, /, **kwargs: Any) -> bool:
            return not kwargs and any(name.lower() in k for k in lowered)

        return bool(expression.evaluate(match))

    return matches


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    spec = config.getoption("--lifecycle-impl")
    if not spec:
        return
    from harness.contract.errors import HarnessError

    try:
        state = _load(config, spec)
    except HarnessError as exc:
        raise pytest.UsageError(f"lifecycle-harness: {' '.join(str(exc).split())}") from None
    config.stash[_STATE] = state
    if not _is_worker(config):
        config.pluginmanager.register(_Gate(state), "lifecycle-harness-gate")


def pytest_report_header(config: pytest.Config) -> list[str]:
    state = config.stash.get(_STATE, None)
    if state is None:
        return []
    info = state.implementation.info
    return [f"lifecycle-harness: {info.name} {info.version} ({state.spec}), "
            f"{len(state.scenarios)} scenarios, seed {state.seed}"]


# --------------------------------------------------------------------------- collection


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Any:
    report = yield
    state = collector.config.stash.get(_STATE, None)
    if state is not None and isinstance(collector, pytest.Session) and report.passed:
        from harness.running.keyword_selection import SUITE_KEYWORD

        report.result.append(
            LifecycleSuite.from_parent(collector, name=SUITE_KEYWORD, nodeid=SUITE_KEYWORD))
    return report


class LifecycleSuite(pytest.Collector):
    """The parent of the scenario items (``lifecycle``)."""

    def collect(self) -> list[pytest.Item]:
        from harness.running.keyword_selection import scenario_keywords

        state = self.config.stash[_STATE]
        items = []
        for position, scenario in enumerate(state.scenarios):
            item = ScenarioItem.from_parent(self, name=scenario.id, scenario=scenario,
                                            position=position)
            item.extra_keyword_matches.update(scenario_keywords(scenario, state.criteria))
            items.append(item)
        return items

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.config.rootpath, None, self.name


class ScenarioItem(pytest.Item):
    """One scenario: run, judged by every criterion, failing on its violations."""

    def __init__(self, *, scenario: Any, position: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.scenario = scenario
        self.position = position
        self.judgement: Any = None

    def runtest(self) -> None:
        from harness.running.suite import judge_scenario

        state = self.config.stash[_STATE]
        self.judgement = judge_scenario(
            state.implementation, self.scenario, state.seed, criteria=state.criteria,
            impl_spec=state.spec,
        )
        titles = {c.id: c.title for c in state.criteria}
        kind, text = scenario_outcome(self.judgement, state.named, state.expectations, titles,
                                      state.expected_errors, state.lenient)
        if kind == "xfail":
            pytest.xfail(text)
        if kind == "fail":
            pytest.fail(text, pytrace=False)

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.scenario.file, None, f"{ITEM_PREFIX}{self.name}"


def scenario_outcome(
    judgement: Any,
    judged: frozenset[str] | None,
    expectations: Mapping[str, str],
    titles: Mapping[str, str],
    expected_errors: Sequence[Any] = (),
    lenient: bool = False,
) -> tuple[str, str]:
    """("pass" | "xfail" | "fail", message) for one judged scenario; ``judged``
    None means every criterion counts. A scenario error an ``expected_errors`` entry lists
    is an xfail; a listed scenario that does not error is an unexpected success (a failure,
    unless ``lenient``)."""
    from harness.report.text import evidence_line
    from harness.report.result import ScenarioStatus
    from harness.running.suite import expect_errors

    (result,) = expect_errors((judgement.result,), expected_errors)
    excerpts = {e.criterion_id: e.lines for e in judgement.excerpts}
    bad = [v for v in result.verdicts
           if v.status in ("fail", "error") and (judged is None or v.criterion_id in judged)]
    unexpected = [v for v in bad if v.criterion_id not in expectations]
    lines: list[str] = []
    if result.status is ScenarioStatus.ERROR:
        lines.append(f"scenario {result.id} errored: {result.error}"
                     + (f" (expected another error: {result.expected_error})"
                        if result.expected_error else ""))
    if result.unexpected_success and not lenient:
        lines.append(f"scenario {result.id} did not error as the expectations file lists "
                     f"({result.expected_error}): an unexpected success; remove the entry")
    for verdict in unexpected:
        lines.append(f"{verdict.criterion_id} {titles.get(verdict.criterion_id, '')}: "
                     f"{'failed' if verdict.status == 'fail' else 'checker error'}")
        lines += [f"    {evidence_line(item)}" for item in verdict.evidence]
        lines += [f"    | {line}" for line in excerpts.get(verdict.criterion_id, ())]
    if lines:
        lines.append(f"replay: {result.replay}")
        return "fail", "\n".join(lines)
    if result.status is ScenarioStatus.EXPECTED_ERROR:
        return "xfail", f"expected error: {result.expected_error}"
    if bad:
        return "xfail", "; ".join(
            f"{v.criterion_id} expected to fail: {expectations[v.criterion_id]}" for v in bad)
    return "pass", ""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if call.when == "call" and isinstance(item, ScenarioItem) and item.judgement is not None:
        from harness.contract import to_json

        # plain JSON, so pytest-xdist carries it from a worker to the controller
        setattr(report, REPORT_ATTRIBUTE, json.dumps(
            {"position": item.position, "judgement": to_json(item.judgement)}))
    return report


# --------------------------------------------------------------------------- the gate


@dataclass(slots=True)
class _Gate:
    """Collects every scenario item's judgement (from this process or xdist workers) and
    judges the criteria at session finish. Registered in the controller / only process."""

    state: _Lifecycle
    reported: set[str] = field(default_factory=set)
    judgements: dict[str, tuple[int, Any]] = field(default_factory=dict)
    # wall-clock for the report's run info only (for humans), as in run_suite
    started: str = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(
        timespec="seconds"))
    clock_start: float = field(default_factory=time.monotonic)
    outcome: "GateOutcome | None" = None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not report.nodeid.startswith(ITEM_PREFIX):
            return
        self.reported.add(report.nodeid)
        payload = getattr(report, REPORT_ATTRIBUTE, None)
        if payload is not None:
            from harness.contract import from_json
            from harness.running.suite import ScenarioJudgement

            data = json.loads(payload)
            self.judgements[report.nodeid] = (
                int(data["position"]), from_json(ScenarioJudgement, data["judgement"]))

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if not self.reported:
            return
        self.outcome = judge_gate(
            self.state, [j for _, j in sorted(self.judgements.values(), key=lambda p: p[0])],
            missing=sorted(self.reported - set(self.judgements)),
            started=self.started, duration_s=time.monotonic() - self.clock_start,
        )
        if self.state.report_dir:
            from harness.report import write_reports

            write_reports(self.outcome.result, self.state.report_dir)
        if not self.outcome.passed and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.outcome is None:
            return
        terminalreporter.section("lifecycle conformance")
        for line in self.outcome.lines:
            terminalreporter.write_line(line)


@dataclass(frozen=True, slots=True)
class GateOutcome:
    result: Any
    """The RunResult of the judged criteria and the scenarios that ran."""
    passed: bool
    lines: tuple[str, ...]
    """The criterion table, the failures with replay commands, the gate line."""


def judge_gate(
    state: _Lifecycle, judgements: Sequence[Any], *, missing: Sequence[str] = (),
    started: str = "", duration_s: float = 0.0,
) -> GateOutcome:
    """Combine the scenario judgements into the criterion verdicts and the gate."""
    from harness.running.keyword_selection import judged_criteria
    from harness.report.text import level_line
    from harness.report.result import (
        EXPECTATIONS_LENIENT,
        EXPECTATIONS_STRICT,
        CriterionStatus,
        ScenarioStatus,
    )
    from harness.running.suite import combine_judgements

    full = state.bundled and not missing and len(judgements) == len(state.scenarios)
    criteria = judged_criteria(state.criteria, state.named, full,
                               (j.result for j in judgements))
    judged_ids = {c.id for c in criteria}
    every_criterion = judged_ids == {c.id for c in state.criteria}
    result = combine_judgements(
        state.implementation.info, judgements, state.seed, criteria=criteria,
        expectations={k: v for k, v in state.expectations.items() if k in judged_ids},
        impl_spec=state.spec, command=f"pytest --lifecycle-impl {state.spec}",
        required_features=state.required if full and every_criterion else (),
        started=started, duration_s=duration_s,
        expectations_mode=EXPECTATIONS_LENIENT if state.lenient else EXPECTATIONS_STRICT,
        expected_errors=state.expected_errors,
    )
    lines = [f"{c.id:<7} {c.status.value:<16} exercised {c.exercised}" for c in result.criteria]
    not_selected = [c.id for c in state.criteria if c.id not in judged_ids]
    if not_selected:
        lines.append(f"not selected ({len(not_selected)}): {', '.join(not_selected)}")
    for criterion in result.criteria:
        if criterion.status in (CriterionStatus.FAILED, CriterionStatus.ERROR):
            lines.append(f"{criterion.id} {criterion.title}: {criterion.status.value}")
            lines += [f"    replay: {v.replay}" for v in criterion.violations[:3]]
    idle = [c.id for c in result.criteria if c.status is CriterionStatus.NOT_EXERCISED]
    if idle:
        lines.append(f"not exercised ({len(idle)}; a criterion never exercised does not pass): "
                     f"{', '.join(idle)}")
    unexpected = [c for c in result.criteria if c.status is CriterionStatus.UNEXPECTED_PASS]
    for criterion in unexpected:
        verb = "reported (lenient)" if state.lenient else "fails the gate"
        lines.append(f"{criterion.id} passed but is listed as expected to fail "
                     f"({criterion.expectation_reason}): {verb}; remove it from the "
                     "expectations file")
    lines += [f"scenario {s.id} errored: {s.error.splitlines()[0] if s.error else ''}"
              for s in result.scenarios if s.status is ScenarioStatus.ERROR]
    lines += [f"scenario {s.id} errored as expected ({s.expected_error})"
              for s in result.scenarios if s.status is ScenarioStatus.EXPECTED_ERROR]
    lines += [f"scenario {s.id} did not error as listed ({s.expected_error}): "
              + ("reported (lenient)" if state.lenient else "fails the gate")
              + "; remove it from the expectations file"
              for s in result.unexpected_successes]
    lines += [f"{nodeid}: no result (the item did not finish)" for nodeid in missing]
    if full and state.required:
        lines += [f"required: {m}" for m in result.conformance.required_unmet]
    passed = result.gate_passed and not (unexpected and not state.lenient) and not missing
    scope = (f"{len(judgements)} scenarios, {len(result.criteria)} criteria judged"
             if full else f"partial run: {len(judgements)} of {len(state.scenarios)} "
             f"{'bundled ' if state.bundled else ''}scenarios, "
             f"{len(result.criteria)} of {len(state.criteria)} criteria judged")
    summary = result.summary
    lines.append(f"lifecycle gate {'PASSED' if passed else 'FAILED'}: {scope}; "
                 f"{summary.passed} passed, {summary.failed} failed, {summary.errors} errors, "
                 f"{summary.not_exercised} not exercised, {summary.not_applicable} n/a, "
                 f"{summary.expected_fail} expected to fail, "
                 f"{summary.unexpected_pass} unexpected passes")
    if full and every_criterion:
        lines.append(f"lifecycle conformance: {level_line(result)}")
    else:
        lines.append("lifecycle conformance: no level claimed by a partial run "
                     "(run the whole bundled suite for one)")
    return GateOutcome(result, passed, tuple(lines))
