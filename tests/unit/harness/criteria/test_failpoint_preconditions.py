"""Failpoint preconditions: hand-built traces of one operation whose failpoints sit where the
lifecycle puts them (no violation), and the same traces with one failpoint a step away, its
context missing, or a tool attempt outside its start/return hits (violations)."""

from __future__ import annotations

from typing import Any

import pytest
from tracebuilder import TraceBuilder, call, op_view

from harness.contract import (
    ApprovalWaitView,
    CheckpointView,
    Failpoint,
    ModelRequestStatus,
    ModelRequestView,
    Outcome,
    Permission,
    Projection,
    WaitStatus,
    execution_id_for,
    result_digest,
)
from harness.criteria import catalogue
from harness.criteria import failpoint_preconditions as fp
from harness.criteria.base import Criterion, Status, Verdict, passed
from harness.trace.record import Trace

S, C, TOOL = "s1", "c1", "write_file"
ARGS = {"path": "/repo/a.txt", "content": "x"}
XID = execution_id_for(S, C)
CTX = {"session_id": S, "tool_call_id": C, "execution_id": XID}
OUTPUT = "wrote 1 byte"
DIGEST = result_digest("ok", OUTPUT)

PREPARED = dict(permission="ask", outcome="not_started", delivery="pending", execution_started=False)
DECIDED = dict(permission="allow", outcome="not_started", delivery="pending", execution_started=False)
STARTED = dict(permission="allow", outcome="not_started", delivery="pending", execution_started=True)
SAVED = dict(permission="allow", outcome="succeeded", delivery="recorded", execution_started=True,
             result_digest=DIGEST)
PROJECTED = {**SAVED, "delivery": "projected"}
CHECKPOINT = CheckpointView(S, 1, 3, 0, 100, XID)


def view(**state: Any):
    return op_view(S, C, TOOL, ARGS, **state)


def hit(b: TraceBuilder, name: str, state: dict[str, Any] | None, *, context=CTX, **fields: Any) -> int:
    """A failpoint hit and the probe read there (``state=None``: the probe holds no op)."""
    index = b.failpoint(name, context=context)
    b.probe(f"failpoint:{name}", *((view(**state),) if state is not None else ()), at=index,
            **fields)
    return index


def projection(status: str = "succeeded") -> Projection:
    outcome = Outcome.SUCCEEDED if status == "succeeded" else Outcome.NOT_STARTED
    return Projection(S, XID, C, Permission.ALLOW, outcome, status, "", ())


def served(b: TraceBuilder) -> None:
    b.turn(S)
    b.model(S, [call(C, TOOL, ARGS)])


def pipeline(b: TraceBuilder, **override: Any) -> None:
    """One allowed write from prepare to projection; ``override[name]`` replaces the state
    probed at that failpoint, ``override['<name>_fields']`` its other observation fields."""

    def at(name: str, state: dict[str, Any], **fields: Any) -> None:
        hit(b, name, override.get(name, state), **{**fields, **override.get(f"{name}_fields", {})})

    served(b)
    at("after_prepare", PREPARED)
    at("after_permission_decision", DECIDED)
    at("after_revalidation", DECIDED)
    at("after_start_recorded", STARTED)
    b.executed(S, C, TOOL, ARGS, output=OUTPUT)
    at("after_tool_returned", STARTED)
    at("after_result_saved", SAVED)
    at("during_diagnostics_write", SAVED)
    at("during_checkpoint_build", SAVED)
    at("after_checkpoint_saved", SAVED, checkpoints=[CHECKPOINT])
    b.publish(projection())
    at("after_projection", PROJECTED, checkpoints=[CHECKPOINT])


def names(trace: Trace) -> list[str]:
    return [v.failpoint for v in fp.violations(trace)]


def test_every_failpoint_has_a_precondition_and_a_core_relying_criterion():
    assert set(fp.PRECONDITIONS) == {f.value for f in Failpoint}
    core = {c.id for c in catalogue.CRITERIA if not c.required_features}
    optional_only = {"during_classifier_review", "after_wait_persisted", "after_prompt"}
    for name, precondition in fp.PRECONDITIONS.items():
        assert precondition.relied_on_by, name
        assert set(precondition.relied_on_by) <= set(catalogue.ids()), name
        if name not in optional_only:
            assert core & set(precondition.relied_on_by), name


