"""The ``lifecycle-harness`` command line.

Guarantees of :func:`main` (it never raises, it returns the exit code):

* ``0`` — every applicable criterion was exercised and passed, no scenario errored;
* ``1`` — a conformance failure: a criterion failed, errored or was not exercised, a
  scenario did not complete (hang, implementation crash), or a feature demanded by
  ``--require-features`` is not declared or not met (an unknown feature name is ``2``);
* ``2`` — the harness could not do its job because of its input: bad arguments (argparse
  errors included), an invalid scenario, an implementation that cannot be loaded, an
  unwritable report directory (any :class:`~harness.errors.HarnessError`); the message on
  stderr names the problem and the fix;
* ``3`` — a harness bug (any other exception), with a short traceback hint.

(130 after Ctrl-C and 141 when stdout's reader goes away, as shells report them. On SIGINT,
SIGTERM or SIGHUP the harness ends every child process it started — and what they started —
removes its temporary data dirs, prints one line and exits 130, 143 or 129.)

Subcommands are registered in :data:`SUBCOMMANDS`; each adds its parser and sets a
``handler(args, ctx) -> int``. Shared option groups (``add_impl_option`` …) let later
commands (``selftest``) and options (``--expectations``, ``--check-determinism``) slot in.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import Any, Callable, Sequence, TextIO

import harness
from harness import conformance
from harness.cli_options import (  # re-exported: commands and tests reach them as cli.X
    PROG,
    Context,
    Deps,
    add_impl_option,
    add_scenarios_option,
    add_seed_option,
    add_time_limit_option,
    discover_scenarios,
    positive_int,
)
from harness.contract import FAILPOINT_DESCRIPTIONS, Failpoint, Implementation
from harness.criteria.base import Status
from harness.errors import (
    EXIT_CONFORMANCE_FAILURE,
    EXIT_HARNESS_BUG,
    EXIT_OK,
    HarnessError,
    UsageError,
)
from harness.report._text import evidence_line, gate_line, level_line
from harness.determinism import RecordingRunner, check_determinism
from harness.result import (
    CriterionStatus,
    DeterminismCheck,
    DivergenceRecord,
    RunResult,
    ScenarioStatus,
)
from harness.suite import (
    DEFAULT_IMPL_SPEC,
    ProgressEvent,
    display_path,
    evaluate,
    render_faults,
    run_suite,
)
from harness.trace import trace_digest
from harness.tracelines import render_trace

DEFAULT_REPORT_DIR = os.path.join("reports", "latest")
DEFAULT_SELFTEST_REPORT_DIR = os.path.join("reports", "selftest")
TRACEBACK_ENV = "LIFECYCLE_HARNESS_TRACEBACK"
EXIT_BROKEN_PIPE = 141
"""128 + SIGPIPE, as a shell reports a command whose reader went away."""
MAX_VIOLATIONS_PRINTED = 3


# --------------------------------------------------------------------------- parser


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors raise UsageError (exit 2 through ``main``)."""

    def error(self, message: str) -> Any:  # type: ignore[override]
        raise UsageError(
            f"{message}\n{self.format_usage().rstrip()}\n"
            f"run `{self.prog} --help` for the options"
        )


def add_require_features_option(parser: argparse.ArgumentParser) -> None:
    optional = ", ".join(sorted(conformance.OPTIONAL_FEATURES))
    parser.add_argument(
        "--require-features", metavar="A,B", default="",
        help="optional features the implementation must declare and meet, comma-separated, "
        f"or 'all' ({optional}); one not declared or not met fails the gate (exit 1), an "
        "unknown name is a usage error (exit 2). The core is always required",
    )


def required_features(args: argparse.Namespace) -> tuple[str, ...]:
    """``--require-features`` as optional feature names (UsageError on an unknown name)."""
    text = getattr(args, "require_features", "") or ""
    return tuple(f.value for f in conformance.parse_feature_list(text)) if text else ()


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """The options of ``run``; a ``selftest`` command can reuse them."""
    add_impl_option(parser)
    add_scenarios_option(parser)
    add_seed_option(parser)
    parser.add_argument(
        "--report-dir", default=DEFAULT_REPORT_DIR, metavar="DIR",
        help=f"where to write report.json, junit.xml, report.md, report.html "
        f"(default: {DEFAULT_REPORT_DIR})",
    )
    add_time_limit_option(parser)
    parser.add_argument(
        "--expectations", metavar="FILE",
        help="TOML file of criteria this implementation is expected to fail "
        "([[expected_fail]] criterion, reason, link); they are reported expected_fail "
        "and do not fail the gate, and an unexpected pass is reported",
    )
    add_require_features_option(parser)


