"""The ``lifecycle-harness`` command line.

Guarantees of :func:`main` (it never raises, it returns the exit code):

* ``0`` — every applicable criterion was exercised and passed, no scenario errored;
* ``1`` — a conformance failure: a criterion failed, errored or was not exercised (in a
  partial run: a selected one), a criterion listed as expected to fail passed (strict
  expectations, the default; ``--lenient-expectations`` only reports it), a
  scenario did not complete (hang, implementation crash), or a feature demanded by
  ``--require-features`` is neither declared nor shown by behaviour, or not met (an
  unknown feature name is ``2``);
* ``2`` — the harness could not do its job because of its input: bad arguments (argparse
  errors included), an invalid scenario, an implementation that cannot be loaded, an
  unwritable report directory (any :class:`~harness.contract.errors.HarnessError`); the message on
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
from harness.contract import conformance
from harness.cli.options import (  # re-exported: commands and tests reach them as cli.X
    PROG,
    Context,
    Deps,
    add_expectations_option,
    add_impl_option,
    implementation_under_test,
    add_scenarios_option,
    add_seed_option,
    add_time_limit_option,
    discover_scenarios,
    expectations_mode,
    load_expected_errors_option,
    load_expectations_option,
    positive_int,
)
from harness.contract import FAILPOINT_DESCRIPTIONS, Failpoint, Implementation
from harness.criteria import feature_evidence
from harness.criteria.base import Status
from harness.contract.errors import (
    EXIT_CONFORMANCE_FAILURE,
    EXIT_HARNESS_BUG,
    EXIT_OK,
    HarnessError,
    UsageError,
)
from harness.report.text import evidence_line, gate_line, level_line
from harness.trace.determinism import RecordingRunner, check_determinism
from harness.report.result import (
    EXPECTATIONS_LENIENT,
    CriterionStatus,
    DeterminismCheck,
    DivergenceRecord,
    RunResult,
    ScenarioStatus,
    gate_failing_statuses,
)
from harness.cli.terminal import COLOR_CHOICES, ProgressLine, Style, style_for
from harness.running.suite import (
    DEFAULT_IMPL_SPEC,
    ProgressEvent,
    display_path,
    evaluate,
    not_counted_excused,
    render_faults,
    run_suite,
)
from harness.trace.record import trace_digest
from harness.trace.lines import render_trace

DEFAULT_REPORT_DIR = os.path.join("reports", "latest")
"""Where the newest run's reports are found (a link to ``reports/<UTC start>-<id>/``)."""
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
        help="optional features the run must establish (declared or shown by behaviour, and "
        f"met), comma-separated, or 'all' ({optional}); one neither declared nor shown, or "
        "not met, fails the gate (exit 1), an "
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
        "--report-dir", default=None, metavar="DIR",
        help="write report.json, junit.xml, report.md, report.html exactly there (default: a "
        "new reports/<UTC start>-<run id>/ per run, reports/latest pointing at the newest, "
        "the last 20 kept)",
    )
    add_time_limit_option(parser)
    add_expectations_option(parser)
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
    add_partial_run_options(parser)
    add_color_option(parser)
    add_parallel_options(parser)
    parser.set_defaults(handler=cmd_run)


def add_partial_run_options(parser: argparse.ArgumentParser) -> None:
    """``--criteria``, ``--stage``, ``-x/--fail-fast``, ``--last-failed`` (see
    :mod:`harness.running.selection` for the rules, ``docs/cli.md`` for the user's view)."""
    parser.add_argument(
        "--criteria", action="append", metavar="ID,ID",
        help="judge only these criteria (comma-separated or repeated; others are reported "
        "not_selected); without --scenarios, run the bundled scenarios of their stages",
    )
    parser.add_argument(
        "--stage", action="append", metavar="STAGE",
        help="judge only the criteria of these stages (x, l1..l5, m; comma-separated or "
        "repeated) and run their scenarios",
    )
    parser.add_argument(
        "-x", "--fail-fast", action="store_true",
        help="stop after the first scenario that fails or errors; the scenarios after it are "
        "reported not_run",
    )
    parser.add_argument(
        "--last-failed", action="store_true",
        help="rerun only the scenarios that failed last time (recorded in "
        ".lifecycle-harness/running/lastfailed.json) and judge the criteria that failed; with no "
        "recorded failure, run everything",
    )


def add_color_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--color", choices=COLOR_CHOICES, default="auto",
        help="colour and a live progress line: auto (on a terminal, unless NO_COLOR is set), "
        "always, never (default: auto)",
    )


def add_parallel_options(parser: argparse.ArgumentParser, *, shard: bool = True) -> None:
    """``--jobs`` (worker processes) and, for commands whose cases can be split over
    machines, ``--shard I/N`` and ``--durations FILE`` (see harness.running.parallel, harness.running.shard)."""
    from harness.cli.options import add_jobs_option
    from harness.running.shard import add_shard_options

    add_jobs_option(parser)
    if shard:
        add_shard_options(parser)


