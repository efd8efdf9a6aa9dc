"""Coverage-based scenario selection: wrappers that change nothing, readings that come back
from workers, and a selection that changes no verdict of the kill matrix."""

import contextlib
import io
import sys
import types

import pytest

import reference_impl
from harness.cli import app as cli
from harness.report.result import ScenarioStatus
from harness.scenarios.loader import discover
from harness.mutants import target_coverage
from harness.campaigns.selftest.killmatrix import (
    NEVER_EXECUTED,
    kept_scenarios,
    matrix_lines,
    never_executed,
    run_selftest,
)
from harness.mutants.mutant import Mutant
from harness.mutants.catalogue import by_name
from harness.mutants.source_patch import Target, edit, edits
from harness.mutants.target_coverage import (
    Tracking,
    covering_runner,
    read_coverage,
    recording,
    tracking,
)
from harness.mutants.targets import FP
from harness.running.suite import default_runner, run_suite

SUBSET = ["scenarios/l1/bash_description_only.toml", "scenarios/l2/classifier_faults.toml",
          "scenarios/l2/slow_allow_is_a_timeout.toml", "scenarios/l3/no_double_counting.toml",
          "scenarios/l4/crash_after_result_saved.toml", "scenarios/m/eof_without_text.toml"]
"""Cheap scenarios of several stages (a fraction of a second each)."""


# ---------------------------------------------------------------- the wrappers, on a toy package


@pytest.fixture
def toy(monkeypatch):
    """A package ``lh_toy``: ``core`` defines a function and a class with every binding kind,
    ``user`` imported the function by name (as reference modules import each other)."""
    core = types.ModuleType("lh_toy.core")
    exec(
        "def double(x):\n"
        "    return 2 * x\n"
        "class Box:\n"
        "    def __init__(self, v):\n"
        "        self.v = v\n"
        "    def get(self):\n"
        "        return self.v\n"
        "    @staticmethod\n"
        "    def unit():\n"
        "        return 1\n"
        "    @classmethod\n"
        "    def make(cls, v):\n"
        "        return cls(v)\n"
        "    @property\n"
        "    def twice(self):\n"
        "        return double(self.v)\n"
        "    @twice.setter\n"
        "    def twice(self, value):\n"
        "        self.v = value // 2\n",
        vars(core),
    )
    user = types.ModuleType("lh_toy.user")
    user.double = core.double
    for module in (types.ModuleType("lh_toy"), core, user):
        monkeypatch.setitem(sys.modules, module.__name__, module)
    return core, user


def _toy_targets():
    return [Target("lh_toy.core", path) for path in
            [("double",), ("Box", "get"), ("Box", "unit"), ("Box", "make"), ("Box", "twice")]]


def test_recording_records_each_kind_of_call_and_changes_no_result(toy):
    core, user = toy
    originals = (core.double, vars(core.Box)["get"], vars(core.Box)["unit"],
                 vars(core.Box)["make"], vars(core.Box)["twice"], user.double)
    target_coverage._CALLED.clear()
    with recording(_toy_targets()):
        assert user.double(3) == 6  # through the importer's name
        box = core.Box.make(5)
        assert (box.get(), core.Box.unit(), box.twice) == (5, 1, 10)
        box.twice = 8
        assert box.v == 4
        assert user.double is core.double and core.double is not originals[0]
    assert target_coverage._CALLED == {
        "lh_toy.core:double", "lh_toy.core:Box.make", "lh_toy.core:Box.get",
        "lh_toy.core:Box.unit", "lh_toy.core:Box.twice"}
    after = (core.double, vars(core.Box)["get"], vars(core.Box)["unit"],
             vars(core.Box)["make"], vars(core.Box)["twice"], user.double)
    assert all(a is b for a, b in zip(after, originals))  # every site gets its original back


def test_a_call_that_raises_raises_the_same_and_is_recorded(toy):
    core, _ = toy
    target_coverage._CALLED.clear()
    with recording([Target("lh_toy.core", ("double",))]):
        with pytest.raises(TypeError):
            core.double()
    assert target_coverage._CALLED == {"lh_toy.core:double"}


