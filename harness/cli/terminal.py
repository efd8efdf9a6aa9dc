"""Terminal output: colour and a live one-line progress on a terminal, plain lines elsewhere.

Guarantees of :func:`style_for`: colour only when ``--color=always``, or ``auto`` on a
terminal without ``NO_COLOR`` set (https://no-color.org); the live progress line (one line
rewritten in place with ``\\r``) only on a terminal, without ``NO_COLOR`` and not with
``--color=never``. Without both, output is the plain lines a log or a pipe wants, with no
escape code at all. :class:`ProgressLine` keeps failing scenarios on their own line (they
stay visible after the run) and clears the live line when the run ends.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from typing import Mapping, TextIO

COLOR_CHOICES = ("auto", "always", "never")

_CODES = {"red": "31", "green": "32", "yellow": "33", "blue": "34", "magenta": "35",
          "bold": "1", "dim": "2"}


@dataclass(frozen=True, slots=True)
class Style:
    color: bool = False
    live: bool = False
    unicode: bool = True

    def paint(self, text: str, colour: str) -> str:
        if not self.color or not text:
            return text
        return f"\x1b[{_CODES[colour]}m{text}\x1b[0m"


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _can_encode(stream: TextIO, text: str) -> bool:
    encoding = getattr(stream, "encoding", None) or "utf-8"
    try:
        text.encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return False
    return True


def style_for(stream: TextIO, choice: str = "auto",
              environ: Mapping[str, str] | None = None) -> Style:
    environ = os.environ if environ is None else environ
    no_color = bool(environ.get("NO_COLOR"))
    tty = _isatty(stream)
    color = choice == "always" or (choice == "auto" and tty and not no_color)
    live = tty and not no_color and choice != "never"
    return Style(color=color, live=live, unicode=_can_encode(stream, "✓✗…"))


SCENARIO_MARKS = {
    "passed": ("✓", "ok", "green"),
    "failed": ("✗", "FAIL", "red"),
    "error": ("!", "ERROR", "red"),
    "skipped": ("-", "skip", "dim"),
    "not_run": ("-", "not run", "dim"),
}


def shorten(text: str, width: int, style: Style) -> str:
    if len(text) <= width:
        return text
    ellipsis = "…" if style.unicode else "..."
    return text[:max(width - len(ellipsis), 1)] + ellipsis


class ProgressLine:
    """The progress of a run, one call per scenario start and end."""

    def __init__(self, stream: TextIO, style: Style, width: int | None = None) -> None:
        self.stream = stream
        self.style = style
        self.width = width or shutil.get_terminal_size((100, 24)).columns
        self._open = False

    def _prefix(self, index: int, total: int) -> str:
        digits = len(str(total))
        return f"[{index:>{digits}}/{total}]"

    def start(self, index: int, total: int, name: str) -> None:
        if not self.style.live:
            return
        prefix = self._prefix(index, total)
        room = max(self.width - len(prefix) - 4, 10)
        self._write("\r\x1b[2K" + f"{prefix} {shorten(name, room, self.style)}")
        self._open = True

    def done(self, index: int, total: int, name: str, status: str, duration_s: float,
             error: str = "") -> None:
        symbol, word, colour = SCENARIO_MARKS.get(status, ("?", status, "yellow"))
        prefix = self._prefix(index, total)
        if not self.style.live:
            line = f"{prefix} {status:<6} {name} ({duration_s:.2f}s)"
            if error:
                line += f" — {error.splitlines()[0]}"
            self._write(line + "\n")
            return
        mark = self.style.paint(symbol if self.style.unicode else word, colour)
        room = max(self.width - len(prefix) - 4, 10)
        line = f"\r\x1b[2K{prefix} {shorten(name, room, self.style)} {mark}"
        if status in ("failed", "error"):
            detail = f" — {error.splitlines()[0]}" if error else ""
            self._write(line + self.style.paint(detail, colour) + "\n")
            self._open = False
        else:
            self._write(line)
            self._open = True

    def finish(self) -> None:
        """Clear the live line (the summary follows on a clean line)."""
        if self.style.live and self._open:
            self._write("\r\x1b[2K")
        self._open = False

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()
