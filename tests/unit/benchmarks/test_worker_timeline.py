"""benchmarks/worker_timeline.py, the plugin bench_tests.py loads: what it writes of a run."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[3]
_SPEC = importlib.util.spec_from_file_location("worker_timeline",
                                               ROOT / "benchmarks" / "worker_timeline.py")
worker_timeline = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(worker_timeline)

TESTS = """
import time
import pytest

@pytest.fixture
def broken():
    raise RuntimeError("setup fails")

def test_sleeps():
    time.sleep(0.2)

def test_fails():
    assert False

def test_errors_in_setup(broken):
    pass
"""


def test_each_test_is_counted_once_with_the_time_it_took(pytester, monkeypatch, tmp_path):
    out = tmp_path / "timeline.json"
    monkeypatch.setenv(worker_timeline.ENV, str(out))
    pytester.makepyfile(TESTS)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", plugins=[worker_timeline])
    result.assert_outcomes(passed=1, failed=1, errors=1)
    data = json.loads(out.read_text(encoding="utf-8"))
    assert set(data["workers"]) == {"main"}  # no xdist: the only process
    main = data["workers"]["main"]
    assert main["tests"] == 3
    assert main["busy_s"] >= 0.2  # the sleep, at least
    assert 0 <= main["first_start_s"] <= main["last_end_s"] <= data["session_s"]
    assert data["tail_s"] == 0.0  # one worker has no tail


def test_without_the_variable_nothing_is_written(pytester, monkeypatch, tmp_path):
    monkeypatch.delenv(worker_timeline.ENV, raising=False)
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", plugins=[worker_timeline])
    result.assert_outcomes(passed=1)
    assert list(tmp_path.iterdir()) == []
    assert not list(pytester.path.glob("*.json"))
