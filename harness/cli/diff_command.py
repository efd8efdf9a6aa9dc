"""``lifecycle-harness diff``: its options and what it prints; the campaign is
:mod:`harness.campaigns.diff`.
"""

from __future__ import annotations

import argparse
from typing import Any

from harness.campaigns.diff import (
    DEFAULT_DIFF_DIR, DIFF_MD, DIFFERENT, SAME, SKIPPED, CaseDiff, case_lines, headline,
    report_files, run_diff,
)
from harness.contract.errors import EXIT_CONFORMANCE_FAILURE, EXIT_OK, UsageError

SHOWN_CASES = 20
"""At most this many differing cases are printed in full; diff.md has them all."""


def add_parser(sub: Any) -> None:
    from harness.cli import options as cli
    from harness.cli.options import add_jobs_option

    parser = sub.add_parser(
        "diff", help="run the same cases on two implementations and name the first diverging "
        "world event of each",
        description="Run every scenario on implementation A and on implementation B under the "
        "same seed and compare what the world observed (model requests, classifier bytes, "
        "ledger rows, approval prompts, UI publications, faults fired), with the ids an "
        "implementation allocates and its wording normalised; name per case the first world "
        "event that differs, with context, and each side's verdict. Exit 0 = no case differs, "
        "1 = some case differs (or none could be compared), 2 = input error.",
    )
    parser.add_argument(
        "--impl", action="append", default=None, metavar="SPEC",
        help="an implementation, given twice: first A, then B ('reference', "
        "python:MODULE:FACTORY, 'process:COMMAND ARGS', docker:IMAGE, mutant:NAME, ...)",
    )
    cli.add_scenarios_option(parser)
    parser.add_argument(
        "--generate", type=cli.positive_int, default=None, metavar="N",
        help="compare on the first N generated workloads of the seed (`lifecycle-harness "
        "generate`) instead of scenario files; each differing one is written to "
        "DIR/generated/ with its replay command",
    )
    cli.add_seed_option(parser)
    cli.add_time_limit_option(parser)
    parser.add_argument(
        "--exact-text", action="store_true",
        help="compare the implementations' wording too (tool messages' content, prompt and "
        "projection reasons); default: wording is normalised, since each implementation "
        "words its messages its own way",
    )
    parser.add_argument(
        "--report-dir", default=DEFAULT_DIFF_DIR, metavar="DIR",
        help=f"where diff.json and diff.md go (default: {DEFAULT_DIFF_DIR})",
    )
    add_jobs_option(parser)
    parser.set_defaults(handler=cmd_diff)


def two_specs(given: list[str] | None) -> tuple[str, str]:
    """The two ``--impl`` values, or a UsageError saying how many were given and what to give."""
    specs = list(given or ())
    if len(specs) == 2 and all(spec.strip() for spec in specs):
        return specs[0], specs[1]
    if len(specs) == 2:
        raise UsageError("--impl: an empty implementation spec; give two, e.g. --impl "
                         "reference --impl mutant:reexecute-after-result-saved")
    got = ("no --impl" if not specs else
           f"{len(specs)} --impl ({', '.join(repr(s) for s in specs)})")
    raise UsageError(
        f"diff compares exactly two implementations and got {got}; give --impl A --impl B, "
        "e.g. `lifecycle-harness diff --impl reference --impl "
        "mutant:reexecute-after-result-saved` (the same spec twice compares two runs of it)")


