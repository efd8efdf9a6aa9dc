"""harness.running.lastfailed: the --last-failed record merges like pytest's, reads and writes safely."""

from __future__ import annotations

import dataclasses

import pytest
from suite_fakes import FakeImplementation, FakeScenario, criterion, fake_runner, render_faults

from harness.running import lastfailed
from harness.contract.errors import UsageError
from harness.running.lastfailed import LastFailed, load, save, updated
from harness.running.selection import restrict
from harness.running.suite import run_suite

CRITERIA = (criterion("A", "l4"), criterion("B", "l1"))


def _result(*scenarios):
    return run_suite(FakeImplementation(), scenarios, 0, criteria=CRITERIA,
                     runner=fake_runner(), fault_renderer=render_faults)


OK = FakeScenario("ok", marks=("A:ok", "B:ok"))
BAD_A = FakeScenario("bad-a", marks=("A:bad",))
HUNG = FakeScenario("hung", error="hang", marks=("A:ok",))


def test_failures_enter_passes_leave_and_what_did_not_run_keeps_its_state():
    previous = LastFailed(scenarios=("ok", "elsewhere"), criteria=("B", "A"))
    record = updated(previous, _result(OK, BAD_A, HUNG))
    assert record.scenarios == ("elsewhere", "bad-a", "hung")
    assert record.criteria == ("A",)  # B judged and passed: it leaves


def test_a_criterion_not_selected_keeps_its_state():
    result = restrict(_result(OK), {"A"}, "--criteria A")
    assert updated(LastFailed(criteria=("B",)), result).criteria == ("B",)


def test_expected_failures_do_not_count_as_failed_scenarios():
    assert updated(LastFailed(), _result(BAD_A), {"A": "known"}).scenarios == ()


def test_round_trip_missing_and_corrupt(tmp_path):
    path = tmp_path / "c" / "lastfailed.json"
    assert load(path) == LastFailed()
    record = LastFailed(("s1",), ("L4.1",))
    assert save(record, path) is None and load(path) == record
    path.write_text('{"version": 1, "scenarios": "s1", "criteria": []}')
    with pytest.raises(UsageError, match="not a version-1 --last-failed cache; delete the file"):
        load(path)
    assert lastfailed.load_quietly(path) == LastFailed()


def test_an_unwritable_cache_is_reported_not_raised(tmp_path):
    (tmp_path / "file").write_text("x")
    problem = save(LastFailed(("s",)), tmp_path / "file" / "lastfailed.json")
    assert problem and "cannot write the --last-failed cache" in problem