def _add_list(sub: Any) -> None:
    parser = sub.add_parser("list", help="list criteria, scenarios, failpoints, mutants, features "
                            "or profiles")
    parser.add_argument("what", choices=("criteria", "scenarios", "failpoints", "mutants",
                                         "features", "profiles"))
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
    add_expectations_option(parser)
    parser.add_argument(
        "--full", action="store_true", help="print trace event data without shortening it"
    )
    parser.add_argument(
        "--trials", type=positive_int, default=1, metavar="K",
        help="run the scenario K times (the first one printed in full) and report, for each "
        "criterion that failed in any trial, in how many of the K it failed: a finding that "
        "depends on thread timing (e.g. adapter:langgraph-async) as a rate (default: 1)",
    )
    from harness.campaigns.sweep import add_replay_options

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
        help="run every scenario for every mutant, so the matrix lists every criterion that "
        "kills it (default: the scenarios that exercise the mutant's expected criteria on the "
        "reference, one at a time, until each of them has failed); either way a mutant runs "
        "only the scenarios whose reference run calls code it edits (the others run as the "
        "reference did and cannot kill it)",
    )
    witnesses = parser.add_mutually_exclusive_group()
    witnesses.add_argument(
        "--witnesses", metavar="FILE", default=None,
        help="a witness table (JSON: mutant name -> scenario ids that caught it before): each "
        "mutant runs its witnesses first and stops there when they fail every criterion it "
        "names; they only order, never decide (default: the table committed with the bundled "
        "mutants)",
    )
    witnesses.add_argument(
        "--no-witnesses", action="store_true",
        help="order each mutant's scenarios by its stages alone",
    )
    parser.add_argument(
        "--write-witnesses", metavar="FILE", default=None,
        help="write the table of what caught each mutant in this run to FILE (entries of "
        "mutants not run here are kept from FILE if it exists)",
    )
    parser.add_argument(
        "--generate", action="store_true",
        help="self-test by generation alone: no bundled scenario; each mutant meets the "
        "generated cases of the seed (`lifecycle-harness generate`) in order until one fails "
        "on it and passes on the reference; prints and writes (generation.md, generation.json) "
        "the cases it took to catch each mutant",
    )
    parser.add_argument(
        "--budget", type=positive_int, default=None, metavar="N",
        help="with --generate: at most N generated cases per mutant (default: 2000)",
    )
    add_parallel_options(parser)
    parser.set_defaults(handler=cmd_selftest)


SUBCOMMANDS: list[Callable[[Any], None]] = [_add_run, _add_list, _add_replay, _add_selftest]
"""Each adds one subcommand to the subparsers action (append to add a command)."""


def _add_chaos(sub: Any) -> None:
    from harness.cli import chaos_command

    chaos_command.add_parser(sub)


SUBCOMMANDS.append(_add_chaos)


def _add_generate(sub: Any) -> None:
    from harness.cli import generate_command

    generate_command.add_parser(sub)


SUBCOMMANDS.append(_add_generate)


def _add_compare_and_matrix(sub: Any) -> None:
    from harness.cli import compare_command, matrix_command

    compare_command.add_parser(sub)
    matrix_command.add_parser(sub)


SUBCOMMANDS.append(_add_compare_and_matrix)


def _add_parallel_commands(sub: Any) -> None:
    from harness.cli import merge_command, sweep_command

    merge_command.add_parser(sub)
    sweep_command.add_parser(sub)


SUBCOMMANDS.append(_add_parallel_commands)


def _add_diff(sub: Any) -> None:
    from harness.cli import diff_command

    diff_command.add_parser(sub)


SUBCOMMANDS.append(_add_diff)


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


def _progress_printer(ctx: Context, style: Style | None = None
                      ) -> tuple[Callable[[ProgressEvent], None], ProgressLine]:
    line = ProgressLine(ctx.stderr, style or Style())

    def show(event: ProgressEvent) -> None:
        if event.phase == "start":
            line.start(event.index, event.total, event.scenario_id)
            return
        status = event.status.value if event.status else "?"
        line.done(event.index, event.total, event.scenario_id, status, event.duration_s,
                  event.error)

    return show, line


@dataclasses.dataclass(frozen=True, slots=True)
class _Selection:
    scenarios: tuple[Any, ...]
    criteria: frozenset[str] | None
    """The criteria judged (None: all of them)."""
    how: str = ""
    add_exercised: bool = False
    """``--last-failed``: also judge every criterion the rerun scenarios exercise or fail
    (known only after the run)."""


