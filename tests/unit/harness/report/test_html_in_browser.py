"""report.html in a real headless Chromium: it renders, logs no console error, the failure
section is reachable from the headline, and the stage/status filter works.

Skipped when /usr/bin/chromium is absent (Debian: ``apt-get install chromium``; ``.ci/run``
installs it).
"""

from __future__ import annotations

import json

import pytest

from harness.report import html

from headless_chromium import CHROMIUM, HeadlessChromium

pytestmark = [
    pytest.mark.process,
    pytest.mark.skipif(not CHROMIUM.exists(),
                       reason=f"{CHROMIUM} is absent: install Debian's chromium package "
                              "(apt-get install -y chromium) to check report.html in a browser"),
]


@pytest.fixture(scope="module")
def browser():
    with HeadlessChromium(timeout_s=90) as chromium:
        yield chromium


def _load(browser, result, tmp_path):
    page = html.write(result, tmp_path)
    browser.problems.clear()
    browser.open(page.resolve().as_uri())
    return page


def _visible(browser, selector):
    return browser.evaluate(
        f"Array.from(document.querySelectorAll({json.dumps(selector)}))"
        ".filter(function(el){return el.offsetParent!==null;})"
        ".map(function(el){return el.id||el.getAttribute('data-stage');})")


def _choose(browser, name, value):
    browser.evaluate(
        f"(function(){{var f=document.getElementById('filters');f.elements[{json.dumps(name)}].value="
        f"{json.dumps(value)};f.dispatchEvent(new Event('change'));return true;}})()")


def test_red_report_renders_without_console_errors_and_reaches_the_failures(browser, failing_result, tmp_path):
    _load(browser, failing_result, tmp_path)
    assert browser.evaluate("document.readyState") == "complete"
    assert browser.problems == []
    assert browser.evaluate("document.querySelector('h1').textContent").startswith("Lifecycle conformance")
    assert browser.evaluate("document.querySelector('table.tl').getBoundingClientRect().height") > 0
    # the headline's link points at the failure section, which exists; following it scrolls there
    assert browser.evaluate("document.getElementById('headline-failures').getAttribute('href')") == "#failures"
    assert browser.evaluate("document.getElementById('failures').tagName") == "H2"
    browser.evaluate("document.getElementById('headline-failures').click()")
    assert browser.evaluate("location.hash") == "#failures"
    assert browser.evaluate(
        "(function(){var top=document.getElementById('failures').getBoundingClientRect().top;"
        "return Math.abs(top)<2||window.innerHeight+window.scrollY>=document.body.scrollHeight-2;})()")
    assert browser.problems == []


def test_filters_show_only_the_chosen_stage_and_status(browser, failing_result, tmp_path):
    _load(browser, failing_result, tmp_path)
    assert browser.evaluate("document.getElementById('filters').hidden") is False  # script ran
    assert len(_visible(browser, "#criteria tr[data-status]")) == len(failing_result.criteria)
    _choose(browser, "status", "failed")
    assert _visible(browser, "#criteria tr[data-status]") == ["c-L4.1"]
    assert _visible(browser, "section.failure") == ["f-L4.1"]
    assert browser.evaluate("document.getElementById('filter-count').textContent") == "1 criteria shown"
    _choose(browser, "status", "")
    _choose(browser, "stage", "m")
    assert _visible(browser, "#criteria tr[data-status]") == ["c-M1", "c-M2"]
    assert _visible(browser, "table.matrix tr[data-stage]") == ["m"]
    _choose(browser, "stage", "")
    assert len(_visible(browser, "#criteria tr[data-status]")) == len(failing_result.criteria)
    assert browser.problems == []


def test_green_report_renders_without_console_errors(browser, passing_result, tmp_path):
    _load(browser, passing_result, tmp_path)
    assert browser.problems == []
    text = browser.evaluate("document.body.innerText")
    assert "No criterion failed." in text and "gate PASSED" in text
    assert browser.evaluate("document.getElementById('headline-failures').getAttribute('href')") == "#failures"
    assert browser.evaluate("!!document.getElementById('failures')")


def test_the_console_check_can_fail(browser, tmp_path):
    page = tmp_path / "broken.html"
    page.write_text("<!DOCTYPE html><title>x</title><script>console.error('boom');"
                    "undefinedFunction();</script>", encoding="utf-8")
    browser.problems.clear()
    browser.open(page.as_uri())
    assert any("boom" in p for p in browser.problems)
    assert any("undefinedFunction" in p for p in browser.problems)
