"""Optional features judged by behaviour: what in a trace shows each one, and what does not.

Each rule has its must-pass case and the neighbours that must not count: the
implementation's own word (its declaration, its lifecycle events, its store) never shows a
feature; only what the world and the harness recorded does."""

from __future__ import annotations

from tracebuilder import TraceBuilder, call, op_view, session

from harness.contract import (
    Delivery,
    Feature,
    Outcome,
    Permission,
    Projection,
    RecoveryAction,
)
from harness.criteria import feature_evidence as fe
from harness.criteria.base import Criterion, Status, judge, run_check

NPM = {"command": "npm install", "description": "install deps"}
PROJECTION = Projection("s1", "ex-1", "c1", Permission.ALLOW, Outcome.FAILED, "failed",
                        "the tool failed", (RecoveryAction.EDIT_ARGS,))


def _builder(features=()):
    return TraceBuilder(session("s1", rules=[("allow", "Bash")]), tools=[("Bash", "bash")],
                        features=features)


def _asked(b, call_id="c1", session_id="s1"):
    """A sandboxed run of ``call_id`` that asked for escalation; returns its index."""
    b.model(session_id, [call(call_id, "Bash", NPM)])
    return b.executed(session_id, call_id, "Bash", NPM, status="error",
                      error_kind="permission_denied", effect="partial",
                      escalation_requested=True)


def _shown(trace):
    return {s.feature: s for s in fe.shown(trace)}


# --------------------------------------------------------------------------- web_projection


def test_a_publication_the_ui_received_shows_web_projection():
    b = _builder()
    first = b.publish(PROJECTION)
    b.publish(PROJECTION)
    shown = _shown(b.build())
    assert set(shown) == {Feature.WEB_PROJECTION}
    assert shown[Feature.WEB_PROJECTION].trace_indexes == (first, first + 1)
    assert "2 publication(s)" in shown[Feature.WEB_PROJECTION].note


def test_the_implementations_word_about_projections_shows_nothing():
    b = _builder()
    b.lifecycle("projected", "s1", "ex-1")  # its own event channel
    b.observe(op_view("s1", "c1", "Bash", NPM, delivery=Delivery.PROJECTED),
              projections=[PROJECTION])  # its own store
    assert fe.shown(b.build()) == ()


# --------------------------------------------------------------------------- sandbox_escalation


def test_an_escalation_request_followed_by_a_prompt_for_that_call_shows_sandbox_escalation():
    b = _builder()
    asked = _asked(b)
    b.prompt("s1", "c1", "Bash", NPM, reason="escalation: run without the sandbox")
    shown = _shown(b.build())
    assert set(shown) == {Feature.SANDBOX_ESCALATION}
    assert shown[Feature.SANDBOX_ESCALATION].trace_indexes == (asked, b.last)
    assert "prompted the owner" in shown[Feature.SANDBOX_ESCALATION].note


def test_an_escalation_request_followed_by_a_run_outside_the_sandbox_shows_it():
    b = _builder()
    asked = _asked(b)
    b.executed("s1", "c1", "Bash", NPM, sandboxed=False)
    assert _shown(b.build())[Feature.SANDBOX_ESCALATION].trace_indexes == (asked, b.last)
    # an unsandboxed start the world refused is an attempt all the same
    b = _builder()
    _asked(b)
    b.unavailable("s1", "c1", "Bash", NPM, sandboxed=False)
    assert Feature.SANDBOX_ESCALATION in _shown(b.build())


def test_an_escalation_request_taken_as_a_failure_shows_nothing():
    # what the contract asks of an implementation without the feature
    b = _builder()
    _asked(b)
    b.observe(op_view("s1", "c1", "Bash", NPM, outcome="failed",
                      failure_kind="permission_denied", execution_started=True))
    b.model("s1")
    assert fe.shown(b.build()) == ()


def test_escalation_neighbours_that_act_on_something_else_show_nothing():
    # a prompt for another call
    b = _builder()
    _asked(b)
    b.model("s1", [call("c2", "Bash", NPM)])
    b.prompt("s1", "c2", "Bash", NPM)
    assert fe.shown(b.build()) == ()
    # the same call id in another session
    b = TraceBuilder(session("s1", rules=[("allow", "Bash")]), session("s2"),
                     tools=[("Bash", "bash")], features=())
    _asked(b)
    b.executed("s2", "c1", "Bash", NPM, sandboxed=False)
    assert fe.shown(b.build()) == ()
    # a permission prompt before the run that asked, and a later sandboxed re-run
    b = _builder()
    b.prompt("s1", "c1", "Bash", NPM)
    _asked(b)
    b.executed("s1", "c1", "Bash", NPM, sandboxed=True)
    assert fe.shown(b.build()) == ()
    # an unsandboxed run nobody asked to escalate
    b = _builder()
    b.model("s1", [call("c1", "Bash", NPM)])
    b.executed("s1", "c1", "Bash", NPM, sandboxed=False)
    b.prompt("s1", "c1", "Bash", NPM)
    assert fe.shown(b.build()) == ()


