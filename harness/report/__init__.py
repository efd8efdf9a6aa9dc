"""Report writers: each consumes only a :class:`harness.report.result.RunResult` (or report.json).

Guarantees of :func:`write_reports`: the report directory is created if needed and the
formats are written as one set (:mod:`harness.report.report_set`): never through a symbolic
link, with fresh modes, swapped in whole so a reader never sees a half-written report or a mix
of two runs' reports. The formats are independent modules with a ``write(result, report_dir)
-> Path`` (one file, :mod:`harness.report.atomic`) and a renderer (:data:`RENDERERS`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from harness.report import html, json_report, junit, markdown
from harness.report.report_set import ReportDirError, check_report_dir, prepare_report_dir, write_set
from harness.report.result import RunResult

__all__ = ["RENDERERS", "WRITERS", "ReportDirError", "check_report_dir", "prepare_report_dir",
           "write_reports"]

Writer = Callable[[RunResult, "str | os.PathLike[str]"], Path]

WRITERS: dict[str, Writer] = {
    "json": json_report.write,
    "junit": junit.write,
    "markdown": markdown.write,
    "html": html.write,
}
"""Format name → writer, in the order they are written."""


RENDERERS: dict[str, tuple[str, Callable[[RunResult], bytes]]] = {
    "json": (json_report.FILENAME, lambda result: json_report.dumps(result).encode("utf-8")),
    "junit": (junit.FILENAME, junit.to_xml),
    "markdown": (markdown.FILENAME, lambda result: markdown.to_markdown(result).encode("utf-8")),
    "html": (html.FILENAME, lambda result: html.to_html(result).encode("utf-8")),
}
"""Format name → (file name, content), in the order they are written."""


def write_reports(result: RunResult, report_dir: str | os.PathLike[str],
                  extra: dict[str, bytes] | None = None) -> dict[str, Path]:
    """Write every format into ``report_dir`` as one set; returns format → path written.
    ``extra`` (file name → content, e.g. ``durations.json``) joins the same set.
    Raises :class:`ReportDirError` for a directory that cannot take them."""
    contents = {filename: render(result) for filename, render in RENDERERS.values()}
    contents.update(extra or {})
    paths = write_set(report_dir, contents)
    return {name: paths[filename] for name, (filename, _) in RENDERERS.items()}