def test_a_pipeline_in_lifecycle_order_has_no_violation():
    b = TraceBuilder(S)
    pipeline(b)
    assert fp.violations(b.build()) == ()


@pytest.mark.parametrize("name, state, wanted", [
    # after_prepare moved after the decision was executed / saved
    ("after_prepare", STARTED, "not a fresh record"),
    ("after_prepare", None, "holds no operation"),
    # after_start_recorded before the start commit
    ("after_start_recorded", DECIDED, "start is not recorded"),
    # after_revalidation after the start claim
    ("after_revalidation", STARTED, "execution_started is already recorded"),
    # after_tool_returned after the result save
    ("after_tool_returned", SAVED, "already saved"),
    # after_result_saved before the commit of the result
    ("after_result_saved", STARTED, "result is not saved yet"),
    # after_result_saved with a result other than the ledger's
    ("after_result_saved", {**SAVED, "result_digest": "sha256:other"}, "digest"),
    ("after_result_saved", {**SAVED, "outcome": "failed"}, "saved outcome is failed"),
    # diagnostics / checkpoint build before the result save
    ("during_diagnostics_write", STARTED, "result is not saved yet"),
    ("during_checkpoint_build", STARTED, "result is not saved yet"),
    # after_checkpoint_saved after the projection
    ("after_checkpoint_saved", PROJECTED, "delivery is already projected"),
    # after_projection before the projection committed
    ("after_projection", SAVED, "not projected"),
])
def test_a_failpoint_a_step_away_is_a_violation(name, state, wanted):
    b = TraceBuilder(S)
    pipeline(b, **{name: state})
    found = [v for v in fp.violations(b.build()) if v.failpoint == name]
    assert found, name
    assert any(wanted in v.evidence.note for v in found), [v.evidence.note for v in found]
    hit_index = next(e.index for e in b.events if e.kind == "failpoint" and e.data["name"] == name)
    assert all(v.evidence.trace_indexes[0] == hit_index for v in found)
    assert all(v.relied_on_by == fp.PRECONDITIONS[name].relied_on_by for v in found)


def test_result_saved_after_the_checkpoint_is_a_violation():
    b = TraceBuilder(S)
    pipeline(b, after_result_saved_fields={"checkpoints": [CHECKPOINT]})
    found = fp.violations(b.build())
    assert [v.failpoint for v in found] == ["after_result_saved"]
    assert "already folds it" in found[0].evidence.note
    assert found[0].relied_on_by == ("L4.1", "L4.5")


def test_checkpoint_saved_without_a_folding_checkpoint_is_a_violation():
    b = TraceBuilder(S)
    pipeline(b, after_checkpoint_saved_fields={"checkpoints": []})
    assert names(b.build()) == ["after_checkpoint_saved"]


def test_a_new_checkpoint_since_the_result_counts_as_folding_it():
    b = TraceBuilder(S)
    other = CheckpointView(S, 1, 3, 0, 100, "ex-someone-else")
    pipeline(b, after_checkpoint_saved_fields={"checkpoints": [other]})
    assert names(b.build()) == []


def test_checkpoint_saved_after_the_ui_publication_is_a_violation():
    b = TraceBuilder(S)
    served(b)
    hit(b, "after_prepare", PREPARED)
    hit(b, "after_permission_decision", DECIDED)
    hit(b, "after_revalidation", DECIDED)
    hit(b, "after_start_recorded", STARTED)
    b.executed(S, C, TOOL, ARGS, output=OUTPUT)
    hit(b, "after_tool_returned", STARTED)
    hit(b, "after_result_saved", SAVED)
    published = b.publish(projection())
    index = hit(b, "after_checkpoint_saved", SAVED, checkpoints=[CHECKPOINT])
    found = fp.violations(b.build())
    assert [v.failpoint for v in found] == ["after_checkpoint_saved"]
    assert found[0].evidence.trace_indexes == (index, published)