# --------------------------------------------------------------------------- checkpoint_import


def _load(b, outcome="return", skipped=""):
    data = {"method": "load_checkpoint", "args": {"session_id": "s1", "fixture": "v1"}}
    if skipped:
        data["skipped"] = skipped
    call_index = b.add("driver_call", data)
    if outcome == "return":
        b.add("driver_return", {"method": "load_checkpoint", "result": None,
                                **({"skipped": skipped} if skipped else {})})
    elif outcome == "contract_error":
        b.add("driver_return", {"method": "load_checkpoint", "result": 3,
                                "contract_error": "load_checkpoint returned int"})
    else:
        b.raised("load_checkpoint", "ValueError", "unknown format")
    return call_index


def test_a_checkpoint_fixture_accepted_shows_checkpoint_import():
    b = _builder()
    at = _load(b)
    shown = _shown(b.build())
    assert set(shown) == {Feature.CHECKPOINT_IMPORT}
    assert shown[Feature.CHECKPOINT_IMPORT].trace_indexes == (at, at + 1)
    assert "'v1'" in shown[Feature.CHECKPOINT_IMPORT].note


def test_a_skipped_refused_or_off_contract_load_shows_nothing():
    for outcome, skipped in (("return", "the implementation declares no checkpoint fixture"),
                             ("raise", ""), ("contract_error", "")):
        b = _builder()
        _load(b, outcome, skipped)
        assert fe.shown(b.build()) == (), outcome
    # a refused load, then an accepted one: shown by the second
    b = _builder()
    _load(b, "raise")
    second = _load(b)
    assert _shown(b.build())[Feature.CHECKPOINT_IMPORT].trace_indexes == (second, second + 1)


# --------------------------------------------------------------------------- multi_instance


def _concurrent(b, b_opens=True):
    args = {"session_id": "s1", "user_text": "go", "hold_at": "after_prepare"}
    b.add("driver_call", {"method": "concurrent_turn", "args": {**args, "role": "A"}},
          instance=0)
    b.failpoint("after_prepare", "hold", {"session_id": "s1"})
    b.add("driver_call", {"method": "open", "args": {}, "concurrent_with": 0}, instance=1)
    if not b_opens:
        b.add("driver_raised", {"method": "open", "exception": "RuntimeError",
                                "message": "another live instance holds <data_dir>",
                                "expected": False, "refused": True}, instance=1)
        return None
    b.add("driver_return", {"method": "open", "result": None}, instance=1)
    return b.add("driver_call", {"method": "concurrent_turn",
                                 "args": {**args, "role": "B", "held": True}}, instance=1)


def test_a_second_instance_taking_the_concurrent_turn_shows_multi_instance():
    b = _builder()
    at = _concurrent(b)
    shown = _shown(b.build())
    assert set(shown) == {Feature.MULTI_INSTANCE}
    assert shown[Feature.MULTI_INSTANCE].trace_indexes == (at,)


def test_a_refused_second_instance_shows_nothing():
    b = _builder()
    _concurrent(b, b_opens=False)
    assert fe.shown(b.build()) == ()


# --------------------------------------------------------------------------- in force


def test_declared_adds_a_feature_and_shown_adds_one_the_declaration_left_out():
    b = _builder(features=(Feature.MULTI_INSTANCE,))
    b.publish(PROJECTION)
    trace = b.build()
    assert fe.in_force(trace) == {Feature.MULTI_INSTANCE, Feature.WEB_PROJECTION}
    needed = (Feature.MULTI_INSTANCE, Feature.SANDBOX_ESCALATION, Feature.WEB_PROJECTION)
    assert fe.absent(trace, needed) == (Feature.SANDBOX_ESCALATION,)
    assert fe.absent(trace, ["web_projection"]) == ()


def test_shown_by_names_every_optional_feature_in_words():
    assert set(fe.SHOWN_BY) == {Feature.CHECKPOINT_IMPORT, Feature.MULTI_INSTANCE,
                                Feature.SANDBOX_ESCALATION, Feature.WEB_PROJECTION}
    assert all(text for text in fe.SHOWN_BY.values())


def _gated(feature):
    def check(trace):
        return judge("G", 1, [])

    return Criterion("G", "l5", "gated", "gated", "", check, (feature,))


def test_run_check_judges_a_gated_criterion_when_the_feature_is_shown_or_declared():
    gated = _gated(Feature.WEB_PROJECTION)
    quiet = _builder().build()
    verdict = run_check(gated, quiet)
    assert verdict.status is Status.NOT_APPLICABLE
    assert ("neither declares web_projection nor showed it in this scenario (shown when it "
            "publishes a projection to the world's UI)") in verdict.evidence[0].note
    shows = _builder()
    shows.publish(PROJECTION)
    assert run_check(gated, shows.build()).status is Status.PASS
    declared = _builder(features=(Feature.WEB_PROJECTION,)).build()
    assert run_check(gated, declared).status is Status.PASS
