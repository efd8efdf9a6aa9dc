"""Every profile against the whole suite, once each (session-scoped), through the command line,
and every profile entry tied to its evidence.

What a user reading the matrix relies on: each criterion a profile does not pass (failed,
error, not exercised, or a failure its table expected) is exactly one its divergence table
explains, each criterion it is reported n/a on is exactly one its n/a table names, the report
carries that explanation, and the matrix block of docs/matrix.md is what the generator makes
from these very runs. And each behaviour, divergence and n/a entry carries its source (a
seed section with the sentence quoted, or a public document's address) or is labelled as an
assumption: a profile with an unsupported entry cannot even be built.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from harness.cli import app as cli
from harness.profiles import (
    PROFILES,
    Behaviour,
    Divergence,
    Inapplicable,
    Observed,
    Profile,
    Source,
    load,
)
from reference_impl.policy import RuntimePolicy

pytest.importorskip("pandas")

from harness.campaigns.matrix import DOC as MATRIX_DOC  # noqa: E402
from harness.campaigns.matrix import readme_block, readme_block_of  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
NOT_PASSING = {"failed", "error", "not_exercised", "expected_fail"}
SEED_QUOTE = Source("seed 004 §19.4.2", "-p 下没有可询问的对象，被拦截的动作不运行")
SEEN = Observed("Claude Code 2.1.197", "l4-crash-after-tool-returned",
                "lifecycle-harness replay l4/crash_after_tool_returned.toml --seed 0 "
                "--impl cli:claude-code", "the resumed conversation drops the cut call")


@pytest.fixture(scope="session")
def profile_report(tmp_path_factory, run_once):
    """spec -> (exit code, report.json dict): one suite run per profile, once per test run
    whichever worker asks first (conftest.py). One result per profile, so the parametrized
    tests below build their profiles on different workers at once instead of one worker
    building all of them while the others wait."""
    def report_of(spec: str) -> tuple[int, dict]:
        def build():
            report_dir = tmp_path_factory.mktemp("profile")
            out, err = io.StringIO(), io.StringIO()
            # a generous time limit: a busy machine must not turn a slow scenario into a hang
            code = cli.main(["run", "--impl", spec, "--report-dir", str(report_dir),
                             "--time-limit-s", "60"], stdout=out, stderr=err)
            assert code in (0, 1), f"{spec}: exit {code}\n{err.getvalue()[-2000:]}"
            return [code, json.loads((report_dir / "report.json").read_text("utf-8"))]

        code, report = run_once(f"profile-report-{spec.replace(':', '-')}", build)
        return code, report

    return report_of


@pytest.mark.parametrize("name", [p.name for p in PROFILES])
def test_the_divergence_table_names_exactly_what_the_harness_finds(profile_report, name):
    profile = load(name).profile
    _, report = profile_report(profile.spec)
    found = {c["id"]: c["status"] for c in report["criteria"] if c["status"] in NOT_PASSING}
    explained = profile.explanations()
    assert set(found) - set(explained) == set(), (
        f"{profile.spec}: the harness reports divergences the table does not explain: "
        f"{ {cid: found[cid] for cid in set(found) - set(explained)} }")
    assert set(explained) - set(found) == set(), (
        f"{profile.spec}: the table explains divergences the harness does not find: "
        f"{sorted(set(explained) - set(found))}")
    inapplicable = profile.inapplicable()
    reported_na = {c["id"] for c in report["criteria"] if c["status"] == "not_applicable"}
    assert reported_na == set(inapplicable), (
        f"{profile.spec}: n/a reported {sorted(reported_na)}, the n/a table names "
        f"{sorted(inapplicable)}")
    for criterion in report["criteria"]:  # the explanation reaches the report
        wanted = explained.get(criterion["id"]) or inapplicable.get(criterion["id"], "")
        assert criterion["expectation_reason"] == wanted
    statuses = {c["status"] for c in report["criteria"]}
    assert "unexpected_pass" not in statuses and "failed" not in statuses


@pytest.mark.parametrize("name", [p.name for p in PROFILES])
def test_every_entry_carries_its_source_or_says_it_is_an_assumption(name):
    profile = load(name).profile
    assert profile.evidence_problems() == ()
    for entry in (*profile.behaviours, *profile.not_modelled, *profile.divergences,
                  *profile.not_applicable):
        assert entry.sources or entry.observed or entry.assumption.strip(), entry
        assert not entry.docs_claimed or entry.observed, entry  # contradicted by what was seen
        for seen in entry.observed:
            assert seen.problem() == "", seen
            # the replay runs a bundled scenario file on the CLI this profile models
            assert f"--impl cli:{profile.cli}" in seen.replay, seen
            scenario_file = seen.replay.split()[2]
            assert (ROOT / "scenarios" / scenario_file).is_file(), seen
        for source in (*entry.sources, *entry.docs_claimed):
            assert source.problem() == "", source
            if source.where.startswith("seed"):
                # the sentence is copied into the entry (nothing reads the seed at run or
                # test time); the seed is in Chinese, and so is every sentence quoted from it
                assert any("\u4e00" <= ch <= "\u9fff" for ch in source.quote), source
    explanations = [*profile.explanations().values(), *profile.inapplicable().values()]
    assert all("(source: " in text for text in explanations)


def _profile(divergence: Divergence | None = None, behaviour: Behaviour | None = None,
             inapplicable: Inapplicable | None = None) -> Profile:
    behaviours = [Behaviour(seam, "as the reference", (SEED_QUOTE,))
                  for seam in ("denial limit", "restart", "pending waits", "classifier")]
    if behaviour is not None:
        behaviours[0] = behaviour
    return Profile("p", "a system", "summary", RuntimePolicy(), tuple(behaviours),
                   (divergence,) if divergence else (),
                   (inapplicable,) if inapplicable else ())


@pytest.mark.parametrize("entry", [
    {"divergence": Divergence("L3.3", "ends the turn")},
    {"divergence": Divergence("L3.3", "ends the turn", (Source("the docs", "it ends"),))},
    {"divergence": Divergence("L3.3", "ends the turn", (Source("seed 004 §19.4.2", " "),))},
    {"behaviour": Behaviour("denial limit", "falls back")},
    {"inapplicable": Inapplicable("L3.5", "no counters")},
    {"behaviour": Behaviour("denial limit", "drops it", docs_claimed=(SEED_QUOTE,))},
    {"divergence": Divergence("L4.3", "drops it", (SEED_QUOTE,), docs_claimed=(SEED_QUOTE,))},
    {"divergence": Divergence("L4.3", "drops it", observed=(
        Observed("Claude Code", SEEN.scenario, SEEN.replay, SEEN.saw),))},
    {"divergence": Divergence("L4.3", "drops it", observed=(
        Observed(SEEN.cli, SEEN.scenario, "claude -p --continue", SEEN.saw),))},
    {"divergence": Divergence("L4.3", "drops it", observed=(
        Observed(SEEN.cli, SEEN.scenario, SEEN.replay, " "),))},
], ids=["divergence-without-source", "source-not-a-seed-section-or-address",
        "seed-source-quoting-nothing", "behaviour-without-source", "n/a-without-source",
        "only-what-the-docs-claimed", "docs-claimed-without-the-observation",
        "observation-without-version", "observation-without-a-replay-command",
        "observation-saying-nothing"])
def test_an_entry_without_a_source_is_refused(entry):
    with pytest.raises(ValueError, match="profile p: "):
        _profile(**entry)


@pytest.mark.parametrize("entry", [
    {"divergence": Divergence("L3.3", "ends the turn", (SEED_QUOTE,))},
    {"divergence": Divergence("L3.3", "ends the turn",
                              (Source("https://example.org/docs/permissions", "it ends"),))},
    {"divergence": Divergence("L3.3", "ends the turn", assumption="nothing documents it")},
    {"inapplicable": Inapplicable("L3.5", "no counters", assumption="no classifier")},
    {"divergence": Divergence("L4.3", "drops it", observed=(SEEN,))},
    {"divergence": Divergence("L4.3", "drops it", observed=(SEEN,),
                              docs_claimed=(SEED_QUOTE,))},
], ids=["seed-quote", "public-address", "labelled-assumption", "n/a-assumption",
        "observation", "observation-over-what-the-docs-claimed"])
def test_an_entry_with_a_source_or_an_assumption_label_is_accepted(entry):
    profile = _profile(**entry)
    assert profile.evidence_problems() == ()
    text = " ".join([*profile.explanations().values(), *profile.inapplicable().values()])
    assert "source: " in text
    (value,) = entry.values()
    assert ("assumption: " in text) == bool(value.assumption)


def test_the_corrected_rows_follow_the_seed():
    """The rows issue 27 found contradicting seed 004, as corrected."""
    claude = load("claude-code").profile
    # -p: the blocked action does not run, Claude goes on (no denial-limit divergence); the
    # only divergences are the waits the real CLI was seen to lose at a restart
    assert {d.criterion for d in claude.divergences} == {"L3.2", "L5.4"}
    assert all(d.observed and not d.sources for d in claude.divergences)
    opencode = load("opencode").profile
    assert str(opencode.policy.incomplete_calls_on_restart) == "mark_failed"
    assert not opencode.policy.classifier
    assert {"L3.5", "L3.6", "L3.7", "L3.8", "L3.9"} <= set(opencode.inapplicable())
    codex = load("codex").profile
    assert not codex.policy.waits_survive_restart
    assert {"L3.2", "L5.4"} <= set(codex.explanations())


def test_the_docs_matrix_is_generated_from_the_profile_runs(profile_report):
    page = (ROOT / MATRIX_DOC).read_text(encoding="utf-8")
    expected = readme_block([profile_report(p.spec)[1] for p in PROFILES])
    assert readme_block_of(page) == expected, (
        f"{MATRIX_DOC}'s matrix block is stale: run `lifecycle-harness matrix --update-readme "
        f"{MATRIX_DOC}`")


def test_the_rows_corrected_against_the_real_clis_cite_what_they_did():
    """Where the real CLI did otherwise than the docs (issue 27, `compare` of profile:NAME@cli
    beside cli:NAME): the observation is the evidence, the seed's sentence what the docs
    claimed."""
    for name in ("claude-code", "claude-code-print"):
        profile = load(name).profile
        assert not profile.policy.waits_survive_restart
        waits = next(b for b in profile.behaviours if b.seam == "pending waits")
        assert waits.observed and not waits.assumption
        restart = next(b for b in profile.behaviours if b.seam == "restart")
        assert restart.observed and restart.docs_claimed and not restart.sources
        assert "the docs claimed otherwise: seed 004 §19.4.4" in restart.evidence
    for name in ("codex", "opencode"):  # seen doing what their rows say: cited as such
        profile = load(name).profile
        for seam in ("restart", "pending waits"):
            entry = next(b for b in profile.behaviours if b.seam == seam)
            assert entry.observed and entry.sources and not entry.docs_claimed
