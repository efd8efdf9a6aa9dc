"""Small text helpers shared by the report writers (pure, RunResult-only)."""

from __future__ import annotations

import re
from typing import Iterable

from harness.report.result import CriterionResult, CriterionStatus, EvidenceItem, RunResult, Violation

STATUS_LABEL: dict[CriterionStatus, str] = {
    CriterionStatus.PASSED: "passed",
    CriterionStatus.FAILED: "FAILED",
    CriterionStatus.ERROR: "ERROR",
    CriterionStatus.NOT_EXERCISED: "not exercised",
    CriterionStatus.NOT_APPLICABLE: "n/a",
    CriterionStatus.EXPECTED_FAIL: "expected fail",
    CriterionStatus.UNEXPECTED_PASS: "unexpected pass",
    CriterionStatus.NOT_SELECTED: "not selected",
}

PROBLEM_STATUSES = (CriterionStatus.FAILED, CriterionStatus.ERROR)

SOURCE_LABEL = "Source (design document, Chinese)"
"""How every report labels a criterion's original clause (kept beside its English statement)."""


def status_label(status: CriterionStatus) -> str:
    """The label of any status; one added to the vocabulary later reads as its value."""
    return STATUS_LABEL.get(status, status.value.replace("_", " "))


def status_counts(criteria: Iterable[CriterionResult]) -> dict[CriterionStatus, int]:
    """Criteria per status, every status of the vocabulary present (0 when none), in the
    vocabulary's order: writers lay out whatever statuses exist without naming them."""
    counts = {status: 0 for status in CriterionStatus}
    for criterion in criteria:
        counts[criterion.status] = counts.get(criterion.status, 0) + 1
    return counts


def stages(result: RunResult) -> list[str]:
    """The stages of the result's criteria, in catalogue order."""
    seen: list[str] = []
    for criterion in result.criteria:
        if criterion.stage not in seen:
            seen.append(criterion.stage)
    return seen

_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def xml_safe(text: str) -> str:
    """``text`` without the characters XML 1.0 cannot carry (replaced by U+FFFD)."""
    return _XML_INVALID.sub("\ufffd", text)


def evidence_line(item: EvidenceItem) -> str:
    where = []
    if item.trace_indexes:
        where.append("trace " + ", ".join(str(i) for i in item.trace_indexes))
    if item.ledger_rows:
        where.append("ledger " + ", ".join(str(i) for i in item.ledger_rows))
    suffix = f" [{'; '.join(where)}]" if where else ""
    return f"{item.note}{suffix}"


def violation_text(violation: Violation) -> str:
    """A plain-text block: scenario, evidence, excerpt, replay command."""
    lines = [f"scenario {violation.scenario} (seed {violation.seed})"]
    lines += [f"  - {evidence_line(item)}" for item in violation.evidence]
    if violation.excerpt:
        lines.append("  cited trace events (> marks one):")
        lines += [f"    {line}" for line in violation.excerpt]
    if violation.cited_ledger_rows:
        lines.append("  cited ledger rows:")
        lines += [f"    {line}" for line in violation.cited_ledger_rows]
    lines.append(f"  replay: {violation.replay}")
    return "\n".join(lines)


def gate_line(result: RunResult) -> str:
    s = result.summary
    verdict = "PASSED" if result.gate_passed else "FAILED"
    errored = sum(1 for sc in result.scenarios if sc.status.value == "error")
    parts = [
        f"{s.passed} passed",
        f"{s.failed} failed",
        f"{s.errors} errors",
        f"{s.not_exercised} not exercised",
        f"{s.not_applicable} n/a",
    ]
    if s.expected_fail:
        parts.append(f"{s.expected_fail} expected fail")
    if s.unexpected_pass:
        parts.append(f"{s.unexpected_pass} unexpected pass")
    if s.not_selected:
        parts.append(f"{s.not_selected} not selected")
    skipped = sum(1 for sc in result.scenarios if sc.status.value == "skipped")
    excused = sum(1 for sc in result.scenarios if sc.faults_excused)
    scen = f"{len(result.scenarios)} scenarios"
    notes = [f"{errored} errored"] if errored else []
    expected = sum(1 for sc in result.scenarios if sc.status.value == "expected_error")
    if expected:
        notes.append(f"{expected} errored as expected")
    succeeded = len(result.unexpected_successes)
    if succeeded:
        notes.append(f"{succeeded} unexpected success(es): listed as expected to error")
    if skipped:  # a report of schema 4 or before
        notes.append(f"{skipped} skipped")
    if excused:
        notes.append(f"{excused} with excused faults")
    not_run = sum(1 for sc in result.scenarios if sc.status.value == "not_run")
    if not_run:
        notes.append(f"{not_run} not run after --fail-fast stopped")
    if notes:
        scen += f" ({', '.join(notes)})"
    return (
        f"gate {verdict}: {result.implementation.name} {result.implementation.version}, "
        f"seed {result.run.seed}, {scen}; {s.criteria} criteria: " + ", ".join(parts)
    )


def level_line(result: RunResult) -> str:
    """The level headline: "conformant: core + sandbox_escalation; not claimed: web_projection"."""
    not_selected = result.summary.not_selected
    if not_selected:
        # A partial run claims no level: the criteria it did not judge are not failures.
        how = f" ({result.run.selection})" if result.run.selection else ""
        return (f"partial run{how}: {result.summary.criteria - not_selected} criteria judged, "
                f"{not_selected} not selected; no conformance level claimed")
    line = result.conformance.headline
    if result.required_features:
        line += f" (required: {', '.join(result.required_features)})"
    return line


def criteria_with(result: RunResult, *statuses: CriterionStatus) -> list[CriterionResult]:
    return [c for c in result.criteria if c.status in statuses]