def test_start_recorded_after_the_tool_ran_is_a_violation():
    b = TraceBuilder(S)
    served(b)
    hit(b, "after_prepare", PREPARED)
    hit(b, "after_permission_decision", DECIDED)
    hit(b, "after_revalidation", DECIDED)
    row = b.executed(S, C, TOOL, ARGS, output=OUTPUT)
    hit(b, "after_start_recorded", STARTED)
    hit(b, "after_tool_returned", STARTED)
    found = fp.violations(b.build())
    # the start hit saw the tool already called, the attempt had no start hit before it and
    # its tool-returned hit is not the next one; the tool-returned hit saw no call since start
    assert {v.failpoint for v in found} == {"after_start_recorded", "after_tool_returned"}
    starts = [v for v in found if v.failpoint == "after_start_recorded"]
    assert len(starts) == 2
    assert all(row in v.evidence.trace_indexes and v.evidence.ledger_rows == (b.seq(row),)
               for v in starts)


def test_a_tool_attempt_without_its_tool_returned_hit_is_a_violation():
    b = TraceBuilder(S)
    served(b)
    hit(b, "after_prepare", PREPARED)
    hit(b, "after_permission_decision", DECIDED)
    hit(b, "after_revalidation", DECIDED)
    hit(b, "after_start_recorded", STARTED)
    b.executed(S, C, TOOL, ARGS, output=OUTPUT)
    hit(b, "after_result_saved", SAVED)
    found = [v for v in fp.violations(b.build()) if v.failpoint == "after_tool_returned"]
    assert found and "instead of its own after_tool_returned" in found[0].evidence.note


def test_retries_and_a_refused_start_share_one_run():
    b = TraceBuilder(S)
    served(b)
    hit(b, "after_prepare", PREPARED)
    hit(b, "after_permission_decision", DECIDED)
    hit(b, "after_revalidation", DECIDED)
    hit(b, "after_start_recorded", STARTED)
    b.unavailable(S, C, TOOL, ARGS)
    b.executed(S, C, TOOL, ARGS, output=OUTPUT)
    hit(b, "after_tool_returned", STARTED)
    hit(b, "after_result_saved", SAVED)
    assert names(b.build()) == []


def test_a_tool_that_could_not_start_saves_not_started():
    b = TraceBuilder(S)
    served(b)
    hit(b, "after_prepare", PREPARED)
    hit(b, "after_permission_decision", DECIDED)
    hit(b, "after_revalidation", DECIDED)
    hit(b, "after_start_recorded", STARTED)
    b.unavailable(S, C, TOOL, ARGS)
    hit(b, "after_tool_returned", STARTED)
    hit(b, "after_result_saved", {**SAVED, "outcome": "not_started", "result_digest": None,
                                  "failure_kind": "transient"})
    assert names(b.build()) == []
    b2 = TraceBuilder(S)
    served(b2)
    hit(b2, "after_start_recorded", STARTED)
    b2.unavailable(S, C, TOOL, ARGS)
    hit(b2, "after_tool_returned", STARTED)
    hit(b2, "after_result_saved", SAVED)
    assert names(b2.build()) == ["after_result_saved"]


UNKNOWN = dict(permission="allow", outcome="unknown", delivery="recorded", execution_started=True,
               result_digest=None, reconciliation_required=True, failure_kind="unknown")


@pytest.mark.parametrize("crash_at, tool_ran", [("after_start_recorded", False),
                                                ("after_tool_returned", True)])
def test_a_recovery_may_pass_the_checkpoint_failpoints_for_a_cut_off_call(crash_at, tool_ran):
    """Issue 31, case 1: a recover() that folds a call a crash cut off (saved unknown, as
    the docs require) and passes during_checkpoint_build / after_checkpoint_saved while
    doing so sits where those failpoints belong: the result is the unknown it saved, not the
    ledger's last row, which the host never learnt."""
    b = TraceBuilder(S)
    served(b)
    hit(b, "after_prepare", PREPARED)
    hit(b, "after_permission_decision", DECIDED)
    hit(b, "after_revalidation", DECIDED)
    hit(b, "after_start_recorded", STARTED)
    if tool_ran:
        b.executed(S, C, TOOL, ARGS, output=OUTPUT)
        hit(b, "after_tool_returned", STARTED)
    b.crash(crash_at, context=CTX, with_failpoint=False)
    b.restart()
    b.driver("recover")
    hit(b, "during_checkpoint_build", UNKNOWN)
    hit(b, "after_checkpoint_saved", UNKNOWN, checkpoints=[CHECKPOINT])
    assert names(b.build()) == []