def _select(args: argparse.Namespace, ctx: Context, criteria: Sequence[Any]) -> _Selection:
    """Which scenarios run and which criteria are judged (rules: :mod:`harness.running.selection`)."""
    from harness.running import lastfailed
    from harness.running import selection

    named = selection.parse_criteria(getattr(args, "criteria", None), criteria)
    stages = selection.parse_stages(getattr(args, "stage", None), criteria)
    chosen = set(named) | set(selection.criteria_of_stages(stages, criteria))
    how = [f"--criteria {','.join(named)}"] if named else []
    how += [f"--stage {','.join(stages)}"] if stages else []
    scenarios = tuple(discover_scenarios(ctx, args.scenarios))
    rerun = False
    if getattr(args, "last_failed", False):
        record = lastfailed.load()
        wanted = set(record.scenarios)
        found = tuple(s for s in scenarios if s.id in wanted)
        if not record.scenarios:
            ctx.err("--last-failed: no previous failures recorded; running everything")
        elif not found:
            ctx.err(f"--last-failed: none of the {len(wanted)} scenario(s) that failed last "
                    "time is among the scenarios found; running everything")
        else:
            rerun, scenarios = True, found
            ctx.err(f"--last-failed: rerunning the {len(found)} scenario(s) that failed last time")
            how.append(f"--last-failed ({len(found)} scenario(s))")
            if not chosen:
                known = {c.id for c in criteria}
                recorded = frozenset(cid for cid in record.criteria if cid in known)
                return _Selection(scenarios, recorded, "; ".join(how), add_exercised=True)
    if chosen and not args.scenarios and not rerun:
        needed = selection.stages_of(chosen, criteria)
        scenarios = tuple(s for s in scenarios if s.stage in needed)
        if not scenarios:
            raise UsageError(f"no scenario of stage(s) {', '.join(needed)} found for the "
                             "selected criteria; pass --scenarios with scenarios that exercise them")
    if not chosen and args.scenarios:
        chosen = set(selection.criteria_of_stages({s.stage for s in scenarios}, criteria))
        how.append("--scenarios (the criteria of their stages)")
    if not chosen or chosen >= {c.id for c in criteria}:
        return _Selection(scenarios, None, "; ".join(how))
    return _Selection(scenarios, frozenset(chosen), "; ".join(how))


def _applicable(ctx: Context, implementation: Any, spec: str, scenarios: Sequence[Any]
                ) -> tuple[Any, ...]:
    """The scenarios an implementation that says which ones it can run (a real CLI:
    ``why_not``) can run; the others are named on stderr with the reason, not run."""
    why_not = getattr(implementation, "why_not", None)
    if not callable(why_not):
        return tuple(scenarios)
    kept = []
    for scenario in scenarios:
        reason = why_not(scenario)
        if reason:
            ctx.err(f"not applicable to {spec}: {scenario.id}: {reason}")
        else:
            kept.append(scenario)
    if not kept:
        raise UsageError(f"none of the {len(scenarios)} scenario(s) applies to {spec}; "
                         "docs/real-systems.md lists those that do")
    ctx.err(f"{len(kept)} of {len(scenarios)} scenario(s) apply to {spec}")
    return tuple(kept)


