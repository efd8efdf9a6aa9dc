"""``lifecycle-harness merge DIR...``: the shards' report dirs combined into one report set.

Guarantees of :func:`merge_dirs`:

* the dirs must be the complete, disjoint shards of one sharded command (their
  ``shard.json``: same kind, same shard count, same case list, each shard once, every case
  run by exactly one of them); anything else is a :class:`~harness.contract.errors.UsageError`
  naming the dir and what is wrong (exit 2);
* ``run`` shards: the per-scenario results (verdicts, evidence, trace digests) are taken as
  the shards wrote them, put back in unsharded order, and every run-level figure — criterion
  statuses, violations (with the trace excerpts the shard cut), coverage, unreached
  failpoints, summary, gate — is recomputed by :func:`harness.running.suite.assemble_result`, the
  function an unsharded run ends with. So the merged ``report.json`` equals an unsharded
  run's except for the fields that differ between any two runs (:data:`VOLATILE_FIELDS`):
  ``run.started`` (the earliest shard's), ``run.duration_s`` (the longest shard's),
  ``run.command`` (the first shard's, without ``--shard``/``--durations``) and each
  scenario's ``duration_s``;
* ``sweep`` shards are joined by :func:`harness.campaigns.sweep.merge_shards`;
* the merged ``durations.json`` holds every shard's durations.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
from pathlib import Path
from typing import Any, Callable, Sequence

from harness.contract.errors import EXIT_CONFORMANCE_FAILURE, EXIT_OK, UsageError
from harness.running.shard import DURATIONS_FILE, durations_bytes, read_shard

VOLATILE_FIELDS = ("run.started", "run.duration_s", "run.command", "scenarios[].duration_s")
"""report.json fields a merge (like any second run) does not reproduce."""

DEFAULT_MERGE_DIR = os.path.join("reports", "merged")


@dataclasses.dataclass(frozen=True, slots=True)
class ShardDir:
    path: str
    info: dict[str, Any]


def check_shards(dirs: Sequence[str]) -> list[ShardDir]:
    """The shards in shard order, checked complete and disjoint (UsageError otherwise)."""
    if not dirs:
        raise UsageError("merge: give the report dirs of the shards (at least one)")
    shards = [ShardDir(os.fspath(d), read_shard(d)) for d in dirs]
    first = shards[0]
    for shard in shards[1:]:
        for key in ("kind", "cases"):
            if shard.info.get(key) != first.info.get(key):
                raise UsageError(f"merge: {shard.path!r} is a shard of another run than "
                                 f"{first.path!r} (its {key} differ); merge the shards of "
                                 "one sharded command")
        if shard.info["shard"]["count"] != first.info["shard"]["count"]:
            raise UsageError(f"merge: {shard.path!r} is one of {shard.info['shard']['count']} "
                             f"shards, {first.path!r} one of {first.info['shard']['count']}")
    count = first.info["shard"]["count"]
    seen: dict[int, str] = {}
    for shard in shards:
        index = shard.info["shard"]["index"]
        if index in seen:
            raise UsageError(f"merge: {shard.path!r} and {seen[index]!r} are both shard "
                             f"{index}/{count}; pass each shard once")
        seen[index] = shard.path
    missing = [f"{i}/{count}" for i in range(1, count + 1) if i not in seen]
    if missing:
        raise UsageError(f"merge: shard(s) {', '.join(missing)} missing; pass the report dirs "
                         f"of all {count} shards")
    ran: dict[str, str] = {}
    for shard in shards:
        for case_id in shard.info["selected"]:
            if case_id in ran:
                raise UsageError(f"merge: case {case_id!r} ran in both {ran[case_id]!r} and "
                                 f"{shard.path!r}; the shards were split differently (same "
                                 "--durations file on every shard)")
            ran[case_id] = shard.path
    absent = [c for c in first.info["cases"] if c not in ran]
    if absent:
        raise UsageError(f"merge: {len(absent)} case(s) ran in no shard (first: {absent[0]!r}); "
                         "the shards were split differently (same --durations file on every "
                         "shard)")
    return sorted(shards, key=lambda s: s.info["shard"]["index"])


def _strip_shard_options(command: str) -> str:
    words = shlex.split(command) if command else []
    out: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
            continue
        if word in ("--shard", "--durations"):
            skip = True
            continue
        if word.startswith(("--shard=", "--durations=")):
            continue
        out.append(word)
    return shlex.join(out)


def merge_run_results(results: Sequence[Any], order: Sequence[str]) -> Any:
    """One RunResult from the shards' RunResults (see the module docstring)."""
    from harness.contract import Feature
    from harness.criteria.base import Criterion
    from harness.report.result import DeterminismCheck
    from harness.running.suite import JudgedCase, assemble_result, verdict_of

    first = results[0]
    for other in results[1:]:
        for name in ("implementation", "required_features"):
            if getattr(other, name) != getattr(first, name):
                raise UsageError(f"merge: the shards differ in {name}; merge shards of one "
                                 "command line")
        if (other.run.seed, other.run.harness_version, other.run.thresholds) != \
                (first.run.seed, first.run.harness_version, first.run.thresholds):
            raise UsageError("merge: the shards differ in seed, harness version or thresholds")
        if other.run.black_box != first.run.black_box:
            raise UsageError("merge: some shards judged a black box from outside and others "
                             "did not; merge shards of one command line")
        if [c.id for c in other.criteria] != [c.id for c in first.criteria]:
            raise UsageError("merge: the shards judged different criteria")
    criteria = tuple(
        Criterion(c.id, c.stage, c.title, c.statement, c.seed_clause, check=_not_rerun,
                  required_features=tuple(Feature(f) for f in c.required_features))
        for c in first.criteria
    )
    expected = {c.id: c.expectation_reason for c in first.criteria if c.expectation_reason}
    excerpts = {(c.id, v.scenario): v.excerpt for r in results for c in r.criteria
                for v in c.violations}
    ledger_rows = {(c.id, v.scenario): v.cited_ledger_rows for r in results
                   for c in r.criteria for v in c.violations}
    scenarios = {s.id: s for r in results for s in r.scenarios}
    judged = []
    for case_id in order:
        result = scenarios[case_id]
        verdicts = tuple(verdict_of(v) for v in result.verdicts)
        judged.append(JudgedCase(None, result, verdicts, tuple(
            excerpts.get((c.id, case_id), ()) for c in criteria), tuple(
            ledger_rows.get((c.id, case_id), ()) for c in criteria)))
    run_info = dataclasses.replace(
        first.run,
        started=min(r.run.started for r in results),
        duration_s=max(r.run.duration_s for r in results),
        command=_strip_shard_options(first.run.command),
    )
    merged = assemble_result(first.implementation, run_info, criteria, judged, "", expected,
                             first.required_features)
    checks = [r.determinism for r in results if r.determinism is not None]
    if checks:
        position = {case_id: i for i, case_id in enumerate(order)}
        divergences = sorted((d for c in checks for d in c.divergences),
                             key=lambda d: position.get(d.scenario, len(position)))
        merged = dataclasses.replace(merged, determinism=DeterminismCheck(
            sum(c.scenarios for c in checks), tuple(divergences)))
    return merged


