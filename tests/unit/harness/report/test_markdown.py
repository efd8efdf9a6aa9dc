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


def test_markdown_says_whether_the_determinism_check_ran(failing_result, passing_result):
    assert "Determinism check: **not run**" in markdown.to_markdown(passing_result)
    text = markdown.to_markdown(failing_result)
    assert "Determinism check: **ran**: 1 of 3 scenarios diverged" in text
    assert "### Determinism: traces diverged" in text and "`x-ok` diverged at event 4" in text
    clean = dataclasses.replace(failing_result, determinism=dataclasses.replace(
        failing_result.determinism, divergences=()))
    assert "Determinism check: **ran**: all 3 scenarios gave identical traces" in markdown.to_markdown(clean)


def test_unexpected_passes_have_their_own_section(failing_result):
    text = markdown.to_markdown(failing_result)
    section = text.split("### Unexpected passes")[1].split("###")[0]
    assert "**M2**" in section and "issue 13" in section and "**M1**" not in section
    assert "**M1**" in text.split("### Expected failures")[1].split("###")[0]


def test_stage_grid_counts_every_status(failing_result):
    lines = markdown.to_markdown(failing_result).splitlines()
    header = next(line for line in lines if line.startswith("| stage |"))
    assert header == ("| stage | passed | FAILED | ERROR | not exercised | n/a | expected fail | "
                      "unexpected pass | criteria |")
    assert "| m | 0 | 0 | 0 | 0 | 0 | 1 | 1 | 2 |" in lines
    assert "| **all** | **1** | **1** | **1** | **1** | **1** | **1** | **1** | **7** |" in lines


def test_grid_shows_only_present_statuses_and_new_ones_generically(passing_result):
    import enum

    class Extra(enum.StrEnum):
        NOT_SELECTED = "not_selected"

    criteria = (passing_result.criteria[0],
                dataclasses.replace(passing_result.criteria[1], status=Extra.NOT_SELECTED))
    lines = markdown.to_markdown(dataclasses.replace(passing_result, criteria=criteria)).splitlines()
    assert "| stage | passed | not selected | criteria |" in lines
    assert "| l5 | 0 | 1 | 1 |" in lines


def test_failures_lead_with_the_english_statement_then_the_labelled_source(failing_result):
    section = markdown.to_markdown(failing_result).split("### Failures")[1]
    assert section.index("requirement: statement L4.1") < section.index(
        "Source (design document, Chinese): 「clause L4.1」") < section.index("replay:")


def test_every_not_applicable_criterion_is_listed_with_its_reason(passing_result):
    """A black box's n/a criteria share one reason (their id first): one line for them all;
    another reason gets its own line; none is shown without one."""
    from harness.report.result import CriterionStatus

    base = passing_result.criteria[0]
    unseen = [dataclasses.replace(base, id=cid, status=CriterionStatus.NOT_APPLICABLE,
                                  expectation_reason=f"{cid} is judged on the store: a black box")
              for cid in ("X1", "X2")]
    lacking = dataclasses.replace(base, id="L3.5", status=CriterionStatus.NOT_APPLICABLE,
                                  expectation_reason="no classifier counters")
    text = markdown.to_markdown(dataclasses.replace(
        passing_result, criteria=(*unseen, lacking, base)))
    section = text.split("### Not applicable (why each cannot be judged here)")[1]
    assert "- **X1**, **X2**: is judged on the store: a black box" in section
    assert "- **L3.5**: no classifier counters" in section
    # a result that carries no reason (written before reasons were kept) says so
    assert "- **L5.3**: no reason given" in markdown.to_markdown(passing_result)