def cmd_run(args: argparse.Namespace, ctx: Context) -> int:
    from harness.running import lastfailed
    from harness.running.selection import bearing_on, restrict, scenario_failed

    check_report_dir_option(REPORTS_ROOT if args.report_dir is None else args.report_dir)
    required = required_features(args)
    implementation = implementation_under_test(ctx, args)
    criteria = ctx.deps.criteria()
    expectations = load_expectations_option(args, criteria)
    expected_errors = load_expected_errors_option(args)
    if not getattr(args, "expectations", None):  # a profile explains its divergences
        from harness.profiles import expectations_of

        expectations = expectations_of(implementation) or {}
    from harness.implementations import not_applicable_of

    not_applicable = not_applicable_of(implementation)
    chosen = _select(args, ctx, criteria)
    scenarios, extra_files = _shard_of(args, chosen.scenarios)
    scenarios = _applicable(ctx, implementation, args.impl, scenarios)
    renderer = ctx.deps.fault_renderer()
    ctx.err(f"fault plans ({len(scenarios)} scenarios, seed {args.seed}):")
    for scenario in scenarios:
        ctx.err(_fault_plan_line(renderer, scenario))
    runner = ctx.deps.runner()
    recording = RecordingRunner(runner) if getattr(args, "check_determinism", False) else None
    progress, progress_line = _progress_printer(ctx, style_for(ctx.stderr, args.color))
    stop_after = None
    if args.fail_fast:
        def stop_after(scenario_result: Any) -> bool:
            from harness.running.suite import expect_errors

            judged = None if chosen.add_exercised else chosen.criteria
            (marked,) = expect_errors((scenario_result,), expected_errors)
            return scenario_failed(marked, judged, expectations)
    try:
        result = run_suite(
            implementation,
            scenarios,
            args.seed,
            criteria=criteria,
            runner=recording or runner,
            expectations=expectations or None,
            progress=progress,
            time_limit_s=args.time_limit_s,
            impl_spec=args.impl,
            fault_renderer=renderer,
            command=shlex.join((PROG, *ctx.argv)),
            required_features=required,
            stop_after=stop_after,
            expectations_mode=expectations_mode(args),
            # the determinism check keeps the first traces in this process
            jobs=1 if recording is not None else getattr(args, "jobs", 1),
            expected_errors=expected_errors,
            not_applicable=not_applicable,
        )
    finally:  # an error message must not land on the live progress line
        progress_line.finish()
    judged = chosen.criteria
    if chosen.add_exercised:
        judged = (judged or frozenset()) | bearing_on(result)
        if judged >= {c.id for c in criteria}:
            judged = None
    if judged is not None:
        result = restrict(result, judged, chosen.how)
    if recording is not None:
        ran = {s.id for s in result.scenarios if s.status is not ScenarioStatus.NOT_RUN}
        result = _with_determinism(ctx, result, implementation,
                                   [s for s in scenarios if s.id in ran], args, runner, recording)
    from harness.running.shard import DURATIONS_FILE, durations_bytes

    extra_files[DURATIONS_FILE] = durations_bytes({s.id: s.duration_s for s in result.scenarios})
    written = _write_run_reports(ctx, result, args.report_dir, extra_files)
    problem = lastfailed.save(lastfailed.updated(lastfailed.load_quietly(), result, expectations))
    if problem:
        ctx.err(f"warning: {problem}")
    style = style_for(ctx.stdout, args.color)
    _print_summary(ctx, result, style)
    ctx.out("reports: " + ", ".join(display_path(p) for p in written.values()))
    _print_failing(ctx, result, style, args.expectations)
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
    from harness.running.shard import SHARD_FILE, check_shard_options, load_durations, select, shard_bytes

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
    empty, a file, a symbolic link, not writable, or refused by its file system when the
    directory and a probe file are created in it (``/proc``, ``/sys`` as root)."""
    from harness.report import prepare_report_dir

    problem = prepare_report_dir(report_dir)
    if problem is not None:
        raise UsageError(f"--report-dir {report_dir!r}: {problem}")


REPORTS_ROOT = "reports"


def _write_run_reports(ctx: Context, result: RunResult, report_dir: str | None,
                       extra: dict[str, bytes] | None = None) -> dict[str, Path]:
    """``--report-dir`` exactly, or a new ``reports/<UTC start>-<id>/`` with
    ``reports/latest`` pointing at it and old run dirs pruned (:mod:`harness.cli.report_location`)."""
    if report_dir is not None:
        return _write_reports(result, report_dir, extra)
    import datetime as _dt

    from harness.cli import report_location
    from harness.report import RENDERERS

    try:
        started = _dt.datetime.fromisoformat(result.run.started)
    except ValueError:
        started = _dt.datetime.now(_dt.timezone.utc)
    run_dir = report_location.new_run_dir(REPORTS_ROOT, started)
    written = _write_reports(result, os.fspath(run_dir), extra)
    try:
        report_location.point_latest(REPORTS_ROOT, run_dir)
        from harness.running.shard import DURATIONS_FILE, SHARD_FILE

        report_location.prune(REPORTS_ROOT, {name for name, _ in RENDERERS.values()}
                              | {DURATIONS_FILE, SHARD_FILE})
    except OSError as exc:
        ctx.err(f"warning: reports written to {display_path(run_dir)} but "
                f"{os.path.join(REPORTS_ROOT, 'latest')} could not be updated: "
                f"{exc.strerror or exc}")
    return written


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


_LABEL_COLOURS = {
    CriterionStatus.FAILED: "red",
    CriterionStatus.ERROR: "red",
    CriterionStatus.NOT_EXERCISED: "yellow",
    CriterionStatus.UNEXPECTED_PASS: "magenta",
    CriterionStatus.EXPECTED_FAIL: "dim",
}


def _print_failing(ctx: Context, result: RunResult, style: Style,
                   expectations_file: str | None = None) -> None:
    """The summary's last block: each criterion failing the gate with how to replay it."""
    statuses = gate_failing_statuses(result.run.expectations_mode)
    failing = [c for c in result.criteria if c.status in statuses]
    errored = [s for s in result.scenarios if s.status is ScenarioStatus.ERROR]
    succeeded = (list(result.unexpected_successes)
                 if result.run.expectations_mode != EXPECTATIONS_LENIENT else [])
    not_run = sum(1 for s in result.scenarios if s.status is ScenarioStatus.NOT_RUN)
    if not failing and not errored and not succeeded:
        return
    ctx.out(style.paint(f"failing ({len(failing)} criteria, {len(errored)} scenario errors"
                        + (f", {len(succeeded)} unexpected successes" if succeeded else "")
                        + "):", "bold"))
    for c in failing:
        ctx.out(f"  {style.paint(c.id, 'red')} {c.status.value}: {c.title}")
        replays = list(dict.fromkeys(v.replay for v in c.violations))
        for replay in replays[:MAX_VIOLATIONS_PRINTED]:
            ctx.out(f"    {replay}")
        if len(replays) > MAX_VIOLATIONS_PRINTED:
            ctx.out(f"    … {len(replays) - MAX_VIOLATIONS_PRINTED} more in the reports")
        if c.status is CriterionStatus.NOT_EXERCISED and not_run:
            ctx.out(f"    not exercised by the scenarios that ran ({not_run} not run after "
                    "--fail-fast stopped)")
        elif c.status is CriterionStatus.NOT_EXERCISED:
            ctx.out("    no scenario reached its hard case (`lifecycle-harness list scenarios`)")
        if c.status is CriterionStatus.UNEXPECTED_PASS:
            where = f" {expectations_file}" if expectations_file else ""
            ctx.out(f"    listed as expected to fail but passed: remove it from the "
                    f"expectations file{where} (or pass --lenient-expectations)")
    for s in errored:
        ctx.out(f"  {style.paint(s.id, 'red')} scenario error"
                + (f" (expected another: {s.expected_error})" if s.expected_error else ""))
        ctx.out(f"    {s.replay}")
    for s in succeeded:
        where = f" {expectations_file}" if expectations_file else ""
        ctx.out(f"  {style.paint(s.id, 'magenta')} unexpected success: listed as expected to "
                f"error ({s.expected_error}) but it {s.status.value}: remove it from the "
                f"expectations file{where} (or pass --lenient-expectations)")