def _add_run(sub: Any) -> None:
    parser = sub.add_parser(
        "run", help="run the suite and write the reports",
        description="Run every scenario against the implementation, judge every criterion, "
        "write the reports. Exit 0 = conformant, 1 = conformance failure, 2 = input error, "
        "3 = harness bug.",
    )
    add_run_options(parser)
    parser.add_argument(
        "--check-determinism", action="store_true",
        help="run every scenario a second time and compare trace digests; a mismatch fails "
        "the run and prints the first diverging trace event",
    )
    add_parallel_options(parser)
    parser.set_defaults(handler=cmd_run)


def add_parallel_options(parser: argparse.ArgumentParser, *, shard: bool = True) -> None:
    """``--jobs`` (worker processes) and, for commands whose cases can be split over
    machines, ``--shard I/N`` and ``--durations FILE`` (see harness.parallel, harness.shard)."""
    from harness.parallel import add_jobs_option
    from harness.shard import add_shard_options

    add_jobs_option(parser)
    if shard:
        add_shard_options(parser)


def _add_list(sub: Any) -> None:
    parser = sub.add_parser("list", help="list criteria, scenarios, failpoints, mutants or features")
    parser.add_argument("what", choices=("criteria", "scenarios", "failpoints", "mutants",
                                         "features"))
    add_scenarios_option(parser)
    parser.set_defaults(handler=cmd_list)


def _add_replay(sub: Any) -> None:
    parser = sub.add_parser(
        "replay", help="rerun one scenario and show its trace and verdicts",
        description="Rerun one scenario under one seed; print the fault plan, the trace and "
        "every verdict with its evidence. Exit 0 when no verdict failed and the run "
        "completed, 1 otherwise.",
    )
    parser.add_argument("scenario_file", metavar="SCENARIO_FILE")
    parser.add_argument(
        "--variant", metavar="KEY", default=None,
        help="for a scenario template ([matrix]): which variant (its key, as printed in the "
        "replay command, or its full scenario id)",
    )
    add_seed_option(parser)
    add_impl_option(parser)
    add_time_limit_option(parser)
    add_require_features_option(parser)
    parser.add_argument(
        "--full", action="store_true", help="print trace event data without shortening it"
    )
    from harness.sweep import add_replay_options

    add_replay_options(parser)
    parser.set_defaults(handler=cmd_replay)


def _add_selftest(sub: Any) -> None:
    parser = sub.add_parser(
        "selftest", help="prove the suite catches known defects: kill matrix over mutants",
        description="Run the suite on the reference implementation and on every mutant of it "
        "(each reintroduces one defect) and print the kill matrix mutant x criterion. Exit 0 "
        "only when the reference passes everything and every mutant is caught by one of its "
        "expected criteria; criteria that kill no mutant are flagged.",
    )
    add_scenarios_option(parser)
    add_seed_option(parser)
    add_time_limit_option(parser)
    parser.add_argument(
        "--report-dir", default=DEFAULT_SELFTEST_REPORT_DIR, metavar="DIR",
        help=f"where to write the reports (default: {DEFAULT_SELFTEST_REPORT_DIR})",
    )
    parser.add_argument(
        "--mutants", nargs="+", metavar="NAME",
        help="only these mutants (default: all; `lifecycle-harness list mutants`)",
    )
    parser.add_argument(
        "--full", action="store_true",
        help="run every scenario for every mutant (default: the scenarios that exercise the "
        "mutant's expected criteria on the reference)",
    )
    add_parallel_options(parser)
    parser.set_defaults(handler=cmd_selftest)


SUBCOMMANDS: list[Callable[[Any], None]] = [_add_run, _add_list, _add_replay, _add_selftest]
"""Each adds one subcommand to the subparsers action (append to add a command)."""


def _add_chaos(sub: Any) -> None:
    from harness.chaos import add_parser

    add_parser(sub)


SUBCOMMANDS.append(_add_chaos)


def _add_parallel_commands(sub: Any) -> None:
    from harness import merge, sweep

    merge.add_parser(sub)
    sweep.add_parser(sub)


