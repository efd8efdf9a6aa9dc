"""Conformance levels: the core cannot be declared away; optional features gate what they list."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import jsonschema
import pytest
from suite_fakes import FakeImplementation, FakeScenario, criterion, fake_runner, render_faults

from harness.cli import app as cli
from harness.contract import conformance
from harness.contract.conformance import FeatureState, assess, parse_feature_list, scenario_requirements
from harness.contract import CORE_FEATURES, OPTIONAL_FEATURES, Feature, ImplementationInfo
from harness.criteria import l1, l2, l3, l4, l5, m, x
from harness.criteria.catalogue import CRITERIA
from harness.contract.errors import ScenarioError, UsageError
from harness.report import json_report
from harness.report.text import level_line
from harness.report.result import CriterionStatus, ScenarioStatus
from harness.scenarios.loader import DEFAULT_SCENARIO_DIR, discover, loads
from harness.running.suite import run_suite

REPO = Path(__file__).resolve().parents[4]
SCHEMA = json.loads((REPO / "fixtures" / "report.schema.json").read_text(encoding="utf-8"))
ALL_OPTIONAL = ", ".join(sorted(OPTIONAL_FEATURES))


def _c(cid, status="passed", gates=()):
    return SimpleNamespace(id=cid, status=CriterionStatus(status), required_features=gates)


# --------------------------------------------------------------------------- the tables


def test_core_and_optional_partition_the_features_and_the_table_covers_each_optional_one():
    assert CORE_FEATURES | OPTIONAL_FEATURES == frozenset(Feature)
    assert not CORE_FEATURES & OPTIONAL_FEATURES
    assert {Feature.AUTO_MODE, Feature.APPROVALS, Feature.MODEL_EVENTS} <= CORE_FEATURES
    assert {o.feature for o in conformance.OPTIONAL} == OPTIONAL_FEATURES
    ids = {c.id for c in CRITERIA}
    for entry in conformance.OPTIONAL:
        assert entry.criteria and set(entry.criteria) <= ids, entry.feature
        assert entry.why_optional


def test_the_catalogue_gates_exactly_what_the_table_lists_and_nothing_core():
    gated = {c.id: set(c.required_features) for c in CRITERIA if c.required_features}
    table = {cid: {e.feature} for e in conformance.OPTIONAL for cid in e.criteria}
    assert gated == table
    assert all(not (set(c.required_features) & CORE_FEATURES) for c in CRITERIA)
    # 51 of 55 criteria are core: an implementation declaring nothing is judged on them all
    assert sum(1 for c in CRITERIA if not c.required_features) == len(CRITERIA) - 4


def test_no_stage_module_gates_a_criterion_on_an_optional_feature_the_table_omits():
    for module in (x, l1, l2, l3, l4, l5, m):
        for c in module.CRITERIA:
            optional = set(c.required_features) & OPTIONAL_FEATURES
            assert optional <= set(conformance.gates_of(c.id)), (c.id, optional)


def test_core_always_applies_drops_core_features_only():
    built = (criterion("A", required=(Feature.AUTO_MODE, Feature.WEB_PROJECTION)),
             criterion("B", required=(Feature.APPROVALS,)), criterion("C"))
    a, b, c = conformance.core_always_applies(built)
    assert a.required_features == (Feature.WEB_PROJECTION,)
    assert b.required_features == () and c is built[2]


# --------------------------------------------------------------------------- feature lists


def test_parse_feature_list_names_all_and_core():
    assert parse_feature_list("web_projection, sandbox_escalation") == (
        Feature.SANDBOX_ESCALATION, Feature.WEB_PROJECTION)
    assert set(parse_feature_list("all")) == OPTIONAL_FEATURES
    assert parse_feature_list("auto_mode,multi_instance") == (Feature.MULTI_INSTANCE,)


@pytest.mark.parametrize("text", ["bogus", "web_projection,nope", " , "])
def test_parse_feature_list_rejects_unknown_names_as_usage_errors(text):
    with pytest.raises(UsageError) as caught:
        parse_feature_list(text)
    assert caught.value.exit_code == 2
    assert "--require-features" in str(caught.value)


# --------------------------------------------------------------------------- scenarios


SCENARIO = """
id = "needs"
stage = "l4"
{requires}
[[sessions]]
id = "s1"
[[tools]]
name = "write_file"
kind = "write"
[[model]]
text = "done"
[[steps]]
do = "turn"
text = "go"
"""


def test_requires_loads_optional_features_and_rejects_core_or_unknown_ones():
    scenario = loads(SCENARIO.format(requires='requires = ["web_projection"]'))
    assert scenario.requires == (Feature.WEB_PROJECTION,)
    assert scenario_requirements(scenario) == (Feature.WEB_PROJECTION,)
    assert loads(SCENARIO.format(requires="")).requires == ()
    with pytest.raises(ScenarioError, match=r"requires\[0\].*'auto_mode' is core"):
        loads(SCENARIO.format(requires='requires = ["auto_mode"]'))
    with pytest.raises(ScenarioError, match=r"requires\[0\].*'teleport' is not a feature"):
        loads(SCENARIO.format(requires='requires = ["teleport"]'))


def test_scenario_content_implies_its_features_and_bundled_files_say_so_explicitly():
    implied = {}
    for scenario in discover([str(DEFAULT_SCENARIO_DIR)]):
        needs = set(scenario_requirements(scenario))
        assert needs == set(scenario.requires), scenario.id  # the file states what it needs
        if needs:
            implied[scenario.id] = needs
    assert implied["l4-concurrent-duplicates"] == {Feature.MULTI_INSTANCE}
    assert implied["l1-old-checkpoints"] == {Feature.CHECKPOINT_IMPORT}
    assert implied["l2-escalation-after-sandbox"] == {Feature.SANDBOX_ESCALATION}
    # even without `requires`, a concurrent turn needs two instances
    bare = SimpleNamespace(steps=(SimpleNamespace(do="concurrent_turn"),), tool_behaviours=())
    assert scenario_requirements(bare) == (Feature.MULTI_INSTANCE,)


# --------------------------------------------------------------------------- the level


def test_a_passing_run_names_the_level_and_what_is_not_claimed():
    criteria = [_c("X1"), _c("L2.3"), _c("L2.11", gates=("sandbox_escalation",)),
                _c("L5.4", "not_applicable", gates=("web_projection",))]
    level = assess(criteria, ["auto_mode", "sandbox_escalation"])
    assert level.conformant and level.core_met
    assert level.core_criteria == ("X1", "L2.3")
    assert level.headline == ("conformant: core + sandbox_escalation; not claimed: "
                              "checkpoint_import, multi_instance, web_projection")
    states = {f.feature: f.state for f in level.features}
    assert states["sandbox_escalation"] is FeatureState.MET
    assert states["web_projection"] is FeatureState.NOT_CLAIMED


def test_any_core_criterion_not_passed_means_not_conformant():
    for status in ("failed", "error", "not_exercised", "not_applicable", "expected_fail"):
        level = assess([_c("X1"), _c("L2.3", status)], Feature)
        assert not level.conformant and not level.core_met and level.level == ""
        assert level.headline.startswith(
            f"not conformant: core not met (L2.3 {status.replace('_', ' ')})"), status


def test_a_core_feature_in_a_criterion_gate_does_not_make_it_optional():
    level = assess([_c("L2.3", "failed", gates=("auto_mode",))], [])
    assert level.core_criteria == ("L2.3",) and not level.core_met


def test_a_declared_feature_that_fails_is_named_with_the_level_still_reached():
    criteria = [_c("X1"), _c("L2.11", "failed", gates=("sandbox_escalation",))]
    level = assess(criteria, ["sandbox_escalation"])
    assert not level.conformant and level.core_met
    assert level.headline.startswith(
        "not conformant: declared sandbox_escalation not met (L2.11 failed); level reached: core;")


def test_a_declared_feature_none_of_whose_criteria_ran_is_not_met():
    level = assess([_c("X1")], ["web_projection"])
    web = next(f for f in level.features if f.feature == "web_projection")
    assert web.state is FeatureState.FAILING and not level.conformant


def test_required_features_must_be_declared_and_met():
    criteria = [_c("X1"), _c("L2.11", gates=("sandbox_escalation",)),
                _c("L4.10", "failed", gates=("multi_instance",))]
    level = assess(criteria, ["sandbox_escalation", "multi_instance"],
                   required=["sandbox_escalation", "web_projection", "multi_instance"])
    assert level.required == ("multi_instance", "sandbox_escalation", "web_projection")
    assert level.required_unmet == (
        "multi_instance is required but not met (L4.10 failed)",
        "web_projection is required but the implementation does not declare it (and no "
        "scenario showed it)",
    )
    assert "web_projection is required but the implementation does not declare it" in level.headline
    met = assess(criteria[:2], ["sandbox_escalation"], required=["sandbox_escalation"])
    assert met.required_unmet == () and met.conformant
    # a demand is met by behaviour too: shown and passed, though never declared
    shown = assess(criteria[:2], [], shown=["sandbox_escalation"], required=["sandbox_escalation"])
    assert shown.required_unmet == () and shown.conformant


# --------------------------------------------------------------------------- shown by behaviour


def test_a_feature_shown_but_not_declared_is_in_force_and_named_distinctly():
    criteria = [_c("X1"), _c("L5.4", gates=("web_projection",)),
                _c("L2.11", "not_applicable", gates=("sandbox_escalation",))]
    level = assess(criteria, [], shown=["web_projection"])
    assert level.conformant and level.claimed == ("web_projection",)
    assert level.shown_not_declared == ("web_projection",)
    assert level.level == "core + web_projection (shown, not declared)"
    assert level.headline == ("conformant: core + web_projection (shown, not declared); not "
                              "claimed: checkpoint_import, multi_instance, sandbox_escalation")
    web = next(f for f in level.features if f.feature == "web_projection")
    assert web.shown and not web.declared and web.state is FeatureState.MET
    # declared and shown: named plainly
    both = assess(criteria, ["web_projection"], shown=["web_projection"])
    assert both.level == "core + web_projection" and both.shown_not_declared == ()


def test_a_shown_feature_whose_criterion_fails_is_not_met_and_says_it_was_not_declared():
    criteria = [_c("X1"), _c("L5.4", "failed", gates=("web_projection",))]
    level = assess(criteria, [], shown=["web_projection"])
    assert not level.conformant and level.core_met
    assert level.headline.startswith(
        "not conformant: web_projection (shown, not declared) not met (L5.4 failed); "
        "level reached: core;")
    # neighbour: the same failure with the behaviour never shown and nothing declared is
    # not the level's business (the suite makes such a criterion n/a, never failed)
    assert assess(criteria, []).conformant


def test_errored_scenarios_leave_the_core_unjudged():
    level = assess([_c("X1")], [], scenarios_errored=2)
    assert not level.core_met and "2 scenario(s) errored" in level.headline


# --------------------------------------------------------------------------- the suite


@dataclass(frozen=True, slots=True)
class NeedyScenario(FakeScenario):
    requires: tuple[str, ...] = ()


def _impl(*features):
    return FakeImplementation(ImplementationInfo("fake-impl", "9.9", tuple(features)))


def _suite(scenarios, criteria, features=(), **kwargs):
    calls: list = []
    result = run_suite(_impl(*features), scenarios, 1, criteria=criteria,
                       runner=fake_runner(calls, features=tuple(features)),
                       fault_renderer=render_faults, **kwargs)
    return result, calls


def test_a_scenario_written_for_an_undeclared_feature_runs_and_its_core_verdicts_count():
    plain = FakeScenario("plain", marks=("A:ok",))
    needy = NeedyScenario("needy", marks=("A:bad", "W:bad"), requires=("web_projection",))
    criteria = (criterion("A"), criterion("W", required=(Feature.WEB_PROJECTION,)))
    result, calls = _suite((plain, needy), criteria)
    assert [c[0] for c in calls] == ["plain", "needy"]  # run whatever is declared
    ran = result.scenarios[1]
    assert ran.status is ScenarioStatus.FAILED and ran.requires == ("web_projection",)
    assert ran.features_shown == ()
    verdicts = {v.criterion_id: v for v in ran.verdicts}
    assert verdicts["A"].status == "fail"  # the core is judged there too
    assert verdicts["W"].status == "not_applicable"  # behaviour absent, nothing declared
    assert "neither declares web_projection nor showed it" in verdicts["W"].evidence[0].note
    status = {c.id: c.status for c in result.criteria}
    assert status == {"A": CriterionStatus.FAILED, "W": CriterionStatus.NOT_APPLICABLE}
    assert not result.gate_passed


def test_a_feature_shown_by_behaviour_brings_its_criteria_whatever_is_declared():
    # the outside reviewer's case: projections published, web_projection not declared
    shows = NeedyScenario("shows", marks=("A:ok", "W:bad"), publishes=1)
    quiet = NeedyScenario("quiet", marks=("A:ok", "W:bad"))  # W:bad where nothing showed
    criteria = (criterion("A"), criterion("W", required=(Feature.WEB_PROJECTION,)))
    result, _ = _suite((shows, quiet), criteria)
    status = {c.id: c.status for c in result.criteria}
    assert status == {"A": CriterionStatus.PASSED, "W": CriterionStatus.FAILED}
    assert [v.scenario for v in result.criteria[1].violations] == ["shows"]
    assert result.scenarios[0].features_shown == ("web_projection",)
    assert not result.gate_passed
    assert result.conformance.headline.startswith(
        "not conformant: web_projection (shown, not declared) not met (W failed)")
    # the neighbour that publishes the right thing passes, and the level says how it got it
    good = NeedyScenario("good", marks=("A:ok", "W:ok"), publishes=1)
    passing, _ = _suite((good, quiet), criteria)
    assert passing.gate_passed
    assert passing.conformance.headline.startswith(
        "conformant: core + web_projection (shown, not declared); not claimed: ")


def test_a_declaration_adds_a_feature_but_removes_none_the_behaviour_shows():
    shows = NeedyScenario("shows", marks=("A:ok", "W:ok"), publishes=1)
    criteria = (criterion("A"), criterion("W", required=(Feature.WEB_PROJECTION,)))
    declared, _ = _suite((shows,), criteria, features=(Feature.WEB_PROJECTION,))
    assert declared.conformance.headline.startswith("conformant: core + web_projection;")
    # declared but never shown: still judged (a declaration adds), and unexercised fails it
    quiet = NeedyScenario("quiet", marks=("A:ok",))
    claimed, _ = _suite((quiet,), criteria, features=(Feature.WEB_PROJECTION,))
    assert {c.id: c.status for c in claimed.criteria}["W"] is CriterionStatus.NOT_EXERCISED
    assert not claimed.gate_passed


def test_an_excused_scenario_counts_no_pass_so_a_core_criterion_only_it_exercises_fails():
    excused = NeedyScenario("needy", marks=("A:ok",), requires=("sandbox_escalation",),
                            excused=("fault 1: after_wait_persisted, hit #1 -> crash: did not fire",))
    result, _ = _suite((excused,), (criterion("A"),))
    assert result.criteria[0].status is CriterionStatus.NOT_EXERCISED
    assert result.scenarios[0].status is ScenarioStatus.PASSED  # excused is no error
    assert result.scenarios[0].faults_excused == excused.excused
    assert not result.gate_passed and not result.conformance.core_met
    # its failures still count
    bad = dataclasses.replace(excused, marks=("A:bad",))
    failing, _ = _suite((bad,), (criterion("A"),))
    assert failing.criteria[0].status is CriterionStatus.FAILED


def test_declaring_nothing_cannot_turn_a_core_criterion_na_and_its_failure_fails_the_gate():
    bad = FakeScenario("bad", marks=("A:bad", "B:ok"))
    criteria = (criterion("A", required=(Feature.AUTO_MODE,)),
                criterion("B", required=(Feature.APPROVALS, Feature.MODEL_EVENTS)))
    result, _ = _suite((bad,), criteria, features=())
    status = {c.id: c.status for c in result.criteria}
    assert status == {"A": CriterionStatus.FAILED, "B": CriterionStatus.PASSED}
    assert all(c.required_features == () for c in result.criteria)
    assert not result.gate_passed
    assert result.conformance.headline.startswith("not conformant: core not met (A failed)")


def test_required_features_fail_the_gate_when_not_declared():
    good = FakeScenario("good", marks=("A:ok",))
    result, _ = _suite((good,), (criterion("A"),), required_features=("web_projection",))
    assert result.required_features == ("web_projection",)
    assert not result.gate_passed
    assert result.conformance.required_unmet == (
        "web_projection is required but the implementation does not declare it (and no "
        "scenario showed it)",)
    assert level_line(result).endswith("(required: web_projection)")


def test_report_json_with_levels_behaviour_and_requirements_validates_against_the_schema(tmp_path):
    plain = FakeScenario("plain", marks=("A:ok",))
    needy = NeedyScenario("needy", marks=("A:ok",), requires=("multi_instance",),
                          excused=("concurrent_turn #1 (hold at after_prepare): did not fire",))
    shows = NeedyScenario("shows", marks=("A:ok", "V:ok"), publishes=2)
    criteria = (criterion("A"), criterion("W", required=(Feature.MULTI_INSTANCE,)),
                criterion("V", required=(Feature.WEB_PROJECTION,)))
    result, _ = _suite((plain, needy, shows), criteria, required_features=("multi_instance",))
    data = json.loads(json_report.write(result, tmp_path).read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(SCHEMA).validate(data)
    assert data["conformance"]["headline"] == result.conformance.headline
    assert data["conformance"]["required_unmet"] == [
        "multi_instance is required but the implementation does not declare it (and no "
        "scenario showed it)"]
    assert data["conformance"]["shown_not_declared"] == ["web_projection"]
    web = next(f for f in data["conformance"]["features"] if f["feature"] == "web_projection")
    assert (web["state"], web["declared"], web["shown"]) == ("met", False, True)
    assert data["scenarios"][1]["status"] == "passed" and data["scenarios"][1]["trace_digest"]
    assert data["scenarios"][1]["faults_excused"] == list(needy.excused)
    assert data["scenarios"][2]["features_shown"] == ["web_projection"]
    assert data["criteria"][1]["required_features"] == ["multi_instance"]
    assert json_report.from_dict(data) == result
    # a run scenario must carry a digest; a skipped one no longer exists (schema 5)
    for key, value in (("trace_digest", ""), ("status", "skipped"),
                       ("features_shown", ["teleport"])):
        broken = json.loads(json.dumps(data))
        broken["scenarios"][1][key] = value
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.Draft202012Validator(SCHEMA).validate(broken)


# --------------------------------------------------------------------------- the CLI


def _cli(argv, scenarios, criteria, features=()):
    deps = cli.Deps(
        resolve_impl=lambda spec: _impl(*features),
        discover=lambda paths: tuple(scenarios),
        load_scenario=lambda path: scenarios[0],
        default_scenario_dir=lambda: ".",
        criteria=lambda: tuple(criteria),
        runner=lambda: fake_runner(features=tuple(features)),
        fault_renderer=lambda: render_faults,
    )
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(argv, deps=deps, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def _tmp_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


GOOD = NeedyScenario("good", marks=("A:ok", "W:ok"), requires=("sandbox_escalation",))
GATED = (criterion("A"), criterion("W", required=(Feature.SANDBOX_ESCALATION,)))


def test_cli_list_features_names_the_core_and_what_each_optional_feature_gates(_tmp_cwd):
    code, out, _ = _cli(["list", "features"], [GOOD], GATED)
    assert code == 0
    assert "core (always required, cannot be declared away): approvals, auto_mode" in out
    assert "optional (in force when declared or shown by behaviour; every scenario runs):" in out
    assert ('multi_instance       gates L4.10; shown when a second instance opens over the store '
            'of a live one and takes the concurrent turn; without it, its open of a second '
            'instance, while another instance is live on the data dir, raises (over the wire: '
            'an error answer to open) instead of blocking; scenarios written for it: a '
            'concurrent_turn step or requires = ["multi_instance"]') in out


def test_cli_run_prints_the_level_headline(_tmp_cwd):
    code, out, _ = _cli(["run"], [GOOD], GATED, features=(Feature.SANDBOX_ESCALATION,))
    assert code == 0
    assert ("conformant: core + sandbox_escalation; not claimed: "
            "checkpoint_import, multi_instance, web_projection") in out


def test_cli_require_features_not_declared_is_exit_1_with_a_clear_message(_tmp_cwd):
    code, out, _ = _cli(["run", "--require-features", "sandbox_escalation,web_projection"],
                        [GOOD], GATED, features=(Feature.SANDBOX_ESCALATION,))
    assert code == 1
    assert ("REQUIRED      web_projection is required but the implementation does not declare "
            "it (and no scenario showed it) (--require-features)") in out
    assert "gate FAILED" in out
    code, out, _ = _cli(["run", "--require-features", "all"], [GOOD], GATED,
                        features=tuple(OPTIONAL_FEATURES))
    assert code == 1  # declared, but checkpoint_import & co. have no criterion in this run
    code, _, _ = _cli(["run", "--require-features", "sandbox_escalation"], [GOOD], GATED,
                      features=(Feature.SANDBOX_ESCALATION,))
    assert code == 0


def test_cli_require_features_declared_but_failing_is_exit_1(_tmp_cwd):
    failing = NeedyScenario("failing", marks=("A:ok", "W:bad"), requires=("sandbox_escalation",))
    code, out, _ = _cli(["run", "--require-features", "sandbox_escalation",
                         "--expectations", str(_expect(_tmp_cwd, "W"))],
                        [failing], GATED, features=(Feature.SANDBOX_ESCALATION,))
    # W is an expected failure, so only the demanded feature fails the gate
    assert code == 1
    assert "sandbox_escalation is required but not met (W expected fail)" in out


def _expect(tmp: Path, cid: str) -> Path:
    path = tmp / "expect.toml"
    path.write_text(f'[[expected_fail]]\ncriterion = "{cid}"\nreason = "known"\n', encoding="utf-8")
    return path


@pytest.mark.parametrize("command", ["run", "replay"])
def test_cli_unknown_required_feature_is_exit_2(_tmp_cwd, command):
    argv = [command, *(["x.toml"] if command == "replay" else []), "--require-features", "warp"]
    (_tmp_cwd / "x.toml").write_text("", encoding="utf-8")
    code, _, err = _cli(argv, [GOOD], GATED)
    assert code == 2
    assert "unknown feature 'warp'" in err and ALL_OPTIONAL in err


def test_cli_replay_runs_a_scenario_written_for_an_undeclared_feature(_tmp_cwd):
    (_tmp_cwd / "x.toml").write_text("", encoding="utf-8")
    code, out, _ = _cli(["replay", "x.toml"], [GOOD], GATED)
    assert code == 0
    assert "optional features: declared none; shown by behaviour none" in out
    assert "NOT_APPLICABLE W" in out and "PASS           A" in out
    code, out, _ = _cli(["replay", "x.toml", "--require-features", "sandbox_escalation"],
                        [GOOD], GATED)
    assert code == 1 and "REQUIRED sandbox_escalation is required" in out
    # shown by behaviour in the replayed scenario: judged, and the demand is met
    shows = NeedyScenario("shows", marks=("A:ok", "V:ok"), publishes=1)
    web = (criterion("A"), criterion("V", required=(Feature.WEB_PROJECTION,)))
    code, out, _ = _cli(["replay", "x.toml", "--require-features", "web_projection"],
                        [shows], web)
    assert code == 0 and "shown by behaviour web_projection" in out and "PASS           V" in out


# --------------------------------------------------------------------------- the reference


def test_the_reference_declaring_no_features_is_judged_on_everything_its_behaviour_shows():
    """Declaring features away changes nothing for an implementation that has them: every
    scenario runs, its behaviour shows all four optional features, and all 55 criteria are
    judged and pass; the level names them "shown, not declared"."""
    import reference_impl
    from harness.mutants.mutant import Mutant, MutantImplementation

    bare = Mutant("declares-nothing", "declares no features", ("X1",),
                  contextlib.nullcontext, features=())
    implementation = MutantImplementation(reference_impl.implementation(), bare)
    assert implementation.info.features == ()
    result = run_suite(implementation, discover([str(DEFAULT_SCENARIO_DIR)]), 0)
    level = result.conformance
    assert level.core_met and not level.core_not_passed, level.core_not_passed
    assert len(level.core_criteria) == len(CRITERIA) - 4
    assert level.not_claimed == () and level.claimed == level.shown_not_declared
    assert set(level.shown_not_declared) == {f.value for f in OPTIONAL_FEATURES}
    assert result.gate_passed, level.headline
    assert all(c.status is CriterionStatus.PASSED for c in result.criteria)
    assert all(s.status is ScenarioStatus.PASSED and not s.faults_excused
               for s in result.scenarios)
    shown = {s.id: s.features_shown for s in result.scenarios}
    assert "multi_instance" in shown["l4-concurrent-duplicates"]
    assert "checkpoint_import" in shown["l1-old-checkpoints"]
    assert "sandbox_escalation" in shown["l2-escalation-after-sandbox"]


def test_the_docs_table_lists_what_each_optional_feature_gates():
    doc = (REPO / "docs" / "lifecycle.md").read_text(encoding="utf-8")
    section = doc[doc.index("## Conformance levels"):]
    for entry in conformance.OPTIONAL:
        assert f"| `{entry.feature.value}` | {', '.join(entry.criteria)} |" in section
    assert f"Every criterion not listed under an optional feature below is core: " \
           f"{len(CRITERIA) - 4} of the {len(CRITERIA)}" in section.replace("\n", " ")
