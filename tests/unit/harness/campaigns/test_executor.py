"""Campaigns on a Dask cluster (--executor dask://...): the same results as one process.

One local cluster of two worker processes serves the module; each campaign runs on it and in
this process, and the two must agree trial for trial and digest for digest."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

pytest.importorskip("hypothesis")

import reference_impl  # noqa: E402
from harness.campaigns import executor as E  # noqa: E402
from harness.campaigns.chaos import run_campaign  # noqa: E402
from harness.campaigns.generate import run_generation  # noqa: E402
from harness.campaigns.sweep import run_sweep, to_dict  # noqa: E402
from harness.cli import app as cli  # noqa: E402
from harness.contract.errors import UsageError  # noqa: E402
from harness.running.parallel import CaseFailure  # noqa: E402
from harness.scenarios.loader import load  # noqa: E402

REPO = Path(__file__).resolve().parents[4]
BASES = [REPO / "scenarios" / "l4" / "concurrent_duplicates.toml",
         REPO / "scenarios" / "l1" / "bounded_retry.toml"]


def test_executor_forms():
    assert isinstance(E.parse_executor(None, jobs=3), E.LocalPool)
    assert E.parse_executor("local", jobs=3).width == 3
    for bad in ("ray://x", "dask://", "dask://host:1/path"):
        with pytest.raises(UsageError, match="--executor"):
            E.parse_executor(bad, jobs=1)


def test_the_local_pool_is_the_worker_pool():
    pool = E.LocalPool(1)
    assert pool.run(lambda i: i * i, 4) == [0, 1, 4, 9]


@pytest.fixture(scope="module")
def cluster():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as local:
        yield local.scheduler_address.removeprefix("tcp://")


def _executor(address: str, implementation) -> E.DaskCluster:
    return E.DaskCluster(address, [(implementation, E.ImplementationRecipe("reference"))])


def test_cases_travel_with_the_implementation_as_its_spec(cluster):
    implementation = reference_impl.implementation()
    executor = _executor(cluster, implementation)
    try:
        assert executor.width == 2
        names = executor.run(lambda i: (i, implementation.info.name), 3)
        assert names == [(0, "reference"), (1, "reference"), (2, "reference")]

        def fails(i: int) -> int:
            if i == 1:
                raise ValueError("case one is bad")
            return i

        results = executor.run(fails, 3)
        assert results[0] == 0 and results[2] == 2
        assert isinstance(results[1], CaseFailure) and "case one is bad" in results[1].cause
    finally:
        executor.close()


def test_chaos_on_the_cluster_is_the_campaign_of_one_process(cluster, tmp_path):
    implementation = reference_impl.implementation()
    scenarios = [load(BASES[1])]
    here = run_campaign(implementation, scenarios, seed=5, budget=4,
                        regressions_dir=tmp_path / "here", jobs=1)
    executor = _executor(cluster, implementation)
    try:
        there = run_campaign(implementation, scenarios, seed=5, budget=4,
                             regressions_dir=tmp_path / "there", executor=executor)
    finally:
        executor.close()
    assert here.bases == there.bases and here.skipped == there.skipped
    assert [(t.schedule, t.outcome) for t in here.trials] == \
        [(t.schedule, t.outcome) for t in there.trials]


def test_generate_and_sweep_on_the_cluster_are_those_of_one_process(cluster):
    """A chunk is drawn in the worker: the same cases as here (a Dask worker loaded other
    modules than this process, which must not change a draw)."""
    implementation = reference_impl.implementation()
    executor = _executor(cluster, implementation)
    try:
        there = run_generation(implementation, seed=3, budget=5, shrink=False,
                               executor=executor)
        swept = run_sweep(implementation, [load(BASES[1])], seed=0, actions=("crash",),
                          max_hits=1, executor=executor)
    finally:
        executor.close()
    here = run_generation(implementation, seed=3, budget=5, shrink=False, jobs=1)
    assert [(c.key, c.outcome) for c in here.cases] == [(c.key, c.outcome) for c in there.cases]
    assert there.failure is None and len(there.cases) == 5
    alone = run_sweep(implementation, [load(BASES[1])], seed=0, actions=("crash",), max_hits=1,
                      jobs=1)
    assert json.dumps(to_dict(swept), sort_keys=True) == json.dumps(to_dict(alone),
                                                                      sort_keys=True)
    assert len(swept.cases) > 1


def test_the_command_line_runs_a_campaign_on_the_cluster(cluster, tmp_path):
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["generate", "--seed", "2", "--budget", "3", "--executor",
                     f"dask://{cluster}", "--no-shrink", "--regressions-dir",
                     str(tmp_path / "r")], stdout=out, stderr=err)
    assert code == 0, out.getvalue() + err.getvalue()
    assert "3 cases in" in out.getvalue() and "Dask at" in out.getvalue()


def test_no_scheduler_there_is_an_executor_error():
    pytest.importorskip("distributed")
    executor = E.DaskCluster("127.0.0.1:9", [], timeout_s=1.0)
    with pytest.raises(E.ExecutorError, match="no Dask scheduler answered"):
        executor.run(lambda i: i, 1)


def test_a_scheduler_without_workers_is_an_executor_error():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=0, processes=False,
                                  dashboard_address=None) as empty:
        executor = E.DaskCluster(empty.scheduler_address.removeprefix("tcp://"), [],
                                 timeout_s=1.0)
        with pytest.raises(E.ExecutorError, match="has no worker"):
            executor.run(lambda i: i, 1)
