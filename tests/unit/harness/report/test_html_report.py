"""report.html: self-contained, escaped, navigable; failures show every cited event, the
cited ledger rows and a per-instance timeline; coverage shows injected vs reached."""

from __future__ import annotations

import dataclasses
import enum
import html as html_lib
import re
from html.parser import HTMLParser

from harness.report import html
from harness.report.text import SOURCE_LABEL
from harness.report.result import CriterionStatus


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts.append(data)


def _page(result, tmp_path):
    return html.write(result, tmp_path).read_text(encoding="utf-8")


def _parse(page):
    parser = _Collect()
    parser.feed(page)
    return parser


def test_html_is_self_contained(failing_result, tmp_path):
    page = _page(failing_result, tmp_path)
    parser = _parse(page)
    tags = [tag for tag, _ in parser.tags]
    assert "link" not in tags and "img" not in tags and "iframe" not in tags
    scripts = [attrs for tag, attrs in parser.tags if tag == "script"]
    assert scripts == [{}]  # one inline script, no src
    code = "".join(parser.scripts)
    for forbidden in ("fetch(", "XMLHttpRequest", "import(", "eval(", "innerHTML", "http"):
        assert forbidden not in code
    for _, attrs in parser.tags:
        for key in ("src", "href", "action"):
            value = attrs.get(key)
            assert value is None or value.startswith("#"), (key, value)
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page)
    assert "url(" not in page and "@import" not in page


def test_html_escapes_everything(failing_result, tmp_path):
    page = _page(failing_result, tmp_path)
    assert "<script>alert" not in page and "<b>bold</b>" not in page and "<again>" not in page
    assert html_lib.escape('<script>alert("x")</script>') in page
    assert "ref&lt;impl&gt;" in page
    assert "\x00" not in page


def test_headline_links_to_the_failure_section_and_contents_list_every_section(failing_result, tmp_path):
    page = _page(failing_result, tmp_path)
    parser = _parse(page)
    ids = [attrs["id"] for _, attrs in parser.tags if "id" in attrs]
    assert len(ids) == len(set(ids)), "duplicate ids"
    link = next(attrs for _, attrs in parser.tags if attrs.get("id") == "headline-failures")
    assert link["href"] == "#failures" and "failures" in ids
    assert page.index('id="headline-failures"') < page.index('<nav class="toc"') < page.index('id="failures"')
    toc = page[page.index('<nav class="toc"'):page.index("</nav>")]
    targets = re.findall(r'href="#([^"]+)"', toc)
    assert targets and all(t in ids for t in targets)
    for section in ("failures", "unexpected-passes", "not-exercised", "coverage", "determinism", "selftest"):
        assert section in targets
    every_href = [attrs["href"][1:] for _, attrs in parser.tags if attrs.get("href", "").startswith("#")]
    assert all(h in ids for h in every_href), [h for h in every_href if h not in ids]


def test_failures_show_statement_source_every_cited_event_ledger_rows_and_timeline(failing_result, tmp_path):
    page = _page(failing_result, tmp_path)
    failures = page[page.index('id="failures"'):page.index('id="unexpected-passes"')]
    l41 = failures[failures.index('id="f-L4.1"'):failures.index('id="f-L4.2"')]
    assert l41.index("statement L4.1") < l41.index(html_lib.escape(SOURCE_LABEL)) < l41.index("「clause L4.1」")
    assert "seed clause" not in page.lower()
    assert html_lib.escape('>    5 world   tool_executed        {"html":"<b>bold</b>"}') in l41
    assert "&gt;   18 world   tool_executed" in l41  # the second cited event, far from the first
    assert "cited ledger rows" in l41 and "{&quot;ledger_seq&quot;:1" in l41
    assert '<table class="tl">' in l41
    assert "<th>instance i0</th><th>instance i1</th>" in l41
    assert re.search(r'<tr class="k-crash cited"><td class="idx">4</td><td class="lane here alive">CRASH', l41)
    assert re.search(r'<tr class="k-restart cited"><td class="idx">5</td><td class="lane dead"></td>'
                     r'<td class="lane here alive">restart as i1', l41)
    assert '<td class="ledger here">#2 write_file c1: ok, effect applied &lt;again&gt;</td>' in l41
    assert '<td class="ui here">c1: succeeded (no actions)</td>' in l41
    assert "lifecycle-harness replay scenarios/l4/crash.toml --seed 7 --impl reference" in l41
    assert "hung in run_turn after 20.0s" in page


def test_unexpected_passes_expected_failures_and_not_exercised_have_their_sections(failing_result, tmp_path):
    page = _page(failing_result, tmp_path)
    unexpected = page[page.index('id="unexpected-passes"'):page.index('id="expected-failures"')]
    assert 'href="#c-M2"' in unexpected and "issue 13" in unexpected and "M1" not in unexpected
    expected = page[page.index('id="expected-failures"'):page.index('id="not-exercised"')]
    assert 'href="#c-M1"' in expected and "issue 12" in expected
    idle = page[page.index('id="not-exercised"'):page.index('id="all-criteria"')]
    assert 'href="#c-L2.3"' in idle and 'href="#c-X1"' not in idle


