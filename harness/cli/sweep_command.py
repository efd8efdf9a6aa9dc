"""``lifecycle-harness sweep``: its options and what it prints; the campaign is
:mod:`harness.campaigns.sweep`.
"""

from __future__ import annotations

import argparse
from typing import Any

from harness.campaigns.sweep import (
    ACTIONS, DEFAULT_SWEEP_DIR, headline, report_files, run_sweep, write_files,
)
from harness.contract import Failpoint
from harness.contract.errors import EXIT_CONFORMANCE_FAILURE, EXIT_OK, UsageError


def _max_hits(text: str) -> int:
    from harness.cli.options import positive_int

    return positive_int(text)


def add_parser(sub: Any) -> None:
    from harness.cli import options as cli
    from harness.cli.options import add_executor_option, add_jobs_option
    from harness.running.shard import add_shard_options

    parser = sub.add_parser(
        "sweep", help="crash (and raise, hold) at every failpoint hit each scenario reaches",
        description="Run each scenario once to learn the failpoint hits it reaches, then once "
        "per (failpoint, hit) with a crash there (a real SIGKILL with --impl process:...), a "
        "raised fault there, and for each concurrent turn instance A held there; judge every "
        "criterion and audit the world's ledger for lost results and double executions. Exit "
        "0 = every case passed, 1 = a case failed, 2 = input error.",
    )
    cli.add_impl_option(parser)
    cli.add_scenarios_option(parser)
    cli.add_seed_option(parser)
    cli.add_time_limit_option(parser)
    parser.add_argument("--max-hits", type=_max_hits, default=None, metavar="N",
                        help="at most N hits per failpoint per scenario (default: every hit)")
    parser.add_argument("--failpoints", nargs="+", metavar="NAME",
                        help="only these failpoints (`lifecycle-harness list failpoints`)")
    parser.add_argument("--actions", default=",".join(ACTIONS), metavar="A,B",
                        help=f"which faults to sweep, comma-separated (default: {','.join(ACTIONS)})")
    parser.add_argument("--report-dir", default=DEFAULT_SWEEP_DIR, metavar="DIR",
                        help=f"where sweep.json, sweep.md, sweep.html go (default: {DEFAULT_SWEEP_DIR})")
    add_jobs_option(parser)
    add_executor_option(parser)
    add_shard_options(parser)
    parser.set_defaults(handler=cmd_sweep)


def cmd_sweep(args: argparse.Namespace, ctx: Any) -> int:
    from harness.cli import options as cli
    from harness.report import check_report_dir
    from harness.running.shard import SHARD_FILE, check_shard_options, load_durations, shard_bytes

    check_shard_options(args)
    problem = check_report_dir(args.report_dir)
    if problem is not None:
        raise UsageError(f"--report-dir {args.report_dir!r}: {problem}")
    actions = tuple(a.strip() for a in args.actions.split(",") if a.strip())
    unknown = [a for a in actions if a not in ACTIONS]
    if unknown or not actions:
        raise UsageError(f"--actions {args.actions!r}: give some of {', '.join(ACTIONS)}, "
                         "comma-separated")
    valid = {p.value for p in Failpoint}
    bad = [f for f in args.failpoints or () if f not in valid]
    if bad:
        raise UsageError(f"--failpoints: {', '.join(bad)} not a failpoint; "
                         "`lifecycle-harness list failpoints` names them")
    implementation = ctx.deps.resolve_impl(args.impl)
    scenarios = cli.discover_scenarios(ctx, args.scenarios)
    ctx.err(f"sweep: {args.impl}, {len(scenarios)} scenario(s), seed {args.seed}, actions "
            f"{','.join(actions)}, max hits {args.max_hits or 'all'}, {args.jobs} job(s)"
            + (f", shard {args.shard.text()}" if args.shard else ""))
    with cli.campaign_executor(args, [(implementation, args.impl)]) as executor:
        result = run_sweep(
            implementation, scenarios, seed=args.seed, impl_spec=args.impl,
            criteria=ctx.deps.criteria(), runner=ctx.deps.runner(),
            time_limit_s=args.time_limit_s, actions=actions, max_hits=args.max_hits,
            failpoints=args.failpoints, jobs=args.jobs, shard=args.shard,
            durations=load_durations(args.durations), progress=ctx.err, executor=executor,
        )
    files = report_files(result)
    if args.shard is not None:
        files[SHARD_FILE] = shard_bytes("sweep", args.shard, result.all_cases,
                                        [c.id for c in result.cases])
    written = write_files(args.report_dir, files)
    for case in result.cases:
        if case.status in ("failed", "error"):
            first = case.notes[0] if case.notes else case.error.splitlines()[0] if case.error else ""
            ctx.out(f"{case.status.upper():<6} {case.id}: {', '.join(case.failing)} {first}"[:300])
            ctx.out(f"    replay: {case.replay}")
    ctx.out(headline(result.counts))
    ctx.out("reports: " + ", ".join(written))
    return EXIT_OK if result.passed else EXIT_CONFORMANCE_FAILURE