def test_a_module_imported_while_recording_gets_the_original_back(toy):
    core, _ = toy
    original = core.double
    late = types.ModuleType("lh_toy.late")
    with recording([Target("lh_toy.core", ("double",))]):
        late.double = core.double  # `from lh_toy.core import double`, run while recording
        sys.modules["lh_toy.late"] = late
    try:
        assert late.double is original
    finally:
        del sys.modules["lh_toy.late"]


def test_a_runner_that_never_opens_the_implementation_here_records_nothing(tmp_path):
    scenario = discover(SUBSET[:1])[0]
    reference = reference_impl.implementation()
    with recording(tracking(by_name("failure-table-overflows")).targets, reference):
        covering_runner(lambda *args, **kwargs: None, str(tmp_path))(reference, scenario, 0)
    assert read_coverage(str(tmp_path)) == {}  # unknown, so kept for every mutant


def test_uncalled_targets_are_not_recorded(toy):
    core, _ = toy
    target_coverage._CALLED.clear()
    with recording(_toy_targets()):
        core.Box(1)
    assert target_coverage._CALLED == set()


# ------------------------------------------------------------------------- what a mutant tracks


def test_a_function_edit_is_tracked_by_the_function_it_lies_in():
    tracked = tracking(by_name("failure-table-overflows"))
    assert not tracked.untracked
    assert tracked.names and all(n.startswith("reference_impl.failure_policy:")
                                 for n in tracked.names)


def test_an_edit_of_a_top_level_assignment_keeps_every_scenario():
    constant = Mutant("constant", "the Bash tool is called something else", ("L1.3",),
                      edits(edit(FP, find='BASH_TOOL_NAME = "Bash"',
                                 replace='BASH_TOOL_NAME = "bash"')))
    tracked = tracking(constant)
    assert "top-level assignment reference_impl.failure_policy:BASH_TOOL_NAME" in tracked.untracked
    assert kept_scenarios(tracked, _reference([("a", ScenarioStatus.PASSED)]), {"a": frozenset()}) \
        is None


def test_a_bundled_constant_edit_runs_every_scenario_even_those_calling_nothing_it_edits():
    constant = by_name("risk-denials-consume-repeat-budget")  # edits _BUDGET_FREE_DENIALS
    assert "top-level assignment" in tracking(constant).untracked
    scenarios = discover([SUBSET[0], SUBSET[4], SUBSET[5]])
    _, selftest = run_selftest(reference_impl.implementation(), scenarios,
                               [constant, by_name("bash-key-keeps-description")], 0, full=True)
    every, selected = selftest.mutants
    assert every.scenarios_run == tuple(s.id for s in scenarios)
    # a function edit of the same module skips the one that never computes a repeat key
    assert selected.scenarios_run == tuple(s.id for s in scenarios[:2])


def test_mutants_that_are_not_text_edits_or_declare_features_keep_every_scenario():
    assert "not text edits" in tracking(
        Mutant("inert", "nothing", ("L1.1",), contextlib.nullcontext)).untracked
    assert "its own features" in tracking(by_name("core-declared-away-800-chars")).untracked
    stale = Mutant("stale", "edits text that is not there", ("L1.1",),
                   edits(edit(FP, find="no such text", replace="x")))
    assert "do not apply" in tracking(stale).untracked


def _reference(rows):
    return types.SimpleNamespace(scenarios=[types.SimpleNamespace(id=i, status=s) for i, s in rows])


def test_kept_scenarios_are_the_callers_plus_every_scenario_without_a_clean_reading():
    tracked = Tracking((Target("m", ("f",)),))
    reference = _reference([("calls", ScenarioStatus.PASSED), ("other", ScenarioStatus.PASSED),
                            ("unknown", ScenarioStatus.PASSED), ("failed", ScenarioStatus.FAILED)])
    coverage = {"calls": frozenset({"m:f", "m:g"}), "other": frozenset({"m:g"}),
                "failed": frozenset()}
    assert kept_scenarios(tracked, reference, coverage) == {"calls", "unknown", "failed"}
    assert kept_scenarios(tracked, _reference([("other", ScenarioStatus.PASSED)]), coverage) \
        == frozenset()