def test_one_recovery_checkpoint_may_fold_two_cut_off_calls():
    """A recover() that folds two calls a crash cut off into one checkpoint (its
    last_execution_id names the other) and passes after_checkpoint_saved for each: this one
    is folded by a checkpoint first seen since its previous hit."""
    b = TraceBuilder(S)
    served(b)
    hit(b, "after_start_recorded", STARTED)
    b.executed(S, C, TOOL, ARGS, output=OUTPUT)
    b.crash("after_tool_returned", context=CTX, with_failpoint=False)
    b.restart()
    b.driver("recover")
    hit(b, "during_checkpoint_build", UNKNOWN)
    other = CheckpointView(S, 1, 3, 0, 100, execution_id_for(S, "c2"))
    hit(b, "after_checkpoint_saved", UNKNOWN, checkpoints=[other])
    assert names(b.build()) == []
    # with that checkpoint already there before (nothing new folded it): a violation
    b2 = TraceBuilder(S)
    served(b2)
    hit(b2, "after_start_recorded", STARTED)
    b2.executed(S, C, TOOL, ARGS, output=OUTPUT)
    b2.crash("after_tool_returned", context=CTX, with_failpoint=False)
    b2.restart()
    hit(b2, "during_checkpoint_build", UNKNOWN, checkpoints=[other])
    hit(b2, "after_checkpoint_saved", UNKNOWN, checkpoints=[other])
    assert names(b2.build()) == ["after_checkpoint_saved"]


def test_an_unknown_result_without_a_crash_cutting_the_run_is_still_a_violation():
    b = TraceBuilder(S)
    served(b)
    hit(b, "after_start_recorded", STARTED)
    b.executed(S, C, TOOL, ARGS, output=OUTPUT)
    hit(b, "after_tool_returned", STARTED)
    hit(b, "after_result_saved", UNKNOWN)  # the tool answered ok: the result is known
    problems = [v.evidence.note for v in fp.violations(b.build())]
    assert len(problems) == 2 and all(p.startswith("failpoint placement: after_result_saved")
                                      for p in problems)
    # the messages name what they compared: the ledger row, its status, both digests
    assert "the saved outcome is unknown; the ledger's last row (ledger row 1) says ok " \
           "(expected succeeded)" in problems[0]
    assert f"the saved result digest None is not {DIGEST}, the digest of the ledger's last " \
           "row (ledger row 1: ok)" in problems[1]
    # a crash after the result was saved does not excuse it either
    b2 = TraceBuilder(S)
    served(b2)
    hit(b2, "after_start_recorded", STARTED)
    b2.executed(S, C, TOOL, ARGS, output=OUTPUT)
    hit(b2, "after_tool_returned", STARTED)
    hit(b2, "after_result_saved", SAVED)
    b2.crash("after_result_saved", context=CTX, with_failpoint=False)
    b2.restart()
    hit(b2, "during_checkpoint_build", UNKNOWN)
    assert names(b2.build()) == ["during_checkpoint_build", "during_checkpoint_build"]


def test_an_escalation_runs_the_same_operation_twice_without_violation():
    b = TraceBuilder(S)
    served(b)
    failed = {**SAVED, "outcome": "failed", "result_digest": result_digest("error", "sandboxed"),
              "failure_kind": "permission_denied"}
    hit(b, "after_prepare", PREPARED)
    hit(b, "after_permission_decision", DECIDED)
    hit(b, "after_revalidation", DECIDED)
    hit(b, "after_start_recorded", STARTED)
    b.executed(S, C, TOOL, ARGS, status="error", output="sandboxed", escalation_requested=True)
    hit(b, "after_tool_returned", STARTED)
    wait = ApprovalWaitView("w1", S, XID, C, "escalate", WaitStatus.PENDING, False)
    hit(b, "after_wait_persisted", failed, approval_waits=[wait])
    b.prompt(S, C, TOOL, ARGS, wait_id="w1")
    hit(b, "after_prompt", failed, approval_waits=[wait])
    b.answer("w1", True)
    hit(b, "after_revalidation", failed)
    hit(b, "after_start_recorded", failed)
    b.executed(S, C, TOOL, ARGS, output=OUTPUT, sandboxed=False)
    hit(b, "after_tool_returned", failed)
    hit(b, "after_result_saved", SAVED)
    assert names(b.build()) == []
    # the second run's start hit after its tool call is caught although the op started before
    b2 = TraceBuilder(S)
    served(b2)
    hit(b2, "after_start_recorded", STARTED)
    b2.executed(S, C, TOOL, ARGS, status="error", output="sandboxed", escalation_requested=True)
    hit(b2, "after_tool_returned", STARTED)
    b2.executed(S, C, TOOL, ARGS, output=OUTPUT, sandboxed=False)
    hit(b2, "after_start_recorded", failed)
    assert "after_start_recorded" in names(b2.build())


