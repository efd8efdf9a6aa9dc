"""Witnesses order a mutant's scenarios; they never decide whether it is caught."""

import io
import json

import pytest

import reference_impl
from harness.cli import app as cli
from harness.scenarios.loader import DEFAULT_SCENARIO_DIR, discover
from harness.campaigns.selftest import witnesses
from harness.campaigns.selftest.killmatrix import run_selftest
from harness.mutants.catalogue import MUTANTS, by_name

BASH = "scenarios/l1/bash_description_only.toml"
SEVENTEEN = "scenarios/l1/seventeen_distinct_failures.toml"
# failure-table-overflows (L1.1) is caught on the seventeen failures; its stage (l1) puts
# that scenario after the bash one only if asked: the order below is the test's.
SCENARIOS = [BASH, SEVENTEEN]


def _selftest(table, mutant="failure-table-overflows"):
    _, result = run_selftest(reference_impl.implementation(), discover(SCENARIOS),
                             [by_name(mutant)], 0, witnesses=table)
    (outcome,) = result.mutants
    return outcome


def test_a_witness_that_catches_is_the_only_scenario_run():
    outcome = _selftest({"failure-table-overflows": ("l1-seventeen-distinct-failures",)})
    assert outcome.caught and "L1.1" in outcome.killed_by
    assert outcome.scenarios_run == ("l1-seventeen-distinct-failures",)
    assert outcome.caught_on == ("l1-seventeen-distinct-failures",)


def test_a_witness_that_does_not_catch_only_costs_its_run():
    without = _selftest({})
    wrong = _selftest({"failure-table-overflows": ("l1-bash-description-only",)})
    assert without.caught and wrong.caught
    assert wrong.scenarios_run[0] == "l1-bash-description-only"
    assert set(without.scenarios_run) <= set(wrong.scenarios_run)
    assert set(wrong.killed_by) & {"L1.1"} == set(without.killed_by) & {"L1.1"}
    assert wrong.caught_on == without.caught_on == ("l1-seventeen-distinct-failures",)


def test_witnesses_outside_the_suite_or_of_other_mutants_are_ignored():
    without = _selftest({})
    foreign = _selftest({"failure-table-overflows": ("no-such-scenario",),
                         "no-such-mutant": ("l1-seventeen-distinct-failures",)})
    assert foreign == without


def test_an_uncaught_mutant_is_not_caught_on_anything():
    # bash-key-keeps-description needs the bash scenario; without it nothing catches it.
    _, result = run_selftest(reference_impl.implementation(), discover([SEVENTEEN]),
                             [by_name("bash-key-keeps-description")], 0,
                             witnesses={"bash-key-keeps-description": ("l1-bash-description-only",)})
    (outcome,) = result.mutants
    assert not outcome.caught and outcome.caught_on == ()


def test_a_table_round_trips_and_keeps_the_entries_of_mutants_not_run(tmp_path):
    path = str(tmp_path / "w.json")
    witnesses.write(path, {"b": ("s2",)}, previous={"a": ("s1",), "b": ("old",)})
    assert witnesses.load(path) == {"a": ("s1",), "b": ("s2",)}
    assert list(json.loads(open(path).read())) == ["a", "b"]


@pytest.mark.parametrize("text, problem", [
    ("not json", "not JSON"),
    ("[1, 2]", "top level is a list"),
    ('{"m": "s1"}', "not a list of scenario ids"),
    ('{"m": [1]}', "not a list of scenario ids"),
])
def test_a_bad_table_names_the_file_and_the_fix(tmp_path, text, problem):
    path = tmp_path / "w.json"
    path.write_text(text)
    with pytest.raises(witnesses.WitnessError, match=problem) as caught:
        witnesses.load(str(path))
    assert str(path) in str(caught.value)


def test_the_committed_table_names_bundled_mutants_and_scenarios():
    table = witnesses.load(witnesses.PACKAGED_WITNESSES)
    ids = {s.id for s in discover([str(DEFAULT_SCENARIO_DIR)])}
    names = {m.name for m in MUTANTS}
    assert table, "the committed witness table is empty: write it with --write-witnesses"
    assert set(table) <= names
    assert all(table[name] and set(table[name]) <= ids for name in table)


def _cli(monkeypatch, *args):
    monkeypatch.setattr(cli, "_mutants", lambda: (by_name("failure-table-overflows"),))
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["selftest", "--scenarios", *SCENARIOS, "--jobs", "1", *args],
                    stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_the_cli_writes_what_caught_each_mutant(monkeypatch, tmp_path):
    path = tmp_path / "w.json"
    code, out, _ = _cli(monkeypatch, "--report-dir", str(tmp_path / "r"),
                        "--write-witnesses", str(path))
    assert code == 0, out
    assert witnesses.load(str(path)) == {
        "failure-table-overflows": ("l1-seventeen-distinct-failures",)}


def test_the_cli_refuses_a_bad_table_with_exit_2(monkeypatch, tmp_path):
    bad = tmp_path / "w.json"
    bad.write_text("{")
    code, _, err = _cli(monkeypatch, "--report-dir", str(tmp_path / "r"), "--witnesses", str(bad))
    assert code == 2 and "--witnesses" in err and "not JSON" in err
    code, _, err = _cli(monkeypatch, "--report-dir", str(tmp_path / "r"),
                        "--write-witnesses", str(tmp_path / "missing" / "w.json"))
    assert code == 2 and "--write-witnesses" in err