def _print_summary(ctx: Context, result: RunResult, style: Style | None = None) -> None:
    style = style or Style()
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
        line = f"{style.paint(f'{label:<13}', _LABEL_COLOURS[c.status])} {c.id:<6} {c.title}"
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
        elif s.status is ScenarioStatus.EXPECTED_ERROR:
            first = s.error.splitlines()[0] if s.error else "run error"
            label = style.paint(f"{'expected error':<13}", "dim")
            ctx.out(f"{label} {s.id}: {first} [expected: {s.expected_error}]")
        elif s.unexpected_success:
            label = style.paint("UNEXPECTED SUCCESS", "magenta")
            ctx.out(f"{label} {s.id}: {s.status.value}, listed as expected to error "
                    f"[{s.expected_error}]")
    not_run = [s for s in result.scenarios if s.status is ScenarioStatus.NOT_RUN]
    if not_run:
        ctx.out(f"{'not run':<13} {len(not_run)} scenario(s) after the first failure "
                "(--fail-fast)")
    not_selected = [c.id for c in result.criteria if c.status is CriterionStatus.NOT_SELECTED]
    if not_selected:
        ctx.out(f"{'not selected':<13} {len(not_selected)} criteria not judged by this partial "
                f"run ({result.run.selection or 'selection'})")
    excused = [s for s in result.scenarios if s.faults_excused]
    if excused:
        ctx.out(f"{'excused':<13} {len(excused)} scenario(s) written for an optional feature "
                "the implementation neither declares nor showed: their planned faults on its "
                "path did not happen, none of their passes counts: "
                + ", ".join(f"{s.id} ({', '.join(s.requires)})" for s in excused))
    for message in result.conformance.required_unmet:
        ctx.out(f"{'REQUIRED':<13} {message} (--require-features)")
    ctx.out(level_line(result))
    ctx.out(style.paint(gate_line(result), "green" if result.gate_passed else "red"))


def cmd_list(args: argparse.Namespace, ctx: Context) -> int:
    if args.what == "criteria":
        for c in ctx.deps.criteria():
            ctx.out(f"{c.id:<6} {c.stage:<3} {c.title}")
            ctx.out(f"{'':<11}{c.statement}")  # the English requirement, under its title
    elif args.what == "scenarios":
        for s in discover_scenarios(ctx, args.scenarios):
            ctx.out(f"{s.id}  {s.stage}  {display_path(s.file)}")
    elif args.what == "mutants":
        for mutant in _mutants():
            klass = f" ({mutant.trust_class})" if mutant.trust_class else ""
            ctx.out(f"{mutant.name}  [{', '.join(mutant.expected)}]{klass}  {mutant.defect}")
    elif args.what == "profiles":
        from harness.profiles import PROFILES

        for profile in PROFILES:
            ctx.out(f"{profile.spec:<26} {profile.system}: {profile.summary} "
                    f"({len(profile.divergences)} divergence(s), {len(profile.not_applicable)} "
                    "n/a, each with its source)")
        ctx.out("profile:NAME@cli runs a profile as its real CLI (cli:NAME) is run: on that "
                "CLI's applicable scenarios, judged from outside; `compare` puts it beside the "
                "CLI's report (docs/real-systems.md)")
    elif args.what == "features":
        core = ", ".join(sorted(conformance.CORE_FEATURES))
        ctx.out(f"core (always required, cannot be declared away): {core}")
        ctx.out("optional (in force when declared or shown by behaviour; every scenario runs):")
        for entry in conformance.OPTIONAL:
            needs = f"requires = [\"{entry.feature.value}\"]"
            if entry.implied_by:
                needs = f"{entry.implied_by} or {needs}"
            ctx.out(f"{entry.feature.value:<20} gates {', '.join(entry.criteria)}; shown when "
                    f"{entry.shown_by}; without it, {entry.without}; scenarios written for "
                    f"it: {needs} — {entry.why_optional}")
    else:
        width = max(len(fp.value) for fp in Failpoint)
        for fp in Failpoint:
            ctx.out(f"{fp.value:<{width}}  {FAILPOINT_DESCRIPTIONS.get(fp, '')}")
    return EXIT_OK


