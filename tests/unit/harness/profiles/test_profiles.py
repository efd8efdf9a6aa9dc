"""profiles: the registry, the profile: spec, divergence tables as expectations, and the
agreement check between a table and a run (hand-built results)."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest

from harness.cli import app as cli
from harness.contract import Implementation
from harness.contract.errors import ImplementationLoadError
from harness.implementations.specs import resolve
from harness.profiles import (
    PROFILES,
    Behaviour,
    Divergence,
    Inapplicable,
    Profile,
    Source,
    disagreements,
    expectations_of,
    load,
)
from harness.report.result import CriterionStatus
from reference_impl import ReferenceRuntime, implementation
from reference_impl.policy import REFERENCE


def test_every_profile_resolves_as_an_implementation_named_by_its_spec():
    for profile in PROFILES:
        impl = resolve(profile.spec)
        assert isinstance(impl, Implementation)
        assert impl.info.name == profile.spec
        assert impl.info.features == implementation().info.features
        # a profile differs from the reference somewhere, or its system's documented
        # behaviour is the reference's own and it has nothing to explain
        assert profile.policy != REFERENCE or not (profile.divergences or profile.not_applicable)


def test_an_unknown_profile_names_the_known_ones():
    with pytest.raises(ImplementationLoadError, match="known profiles: profile:codex"):
        resolve("profile:aider")


def test_a_profile_opens_the_reference_runtime_with_its_own_policy(tmp_path):
    impl = load("opencode")
    runtime = impl.open(str(tmp_path / "d"), world=SimpleNamespace())
    assert isinstance(runtime, ReferenceRuntime)
    assert runtime._pipeline.policy is impl.profile.policy
    runtime.close()


def test_every_divergence_cites_a_source_and_its_explanation_carries_it():
    for profile in PROFILES:
        for divergence in profile.divergences:
            assert divergence.behaviour.strip() and (
                divergence.sources or divergence.observed or divergence.assumption)
            for source in divergence.sources:
                assert source.quote in divergence.explanation
        assert set(expectations_of(load(profile.name))) == {d.criterion for d in profile.divergences}


def test_the_reference_has_no_divergence_table():
    assert expectations_of(implementation()) is None


SOURCE = (Source("seed 004 §19.4.2", "连续被拦截 3 次或累计 20 次"),)
BEHAVIOURS = tuple(Behaviour(seam, "as the reference", SOURCE)
                   for seam in ("denial limit", "restart", "pending waits", "classifier"))


def test_a_criterion_listed_twice_is_refused():
    twice = (Divergence("L3.1", "a", SOURCE), Divergence("L3.1", "b", SOURCE))
    with pytest.raises(ValueError, match="listed twice"):
        Profile("p", "P", "", REFERENCE, BEHAVIOURS, twice)
    with pytest.raises(ValueError, match="listed twice"):
        Profile("p", "P", "", REFERENCE, BEHAVIOURS, twice[:1], (Inapplicable("L3.1", "c", SOURCE),))


def test_every_seam_is_said_once():
    with pytest.raises(ValueError, match="each seam"):
        Profile("p", "P", "", REFERENCE, BEHAVIOURS[:3], ())


def _result(**statuses):
    return SimpleNamespace(criteria=[SimpleNamespace(id=cid.replace("_", "."), status=CriterionStatus(s))
                                     for cid, s in statuses.items()])


PROFILE = Profile("p", "P", "", REFERENCE, BEHAVIOURS,
                  (Divergence("L3.1", "b", SOURCE), Divergence("L4.3", "b", SOURCE)),
                  (Inapplicable("L3.5", "no counters", SOURCE),))


def test_a_run_that_matches_the_table_agrees():
    result = _result(L3_1="not_exercised", L4_3="expected_fail", L3_5="not_applicable",
                     X1="passed")
    assert disagreements(result, PROFILE) == ((), ())


def test_an_unexplained_failure_and_an_unfound_divergence_both_disagree():
    result = _result(L3_1="expected_fail", L4_3="unexpected_pass", L3_5="passed", X1="failed",
                     X2="error", X3="not_applicable")
    assert disagreements(result, PROFILE) == (("X1", "X2", "X3"), ("L3.5", "L4.3"))


def test_list_profiles_prints_each_spec_and_system():
    out = io.StringIO()
    assert cli.main(["list", "profiles"], stdout=out, stderr=io.StringIO()) == 0
    for profile in PROFILES:
        assert profile.spec in out.getvalue() and profile.system in out.getvalue()


def test_codex_escalation_retry_is_asked_under_a_fresh_approval_id(tmp_path):
    """Codex: an approval covers the reviewed scope only; running outside the sandbox is a
    new question with its own id (the reference's escalation wait, kept by the profile)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "reference_impl"))
    from ref_fakes import FakeWorld, Reply, ask, call, config

    world = FakeWorld(replies={"s1": [Reply("", (call("c1", "Bash", command="npm i -g tsc"),)),
                                      Reply("done")]},
                      tool_behaviour={"c1": ["escalate", "ok"]})
    runtime = load("codex").open(str(tmp_path / "d"), world)
    runtime.open_session(config(rules=(ask("Bash"),)))
    runtime.run_turn("s1", "install")
    runtime.answer_approval(world.prompts[0].wait_id, True)
    assert len(world.prompts) == 2
    permission, escalation = (p.wait_id for p in world.prompts)
    assert permission != escalation
    runtime.answer_approval(escalation, True)
    assert [inv.sandboxed for inv in world.ledger] == [True, False]
    runtime.close()
