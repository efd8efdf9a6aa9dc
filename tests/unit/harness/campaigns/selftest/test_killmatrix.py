"""The kill matrix counts a mutant as caught only by an expected criterion's failure."""

import contextlib
import io

import pytest

import reference_impl
from harness.cli import app as cli
from harness.scenarios.loader import discover
from harness.campaigns.selftest.killmatrix import matrix_lines, run_selftest
from harness.mutants.mutant import Mutant, MutantImplementation
from harness.mutants.catalogue import MUTANTS, by_name

# Two stage-L1 examples (the whole folder holds template variants too): one exercises L1.1
# (the failure table), the other L1.3 (the Bash description), which the mutants below need.
L1 = ["scenarios/l1/seventeen_distinct_failures.toml", "scenarios/l1/bash_description_only.toml"]

INERT = Mutant("inert", "changes nothing at all", ("L1.1",), contextlib.nullcontext)


def test_a_real_defect_is_caught_and_an_inert_mutant_is_not():
    overflow = by_name("failure-table-overflows")
    reference_result, selftest = run_selftest(
        reference_impl.implementation(), discover(L1), [overflow, INERT], 0
    )
    assert selftest.reference_passed
    caught, inert = selftest.mutants
    assert caught.caught and "L1.1" in caught.killed_by
    assert caught.scenarios_run  # only the scenarios exercising L1.1 on the reference
    assert set(caught.scenarios_run) <= {s.id for s in reference_result.scenarios}
    assert not inert.caught and inert.killed_by == ()
    assert selftest.mutation_score == 0.5
    assert not selftest.passed
    assert selftest.kills_per_criterion["L1.1"] == 1
    assert "L1.2" in selftest.blind_criteria and "L1.1" not in selftest.blind_criteria
    lines = matrix_lines(selftest, [c.id for c in reference_result.criteria])
    assert any(line.startswith("failure-table-overflows") and "caught" in line for line in lines)
    assert any(line.startswith("inert") and "MISSED" in line for line in lines)


def test_forked_jobs_give_the_same_matrix_as_one_process():
    mutants = [by_name("failure-table-overflows"), by_name("bash-key-keeps-description")]
    scenarios = discover(L1)
    _, serial = run_selftest(reference_impl.implementation(), scenarios, mutants, 0, jobs=1)
    _, forked = run_selftest(reference_impl.implementation(), scenarios, mutants, 0, jobs=2)
    assert serial == forked


def test_a_mutant_implementation_is_named_after_its_mutant_and_reads_the_base_fixtures():
    implementation = MutantImplementation(reference_impl.implementation(), INERT)
    assert implementation.info.name == "reference+inert"
    assert implementation.fixture_module == "reference_impl"


def _selftest_cli(monkeypatch, mutants, *extra):
    monkeypatch.setattr(cli, "_mutants", lambda: tuple(mutants))
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["selftest", "--scenarios", *L1, "--jobs", "1", *extra], stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_selftest_exits_0_when_every_mutant_is_caught(monkeypatch, tmp_path):
    code, out, _ = _selftest_cli(
        monkeypatch, [by_name("failure-table-overflows")], "--report-dir", str(tmp_path)
    )
    assert code == 0, out
    assert "mutation score 100%" in out
    assert (tmp_path / "report.json").is_file() and (tmp_path / "report.html").is_file()


def test_selftest_exits_1_and_names_the_survivor(monkeypatch, tmp_path):
    code, out, _ = _selftest_cli(
        monkeypatch, [by_name("failure-table-overflows"), INERT], "--report-dir", str(tmp_path)
    )
    assert code == 1
    assert "MISSED inert: changes nothing at all (expected L1.1)" in out
    assert "--impl mutant:inert" in out


def test_unknown_mutant_name_is_a_usage_error(monkeypatch, tmp_path):
    code, _, err = _selftest_cli(monkeypatch, MUTANTS, "--mutants", "nope", "--report-dir", str(tmp_path))
    assert code == 2
    assert "unknown mutant(s) nope" in err


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_every_catalogued_mutant_applies_and_names_known_criteria(mutant):
    from harness.criteria.catalogue import CRITERIA

    from harness.criteria.fault_coverage import FAULT_FIRED

    ids = {c.id for c in CRITERIA} | {FAULT_FIRED}
    assert mutant.expected and set(mutant.expected) <= ids
    with mutant.patches():  # every find text still matches the current reference
        pass


