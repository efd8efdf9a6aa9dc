"""``report.html``: one self-contained page for humans.

Guarantees: no external asset or fetch (inline CSS and one small inline script; links are
in-page anchors); every piece of text from the result goes through :func:`html.escape`; the
page reads fully with scripts off (the script only reveals and drives the stage/status
filter, which hides nothing until used). Layout, top to bottom: the banner (conformance
level, gate line, and a link to the failure section, ``#failures``), a table of contents, the
level table, the stage × status grid (counts for every status of the vocabulary, so a new
status needs no layout change), the failures (each criterion's English statement first, its
source clause from the design document labelled as such, and per violation every cited
event with context, every cited ledger row, a per-instance timeline of the scenario drawn as
an HTML/CSS lane diagram, and the replay command), unexpected passes, criteria not
exercised, the criteria table (passing detail collapsed, scenario lists as counts that
expand), the scenarios, the coverage matrix criterion × failpoint ("fault injected here" vs
"reached", with counts, rows coloured by the criterion's status), the run, the determinism
check (or that it did not run) and the self-test kill matrix.
"""

from __future__ import annotations

import html
import json
import os
from pathlib import Path
from typing import Iterable

from harness.contract import to_json
from harness.report.text import (
    PROBLEM_STATUSES,
    SOURCE_LABEL,
    criteria_with,
    evidence_line,
    gate_line,
    level_line,
    stages,
    status_counts,
    status_label,
    xml_safe,
)
from harness.report.atomic import write_text
from harness.report.result import (
    CriterionResult,
    CriterionStatus,
    RunResult,
    ScenarioResult,
    ScenarioStatus,
    Timeline,
    Violation,
)