def _not_rerun(trace: Any) -> Any:  # pragma: no cover - a merge never judges a trace
    raise AssertionError("a merge rebuilds verdicts from the shards; it runs no check")


def _merge_run(shards: Sequence[ShardDir], out: str) -> tuple[int, list[str]]:
    from harness.contract import ContractError
    from harness.report import json_report

    results = []
    for shard in shards:
        try:
            results.append(json_report.load(Path(shard.path) / json_report.FILENAME))
        except ContractError as exc:
            raise UsageError(f"merge: {shard.path!r}: {exc}; rerun that shard") from None
    merged = merge_run_results(results, shards[0].info["cases"])
    durations = merged_durations(shards)
    written = write_merged_reports(merged, out, {DURATIONS_FILE: durations_bytes(durations)})
    from harness.report.text import gate_line

    return (EXIT_OK if merged.gate_passed else EXIT_CONFORMANCE_FAILURE,
            [gate_line(merged), "reports: " + ", ".join(written)])


def write_merged_reports(result: Any, out: str, extra: dict[str, bytes]) -> list[str]:
    from harness.report import RENDERERS, ReportDirError, check_report_dir
    from harness.report.report_set import write_set
    from harness.running.suite import display_path

    problem = check_report_dir(out)
    if problem is not None:
        raise UsageError(f"--report-dir {out!r}: {problem}")
    contents = {filename: render(result) for filename, render in RENDERERS.values()}
    contents.update(extra)
    try:
        paths = write_set(out, contents)
    except (ReportDirError, OSError) as exc:
        raise UsageError(f"--report-dir {out!r}: {exc}") from exc
    return [display_path(p) for p in paths.values()]


