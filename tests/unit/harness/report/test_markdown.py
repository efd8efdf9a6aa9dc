"""report.md: gate line, failures with replay commands, not-exercised list, short."""

from __future__ import annotations

import dataclasses

from harness.report import markdown


def test_markdown_lists_failures_replays_and_not_exercised(failing_result, tmp_path):
    text = markdown.write(failing_result, tmp_path).read_text(encoding="utf-8")
    assert text.startswith("## ❌ Lifecycle conformance: gate failed")
    assert "### Failures" in text and "**L4.1**" in text and "**L4.2**" in text
    assert "`lifecycle-harness replay scenarios/l4/crash.toml --seed 7 --impl reference`" in text
    assert "### Not exercised" in text and "**L2.3**" in text
    assert "l4-hang" in text and "hung in run\\_turn" in text
    assert "issue 12" in text and "issue 13" in text
    assert "<script>" not in text and "\x00" not in text  # hostile text is escaped
    assert "X1" not in text.split("### Failures")[1].split("### Not exercised")[0]


def test_markdown_of_a_passing_run(passing_result):
    text = markdown.to_markdown(passing_result)
    assert text.startswith("## ✅ Lifecycle conformance: gate passed")
    assert "### Failures" not in text and "### Not exercised" not in text


def test_markdown_stays_short_enough_for_a_pr_comment(failing_result):
    many = tuple(
        dataclasses.replace(failing_result.criteria[1], id=f"L4.{i}", violations=failing_result.criteria[1].violations * 10)
        for i in range(400)
    )
    text = markdown.to_markdown(dataclasses.replace(failing_result, criteria=many))
    assert len(text) <= markdown.MAX_CHARS
    assert "see report.html" in text


def test_code_span_survives_backticks():
    assert markdown.code("a ` b") == "``a ` b``"


def test_a_long_not_exercised_list_fits_on_one_paragraph(failing_result):
    idle = failing_result.criteria[3]
    many = tuple(dataclasses.replace(idle, id=f"L2.{i}") for i in range(30))
    text = markdown.to_markdown(dataclasses.replace(failing_result, criteria=many))
    assert "**L2.0**, **L2.1**, **L2.2**" in text and "- **L2.0**" not in text
