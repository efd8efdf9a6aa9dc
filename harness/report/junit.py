"""``junit.xml``: one testcase per criterion, for CI test-report viewers.

Guarantees: well-formed XML (built with ElementTree, characters XML cannot carry replaced);
the first ``<testsuite>`` ("<implementation> criteria") holds exactly one ``<testcase>`` per
criterion with ``classname`` ``<implementation name>.<stage>``; ``failed`` and
``not_exercised`` are ``<failure>`` (a vacuous criterion does not pass), ``error`` is
``<error>``, ``not_applicable`` and ``expected_fail`` are ``<skipped>``; each failure text
carries the evidence and the replay command. A second suite ("<implementation> scenarios")
has one testcase per scenario so that a hung or crashed scenario shows up in CI too (a
scenario a report of schema 4 or before skipped for an undeclared optional feature is
``<skipped>``; since schema 5 every scenario runs). The level headline is the
``conformance`` property of each suite; with ``--require-features`` a third suite
("<implementation> required features") has one testcase per required feature, a
``<failure>`` when it is neither declared nor shown, or not met.
"""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

from harness.contract import to_json
from harness.report.text import SOURCE_LABEL, evidence_line, level_line, violation_text, xml_safe
from harness.report.atomic import write_bytes
from harness.report.result import (EXPECTATIONS_LENIENT, CriterionResult, CriterionStatus, RunResult,
                                   ScenarioResult, ScenarioStatus)

FILENAME = "junit.xml"


def _el(parent: ET.Element, tag: str, text: str | None = None, **attrs: object) -> ET.Element:
    element = ET.SubElement(parent, tag, {k: xml_safe(str(v)) for k, v in attrs.items()})
    if text is not None:
        element.text = xml_safe(text)
    return element


def _criterion_case(suite: ET.Element, impl: str, c: CriterionResult) -> str:
    """Add the testcase; returns "failure", "error", "skipped" or "" (passed)."""
    case = _el(suite, "testcase", classname=f"{impl}.{c.stage}", name=f"{c.id}: {c.title}", time="0")
    header = (f"{c.id} — {c.statement}\n{SOURCE_LABEL}: {c.seed_clause}\n"
              f"exercised: {c.exercised}")
    if c.status in (CriterionStatus.FAILED, CriterionStatus.ERROR):
        first = c.violations[0].evidence[0].note if c.violations and c.violations[0].evidence else ""
        message = f"{len(c.violations)} violation(s)" + (f": {first}" if first else "")
        body = header + "\n\n" + "\n\n".join(violation_text(v) for v in c.violations)
        tag = "failure" if c.status is CriterionStatus.FAILED else "error"
        _el(case, tag, body, type=c.status.value, message=message)
        return tag
    if c.status is CriterionStatus.NOT_EXERCISED:
        message = "not exercised by any scenario: a criterion never exercised does not pass"
        _el(case, "failure", header, type="not_exercised", message=message)
        return "failure"
    if c.status is CriterionStatus.NOT_APPLICABLE:
        _el(case, "skipped", message="not applicable: the implementation neither declares nor "
            "showed the optional feature it gates")
        return "skipped"
    if c.status is CriterionStatus.NOT_SELECTED:
        _el(case, "skipped", message="not selected: this partial run did not judge it")
        return "skipped"
    if c.status is CriterionStatus.EXPECTED_FAIL:
        _el(case, "skipped", message=f"expected failure: {c.expectation_reason}")
        return "skipped"
    if c.status is CriterionStatus.UNEXPECTED_PASS:
        _el(case, "system-out", f"unexpected pass: listed as expected to fail ({c.expectation_reason})")
    scenarios = ", ".join(c.scenarios_exercising)
    _el(case, "system-out", f"exercised {c.exercised} time(s) by: {scenarios}")
    return ""


