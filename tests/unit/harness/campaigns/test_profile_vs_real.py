"""compare, profile beside real: which reports pair, the common scenarios, the real CLI's n/a
kept, per-criterion and per-scenario agreement, on hand-built reports and on reports saved
from real runs (trimmed: tests/unit/harness/campaigns/data/)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

pytest.importorskip("pandas")

from harness.cli import app as cli  # noqa: E402
from harness.campaigns import profile_vs_real as vs  # noqa: E402
from harness.contract.errors import UsageError  # noqa: E402

DATA = Path(__file__).parent / "data"
UNSEEN = "L4.9 is judged on the implementation's store or its lifecycle events, which " \
         "cannot be read here: a black-box CLI"


def verdict(cid, status, note=""):
    return {"criterion_id": cid, "status": status, "evidence": [{"note": note}] if note else []}


def scenario(sid, *verdicts, status="passed"):
    return {"id": sid, "status": status, "replay": f"lifecycle-harness replay {sid}.toml",
            "verdicts": list(verdicts)}


def report(name, criteria, *scenarios):
    return {"implementation": {"name": name, "version": "1"},
            "criteria": [{"id": cid, "stage": cid[:2].lower(), "title": f"title {cid}",
                          "status": status, "violations": [], "expectation_reason": reason}
                         for cid, status, reason in criteria],
            "scenarios": list(scenarios)}


REAL = report(
    "cli:codex",
    [("L4.3", "failed", ""), ("M4", "passed", ""), ("L4.9", "not_applicable", UNSEEN)],
    scenario("crash", verdict("L4.3", "fail", "dropped"), verdict("M4", "pass"),
             verdict("L4.9", "not_applicable", UNSEEN), status="failed"),
    scenario("eof", verdict("L4.3", "not_exercised"), verdict("M4", "pass"),
             verdict("L4.9", "not_applicable", UNSEEN)),
    scenario("only-real", verdict("L4.3", "pass"), verdict("M4", "not_exercised"),
             verdict("L4.9", "not_applicable", UNSEEN)),
)
PROFILE = report(
    "profile:codex",
    [("L4.3", "passed", ""), ("M4", "failed", ""), ("L4.9", "passed", "")],
    scenario("crash", verdict("L4.3", "pass"), verdict("M4", "pass"), verdict("L4.9", "pass")),
    scenario("eof", verdict("L4.3", "not_exercised"), verdict("M4", "pass"),
             verdict("L4.9", "pass")),
    # outside the real CLI's set: its M4 failure must not reach the side by side
    scenario("auto-mode", verdict("L4.3", "pass"), verdict("M4", "fail"),
             verdict("L4.9", "fail"), status="failed"),
)


def view(profile=PROFILE, real=REAL):
    return vs.side_by_side(vs.read_side(profile, "p.json"), vs.read_side(real, "r.json"))


def test_only_the_common_scenarios_are_compared_and_the_others_are_counted():
    side = view()
    assert side.common == 2
    assert side.only_real == ("only-real",)
    assert side.outside_real == 1
    assert list(side.scenarios["scenario"]) == ["crash", "eof"]


def test_a_criterion_recomputed_over_the_common_scenarios_only():
    rows = view().criteria.set_index("criterion")
    # the profile's report fails M4 (in a scenario the real CLI cannot run): here it passes
    assert rows.loc["M4", "profile"] == "pass (2)" and rows.loc["M4", "real"] == "pass (2)"
    assert rows.loc["M4", "differ"] == 0 and bool(rows.loc["M4", "agree"])
    assert rows.loc["L4.3", "profile"] == "pass (1)"
    assert rows.loc["L4.3", "real"] == "FAIL ×1 (1)"
    assert rows.loc["L4.3", "differ"] == 1 and rows.loc["L4.3", "opposed"] == 1
    assert not rows.loc["L4.3", "agree"]


def test_what_the_real_cli_cannot_show_stays_na_on_both_sides_with_its_reason():
    rows = view().criteria.set_index("criterion")
    assert (rows.loc["L4.9", "profile"], rows.loc["L4.9", "real"]) == ("n/a", "n/a")
    assert rows.loc["L4.9", "reason"] == UNSEEN
    # a report of older schema, the reason only in the verdicts: found there
    older = json.loads(json.dumps(REAL))
    older["criteria"][2]["expectation_reason"] = ""
    assert view(real=older).criteria.set_index("criterion").loc["L4.9", "reason"] == UNSEEN


def test_each_scenario_lists_the_criteria_whose_verdict_differs():
    rows = view().scenarios.set_index("scenario")
    assert rows.loc["crash", "differences"] == "L4.3 pass / FAIL"
    assert (rows.loc["crash", "profile"], rows.loc["crash", "real"]) == ("passed", "failed")
    assert rows.loc["eof", "differences"] == ""
    assert rows.loc["crash", "replay"] == "lifecycle-harness replay crash.toml"


def test_the_profiles_own_na_is_shown_with_its_reason():
    profile = json.loads(json.dumps(PROFILE))
    profile["criteria"][0].update(status="not_applicable", expectation_reason="no such thing")
    rows = view(profile=profile).criteria.set_index("criterion")
    assert rows.loc["L4.3", "profile"] == "n/a"
    assert rows.loc["L4.3", "reason"] == "profile:codex: no such thing"
    assert not rows.loc["L4.3", "agree"]


def test_pairs_match_a_profile_with_the_cli_it_models_only():
    reports = [(report(name, [("X1", "passed", "")]), f"{i}.json", name) for i, name in
               enumerate(["reference", "profile:codex@cli", "cli:codex", "cli:claude-code",
                          "profile:claude-code-print", "profile:opencode"])]
    assert vs.pairs(reports) == [(1, 2), (4, 3)]


@pytest.mark.parametrize("broken, where", [
    ({"implementation": {"name": "cli:codex"}, "criteria": [{"id": "X1", "status": "passed"}]},
     "scenarios is missing"),
    ({"implementation": {}, "criteria": [], "scenarios": []}, "implementation.name"),
    (report("cli:codex", [("X1", "passed", "")], {"id": "s", "verdicts": [{"status": "pass"}]}),
     "criterion_id"),
])
def test_a_report_it_cannot_read_is_refused_naming_what_is_missing(broken, where):
    with pytest.raises(UsageError, match=where):
        vs.read_side(broken, "bad.json")


def test_no_common_scenario_is_refused_with_the_fix():
    real = report("cli:codex", [("X1", "passed", "")], scenario("a", verdict("X1", "pass")))
    profile = report("profile:codex", [("X1", "passed", "")], scenario("b", verdict("X1", "pass")))
    with pytest.raises(UsageError, match="profile:codex@cli"):
        vs.side_by_side(vs.read_side(profile, "p"), vs.read_side(real, "r"))


def _compare(tmp_path, *documents):
    paths = []
    for i, document in enumerate(documents):
        path = tmp_path / f"r{i}.json"
        path.write_text(json.dumps(document), encoding="utf-8")
        paths.append(str(path))
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["compare", *paths, "--html", str(tmp_path / "c.html")], stdout=out,
                    stderr=err)
    return code, out.getvalue(), err.getvalue(), (tmp_path / "c.html").read_text("utf-8")


def test_the_compare_command_adds_the_side_by_side_to_its_markdown_and_html(tmp_path):
    code, out, err, page = _compare(tmp_path, PROFILE, REAL)
    assert code == 0, err
    assert "### Profile beside the real CLI: profile:codex beside cli:codex" in out
    assert "| L4.3 | pass (1) | FAIL ×1 (1) | 1 (1) |" in out
    assert "n/a on both sides (1): L4.9" in out
    assert "| crash | passed | failed | L4.3 pass / FAIL |" in out
    assert "Profile beside the real CLI" in page and page.rstrip().endswith("</html>")


def test_without_a_pair_compare_prints_no_side_by_side(tmp_path):
    code, out, _, _ = _compare(tmp_path, REAL, REAL)
    assert code == 0 and "Profile beside the real CLI" not in out


def test_saved_reports_of_real_runs_compare_on_their_common_scenarios(tmp_path):
    """Reports saved from `run --impl cli:codex` and `run --impl profile:codex@cli`, trimmed
    to a few scenarios (the crash mid-tool, a cut stream, a refused approval)."""
    real = json.loads((DATA / "cli-codex.report.json").read_text("utf-8"))
    profile = json.loads((DATA / "profile-codex-at-cli.report.json").read_text("utf-8"))
    # the real run's report gives every criterion pass, fail, or n/a with its reason
    assert all(c["expectation_reason"] for c in real["criteria"]
               if c["status"] == "not_applicable")
    side = view(profile=profile, real=real)
    rows = side.criteria.set_index("criterion")
    judged = rows[rows["real"] != "n/a"]
    assert set(judged.index) == {"X3", "L1.8", "L3.4", "L4.3", "M3", "M4", "M5"}
    assert (rows.loc["L4.3", "profile"].startswith("pass")
            and rows.loc["L4.3", "real"].startswith("pass"))  # neither re-runs the cut call
    assert rows.loc["M3", "real"].startswith("FAIL") and rows.loc["M3", "profile"] == "pass (1)"
    scenarios = side.scenarios.set_index("scenario")
    assert "M3 pass / FAIL" in scenarios.loc["m-transport-error", "differences"]
    code, out, err, _ = _compare(tmp_path, profile, real)
    assert code == 0, err
    assert "profile:codex@cli beside cli:codex" in out
