"""Every report format shows a partial run's vocabulary: not_selected criteria (counted
apart), not_run scenarios, the expectations mode; the gate follows strict/lenient."""

from __future__ import annotations

import dataclasses
import json
import xml.etree.ElementTree as ET

import jsonschema
import pytest

from harness.report import html, json_report, junit, markdown
from harness.report.text import gate_line, level_line
from harness.report.result import CriterionStatus, ScenarioStatus
from harness.running.selection import restrict


@pytest.fixture
def partial(passing_result):
    result = restrict(passing_result, {"X1"}, "--criteria X1")
    not_run = dataclasses.replace(result.scenarios[0], id="x-later", status=ScenarioStatus.NOT_RUN,
                                  trace_digest="", verdicts=(), failpoints_reached=())
    return dataclasses.replace(result, scenarios=result.scenarios + (not_run,))


def test_the_summary_counts_not_selected_apart(partial):
    assert {c.id: c.status for c in partial.criteria} == {
        "X1": CriterionStatus.PASSED, "L5.3": CriterionStatus.NOT_SELECTED}
    assert partial.summary.not_selected == 1 and partial.summary.not_applicable == 0
    assert partial.gate_passed
    assert "1 not selected" in gate_line(partial) and "1 not run" in gate_line(partial)
    assert level_line(partial).startswith("partial run (--criteria X1): 1 criteria judged")


def test_report_json_carries_the_statuses_selection_and_mode(partial, report_schema):
    data = json_report.to_dict(partial)
    jsonschema.Draft202012Validator(report_schema).validate(data)
    assert data["summary"]["not_selected"] == 1
    assert data["run"]["selection"] == "--criteria X1"
    assert data["run"]["expectations_mode"] == "strict"
    assert [s["status"] for s in data["scenarios"]] == ["passed", "not_run"]
    assert json_report.from_dict(json.loads(json_report.dumps(partial))) == partial


def test_markdown_html_junit_show_not_selected(partial, tmp_path):
    md = markdown.to_markdown(partial)
    assert "| not selected |" in md and "| 0 | 1 |" in md
    page = html.to_html(partial)
    assert 'class="chip st-not_selected"' in page and "not selected" in page
    root = ET.parse(junit.write(partial, tmp_path)).getroot()
    skipped = [s.get("message") for s in root.iter("skipped")]
    assert any(m.startswith("not selected") for m in skipped)
    assert any(m.startswith("not run: --fail-fast") for m in skipped)


def test_an_unexpected_pass_fails_the_gate_unless_lenient(passing_result):
    listed = dataclasses.replace(passing_result.criteria[0], status=CriterionStatus.UNEXPECTED_PASS,
                                 expectation_reason="issue 1")
    strict = dataclasses.replace(passing_result, criteria=(listed,) + passing_result.criteria[1:])
    assert not strict.gate_passed
    lenient = dataclasses.replace(strict, run=dataclasses.replace(strict.run, expectations_mode="lenient"))
    assert lenient.gate_passed
