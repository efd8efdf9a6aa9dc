"""compare: the matrix, the per-stage summary and the run diff, from hand-built report dicts."""

from __future__ import annotations

import io
import json
import sys

import pytest

pytest.importorskip("pandas")

from harness.cli import app as cli  # noqa: E402
from harness.campaigns import compare  # noqa: E402
from harness.contract.errors import UsageError  # noqa: E402


def criterion(cid, stage, status, violations=0, reason=""):
    return {"id": cid, "stage": stage, "title": f"title {cid}", "status": status,
            "violations": [{"scenario": "s"}] * violations, "expectation_reason": reason}


def report(name, *criteria):
    return {"implementation": {"name": name, "version": "1"}, "criteria": list(criteria)}


REFERENCE = report("reference", criterion("X1", "x", "passed"), criterion("L3.1", "l3", "passed"),
                   criterion("L4.3", "l4", "passed"))
CODEX = report("profile:codex", criterion("X1", "x", "passed"),
               criterion("L3.1", "l3", "not_exercised", reason="breaker ends the turn (source: a)"),
               criterion("L4.3", "l4", "expected_fail", 2, reason="re-runs (source: b)"))


def build(*reports):
    return compare.compare(compare.labelled([(r, f"r{i}.json") for i, r in enumerate(reports)]))


def test_matrix_has_a_cell_per_criterion_and_implementation_in_given_order():
    comparison = build(REFERENCE, CODEX)
    assert list(comparison.matrix.columns) == ["reference", "profile:codex"]
    assert list(comparison.matrix.index) == ["X1", "L3.1", "L4.3"]
    assert comparison.matrix.loc["L4.3", "profile:codex"] == "diverges ×2"
    assert comparison.matrix.loc["L3.1", "profile:codex"] == "not exercised"
    assert comparison.matrix.loc["L3.1", "reference"] == "pass"


def test_stage_summary_counts_passed_over_total():
    stages = build(REFERENCE, CODEX).stages
    assert stages.loc["l3", "reference"] == "1/1"
    assert stages.loc["l3", "profile:codex"] == "0/1"
    assert stages.loc["x", "profile:codex"] == "1/1"


def test_explanations_are_carried_into_markdown_and_html():
    comparison = build(REFERENCE, CODEX)
    assert compare.explanations(comparison) == [
        ("profile:codex", "L3.1", "breaker ends the turn (source: a)"),
        ("profile:codex", "L4.3", "re-runs (source: b)"),
    ]
    markdown = compare.to_markdown(comparison)
    assert "| L4.3 | pass | diverges ×2 |" in markdown
    assert "**profile:codex** L4.3: re-runs (source: b)" in markdown
    html = compare.to_html(comparison)
    assert "re-runs (source: b)" in html and "<table" in html


def test_two_reports_of_one_implementation_give_the_diff():
    before = report("impl", criterion("A", "x", "passed"), criterion("B", "x", "failed", 1),
                    criterion("C", "x", "passed"), criterion("D", "x", "passed"))
    after = report("impl", criterion("A", "x", "failed", 3), criterion("B", "x", "passed"),
                   criterion("C", "x", "not_exercised"), criterion("D", "x", "passed"))
    comparison = build(before, after)
    assert list(comparison.matrix.columns) == ["impl #1", "impl #2"]
    changes = {(row.criterion, row.change) for row in comparison.diffs.itertuples()}
    assert changes == {("A", "newly failing"), ("B", "newly passing"), ("C", "newly not exercised")}
    assert "impl #1 → impl #2: newly failing A (passed → failed)" in compare.to_markdown(comparison)


def test_different_implementations_have_no_diff():
    assert len(build(REFERENCE, CODEX).diffs) == 0


@pytest.mark.parametrize("document, where", [
    ([], "the document"),
    ({"criteria": []}, "implementation.name"),
    ({"implementation": {"name": "x"}}, "criteria"),
    ({"implementation": {"name": "x"}, "criteria": [{"id": "A"}]}, "criteria[0]"),
])
def test_a_document_that_is_not_a_report_is_refused_by_key(document, where):
    with pytest.raises(UsageError, match=f"bad.json: {where.replace('[', '.').replace(']', '.')}"):
        compare.to_report(document, "bad.json")


def test_cli_compare_writes_md_and_html_and_exits_0(tmp_path):
    paths = []
    for name, data in (("ref", REFERENCE), ("codex", CODEX)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(data), encoding="utf-8")
        paths.append(str(path))
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["compare", *paths, "--md", str(tmp_path / "m.md"),
                     "--html", str(tmp_path / "m.html")], stdout=out, stderr=err)
    assert code == 0, err.getvalue()
    assert "| L4.3 | pass | diverges ×2 |" in out.getvalue()
    assert (tmp_path / "m.md").read_text(encoding="utf-8") == out.getvalue()
    assert "<table" in (tmp_path / "m.html").read_text(encoding="utf-8")


def test_cli_compare_missing_file_is_exit_2(tmp_path):
    err = io.StringIO()
    code = cli.main(["compare", str(tmp_path / "nope.json")], stdout=io.StringIO(), stderr=err)
    assert code == 2
    assert "report not found" in err.getvalue()


def test_missing_pandas_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(UsageError, match=r"pip install -e '\.\[matrix\]'"):
        compare.require_pandas()
