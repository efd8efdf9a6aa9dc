"""The reference survives the crash sweep: every case passes, no lost result, no double
execution — a small sweep in both crash modes by default, the full sweep (``slow``) too."""

from __future__ import annotations

import io
import json
import shlex
import sys
from pathlib import Path

import pytest

from harness.cli import app as cli

ROOT = Path(__file__).resolve().parents[2]
PROCESS = "process:" + shlex.join([sys.executable, "-m", "reference_impl.remote"])
CONCURRENT = str(ROOT / "scenarios" / "l4" / "concurrent_duplicates.toml")


def _sweep(tmp_path: Path, *argv: str) -> dict:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["sweep", *argv, "--report-dir", str(tmp_path / "sweep")],
                    stdout=out, stderr=err)
    assert code == 0, out.getvalue()[-4000:] + err.getvalue()[-2000:]
    data = json.loads((tmp_path / "sweep" / "sweep.json").read_text())
    counts = data["counts"]
    assert counts["crash_points"] > 0 and counts["executions"] > 0
    assert counts["lost_results"] == 0 and counts["double_executions"] == 0
    assert counts["failed"] == counts["errors"] == 0
    return data


@pytest.mark.process
def test_a_small_sweep_in_process_mode_crashes_by_sigkill(tmp_path):
    data = _sweep(tmp_path, "--impl", PROCESS, "--scenarios", CONCURRENT, "--max-hits", "1",
                  "--actions", "crash", "--failpoints", "after_start_recorded",
                  "after_tool_returned", "after_result_saved", "--jobs", "2")
    assert data["counts"]["crash_points"] == 3
    # the replayed case runs as a real process crash
    case = next(c for c in data["cases"] if c["point"] == "crash:after_tool_returned:1")
    assert "--impl 'process:" in case["replay"] or "--impl process:" in case["replay"]


@pytest.mark.slow
def test_the_full_sweep_in_process(tmp_path):
    _sweep(tmp_path, "--time-limit-s", "120")


@pytest.mark.slow
@pytest.mark.process
def test_the_full_sweep_in_process_mode(tmp_path):
    _sweep(tmp_path, "--impl", PROCESS, "--time-limit-s", "120")