def resolve_scenario_file(ctx: Context, path: str) -> str:
    """A replay path: a file as given, else the same path under the bundled suite (replay
    commands name bundled scenarios relative to it, so they work from any directory)."""
    if os.path.isfile(path):
        return path
    bundled = os.path.join(ctx.deps.default_scenario_dir(), path)
    if not os.path.isabs(path) and os.path.isfile(bundled):
        return bundled
    raise UsageError(
        f"scenario file {path!r} not found, neither in the working directory nor in the "
        f"bundled suite ({ctx.deps.default_scenario_dir()}); pass the path printed in the "
        "report's replay command"
    )


def cmd_replay(args: argparse.Namespace, ctx: Context) -> int:
    path = resolve_scenario_file(ctx, args.scenario_file)
    required = required_features(args)
    variant = getattr(args, "variant", None)
    scenario = (ctx.deps.load_scenario(path, variant) if variant is not None
                else ctx.deps.load_scenario(path))
    from harness.campaigns.sweep import apply_replay_options

    scenario = apply_replay_options(scenario, args)  # --crash-at/--raise-at/--hold-at
    implementation = implementation_under_test(ctx, args)
    criteria = conformance.core_always_applies(ctx.deps.criteria())
    expectations = load_expectations_option(args, criteria)
    declared = tuple(str(f) for f in implementation.info.features)
    renderer = ctx.deps.fault_renderer()
    ctx.out(f"scenario {scenario.id} ({display_path(scenario.file)}), seed {args.seed}, "
            f"implementation {implementation.info.name} {implementation.info.version}")
    ctx.out("fault plan:")
    faults = render_faults(renderer, scenario)
    for line in faults or ("(no faults)",):
        ctx.out(f"  {line}")
    run = ctx.deps.runner()(
        implementation, scenario, args.seed, time_limit_s=args.time_limit_s, data_root=None
    )
    trace = run.trace
    ctx.out(f"trace ({len(trace.events)} events, {len(trace.observations)} observations):")
    for line in render_trace(trace, width=None if args.full else 200):
        ctx.out(line)
    if run.error:
        ctx.out(f"run error: {run.error}")
    excused = tuple(getattr(run, "excused", ()))
    for line in excused:
        ctx.out(f"excused: {line}")
    evidence = feature_evidence.shown(trace)
    shown = [s.feature.value for s in evidence]
    ctx.out("optional features: declared " + (", ".join(
        f for f in declared if f in {o.value for o in conformance.OPTIONAL_FEATURES}) or "none")
        + "; shown by behaviour " + (", ".join(shown) or "none"))
    for item in evidence:
        ctx.out(f"  {item.feature.value}: {item.note} "
                f"[trace {', '.join(str(i) for i in item.trace_indexes)}]")
    undeclared = [f for f in required if f not in declared and f not in shown]
    for feature in undeclared:
        ctx.out(f"REQUIRED {feature} is required but the implementation does not declare it "
                "(and this scenario did not show it) (--require-features)")
    ctx.out("verdicts:")
    failing = False
    for verdict in evaluate(criteria, trace):
        if excused and not run.error:
            verdict = not_counted_excused(verdict, excused)
        bad = verdict.status in (Status.FAIL, Status.ERROR)
        label = verdict.status.value.upper()
        if bad and verdict.criterion_id in expectations:
            # Expected to fail: shown, not counted (the same meaning as in `run`).
            label = "EXPECTED FAIL"
        else:
            failing |= bad
        ctx.out(f"  {label:<14} {verdict.criterion_id:<6} exercised {verdict.exercised}")
        for item in verdict.evidence:
            ctx.out(f"      {evidence_line(item)}")
    status = "error" if run.error else ("failed" if failing else "passed")
    ctx.out(f"scenario {status}; trace digest {trace_digest(trace)}; "
            f"failpoints reached: {', '.join(run.failpoints_reached) or 'none'}")
    trials = getattr(args, "trials", 1)
    if trials > 1:
        failing |= _report_trials(ctx, args, implementation, scenario, criteria, expectations,
                                  (run, _failed_criteria(criteria, run, expectations)), trials)
    return EXIT_CONFORMANCE_FAILURE if (run.error or failing or undeclared) else EXIT_OK


