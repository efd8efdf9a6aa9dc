"""One run of the whole bundled suite on the reference, shared by every test that only reads it.

The run is `lifecycle-harness run --check-determinism` through the command line (every
scenario twice, digests compared), built once per session on whichever worker first asks;
the tests using it carry ``pytest.mark.xdist_group("reference-suite")`` so that, under
pytest-xdist (`--dist loadgroup`), that is one worker and one run.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness import cli

@dataclass(frozen=True, slots=True)
class SuiteRun:
    code: int
    out: str
    err: str
    report: dict
    report_dir: Path


@pytest.fixture(scope="session")
def reference_suite_run(tmp_path_factory) -> SuiteRun:
    report_dir = tmp_path_factory.mktemp("reference-suite")
    out, err = io.StringIO(), io.StringIO()
    # The limit is for hangs, not speed: with every core busy, a slow driver call of the
    # longest scenario must not be judged a hang.
    code = cli.main(["run", "--check-determinism", "--time-limit-s", "120",
                     "--report-dir", str(report_dir)], stdout=out, stderr=err)
    report = json.loads((report_dir / "report.json").read_text(encoding="utf-8"))
    return SuiteRun(code, out.getvalue(), err.getvalue(), report, report_dir)
