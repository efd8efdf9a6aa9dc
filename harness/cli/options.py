"""What every subcommand shares: the command context, the injectable dependencies, the
common options and their argument types, and scenario discovery with its usage errors.

It sits below :mod:`harness.cli.app` and the commands registered there (``chaos``), so a command
module imports it and never the command line itself (no import cycle). Guarantees: option
types raise ``argparse.ArgumentTypeError`` with a message that says what to give instead;
:func:`discover_scenarios` raises :class:`~harness.contract.errors.UsageError` for a path that does
not exist or holds no scenario; every default dependency is imported lazily.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence, TextIO

from harness.contract import Implementation
from harness.criteria.base import Criterion
from harness.contract.errors import UsageError
from harness.running.parallel import default_jobs
from harness.running.suite import DEFAULT_IMPL_SPEC, DEFAULT_SEED, DEFAULT_TIME_LIMIT_S

PROG = "lifecycle-harness"


# --------------------------------------------------------------------------- dependencies


def _default_resolve(spec: str) -> Implementation:
    from harness.implementations.specs import resolve

    return resolve(spec)


def _default_discover(paths: Sequence[str]) -> tuple[Any, ...]:
    from harness.scenarios.loader import discover

    return tuple(discover(paths))


def _default_load_scenario(path: str, variant: str | None = None) -> Any:
    from harness.scenarios.loader import load

    return load(path, variant)


def _default_scenario_dir() -> str:
    # package data found through importlib.resources: a wheel install finds its own suite
    from harness.scenarios.loader import bundled_suite_dir

    return os.fspath(bundled_suite_dir())


def _default_criteria() -> tuple[Criterion, ...]:
    from harness.running.suite import default_criteria

    return default_criteria()


def _default_runner() -> Callable[..., Any]:
    from harness.running.suite import default_runner

    return default_runner()


def _default_fault_renderer() -> Callable[[Any], Sequence[str]]:
    from harness.running.suite import default_fault_renderer

    return default_fault_renderer()


@dataclass(frozen=True, slots=True)
class Deps:
    """What the commands use from the rest of the harness; tests inject fakes.

    Every default is imported lazily, when a command first needs it.
    """

    resolve_impl: Callable[[str], Implementation] = _default_resolve
    discover: Callable[[Sequence[str]], tuple[Any, ...]] = _default_discover
    load_scenario: Callable[[str], Any] = _default_load_scenario
    default_scenario_dir: Callable[[], str] = _default_scenario_dir
    criteria: Callable[[], tuple[Criterion, ...]] = _default_criteria
    runner: Callable[[], Callable[..., Any]] = _default_runner
    fault_renderer: Callable[[], Callable[[Any], Sequence[str]]] = _default_fault_renderer


@dataclass(slots=True)
class Context:
    deps: Deps
    stdout: TextIO
    stderr: TextIO
    argv: tuple[str, ...] = field(default_factory=tuple)

    def out(self, line: str = "") -> None:
        print(line, file=self.stdout)

    def err(self, line: str = "") -> None:
        print(line, file=self.stderr, flush=True)


# --------------------------------------------------------------------------- options


def int_at_least(minimum: int, fix: str) -> Callable[[str], int]:
    """An argparse type: an integer >= ``minimum``; ``fix`` says what to give instead."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is too small; {fix}")
        return value

    return parse


non_negative_int = int_at_least(0, "use a seed >= 0")
positive_int = int_at_least(1, "give a number >= 1")


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} must be > 0 seconds")
    return value


def add_impl_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--impl",
        default=DEFAULT_IMPL_SPEC,
        metavar="SPEC",
        help="implementation under test: 'reference', python:MODULE:FACTORY, "
        "'process:COMMAND ARGS' (JSON-RPC over stdio, real SIGKILL crashes), docker:IMAGE, "
        f"or mutant:NAME (default: {DEFAULT_IMPL_SPEC})",
    )
    parser.add_argument(
        "--freeze-clock", action=argparse.BooleanOptionalAction, default=None,
        help="hold the process clock (time.time/monotonic/perf_counter, datetime.now) at the "
        "world's virtual time while each scenario runs, so an in-process implementation that "
        "reads it needs no real sleeping and stays deterministic (default: on for python: "
        "implementations; --no-freeze-clock turns it off)",
    )


