"""Mutation scores per criterion and per trust class, from hand-made kill-matrix results."""

from __future__ import annotations

import contextlib
import io
import json

import jsonschema

import reference_impl
from harness.cli import app as cli
from harness.contract import Feature
from harness.report import html, json_report, markdown
from harness.report.result import MutantResult, MutationScore
from harness.mutants import levels as mutants_levels
from harness.campaigns.selftest.killmatrix import mutation_scores, score_lines
from harness.mutants.mutant import TRUST_CLASSES, Mutant, MutantImplementation
from harness.mutants.catalogue import by_name


def _m(name, expected, killed_by, trust_class=""):
    caught = any(c in killed_by for c in expected)
    return MutantResult(name, f"defect of {name}", tuple(expected), tuple(killed_by), caught,
                        trust_class=trust_class)


MATRIX = (
    _m("a", ["L1.1"], ["L1.1", "X1"]),
    _m("b", ["L1.1", "L2.3"], ["L2.3"], "core_level"),
    _m("c", ["L2.3"], [], "core_level"),
    _m("d", ["X1"], ["L1.1"], "faults_fire"),  # killed, but not by what it expected
)


def test_per_criterion_counts_mutants_expecting_it_and_those_it_failed_on():
    per_criterion, _ = mutation_scores(MATRIX, ["X1", "L1.1", "L1.2", "L2.3"])
    assert list(per_criterion) == ["X1", "L1.1", "L1.2", "L2.3"]
    assert per_criterion["X1"] == MutationScore(expected=1, caught=0)  # a's X1 kill is extra
    assert per_criterion["L1.1"] == MutationScore(expected=2, caught=1)
    assert per_criterion["L1.2"] == MutationScore(expected=0, caught=0)
    assert per_criterion["L2.3"] == MutationScore(expected=2, caught=1)
    assert per_criterion["L1.1"].score == 0.5 and per_criterion["L1.2"].score == 0.0


def test_per_class_counts_caught_mutants_and_files_unclassed_under_criterion():
    _, per_class = mutation_scores(MATRIX, [])
    assert per_class == {
        "core_level": MutationScore(2, 1),
        "criterion": MutationScore(1, 1),
        "faults_fire": MutationScore(1, 0),
    }


def test_an_expected_id_outside_the_given_criteria_is_still_scored():
    per_criterion, _ = mutation_scores([_m("z", ["M9"], ["M9"])], ["X1"])
    assert per_criterion == {"X1": MutationScore(0, 0), "M9": MutationScore(1, 1)}


def test_score_lines_show_each_class_and_each_criterion():
    from harness.report.result import SelftestResult

    per_criterion, per_class = mutation_scores(MATRIX, ["X1", "L1.1", "L1.2", "L2.3"])
    result = SelftestResult(True, MATRIX, 0.5, {}, (), per_criterion, per_class)
    text = "\n".join(score_lines(result))
    assert "core_level           1/2 (50%)  the core cannot be declared away  <- MISSED" in text
    assert "criterion            1/1 (100%)" in text
    assert "X1 0/1" in text and "L1.1 1/2" in text and "L1.2 -" in text


def test_the_levels_mutants_declare_everything_away_and_carry_a_defect():
    core, *shown = mutants_levels.MUTANTS
    assert core.trust_class == "core_level" and "core_level" in TRUST_CLASSES
    # a defect of an optional feature the behaviour still shows (L5.4's projections,
    # L2.11's escalation): caught although nothing is declared
    assert [(m.trust_class, m.expected) for m in shown] == [
        ("shown_features", ("L5.4",)), ("shown_features", ("L2.11",))]
    assert "shown_features" in TRUST_CLASSES
    for mutant in mutants_levels.MUTANTS:
        assert mutant.features == ()
        implementation = MutantImplementation(reference_impl.implementation(), mutant)
        assert implementation.info.features == ()
        assert by_name(mutant.name) is mutant
    keeps = Mutant("keeps", "x", ("X1",), contextlib.nullcontext)
    assert MutantImplementation(reference_impl.implementation(), keeps).info.features == tuple(Feature)


def test_selftest_prints_and_reports_scores(monkeypatch, tmp_path):
    overflow = by_name("failure-table-overflows")
    monkeypatch.setattr(cli, "_mutants", lambda: (overflow,))
    out = io.StringIO()
    code = cli.main(["selftest", "--scenarios", "scenarios/l1/seventeen_distinct_failures.toml", "--jobs", "1",
                     "--report-dir", str(tmp_path)], stdout=out, stderr=io.StringIO())
    text = out.getvalue()
    assert code == 0, text
    assert "mutation score per trust class (caught/mutants):" in text
    assert "criterion            1/1 (100%)" in text
    assert "L1.1 1/1" in text
    data = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    schema = json.loads(open("fixtures/report.schema.json", encoding="utf-8").read())
    jsonschema.Draft202012Validator(schema).validate(data)
    assert data["selftest"]["score_per_class"] == {"criterion": {"expected": 1, "caught": 1}}
    assert data["selftest"]["score_per_criterion"]["L1.1"] == {"expected": 1, "caught": 1}
    result = json_report.from_dict(data)
    assert "trust class" in markdown.to_markdown(result)
    assert "trust class" in html.to_html(result)