SUBCOMMANDS.append(_add_parallel_commands)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Conformance harness for agent-runtime operation lifecycles.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {harness.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add in SUBCOMMANDS:
        add(sub)
    return parser


# --------------------------------------------------------------------------- commands


def _fault_plan_line(renderer: Callable[[Any], Sequence[str]], scenario: Any) -> str:
    faults = render_faults(renderer, scenario)
    return f"  {scenario.id}: " + ("; ".join(faults) if faults else "(no faults)")


def _progress_printer(ctx: Context) -> Callable[[ProgressEvent], None]:
    def show(event: ProgressEvent) -> None:
        if event.phase != "done":
            return
        width = len(str(event.total))
        status = event.status.value if event.status else "?"
        line = f"[{event.index:>{width}}/{event.total}] {status:<6} {event.scenario_id} ({event.duration_s:.2f}s)"
        if event.error:
            line += f" — {event.error.splitlines()[0]}"
        ctx.err(line)

    return show


def load_expectations(args: argparse.Namespace) -> dict[str, str] | None:
    """Criterion id → reason for criteria expected to fail (``--expectations FILE``)."""
    path = getattr(args, "expectations", None)
    if not path:
        return None
    from harness.expectations import load_expectations as load

    return load(path)


def cmd_run(args: argparse.Namespace, ctx: Context) -> int:
    check_report_dir_option(args.report_dir)
    required = required_features(args)
    implementation = ctx.deps.resolve_impl(args.impl)
    all_scenarios = discover_scenarios(ctx, args.scenarios)
    scenarios, extra_files = _shard_of(args, all_scenarios)
    criteria = ctx.deps.criteria()
    renderer = ctx.deps.fault_renderer()
    expectations = load_expectations(args)
    ctx.err(f"fault plans ({len(scenarios)} scenarios, seed {args.seed}):")
    for scenario in scenarios:
        ctx.err(_fault_plan_line(renderer, scenario))
    runner = ctx.deps.runner()
    recording = RecordingRunner(runner) if getattr(args, "check_determinism", False) else None
    result = run_suite(
        implementation,
        scenarios,
        args.seed,
        criteria=criteria,
        runner=recording or runner,
        expectations=expectations,
        progress=_progress_printer(ctx),
        time_limit_s=args.time_limit_s,
        impl_spec=args.impl,
        fault_renderer=renderer,
        command=shlex.join((PROG, *ctx.argv)),
        required_features=required,
        # the determinism check keeps the first traces in this process
        jobs=1 if recording is not None else getattr(args, "jobs", 1),
    )
    if recording is not None:
        result = _with_determinism(ctx, result, implementation, scenarios, args, runner, recording)
    from harness.shard import DURATIONS_FILE, durations_bytes

    extra_files[DURATIONS_FILE] = durations_bytes({s.id: s.duration_s for s in result.scenarios})
    written = _write_reports(result, args.report_dir, extra_files)
    _print_summary(ctx, result)
    ctx.out("reports: " + ", ".join(display_path(p) for p in written.values()))
    if getattr(args, "shard", None) is not None:
        return _shard_exit(ctx, result)
    return EXIT_OK if result.gate_passed else EXIT_CONFORMANCE_FAILURE


def _shard_exit(ctx: Context, result: RunResult) -> int:
    """A shard sees part of the suite: criteria it leaves unexercised are for the merge to
    judge, so only a failure, an error or an errored scenario fails the shard."""
    bad = [c.id for c in result.criteria
           if c.status in (CriterionStatus.FAILED, CriterionStatus.ERROR,
                           CriterionStatus.UNEXPECTED_PASS)]
    errored = [s.id for s in result.scenarios if s.status is ScenarioStatus.ERROR]
    ctx.out(f"shard: {len(result.scenarios)} scenario(s); the gate is judged by "
            "`lifecycle-harness merge` over all shards"
            + (f"; failing here: {', '.join(bad + errored)}" if bad or errored else ""))
    return EXIT_CONFORMANCE_FAILURE if bad or errored else EXIT_OK


def _shard_of(args: argparse.Namespace, scenarios: Sequence[Any]
              ) -> tuple[list[Any], dict[str, bytes]]:
    """The scenarios of ``--shard`` (all without it) and, when sharded, the shard.json
    that ``merge`` needs."""
    from harness.shard import SHARD_FILE, check_shard_options, load_durations, select, shard_bytes

    check_shard_options(args)
    spec = getattr(args, "shard", None)
    if spec is None:
        return list(scenarios), {}
    ids = [s.id for s in scenarios]
    chosen = select(scenarios, ids, spec, load_durations(getattr(args, "durations", None)))
    return chosen, {SHARD_FILE: shard_bytes("run", spec, ids, [s.id for s in chosen])}


def _with_determinism(
    ctx: Context, result: RunResult, implementation: Implementation, scenarios: Sequence[Any],
    args: argparse.Namespace, runner: Callable[..., Any], recording: RecordingRunner,
) -> RunResult:
    declared = tuple(str(f) for f in implementation.info.features)
    scenarios = [s for s in scenarios if not conformance.missing_features(s, declared)]
    ctx.err(f"determinism: running each of the {len(scenarios)} scenarios a second time")
    divergences = check_determinism(
        implementation, scenarios, args.seed, runner=runner,
        first_traces=recording.traces, time_limit_s=args.time_limit_s,
    )
    for divergence in divergences:
        for line in divergence.lines():
            ctx.out(line)
    if not divergences:
        ctx.out(f"determinism: all {len(scenarios)} scenarios gave identical trace digests")
    records = tuple(
        DivergenceRecord(d.scenario_id, display_path(d.file), d.where, d.first, d.second)
        for d in divergences
    )
    return dataclasses.replace(result, determinism=DeterminismCheck(len(scenarios), records))


def check_report_dir_option(report_dir: str) -> None:
    """Refuse a ``--report-dir`` that cannot take the reports before anything runs (exit 2):
    empty, a file, a symbolic link, or not writable."""
    from harness.report import check_report_dir

    problem = check_report_dir(report_dir)
    if problem is not None:
        raise UsageError(f"--report-dir {report_dir!r}: {problem}")


def _write_reports(result: RunResult, report_dir: str,
                   extra: dict[str, bytes] | None = None) -> dict[str, Path]:
    from harness.report import ReportDirError, write_reports

    try:
        return write_reports(result, report_dir, extra)
    except ReportDirError as exc:
        raise UsageError(f"--report-dir {report_dir!r}: {exc}") from exc
    except OSError as exc:
        raise UsageError(
            f"cannot write the reports to {report_dir!r}: {exc.strerror or exc}; "
            "choose a writable --report-dir"
        ) from exc


def _print_summary(ctx: Context, result: RunResult) -> None:
    labels = {
        CriterionStatus.FAILED: "FAILED",
        CriterionStatus.ERROR: "ERROR",
        CriterionStatus.NOT_EXERCISED: "NOT EXERCISED",
        CriterionStatus.UNEXPECTED_PASS: "UNEXPECTED PASS",
        CriterionStatus.EXPECTED_FAIL: "expected fail",
    }
    for c in result.criteria:
        label = labels.get(c.status)
        if label is None:
            continue
        line = f"{label:<13} {c.id:<6} {c.title}"
        if c.violations:
            line += f" ({len(c.violations)} violation(s))"
        if c.expectation_reason:
            line += f" [expected: {c.expectation_reason}]"
        ctx.out(line)
        if c.status in (CriterionStatus.FAILED, CriterionStatus.ERROR):
            for v in c.violations[:MAX_VIOLATIONS_PRINTED]:
                notes = "; ".join(evidence_line(e) for e in v.evidence)
                ctx.out(f"    {v.scenario}: {notes}")
                ctx.out(f"    replay: {v.replay}")
            if len(c.violations) > MAX_VIOLATIONS_PRINTED:
                ctx.out(f"    … {len(c.violations) - MAX_VIOLATIONS_PRINTED} more in the reports")
    for s in result.scenarios:
        if s.status is ScenarioStatus.ERROR:
            first = s.error.splitlines()[0] if s.error else "run error"
            ctx.out(f"{'SCENARIO ERROR':<13} {s.id}: {first}")
            ctx.out(f"    replay: {s.replay}")
    skipped = [s for s in result.scenarios if s.status is ScenarioStatus.SKIPPED]
    if skipped:
        ctx.out(f"{'skipped':<13} {len(skipped)} scenario(s) needing undeclared optional "
                "features: " + ", ".join(f"{s.id} ({', '.join(s.requires)})" for s in skipped))
    for message in result.conformance.required_unmet:
        ctx.out(f"{'REQUIRED':<13} {message} (--require-features)")
    ctx.out(level_line(result))
    ctx.out(gate_line(result))


def cmd_list(args: argparse.Namespace, ctx: Context) -> int:
    if args.what == "criteria":
        for c in ctx.deps.criteria():
            ctx.out(f"{c.id:<6} {c.stage:<3} {c.title}")
    elif args.what == "scenarios":
        for s in discover_scenarios(ctx, args.scenarios):
            ctx.out(f"{s.id}  {s.stage}  {display_path(s.file)}")
    elif args.what == "mutants":
        for mutant in _mutants():
            klass = f" ({mutant.trust_class})" if mutant.trust_class else ""
            ctx.out(f"{mutant.name}  [{', '.join(mutant.expected)}]{klass}  {mutant.defect}")
    elif args.what == "features":
        core = ", ".join(sorted(conformance.CORE_FEATURES))
        ctx.out(f"core (always required, cannot be declared away): {core}")
        for entry in conformance.OPTIONAL:
            needs = f"requires = [\"{entry.feature.value}\"]"
            if entry.implied_by:
                needs = f"{entry.implied_by} or {needs}"
            ctx.out(f"{entry.feature.value:<20} gates {', '.join(entry.criteria)}; skips scenarios "
                    f"with {needs} — {entry.why_optional}")
    else:
        width = max(len(fp.value) for fp in Failpoint)
        for fp in Failpoint:
            ctx.out(f"{fp.value:<{width}}  {FAILPOINT_DESCRIPTIONS.get(fp, '')}")
    return EXIT_OK


def cmd_replay(args: argparse.Namespace, ctx: Context) -> int:
    path = args.scenario_file
    if not os.path.isfile(path):
        raise UsageError(
            f"scenario file {path!r} not found; pass the path printed in the report's "
            "replay command (relative to the folder the run was started from)"
        )
    required = required_features(args)
    variant = getattr(args, "variant", None)
    scenario = (ctx.deps.load_scenario(path, variant) if variant is not None
                else ctx.deps.load_scenario(path))
    from harness.sweep import apply_replay_options

    scenario = apply_replay_options(scenario, args)  # --crash-at/--raise-at/--hold-at
    implementation = ctx.deps.resolve_impl(args.impl)
    criteria = conformance.core_always_applies(ctx.deps.criteria())
    declared = tuple(str(f) for f in implementation.info.features)
    undeclared = [f for f in required if f not in declared]
    renderer = ctx.deps.fault_renderer()
    ctx.out(f"scenario {scenario.id} ({display_path(scenario.file)}), seed {args.seed}, "
            f"implementation {implementation.info.name} {implementation.info.version}")
    ctx.out("fault plan:")
    faults = render_faults(renderer, scenario)
    for line in faults or ("(no faults)",):
        ctx.out(f"  {line}")
    for feature in undeclared:
        ctx.out(f"REQUIRED {feature} is required but the implementation does not declare it "
                "(--require-features)")
    missing = conformance.missing_features(scenario, declared)
    if missing:
        ctx.out(f"scenario skipped: it needs optional feature(s) "
                f"{', '.join(f.value for f in missing)} the implementation does not declare "
                f"(declared: {', '.join(declared) or 'none'})")
        return EXIT_CONFORMANCE_FAILURE if undeclared else EXIT_OK
    run = ctx.deps.runner()(
        implementation, scenario, args.seed, time_limit_s=args.time_limit_s, data_root=None
    )
    trace = run.trace
    ctx.out(f"trace ({len(trace.events)} events, {len(trace.observations)} observations):")
    for line in render_trace(trace, width=None if args.full else 200):
        ctx.out(line)
    if run.error:
        ctx.out(f"run error: {run.error}")
    ctx.out("verdicts:")
    failing = False
    for verdict in evaluate(criteria, trace):
        failing |= verdict.status in (Status.FAIL, Status.ERROR)
        ctx.out(f"  {verdict.status.value.upper():<14} {verdict.criterion_id:<6} exercised {verdict.exercised}")
        for item in verdict.evidence:
            ctx.out(f"      {evidence_line(item)}")
    status = "error" if run.error else ("failed" if failing else "passed")
    ctx.out(f"scenario {status}; trace digest {trace_digest(trace)}; "
            f"failpoints reached: {', '.join(run.failpoints_reached) or 'none'}")
    return EXIT_CONFORMANCE_FAILURE if (run.error or failing or undeclared) else EXIT_OK


def _mutants() -> tuple[Any, ...]:
    from harness.selftest.mutants import MUTANTS

    return MUTANTS


def cmd_selftest(args: argparse.Namespace, ctx: Context) -> int:
    from harness.selftest.killmatrix import default_jobs, matrix_lines, run_selftest, score_lines

    check_report_dir_option(args.report_dir)
    mutants = _mutants()
    if args.mutants:
        known = {m.name: m for m in mutants}
        unknown = [name for name in args.mutants if name not in known]
        if unknown:
            raise UsageError(
                f"--mutants: unknown mutant(s) {', '.join(unknown)}; "
                "`lifecycle-harness list mutants` names them"
            )
        mutants = tuple(known[name] for name in args.mutants)
    all_mutants = mutants
    shard_files: dict[str, bytes] = {}
    from harness.shard import check_shard_options

    check_shard_options(args)
    if getattr(args, "shard", None) is not None:
        from harness.shard import SHARD_FILE, load_durations, select, shard_bytes

        names = [m.name for m in all_mutants]
        mutants = tuple(select(all_mutants, names, args.shard, load_durations(args.durations)))
        shard_files[SHARD_FILE] = shard_bytes("selftest", args.shard, names,
                                              [m.name for m in mutants])
    reference = ctx.deps.resolve_impl(DEFAULT_IMPL_SPEC)
    scenarios = discover_scenarios(ctx, args.scenarios)
    criteria = ctx.deps.criteria()
    jobs = args.jobs or default_jobs()
    ctx.err(f"selftest: reference + {len(mutants)} mutants over {len(scenarios)} scenarios, "
            f"seed {args.seed}, {jobs} job(s)")

    def show(event: Any) -> None:
        if event.phase == "reference":
            ctx.err(f"reference: gate {'passed' if event.caught else 'FAILED'}")
        else:
            verdict = "caught" if event.caught else "MISSED"
            ctx.err(f"[{event.index}/{event.total}] {verdict:<6} {event.name} "
                    f"(killed by {', '.join(event.killed_by) or 'nothing'})")

    reference_result, selftest = run_selftest(
        reference, scenarios, mutants, args.seed, criteria=criteria,
        runner=ctx.deps.runner(), full=args.full, time_limit_s=args.time_limit_s,
        progress=show, jobs=jobs,
    )
    result = dataclasses.replace(
        reference_result, selftest=selftest,
        run=dataclasses.replace(reference_result.run, command=shlex.join((PROG, *ctx.argv))),
    )
    ctx.out("kill matrix (# expected criterion killed it, o expected did not, "
            "+ another criterion killed it):")
    for line in matrix_lines(selftest, [c.id for c in result.criteria]):
        ctx.out(line)
    ctx.out(f"mutation score {selftest.mutation_score:.0%}: "
            f"{sum(m.caught for m in selftest.mutants)}/{len(selftest.mutants)} mutants caught by "
            f"an expected criterion; reference {'passed' if selftest.reference_passed else 'FAILED'}")
    for line in score_lines(selftest):
        ctx.out(line)
    for mutant in selftest.mutants:
        if not mutant.caught:
            ctx.out(f"MISSED {mutant.name}: {mutant.defect} (expected {', '.join(mutant.expected)})")
            ctx.out(f"    replay a scenario: lifecycle-harness replay FILE --impl mutant:{mutant.name}")
    if selftest.blind_criteria:
        ctx.out("criteria that kill no mutant (flagged): " + ", ".join(selftest.blind_criteria))
    if not selftest.reference_passed:
        _print_summary(ctx, reference_result)
    written = _write_reports(result, args.report_dir, shard_files)
    ctx.out("reports: " + ", ".join(display_path(p) for p in written.values()))
    return EXIT_OK if selftest.passed else EXIT_CONFORMANCE_FAILURE


# --------------------------------------------------------------------------- entry point


def _silence_stdout(stream: TextIO) -> None:
    """After the reader went away, point stdout at devnull so the exit flush is quiet."""
    if stream is not sys.stdout:
        return
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _bug_hint(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)[-3:]
    where = "\n".join(f"  at {f.filename}:{f.lineno} in {f.name}" for f in frames)
    return (
        f"{PROG}: internal error (a harness bug, exit 3): {type(exc).__name__}: {exc}\n"
        f"{where}\n"
        f"Please report it with the command line; set {TRACEBACK_ENV}=1 for the full traceback."
    )


_SIGNAL_EXITS = {signal.SIGINT: 130, signal.SIGTERM: 143}
if hasattr(signal, "SIGHUP"):
    _SIGNAL_EXITS[signal.SIGHUP] = 129


class _Terminated(BaseException):
    """A terminating signal reached the harness; unwinds through every ``finally:`` (data
    dirs are removed there) up to :func:`main`."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
        self.ended = 0


def _end_children() -> int:
    """End every child process (and container, via the launcher's cleanup hooks) started."""
    launcher = sys.modules.get("harness.remote.launcher")
    if launcher is None:
        return 0
    try:
        return int(launcher.end_all_children())
    except Exception:  # noqa: BLE001 - best effort while terminating; atexit tries again
        return 0


_HANDLER_PID: list[int] = []
"""The process that installed the handlers (a forked worker inherits them; it must die as
the signal says, not unwind a run it does not own)."""


def _on_signal(signum: int, _frame: Any) -> None:
    if _HANDLER_PID and os.getpid() != _HANDLER_PID[-1]:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    # Ignore repeats so the unwinding below (data dir removal) is not cut short; kill the
    # children first so nothing the main thread waits on can keep it waiting.
    for other in _SIGNAL_EXITS:
        signal.signal(other, signal.SIG_IGN)
    terminated = _Terminated(signum)
    terminated.ended = _end_children()
    raise terminated


def _install_signal_handlers() -> dict[int, Any] | None:
    if threading.current_thread() is not threading.main_thread():
        return None
    previous = {}
    _HANDLER_PID.append(os.getpid())
    for signum in _SIGNAL_EXITS:
        try:
            previous[signum] = signal.signal(signum, _on_signal)
        except (OSError, ValueError):
            continue
    return previous


def _restore_signal_handlers(previous: dict[int, Any] | None) -> None:
    if previous is not None and _HANDLER_PID:
        _HANDLER_PID.pop()
    for signum, handler in (previous or {}).items():
        try:
            signal.signal(signum, handler)
        except (OSError, ValueError, TypeError):
            pass


def _bound_load_waits(args: argparse.Namespace) -> None:
    """``--time-limit-s`` also bounds the load-time handshake of ``process:``/``docker:``."""
    limit = getattr(args, "time_limit_s", None)
    if limit is not None and str(getattr(args, "impl", "")).startswith(("process:", "docker:")):
        from harness.remote.launcher import bound_load_waits

        bound_load_waits(float(limit))


def main(
    argv: Sequence[str] | None = None,
    *,
    deps: Deps | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Run the command line; returns the exit code (see the module docstring)."""
    argv = tuple(sys.argv[1:] if argv is None else argv)
    ctx = Context(deps or Deps(), stdout or sys.stdout, stderr or sys.stderr, argv)
    previous = _install_signal_handlers()
    try:
        args = build_parser().parse_args(argv)
        _bound_load_waits(args)
        return int(args.handler(args, ctx))
    except _Terminated as exc:
        ended = exc.ended + _end_children()
        name = signal.Signals(exc.signum).name
        ctx.err(f"{PROG}: terminated by {name}; ended {ended} child process(es) it had "
                "started and removed its temporary data dirs")
        return _SIGNAL_EXITS[exc.signum]
    except HarnessError as exc:
        ctx.err(f"{PROG}: error: {exc}")
        return exc.exit_code
    except SystemExit as exc:  # --help / --version
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    except KeyboardInterrupt:
        ctx.err(f"{PROG}: interrupted")
        return 130
    except BrokenPipeError:  # e.g. `lifecycle-harness list criteria | head`
        _silence_stdout(ctx.stdout)
        return EXIT_BROKEN_PIPE
    except Exception as exc:
        ctx.err(_bug_hint(exc))
        if os.environ.get(TRACEBACK_ENV):
            ctx.err("".join(traceback.format_exception(exc)))
        return EXIT_HARNESS_BUG
    finally:
        _restore_signal_handlers(previous)
        launcher = sys.modules.get("harness.remote.launcher")
        if launcher is not None:
            launcher.bound_load_waits(None)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
