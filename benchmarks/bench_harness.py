"""The harness's own speed, measured in one run: suite, process mode, chaos, selftest.

    python benchmarks/bench_harness.py [--chaos-budget N] [--selftest] [--adapters] [--json FILE]

Prints and writes (JSON, default ``benchmarks/results/harness.json``):

* the bundled suite in-process through ``lifecycle-harness run`` (wall and CPU seconds,
  scenarios per second), and split into running scenarios and judging criteria;
* the same suite in process mode (the reference as a child process, real SIGKILL crashes):
  its wall and CPU ratio to in-process (target ≤ 1.5×), and what one instance costs forked
  from the reference's fork-server template vs spawned;
* chaos: schedules per second of a seeded campaign in-process (target ≥ 100/s), over the
  schedules' phase (wall clock, after the bases are learned), with ``--chaos-jobs``
  workers (default: the cores, as ``chaos --jobs``), and one schedule's own run + judging;
* with ``--selftest``: the whole self-test (every mutant), wall and CPU seconds (target ≤ 20 s),
  its CPU as a multiple of the suite's in-process CPU, and its scenario runs;
* with ``--adapters``: for each installed adapter (``pip install -e '.[adapters]'``), the whole
  suite through ``run --impl adapter:NAME`` (exit 1 is its findings, not a failed
  measurement), its wall and CPU as a multiple of the reference's in-process suite, and what
  one of its instances costs forked from its template vs spawned (the library's import).

CPU seconds include child processes. Ratios measured in the same run are what compare
across machines; absolute seconds say what this machine did while it ran (a busy machine
shows in the wall-to-CPU ratio, printed too, and in the load average printed before and
after).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from harness.cli.app import main as cli_main

PROCESS_SPEC = "process:python -m reference_impl.remote"


def _cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _load_average() -> list[float] | None:
    """The machine's load average (1, 5, 15 min) where the system reports one: on a shared
    machine it says how far the wall-clock figures mean anything."""
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except OSError:
        return None


def _timed(action: Callable[[], Any]) -> tuple[float, float, Any]:
    wall, cpu = time.perf_counter(), _cpu_s()
    value = action()
    return time.perf_counter() - wall, _cpu_s() - cpu, value


def _cli(*argv: str) -> int:
    return cli_main(list(argv), stdout=io.StringIO(), stderr=io.StringIO())


def _suite(impl: str, report_root: str, time_limit_s: float | None = None,
           exit_codes: tuple[int, ...] = (0,)) -> dict[str, float]:
    """``run`` of the bundled suite against ``impl``; ``exit_codes``: what the run may exit
    with (an adapter's findings exit 1; an input error or a harness bug never counts)."""
    report_dir = os.path.join(report_root, impl.replace(":", "-").replace(" ", "_"))
    limit = () if time_limit_s is None else ("--time-limit-s", f"{time_limit_s:g}")
    wall, cpu, code = _timed(lambda: _cli("run", "--impl", impl, "--report-dir", report_dir,
                                          *limit))
    if code not in exit_codes:
        raise SystemExit(f"bench: the suite against {impl} exited {code}; the figures would "
                         f"measure a failing run (see {report_dir})")
    scenarios = len(json.loads(Path(report_dir, "report.json").read_text())["scenarios"])
    return {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "scenarios": scenarios,
            "scenarios_per_s": round(scenarios / wall, 2)}


def _split() -> dict[str, float]:
    """Running scenarios vs judging criteria, in-process, without the reports (CPU s)."""
    from harness.cli.options import Context, Deps, discover_scenarios
    from harness.implementations.specs import resolve
    from harness.running.runner import run_scenario
    from harness.running.suite import default_criteria, evaluate
    from harness.trace.record import Kind

    ctx = Context(Deps(), io.StringIO(), io.StringIO(), ())
    scenarios = discover_scenarios(ctx, None)
    reference = resolve("reference")
    # CPU seconds: on a shared machine the wall clock measures the neighbours
    _, run_s, runs = _timed(lambda: [run_scenario(reference, s, 0) for s in scenarios])
    criteria = default_criteria()
    _, judge_s, _ = _timed(lambda: [evaluate(criteria, run.trace) for run in runs])
    opens = sum(1 for run in runs for event in run.trace.of_kind(Kind.DRIVER_CALL)
                if event.data.get("method") == "open")
    events = sum(len(run.trace.events) for run in runs)
    readings = sum(len(run.trace.observations) for run in runs)
    distinct = sum(len({id(p.observation) for p in run.trace.observations}) for run in runs)
    return {"run_s": round(run_s, 3), "judge_s": round(judge_s, 3),
            "run_ms_per_scenario": round(1000 * run_s / len(runs), 1),
            "judge_ms_per_scenario": round(1000 * judge_s / len(runs), 1),
            "judge_share": round(judge_s / (run_s + judge_s), 3),
            "store_readings_per_event": round(readings / max(events, 1), 3),
            "distinct_readings_share": round(distinct / max(readings, 1), 3),
            "instances_opened": opens}


def _child_start(samples: int = 5) -> dict[str, float]:
    """What one process-mode child costs before its first call: interpreter start and the
    reference's imports (CPU seconds, children's rusage), against a bare interpreter."""
    import subprocess

    def cpu_of(code: str) -> float:
        _, cpu, _ = _timed(lambda: [subprocess.run([sys.executable, "-c", code], check=True)
                                    for _ in range(samples)])
        return cpu / samples

    bare, loaded = cpu_of("pass"), cpu_of("import reference_impl.remote")
    return {"bare_cpu_s": round(bare, 4), "with_imports_cpu_s": round(loaded, 4),
            "imports_cpu_s": round(loaded - bare, 4),
            "bytecode_cache": not sys.flags.dont_write_bytecode}


def _instance_start(samples: int = 10, spec: str = PROCESS_SPEC) -> dict[str, float]:
    """CPU of one process-mode instance of ``spec`` (open + close on an empty data dir),
    forked from the template vs spawned, children included: each measured as N opens minus
    none, in one launcher whose template and inspector are reaped at its close (a forked
    instance's CPU reaches this process's rusage through its parent, the template)."""
    import shlex

    from harness.remote.launcher import ProcessImplementation

    argv = shlex.split(spec.split(":", 1)[1])

    def cpu_of(fork: bool, opens: int) -> float:
        with tempfile.TemporaryDirectory(prefix="lh-bench-open-") as root:
            def run() -> None:
                with ProcessImplementation(argv) as implementation:
                    implementation.fork_server = fork
                    implementation.spares = 0
                    implementation.info  # noqa: B018 - the load-time handshake
                    for index in range(opens):
                        data_dir = os.path.join(root, str(index))
                        os.mkdir(data_dir)  # the harness gives an instance an existing dir
                        implementation.open(data_dir, None).close()
            return _timed(run)[1]

    figures: dict[str, float] = {"samples": samples}
    for name, fork in (("forked", True), ("spawned", False)):
        per_open = (cpu_of(fork, samples) - cpu_of(fork, 0)) / samples
        figures[f"{name}_cpu_s"] = round(per_open, 4)
    figures["spawned_to_forked"] = round(figures["spawned_cpu_s"]
                                         / max(figures["forked_cpu_s"], 1e-6), 1)
    return figures


def _adapters(report_root: str, suite: dict[str, float], time_limit_s: float | None,
              samples: int = 8) -> dict[str, dict[str, float]]:
    """Per installed adapter: its whole suite (wall, CPU, both as a multiple of the reference's
    in-process ``suite``) and one instance forked vs spawned (``_instance_start``; a forked
    instance costs a few ms, within the noise of the template's start that is subtracted,
    so it takes several samples)."""
    from harness.adapters import available

    figures: dict[str, dict[str, float]] = {}
    for adapter in available():
        if not adapter.installed:
            continue
        start = _instance_start(samples, adapter.impl_spec)
        run = _suite(f"adapter:{adapter.name}", report_root, time_limit_s, exit_codes=(0, 1))
        figures[adapter.name] = {
            **run, "wall_ratio_to_reference": round(run["wall_s"] / suite["wall_s"], 2),
            "cpu_ratio_to_reference": round(run["cpu_s"] / suite["cpu_s"], 2),
            "instance_forked_cpu_s": start["forked_cpu_s"],
            "instance_spawned_cpu_s": start["spawned_cpu_s"]}
    return figures


def _chaos(budget: int, jobs: int) -> dict[str, float]:
    """A seeded campaign over the bundled bases: the schedules' phase in wall seconds (after
    the bases are learned: what a campaign's budget costs), and one schedule's own run and
    judging (its wall clock where it ran: in-process with one job, in a worker with more)."""
    from harness.campaigns.chaos import LearnedBase, SkippedBase, default_bases, run_campaign
    from harness.cli.options import Context, Deps
    from harness.implementations.specs import resolve

    ctx = Context(Deps(), io.StringIO(), io.StringIO(), ())
    bases = default_bases(ctx)
    learned: list[float] = []

    def progress(item: Any) -> None:
        if isinstance(item, (LearnedBase, SkippedBase)):
            learned.append(time.perf_counter())

    with tempfile.TemporaryDirectory(prefix="lh-bench-chaos-") as regressions:
        wall, cpu, result = _timed(lambda: run_campaign(
            resolve("reference"), bases, seed=7, budget=budget, regressions_dir=regressions,
            jobs=jobs, progress=progress))
        ended = time.perf_counter()
    ran = [trial for trial in result.trials if not trial.cached]
    phase_s = ended - learned[-1]
    schedules_s = sum(trial.duration_s for trial in ran)
    return {"schedules": len(ran), "jobs": jobs, "wall_s": round(wall, 3),
            "cpu_s": round(cpu, 3), "bases": len(bases),
            "learning_bases_s": round(wall - phase_s, 3), "phase_s": round(phase_s, 3),
            "schedules_per_s": round(len(ran) / max(phase_s, 1e-9), 2),
            "schedule_run_ms": round(1000 * schedules_s / max(len(ran), 1), 1)}


def _selftest(report_root: str, report_dir: str | None = None) -> dict[str, float]:
    report_dir = report_dir or os.path.join(report_root, "selftest")
    wall, cpu, code = _timed(lambda: _cli("selftest", "--report-dir", report_dir))
    report = json.loads(Path(report_dir, "report.json").read_text(encoding="utf-8"))
    mutants = report["selftest"]["mutants"]
    # scenario runs are the self-test's unit of work: the reference's whole suite, then
    # each mutant's scenarios up to the one that caught it
    return {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "exit_code": code,
            "mutants": len(mutants), "reference_scenarios": len(report["scenarios"]),
            "mutant_scenario_runs": sum(len(m["scenarios_run"]) for m in mutants),
            "caught": sum(1 for m in mutants if m["caught"])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chaos-budget", type=int, default=60, metavar="N",
                        help="schedules in the chaos campaign (default 60)")
    parser.add_argument("--chaos-jobs", type=int, default=os.cpu_count() or 1, metavar="N",
                        help="the campaign's --jobs (default: the number of cores, as the "
                        "command's own default)")
    parser.add_argument("--no-process", action="store_true", help="skip process mode")
    parser.add_argument("--no-chaos", action="store_true", help="skip the chaos campaign")
    parser.add_argument("--selftest", action="store_true", help="also time the self-test")
    parser.add_argument("--time-limit-s", type=float, default=None, metavar="S",
                        help="the suites' per-call limit (default: run's own); raise it on a "
                        "busy machine, where a long scenario can pass the default as a hang")
    parser.add_argument("--selftest-only", action="store_true",
                        help="with --selftest: skip process mode and chaos (the in-process "
                        "suite still runs: the self-test's CPU is reported as a multiple of it)")
    parser.add_argument("--selftest-report-dir", default=None, metavar="DIR",
                        help="keep the self-test's reports in DIR (default: a temporary folder), "
                        "e.g. to compare two trees' kill matrices")
    parser.add_argument("--adapters", action="store_true",
                        help="also time every installed adapter's suite and instance start")
    parser.add_argument("--json", default="benchmarks/results/harness.json", metavar="FILE")
    args = parser.parse_args(argv)
    if args.selftest_only:
        args.selftest = args.no_process = True

    figures: dict[str, Any] = {"cpu_count": os.cpu_count(), "python": sys.version.split()[0],
                               "load_average_before": _load_average()}
    print(f"load average (1, 5, 15 min) before: {figures['load_average_before']}")
    with tempfile.TemporaryDirectory(prefix="lh-bench-") as root:
        figures["suite_in_process"] = suite = _suite("reference", root, args.time_limit_s)
        print(f"suite in-process: {suite['scenarios']} scenarios in {suite['wall_s']:.2f} s "
              f"wall, {suite['cpu_s']:.2f} s CPU ({suite['scenarios_per_s']:.1f}/s; "
              f"target ≤ 3 s)")
        figures["split"] = split = _split()
        print(f"  running scenarios {split['run_s']:.2f} s CPU, judging {split['judge_s']:.2f} s "
              f"({split['judge_share']:.0%} of both; per scenario {split['run_ms_per_scenario']:.0f} "
              f"+ {split['judge_ms_per_scenario']:.0f} ms, which is also a chaos schedule's cost); "
              f"{split['store_readings_per_event']:.2f} "
              f"store readings per trace event, {split['distinct_readings_share']:.0%} of them "
              "distinct")
        if not args.no_process:
            figures["child_start"] = child = _child_start()
            print(f"process-mode child start (spawned, as without the fork server): "
                  f"{child['with_imports_cpu_s'] * 1000:.0f} ms CPU "
                  f"({child['imports_cpu_s'] * 1000:.0f} ms of it the imports), paid once per "
                  f"run by the fork server's template instead of by each of the suite's "
                  f"{split['instances_opened']} instances")
            figures["instance_start"] = start = _instance_start()
            print(f"process-mode instance (open + close): forked from the template "
                  f"{start['forked_cpu_s'] * 1000:.0f} ms CPU, spawned "
                  f"{start['spawned_cpu_s'] * 1000:.0f} ms ({start['spawned_to_forked']:.1f}x)")
            figures["suite_process"] = process = _suite(PROCESS_SPEC, root, args.time_limit_s)
            process["wall_ratio"] = round(process["wall_s"] / suite["wall_s"], 2)
            process["cpu_ratio"] = round(process["cpu_s"] / suite["cpu_s"], 2)
            print(f"suite in process mode: {process['wall_s']:.2f} s wall = "
                  f"{process['wall_ratio']:.2f}x in-process, CPU {process['cpu_ratio']:.2f}x "
                  "(target ≤ 1.5x)")
        if not args.selftest_only and not args.no_chaos:
            figures["chaos"] = chaos = _chaos(args.chaos_budget, args.chaos_jobs)
            print(f"chaos ({chaos['jobs']} job(s)): {chaos['schedules']} schedules in "
                  f"{chaos['phase_s']:.2f} s = {chaos['schedules_per_s']:.1f}/s (target ≥ 100/s; "
                  f"one schedule's run + judging {chaos['schedule_run_ms']:.0f} ms), after "
                  f"{chaos['learning_bases_s']:.2f} s learning {chaos['bases']} bases")
        if args.selftest:
            figures["selftest"] = selftest = _selftest(root, args.selftest_report_dir)
            selftest["cpu_ratio_to_suite"] = round(selftest["cpu_s"] / suite["cpu_s"], 2)
            print(f"selftest: {selftest['wall_s']:.1f} s wall, {selftest['cpu_s']:.1f} s CPU = "
                  f"{selftest['cpu_ratio_to_suite']:.1f}x the suite in-process; "
                  f"{selftest['reference_scenarios']} reference scenarios + "
                  f"{selftest['mutant_scenario_runs']} mutant scenario runs for "
                  f"{selftest['mutants']} mutants, {selftest['caught']} caught; "
                  f"exit {selftest['exit_code']} (target ≤ 20 s)")
        if args.adapters:
            figures["adapters"] = adapters = _adapters(root, suite, args.time_limit_s)
            if not adapters:
                print("adapters: none installed (pip install -e '.[adapters]')")
            for name, adapter in adapters.items():
                print(f"adapter {name}: {adapter['scenarios']} scenarios in "
                      f"{adapter['wall_s']:.1f} s wall ({adapter['wall_ratio_to_reference']:.1f}x "
                      f"the reference in-process), {adapter['cpu_s']:.1f} s CPU "
                      f"({adapter['cpu_ratio_to_reference']:.1f}x); one instance forked "
                      f"{adapter['instance_forked_cpu_s'] * 1000:.0f} ms CPU, spawned "
                      f"{adapter['instance_spawned_cpu_s'] * 1000:.0f} ms")
    figures["load_average_after"] = _load_average()
    print(f"load average after: {figures['load_average_after']} (wall seconds follow the load; "
          "CPU seconds and ratios are the figures)")
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"written: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