def merged_durations(shards: Sequence[ShardDir]) -> dict[str, float]:
    durations: dict[str, float] = {}
    for shard in shards:
        path = Path(shard.path) / DURATIONS_FILE
        try:
            durations.update(json.loads(path.read_text(encoding="utf-8")).get("cases", {}))
        except (OSError, ValueError, AttributeError):
            continue  # durations only balance the next split; a shard without them is fine
    return durations


def _merge_selftest(shards: Sequence[ShardDir], out: str) -> tuple[int, list[str]]:
    """Selftest shards: each ran the reference and its share of the mutants; the kill matrix
    is rebuilt over every mutant, in order, beside the first shard's reference run."""
    from harness.contract import ContractError
    from harness.report import json_report
    from harness.campaigns.selftest.killmatrix import selftest_result

    results = []
    for shard in shards:
        try:
            results.append(json_report.load(Path(shard.path) / json_report.FILENAME))
        except ContractError as exc:
            raise UsageError(f"merge: {shard.path!r}: {exc}; rerun that shard") from None
        if results[-1].selftest is None:
            raise UsageError(f"merge: {shard.path!r} holds no kill matrix; rerun that shard")
    by_name = {m.name: m for r in results for m in r.selftest.mutants}
    mutants = [by_name[name] for name in shards[0].info["cases"]]
    reference = dataclasses.replace(results[0], selftest=None)
    selftest = selftest_result(reference, mutants, [c.id for c in reference.criteria])
    merged = dataclasses.replace(
        reference, selftest=selftest,
        run=dataclasses.replace(reference.run,
                                command=_strip_shard_options(reference.run.command)))
    written = write_merged_reports(merged, out, {})
    return (EXIT_OK if selftest.passed else EXIT_CONFORMANCE_FAILURE,
            [f"mutation score {selftest.mutation_score:.0%}: "
             f"{sum(m.caught for m in mutants)}/{len(mutants)} mutants caught; reference "
             f"{'passed' if selftest.reference_passed else 'FAILED'}",
             "reports: " + ", ".join(written)])


Merger = Callable[[Sequence[ShardDir], str], "tuple[int, list[str]]"]
def _merge_sweep(shards: Sequence[ShardDir], out: str) -> tuple[int, list[str]]:
    from harness.campaigns.sweep import merge_shards

    return merge_shards(shards, out, merged_durations(shards))


MERGERS: dict[str, Merger] = {"run": _merge_run, "selftest": _merge_selftest,
                              "sweep": _merge_sweep}
"""Shard kind → merger(shards, out dir) -> (exit code, lines to print)."""


def merge_dirs(dirs: Sequence[str], out: str) -> tuple[int, list[str]]:
    shards = check_shards(dirs)
    kind = shards[0].info.get("kind")
    merger = MERGERS.get(str(kind))
    if merger is None:
        raise UsageError(f"merge: shards of {kind!r} cannot be merged (mergeable: "
                         f"{', '.join(sorted(MERGERS))})")
    return merger(shards, out)