def implementation_under_test(ctx: "Context", args: argparse.Namespace) -> Implementation:
    """``--impl`` resolved, with the ``--freeze-clock`` choice applied to an implementation
    that runs in this process (see :mod:`harness.running.process_clock`)."""
    implementation = ctx.deps.resolve_impl(args.impl)
    choice = getattr(args, "freeze_clock", None)
    if choice is not None and hasattr(implementation, "freeze_process_clock"):
        implementation.freeze_process_clock = bool(choice)  # type: ignore[attr-defined]
    elif choice and not hasattr(implementation, "freeze_process_clock"):
        raise UsageError(f"--freeze-clock: --impl {args.impl!r} does not run its own code in "
                         "this process (only python: implementations do); drop the option")
    return implementation


def add_seed_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--seed", type=non_negative_int, default=DEFAULT_SEED, metavar="N",
        help=f"run seed; same seed, scenario and implementation give the same trace "
        f"(default: {DEFAULT_SEED})",
    )


def add_time_limit_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--time-limit-s", type=positive_float, default=DEFAULT_TIME_LIMIT_S, metavar="S",
        help="real-time seconds a driver call may go without calling the world before the "
        f"run counts it as hung (default: {DEFAULT_TIME_LIMIT_S:g})",
    )


def add_scenarios_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--scenarios", nargs="+", action="extend", metavar="PATH",
        help="scenario files or folders (repeatable; default: the bundled scenarios)",
    )


def add_expectations_option(parser: argparse.ArgumentParser) -> None:
    """``--expectations FILE`` and ``--lenient-expectations``, for every command that judges
    criteria (the same meaning everywhere: see ``docs/cli.md``)."""
    parser.add_argument(
        "--expectations", metavar="FILE",
        help="TOML file of criteria this implementation is expected to fail "
        "([[expected_fail]] criterion, reason, link); they are reported expected_fail and do "
        "not fail the gate. A listed criterion that passes is an unexpected pass: it fails "
        "the gate (remove it from the file) unless --lenient-expectations",
    )
    parser.add_argument(
        "--lenient-expectations", action="store_true",
        help="report an unexpected pass without failing the gate (default: strict)",
    )


def expectations_mode(args: argparse.Namespace) -> str:
    from harness.report.result import EXPECTATIONS_LENIENT, EXPECTATIONS_STRICT

    return EXPECTATIONS_LENIENT if getattr(args, "lenient_expectations", False) else EXPECTATIONS_STRICT


def load_expectations_option(args: argparse.Namespace, criteria: Sequence[Criterion]
                             ) -> dict[str, str]:
    """``--expectations FILE`` as criterion id → reason ({} without the option); an
    unreadable file or an unknown criterion id is an ExpectationsError (exit 2)."""
    path = getattr(args, "expectations", None)
    if not path:
        return {}
    from harness.contract.expectations import check_known, load_expectations

    expectations = load_expectations(path)
    check_known(expectations, [c.id for c in criteria], where=str(path))
    return expectations


def load_expected_errors_option(args: argparse.Namespace) -> tuple[Any, ...]:
    """``--expectations FILE``'s ``[[expected_error]]`` entries (() without the option)."""
    path = getattr(args, "expectations", None)
    if not path:
        return ()
    from harness.contract.expectations import load_expectation_file

    return load_expectation_file(path).errors


def discover_scenarios(ctx: Context, paths: Sequence[str] | None) -> tuple[Any, ...]:
    """The scenarios of ``paths`` (default: the bundled suite), or a UsageError."""
    paths = list(paths) if paths else [ctx.deps.default_scenario_dir()]
    missing = [p for p in paths if not os.path.exists(p)]
    if missing:
        raise UsageError(
            f"--scenarios: {', '.join(missing)} does not exist; pass scenario files or "
            "folders that exist"
        )
    scenarios = ctx.deps.discover(paths)
    if not scenarios:
        raise UsageError(
            f"no scenario files found under {', '.join(paths)}; pass --scenarios with "
            "folders holding *.toml scenario files"
        )
    return scenarios


def add_jobs_option(parser: Any) -> None:
    """``--jobs N`` (an argparse option; the default is the number of cores)."""
    parser.add_argument(
        "--jobs", type=positive_int, default=default_jobs(), metavar="N",
        help="run cases in N worker processes; results are the same as with 1 (default: "
        f"the number of cores, {default_jobs()})",
    )