FILENAME = "report.html"

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:1.5em;color:#1d1d1f;background:#fff}
h1{font-size:1.5em;margin:.2em 0}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd}
h3{font-size:1.05em;margin:1.2em 0 .3em}h4{margin:.9em 0 .3em}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ddd;padding:.25em .5em;vertical-align:top;text-align:left}
th{background:#f5f5f7}
pre{background:#f6f8fa;border:1px solid #e1e4e8;padding:.5em;overflow-x:auto;font-size:12px;margin:.3em 0}
code{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px}
code.replay{display:block;background:#fff8c5;border:1px solid #e5d68a;padding:.3em .5em;white-space:pre-wrap;word-break:break-all}
blockquote{border-left:4px solid #ccc;margin:.2em 0 .4em;padding:.2em .8em;color:#444;background:#fafafa}
.statement{font-size:1.02em}.source-label{margin:.3em 0 0;font-size:12px;color:#666}
.banner{padding:.6em 1em;border-radius:6px;font-weight:600;margin:.6em 0}
.banner a{color:inherit}
nav.toc{background:#f8f8fa;border:1px solid #e3e3e8;border-radius:6px;padding:.3em 1em;display:inline-block}
nav.toc ol{margin:.3em 0;padding-left:1.4em}
.chip{display:inline-block;padding:.1em .45em;margin:.1em;border-radius:4px;text-decoration:none;color:#111;background:#e0e0e0;font-family:ui-monospace,monospace;font-size:12px}
.st-passed{background:#b7e4c7}.st-failed{background:#f4a6a6}.st-error{background:#e76f51;color:#fff}
.st-not_exercised{background:#ffd166}.st-not_applicable{background:#e0e0e0;color:#555}
.st-expected_fail{background:#cdb4db}.st-unexpected_pass{background:#a2d2ff}
.st-not_selected{background:#f5f5f5;color:#888;border:1px dashed #bbb}
.sc-passed{background:#b7e4c7}.sc-failed{background:#f4a6a6}.sc-error{background:#e76f51;color:#fff}
.sc-skipped{background:#e0e0e0;color:#555}.sc-not_run{background:#f5f5f5;color:#888}
.legend .chip{cursor:default}
.cov td{text-align:center;padding:.1em .3em;font-size:12px;white-space:nowrap}
.cov th.fp{writing-mode:vertical-rl;transform:rotate(180deg);white-space:nowrap;font-weight:normal;font-size:12px}
.cov td.inj{background:#52b788;color:#fff;font-weight:600}.cov td.hit{background:#d8f3dc}
.cov tr.bad td.inj{background:#d62828;color:#fff}.cov tr.bad td.hit{background:#f8d7da}
.cov td.miss{background:#f4a6a6}.cov th.unreached{background:#ffd166}
.muted{color:#666}
#filters{margin:.6em 0;padding:.4em .8em;background:#f5f5f7;border-radius:6px}
#filters label{margin-right:1em}
section.failure{border-top:1px solid #eee;margin-top:1em}
details>summary{cursor:pointer}
.tl{border-collapse:collapse;font-size:12px;margin:.4em 0}
.tl td,.tl th{border:none;border-bottom:1px solid #f0f0f0;padding:.1em .5em;white-space:nowrap}
.tl th{position:sticky;top:0;background:#f5f5f7}
.tl td.idx{color:#888;text-align:right;font-family:ui-monospace,monospace}
.tl td.lane{border-left:3px solid transparent;min-width:9em}
.tl td.alive{border-left-color:#74c69d}
.tl td.ledger,.tl td.ui{background:#fbfbfd;min-width:12em}
.tl tr.k-crash td.lane.here{background:#d62828;color:#fff;font-weight:700}
.tl tr.k-restart td.lane.here{background:#457b9d;color:#fff;font-weight:700}
.tl tr.k-hang td.lane.here{background:#e76f51;color:#fff;font-weight:700}
.tl tr.k-failpoint td.lane.here{color:#9d0208;font-weight:600}
.tl td.ledger.here{background:#d8f3dc}.tl td.ui.here{background:#e0ecff}
.tl tr.cited td{outline:2px solid #f77f00;outline-offset:-2px}
.tl td.dead{background:repeating-linear-gradient(45deg,#fff,#fff 4px,#f3f3f3 4px,#f3f3f3 8px)}
"""

SCRIPT = """
(function(){
  var form=document.getElementById('filters');
  if(!form){return;}
  form.hidden=false;
  function apply(){
    var stage=form.elements['stage'].value, status=form.elements['status'].value, shown=0;
    var items=document.querySelectorAll('[data-stage]');
    for(var i=0;i<items.length;i++){
      var el=items[i];
      var ok=(!stage||el.getAttribute('data-stage')===stage)&&
             (!status||!el.hasAttribute('data-status')||el.getAttribute('data-status')===status);
      el.hidden=!ok;
      if(ok&&el.hasAttribute('data-status')&&el.tagName==='TR'&&el.closest('#criteria')){shown++;}
    }
    document.getElementById('filter-count').textContent=shown+' criteria shown';
  }
  form.addEventListener('change',apply);
  apply();
})();
"""

TIMELINES_DRAWN_MAX = 40
"""Scenario timelines drawn in the page (each once, at its first violation; later violations
of the same scenario link to it), so a badly failing run still gives a page a browser opens."""

ANCHOR_FAILURES = "failures"
"""The failure section's id; the banner links to it."""

_TIMELINE_SIDE_KINDS = {"tool_executed": "ledger", "tool_unavailable": "ledger", "ui_publish": "ui"}


def e(value: object) -> str:
    """Escaped for HTML text and attributes; characters HTML cannot carry replaced."""
    return html.escape(xml_safe(str(value)), quote=True)


def _chip(c: CriterionResult) -> str:
    tip = f"{c.id} {c.title} — {status_label(c.status)}"
    return (f'<a class="chip st-{e(c.status.value)}" href="#c-{e(c.id)}" '
            f'title="{e(tip)}">{e(c.id)}</a>')


def _present_statuses(result: RunResult) -> list[CriterionStatus]:
    counts = status_counts(result.criteria)
    return [status for status, count in counts.items() if count]


def _grid(result: RunResult) -> list[str]:
    """Stage × status counts (every status present in the run gets a column) and chips."""
    columns = _present_statuses(result)
    head = "".join(f'<th class="st-{e(s.value)}">{e(status_label(s))}</th>' for s in columns)
    out = [f'<table class="matrix"><tr><th>stage</th>{head}<th>criteria</th></tr>']
    for stage in stages(result):
        members = [c for c in result.criteria if c.stage == stage]
        counts = status_counts(members)
        cells = "".join(f"<td>{counts.get(s) or ''}</td>" for s in columns)
        chips = " ".join(_chip(c) for c in members)
        out.append(f'<tr data-stage="{e(stage)}"><th>{e(stage)}</th>{cells}<td>{chips}</td></tr>')
    totals = status_counts(result.criteria)
    out.append("<tr><th>all</th>" + "".join(f"<td><b>{totals[s]}</b></td>" for s in columns)
               + f"<td>{len(result.criteria)} criteria</td></tr></table>")
    legend = " ".join(f'<span class="chip st-{e(s.value)}">{e(status_label(s))}</span>'
                      for s in CriterionStatus)
    out.append(f'<p class="legend">{legend}</p>')
    return out


def _filters(result: RunResult) -> list[str]:
    stage_options = "".join(f'<option value="{e(s)}">{e(s)}</option>' for s in stages(result))
    status_options = "".join(f'<option value="{e(s.value)}">{e(status_label(s))}</option>'
                             for s in _present_statuses(result))
    return [
        '<form id="filters" hidden>',
        f'<label>stage <select name="stage"><option value="">all</option>{stage_options}</select></label>',
        f'<label>status <select name="status"><option value="">all</option>{status_options}</select></label>',
        '<span id="filter-count" class="muted"></span></form>',
    ]


def _pre(lines: Iterable[str]) -> str:
    return "<pre>" + e("\n".join(lines)) + "</pre>"


def _statement(c: CriterionResult) -> list[str]:
    out = [f'<p class="statement">{e(c.statement)}</p>']
    if c.seed_clause:
        out.append(f'<p class="source-label">{e(SOURCE_LABEL)}:</p>')
        out.append(f'<blockquote lang="zh">{e(c.seed_clause)}</blockquote>')
    return out


def _timeline(timeline: Timeline, cited: set[int]) -> list[str]:
    """Instances as lanes (time runs down), the world's ledger rows and UI publications in
    two columns beside them; a lane is green-edged while its instance is alive, hatched
    after it crashed; crashes, restarts and hangs are marked in their lane."""
    lanes = list(timeline.instances) or [0]
    born: dict[int, int] = {}
    died: dict[int, int] = {}
    for entry in timeline.entries:
        born.setdefault(entry.instance, entry.index)
        if entry.kind == "crash":
            died[entry.instance] = entry.index
    never = 1 << 62
    head = "".join(f"<th>instance i{lane}</th>" for lane in lanes)
    out = ['<table class="tl"><tr><th>event</th>' + head
           + "<th>world ledger (tool executions)</th><th>UI publications</th></tr>"]
    for entry in timeline.entries:
        side = _TIMELINE_SIDE_KINDS.get(entry.kind)
        cells = []
        for lane in lanes:
            end = died.get(lane, never)
            state = ("alive" if born.get(lane, never) <= entry.index <= end
                     else "dead" if entry.index > end else "")
            if lane == entry.instance and side is None:
                cells.append(f'<td class="lane here {state}">{e(entry.label)}</td>')
            elif lane == entry.instance:
                cells.append(f'<td class="lane {state}">→</td>')
            else:
                cells.append(f'<td class="lane {state}"></td>')
        ledger = (f'<td class="ledger here">{e(entry.label)}</td>' if side == "ledger"
                  else '<td class="ledger"></td>')
        ui = f'<td class="ui here">{e(entry.label)}</td>' if side == "ui" else '<td class="ui"></td>'
        mark = " cited" if entry.index in cited else ""
        out.append(f'<tr class="k-{e(entry.kind)}{mark}"><td class="idx">{entry.index}</td>'
                   f"{''.join(cells)}{ledger}{ui}</tr>")
    out.append("</table>")
    if timeline.left_out:
        out.append(f'<p class="muted">{timeline.left_out} routine events (driver calls, model '
                   "requests, prompts) left out to keep the timeline short.</p>")
    return out


def _violation(v: Violation, scenario: ScenarioResult | None, drawing: str, anchor: str) -> list[str]:
    """One violation; ``drawing`` says whether its scenario's timeline is drawn here
    ("draw"), was drawn earlier at ``anchor`` ("link"), or is not drawn at all ("none")."""
    out = [f"<h4>scenario <code>{e(v.scenario)}</code>, seed {e(v.seed)}</h4>"]
    out.append("<ul>" + "".join(f"<li>{e(evidence_line(item))}</li>" for item in v.evidence) + "</ul>")
    if v.excerpt:
        out.append('<p class="muted">every cited trace event with its neighbours '
                   "(<code>&gt;</code> marks a cited event; <code>⋮</code> skips events):</p>")
        out.append(_pre(v.excerpt))
    if v.cited_ledger_rows:
        out.append('<p class="muted">cited ledger rows (the world\'s record of tool executions):</p>')
        out.append(_pre(v.cited_ledger_rows))
    if scenario is not None and scenario.timeline is not None:
        cited = sorted({i for item in v.evidence for i in item.trace_indexes})
        if drawing == "draw":
            out.append(f'<details class="timeline" id="{anchor}" open><summary>'
                       f"timeline of <code>{e(v.scenario)}</code>: "
                       f"{len(scenario.timeline.instances)} instance(s), "
                       f"{len(scenario.timeline.entries)} events (cited ones outlined)</summary>")
            out += _timeline(scenario.timeline, set(cited))
            out.append("</details>")
        elif drawing == "link":
            out.append(f'<p class="muted">timeline of this scenario: <a href="#{anchor}">drawn above</a> '
                       f"(this violation cites events {e(', '.join(map(str, cited)) or 'none')}).</p>")
        else:
            out.append(f'<p class="muted">timeline not drawn: only the first {TIMELINES_DRAWN_MAX} '
                       "failing scenarios are; report.json holds it (scenarios[].timeline).</p>")
    out.append(f'<code class="replay">{e(v.replay)}</code>')
    return out


def _other_reasons(result: RunResult) -> list[str]:
    """Where else the gate failed, linked, so the headline's link never leads to a dead end."""
    if result.gate_passed:
        return []
    counts = status_counts(result.criteria)
    errored = sum(1 for s in result.scenarios if s.status is ScenarioStatus.ERROR)
    reasons = [
        (counts[CriterionStatus.NOT_EXERCISED], "not-exercised", "criteria not exercised"),
        (counts[CriterionStatus.UNEXPECTED_PASS], "unexpected-passes", "unexpected passes"),
        (errored, "scenario-errors", "scenarios that did not complete"),
        (len(result.unexpected_successes)
         if result.run.expectations_mode != "lenient" else 0, "scenario-errors",
         "scenarios listed as expected to error that did not"),
        (len(result.determinism.divergences) if result.determinism else 0, "determinism",
         "scenarios whose traces diverged"),
        (len(result.conformance.required_unmet), "level", "required features not met"),
        (0 if result.selftest is None or result.selftest.passed else 1, "selftest",
         "self-test not passed"),
    ]
    links = [f'<a href="#{anchor}">{count} {e(what)}</a>' for count, anchor, what in reasons if count]
    if not links:
        return []
    return [f"<p>Besides the failures below, the gate counts: {', '.join(links)}.</p>"]


def _failures(result: RunResult) -> list[str]:
    problems = criteria_with(result, *PROBLEM_STATUSES)
    out = [f'<h2 id="{ANCHOR_FAILURES}">Failures ({len(problems)})</h2>', *_other_reasons(result)]
    if not problems:
        return out + ["<p>No criterion failed.</p>"]
    scenarios = {s.id: s for s in result.scenarios}
    anchors = {s.id: f"tl-{position}" for position, s in enumerate(result.scenarios)}
    drawn: set[str] = set()
    for c in problems:
        out.append(f'<section class="failure" id="f-{e(c.id)}" data-stage="{e(c.stage)}" '
                   f'data-status="{e(c.status.value)}">')
        out.append(
            f'<h3><a class="chip st-{e(c.status.value)}" href="#c-{e(c.id)}">{e(c.id)}</a> {e(c.title)} '
            f'<span class="muted">({e(status_label(c.status))}, {len(c.violations)} violation(s))</span></h3>'
        )
        out += _statement(c)
        for v in c.violations:
            if v.scenario in drawn:
                drawing = "link"
            elif len(drawn) < TIMELINES_DRAWN_MAX:
                drawing = "draw"
                drawn.add(v.scenario)
            else:
                drawing = "none"
            out += _violation(v, scenarios.get(v.scenario), drawing, anchors.get(v.scenario, ""))
        out.append("</section>")
    return out


def _listed(result: RunResult, status: CriterionStatus, anchor: str, title: str,
            none: str, explain: str) -> list[str]:
    members = criteria_with(result, status)
    out = [f'<h2 id="{anchor}">{e(title)} ({len(members)})</h2>']
    if not members:
        return out + [f"<p>{e(none)}</p>"]
    out.append(f"<p>{e(explain)}</p><ul>")
    for c in members:
        reason = f' <span class="muted">— {e(c.expectation_reason)}</span>' if c.expectation_reason else ""
        out.append(f'<li data-stage="{e(c.stage)}" data-status="{e(c.status.value)}">'
                   f'<a href="#c-{e(c.id)}">{e(c.id)}</a> {e(c.title)}{reason}</li>')
    out.append("</ul>")
    return out


def _scenario_errors(result: RunResult) -> list[str]:
    errored = [s for s in result.scenarios
               if s.status in (ScenarioStatus.ERROR, ScenarioStatus.EXPECTED_ERROR)
               or s.unexpected_success]
    if not errored:
        return []
    out = ['<h2 id="scenario-errors">Scenarios that did not complete</h2>']
    for s in errored:
        note = ("" if not s.expected_error
                else f"<p>expected error ({e(s.expected_error)})"
                + (": it did not happen (unexpected success)</p>" if s.unexpected_success
                   else ": as listed</p>" if s.status is ScenarioStatus.EXPECTED_ERROR
                   else ": another error happened</p>"))
        out.append(f'<section data-stage="{e(s.stage)}"><h3><code>{e(s.id)}</code></h3>'
                   f"{note}{_pre([s.error or s.status.value])}")
        if s.timeline is not None:
            out.append("<details><summary>timeline</summary>")
            out += _timeline(s.timeline, set())
            out.append("</details>")
        out.append(f'<code class="replay">{e(s.replay)}</code></section>')
    return out


def _expandable(items: Iterable[str], noun: str) -> str:
    """A list shown as its count; the items appear when the reader opens it."""
    items = list(items)
    if not items:
        return '<span class="muted">none</span>'
    body = ", ".join(f"<code>{e(item)}</code>" for item in items)
    return f"<details><summary>{len(items)} {e(noun)}</summary>{body}</details>"


def _criteria_table(result: RunResult) -> list[str]:
    out = [
        '<table id="criteria"><tr><th>id</th><th>stage</th><th>requirement</th><th>status</th>'
        "<th>exercised</th><th>scenarios exercising</th></tr>"
    ]
    for c in result.criteria:
        note = f'<br><span class="muted">{e(c.expectation_reason)}</span>' if c.expectation_reason else ""
        opened = " open" if c.status in PROBLEM_STATUSES else ""  # the rest stays one line
        source = (f'<p class="source-label">{e(SOURCE_LABEL)}:</p>'
                  f'<blockquote lang="zh">{e(c.seed_clause)}</blockquote>' if c.seed_clause else "")
        out.append(
            f'<tr id="c-{e(c.id)}" data-stage="{e(c.stage)}" data-status="{e(c.status.value)}">'
            f"<td><code>{e(c.id)}</code></td><td>{e(c.stage)}</td>"
            f"<td><details{opened}><summary>{e(c.title)}</summary>"
            f'<p class="statement">{e(c.statement)}</p>{source}</details></td>'
            f'<td class="st-{e(c.status.value)}">{e(status_label(c.status))}{note}</td>'
            f"<td>{e(c.exercised)}</td><td>{_expandable(c.scenarios_exercising, 'scenarios')}</td></tr>"
        )
    out.append("</table>")
    return out


def _scenarios_table(result: RunResult) -> list[str]:
    counts: dict[str, int] = {}
    for s in result.scenarios:
        counts[s.status.value] = counts.get(s.status.value, 0) + 1
    summary = ", ".join(f"{n} {status}" for status, n in counts.items())
    opened = "" if all(s.status in (ScenarioStatus.PASSED, ScenarioStatus.SKIPPED)
                       for s in result.scenarios) else " open"
    out = [
        f"<details{opened}><summary>{len(result.scenarios)} scenarios ({e(summary or 'none')})</summary>",
        "<table><tr><th>id</th><th>stage</th><th>file</th><th>status</th><th>duration (s)</th>"
        "<th>fault plan</th><th>failpoints reached</th><th>trace digest</th></tr>",
    ]
    for s in result.scenarios:
        faults = "<br>".join(e(f) for f in s.faults) or '<span class="muted">none</span>'
        out.append(
            f'<tr data-stage="{e(s.stage)}"><td><code>{e(s.id)}</code></td><td>{e(s.stage)}</td>'
            f"<td><code>{e(s.file)}</code></td>"
            f'<td class="sc-{e(s.status.value)}">{e(s.status.value)}</td><td>{s.duration_s:.3f}</td>'
            f"<td>{faults}</td><td>{_expandable(s.failpoints_reached, 'failpoints')}</td>"
            f'<td><code title="{e(s.trace_digest)}">{e(s.trace_digest[:19])}</code></td></tr>'
        )
    out.append("</table></details>")
    return out


def _coverage(result: RunResult) -> list[str]:
    unreached = set(result.failpoints_unreached)
    scenarios = {s.id: s for s in result.scenarios}
    failpoints = sorted({fp for fps in result.coverage.values() for fp in fps} | unreached
                        | {fp for s in result.scenarios for fp in s.failpoints_reached})
    if not failpoints:
        return ["<p>No failpoint information.</p>"]
    head = "".join(
        f'<th class="fp{" unreached" if fp in unreached else ""}">{e(fp)}</th>' for fp in failpoints
    )
    out = [
        '<p class="muted">A cell reads <b>injected / reached</b>: of the scenarios that exercised '
        "the criterion, how many injected a fault at this failpoint and how many reached it. "
        "Dark cells had a fault injected there, pale ones were only reached; a criterion that "
        "did not pass has its row in red. Yellow headers: failpoints no scenario reached.</p>",
        f'<table class="cov"><tr><th>criterion</th><th>status</th>{head}</tr>',
    ]
    for c in result.criteria:
        exercising = [scenarios[sid] for sid in c.scenarios_exercising if sid in scenarios]
        cells = []
        for fp in failpoints:
            reached = sum(1 for s in exercising if fp in s.failpoints_reached)
            injected = sum(1 for s in exercising if fp in s.failpoints_injected)
            tip = f"{c.id} × {fp}: fault injected in {injected}, reached in {reached} scenario(s)"
            if injected:
                cells.append(f'<td class="inj" title="{e(tip)}">{injected}/{reached}</td>')
            elif reached:
                cells.append(f'<td class="hit" title="{e(tip)}">0/{reached}</td>')
            else:
                cells.append("<td></td>")
        bad = "" if c.status in (CriterionStatus.PASSED, CriterionStatus.NOT_APPLICABLE) else ' class="bad"'
        out.append(
            f'<tr{bad} data-stage="{e(c.stage)}" data-status="{e(c.status.value)}">'
            f'<th><a href="#c-{e(c.id)}">{e(c.id)}</a></th>'
            f'<td class="st-{e(c.status.value)}">{e(status_label(c.status))}</td>{"".join(cells)}</tr>'
        )
    out.append("</table>")
    if unreached:
        out.append(
            "<p>Failpoints no scenario reached: "
            + ", ".join(f"<code>{e(fp)}</code>" for fp in result.failpoints_unreached)
            + "</p>"
        )
    return out


def _determinism_check(result: RunResult) -> list[str]:
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
        "<table><tr><th>level</th><th>state</th><th>criteria</th><th>scenarios written for it"
        "</th><th>scenarios that showed it</th></tr>",
        f"<tr><th>core</th><td>{e(core_bad)}</td>"
        f"<td>{len(level.core_criteria)} criteria (never n/a)</td><td>all</td><td></td></tr>",
    ]
    for f in level.features:
        written = [s.id for s in result.scenarios if f.feature in s.requires]
        showed = [s.id for s in result.scenarios if f.feature in s.features_shown]
        state = f.state.value.replace("_", " ")
        how = ("declared and shown" if f.declared and f.shown else "declared, not shown"
               if f.declared else "shown, not declared" if f.shown
               else "neither declared nor shown")
        state += f" ({how})"
        if f.not_passed:
            state += f": {', '.join(f.not_passed)}"
        if f.required:
            state += " (required)"
        out.append(f"<tr><th>{e(f.feature)}</th><td>{e(state)}</td>"
                   f"<td>{e(', '.join(f.criteria))}</td>"
                   f"<td>{_expandable(written, 'scenarios')}</td>"
                   f"<td>{_expandable(showed, 'scenarios')}</td></tr>")
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


def _determinism(result: RunResult) -> list[str]:
    if result.determinism is None:
        return ['<p>Not checked: each scenario ran once. Run with <code>--check-determinism</code> '
                "to run every scenario twice and compare the traces.</p>"]
    return _determinism_check(result)


def _toc(sections: list[tuple[str, str]]) -> list[str]:
    items = "".join(f'<li><a href="#{e(anchor)}">{e(title)}</a></li>' for anchor, title in sections)
    return [f'<nav class="toc" aria-label="contents"><b>Contents</b><ol>{items}</ol></nav>']


def _sections(result: RunResult) -> list[tuple[str, str, list[str]]]:
    """(anchor, table-of-contents title, body) of every section, in page order."""
    problems = criteria_with(result, *PROBLEM_STATUSES)
    errored = sum(1 for s in result.scenarios
                  if s.status in (ScenarioStatus.ERROR, ScenarioStatus.EXPECTED_ERROR)
                  or s.unexpected_success)
    counts = status_counts(result.criteria)
    sections = [
        ("level", "Conformance level", _levels(result)),
        ("grid", "Stage × status", _grid(result)),
        (ANCHOR_FAILURES, f"Failures ({len(problems)})", _failures(result)),
    ]
    if errored:
        sections.append(("scenario-errors", f"Scenarios that did not complete ({errored})",
                         _scenario_errors(result)))
    sections += [
        ("unexpected-passes", f"Unexpected passes ({counts[CriterionStatus.UNEXPECTED_PASS]})",
         _listed(result, CriterionStatus.UNEXPECTED_PASS, "unexpected-passes", "Unexpected passes",
                 "No criterion listed as expected to fail passed.",
                 "Listed in the expectations file as known to fail, yet passed: remove them from "
                 "the expectations file so that a later regression is caught.")),
        ("expected-failures", f"Expected failures ({counts[CriterionStatus.EXPECTED_FAIL]})",
         _listed(result, CriterionStatus.EXPECTED_FAIL, "expected-failures", "Expected failures",
                 "No criterion failed as expected.",
                 "Failed, as the expectations file says they would (its reason follows).")),
        ("not-exercised", f"Not exercised ({counts[CriterionStatus.NOT_EXERCISED]})",
         _listed(result, CriterionStatus.NOT_EXERCISED, "not-exercised", "Not exercised",
                 "Every applicable criterion was exercised.",
                 "No scenario made their hard case happen, so they did not pass.")),
        ("all-criteria", "Criteria", _criteria_table(result)),
        ("scenarios", "Scenarios", _scenarios_table(result)),
        ("coverage", "Coverage: criterion × failpoint", _coverage(result)),
        ("run", "Run", _run_info(result)),
        ("determinism", "Determinism", _determinism(result)),
    ]
    if result.selftest is not None:
        sections.append(("selftest", "Self-test: mutant × criterion kill matrix", _selftest(result)))
    return sections


def to_html(result: RunResult) -> str:
    info = result.implementation
    banner_class = "st-passed" if result.gate_passed else "st-failed"
    problems = criteria_with(result, *PROBLEM_STATUSES)
    where = (f"{len(problems)} failing criteria: go to the failures" if problems
             else "no criterion failed: go to the failures section")
    sections = _sections(result)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>Lifecycle conformance — {e(info.name)} {e(info.version)}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>Lifecycle conformance — {e(info.name)} {e(info.version)}</h1>",
        f'<div class="banner {banner_class}" id="headline"><b>{e(level_line(result))}</b><br>'
        f'{e(gate_line(result))}<br><a id="headline-failures" href="#{ANCHOR_FAILURES}">'
        f"{e(where)} ↓</a></div>",
        *_toc([(anchor, title) for anchor, title, _ in sections]),
        *_filters(result),
    ]
    for anchor, title, body in sections:
        if not (body and body[0].startswith("<h2")):  # sections that carry no heading of their own
            title_text = title.split(" (")[0]
            parts.append(f'<h2 id="{e(anchor)}">{e(title_text)}</h2>')
        parts += body
    parts.append(f"<script>{SCRIPT}</script>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write(result: RunResult, report_dir: str | os.PathLike[str]) -> Path:
    return write_text(Path(report_dir) / FILENAME, to_html(result))
