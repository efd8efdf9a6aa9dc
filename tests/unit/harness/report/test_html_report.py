"""report.html: self-contained, escaped, shows matrix, failures, replay and coverage."""

from __future__ import annotations

import html as html_lib
import re
from html.parser import HTMLParser

from harness.report import html


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def _page(result, tmp_path):
    return html.write(result, tmp_path).read_text(encoding="utf-8")


def test_html_is_self_contained(failing_result, tmp_path):
    page = _page(failing_result, tmp_path)
    parser = _Collect()
    parser.feed(page)
    tags = [tag for tag, _ in parser.tags]
    assert "script" not in tags and "link" not in tags and "img" not in tags and "iframe" not in tags
    for _, attrs in parser.tags:
        for key in ("src", "href"):
            value = attrs.get(key)
            assert value is None or value.startswith("#"), (key, value)
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page)
    assert "url(" not in page and "@import" not in page


def test_html_escapes_everything(failing_result, tmp_path):
    page = _page(failing_result, tmp_path)
    assert "<script>" not in page and "<b>bold</b>" not in page
    assert html_lib.escape('<script>alert("x")</script>') in page
    assert "ref&lt;impl&gt;" in page
    assert "\x00" not in page


def test_html_shows_matrix_failures_with_clause_excerpt_replay_and_coverage(failing_result, tmp_path):
    page = _page(failing_result, tmp_path)
    assert "Stage × criterion" in page
    for cid in ("X1", "L4.1", "L4.2", "L2.3", "L5.3", "M1", "M2"):
        assert f'href="#c-{cid}"' in page and f'id="c-{cid}"' in page
    assert 'class="chip st-failed" href="#c-L4.1"' in page
    assert 'class="chip st-not_exercised" href="#c-L2.3"' in page
    assert "<blockquote>「clause L4.1」</blockquote>" in page
    assert html_lib.escape('>    5 world   tool_executed        {"html":"<b>bold</b>"}') in page
    assert "lifecycle-harness replay scenarios/l4/crash.toml --seed 7 --impl reference" in page
    assert "Coverage: criterion × failpoint" in page
    assert '<th class="fp unreached">after_projection</th>' in page
    assert "hung in run_turn after 20.0s" in page
    assert "Self-test" in page


def test_html_of_a_passing_run(passing_result, tmp_path):
    page = _page(passing_result, tmp_path)
    assert "No criterion failed." in page and "Every applicable criterion was exercised." in page
