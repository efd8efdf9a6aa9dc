"""A command run in a long-lived host (a test, the pytest plugin) leaves no child behind:
the spares and inspector an out-of-process implementation keeps end with the command."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.cli import app as cli

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "scenarios" / "l4" / "crash_after_result_saved.toml"

pytestmark = pytest.mark.process


def _children() -> set[int]:
    mine = str(os.getpid())
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path("/proc", entry, "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 1 and fields[1] == mine and fields[0] != "Z":
            found.add(int(entry))
    return found


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc to list children")
def test_replay_in_process_mode_ends_every_child_it_started(tmp_path):
    before = _children()
    code = cli.main(["replay", str(SCENARIO), "--impl", "process:python -m reference_impl.remote",
                     "--time-limit-s", "120"])
    assert code == 0
    assert _children() - before == set()
