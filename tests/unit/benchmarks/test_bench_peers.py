"""benchmarks/bench_peers.py: each system runs the benchmark's session and a row's ratios
are what its own figures say (no timing asserted); a peer whose library is missing is
skipped with the command that installs it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))
_SPEC = importlib.util.spec_from_file_location("bench_peers", ROOT / "benchmarks" / "bench_peers.py")
bench_peers = importlib.util.module_from_spec(_SPEC)
sys.modules.setdefault("bench_peers", bench_peers)
_SPEC.loader.exec_module(bench_peers)


def test_the_reference_row_is_its_own_unit(tmp_path: Path) -> None:
    result = bench_peers.measure_one("reference", "turns", 2, str(tmp_path), budget_s=60.0)
    assert result["ops"] == 2 and not result["stopped"] and result["floor_us"] > 0
    (row,) = bench_peers._rows({("reference", "turns", 2): result})
    assert row.ratio_to_reference == 1.0
    assert abs(row.ratio_to_floor - row.per_op_us / row.floor_us) <= 0.01


def test_a_peer_is_divided_by_the_reference_of_its_own_row() -> None:
    reference = {"elapsed_s": 0.02, "cpu_s": 0.01, "ops": 10, "stopped": False, "bytes": 100,
                 "floor_us": 1000.0}
    peer = {**reference, "elapsed_s": 0.05, "bytes": 5000}
    rows = {(row.system, row.size): row for row in bench_peers._rows(
        {("reference", "batch", 10): reference, ("dbos", "batch", 10): peer})}
    assert rows["dbos", 10].ratio_to_reference == 2.5
    assert rows["dbos", 10].ratio_to_floor == 5.0 and rows["dbos", 10].database_bytes_per_op == 500


def test_a_missing_library_is_named_with_its_install_command(monkeypatch) -> None:
    monkeypatch.setitem(bench_peers.NEEDS, "langgraph-sync", ("no_such_module_here",))
    assert "no_such_module_here" in bench_peers._missing("langgraph-sync")
    assert bench_peers.INSTALL_HINT in bench_peers._missing("langgraph-sync")
    assert bench_peers._missing("reference") == ""


@pytest.mark.slow  # a fresh interpreter importing the library: seconds each
@pytest.mark.parametrize("system", ["langgraph-sync", "dbos-wal"])
def test_each_installed_peer_runs_the_session(tmp_path: Path, system: str) -> None:
    if bench_peers._missing(system):
        pytest.skip(bench_peers._missing(system))
    result = bench_peers._child(system, "batch", 3, str(tmp_path), 60.0)
    assert result["ops"] == 3 and not result["stopped"]
    assert result["elapsed_s"] > 0 and result["floor_us"] > 0