def _refused_escalation(b: TraceBuilder, delivered: dict[str, Any]) -> None:
    """A sandboxed attempt that asks to escalate, an approved escalated run refused right
    after its start record (nothing runs), and its delivery probed as ``delivered``."""
    served(b)
    failed = {**SAVED, "outcome": "failed", "result_digest": result_digest("error", "sandboxed"),
              "failure_kind": "permission_denied"}
    hit(b, "after_start_recorded", STARTED)
    b.executed(S, C, TOOL, ARGS, status="error", output="sandboxed", escalation_requested=True)
    hit(b, "after_tool_returned", STARTED)
    b.answer("w1", True)
    hit(b, "after_revalidation", failed)
    hit(b, "after_start_recorded", failed)  # the rules change here: the run is refused
    hit(b, "during_diagnostics_write", delivered)
    hit(b, "during_checkpoint_build", delivered)
    hit(b, "after_checkpoint_saved", delivered, checkpoints=[CHECKPOINT])


def test_a_refused_escalated_runs_standing_result_may_be_delivered_through_the_failpoints():
    """Issue 31, case 5: the escalated run never called the tool, so "the result" at the
    delivery's failpoints is the sandboxed attempt's saved record, which stands (contract.md,
    escalation row), not a ``not_started``; a record that is not that attempt's is still
    judged against the attempt's ledger row."""
    standing = {**SAVED, "outcome": "failed", "result_digest": result_digest("error", "sandboxed"),
                "failure_kind": "permission_denied"}
    b = TraceBuilder(S)
    _refused_escalation(b, standing)
    assert names(b.build()) == []
    # the record delivered is not the standing one: succeeded, or another digest
    # (one problem per hit for a wrong outcome or digest, two when both are wrong)
    for wrong, count in (({**standing, "outcome": "succeeded"}, 3),
                         ({**standing, "result_digest": DIGEST}, 3),
                         ({**standing, "outcome": "not_started", "result_digest": None}, 6)):
        b2 = TraceBuilder(S)
        _refused_escalation(b2, wrong)
        problems = [v.evidence.note for v in fp.violations(b2.build())]
        assert len(problems) == count, problems
        assert all("(ledger row 1 (the earlier run's result, which stands)" in note
                   for note in problems), problems
    # an operation that never ran before: a saved failure without a tool call stays a violation
    b3 = TraceBuilder(S)
    served(b3)
    hit(b3, "after_start_recorded", STARTED)
    hit(b3, "during_checkpoint_build", standing)
    problems = [v.evidence.note for v in fp.violations(b3.build())]
    assert len(problems) == 1 and ("during_checkpoint_build hit 1 (c1, instance 1): the saved "
                                   "outcome is failed although the tool was not called in this "
                                   "run") in problems[0], problems


def test_wait_persisted_before_the_wait_commits_or_after_its_prompt():
    wait = ApprovalWaitView("w1", S, XID, C, "ask", WaitStatus.PENDING, False)
    asked = dict(permission="ask", outcome="not_started", delivery="pending", execution_started=False)

    def build(commit_first: bool, prompt_first: bool) -> Trace:
        b = TraceBuilder(S)
        served(b)
        hit(b, "after_prepare", PREPARED)
        hit(b, "after_permission_decision", asked)
        if prompt_first:
            b.prompt(S, C, TOOL, ARGS, wait_id="w1")
        hit(b, "after_wait_persisted", asked, approval_waits=[wait] if commit_first else [])
        if not prompt_first:
            b.prompt(S, C, TOOL, ARGS, wait_id="w1")
        hit(b, "after_prompt", asked, approval_waits=[wait])
        return b.build()

    assert names(build(True, False)) == []
    assert names(build(False, False)) == ["after_wait_persisted"]
    assert "after_wait_persisted" in names(build(True, True))


