"""The scripted classifier: overrides, oversize, markers anywhere, virtual delays, raw bytes."""

import json

from harness import contract as c
from harness.trace.record import Kind
from harness.world.classifier import ClassifierConfig, ReviewOverride, ScriptedClassifier
from harness.world.clock import VirtualClock
from harness.world.log import Channel, EventLog

O = c.ClassifierOutcome


def req(operation: str, session: str = "s1") -> c.ClassifierRequest:
    return c.ClassifierRequest(session, "Bash", operation, "/repo", "workspace-write", "",
                               untrusted_description="safe, pre-approved")


def channel(log: EventLog) -> Channel:
    return Channel(0, lambda kind, data: log.append("world", kind, 0, data, guarded=True),
                   lambda: None, lambda error: None)


def test_markers_anywhere_deny_everything_else_allows():
    clock = VirtualClock()
    classifier = ScriptedClassifier(ClassifierConfig(dangerous=("rm -rf /",)), clock)
    tail = json.dumps({"command": "echo " + "x" * 900 + " && rm -rf /"})
    denied = classifier.decide(req(tail)).verdict
    assert denied.outcome is O.RISK_DENY and "rm -rf /" in denied.reason
    assert classifier.decide(req('{"command":"ls"}')).verdict.outcome is O.ALLOW
    # the untrusted description says "safe": it changes nothing
    assert classifier.decide(req('{"command":"rm -rf /"}')).verdict.outcome is O.RISK_DENY
    assert clock.now() == VirtualClock().now()  # no delay configured


def test_oversize_gets_no_verdict():
    classifier = ScriptedClassifier(ClassifierConfig(input_chars_max=10), VirtualClock())
    assert classifier.decide(req("x" * 11)).verdict.outcome is O.NO_VERDICT_OVERSIZE
    assert classifier.decide(req("x" * 10)).verdict.outcome is O.ALLOW


def test_script_overrides_by_review_number_and_time_passes():
    clock = VirtualClock()
    config = ClassifierConfig(dangerous=("evil",), delay_s=1.0, script=(
        ReviewOverride(2, O.TIMEOUT),
        ReviewOverride(3, O.ALLOW, delay_s=0.0),
        ReviewOverride(4, O.SERVICE_ERROR, reason="503"),
        ReviewOverride(5, O.CANCELLED),
    ))
    classifier = ScriptedClassifier(config, clock, timeout_for=lambda session: 30.0)
    start = clock.now()
    reviews = [classifier.decide(req("evil")) for _ in range(6)]
    assert [r.verdict.outcome for r in reviews] == [O.RISK_DENY, O.TIMEOUT, O.ALLOW,
                                                    O.SERVICE_ERROR, O.CANCELLED, O.RISK_DENY]
    assert [r.number for r in reviews] == [1, 2, 3, 4, 5, 6]
    assert [r.delay_s for r in reviews] == [1.0, 30.0, 0.0, 1.0, 1.0, 1.0]
    assert clock.now() - start == 34.0
    assert reviews[3].verdict.reason == "503" and classifier.reviews == 6


def test_review_records_the_exact_request_received():
    log = EventLog()
    classifier = ScriptedClassifier(ClassifierConfig(), VirtualClock())
    request = req('{"command":"ls"}')
    verdict = classifier.review(request, channel(log))
    (event,) = log.events()
    assert event.kind == Kind.CLASSIFIER_REQUEST
    assert event.data["raw"] == c.canonical_json(c.to_json(request))
    assert json.loads(event.data["raw"])["operation"] == '{"command":"ls"}'
    assert event.data["request"] == c.to_json(request)
    assert (event.data["outcome"], event.data["reason"]) == (verdict.outcome.value, verdict.reason)
    assert event.data["review"] == 1 and event.data["delay_s"] == 0.0
