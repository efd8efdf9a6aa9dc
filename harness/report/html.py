"""``report.html``: one self-contained page for humans.

Guarantees: no external asset, script or fetch (inline CSS only; links are in-page
anchors); every piece of text from the result goes through :func:`html.escape`; the page
shows the stage × criterion matrix coloured by status, each failure with the quoted seed
clause, its evidence, the trace excerpt and the replay command, the scenarios with their
fault plans, and the coverage matrix criterion × failpoint; its banner states the
conformance level (core + claimed features) and a table shows what each optional feature
gates and whether it was claimed and met.
"""

from __future__ import annotations

import html
import json
import os
from pathlib import Path
from typing import Iterable

from harness.contract import to_json
from harness.report._text import (
    PROBLEM_STATUSES,
    STATUS_LABEL,
    criteria_with,
    evidence_line,
    gate_line,
    level_line,
    xml_safe,
)
from harness.report.atomic import write_text
from harness.result import CriterionResult, CriterionStatus, RunResult, ScenarioStatus

FILENAME = "report.html"

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:1.5em;color:#1d1d1f;background:#fff}
h1{font-size:1.5em;margin:.2em 0}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd}
h3{font-size:1.05em;margin:1.2em 0 .3em}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ddd;padding:.25em .5em;vertical-align:top;text-align:left}
th{background:#f5f5f7}
pre{background:#f6f8fa;border:1px solid #e1e4e8;padding:.5em;overflow-x:auto;font-size:12px;margin:.3em 0}
code{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px}
code.replay{display:block;background:#fff8c5;border:1px solid #e5d68a;padding:.3em .5em;white-space:pre-wrap;word-break:break-all}
blockquote{border-left:4px solid #ccc;margin:.4em 0;padding:.2em .8em;color:#444;background:#fafafa}
.banner{padding:.6em 1em;border-radius:6px;font-weight:600;margin:.6em 0}
.chip{display:inline-block;padding:.1em .45em;margin:.1em;border-radius:4px;text-decoration:none;color:#111;font-family:ui-monospace,monospace;font-size:12px}
.st-passed{background:#b7e4c7}.st-failed{background:#f4a6a6}.st-error{background:#e76f51;color:#fff}
.st-not_exercised{background:#ffd166}.st-not_applicable{background:#e0e0e0;color:#555}
.st-expected_fail{background:#cdb4db}.st-unexpected_pass{background:#a2d2ff}
.st-not_selected{background:#f5f5f5;color:#888;border:1px dashed #bbb}
.sc-passed{background:#b7e4c7}.sc-failed{background:#f4a6a6}.sc-error{background:#e76f51;color:#fff}
.sc-skipped{background:#e0e0e0;color:#555}.sc-not_run{background:#f5f5f5;color:#888}
.legend .chip{cursor:default}
.cov td{text-align:center;padding:.1em .3em}.cov th.fp{writing-mode:vertical-rl;transform:rotate(180deg);white-space:nowrap;font-weight:normal;font-size:12px}
.cov td.hit{background:#b7e4c7}.cov td.miss{background:#f4a6a6}.cov th.unreached{background:#ffd166}
.muted{color:#666}
"""


def e(value: object) -> str:
    """Escaped for HTML text and attributes; characters HTML cannot carry replaced."""
    return html.escape(xml_safe(str(value)), quote=True)


def _chip(c: CriterionResult) -> str:
    tip = f"{c.id} {c.title} — {STATUS_LABEL[c.status]}"
    return f'<a class="chip st-{e(c.status.value)}" href="#c-{e(c.id)}" title="{e(tip)}">{e(c.id)}</a>'


def _stages(result: RunResult) -> list[str]:
    stages: list[str] = []
    for c in result.criteria:
        if c.stage not in stages:
            stages.append(c.stage)
    return stages


def _matrix(result: RunResult) -> list[str]:
    out = ['<table class="matrix"><tr><th>stage</th><th>passed</th><th>criteria</th></tr>']
    for stage in _stages(result):
        members = [c for c in result.criteria if c.stage == stage]
        ok = sum(1 for c in members if c.status is CriterionStatus.PASSED)
        chips = " ".join(_chip(c) for c in members)
        out.append(f"<tr><th>{e(stage)}</th><td>{ok}/{len(members)}</td><td>{chips}</td></tr>")
    out.append("</table>")
    legend = " ".join(
        f'<span class="chip st-{e(status.value)}">{e(label)}</span>' for status, label in STATUS_LABEL.items()
    )
    out.append(f'<p class="legend">{legend}</p>')
    return out


def _pre(lines: Iterable[str]) -> str:
    return "<pre>" + e("\n".join(lines)) + "</pre>"


def _failures(result: RunResult) -> list[str]:
    problems = criteria_with(result, *PROBLEM_STATUSES)
    if not problems:
        return ["<p>No criterion failed.</p>"]
    out: list[str] = []
    for c in problems:
        out.append(
            f'<h3><span class="chip st-{e(c.status.value)}">{e(c.id)}</span> {e(c.title)} '
            f'<span class="muted">({e(STATUS_LABEL[c.status])}, {len(c.violations)} violation(s))</span></h3>'
        )
        out.append(f"<p>{e(c.statement)}</p>")
        if c.seed_clause:
            out.append(f"<blockquote>{e(c.seed_clause)}</blockquote>")
        for v in c.violations:
            out.append(f"<h4>scenario <code>{e(v.scenario)}</code>, seed {e(v.seed)}</h4>")
            out.append("<ul>" + "".join(f"<li>{e(evidence_line(item))}</li>" for item in v.evidence) + "</ul>")
            if v.excerpt:
                out.append('<p class="muted">trace excerpt (<code>&gt;</code> marks evidence):</p>')
                out.append(_pre(v.excerpt))
            out.append(f'<code class="replay">{e(v.replay)}</code>')
    return out


def _scenario_errors(result: RunResult) -> list[str]:
    errored = [s for s in result.scenarios if s.status is ScenarioStatus.ERROR]
    if not errored:
        return []
    out = ["<h2>Scenarios that did not complete</h2>"]
    for s in errored:
        out.append(f"<h3><code>{e(s.id)}</code></h3>{_pre([s.error or 'run error'])}")
        out.append(f'<code class="replay">{e(s.replay)}</code>')
    return out


def _criteria_table(result: RunResult) -> list[str]:
    out = [
        "<table><tr><th>id</th><th>stage</th><th>title</th><th>status</th><th>exercised</th>"
        "<th>scenarios exercising</th></tr>"
    ]
    for c in result.criteria:
        note = f"<br><span class=\"muted\">{e(c.expectation_reason)}</span>" if c.expectation_reason else ""
        out.append(
            f'<tr id="c-{e(c.id)}"><td><code>{e(c.id)}</code></td><td>{e(c.stage)}</td>'
            f'<td title="{e(c.statement)}">{e(c.title)}</td>'
            f'<td class="st-{e(c.status.value)}">{e(STATUS_LABEL[c.status])}{note}</td>'
            f"<td>{e(c.exercised)}</td><td>{e(', '.join(c.scenarios_exercising))}</td></tr>"
        )
    out.append("</table>")
    return out


def _scenarios_table(result: RunResult) -> list[str]:
    out = [
        "<table><tr><th>id</th><th>stage</th><th>file</th><th>status</th><th>duration (s)</th>"
        "<th>fault plan</th><th>failpoints reached</th><th>trace digest</th></tr>"
    ]
    for s in result.scenarios:
        faults = "<br>".join(e(f) for f in s.faults) or '<span class="muted">none</span>'
        out.append(
            f"<tr><td><code>{e(s.id)}</code></td><td>{e(s.stage)}</td><td><code>{e(s.file)}</code></td>"
            f'<td class="sc-{e(s.status.value)}">{e(s.status.value)}</td><td>{s.duration_s:.3f}</td>'
            f"<td>{faults}</td><td>{e(', '.join(s.failpoints_reached))}</td>"
            f'<td><code title="{e(s.trace_digest)}">{e(s.trace_digest[:19])}</code></td></tr>'
        )
    out.append("</table>")
    return out


def _coverage(result: RunResult) -> list[str]:
    unreached = set(result.failpoints_unreached)
    failpoints = sorted({fp for fps in result.coverage.values() for fp in fps} | unreached)
    if not failpoints:
        return ["<p>No failpoint information.</p>"]
    head = "".join(
        f'<th class="fp{" unreached" if fp in unreached else ""}">{e(fp)}</th>' for fp in failpoints
    )
    out = [f'<table class="cov"><tr><th>criterion</th>{head}</tr>']
    for c in result.criteria:
        reached = set(result.coverage.get(c.id, ()))
        cells = "".join(
            '<td class="hit" title="reached">●</td>' if fp in reached else "<td></td>" for fp in failpoints
        )
        out.append(f'<tr><th><a href="#c-{e(c.id)}">{e(c.id)}</a></th>{cells}</tr>')
    out.append("</table>")
    if unreached:
        out.append(
            "<p>Failpoints no scenario reached: "
            + ", ".join(f"<code>{e(fp)}</code>" for fp in result.failpoints_unreached)
            + "</p>"
        )
    return out


def _determinism(result: RunResult) -> list[str]:
    check = result.determinism
    assert check is not None
    if not check.divergences:
        return [f"<p>All {check.scenarios} scenarios gave identical traces when run twice.</p>"]
    out = [f"<p>{len(check.divergences)} of {check.scenarios} scenarios diverged between two runs "
           "under the same seed; first diverging event of each:</p>"]
    for d in check.divergences:
        out.append(f"<h3>{e(d.scenario)} <span class=\"muted\">{e(d.file)}</span> at {e(d.where)}</h3>")
        out.append(_pre([f"run 1: {d.first}", f"run 2: {d.second}"]))
    return out


def _selftest(result: RunResult) -> list[str]:
    selftest = result.selftest
    assert selftest is not None
    columns = [c.id for c in result.criteria]
    out = [
        f'<p>Reference {"passed" if selftest.reference_passed else "<b>did not pass</b>"}; '
        f"mutation score {selftest.mutation_score:.0%} "
        f"({sum(m.caught for m in selftest.mutants)}/{len(selftest.mutants)} mutants caught by an "
        "expected criterion). ■ = expected criterion that killed the mutant, "
        "□ = expected criterion that did not, ● = another criterion that also killed it.</p>",
    ]
    if selftest.blind_criteria:
        out.append(
            "<p><b>Criteria that kill no mutant</b> (may be unable to fail): "
            + ", ".join(f"<code>{e(c)}</code>" for c in selftest.blind_criteria) + "</p>"
        )
    head = "".join(f'<th class="fp">{e(c)}</th>' for c in columns)
    out.append(f'<table class="cov"><tr><th>mutant</th><th>caught</th>{head}</tr>')
    for m in selftest.mutants:
        cells = []
        for c in columns:
            if c in m.expected:
                cells.append('<td class="hit">■</td>' if c in m.killed_by else '<td class="miss">□</td>')
            else:
                cells.append("<td>●</td>" if c in m.killed_by else "<td></td>")
        verdict = '<td class="sc-passed">yes</td>' if m.caught else '<td class="sc-failed">NO</td>'
        out.append(f'<tr><th title="{e(m.defect)}">{e(m.name)}</th>{verdict}{"".join(cells)}</tr>')
    kills = "".join(f"<td>{selftest.kills_per_criterion.get(c, 0)}</td>" for c in columns)
    out.append(f"<tr><th>kills</th><td></td>{kills}</tr>")
    scores = "".join(
        f"<td>{score.caught}/{score.expected}</td>" if (score := selftest.score_per_criterion.get(c))
        and score.expected else "<td></td>" for c in columns)
    out.append(f'<tr><th title="killed by it / mutants expecting it">score</th><td></td>{scores}</tr></table>')
    if selftest.score_per_class:
        out.append("<table><tr><th>trust class</th><th>caught</th><th>mutants</th></tr>" + "".join(
            f"<tr><th>{e(name)}</th><td>{score.caught}</td><td>{score.expected}</td></tr>"
            for name, score in selftest.score_per_class.items()) + "</table>")
    out.append("<ul>" + "".join(
        f"<li><code>{e(m.name)}</code>: {e(m.defect)} — expected {e(', '.join(m.expected))}</li>"
        for m in selftest.mutants) + "</ul>")
    return out


def _levels(result: RunResult) -> list[str]:
    level = result.conformance
    core_bad = (f"not met: {', '.join(level.core_not_passed)}" if level.core_not_passed
                else ("met" if level.core_met else "not judged (scenario errors)"))
    out = [
        "<table><tr><th>level</th><th>state</th><th>criteria</th><th>scenarios it gates</th></tr>",
        f"<tr><th>core</th><td>{e(core_bad)}</td>"
        f"<td>{len(level.core_criteria)} criteria (never n/a)</td><td>all others</td></tr>",
    ]
    for f in level.features:
        scenarios = [s.id for s in result.scenarios if f.feature in s.requires]
        state = f.state.value.replace("_", " ")
        if f.not_passed:
            state += f": {', '.join(f.not_passed)}"
        if f.required:
            state += " (required)"
        out.append(f"<tr><th>{e(f.feature)}</th><td>{e(state)}</td>"
                   f"<td>{e(', '.join(f.criteria))}</td><td>{e(', '.join(scenarios) or '—')}</td></tr>")
    out.append("</table>")
    out += [f"<p><b>{e(m)}</b> (--require-features)</p>" for m in level.required_unmet]
    return out


def _run_info(result: RunResult) -> list[str]:
    info, run = result.implementation, result.run
    rows = [
        ("implementation", f"{info.name} {info.version}"),
        ("features", ", ".join(info.features) or "none"),
        ("seed", run.seed),
        ("harness version", run.harness_version),
        ("started", run.started),
        ("duration (s)", f"{run.duration_s:.3f}"),
        ("command", run.command or "—"),
        ("thresholds", json.dumps(to_json(run.thresholds), sort_keys=True)),
    ]
    return ["<table>"] + [f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in rows] + ["</table>"]


def to_html(result: RunResult) -> str:
    info = result.implementation
    banner_class = "st-passed" if result.gate_passed else "st-failed"
    idle = criteria_with(result, CriterionStatus.NOT_EXERCISED)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>Lifecycle conformance — {e(info.name)} {e(info.version)}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>Lifecycle conformance — {e(info.name)} {e(info.version)}</h1>",
        f'<div class="banner {banner_class}"><b>{e(level_line(result))}</b><br>'
        f"{e(gate_line(result))}</div>",
        "<h2>Conformance level</h2>",
        *_levels(result),
        "<h2>Stage × criterion</h2>",
        *_matrix(result),
        "<h2>Failures</h2>",
        *_failures(result),
        *_scenario_errors(result),
        "<h2>Not exercised</h2>",
        (
            "<ul>" + "".join(f'<li><a href="#c-{e(c.id)}">{e(c.id)}</a> {e(c.title)}</li>' for c in idle) + "</ul>"
            if idle
            else "<p>Every applicable criterion was exercised.</p>"
        ),
        "<h2>Criteria</h2>",
        *_criteria_table(result),
        "<h2>Scenarios</h2>",
        *_scenarios_table(result),
        "<h2>Coverage: criterion × failpoint</h2>",
        '<p class="muted">● = the failpoint was reached in a scenario that exercised the criterion.</p>',
        *_coverage(result),
        "<h2>Run</h2>",
        *_run_info(result),
    ]
    if result.determinism is not None:
        parts += ["<h2>Determinism</h2>", *_determinism(result)]
    if result.selftest is not None:
        parts += ["<h2>Self-test: mutant × criterion kill matrix</h2>", *_selftest(result)]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write(result: RunResult, report_dir: str | os.PathLike[str]) -> Path:
    return write_text(Path(report_dir) / FILENAME, to_html(result))
