"""``lifecycle-harness matrix``: its options and what it writes; the tables are
:mod:`harness.campaigns.matrix`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from harness.campaigns.matrix import (
    ADAPTERS_BEGIN, ADAPTERS_END, DOC, DEFAULT_REPORT_DIR, readme_block, replace_block, targets,
    verdict_of_target, write_target_reports, write_text,
)
from harness.contract.errors import EXIT_CONFORMANCE_FAILURE, EXIT_OK, UsageError


def add_parser(sub: Any) -> None:
    from harness.cli import options as cli

    parser = sub.add_parser(
        "matrix", help="run the suite on the reference, every profile and every installed "
        "adapter; write the compatibility matrix",
        description="Run the suite on the reference, each profile (profile:NAME) and each "
        "installed adapter, write each report set and the matrix (md, html, json) to "
        "--report-dir. Exit 0 when the reference passes and every profile's divergence table "
        "agrees with the harness, 1 otherwise, 2 on bad input. Needs pandas "
        "(pip install -e '.[matrix]').",
    )
    cli.add_scenarios_option(parser)
    cli.add_seed_option(parser)
    cli.add_time_limit_option(parser)
    parser.add_argument("--report-dir", default=DEFAULT_REPORT_DIR, metavar="DIR",
                        help=f"where the report sets and the matrix go (default: {DEFAULT_REPORT_DIR})")
    parser.add_argument("--update-readme", metavar="FILE",
                        help="rewrite the matrix blocks of FILE (between the matrix markers; "
                        f"in this repository {DOC})")
    parser.set_defaults(handler=cmd_matrix)


def cmd_matrix(args: argparse.Namespace, ctx: Any) -> int:
    from harness.cli.options import discover_scenarios
    from harness.campaigns.compare import compare, labelled, require_pandas, to_dict, to_html, to_markdown
    from harness.implementations import not_applicable_of
    from harness.profiles import disagreements, expectations_of
    from harness.report.json_report import to_dict as report_dict
    from harness.running.suite import run_suite

    require_pandas()  # before minutes of runs, not after
    readme = Path(args.update_readme) if args.update_readme else None
    if readme is not None and not readme.is_file():
        raise UsageError(f"--update-readme {args.update_readme!r}: file not found")
    run = targets()
    if readme is not None:  # before minutes of runs: the blocks the runs will fill exist
        text = readme.read_text(encoding="utf-8")
        replace_block(text, "", str(readme))
        if any(t.kind in ("adapter", "cli") and not t.absent_reason for t in run):
            replace_block(text, "", str(readme), ADAPTERS_BEGIN, ADAPTERS_END)
    report_dir = Path(args.report_dir)
    scenarios = discover_scenarios(ctx, args.scenarios)
    reports: list[dict[str, Any]] = []
    profile_reports: list[dict[str, Any]] = []
    reference_and_adapter_reports: list[dict[str, Any]] = []
    agreed = True
    for target in run:
        if target.absent_reason:
            ctx.out(f"{target.name or target.spec:<26} absent: {target.absent_reason}")
            continue
        implementation = ctx.deps.resolve_impl(target.spec)
        chosen = scenarios
        why_not = getattr(implementation, "why_not", None)
        if callable(why_not):  # a real CLI runs only the scenarios it can express
            chosen = [s for s in scenarios if not why_not(s)]
        ctx.err(f"matrix: {target.name or target.spec} over {len(chosen)} scenarios")
        limit = args.time_limit_s
        if target.kind == "cli":  # a real CLI's start-up and own retries need its own limit
            limit = max(limit, float(getattr(implementation, "time_limit_s", 0.0)))
        result = run_suite(implementation, chosen, args.seed, criteria=ctx.deps.criteria(),
                           runner=ctx.deps.runner(), expectations=expectations_of(implementation),
                           not_applicable=not_applicable_of(implementation)
                           or _adapter_not_applicable(target),
                           time_limit_s=limit, impl_spec=target.spec,
                           command=f"lifecycle-harness run --impl {target.spec}")
        write_target_reports(result, report_dir / target.slug)
        data = report_dict(result)
        reports.append(data)
        verdict = verdict_of_target(target, result, disagreements)
        agreed &= not verdict.startswith(("DISAGREES", "FAILED"))
        ctx.out(f"{target.name or target.spec:<26} {result.summary.passed}/{result.summary.criteria} passed; "
                f"{verdict}")
        if target.kind == "profile":
            profile_reports.append(data)
        else:
            reference_and_adapter_reports.append(data)
    comparison = compare(labelled([(r, r["implementation"]["name"]) for r in reports]))
    import json

    write_text(report_dir / "matrix.md", to_markdown(comparison))
    write_text(report_dir / "matrix.html", to_html(comparison))
    write_text(report_dir / "matrix.json", json.dumps(to_dict(comparison), indent=2, sort_keys=True,
                                                  ensure_ascii=False) + "\n")
    ctx.out(f"matrix: {report_dir / 'matrix.md'}, matrix.html, matrix.json")
    if readme is not None and profile_reports:
        text = readme.read_text(encoding="utf-8")
        text = replace_block(text, readme_block(profile_reports), str(readme))
        if len(reference_and_adapter_reports) > 1:  # the reference and at least one adapter
            block = readme_block(reference_and_adapter_reports, ADAPTERS_BEGIN, ADAPTERS_END)
            text = replace_block(text, block, str(readme), ADAPTERS_BEGIN, ADAPTERS_END)
        write_text(readme, text)
        ctx.out(f"updated the matrix block of {readme}")
    return EXIT_OK if agreed else EXIT_CONFORMANCE_FAILURE


def _adapter_not_applicable(target: Any) -> dict[str, str] | None:
    """What an adapter target's library lacks (``AdapterInfo.not_applicable``): the matrix
    resolves an adapter by its ``process:`` spec, which carries no declaration."""
    if target.kind != "adapter" or not target.name.startswith("adapter-"):
        return None
    from harness.adapters import find

    info = find(target.name.removeprefix("adapter-"))
    return dict(getattr(info, "not_applicable", {}) or {}) or None