def _failed_criteria(criteria: Any, run: Any, expectations: Any) -> frozenset[str]:
    """The criteria one run of a scenario fails (excused faults and expected failures out)."""
    excused = tuple(getattr(run, "excused", ()))
    failed = set()
    for verdict in evaluate(criteria, run.trace):
        if excused and not run.error:
            verdict = not_counted_excused(verdict, excused)
        if verdict.status in (Status.FAIL, Status.ERROR) and \
                verdict.criterion_id not in expectations:
            failed.add(verdict.criterion_id)
    return frozenset(failed)


def _report_trials(ctx: Context, args: argparse.Namespace, implementation: Any, scenario: Any,
                   criteria: Any, expectations: Any, first: tuple[Any, frozenset[str]],
                   trials: int) -> bool:
    """Run the scenario ``trials - 1`` more times and print, per criterion, in how many of
    the ``trials`` runs it failed, and how many distinct traces they gave (one: the finding
    does not depend on timing). True when any trial failed or errored."""
    runs = [first]
    for _ in range(trials - 1):
        run = ctx.deps.runner()(
            implementation, scenario, args.seed, time_limit_s=args.time_limit_s, data_root=None)
        runs.append((run, _failed_criteria(criteria, run, expectations)))
    digests = {trace_digest(run.trace) for run, _ in runs}
    errors = sum(1 for run, _ in runs if run.error)
    ctx.out(f"trials: {trials} runs of {scenario.id}, {len(digests)} distinct trace(s), "
            f"{errors} error(s)")
    counts: dict[str, int] = {}
    for _, failed in runs:
        for criterion_id in failed:
            counts[criterion_id] = counts.get(criterion_id, 0) + 1
    order = [c.id for c in criteria]
    for criterion_id in sorted(counts, key=order.index):
        ctx.out(f"  {criterion_id:<6} failed in {counts[criterion_id]} of {trials} trials "
                f"({100 * counts[criterion_id] / trials:.0f}%)")
    if not counts:
        ctx.out("  no criterion failed in any trial")
    return bool(counts) or errors > 0


def _mutants() -> tuple[Any, ...]:
    from harness.mutants.catalogue import MUTANTS

    return MUTANTS


def _witness_table(args: argparse.Namespace) -> dict[str, tuple[str, ...]]:
    """The witnesses ``selftest`` orders mutants by (a bad file is a usage error, exit 2)."""
    from harness.campaigns.selftest import witnesses

    if args.no_witnesses:
        return {}
    if args.write_witnesses:  # refused before the run, not after it
        folder = os.path.dirname(os.path.abspath(args.write_witnesses))
        if os.path.isdir(args.write_witnesses) or not os.path.isdir(folder) \
                or not os.access(folder, os.W_OK):
            raise UsageError(f"--write-witnesses {args.write_witnesses!r}: not a file in a "
                             "writable directory; pass a path like reports/witnesses.json")
    try:
        return witnesses.load(args.witnesses or witnesses.PACKAGED_WITNESSES)
    except witnesses.WitnessError as exc:
        if args.witnesses is None:  # the packaged table is only an order: run without it
            return {}
        raise UsageError(f"--witnesses: {exc}") from None


def _write_witnesses(path: str, mutants: Any) -> None:
    from harness.campaigns.selftest import witnesses

    try:
        previous = witnesses.load(path) if os.path.exists(path) else {}
    except witnesses.WitnessError:
        previous = {}  # an unreadable table is replaced whole
    try:
        witnesses.write(path, witnesses.table_of(mutants), previous)
    except OSError as exc:
        raise UsageError(f"--write-witnesses {path!r}: cannot write it ({exc.strerror or exc})"
                         "; pass a writable path") from None


