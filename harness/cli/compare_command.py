"""``lifecycle-harness compare``: its options and what it prints; the tables are
:mod:`harness.campaigns.compare`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from harness.campaigns.compare import compare, labelled, read_report, to_html, to_markdown
from harness.campaigns.profile_vs_real import pairs, read_side, side_by_side
from harness.campaigns.profile_vs_real import to_html as vs_html
from harness.campaigns.profile_vs_real import to_markdown as vs_markdown
from harness.contract.errors import EXIT_OK, UsageError


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "compare", help="criterion × implementation matrix of saved report.json files",
        description="Read report.json files (from `run --report-dir`) and show the criterion × "
        "implementation matrix (status, violations, explanations), a per-stage summary and, for "
        "two reports of the same implementation, what newly fails, passes or is not exercised; "
        "for a profile's report and a real CLI's report of the system it models (profile:NAME "
        "or profile:NAME@cli beside cli:NAME), the two side by side on the scenarios both ran, "
        "per criterion and per scenario. "
        "Needs pandas (pip install -e '.[matrix]'). Exit 0, or 2 on bad input.",
    )
    parser.add_argument("reports", nargs="+", metavar="REPORT.json")
    parser.add_argument("--md", metavar="FILE", help="also write the Markdown here")
    parser.add_argument("--html", metavar="FILE", help="also write the HTML here")
    parser.set_defaults(handler=cmd_compare)


def cmd_compare(args: argparse.Namespace, ctx: Any) -> int:
    loaded = [(read_report(path), str(path)) for path in args.reports]
    reports = labelled(loaded)
    comparison = compare(reports)
    views = [side_by_side(read_side(loaded[p][0], loaded[p][1], reports[p].label),
                          read_side(loaded[r][0], loaded[r][1], reports[r].label))
             for p, r in pairs([(data, source, report.label)
                                for (data, source), report in zip(loaded, reports)])]
    markdown = to_markdown(comparison)
    if views:
        markdown += "\n" + "\n".join(line for view in views
                                      for line in [*vs_markdown(view), ""])
    page = ""
    if args.html:
        page = to_html(comparison)
        if views:
            page = page.replace("</body></html>", "\n".join(vs_html(v) for v in views)
                                + "\n</body></html>")
    for target, text in ((args.md, markdown), (args.html, page)):
        if target:
            _write(target, text)
    ctx.out(markdown.rstrip("\n"))
    return EXIT_OK


def _write(target: str, text: str) -> None:
    try:
        Path(target).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {target!r}: {exc.strerror or exc}; choose a writable "
                         "path") from None