def cmd_diff(args: argparse.Namespace, ctx: Any) -> int:
    from harness.cli import options as cli
    from harness.report import prepare_report_dir
    from harness.campaigns.sweep import write_files

    spec_a, spec_b = two_specs(args.impl)
    problem = prepare_report_dir(args.report_dir)
    if problem is not None:
        raise UsageError(f"--report-dir {args.report_dir!r}: {problem}")
    implementation_a = ctx.deps.resolve_impl(spec_a)
    same = spec_a.strip() == spec_b.strip()
    implementation_b = implementation_a if same else ctx.deps.resolve_impl(spec_b)
    if same:
        ctx.err(f"diff: note: both sides are {spec_a!r}; this compares two runs of one "
                "implementation (any divergence is nondeterminism)")
    # The cases: generated workloads, --scenarios or the bundled suite.
    generated: dict[str, Any] = {}
    if args.generate is not None:
        if args.scenarios:
            raise UsageError("--generate and --scenarios each choose the cases: give one")
        from harness.campaigns.generate import generated_workloads, implementation_context, load_workload

        workloads = generated_workloads(args.seed, args.generate,
                                        implementation_context(implementation_a))
        generated = {w.data["id"]: w for w in workloads}
        scenarios = [load_workload(w.data) for w in workloads]
        source = f"{len(scenarios)} generated workloads of seed {args.seed}"
    else:
        scenarios = cli.discover_scenarios(ctx, args.scenarios)
        source = ("--scenarios " + " ".join(args.scenarios)) if args.scenarios else "the bundled suite"
    ctx.err(f"diff: A {spec_a}, B {spec_b}; {len(scenarios)} scenario(s) from {source}, seed "
            f"{args.seed}, {args.jobs} job(s)")

    def progress(done: int, total: int, case: CaseDiff) -> None:
        if case.status in DIFFERENT:
            ctx.err(f"[{done}/{total}] {case.status.upper()} {case.scenario_id}")
        elif done % 25 == 0 or done == total:
            ctx.err(f"[{done}/{total}] cases compared")

    result = run_diff((spec_a, implementation_a), (spec_b, implementation_b), scenarios,
                      args.seed, source=source, criteria=ctx.deps.criteria(),
                      runner=ctx.deps.runner(), time_limit_s=args.time_limit_s,
                      exact_text=args.exact_text, jobs=args.jobs, progress=progress)
    written = write_files(args.report_dir, report_files(result))
    markdown = next((path for path in written if path.endswith(DIFF_MD)), args.report_dir)
    differing = [case for case in result.cases if case.status in DIFFERENT]
    for case in differing[:SHOWN_CASES]:
        for line in case_lines(case, result):
            ctx.out(line)
        ctx.out()
    if len(differing) > SHOWN_CASES:
        ctx.out(f"... and {len(differing) - SHOWN_CASES} more differing case(s), each in "
                f"{markdown}")
    skipped = [c for c in result.cases if c.status == SKIPPED]
    if skipped:
        ctx.out(f"skipped {len(skipped)}: " + "; ".join(
            f"{c.scenario_id} ({c.note})" for c in skipped[:3])
            + (f"; ... (see {markdown})" if len(skipped) > 3 else ""))
    if generated and differing:
        for line in _write_generated(args, differing, generated, spec_a, spec_b):
            ctx.out(line)
    same_count = sum(1 for c in result.cases if c.status == SAME)
    ctx.out(headline(result))
    if not result.differs:
        ctx.out("no difference: A and B made the same world events, with the same verdicts, "
                f"in all {same_count} compared case(s)")
    ctx.out("reports: " + ", ".join(written))
    return EXIT_CONFORMANCE_FAILURE if result.differs else EXIT_OK


def _write_generated(args: argparse.Namespace, differing: Any, generated: dict[str, Any],
                     spec_a: str, spec_b: str) -> list[str]:
    """Write each differing generated workload as a scenario file in DIR/generated/ and say
    how to replay it on each side."""
    from pathlib import Path

    from harness.campaigns.chaos import dumps_toml
    from harness.report.atomic import write_text
    from harness.running.suite import display_path, replay_command

    folder = Path(args.report_dir) / "generated"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--report-dir {args.report_dir!r}: cannot create {folder}: "
                         f"{exc.strerror or exc}") from None
    lines = [f"the differing generated workloads are in {display_path(str(folder))}/:"]
    for case in differing:
        workload = generated.get(case.scenario_id)
        if workload is None:
            continue
        path = folder / f"{case.scenario_id}.toml"
        write_text(path, "# A generated workload on which the two implementations differ "
                         f"(lifecycle-harness diff --generate, seed {args.seed}).\n\n"
                   + dumps_toml(workload.data))
        for spec in (spec_a, spec_b):
            lines.append(f"  {replay_command(display_path(str(path)), args.seed, spec)}")
    return lines
