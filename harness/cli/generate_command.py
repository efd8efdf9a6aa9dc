"""``lifecycle-harness generate``: its options and what it prints; the campaign is
:mod:`harness.campaigns.generate`, its vocabulary :mod:`harness.campaigns.workloads`.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
from typing import Any

from harness.contract.errors import EXIT_CONFORMANCE_FAILURE, EXIT_OK, UsageError

MIX_SHOWN_MAX = 40


def add_parser(sub: Any) -> None:
    from harness.campaigns.generate import DEFAULT_BUDGET, DEFAULT_REGRESSIONS_DIR
    from harness.cli import options as cli

    parser = sub.add_parser(
        "generate", help="generate whole workloads, judge each with every criterion, shrink a "
        "failure to a regression file",
        description="Build whole scenarios from the workload vocabulary (sessions, tools and "
        "their behaviours, rules and rule changes, classifier verdicts, model scripts, owner "
        "answers, cancels, restarts, concurrent duplicates, faults at any failpoint; each case "
        "draws which of these features it uses), run each against the implementation and judge "
        "it with every criterion. The first failure is shrunk to a minimal workload and written "
        "as a regression scenario file with its replay command. Deterministic per seed. Exit 0 "
        "= no failure, 1 = a failure (file written), 2 = input error, 3 = harness bug.",
    )
    cli.add_impl_option(parser)
    cli.add_seed_option(parser)
    bound = parser.add_mutually_exclusive_group()
    bound.add_argument("--budget", type=cli.positive_int, default=None, metavar="N",
                       help=f"cases to generate (default: {DEFAULT_BUDGET})")
    bound.add_argument("--time-s", type=cli.positive_float, default=None, metavar="T",
                       help="generate until T wall-clock seconds have passed (a prefix of the "
                       "seed's cases: the cases do not depend on the time)")
    parser.add_argument(
        "--regressions-dir", default=DEFAULT_REGRESSIONS_DIR, metavar="DIR",
        help=f"where the shrunk failure's scenario file goes (default: {DEFAULT_REGRESSIONS_DIR})",
    )
    parser.add_argument("--no-shrink", action="store_true",
                        help="write the first failing case as drawn, without shrinking it")
    parser.add_argument("--report", metavar="FILE",
                        help="also write the campaign as JSON (cases, digests, feature mix)")
    cli.add_time_limit_option(parser)
    cli.add_expectations_option(parser)
    cli.add_jobs_option(parser)
    cli.add_executor_option(parser)
    parser.set_defaults(handler=cmd_generate)


def _mix_lines(title: str, mix: Any, cases: int) -> list[str]:
    if not mix:
        return [f"{title}: none"]
    items = sorted(mix.items(), key=lambda kv: (-kv[1], kv[0]))[:MIX_SHOWN_MAX]
    body = ", ".join(f"{name} {count}" for name, count in items)
    more = "" if len(mix) <= MIX_SHOWN_MAX else f" (+{len(mix) - MIX_SHOWN_MAX} more)"
    return [f"{title} (cases of {cases}): {body}{more}"]


def cmd_generate(args: argparse.Namespace, ctx: Any) -> int:
    from harness.campaigns.chaos import require_hypothesis, shorten
    from harness.campaigns.generate import (
        DEFAULT_BUDGET, ChunkDone, GenerationError, as_dict, run_generation,
    )
    from harness.cli import options as cli

    regressions = args.regressions_dir
    if os.path.exists(regressions) and not os.path.isdir(regressions):
        raise UsageError(f"--regressions-dir {regressions!r} is a file; pass a folder "
                         "(it is created when missing)")
    require_hypothesis()
    implementation = cli.implementation_under_test(ctx, args)
    criteria = tuple(ctx.deps.criteria())
    expected = cli.load_expectations_option(args, criteria)
    if expected:
        criteria = tuple(c for c in criteria if c.id not in expected)
        ctx.err(f"generate: looking for new failures only; expected to fail (not judged): "
                f"{', '.join(sorted(expected))}")
    budget = args.budget if args.budget is not None or args.time_s is not None else DEFAULT_BUDGET
    ctx.err(f"generate: {args.impl}, seed {args.seed}, "
            + (f"budget {budget} cases" if budget is not None else f"for {args.time_s:g} s")
            + f", {args.jobs} job(s)")

    def progress(item: Any) -> None:
        if isinstance(item, ChunkDone):
            rate = item.total_cases / item.elapsed_s if item.elapsed_s > 0 else 0.0
            ctx.err(f"[chunk {item.chunk}] {item.cases} cases"
                    + (" - a failure" if item.failed else "")
                    + f"; {item.total_cases} in {item.elapsed_s:.1f} s ({rate:.1f}/s)")

    try:
        with cli.campaign_executor(args, [(implementation, args.impl)]) as executor:
            result = run_generation(
                implementation, seed=args.seed, budget=budget, time_s=args.time_s,
                impl_spec=args.impl, regressions_dir=regressions,
                time_limit_s=args.time_limit_s, criteria=criteria, runner=ctx.deps.runner(),
                progress=progress, jobs=args.jobs, shrink=not args.no_shrink,
                command=shlex.join((cli.PROG, *ctx.argv)), executor=executor)
            where = executor.describe()
    except GenerationError as exc:
        raise UsageError(str(exc)) from None
    cases = len(result.cases)
    ctx.out(f"{cases} cases in {result.elapsed_s:.1f} s: {result.cases_per_s:.1f} cases/s "
            f"(seed {args.seed}, {where})")
    for line in _mix_lines("features drawn", result.feature_mix(), cases):
        ctx.out(line)
    for line in _mix_lines("situations reached", result.reached_mix(), cases):
        ctx.out(line)
    if args.report:
        try:
            with open(args.report, "w", encoding="utf-8") as handle:
                json.dump(as_dict(result), handle, indent=2, sort_keys=True)
                handle.write("\n")
        except OSError as exc:
            raise UsageError(f"--report {args.report!r}: {exc.strerror or exc}") from None
    if result.invalid:
        ctx.out(f"INVALID: {len(result.invalid)} drawn workload(s) the loader rejected (a bug of "
                f"the vocabulary, please report it): {shorten(result.invalid[0].problem, 200)}")
    failure = result.failure
    if failure is None:
        ctx.out(f"no failure in {cases} generated cases")
        return EXIT_OK if result.passed else EXIT_CONFORMANCE_FAILURE
    ctx.out(f"FAILURE at case {failure.first_index}, shrunk in {failure.shrink_runs} runs: "
            f"{failure.outcome.brief()}")
    if failure.outcome.error:
        ctx.out(f"  run error: {failure.outcome.error.splitlines()[0]}")
    for note in failure.outcome.notes:
        ctx.out(f"  FAILED {shorten(note, 200)}")
    ctx.out(f"regression file: {failure.regression_file}"
            + ("" if failure.reproduced else
               f" (WARNING: running it again gave {failure.replay_outcome.brief()})"))
    ctx.out(f"replay: {failure.replay}")
    return EXIT_CONFORMANCE_FAILURE
