"""The worker pool: case order, identical results, a dying or hanging worker is its case's
failure, and run_suite through it gives the report of a sequential run."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
from suite_fakes import FakeImplementation, FakeScenario, criterion, fake_runner, render_faults

from harness.running.parallel import CaseFailure, can_fork, run_cases
from harness.report.result import ScenarioStatus
from harness.running.suite import run_suite

pytestmark = pytest.mark.skipif(not can_fork(), reason="the pool forks")


def _square(i: int) -> int:
    time.sleep(0.01 * ((7 * i) % 3))  # finish out of order
    return i * i


def test_results_come_back_in_case_order_whatever_the_jobs():
    assert run_cases(_square, 9, jobs=3) == [i * i for i in range(9)] == run_cases(_square, 9, jobs=1)


def test_a_worker_killed_by_a_signal_is_that_cases_failure_only():
    def work(i: int) -> int:
        if i == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        return i

    results = run_cases(work, 5, jobs=2)
    assert results[:2] == [0, 1] and results[3:] == [3, 4]
    assert isinstance(results[2], CaseFailure) and results[2].index == 2
    assert "SIGKILL" in results[2].cause


def test_a_raise_an_unpicklable_result_and_a_hang_are_failures_with_their_cause():
    def work(i: int):
        if i == 0:
            raise ValueError("boom")
        if i == 1:
            return lambda: None  # cannot be pickled back
        if i == 2:
            time.sleep(60)
        return "ok"

    started = time.monotonic()
    results = run_cases(work, 4, jobs=4, case_limit_s=1.5)
    assert time.monotonic() - started < 30
    assert "ValueError: boom" in results[0].cause
    assert "could not be sent back" in results[1].cause
    assert "case limit of 1.5 s" in results[2].cause
    assert results[3] == "ok"


def test_sequential_mode_lets_a_harness_bug_propagate():
    def work(i: int) -> int:
        raise RuntimeError("bug")

    with pytest.raises(RuntimeError):
        run_cases(work, 2, jobs=1)


SCENARIOS = [
    FakeScenario("one", marks=("A:ok",), failpoints=("after_prepare",)),
    FakeScenario("two", marks=("A:bad",)),
    FakeScenario("victim", marks=("A:ok",)),
    FakeScenario("four", marks=("A:ok",), error="hung in run_turn after 20.0s"),
]


def _suite(jobs: int, runner=None):
    return run_suite(FakeImplementation(), SCENARIOS, 3, criteria=(criterion("A"),),
                     runner=runner or fake_runner(), fault_renderer=render_faults, jobs=jobs)


def _stable(result):
    return [(s.id, s.status, s.trace_digest, s.verdicts, s.error) for s in result.scenarios], \
        result.criteria, result.summary, result.coverage


def test_run_suite_with_jobs_gives_the_sequential_result():
    assert _stable(_suite(1)) == _stable(_suite(2))


def test_run_suite_a_worker_that_sigkills_itself_errors_its_scenario_not_the_run():
    inner = fake_runner()

    def dying(implementation, scenario, seed, **kw):
        if scenario.id == "victim":
            os.kill(os.getpid(), signal.SIGKILL)
        return inner(implementation, scenario, seed, **kw)

    result = _suite(2, dying)
    by_id = {s.id: s for s in result.scenarios}
    assert by_id["victim"].status is ScenarioStatus.ERROR
    assert "SIGKILL" in by_id["victim"].error and "worker process" in by_id["victim"].error
    assert all(v.status == "not_exercised" for v in by_id["victim"].verdicts)
    assert by_id["one"].status is ScenarioStatus.PASSED
    assert by_id["two"].status is ScenarioStatus.FAILED
    assert not result.gate_passed


def test_the_reference_gives_the_same_report_and_digests_with_two_jobs():
    import json
    from pathlib import Path

    import reference_impl
    from harness.report import json_report
    from harness.scenarios.loader import discover

    root = Path(__file__).resolve().parents[4] / "scenarios"
    scenarios = discover([root / "x"])[:3] + discover([root / "l4" / "concurrent_duplicates.toml"])

    def report(jobs: int) -> dict:
        data = json_report.to_dict(run_suite(reference_impl.implementation(), scenarios, 7,
                                             jobs=jobs))
        for key in ("started", "duration_s"):
            data["run"].pop(key)
        for scenario in data["scenarios"]:
            scenario.pop("duration_s")
        return json.loads(json.dumps(data))

    one, two = report(1), report(2)
    assert [s["trace_digest"] for s in one["scenarios"]] == [s["trace_digest"] for s in two["scenarios"]]
    assert all(s["trace_digest"] for s in two["scenarios"])
    assert one == two


def test_a_killed_workers_data_dirs_are_removed(tmp_path, monkeypatch):
    import tempfile

    from harness.running.runner import DATA_ROOT_ENV, default_data_root

    monkeypatch.setenv(DATA_ROOT_ENV, str(tmp_path))

    def work(i: int) -> str:
        data_dir = tempfile.mkdtemp(prefix="lh-run-", dir=default_data_root())
        (Path(data_dir) / "store.sqlite").write_text("x")
        if i == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        return os.path.dirname(data_dir)

    results = run_cases(work, 3, jobs=2)
    assert isinstance(results[1], CaseFailure)
    assert all(Path(r).parent == tmp_path for r in (results[0], results[2]))
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- reused workers


def _pid_of(i: int) -> tuple[int, int]:
    time.sleep(0.01 * ((7 * i) % 3))  # finish out of order
    return i, os.getpid()


def test_reused_workers_give_the_sequential_results_from_at_most_jobs_processes():
    results = run_cases(_pid_of, 12, jobs=3, reuse_workers=True)
    assert [i for i, _ in results] == list(range(12))
    pids = {pid for _, pid in results}
    assert os.getpid() not in pids and len(pids) <= 3
    # without reuse each case has a process of its own
    assert len({pid for _, pid in run_cases(_pid_of, 6, jobs=3)}) == 6


def test_a_reused_worker_that_dies_fails_its_case_only_and_the_rest_still_run():
    def work(i: int) -> tuple[int, int]:
        if i == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        return i, os.getpid()

    results = run_cases(work, 9, jobs=2, reuse_workers=True)
    assert isinstance(results[3], CaseFailure) and "SIGKILL" in results[3].cause
    assert [r[0] for k, r in enumerate(results) if k != 3] == [0, 1, 2, 4, 5, 6, 7, 8]


def test_a_reused_workers_raise_unpicklable_result_and_hang_are_their_cases_failures():
    def work(i: int):
        if i == 1:
            raise ValueError("boom")
        if i == 3:
            return lambda: None  # cannot be pickled back
        if i == 5:
            time.sleep(60)
        return i

    started = time.monotonic()
    results = run_cases(work, 8, jobs=2, case_limit_s=1.5, reuse_workers=True)
    assert time.monotonic() - started < 30
    assert "ValueError: boom" in results[1].cause
    assert "could not be sent back" in results[3].cause
    assert "case limit of 1.5 s" in results[5].cause
    assert [results[i] for i in (0, 2, 4, 6, 7)] == [0, 2, 4, 6, 7]


def test_a_worker_left_with_a_hung_calls_thread_takes_no_further_case():
    from harness.running.driving.hung_threads import TAINTS

    def work(i: int) -> int:
        if i == 0:
            TAINTS[-1] = (None, [], [])  # what a hang that could not be stopped leaves
            import harness.running.parallel as parallel

            def slowly_tainted() -> bool:  # a worker slow to notice: still alive meanwhile
                time.sleep(0.3)
                return bool(TAINTS)

            parallel._tainted = slowly_tainted  # in this worker only
        return os.getpid()

    before = dict(TAINTS)
    results = run_cases(work, 6, jobs=1 + 1, reuse_workers=True)
    # every case ran (none handed to the retiring worker and stranded there) ...
    assert not [r for r in results if isinstance(r, CaseFailure)], results
    assert results[0] not in results[1:]  # ... and case 0's worker ended after it
    assert TAINTS == before  # the parent's own table is untouched


def test_a_taint_of_the_parent_does_not_retire_the_reused_workers():
    # An earlier hang in this process left a thread running; the workers forked from it do
    # not have that thread (a fork keeps one), so each still takes case after case.
    from harness.running.driving.hung_threads import TAINTS

    release = threading.Event()
    abandoned = threading.Thread(target=release.wait, name="lh-test-abandoned", daemon=True)
    abandoned.start()
    TAINTS[-2] = (None, ["a hang in an earlier run"], [abandoned])
    try:
        results = run_cases(_pid_of, 12, jobs=3, reuse_workers=True)
    finally:
        del TAINTS[-2]
        release.set()
        abandoned.join()
    assert [i for i, _ in results] == list(range(12))
    assert len({pid for _, pid in results}) <= 3


def test_reused_workers_remove_their_data_dirs(tmp_path, monkeypatch):
    import tempfile

    from harness.running.runner import DATA_ROOT_ENV, default_data_root

    monkeypatch.setenv(DATA_ROOT_ENV, str(tmp_path))

    def work(i: int) -> str:
        data_dir = tempfile.mkdtemp(prefix="lh-run-", dir=default_data_root())
        (Path(data_dir) / "store.sqlite").write_text("x")
        if i == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        return os.path.dirname(data_dir)

    results = run_cases(work, 6, jobs=2, reuse_workers=True)
    assert isinstance(results[2], CaseFailure)
    assert all(Path(r).parent == tmp_path for i, r in enumerate(results) if i != 2)
    assert list(tmp_path.iterdir()) == []