def test_grid_counts_every_status_and_filters_are_marked(failing_result, tmp_path):
    page = _page(failing_result, tmp_path)
    grid = page[page.index('<table class="matrix">'):]
    grid = grid[:grid.index("</table>")]
    header = re.findall(r'<th class="st-([a-z_]+)">', grid)
    assert header == ["passed", "failed", "error", "not_exercised", "not_applicable",
                      "expected_fail", "unexpected_pass"]
    m_row = re.search(r'<tr data-stage="m"><th>m</th>(.*?)<td><a', grid).group(1)
    assert re.findall(r"<td>(\d*)</td>", m_row) == ["", "", "", "", "", "1", "1"]
    assert '<form id="filters" hidden>' in page  # shown only by the script
    assert '<option value="unexpected_pass">unexpected pass</option>' in page
    assert '<tr id="c-M2" data-stage="m" data-status="unexpected_pass">' in page
    assert '<section class="failure" id="f-L4.1" data-stage="l4" data-status="failed">' in page


def test_passing_detail_collapsed_and_lists_are_counts(failing_result, tmp_path):
    page = _page(failing_result, tmp_path)
    x1 = page[page.index('<tr id="c-X1"'):]
    x1 = x1[:x1.index("</tr>")]
    assert "<details><summary>title X1</summary>" in x1  # closed
    assert "<details><summary>1 scenarios</summary>" in x1
    l41 = page[page.index('<tr id="c-L4.1"'):]
    assert l41.startswith('<tr id="c-L4.1"') and "<details open><summary>title L4.1</summary>" in l41


def test_coverage_shows_injected_vs_reached_and_status(failing_result, tmp_path):
    page = _page(failing_result, tmp_path)
    coverage = page[page.index('id="coverage"'):page.index('id="run"')]
    assert '<th class="fp unreached">after_projection</th>' in coverage
    x1 = re.search(r'<tr data-stage="x" data-status="passed"><th><a href="#c-X1">X1</a></th>'
                   r'<td class="st-passed">passed</td>(.*?)</tr>', coverage).group(1)
    assert '<td class="inj"' in x1 and ">1/1</td>" in x1
    l41 = re.search(r'<tr class="bad" data-stage="l4" data-status="failed"><th><a href="#c-L4.1">', coverage)
    assert l41, "a failed criterion's row is marked bad (red), not green"


def test_coverage_reached_without_injection(failing_result, tmp_path):
    no_injection = dataclasses.replace(
        failing_result,
        scenarios=tuple(dataclasses.replace(s, failpoints_injected=()) for s in failing_result.scenarios))
    coverage = html.to_html(no_injection)
    coverage = coverage[coverage.index('id="coverage"'):coverage.index('id="run"')]
    assert '<td class="inj"' not in coverage and '<td class="hit"' in coverage and ">0/1</td>" in coverage


def test_determinism_says_when_it_did_not_run(passing_result, failing_result, tmp_path):
    assert "Not checked: each scenario ran once" in html.to_html(passing_result)
    assert "1 of 3 scenarios diverged" in html.to_html(failing_result)


def test_a_status_new_to_the_layout_renders_generically(failing_result):
    # a status added to the vocabulary later (e.g. "not selected") needs no layout change
    class Extra(enum.StrEnum):
        NOT_SELECTED = "not_selected"

    criteria = list(failing_result.criteria)
    criteria[0] = dataclasses.replace(criteria[0], status=Extra.NOT_SELECTED)
    page = html.to_html(dataclasses.replace(failing_result, criteria=tuple(criteria)))
    assert '<th class="st-not_selected">not selected</th>' in page
    assert '<option value="not_selected">not selected</option>' in page
    assert '<tr id="c-X1" data-stage="x" data-status="not_selected">' in page


def test_html_of_a_passing_run(passing_result, tmp_path):
    page = _page(passing_result, tmp_path)
    assert "No criterion failed." in page and "Every applicable criterion was exercised." in page
    assert 'href="#failures"' in page and 'id="failures"' in page
    assert '<table class="tl">' not in page


def test_failure_section_points_to_every_other_reason_the_gate_failed(failing_result, passing_result):
    page = html.to_html(failing_result)
    failures = page[page.index('id="failures"'):page.index('id="f-L4.1"')]
    for anchor, text in (("not-exercised", "1 criteria not exercised"),
                         ("unexpected-passes", "1 unexpected passes"),
                         ("scenario-errors", "1 scenarios that did not complete"),
                         ("determinism", "1 scenarios whose traces diverged"),
                         ("selftest", "1 self-test not passed")):
        assert f'<a href="#{anchor}">{text}</a>' in failures
        assert f'id="{anchor}"' in page
    assert "Besides the failures below" not in html.to_html(passing_result)


def test_a_scenario_timeline_is_drawn_once_and_later_violations_link_to_it(failing_result, monkeypatch):
    page = html.to_html(failing_result)  # L4.1 and L4.2 both fail in l4-crash
    assert page.count('<table class="tl">') == 1 + 1  # once in the failures, once for the errored scenario
    l42 = page[page.index('id="f-L4.2"'):page.index("</section>", page.index('id="f-L4.2"'))]
    assert '<table class="tl">' not in l42
    assert '<a href="#tl-0">drawn above</a> (this violation cites events 4, 5)' in l42
    assert 'id="tl-0"' in page
    monkeypatch.setattr(html, "TIMELINES_DRAWN_MAX", 0)
    capped = html.to_html(failing_result)
    assert "timeline not drawn: only the first 0 failing scenarios are" in capped