def test_a_skipped_failpoint_is_killed_by_the_fault_fired_judgement():
    from harness.criteria.fault_coverage import FAULT_FIRED

    skipped = by_name("result-saved-failpoint-only-for-idempotent-tools")
    # one scenario that crashes after a write's saved result, one without any fault
    chosen = discover(["scenarios/l4/crash_after_result_saved.toml", "scenarios/m/eof_without_text.toml"])
    reference_result, selftest = run_selftest(
        reference_impl.implementation(), chosen, [skipped, INERT], 0)
    caught, inert = selftest.mutants
    assert caught.caught and FAULT_FIRED in caught.killed_by
    assert caught.scenarios_run == ("l4-crash-after-result-saved",)  # scenarios with faults first
    assert any("did not fire" in error for error in caught.scenario_errors)
    assert FAULT_FIRED not in inert.killed_by  # no unfired fault, no kill
    assert FAULT_FIRED not in selftest.kills_per_criterion  # not a criterion
    lines = matrix_lines(selftest, [c.id for c in reference_result.criteria])
    row = next(line for line in lines if line.startswith(skipped.name))
    assert "caught" in row and row.endswith("#")  # its own last column
    assert lines[-1].endswith("1")  # and its kill count


def _dying():
    import os
    import signal

    os.kill(os.getpid(), signal.SIGKILL)
    yield  # pragma: no cover


DYING = Mutant("dying", "kills its own worker process", ("L1.1",), contextlib.contextmanager(_dying))


def test_a_mutant_that_kills_its_worker_is_its_own_miss_not_the_runs():
    mutants = [by_name("failure-table-overflows"), DYING]
    _, selftest = run_selftest(reference_impl.implementation(), discover(L1), mutants, 0, jobs=2)
    caught, dying = selftest.mutants
    assert caught.caught and not dying.caught
    assert "SIGKILL" in dying.scenario_errors[0]


def test_selftest_shards_merge_into_the_unsharded_kill_matrix(monkeypatch, tmp_path):
    import json

    mutants = [by_name("failure-table-overflows"), by_name("bash-key-keeps-description"), INERT]
    _selftest_cli(monkeypatch, mutants, "--report-dir", str(tmp_path / "all"))
    for i in (1, 2):
        _selftest_cli(monkeypatch, mutants, "--shard", f"{i}/2", "--report-dir", str(tmp_path / f"p{i}"))
    assert json.loads((tmp_path / "p1" / "shard.json").read_text())["kind"] == "selftest"
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["merge", str(tmp_path / "p1"), str(tmp_path / "p2"), "--report-dir",
                     str(tmp_path / "merged")], stdout=out, stderr=err)
    assert code == 1, err.getvalue()  # inert is missed in the merge too
    merged = json.loads((tmp_path / "merged" / "report.json").read_text())
    whole = json.loads((tmp_path / "all" / "report.json").read_text())
    assert merged["selftest"] == whole["selftest"]
    assert [m["name"] for m in merged["selftest"]["mutants"]] == [m.name for m in mutants]


# --------------------------------------------------------------- early stop and ordering

L1_TABLE = ["scenarios/l1/seventeen_distinct_failures.toml",
            "scenarios/l1/eviction_keeps_repeat_judgement.toml"]


def test_a_mutant_stops_at_the_scenario_where_its_criterion_failed_and_full_runs_on():
    overflow = by_name("failure-table-overflows")
    chosen = discover(L1_TABLE)
    reference_result, stopped = run_selftest(reference_impl.implementation(), chosen, [overflow], 0)
    both_exercise = [s.id for s in reference_result.scenarios
                     if any(v.criterion_id == "L1.1" and v.exercised for v in s.verdicts)]
    assert len(both_exercise) == 2  # so stopping after the first one skips a real candidate
    (mutant,) = stopped.mutants
    assert mutant.caught and "L1.1" in mutant.killed_by
    assert mutant.scenarios_run == (both_exercise[0],)
    _, full = run_selftest(reference_impl.implementation(), chosen, [overflow], 0, full=True)
    assert full.mutants[0].scenarios_run == tuple(s.id for s in chosen)
    assert full.mutants[0].caught