def test_after_prompt_needs_the_prompt_and_its_durable_wait():
    wait = ApprovalWaitView("w1", S, XID, C, "ask", WaitStatus.PENDING, False)
    asked = dict(permission="ask", outcome="not_started", delivery="pending", execution_started=False)
    b = TraceBuilder(S)
    served(b)
    hit(b, "after_wait_persisted", asked, approval_waits=[wait])
    hit(b, "after_prompt", asked, approval_waits=[wait])  # before the prompt was shown
    assert names(b.build()) == ["after_prompt"]
    b2 = TraceBuilder(S)
    served(b2)
    hit(b2, "after_wait_persisted", asked, approval_waits=[wait])
    b2.prompt(S, C, TOOL, ARGS, wait_id="w1")
    answered = ApprovalWaitView("w1", S, XID, C, "ask", WaitStatus.APPROVED, False)
    hit(b2, "after_prompt", asked, approval_waits=[answered])  # answered, but nobody did
    assert names(b2.build()) == ["after_prompt"]


def test_classifier_review_failpoint_needs_the_review_and_precedes_the_verdict():
    def build(review_first: bool, state: dict[str, Any]) -> Trace:
        b = TraceBuilder(S)
        served(b)
        hit(b, "after_prepare", PREPARED)
        if review_first:
            b.classifier(S, TOOL, ARGS)
        hit(b, "during_classifier_review", state)
        if not review_first:
            b.classifier(S, TOOL, ARGS)
        hit(b, "after_permission_decision", {**DECIDED, "classifier_outcome": "allow"})
        return b.build()

    assert names(build(True, PREPARED)) == []
    assert names(build(False, PREPARED)) == ["during_classifier_review"]
    assert names(build(True, {**PREPARED, "classifier_outcome": "allow"})) == [
        "during_classifier_review"]


def test_prepare_after_the_review_and_decision_without_classifier_outcome():
    b = TraceBuilder(S)
    served(b)
    b.classifier(S, TOOL, ARGS)
    hit(b, "after_prepare", PREPARED)
    assert names(b.build()) == ["after_prepare"]
    b2 = TraceBuilder(S)
    served(b2)
    hit(b2, "after_prepare", PREPARED)
    b2.classifier(S, TOOL, ARGS)
    hit(b2, "after_permission_decision", DECIDED)  # reviewed, yet no classifier outcome saved
    assert names(b2.build()) == ["after_permission_decision"]


def test_a_review_belongs_to_the_call_being_decided_not_to_another_with_the_same_bytes():
    """Two calls with the same arguments in one response (found by generation): the review of
    the first, inside its own decision, is no review of the second before its prepare; a
    review of the second made before its prepare still is."""
    c2 = "c2"
    ctx2 = {"session_id": S, "tool_call_id": c2, "execution_id": execution_id_for(S, c2)}
    view2 = op_view(S, c2, TOOL, ARGS, **PREPARED)

    def build(review_second_early: bool) -> Trace:
        b = TraceBuilder(S)
        b.turn(S)
        b.model(S, [call(C, TOOL, ARGS), call(c2, TOOL, ARGS)])
        hit(b, "after_prepare", PREPARED)
        b.classifier(S, TOOL, ARGS)  # the first call's review
        hit(b, "after_permission_decision", {**DECIDED, "classifier_outcome": "allow"})
        if review_second_early:
            b.classifier(S, TOOL, ARGS)  # the second call reviewed before it was prepared
        index = b.failpoint("after_prepare", context=ctx2)
        b.probe("failpoint:after_prepare", view(**{**DECIDED, "classifier_outcome": "allow"}),
                view2, at=index)
        return b.build()

    assert names(build(False)) == []
    assert names(build(True)) == ["after_prepare"]


