"""A headless Chromium driven over the DevTools protocol on a pipe, with the stdlib only.

Guarantees: :class:`HeadlessChromium` starts ``chromium --headless --remote-debugging-pipe``
with a throw-away profile, exchanges NUL-terminated JSON messages on fds 3 (to the
browser) and 4 (from it), and never waits longer than its deadline (every read is bounded by
``select``); :meth:`close` kills the process and removes the profile. Console errors,
uncaught exceptions and error log entries of the page are collected in ``problems``.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-extensions", "--remote-debugging-pipe",
)


class BrowserError(RuntimeError):
    pass


class HeadlessChromium:
    def __init__(self, timeout_s: float = 60.0) -> None:
        self.timeout_s = timeout_s
        self.problems: list[str] = []
        self._profile = tempfile.mkdtemp(prefix="lh-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # The child must see its ends as fds 3 and 4 (inheritable copies made just before
        # exec; moved above 10 first so that neither overwrites the other). Every other
        # descriptor of ours is close-on-exec, so close_fds=False leaks nothing.
        def _fds() -> None:
            reading = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD, 10)
            writing = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD, 10)
            os.dup2(reading, 3)
            os.dup2(writing, 4)

        self._process = subprocess.Popen(
            [str(CHROMIUM), *FLAGS, f"--user-data-dir={self._profile}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=_fds, close_fds=False,
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self._events: list[dict[str, Any]] = []
        self.session = ""

    # -- protocol ------------------------------------------------------------------------

    def _send(self, method: str, params: dict[str, Any] | None = None, session: str = "") -> int:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        return self._next_id

    def _read_one(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError("chromium did not answer in time")
            ready, _, _ = select.select([self._from_browser], [], [], left)
            if ready:
                chunk = os.read(self._from_browser, 1 << 16)
                if not chunk:
                    raise BrowserError("chromium closed the DevTools pipe")
                self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def _note(self, message: dict[str, Any]) -> None:
        method, params = message.get("method", ""), message.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            self.problems.append(f"exception: {details.get('text')} {details.get('exception', {}).get('description', '')}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            args = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
            self.problems.append(f"console.{params.get('type')}: {args}")
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            self.problems.append(f"log ({entry.get('source')}): {entry.get('text')} {entry.get('url', '')}")
        self._events.append(message)

    def call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        ident = self._send(method, params, self.session if session is None else session)
        deadline = time.monotonic() + self.timeout_s
        while True:
            message = self._read_one(deadline)
            if message.get("id") == ident:
                if "error" in message:
                    raise BrowserError(f"{method}: {message['error']}")
                return message.get("result", {})
            self._note(message)

    def wait_for(self, method: str) -> dict[str, Any]:
        for message in self._events:
            if message.get("method") == method:
                self._events.remove(message)
                return message
        deadline = time.monotonic() + self.timeout_s
        while True:
            message = self._read_one(deadline)
            self._note(message)
            if message.get("method") == method:
                self._events.remove(message)
                return message

    # -- page ----------------------------------------------------------------------------

    def open(self, url: str) -> None:
        target = self.call("Target.createTarget", {"url": "about:blank"}, session="")["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True},
                                 session="")["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable")
        self.call("Page.navigate", {"url": url})
        self.wait_for("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression!r} raised {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def close(self) -> None:
        try:
            self._process.kill()
            self._process.wait(timeout=10)
        finally:
            for fd in (self._to_browser, self._from_browser):
                try:
                    os.close(fd)
                except OSError:
                    pass
            shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> "HeadlessChromium":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