def cmd_selftest(args: argparse.Namespace, ctx: Context) -> int:
    from harness.campaigns.selftest.killmatrix import default_jobs, matrix_lines, run_selftest, score_lines
    from harness.campaigns.selftest.killmatrix import NEVER_EXECUTED, never_executed

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
    from harness.running.shard import check_shard_options

    check_shard_options(args)
    if getattr(args, "shard", None) is not None:
        from harness.running.shard import SHARD_FILE, load_durations, select, shard_bytes

        names = [m.name for m in all_mutants]
        mutants = tuple(select(all_mutants, names, args.shard, load_durations(args.durations)))
        shard_files[SHARD_FILE] = shard_bytes("selftest", args.shard, names,
                                              [m.name for m in mutants])
    if args.generate:
        return _selftest_by_generation(args, ctx, mutants)
    if args.budget is not None:
        raise UsageError("--budget applies only with --generate (the bundled scenarios' "
                         "self-test runs every scenario it needs)")
    table = _witness_table(args)
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
        progress=show, jobs=jobs, witnesses=table,
    )
    if args.write_witnesses:
        _write_witnesses(args.write_witnesses, selftest.mutants)
        ctx.out(f"witnesses: {display_path(args.write_witnesses)}")
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
            if never_executed(mutant):  # a gap in the scenarios, not a criterion's miss
                ctx.out(f"    not run: {NEVER_EXECUTED}; add a scenario that reaches it")
                continue
            ctx.out(f"    replay a scenario: lifecycle-harness replay FILE --impl mutant:{mutant.name}")
    if selftest.blind_criteria:
        ctx.out("criteria that kill no mutant (flagged): " + ", ".join(selftest.blind_criteria))
    if not selftest.reference_passed:
        _print_summary(ctx, reference_result)
    written = _write_reports(result, args.report_dir, shard_files)
    ctx.out("reports: " + ", ".join(display_path(p) for p in written.values()))
    return EXIT_OK if selftest.passed else EXIT_CONFORMANCE_FAILURE


GENERATION_BUDGET = 2000


def _selftest_by_generation(args: argparse.Namespace, ctx: Context, mutants: Sequence[Any]) -> int:
    """``selftest --generate``: the cases-to-catch table (see
    :func:`harness.campaigns.generate.catch_mutants`)."""
    import json

    from harness.campaigns.chaos import require_hypothesis
    from harness.campaigns.generate import catch_lines, catch_mutants
    from harness.report.report_set import write_set

    require_hypothesis()
    if args.scenarios or args.full or args.witnesses or args.no_witnesses or args.write_witnesses:
        raise UsageError("--generate runs generated cases only: drop --scenarios, --full and "
                         "the witness options")
    budget = args.budget or GENERATION_BUDGET
    jobs = args.jobs or 1
    reference = ctx.deps.resolve_impl(DEFAULT_IMPL_SPEC)
    ctx.err(f"selftest --generate: {len(mutants)} mutants, seed {args.seed}, at most {budget} "
            f"generated cases each, {jobs} job(s)")

    def show(item: Any) -> None:
        number, total, catch = item
        found = (f"caught after {catch.cases} case(s) by {', '.join(catch.failing) or 'a run error'}"
                 if catch.cases is not None else f"MISSED in {budget} cases")
        ctx.err(f"[{number}/{total}] {catch.mutant}: {found}")

    catches = catch_mutants(mutants, ctx.deps.resolve_impl, reference=reference, seed=args.seed,
                            budget=budget, criteria=ctx.deps.criteria(), runner=ctx.deps.runner(),
                            time_limit_s=args.time_limit_s, jobs=jobs, progress=show)
    lines = catch_lines(catches, budget)
    for line in lines:
        ctx.out(line)
    data = {"seed": args.seed, "budget": budget, "mutants": [dataclasses.asdict(c) for c in catches]}
    files = {"generation.md": ("# Self-test by generation\n\n" + "\n".join(lines) + "\n").encode(),
             "generation.json": (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()}
    check_report_dir_option(args.report_dir)
    written = write_set(args.report_dir, files)
    ctx.out("reports: " + ", ".join(display_path(p) for p in written.values()))
    missed = [c for c in catches if c.cases is None]
    return EXIT_OK if not missed else EXIT_CONFORMANCE_FAILURE


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


def _close_children_of(implementations: Sequence[Any]) -> None:
    """The out-of-process implementations a command resolved keep an inspector and spare
    children running for its next run; the command is over, so they end now (a host that
    calls ``main`` again, a test or the pytest plugin, must not collect them)."""
    launcher = sys.modules.get("harness.remote.launcher")
    if launcher is None:
        return
    for implementation in implementations:
        if isinstance(implementation, launcher.ProcessImplementation):
            try:
                implementation.close()
            except Exception:  # noqa: BLE001 - cleanup only; the exit code stands
                pass


def main(
    argv: Sequence[str] | None = None,
    *,
    deps: Deps | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Run the command line; returns the exit code (see the module docstring)."""
    argv = tuple(sys.argv[1:] if argv is None else argv)
    deps = deps or Deps()
    resolved: list[Any] = []

    def resolve_and_remember(spec: str) -> Any:
        implementation = deps.resolve_impl(spec)
        resolved.append(implementation)
        return implementation

    ctx = Context(dataclasses.replace(deps, resolve_impl=resolve_and_remember),
                  stdout or sys.stdout, stderr or sys.stderr, argv)
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
        _close_children_of(resolved)
        _restore_signal_handlers(previous)
        launcher = sys.modules.get("harness.remote.launcher")
        if launcher is not None:
            launcher.bound_load_waits(None)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
