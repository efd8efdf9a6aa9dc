"""The auto-mode classifier gate (L2.2-L2.8, L3.8).

Guarantees:

* the classifier sees the complete canonical arguments, byte-identical to what would
  execute and never truncated, plus the trusted working directory, permission scope and
  user requirements; the model-written Bash ``description`` is also handed over on its own
  as ``untrusted_description``, and never reaches a trusted field;
* an operation whose canonical arguments exceed ``classifier_input_chars_max`` is not sent
  and gets ``no_verdict_oversize``; it is not auto-approved;
* every outcome is reported as itself (allow, risk_deny, timeout, service_error, cancelled,
  no_verdict_oversize); a verdict slower than ``classifier_timeout_s`` of world time is a
  timeout; only an explicit ``allow`` becomes an allow decision and only a valid
  ``risk_deny`` counts as a risk denial;
* the verdict is void when the session is cancelled or its permission version changes
  while the review is in flight (including from inside ``World.review`` or the
  ``during_classifier_review`` failpoint): the operation is then denied, not executed;
* no store transaction is open while the world reviews or the failpoint runs.
"""

from __future__ import annotations

from typing import Any, Callable

from harness.contract import (
    ClassifierOutcome,
    ClassifierRequest,
    ClassifierVerdict,
    DecisionSource,
    Failpoint,
    Permission,
    World,
    canonical_json,
)
from reference_impl.events import Signals
from reference_impl.failure_policy import BASH_DISPLAY_ONLY_FIELD, is_bash
from reference_impl.permissions import Decision
from reference_impl.records import OperationRecord, SessionState

_NO_VERDICT = {
    ClassifierOutcome.TIMEOUT: "the classifier timed out",
    ClassifierOutcome.SERVICE_ERROR: "the classifier service failed",
    ClassifierOutcome.CANCELLED: "the classifier review was cancelled",
    ClassifierOutcome.NO_VERDICT_OVERSIZE: "the operation is too large for the classifier",
}


def build_request(session: SessionState, tool: str, args: dict[str, Any]) -> ClassifierRequest:
    config = session.config
    untrusted_description = ""
    if is_bash(tool, session.tool_kind(tool)):
        description = args.get(BASH_DISPLAY_ONLY_FIELD, "")
        untrusted_description = description if isinstance(description, str) else canonical_json(
            description
        )
    return ClassifierRequest(
        session_id=config.session_id,
        tool=tool,
        # The operation under review is untrusted data as a whole; it is sent complete so
        # that nothing the tool would receive escapes the review (L2.2, L2.3).
        operation=canonical_json(args),
        trusted_cwd=config.trusted_cwd,
        permission_scope=config.permission_scope,
        user_requirements=config.user_requirements,
        untrusted_description=untrusted_description,
        untrusted_context="",
    )


class ClassifierGate:
    def __init__(
        self, world: World, signals: Signals, read_session: Callable[[str], SessionState]
    ) -> None:
        self._world = world
        self._signals = signals
        self._read_session = read_session

    def review(self, session: SessionState, op: OperationRecord) -> Decision:
        request = build_request(session, op.tool, op.args)
        thresholds = session.config.thresholds
        if len(request.operation) > thresholds.classifier_input_chars_max:
            return _no_verdict(ClassifierOutcome.NO_VERDICT_OVERSIZE,
                               f"{len(request.operation)} characters")
        verdict = self._ask(request, thresholds.classifier_timeout_s)
        self._signals.failpoint(
            Failpoint.DURING_CLASSIFIER_REVIEW, op.session_id, op.execution_id, op.tool_call_id
        )
        after = self._read_session(op.session_id)
        if after.cancelled:
            return Decision(
                Permission.DENY,
                DecisionSource.CANCELLATION,
                "the session was cancelled during the classifier review",
                classifier_outcome=ClassifierOutcome.CANCELLED,
            )
        if after.permission_version != session.permission_version:
            return Decision(
                Permission.DENY,
                DecisionSource.REVALIDATION,
                f"the permission version changed from {session.permission_version} to "
                f"{after.permission_version} during the review; its verdict is void",
                classifier_outcome=verdict.outcome,
            )
        if verdict.outcome is ClassifierOutcome.ALLOW:
            return Decision(
                Permission.ALLOW,
                DecisionSource.CLASSIFIER,
                "the classifier allowed it" + (f": {verdict.reason}" if verdict.reason else ""),
                classifier_outcome=ClassifierOutcome.ALLOW,
            )
        if verdict.outcome is ClassifierOutcome.RISK_DENY:
            return Decision(
                Permission.DENY,
                DecisionSource.CLASSIFIER,
                "the classifier judged it risky"
                + (f": {verdict.reason}" if verdict.reason else "")
                + "; change the rules or ask for approval",
                classifier_outcome=ClassifierOutcome.RISK_DENY,
                counts_as_risk_denial=True,
            )
        return _no_verdict(verdict.outcome, verdict.reason)

    def _ask(self, request: ClassifierRequest, timeout_s: float) -> ClassifierVerdict:
        started = self._world.now()
        try:
            verdict = self._world.review(request)
        except Exception as exc:  # the classifier service broke; SimulatedCrash passes
            return ClassifierVerdict(ClassifierOutcome.SERVICE_ERROR,
                                     f"{type(exc).__name__}: {exc}")
        too_slow = self._world.now() - started > timeout_s
        if too_slow and verdict.outcome is not ClassifierOutcome.TIMEOUT:
            return ClassifierVerdict(
                ClassifierOutcome.TIMEOUT, f"no verdict within {timeout_s:g}s of world time"
            )
        return verdict


def _no_verdict(outcome: ClassifierOutcome, detail: str) -> Decision:
    return Decision(
        Permission.DENY,
        DecisionSource.CLASSIFIER,
        f"{_NO_VERDICT[outcome]}" + (f" ({detail})" if detail else "")
        + "; without an explicit allow it does not run",
        classifier_outcome=outcome,
    )