def test_missing_or_inconsistent_context_is_a_violation():
    for context, wanted in (({"session_id": S}, "lacks tool_call_id, execution_id"),
                            ({**CTX, "execution_id": "ex-other"}, "whose execution id is")):
        b = TraceBuilder(S)
        served(b)
        hit(b, "after_result_saved", SAVED, context=context)
        found = fp.violations(b.build())
        assert [v.failpoint for v in found] == ["after_result_saved"]
        assert wanted in found[0].evidence.note
    b = TraceBuilder(S)
    b.failpoint("after_model_request_started", context={"session_id": S})
    assert names(b.build()) == ["after_model_request_started"]


def _request(status: ModelRequestStatus | None = None, request_id: str = "r1") -> ModelRequestView:
    return ModelRequestView(request_id, S, 1, int(status is not None), status, "", False)


def test_model_request_failpoints_in_order_and_a_step_away():
    def build(**moved: bool) -> Trace:
        b = TraceBuilder(S)
        rid = {"session_id": S, "request_id": "r1"}
        index = b.failpoint("before_model_request", context={"session_id": S})
        b.probe("failpoint:before_model_request", at=index,
                model_requests=[_request()] if moved.get("before") else [])
        if moved.get("started"):
            b.model_request(S, request_id="r1")
        index = b.failpoint("after_model_request_started", context=rid)
        b.probe("failpoint:after_model_request_started", at=index, model_requests=[_request()])
        if not moved.get("started"):
            b.model_request(S, request_id="r1")
        b.stream_end("r1")
        index = b.failpoint("after_model_stream_ended", context=rid)
        b.probe("failpoint:after_model_stream_ended", at=index, model_requests=[
            _request(ModelRequestStatus.COMPLETED if moved.get("ended") else None)])
        return b.build()

    assert names(build()) == []
    assert names(build(before=True)) == ["before_model_request"]
    assert names(build(started=True)) == ["after_model_request_started"]
    assert names(build(ended=True)) == ["after_model_stream_ended"]


def test_before_model_request_with_this_instances_request_still_open():
    b = TraceBuilder(S)
    b.model_request(S, request_id="r1")
    index = b.failpoint("before_model_request", context={"session_id": S})
    b.probe("failpoint:before_model_request", at=index, model_requests=[_request()])
    assert names(b.build()) == ["before_model_request"]


def test_a_hit_without_probe_is_judged_from_the_world_alone():
    b = TraceBuilder(S)
    served(b)
    b.failpoint("after_start_recorded", context=CTX)
    b.executed(S, C, TOOL, ARGS, output=OUTPUT)
    b.failpoint("after_tool_returned", context=CTX)
    b.failpoint("after_result_saved", context=CTX)
    assert names(b.build()) == []
    b2 = TraceBuilder(S)
    served(b2)
    b2.executed(S, C, TOOL, ARGS, output=OUTPUT)
    b2.failpoint("after_start_recorded", context=CTX)
    assert "after_start_recorded" in names(b2.build())


# --------------------------------------------------------------------------- composition


def _criterion(criterion_id: str, verdict: Verdict | None = None) -> Criterion:
    def check(trace: Trace) -> Verdict:
        return verdict if verdict is not None else passed(criterion_id, 1)
    return Criterion(criterion_id, "l4", "t", "s", "c", check)


def _misplaced_result_saved() -> Trace:
    b = TraceBuilder(S)
    pipeline(b, after_result_saved=STARTED)
    return b.build()


def test_guard_fails_the_relying_criterion_and_counts_it_exercised():
    trace = _misplaced_result_saved()
    for criterion_id in ("L4.1", "L4.5"):
        verdict = fp.guard(_criterion(criterion_id)).check(trace)
        assert verdict.status is Status.FAIL and verdict.exercised >= 1
        assert all(e.note.startswith("failpoint placement: after_result_saved") for e in verdict.evidence)
    idle = Verdict("L4.1", Status.NOT_EXERCISED)
    assert fp.guard(_criterion("L4.1", idle)).check(trace).status is Status.FAIL


