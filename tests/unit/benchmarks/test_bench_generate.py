"""bench_generate.py measures what it says: a row is a real campaign's rate and peaks."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("hypothesis")

BENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "bench_generate.py"


def load():
    spec = importlib.util.spec_from_file_location("bench_generate", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_row_is_a_campaign_with_its_rate_split_and_peaks():
    row = load().one_row(budget=6, seed=0, jobs=1)
    assert row["cases"] == 6 and row["failure"] is None
    assert row["cases_per_s"] > 0 and abs(row["ratio_to_target"] - row["cases_per_s"] / 100.0) <= 0.01
    assert row["draw_ms_per_case"] > 0 and row["run_and_judge_ms_per_case"] > 0
    assert row["peak_mb_harness"] > 0
