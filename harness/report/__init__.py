"""Report writers: each consumes only a :class:`harness.result.RunResult` (or report.json).

Guarantees of :func:`write_reports`: the report directory is created if needed; every file is
written atomically (:mod:`harness.report.atomic`), so a reader never sees a half-written
report; the formats are independent modules with a ``write(result, report_dir) -> Path``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from harness.report import html, json_report, junit, markdown
from harness.result import RunResult

Writer = Callable[[RunResult, "str | os.PathLike[str]"], Path]

WRITERS: dict[str, Writer] = {
    "json": json_report.write,
    "junit": junit.write,
    "markdown": markdown.write,
    "html": html.write,
}
"""Format name → writer, in the order they are written."""


def write_reports(result: RunResult, report_dir: str | os.PathLike[str]) -> dict[str, Path]:
    """Write every format into ``report_dir``; returns format → path written."""
    directory = Path(report_dir)
    directory.mkdir(parents=True, exist_ok=True)
    return {name: writer(result, directory) for name, writer in WRITERS.items()}