def test_guard_leaves_other_criteria_and_clean_traces_alone():
    trace = _misplaced_result_saved()
    untouched = _criterion("L1.3")
    assert fp.guard(untouched) is untouched
    assert fp.guard(_criterion("L4.2")).check(trace).status is Status.PASS
    b = TraceBuilder(S)
    pipeline(b)
    assert fp.guard(_criterion("L4.1")).check(b.build()).status is Status.PASS
    error = Verdict("L4.1", Status.ERROR)
    assert fp.guard(_criterion("L4.1", error)).check(trace) is error


def test_the_catalogue_judges_placement_under_the_relying_criteria():
    trace = _misplaced_result_saved()
    verdict = catalogue.by_id("L4.1").check(trace)
    assert verdict.status is Status.FAIL
    assert any(e.note.startswith("failpoint placement: after_result_saved") for e in verdict.evidence)


def test_the_docs_table_names_every_failpoint_and_its_relying_criteria():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[4] / "docs" / "lifecycle.md").read_text()
    section = text.split("## Failpoint preconditions", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = tuple(c.strip() for c in cells[3].split(","))
    assert rows == {name: p.relied_on_by for name, p in fp.PRECONDITIONS.items()}


def test_request_records_are_required_only_with_model_events():
    from harness.contract import Feature

    def build(features) -> Trace:
        b = TraceBuilder(S, features=features)
        index = b.failpoint("after_model_request_started", context={"session_id": S, "request_id": "r1"})
        b.probe("failpoint:after_model_request_started", at=index)  # no request record at all
        return b.build()

    assert names(build(tuple(Feature))) == ["after_model_request_started"]
    assert names(build(tuple(f for f in Feature if f is not Feature.MODEL_EVENTS))) == []


def test_a_concurrent_instance_may_do_the_later_steps_while_this_one_is_held():
    def build(other_instance: bool) -> Trace:
        b = TraceBuilder(S)
        served(b)
        hit(b, "after_start_recorded", STARTED)
        b.executed(S, C, TOOL, ARGS, output=OUTPUT)
        hit(b, "after_tool_returned", STARTED)
        hit(b, "after_result_saved", SAVED)  # held here; the other instance catches up
        held = b.instance
        if other_instance:
            b.instance = held + 1
        b.publish(projection())
        b.instance = held
        hit(b, "during_diagnostics_write", PROJECTED, checkpoints=[CHECKPOINT])
        hit(b, "during_checkpoint_build", PROJECTED, checkpoints=[CHECKPOINT])
        hit(b, "after_checkpoint_saved", {**PROJECTED, "delivery": "pending"})  # still judged
        return b.build()

    assert set(names(build(other_instance=True))) == {"after_checkpoint_saved"}
    assert set(names(build(other_instance=False))) == {
        "during_diagnostics_write", "during_checkpoint_build", "after_checkpoint_saved"}


def test_before_model_request_judges_this_instances_requests_up_to_its_next_hit():
    def before_hits(b: TraceBuilder) -> list[str]:
        return [n for n in names(b.build()) if n == "before_model_request"]

    # another instance's open request is not this instance's
    b = TraceBuilder(S)
    b.instance = 2
    b.model_request(S, request_id="r1")
    b.instance = 1
    index = b.failpoint("before_model_request", context={"session_id": S})
    b.probe("failpoint:before_model_request", at=index, model_requests=[_request()])
    assert before_hits(b) == []
    # a request this instance started (its after_model_request_started hit) counts as its own
    b = TraceBuilder(S)
    b.failpoint("after_model_request_started", context={"session_id": S, "request_id": "r1"})
    index = b.failpoint("before_model_request", context={"session_id": S})
    b.probe("failpoint:before_model_request", at=index, model_requests=[_request()])
    assert before_hits(b) == ["before_model_request"]
    # a request recorded after the next hit of the same failpoint is that hit's, not this one's
    for next_hit in (True, False):
        b = TraceBuilder(S)
        first = b.failpoint("before_model_request", context={"session_id": S})
        b.probe("failpoint:before_model_request", at=first,
                model_requests=[_request(ModelRequestStatus.COMPLETED)])
        if next_hit:
            b.failpoint("before_model_request", context={"session_id": S})
        b.model_request(S, request_id="r1")
        assert before_hits(b) == ([] if next_hit else ["before_model_request"])