def _together(*names):
    def patches():
        stack = contextlib.ExitStack()
        for name in names:
            stack.enter_context(by_name(name).patches())
        return stack

    return patches


def test_a_mutant_naming_two_criteria_runs_on_until_both_failed():
    # the first scenario catches L1.1 only; L1.3 fails on the second one
    both = Mutant("overflow-and-description", "both defects", ("L1.1", "L1.3"),
                  _together("failure-table-overflows", "bash-key-keeps-description"))
    _, selftest = run_selftest(reference_impl.implementation(), discover(L1), [both], 0)
    (mutant,) = selftest.mutants
    assert mutant.scenarios_run == ("l1-seventeen-distinct-failures", "l1-bash-description-only")
    assert {"L1.1", "L1.3"} <= set(mutant.killed_by)
    assert selftest.score_per_criterion["L1.3"].caught == 1


def test_a_mutant_whose_edit_no_longer_applies_is_reported_once_without_running():
    from harness.mutants.source_patch import edit, edits
    from harness.mutants.targets import FP

    stale = Mutant("stale", "edits text the reference no longer has", ("L1.1",),
                   edits(edit(FP, find="text that is not in the reference", replace="x")))
    _, selftest = run_selftest(reference_impl.implementation(), discover(L1), [stale], 0)
    (mutant,) = selftest.mutants
    assert not mutant.caught and mutant.scenarios_run == ()
    assert len(mutant.scenario_errors) == 1
    assert mutant.scenario_errors[0].startswith("the mutant does not apply: mutant edit for "
                                                "reference_impl.failure_policy")


def _planning(name, *failpoints, hold=None):
    from types import SimpleNamespace

    faults = tuple(SimpleNamespace(failpoint=f, optional=False) for f in failpoints)
    steps = (SimpleNamespace(do="concurrent_turn", hold_at=hold),) if hold else ()
    return SimpleNamespace(id=name, faults=faults, steps=steps)


def test_fault_fired_candidates_plan_at_every_failpoint_first():
    from harness.campaigns.selftest.killmatrix import new_plans_first

    a = _planning("a", "after_prompt")
    b = _planning("b", "after_prompt")
    c = _planning("c", "after_result_saved", "after_prompt")
    d = _planning("d", hold="after_prepare")
    e = _planning("e")
    order = [s.id for s in new_plans_first([a, b, c, d, e])]
    assert order == ["c", "d", "a", "b", "e"]  # c adds two new failpoints, d one; then suite order
    assert new_plans_first([]) == ()


def test_optional_faults_are_not_planned_failpoints():
    from types import SimpleNamespace

    from harness.campaigns.selftest.killmatrix import new_plans_first

    optional = SimpleNamespace(id="o", steps=(),
                               faults=(SimpleNamespace(failpoint="after_prompt", optional=True),))
    required = _planning("r", "after_prompt")
    assert [s.id for s in new_plans_first([optional, required])] == ["r", "o"]


def test_mutants_that_may_run_longest_start_first_and_results_keep_mutant_order():
    from types import SimpleNamespace

    from harness.campaigns.selftest.killmatrix import heaviest_first

    a, b, c, d = (SimpleNamespace(id=name) for name in "abcd")
    plans = [
        ("one-witness", (a,), ((a,),)),              # at most 1 distinct scenario
        ("two-stages", (), ((a, b), (b, c))),        # 3
        ("witness-and-stages", (d,), ((a, b, c),)),  # 4
        ("also-three", (c,), ((a, b),)),             # 3: after two-stages, its tie
    ]
    assert heaviest_first(plans) == [2, 1, 3, 0]
    assert heaviest_first([]) == []
