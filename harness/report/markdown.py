"""``report.md``: a short summary that fits a pull-request comment.

Guarantees: a first line saying whether the gate passed, the conformance level headline
(core + claimed features, not claimed ones, unmet ``--require-features``), a stage × status
grid whose columns are the statuses present (any status of the vocabulary, so a new one needs
no layout change), every failing or erroring criterion with its English statement, its first
violations and their replay commands, errored scenarios, the unexpected passes in their own
section, the expected failures, the criteria not exercised, and whether the determinism
check ran (and what it found). Output stays under :data:`MAX_CHARS` (long lists are
cut with a pointer to report.html); model- and IUT-written text is escaped so it cannot
break the layout.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from harness.report.text import (
    PROBLEM_STATUSES,
    SOURCE_LABEL,
    criteria_with,
    evidence_line,
    level_line,
    stages,
    status_counts,
    status_label,
)
from harness.report.atomic import write_text
from harness.report.result import CriterionStatus, RunResult, ScenarioStatus

FILENAME = "report.md"
MAX_CHARS = 60_000
"""GitHub caps a comment at 65,536 characters; keep a margin."""
MAX_VIOLATIONS_SHOWN = 3
MAX_NOTE_CHARS = 300
MAX_LISTED_ONE_A_LINE = 12
MAX_STATEMENT_CHARS = 600

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]<>()#+!|~])")
_CONTROL = re.compile("[\x00-\x1f\x7f]")


def _flat(value: str) -> str:
    """One line: control characters dropped, whitespace runs collapsed."""
    return " ".join(_CONTROL.sub(" ", value).split())


def text(value: str, limit: int = MAX_NOTE_CHARS) -> str:
    """Inline markdown text: one line, special characters escaped, at most ``limit`` chars."""
    flat = _flat(value)
    if len(flat) > limit:
        flat = flat[: limit - 1] + "…"
    return _MD_SPECIAL.sub(r"\\\1", flat)


def code(value: str) -> str:
    """An inline code span that survives backticks inside ``value``."""
    flat = _flat(value)
    longest = max((len(run) for run in re.findall(r"`+", flat)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") else ""
    return f"{fence}{pad}{flat}{pad}{fence}"


def _not_applicable(result: RunResult) -> list[str]:
    """Every n/a criterion with its reason; criteria that share a reason (a black box's
    "X1 is judged on the store…", the criterion's id first) share one line."""
    members = criteria_with(result, CriterionStatus.NOT_APPLICABLE)
    if not members:
        return []
    grouped: dict[str, list[str]] = {}
    for c in members:
        reason = c.expectation_reason or "no reason given"
        shared = reason.removeprefix(f"{c.id} ") if reason.startswith(f"{c.id} ") else reason
        grouped.setdefault(shared, []).append(c.id)
    lines = ["", "### Not applicable (why each cannot be judged here)", ""]
    for reason, ids in grouped.items():
        lead = ", ".join(f"**{text(i)}**" for i in ids)
        lines.append(f"- {lead}: {text(reason)}")
    return lines


def to_markdown(result: RunResult) -> str:
    info = result.implementation
    icon = "✅" if result.gate_passed else "❌"
    verdict = "gate passed" if result.gate_passed else "gate failed"
    errored = [sc for sc in result.scenarios if sc.status is ScenarioStatus.ERROR]
    skipped = [sc for sc in result.scenarios if sc.status is ScenarioStatus.SKIPPED]
    excused = [sc for sc in result.scenarios if sc.faults_excused]
    skipped_note = f", {len(skipped)} skipped" if skipped else ""  # reports of schema <= 4
    expected = sum(1 for sc in result.scenarios if sc.status is ScenarioStatus.EXPECTED_ERROR)
    if expected:
        skipped_note += f", {expected} errored as expected"
    if result.unexpected_successes:
        skipped_note += (f", {len(result.unexpected_successes)} unexpected success(es): "
                         + ", ".join(sc.id for sc in result.unexpected_successes))
    lines = [
        f"## {icon} Lifecycle conformance: {verdict}",
        "",
        f"**{text(level_line(result))}**",
        "",
        f"**{text(info.name)} {text(info.version)}** · seed {code(str(result.run.seed))} · "
        f"{len(result.scenarios)} scenarios ({len(errored)} errored{skipped_note}, "
        f"{len(excused)} with excused faults) · "
        f"harness {text(result.run.harness_version)} · {result.run.duration_s:.1f} s",
        "",
        _determinism_line(result),
        "",
        *_grid(result),
    ]
    body: list[str] = []
    unmet = result.conformance.required_unmet
    if unmet:
        body += ["", "### Required features not met (--require-features)", ""]
        body += [f"- {text(m)}" for m in unmet]
    problems = criteria_with(result, *PROBLEM_STATUSES)
    if problems:
        body += ["", "### Failures", ""]
        for c in problems:
            body.append(
                f"- **{text(c.id)}** {text(c.title)} — {text(status_label(c.status))}, "
                f"{len(c.violations)} violation(s)"
            )
            body.append(f"  - requirement: {text(c.statement, MAX_STATEMENT_CHARS)}")
            if c.seed_clause:
                body.append(f"  - {SOURCE_LABEL}: {text(c.seed_clause, MAX_NOTE_CHARS)}")
            for v in c.violations[:MAX_VIOLATIONS_SHOWN]:
                notes = "; ".join(evidence_line(e) for e in v.evidence) or "no evidence given"
                body.append(f"  - scenario {code(v.scenario)}: {text(notes)}")
                body.append(f"    replay: {code(v.replay)}")
            if len(c.violations) > MAX_VIOLATIONS_SHOWN:
                body.append(f"  - … {len(c.violations) - MAX_VIOLATIONS_SHOWN} more in report.html")
    if errored:
        body += ["", "### Scenarios that did not complete", ""]
        for sc in errored:
            body.append(f"- {code(sc.id)}: {text(sc.error or 'run error')}")
            body.append(f"  replay: {code(sc.replay)}")
    idle = criteria_with(result, CriterionStatus.NOT_EXERCISED)
    if idle:
        body += ["", "### Not exercised (a criterion never exercised does not pass)", ""]
        if len(idle) <= MAX_LISTED_ONE_A_LINE:
            body += [f"- **{text(c.id)}** {text(c.title)}" for c in idle]
        else:  # a run over a subset of scenarios: keep the comment short
            body.append(", ".join(f"**{text(c.id)}**" for c in idle))
    surprises = criteria_with(result, CriterionStatus.UNEXPECTED_PASS)
    if surprises:
        body += ["", "### Unexpected passes (listed as expected to fail, yet passed)", "",
                 "Remove them from the expectations file so that a later regression is caught.", ""]
        body += [f"- **{text(c.id)}** {text(c.title)}: {text(c.expectation_reason)}"
                 for c in surprises]
    expected = criteria_with(result, CriterionStatus.EXPECTED_FAIL)
    if expected:
        body += ["", "### Expected failures", ""]
        body += [f"- **{text(c.id)}** {text(c.title)}: {text(c.expectation_reason)}"
                 for c in expected]
    body += _not_applicable(result)
    check = result.determinism
    if check is not None and check.divergences:
        body += ["", "### Determinism: traces diverged", ""]
        for d in check.divergences:
            body.append(f"- {code(d.scenario)} diverged at {text(d.where)}: "
                        f"{code(text(d.first, 160))} vs {code(text(d.second, 160))}")
    if result.selftest is not None:
        st = result.selftest
        missed = [m for m in st.mutants if not m.caught]
        body += ["", "### Self-test", "",
                 f"Mutation score {st.mutation_score:.0%}: "
                 f"{len(st.mutants) - len(missed)}/{len(st.mutants)} mutants caught by an expected "
                 f"criterion; reference {'passed' if st.reference_passed else 'FAILED'}."]
        body += [f"- survived: {code(m.name)} ({text(m.defect)}), expected {', '.join(m.expected)}"
                 for m in missed]
        if st.blind_criteria:
            body.append("Criteria that kill no mutant: " + ", ".join(code(c) for c in st.blind_criteria))
        if st.score_per_class:
            body += ["", "| trust class | caught | mutants |", "|---|---:|---:|"]
            body += [f"| {text(name)} | {score.caught} | {score.expected} |"
                     for name, score in st.score_per_class.items()]
        scored = [(cid, sc) for cid, sc in st.score_per_criterion.items() if sc.expected]
        if scored:
            body += ["", "Per criterion (killed/expected): " + ", ".join(
                f"{text(cid)} {sc.caught}/{sc.expected}" for cid, sc in scored)]
    if result.failpoints_unreached:
        body += [
            "",
            "Failpoints no scenario reached: "
            + ", ".join(code(fp) for fp in result.failpoints_unreached),
        ]
    return _fit("\n".join(lines), body)


def _determinism_line(result: RunResult) -> str:
    check = result.determinism
    if check is None:
        return ("Determinism check: **not run** (each scenario ran once; `--check-determinism` "
                "runs every scenario twice and compares the traces).")
    if not check.divergences:
        return (f"Determinism check: **ran**: all {check.scenarios} scenarios gave identical "
                "traces when run twice.")
    return (f"Determinism check: **ran**: {len(check.divergences)} of {check.scenarios} "
            "scenarios diverged between two runs under the same seed (see below).")


def _grid(result: RunResult) -> list[str]:
    """Stage × status counts; the columns are the statuses present, in vocabulary order."""
    totals = status_counts(result.criteria)
    columns = [status for status, count in totals.items() if count]
    lines = ["| stage | " + " | ".join(text(status_label(s)) for s in columns) + " | criteria |",
             "|---|" + "---:|" * (len(columns) + 1)]
    for stage in stages(result):
        members = [c for c in result.criteria if c.stage == stage]
        counts = status_counts(members)
        lines.append(f"| {text(stage)} | " + " | ".join(str(counts.get(s, 0)) for s in columns)
                     + f" | {len(members)} |")
    lines.append("| **all** | " + " | ".join(f"**{totals[s]}**" for s in columns)
                 + f" | **{len(result.criteria)}** |")
    return lines


def _fit(head: str, body: list[str]) -> str:
    tail = "\n\n_Full details (every cited event, scenario timelines, coverage): report.html._\n"
    out = head
    for position, line in enumerate(body):
        if len(out) + len(line) + 1 + len(tail) + 80 > MAX_CHARS:
            out += f"\n\n_… cut here ({len(body) - position} more lines): see report.html._"
            break
        out += "\n" + line
    return out + tail


def write(result: RunResult, report_dir: str | os.PathLike[str]) -> Path:
    return write_text(Path(report_dir) / FILENAME, to_markdown(result))
