"""The scripted human approver: sees approval prompts, answers when a scenario step says so.

Guarantees: every prompt is recorded (``APPROVAL_PROMPT``) in the order shown; the
"next" wait to answer is the oldest prompted wait id not yet answered (a wait prompted again,
e.g. after a restart, keeps its first place); answers themselves are driver calls made by the
runner, never by the world on its own.
"""

from __future__ import annotations

import threading

from harness.contract import ApprovalPrompt, to_json
from harness.trace.record import Kind
from harness.world.log import Channel


class ScriptedApprover:
    def __init__(self) -> None:
        self._order: list[str] = []
        self._prompts: dict[str, ApprovalPrompt] = {}
        self._answered: set[str] = set()
        self._last_answered: str | None = None
        self._lock = threading.Lock()

    def prompt(self, prompt: ApprovalPrompt, channel: Channel) -> None:
        channel.guard()
        with self._lock:
            if prompt.wait_id not in self._prompts:
                self._order.append(prompt.wait_id)
            self._prompts[prompt.wait_id] = prompt
        data = to_json(prompt)
        channel.record(Kind.APPROVAL_PROMPT, data)

    def next_unanswered(self) -> str | None:
        with self._lock:
            return next((w for w in self._order if w not in self._answered), None)

    def mark_answered(self, wait_id: str) -> None:
        with self._lock:
            self._answered.add(wait_id)
            self._last_answered = wait_id

    def last_answered(self) -> str | None:
        """The wait the human answered most recently (a step may answer it again)."""
        with self._lock:
            return self._last_answered

    def prompted(self) -> tuple[ApprovalPrompt, ...]:
        with self._lock:
            return tuple(self._prompts[w] for w in self._order)
