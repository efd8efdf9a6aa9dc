"""``lifecycle-harness chaos``: its options and what it prints; the campaign is
:mod:`harness.campaigns.chaos`.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from harness.campaigns.chaos import (
    DEFAULT_BUDGET, DEFAULT_REGRESSIONS_DIR, LearnedBase, Progress, RunAhead, SkippedBase,
    default_bases, require_hypothesis, run_campaign, shorten,
)
from harness.contract.errors import EXIT_CONFORMANCE_FAILURE, EXIT_OK, UsageError
from harness.faults.plan import render


def _budget(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be >= 1 example")
    return value


def add_parser(sub: Any) -> None:
    """Add ``chaos`` to the CLI's subparsers (registered through ``cli.SUBCOMMANDS``)."""
    from harness.cli import options as cli

    parser = sub.add_parser(
        "chaos", help="random fault schedules over the scenarios; shrink failures to "
        "regression files",
        description="Lay random fault schedules (1-3 crash/raise/delay/cancel/change_rules "
        "faults on failpoints each base scenario reaches) over the scenarios and run them "
        "against the implementation. A failure is shrunk to a minimal schedule and written "
        "as a regression scenario file. Exit 0 = no failure found, 1 = a failure (file "
        "written), 2 = input error, 3 = harness bug.",
    )
    cli.add_impl_option(parser)
    cli.add_scenarios_option(parser)
    cli.add_seed_option(parser)
    parser.add_argument(
        "--budget", type=_budget, default=DEFAULT_BUDGET, metavar="N",
        help=f"examples (fault schedules) to try before shrinking (default: {DEFAULT_BUDGET})",
    )
    parser.add_argument(
        "--regressions-dir", default=DEFAULT_REGRESSIONS_DIR, metavar="DIR",
        help=f"where the shrunk failure's scenario file goes (default: {DEFAULT_REGRESSIONS_DIR})",
    )
    cli.add_time_limit_option(parser)
    cli.add_expectations_option(parser)
    _add_parallel_options(parser)
    parser.set_defaults(handler=cmd_chaos)


def _add_parallel_options(parser: argparse.ArgumentParser) -> None:
    """``--jobs``: bases are learned in worker processes, and so are the drawn schedules,
    run ahead of the search (see the module docstring); ``--shard I/N``: this machine's share of
    the bases, an independent campaign under the same seed (no merge: each shard's failure,
    if any, is its own regression file)."""
    from harness.cli.options import add_executor_option, add_jobs_option
    from harness.running.shard import parse_shard

    add_jobs_option(parser)
    add_executor_option(parser)
    parser.add_argument(
        "--shard", type=parse_shard, default=None, metavar="I/N",
        help="campaign over shard I of N of the base scenarios (split by a stable hash of the "
        "scenario id); each shard is a whole campaign with its own exit code",
    )


def _progress(ctx: Any) -> Progress:
    def show(item: Any) -> None:
        if isinstance(item, SkippedBase):
            ctx.err(f"skipped base {item.scenario_id}: {item.reason}")
            return
        if isinstance(item, LearnedBase):
            ctx.err(f"[base {item.index}/{item.total}] {item.scenario_id}: {item.failpoints} "
                    f"failpoints, {item.hits} free hits")
            return
        if isinstance(item, RunAhead):
            ctx.err(f"[run ahead] {item.done}/{item.total} drawn schedules run in "
                    f"{item.jobs} workers")
            return
        label = f"{item.number:>4}" if item.phase == "generate" else f"shrink {item.number}"
        if item.outcome is None:
            result = "not run (shrink budget spent)"
        else:
            result = item.outcome.brief() + (" (cached)" if item.cached
                                              else f" ({item.duration_s:.2f}s)")
        ctx.err(f"[{label}] {item.schedule.brief()} -> {result}")

    return show


def cmd_chaos(args: argparse.Namespace, ctx: Any) -> int:
    import shlex

    from harness.cli import options as cli

    regressions = args.regressions_dir
    if os.path.exists(regressions) and not os.path.isdir(regressions):
        raise UsageError(f"--regressions-dir {regressions!r} is a file; pass a folder "
                         "(it is created when missing)")
    require_hypothesis()
    implementation = cli.implementation_under_test(ctx, args)
    reference = (implementation if args.impl.strip() == cli.DEFAULT_IMPL_SPEC
                 else ctx.deps.resolve_impl(cli.DEFAULT_IMPL_SPEC))
    scenarios = cli.discover_scenarios(ctx, args.scenarios) if args.scenarios else default_bases(ctx)
    if not scenarios:
        raise UsageError("no base scenarios found; pass --scenarios with scenario files or "
                         "folders")
    criteria = tuple(ctx.deps.criteria())
    expected = cli.load_expectations_option(args, criteria)
    if expected:
        # Known gaps are not counterexamples: the property judged is every criterion the
        # expectations file does not list (a run error still counts).
        criteria = tuple(c for c in criteria if c.id not in expected)
        ctx.err(f"chaos: looking for new failures only; expected to fail (not judged): "
                f"{', '.join(sorted(expected))}")
    if getattr(args, "shard", None) is not None:
        from harness.running.shard import select

        scenarios = tuple(select(scenarios, [s.id for s in scenarios], args.shard))
        if not scenarios:
            raise UsageError(f"--shard {args.shard.text()}: no base scenario falls in this "
                             "shard; use fewer shards")
    ctx.err(f"chaos: {args.impl}, {len(scenarios)} base scenario(s), seed {args.seed}, "
            f"budget {args.budget}; learning reachable failpoints on the reference")
    travelling = [(implementation, args.impl), (reference, cli.DEFAULT_IMPL_SPEC)]
    with cli.campaign_executor(args, travelling) as executor:
        result = run_campaign(
            implementation, scenarios, seed=args.seed, budget=args.budget, impl_spec=args.impl,
            reference=reference, regressions_dir=regressions, time_limit_s=args.time_limit_s,
            criteria=criteria, runner=ctx.deps.runner(), progress=_progress(ctx),
            command=shlex.join((cli.PROG, *ctx.argv)), jobs=getattr(args, "jobs", 1),
            executor=executor,
        )
    if not result.bases:
        ctx.out(f"no usable base scenario: all {len(result.skipped)} already fail without "
                "chaos faults or reach no failpoint; fix those first (`lifecycle-harness run`)")
        return EXIT_CONFORMANCE_FAILURE
    failure = result.failure
    if failure is None:
        ctx.out(f"no failure in {result.examples} examples (seed {args.seed}, "
                f"{len(result.bases)} base scenarios, {result.runs} distinct schedules run)")
        return EXIT_OK
    shrink = sum(1 for t in result.trials if t.phase == "shrink")
    ctx.out(f"FAILURE found at example {result.examples}, shrunk in {shrink} tries to "
            f"{len(failure.schedule.faults)} fault(s) over {failure.schedule.base_id}:")
    for line in render(failure.schedule.faults):
        ctx.out(f"  {line}")
    if failure.outcome.error:
        ctx.out(f"  run error: {failure.outcome.error.splitlines()[0]}")
    for note in failure.outcome.notes:
        ctx.out(f"  FAILED {shorten(note, 200)}")
    ctx.out(f"regression file: {failure.regression_file}"
            + ("" if failure.reproduced else
               f" (WARNING: running it again gave {failure.replay_outcome.brief()})"))
    ctx.out(f"replay: {failure.replay}")
    return EXIT_CONFORMANCE_FAILURE
