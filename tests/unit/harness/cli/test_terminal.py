"""harness.cli.terminal and the run's console output: colour and a live progress line on a
terminal, plain lines (no escape codes) for a pipe or with NO_COLOR."""

from __future__ import annotations

import io

import pytest
from suite_fakes import FakeImplementation, FakeScenario, criterion, fake_runner, render_faults

from harness.cli import app as cli
from harness.cli.terminal import ProgressLine, Style, style_for


class FakeTTY(io.StringIO):
    def __init__(self, encoding: str = "utf-8") -> None:
        super().__init__()
        self._encoding = encoding

    @property
    def encoding(self):  # type: ignore[override]
        return self._encoding

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("stream, choice, env, color, live", [
    (FakeTTY(), "auto", {}, True, True),
    (FakeTTY(), "auto", {"NO_COLOR": "1"}, False, False),
    (FakeTTY(), "never", {}, False, False),
    (io.StringIO(), "auto", {}, False, False),
    (io.StringIO(), "always", {}, True, False),  # colour asked for; no \r in a log
])
def test_style_for(stream, choice, env, color, live):
    style = style_for(stream, choice, env)
    assert (style.color, style.live) == (color, live)


def test_live_progress_rewrites_one_line_and_keeps_failures():
    tty = FakeTTY()
    line = ProgressLine(tty, style_for(tty, "auto", {}), width=60)
    line.start(37, 141, "l4-crash-after-result-saved-with-a-very-long-name-indeed")
    line.done(37, 141, "l4-crash-after-result-saved-with-a-very-long-name-indeed", "passed", 0.2)
    line.done(38, 141, "l4-bad", "failed", 0.2, "L4.1 violated")
    line.finish()
    text = tty.getvalue()
    assert "\r\x1b[2K[ 37/141] l4-crash-after-result-saved-with-a-very-long-n…" in text
    assert "\x1b[32m✓\x1b[0m" in text and "\x1b[31m✗\x1b[0m" in text
    assert text.count("\n") == 1  # only the failure stays on its own line


def test_a_terminal_that_cannot_show_unicode_gets_words():
    tty = FakeTTY(encoding="ascii")
    line = ProgressLine(tty, style_for(tty, "auto", {}), width=40)
    line.done(1, 2, "a-scenario-with-a-long-long-long-name", "passed", 0.1)
    assert "ok" in tty.getvalue() and "..." in tty.getvalue()
    tty.getvalue().encode("ascii")


def test_plain_progress_is_one_line_per_scenario_without_escapes():
    out = io.StringIO()
    line = ProgressLine(out, Style(), width=80)
    line.start(1, 2, "s1")
    line.done(1, 2, "s1", "passed", 0.25)
    line.done(2, 2, "s2", "error", 1.0, "hung in run_turn\nmore")
    line.finish()
    assert out.getvalue() == ("[1/2] passed s1 (0.25s)\n"
                              "[2/2] error  s2 (1.00s) — hung in run_turn\n")


def _deps():
    return cli.Deps(
        resolve_impl=lambda spec: FakeImplementation(),
        discover=lambda paths: (FakeScenario("ok", marks=("A:ok",)),
                                FakeScenario("bad", marks=("A:bad",))),
        load_scenario=lambda path, variant=None: None,
        default_scenario_dir=lambda: ".",
        criteria=lambda: (criterion("A"),),
        runner=lambda: fake_runner(),
        fault_renderer=lambda: render_faults,
    )


@pytest.mark.parametrize("no_color", [True, False])
def test_run_on_a_terminal_is_coloured_unless_no_color(tmp_path, monkeypatch, no_color):
    monkeypatch.chdir(tmp_path)
    if no_color:
        monkeypatch.setenv("NO_COLOR", "1")
    else:
        monkeypatch.delenv("NO_COLOR", raising=False)
    out, err = FakeTTY(), FakeTTY()
    code = cli.main(["run", "--report-dir", "r"], deps=_deps(), stdout=out, stderr=err)
    assert code == 1
    if no_color:
        assert "\x1b[" not in out.getvalue() + err.getvalue()
        assert "[2/2] failed bad" in err.getvalue()
    else:
        assert "\x1b[31mgate FAILED" in out.getvalue()
        assert "\r\x1b[2K[1/2] ok" in err.getvalue()


def test_run_into_a_pipe_has_no_escape_codes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NO_COLOR", raising=False)
    out, err = io.StringIO(), io.StringIO()
    assert cli.main(["run", "--report-dir", "r"], deps=_deps(), stdout=out, stderr=err) == 1
    assert "\x1b" not in out.getvalue() + err.getvalue() and "\r" not in err.getvalue()