def _scenario_case(suite: ET.Element, impl: str, s: ScenarioResult, strict: bool = True) -> str:
    case = _el(
        suite, "testcase", classname=f"{impl}.scenarios.{s.stage}", name=s.id,
        time=f"{s.duration_s:.3f}", file=s.file,
    )
    plan = "\n".join(s.faults) or "(no faults)"
    if s.status is ScenarioStatus.SKIPPED:
        _el(case, "skipped", message="not run: needs optional feature(s) "
            f"{', '.join(s.requires)} the implementation does not declare")
        return "skipped"
    if s.status is ScenarioStatus.NOT_RUN:
        _el(case, "skipped", message="not run: --fail-fast stopped the run at an earlier failure")
        return "skipped"
    if s.status is ScenarioStatus.ERROR:
        _el(case, "error", f"{s.error}\nfault plan:\n{plan}\nreplay: {s.replay}",
            type="scenario_error", message=s.error.splitlines()[0] if s.error else "run error")
        return "error"
    if s.status is ScenarioStatus.EXPECTED_ERROR:
        _el(case, "skipped", message=f"expected error ({s.expected_error}): "
            + (s.error.splitlines()[0] if s.error else "run error"))
        return "skipped"
    if s.unexpected_success and strict:
        _el(case, "failure", f"listed as expected to error ({s.expected_error}) but it "
            f"{s.status.value}: remove it from the expectations file\nreplay: {s.replay}",
            type="unexpected_success", message="unexpected success: the expected error did "
            "not happen")
        return "failure"
    if s.status is ScenarioStatus.FAILED:
        failing = [v for v in s.verdicts if v.status in ("fail", "error")]
        lines = [
            f"{v.criterion_id} {v.status}: " + "; ".join(evidence_line(e) for e in v.evidence)
            for v in failing
        ]
        _el(case, "failure", "\n".join(lines) + f"\nfault plan:\n{plan}\nreplay: {s.replay}",
            type="scenario_failed",
            message="violates " + ", ".join(v.criterion_id for v in failing))
        return "failure"
    _el(case, "system-out", f"fault plan:\n{plan}\ntrace digest: {s.trace_digest}")
    return ""


def _required_case(suite: ET.Element, impl: str, result: RunResult, feature: str) -> str:
    case = _el(suite, "testcase", classname=f"{impl}.required", name=feature, time="0")
    unmet = [m for m in result.conformance.required_unmet if m.startswith(f"{feature} ")]
    if unmet:
        _el(case, "failure", unmet[0] + "\n" + level_line(result), type="required_feature",
            message=unmet[0])
        return "failure"
    return ""


def _suite(parent: ET.Element, name: str, result: RunResult, time: float) -> ET.Element:
    suite = _el(parent, "testsuite", name=name, timestamp=result.run.started, time=f"{time:.3f}")
    props = _el(suite, "properties")
    info = result.implementation
    for key, value in (
        ("implementation", info.name),
        ("implementation_version", info.version),
        ("features", ",".join(info.features)),
        ("seed", result.run.seed),
        ("harness_version", result.run.harness_version),
        ("thresholds", json.dumps(to_json(result.run.thresholds), sort_keys=True)),
        ("command", result.run.command),
        ("conformance", level_line(result)),
        ("required_features", ",".join(result.required_features)),
    ):
        _el(props, "property", name=key, value=value)
    return suite


def _count(suite: ET.Element, outcomes: list[str]) -> None:
    suite.set("tests", str(len(outcomes)))
    for key in ("failure", "error", "skipped"):
        suite.set(key + ("s" if key != "skipped" else ""), str(outcomes.count(key)))


def to_xml(result: RunResult) -> bytes:
    impl = result.implementation.name
    root = ET.Element("testsuites", name="lifecycle-harness")
    criteria = _suite(root, f"{impl} criteria", result, result.run.duration_s)
    c_outcomes = [_criterion_case(criteria, impl, c) for c in result.criteria]
    _count(criteria, c_outcomes)
    scenarios = _suite(root, f"{impl} scenarios", result, sum(s.duration_s for s in result.scenarios))
    strict = result.run.expectations_mode != EXPECTATIONS_LENIENT
    s_outcomes = [_scenario_case(scenarios, impl, s, strict) for s in result.scenarios]
    _count(scenarios, s_outcomes)
    r_outcomes: list[str] = []
    if result.required_features:
        required = _suite(root, f"{impl} required features", result, 0.0)
        r_outcomes = [_required_case(required, impl, result, f) for f in result.required_features]
        _count(required, r_outcomes)
    _count(root, c_outcomes + s_outcomes + r_outcomes)
    root.set("time", f"{result.run.duration_s:.3f}")
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"


def write(result: RunResult, report_dir: str | os.PathLike[str]) -> Path:
    return write_bytes(Path(report_dir) / FILENAME, to_xml(result))
