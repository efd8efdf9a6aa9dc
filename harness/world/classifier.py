"""The scripted classifier: the world's automatic reviewer of operations.

Guarantees, for the n-th review of a run (1-based, across sessions and instances):

* a script entry for review n overrides everything (``allow``, ``risk_deny``, ``timeout``,
  ``service_error``, ``cancelled``, ``no_verdict_oversize``);
* otherwise an operation longer than ``input_chars_max`` characters gets
  ``no_verdict_oversize`` (the world cannot read it, so it never answers ``allow``);
* otherwise any dangerous marker found *anywhere* in the operation text (not just in a
  leading window) gives ``risk_deny`` naming the marker; otherwise ``allow``;
* a review takes virtual time: the entry's ``delay_s``, else the configured ``delay_s``,
  except that a timeout takes the session's ``classifier_timeout_s``; the clock advances
  before the verdict is returned;
* the world keeps the exact request it received (``raw`` = canonical JSON of the whole
  :class:`~harness.contract.ClassifierRequest`), so checkers can compare bytes.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable

from harness.contract import (
    ClassifierOutcome,
    ClassifierRequest,
    ClassifierVerdict,
    canonical_json,
    to_json,
)
from harness.trace.record import Kind
from harness.world.clock import VirtualClock
from harness.world.log import Channel

DEFAULT_INPUT_CHARS_MAX = 20_000


@dataclass(frozen=True, slots=True)
class ReviewOverride:
    review: int
    """Which review (1-based, counted over the whole run) this entry answers."""
    outcome: ClassifierOutcome
    reason: str = ""
    delay_s: float | None = None


@dataclass(frozen=True, slots=True)
class ClassifierConfig:
    dangerous: tuple[str, ...] = ()
    input_chars_max: int = DEFAULT_INPUT_CHARS_MAX
    script: tuple[ReviewOverride, ...] = ()
    delay_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Review:
    number: int
    raw: str
    verdict: ClassifierVerdict
    delay_s: float


_DEFAULT_REASONS = {
    ClassifierOutcome.ALLOW: "no risk found (scripted)",
    ClassifierOutcome.RISK_DENY: "judged risky (scripted)",
    ClassifierOutcome.TIMEOUT: "the classifier did not answer in time (scripted)",
    ClassifierOutcome.SERVICE_ERROR: "the classifier service failed (scripted)",
    ClassifierOutcome.CANCELLED: "the review was cancelled (scripted)",
    ClassifierOutcome.NO_VERDICT_OVERSIZE: "operation too large to review (scripted)",
}


class ScriptedClassifier:
    def __init__(
        self,
        config: ClassifierConfig,
        clock: VirtualClock,
        timeout_for: Callable[[str], float] = lambda session_id: 30.0,
    ) -> None:
        self._config = config
        self._clock = clock
        self._timeout_for = timeout_for
        self._overrides = {entry.review: entry for entry in config.script}
        self._count = 0
        self._lock = threading.Lock()

    @property
    def reviews(self) -> int:
        with self._lock:
            return self._count

    def decide(self, request: ClassifierRequest) -> Review:
        """The verdict for the next review; advances the virtual clock by its duration."""
        with self._lock:
            self._count += 1
            number = self._count
        raw = canonical_json(to_json(request))
        override = self._overrides.get(number)
        delay = self._config.delay_s
        if override is not None:
            outcome = override.outcome
            reason = override.reason or _DEFAULT_REASONS[outcome]
            if outcome is ClassifierOutcome.TIMEOUT:
                delay = self._timeout_for(request.session_id)
            if override.delay_s is not None:
                delay = override.delay_s
        elif len(request.operation) > self._config.input_chars_max:
            outcome = ClassifierOutcome.NO_VERDICT_OVERSIZE
            reason = (f"operation is {len(request.operation)} characters, more than the "
                      f"{self._config.input_chars_max} the classifier accepts")
        else:
            marker = next((m for m in self._config.dangerous if m in request.operation), None)
            if marker is not None:
                outcome = ClassifierOutcome.RISK_DENY
                reason = f"dangerous operation: contains {marker!r}"
            else:
                outcome, reason = ClassifierOutcome.ALLOW, _DEFAULT_REASONS[ClassifierOutcome.ALLOW]
        if delay:
            self._clock.advance(delay)
        return Review(number, raw, ClassifierVerdict(outcome, reason), float(delay))

    def review(self, request: ClassifierRequest, channel: Channel) -> ClassifierVerdict:
        channel.guard()
        review = self.decide(request)
        channel.record(Kind.CLASSIFIER_REQUEST, {
            "request": to_json(request),
            "raw": review.raw,
            "outcome": review.verdict.outcome.value,
            "reason": review.verdict.reason,
            "delay_s": review.delay_s,
            "review": review.number,
        })
        return review.verdict