# ------------------------------------------------------------------- on the reference, end to end


def test_the_reference_run_under_recording_is_the_plain_run_and_jobs_do_not_change_coverage(
        tmp_path):
    scenarios = discover(SUBSET[:3])
    reference = reference_impl.implementation()
    plain = run_suite(reference, scenarios, 0)
    chosen = [t for m in ("failure-table-overflows", "classifier-reads-first-800-chars",
                          "bash-key-keeps-description") for t in tracking(by_name(m)).targets]
    readings = []
    for jobs in (1, 2):
        folder = tmp_path / f"jobs{jobs}"
        folder.mkdir()
        with recording(chosen, reference):
            recorded = run_suite(reference, scenarios, 0, jobs=jobs,
                                 runner=covering_runner(default_runner(), str(folder)))
        assert [(s.id, s.trace_digest, s.verdicts) for s in recorded.scenarios] == \
            [(s.id, s.trace_digest, s.verdicts) for s in plain.scenarios]
        readings.append(read_coverage(str(folder)))
    assert readings[0] == readings[1]
    assert type(reference).open is type(reference).__dict__["open"]  # the probe is gone too
    assert set(readings[0]) == {s.id for s in scenarios}
    assert len(set(readings[0].values())) > 1  # the readings tell the scenarios apart


PICKED = ("bash-key-keeps-description", "classifier-reads-first-800-chars",
          "timeout-counted-as-denial", "eof-reported-completed")


@pytest.mark.parametrize("full", [False, True], ids=["staged", "full"])
def test_selection_gives_the_same_kill_matrix_with_fewer_runs(full):
    mutants = [by_name(name) for name in PICKED]
    scenarios = discover(SUBSET)
    _, selected = run_selftest(reference_impl.implementation(), scenarios, mutants, 0, full=full)
    _, everything = run_selftest(reference_impl.implementation(), scenarios, mutants, 0,
                                 full=full, select=False)
    assert [(m.name, m.killed_by, m.caught) for m in selected.mutants] == \
        [(m.name, m.killed_by, m.caught) for m in everything.mutants]
    assert selected.kills_per_criterion == everything.kills_per_criterion
    ran = [set(m.scenarios_run) for m in selected.mutants]
    ran_all = [set(m.scenarios_run) for m in everything.mutants]
    assert all(a <= b for a, b in zip(ran, ran_all))
    assert sum(map(len, ran)) < sum(map(len, ran_all))  # the selection did skip runs
    assert any(m.caught for m in selected.mutants)


def test_a_mutant_no_scenario_executes_is_reported_as_never_executed(monkeypatch, tmp_path):
    # the Bash description example never opens an approval wait
    unreached = by_name("fallback-prompts-without-persisted-wait")
    assert tracking(unreached).names and not tracking(unreached).untracked
    reference_result, selftest = run_selftest(
        reference_impl.implementation(), discover(SUBSET[:1]), [unreached], 0)
    (result,) = selftest.mutants
    assert not result.caught and result.scenarios_run == ()
    assert result.scenario_errors == (NEVER_EXECUTED,) and never_executed(result)
    row = next(line for line in matrix_lines(selftest, [c.id for c in reference_result.criteria])
               if line.startswith(unreached.name))
    assert "MISSED" in row and row.endswith(f"({NEVER_EXECUTED})")

    monkeypatch.setattr(cli, "_mutants", lambda: (unreached,))
    out = io.StringIO()
    code = cli.main(["selftest", "--scenarios", SUBSET[0], "--jobs", "1", "--report-dir",
                     str(tmp_path)], stdout=out, stderr=io.StringIO())
    assert code == 1
    assert f"not run: {NEVER_EXECUTED}" in out.getvalue()
    assert f"--impl mutant:{unreached.name}" not in out.getvalue()
