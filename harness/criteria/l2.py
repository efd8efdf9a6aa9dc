"""Stage L2 — agent/permissions: the pre-call check and the classifier gate.

Pure checks over a trace. The permission precedence is recomputed here from the session
configuration and the rules in force (config, ``update_rules`` driver calls,
``change_rules`` faults) and compared with what executed (ledger), what the classifier was
asked (the exact text the world received) and what the store recorded.
"""

from __future__ import annotations

import re

from harness.contract import (
    DecisionSource,
    EventType,
    Feature,
    Permission,
    canonical_json,
    execution_id_for,
)
from harness.criteria import facts as F
from harness.criteria.base import Criterion, Evidence, Verdict, judge
from harness.trace.record import Kind, Trace, TraceEvent

STAGE = "l2"


def _ev(note: str, indexes=(), rows=()) -> Evidence:
    return Evidence(note, tuple(dict.fromkeys(i for i in indexes if i is not None)), tuple(rows))


def _seq(row: TraceEvent) -> int:
    return int(row.data.get("ledger_seq", -1))


LAYER_ORDER = (
    DecisionSource.HARD_CONSTRAINT.value,
    DecisionSource.CAPABILITY.value,
    DecisionSource.PLAN_MODE.value,
    DecisionSource.EXPLICIT_DENY.value,
    DecisionSource.ASK_RULE.value,
    DecisionSource.EXACT_GRANT.value,
    DecisionSource.CLASSIFIER.value,
)
"""The precedence, highest first (docs/lifecycle.md)."""

_STATIC_DENY = tuple(s.value for s in F.STATIC_DENY_SOURCES)


def _settled(view) -> bool:
    return F.value(view.delivery) != "pending" or F.value(view.permission) == Permission.DENY.value


def _first_attempt(op: F.Op) -> TraceEvent | None:
    attempts = F.attempt_rows(op)
    return attempts[0] if attempts else None


def _review_fields(review: F.Review) -> dict:
    raw = F.parse_json_text(review.raw)
    return raw if isinstance(raw, dict) else review.request


# --------------------------------------------------------------------------- L2.1


def check_l2_1(trace: Trace) -> Verdict:
    """Recompute the first matching layer (hard constraint > capability > plan mode >
    explicit deny > ask > exact grant > classifier) for every operation: nothing executes
    that a higher layer blocks, an ask needs the operation's own approval, the classifier's
    allow never lifts a layer above it, an exact grant is never sent to the classifier, and
    the stored deciding layer is the one the precedence names (no skipped, no invented layer).

    Exercised: per operation that executed (its authorization recomputed), that an exact
    grant covers, or whose settled record can be compared with the recomputed layer.
    """
    violations: list[Evidence] = []
    exercised = 0
    ops = F.operations(trace)
    revs = F.reviews(trace, ops)
    for op in ops.values():
        judged = False
        first = _first_attempt(op)
        if first is not None:
            judged = True
            auth = F.authorization(trace, op, first.index, revs)
            if not auth.ok:
                violations.append(_ev(
                    f"{F.describe(op)} executed although {auth.how}", (first.index,), (_seq(first),)))
        view = op.latest
        decision = None
        if view is not None:
            decision = F.decision_for_version(trace, op, view.identity.permission_version)
        elif op.served:
            decision = F.decision_at(trace, op, op.served[0].end_index)
        if decision is not None and decision.source is DecisionSource.EXACT_GRANT:
            judged = True
            granted_under = view.identity.permission_version if view is not None else None
            for review in F.reviews_of(revs, op.key):
                if granted_under is not None and F.rules_at(
                        trace, op.session_id, review.event.index).permission_version != granted_under:
                    # a review under an earlier version, before a rule change granted the call
                    # and the revalidation bound it to the new version (docs/contract.md; found
                    # by generation: rules granting every tool installed after the review)
                    continue
                violations.append(_ev(
                    f"{F.describe(op)} is granted by an exact rule yet was sent to the classifier",
                    (review.event.index,)))
        if view is not None and decision is not None and _settled(view):
            judged = True
            stored = F.value(view.decided_by)
            computed = decision.source.value
            point = op.latest_point.index
            if computed in _STATIC_DENY:
                # The repeat guard may stand before or after the capability, plan-mode and
                # explicit-deny layers (lifecycle.md, "Permission precedence"), not before a
                # hard constraint: its refusal would offer a rule change that lifts nothing.
                accepted = (computed, DecisionSource.CANCELLATION.value)
                if computed != DecisionSource.HARD_CONSTRAINT.value:
                    accepted += (DecisionSource.REPEAT_GUARD.value,)
                if _voided_by_rule_change(trace, op, point):
                    accepted += (DecisionSource.REVALIDATION.value,)
                if F.value(view.permission) != Permission.DENY.value or stored not in accepted:
                    below = (" (the repeat guard stands below the hard constraints)"
                             if stored == DecisionSource.REPEAT_GUARD.value else "")
                    violations.append(_ev(
                        f"{F.describe(op)}: {computed} of permission version "
                        f"{view.identity.permission_version} denies it, the store says "
                        f"{F.value(view.permission)} by {stored}{below}", (point,)))
            elif stored in LAYER_ORDER and computed in LAYER_ORDER:
                version = view.identity.permission_version
                if LAYER_ORDER.index(stored) > LAYER_ORDER.index(computed):
                    violations.append(_ev(
                        f"{F.describe(op)}: decided {F.value(view.permission)} by {stored} "
                        f"although {computed} comes first under permission version {version}",
                        (point,)))
                elif stored in _STATIC_DENY:
                    violations.append(_ev(
                        f"{F.describe(op)}: denied by {stored} although that layer does not match "
                        f"under permission version {version}; the precedence gives {computed}",
                        (point,)))
        if judged:
            exercised += 1
    return judge("L2.1", exercised, violations, "no operation reached the permission check")


def _voided_by_rule_change(trace: Trace, op: F.Op, point: int) -> bool:
    """Did the session's rules change between the call's first sighting and the reading at
    ``point``? A decision taken, or a verdict asked, under the old version is then void, and
    the contract records the refusal as ``revalidation`` (a classifier verdict voided during
    its review; an owner's approval, or a wait asked, under the old version), whichever
    version the record is then bound to: the docs leave that free, so a deny layer of the new
    version may be named by it too (issue 31, case 4: an outside implementation bound a
    voided verdict to the new version, whose explicit deny L2.1 then demanded)."""
    return bool(F.rule_changes_between(trace, op.session_id, op.first_seen, point))


# --------------------------------------------------------------------------- L2.2


def _denial_streak(trace: Trace, revs, session_id: str, index: int) -> bool:
    """Had the session's risk denials reached a fallback threshold before ``index``?"""
    limits = F.thresholds(trace, session_id)
    consecutive = cumulative = 0
    for review in revs:
        if review.session_id != session_id or review.event.index >= index:
            continue
        outcome = F.effective_outcome(trace, review)
        if outcome == "risk_deny":
            consecutive += 1
            cumulative += 1
        elif outcome == "allow":
            consecutive = 0
    return consecutive >= limits.consecutive_denials_max or cumulative >= limits.cumulative_denials_max


def _byte_allow(trace: Trace, revs, session_id: str, tool: str, operation: str, before: int) -> F.Review | None:
    """A review the world answered ``allow`` (in time) for exactly these bytes, before ``before``.

    Matched on the world's record of what it reviewed (``raw``), never through the call
    ids or execution ids the implementation puts in its failpoint contexts."""
    for review in revs:
        if (review.event.index < before and review.session_id == session_id and review.tool == tool
                and review.operation == operation and F.effective_outcome(trace, review) == "allow"):
            return review
    return None


def _unreviewed_executions(trace: Trace, ops, revs) -> tuple[int, list[Evidence]]:
    """Ledger rows the classifier layer decided, run without an approval: each needs an allow
    for its own complete canonical args. ``(judged rows, violations)``."""
    judged, found = 0, []
    for op in ops.values():
        for row in F.attempt_rows(op):
            args = row.data.get("args") if isinstance(row.data.get("args"), dict) else op.args
            tool = str(row.data.get("tool") or op.tool)
            state = F.rules_at(trace, op.session_id, row.index)
            decision = F.static_decision(F.config(trace, op.session_id), state.rules, tool, args,
                                         F.tool_kind(trace, tool, op.session_id))
            if decision.source is not DecisionSource.CLASSIFIER:
                continue
            if F.approval_between(trace, op, -1, row.index) is not None:
                continue  # a human approved it; L2.9 binds the approval to its args
            judged += 1
            text = canonical_json(args)
            if _byte_allow(trace, revs, op.session_id, tool, text, row.index) is None:
                found.append(_ev(
                    f"{F.describe(op)}: executed on the classifier layer, but the world's classifier "
                    f"never allowed these {len(text)} characters of arguments: an allow authorizes "
                    f"only the operation whose complete canonical args it received",
                    (row.index,), (_seq(row),)))
    return judged, found


def check_l2_2(trace: Trace) -> Verdict:
    """Full-operation review, with the task context, and authorization tied to bytes.

    Exercised: once per classifier request the world received, once per ledger row the
    classifier layer decided (no rule, grant or approval), once per operation too large for
    the classifier, and once per auto-mode Bash call decided without a fallback. Judged:
    every classifier request carries the complete canonical args of the call, byte for
    byte, in the same request as the session's trusted cwd, permission scope and user
    requirements (the task context); every execution decided by the classifier layer has an
    allow the world gave for exactly its complete canonical args (``CLASSIFIER_REQUEST.raw``
    matched by the harness against the ledger row's args: a verdict cached by call id,
    reused for other args, or given to a truncated text authorizes nothing — this criterion
    owns that rule); an operation longer than the classifier's input limit gets no verdict
    and does not run without approval; in auto mode Bash reaches the classifier instead of
    being refused by its name."""
    violations: list[Evidence] = []
    exercised = 0
    ops = F.operations(trace)
    revs = F.reviews(trace, ops)
    for review in revs:
        exercised += 1
        index = review.event.index
        cfg = F.config(trace, review.session_id)
        if review.operation is None:
            violations.append(_ev("a classifier request without an operation text", (index,)))
        elif review.op_key is None:
            candidates = [
                op for op in ops.values()
                if op.session_id == review.session_id and op.tool == review.tool and op.first_seen < index
            ]
            cut = [op for op in candidates if canonical_json(op.args).startswith(review.operation)]
            if cut:
                full = len(canonical_json(cut[-1].args))
                note = (f"the classifier received {len(review.operation)} of the {full} characters "
                        f"of {F.describe(cut[-1])}: the operation was truncated")
            else:
                note = (f"the classifier received an operation of {review.tool} that is not the "
                        f"canonical args of any call the model made")
            violations.append(_ev(note, (index,) + tuple(op.served[0].end_index for op in cut[-1:] if op.served)))
        elif review.operation != canonical_json(ops[review.op_key].args):
            op = ops[review.op_key]
            violations.append(_ev(
                f"{F.describe(op)}: the classifier received {len(review.operation)} characters that "
                f"differ from the {len(canonical_json(op.args))} of the complete canonical args",
                (index,) + tuple(s.end_index for s in op.served[:1])))
        fields = _review_fields(review)
        for name in ("trusted_cwd", "permission_scope", "user_requirements"):
            if fields.get(name, "") != getattr(cfg, name):
                violations.append(_ev(
                    f"classifier request for {review.tool}: trusted field {name} is "
                    f"{str(fields.get(name))[:80]!r}, the session's is {getattr(cfg, name)!r}: the "
                    f"task context must reach the classifier with the full operation", (index,)))
    judged, unreviewed = _unreviewed_executions(trace, ops, revs)
    exercised += judged
    violations += unreviewed
    for op in ops.values():
        if not op.served:
            continue
        decision = F.decision_at(trace, op, op.served[0].end_index)
        if decision.source is not DecisionSource.CLASSIFIER:
            continue
        size = len(canonical_json(op.args))
        limit = F.thresholds(trace, op.session_id).classifier_input_chars_max
        first = _first_attempt(op)
        view = op.latest
        if size > limit:
            exercised += 1
            if first is not None and F.approval_between(trace, op, -1, first.index) is None:
                violations.append(_ev(
                    f"{F.describe(op)}: {size} characters (limit {limit}) executed without approval",
                    (first.index,), (_seq(first),)))
            if view is not None and F.value(view.classifier_outcome) in ("allow", "risk_deny"):
                violations.append(_ev(
                    f"{F.describe(op)}: {size} characters (limit {limit}) yet a verdict "
                    f"{F.value(view.classifier_outcome)!r} is recorded", (op.latest_point.index,)))
            continue
        if not F.is_bash(trace, op.tool, op.session_id) or view is None:
            continue
        if F.never_decided(trace, op):
            continue
        if F.value(view.decided_by) in (DecisionSource.REPEAT_GUARD.value, DecisionSource.CANCELLATION.value,
                                        DecisionSource.REVALIDATION.value):
            # (revalidation: a rule change voided the decision before the start, and the
            # contract refuses such a call without a new review; found by generation)
            continue
        if op.prompts or _denial_streak(trace, revs, op.session_id, op.served[0].end_index):
            continue
        current = F.decision_for_version(trace, op, view.identity.permission_version)
        if current is not None and current.source is not DecisionSource.CLASSIFIER:
            continue  # the rules changed after the call was served: a higher layer decides now
        exercised += 1
        if not F.reviews_of(revs, op.key):
            violations.append(_ev(
                f"{F.describe(op)}: Bash in auto mode was decided ({F.value(view.permission)} by "
                f"{F.value(view.decided_by)}) without the classifier ever reviewing it",
                (op.served[0].end_index, op.latest_point.index)))
    return judge("L2.2", exercised, violations, "no classifier review and no auto-mode Bash call")


# --------------------------------------------------------------------------- L2.3


def _markers(trace: Trace, op: F.Op) -> list[str]:
    """Dangerous markers anywhere in the operation's canonical args."""
    text = canonical_json(op.args)
    return [m for m in trace.meta.dangerous_markers if m and m in text]


def _hidden(trace: Trace, op: F.Op, marker: str) -> bool:
    """The hard case: past the legacy window, or inside one argument longer than the window
    and not at its start (a reviewer reading only a prefix would miss it)."""
    text = canonical_json(op.args)
    window = F.thresholds(trace, op.session_id).legacy_classifier_window_chars
    if marker not in text[:window]:
        return True
    return any(isinstance(v, str) and len(v) > window and marker in v and not v.startswith(marker)
               for v in op.args.values())


def _human_or_grant(auth: F.Authorization) -> bool:
    return auth.ok and auth.how != "classifier allow"


def _world_allowed_the_whole(op: F.Op, revs: tuple[F.Review, ...],
                             trace: Trace | None = None) -> bool:
    """Did the world's classifier answer ``allow`` to this operation's complete canonical
    args, byte for byte? Given the ``trace``, only a timely allow in a review of this very
    call counts (reviews :func:`F.reviews` linked to another call with the same args, an
    earlier twin's, do not, and a verdict slower than the session's classifier timeout is a
    timeout): each call's own verdict is what its treatment is compared with."""
    whole = canonical_json(op.args)
    return any((r.outcome if trace is None else F.effective_outcome(trace, r)) == "allow"
               and r.operation == whole and r.session_id == op.session_id and r.tool == op.tool
               and (trace is None or r.op_key in (op.key, None)) for r in revs)


def check_l2_3(trace: Trace) -> Verdict:
    """A dangerous part anywhere in an operation is never auto-approved.

    Exercised: an operation whose dangerous marker is hidden — past the legacy 800-character
    window, or inside an argument longer than the window and not at its start — reached the
    permission check. Judged on every operation holding a marker anywhere in its canonical
    args: it runs only on an exact grant, a human approval, or a classifier ``allow`` the
    world gave to its complete canonical args byte for byte (a verdict on anything less —
    a window, a cut argument — never counts), and otherwise the store never records it as
    allowed by the classifier."""
    violations: list[Evidence] = []
    exercised = 0
    ops = F.operations(trace)
    revs = F.reviews(trace, ops)
    for op in ops.values():
        markers = _markers(trace, op)
        if not markers:
            continue
        if any(_hidden(trace, op, m) for m in markers) and (op.served or op.rows):
            exercised += 1
        where = "hidden" if _hidden(trace, op, markers[0]) else "in plain sight"
        if _world_allowed_the_whole(op, revs):
            # The classifier saw every byte, dangerous part included, and still said allow
            # (a scripted verdict): nothing was hidden from it, so nothing was auto-approved
            # behind its back. L2.3 is about what the classifier was shown.
            continue
        first = _first_attempt(op)
        if first is not None:
            auth = F.authorization(trace, op, first.index, revs)
            if not _human_or_grant(auth):
                violations.append(_ev(
                    f"{F.describe(op)}: dangerous part {markers[0]!r} ({where}) executed "
                    f"on {auth.how}", (first.index,), (_seq(first),)))
        view = op.latest
        if view is not None and F.value(view.permission) == "allow" and F.value(view.decided_by) == "classifier":
            violations.append(_ev(
                f"{F.describe(op)}: dangerous part {markers[0]!r} ({where}) stored as allowed "
                f"by the classifier", (op.latest_point.index,)))
    return judge("L2.3", exercised, violations, "no operation with a hidden dangerous part")


# --------------------------------------------------------------------------- L2.4

WORDING = re.compile(
    r"pre-?approved|already approved|approved by|safe to run|\bsafe\b|ignore (all |any )?previous|"
    r"no (need|review) (to )?review|do not (review|ask)",
    re.IGNORECASE,
)
"""Model-written claims of harmlessness or authorization."""


def _worded(op: F.Op) -> bool:
    description = op.args.get("description")
    return isinstance(description, str) and bool(WORDING.search(description))


def _rank(op: F.Op) -> int:
    view = op.latest
    return 1 if op.rows or (view is not None and F.value(view.permission) == "allow") else 0


def check_l2_4(trace: Trace) -> Verdict:
    """Model-written descriptions reach the classifier only as untrusted input (never in
    the trusted cwd, scope or requirements), and wording such as "safe, pre-approved" changes
    nothing: a dangerous operation so worded is still not auto-approved, and it is never
    treated more permissively than the same operation without the wording.

    Exercised: per classifier review of a call carrying a model-written description, and
    per call worded like "safe, pre-approved" that is dangerous or has an unworded twin.
    """
    violations: list[Evidence] = []
    exercised = 0
    ops = F.operations(trace)
    revs = F.reviews(trace, ops)
    markers = [m for m in trace.meta.dangerous_markers if m]
    for review in revs:
        op = ops.get(review.op_key) if review.op_key else None
        description = op.args.get("description") if op is not None else None
        if not isinstance(description, str) or not description:
            continue
        exercised += 1
        fields = _review_fields(review)
        cfg = F.config(trace, review.session_id)
        for name in ("trusted_cwd", "permission_scope", "user_requirements"):
            value = str(fields.get(name, ""))
            if description in value and description not in getattr(cfg, name):
                violations.append(_ev(
                    f"{F.describe(op)}: the model's description was passed as trusted {name}",
                    (review.event.index,)))
    for op in ops.values():
        if not _worded(op):
            continue
        text = canonical_json(op.args)
        first = _first_attempt(op)
        twins = [
            twin for twin in ops.values()
            if twin is not op and twin.session_id == op.session_id and twin.tool == op.tool
            and not _worded(twin) and twin.latest is not None and op.latest is not None
            and not twin.prompts and not op.prompts
            # under the same rules: a grant installed later lets the twin run for that reason
            # (found by generation: rules granting every tool came between the two)
            and twin.latest.identity.permission_version == op.latest.identity.permission_version
            # the world's classifier allowed the worded one as a whole and not the other: the
            # difference is the world's (a scripted verdict), not the wording's
            # (each judged by its own timely verdicts: found by generation, an earlier call
            # with the twin's very args allowed in review 1 while the twin's own review timed
            # out, seed 101; the twin's own allow came after the timeout, seed 105)
            and not (_world_allowed_the_whole(op, revs, trace)
                     and not _world_allowed_the_whole(twin, revs, trace))
            and {k: v for k, v in twin.args.items() if k != "description"}
            == {k: v for k, v in op.args.items() if k != "description"}
        ]
        dangerous = any(m in text for m in markers)
        if dangerous or twins:
            exercised += 1
        # The world's classifier answers risk_deny to a marker unless the scenario scripts
        # another verdict; a scripted allow of the whole operation is its honest verdict, not
        # the wording's doing (found by generation: review 1 scripted 'allow').
        scripted_allow = _world_allowed_the_whole(op, revs)
        if dangerous and not scripted_allow:
            if first is not None:
                auth = F.authorization(trace, op, first.index, revs)
                if not _human_or_grant(auth):
                    violations.append(_ev(
                        f"{F.describe(op)}: a dangerous operation described as "
                        f"{op.args['description']!r} executed on {auth.how}", (first.index,), (_seq(first),)))
            view = op.latest
            if view is not None and F.value(view.permission) == "allow" and F.value(view.decided_by) == "classifier":
                violations.append(_ev(
                    f"{F.describe(op)}: a dangerous operation described as {op.args['description']!r} "
                    f"is stored as allowed by the classifier", (op.latest_point.index,)))
        for twin in twins:
            if _rank(op) > _rank(twin):
                violations.append(_ev(
                    f"{F.describe(op)} (described {op.args['description']!r}) was let through while "
                    f"the same operation {twin.tool_call_id} without that wording was not",
                    F.op_indexes(op) + F.op_indexes(twin), op.ledger_seqs))
    return judge("L2.4", exercised, violations,
                 "no reviewed call with a description and no 'pre-approved'-style wording")


# --------------------------------------------------------------------------- L2.5


def _voided(trace: Trace, revs, review: F.Review) -> bool:
    """Was this review interrupted by a cancellation or a rule change (L2.7/L2.8), or by a
    crash inside it (the instance died before the verdict reached it: nothing to record)?"""
    later = [r.event.index for r in revs if r.event.index > review.event.index]
    stop = later[0] if later else F.last_index(trace) + 1
    return any(
        e.data.get("name") == "during_classifier_review"
        and e.data.get("action") in ("cancel", "change_rules", "crash")
        for e in F.events_between(trace, review.event.index, stop, Kind.FAILPOINT)
    )


def check_l2_5(trace: Trace) -> Verdict:
    """Every review outcome is recorded as the world gave it (a verdict slower than the
    session's timeout is a timeout): timeout, service error, cancellation, oversize and
    risk denial stay distinct, a missing verdict is never stored as a risk denial, and
    only an explicit allow (or a later approval) lets the operation run.

    Exercised: per classifier request the world received for an operation the harness
    can name.
    """
    violations: list[Evidence] = []
    exercised = 0
    ops = F.operations(trace)
    revs = F.reviews(trace, ops)
    for review in revs:
        op = ops.get(review.op_key) if review.op_key else None
        if op is None:
            continue
        exercised += 1
        expected = F.effective_outcome(trace, review)
        mine = F.reviews_of(revs, op.key)
        if mine[-1] is review and not _voided(trace, revs, review):
            view = op.latest
            if view is not None and F.value(view.classifier_outcome) != expected:
                number = review.event.data.get("review", "?")
                violations.append(_ev(
                    f"{F.describe(op)}: the classifier answered {expected!r} (review {number}), "
                    f"the store recorded {F.value(view.classifier_outcome)!r} at "
                    f"'{op.latest_point.label}'", (review.event.index, op.latest_point.index)))
        if expected != "allow":
            for row in F.attempt_rows(op):
                if row.index < review.event.index:
                    continue
                allowed_later = F.classifier_allowed_between(revs, trace, op.key, review.event.index, row.index)
                approved = F.approval_between(trace, op, review.event.index, row.index)
                if allowed_later is None and approved is None:
                    violations.append(_ev(
                        f"{F.describe(op)}: executed (ledger row {_seq(row)}) after a {expected!r} "
                        f"review (review {review.event.data.get('review', '?')}) with no explicit "
                        "allow", (review.event.index, row.index), (_seq(row),)))
                break
    return judge("L2.5", exercised, violations, "no classifier review of a known operation")


# --------------------------------------------------------------------------- L2.6


def check_l2_6(trace: Trace) -> Verdict:
    """For an operation that needs the classifier, nothing of its execution (start record,
    execution_started event, ledger row) exists before the review's verdict.

    Exercised: per operation the classifier layer decides (by the rules in force when it
    was served) that the world's classifier reviewed.
    """
    violations: list[Evidence] = []
    exercised = 0
    ops = F.operations(trace)
    revs = F.reviews(trace, ops)
    started = {}
    for event, payload in trace.lifecycle_events():
        if payload.get("type") == EventType.EXECUTION_STARTED.value:
            started.setdefault(payload.get("execution_id"), event)
    for op in ops.values():
        mine = F.reviews_of(revs, op.key)
        if not mine or not op.served:
            continue
        if F.decision_at(trace, op, op.served[0].end_index).source is not DecisionSource.CLASSIFIER:
            continue
        exercised += 1
        verdict_at = mine[0].event.index
        for row in op.rows:
            if row.index < verdict_at:
                violations.append(_ev(
                    f"{F.describe(op)}: executed before its classifier verdict",
                    (row.index, verdict_at), (_seq(row),)))
        exec_ids = {v.identity.execution_id for v in F.distinct_views(op)} | {execution_id_for(*op.key)}
        for execution_id in exec_ids:
            event = started.get(execution_id)
            if event is not None and event.index < verdict_at:
                violations.append(_ev(
                    f"{F.describe(op)}: execution_started emitted before its classifier verdict",
                    (event.index, verdict_at)))
        for point, view in op.views:
            if point.index < verdict_at and view.execution_started:
                violations.append(_ev(
                    f"{F.describe(op)}: the store recorded its execution start before the classifier "
                    f"verdict ('{point.label}')", (point.index, verdict_at)))
                break
    return judge("L2.6", exercised, violations, "no operation went through the classifier")


# --------------------------------------------------------------------------- L2.7 / L2.8


def _review_op_at(trace: Trace, ops, revs, failpoint: TraceEvent, session_id: str) -> tuple[F.Op, F.Review | None] | None:
    """The operation under review when a ``during_classifier_review`` failpoint fired."""
    context = failpoint.data.get("context") if isinstance(failpoint.data.get("context"), dict) else {}
    for op in ops.values():
        if F.context_names_op(context, op):
            linked = [r for r in F.reviews_of(revs, op.key) if r.event.index < failpoint.index]
            return op, (linked[-1] if linked else None)
    before = [r for r in revs if r.event.index < failpoint.index and (not session_id or r.session_id == session_id)]
    if before and before[-1].op_key in ops:
        return ops[before[-1].op_key], before[-1]
    after = [r for r in revs if r.event.index > failpoint.index and (not session_id or r.session_id == session_id)]
    if after and after[0].op_key in ops:
        return ops[after[0].op_key], after[0]
    return None


def _reviewed_op_a_fault_targets(trace: Trace, ops, revs, failpoint: TraceEvent) -> F.Op | None:
    """The operation under review at a ``during_classifier_review`` fault, when the fault
    acts on that operation's own session (a cancel or a rule change of another session
    changes nothing for it)."""
    target = F.arg_session(F.fault_params(trace, failpoint), F.default_session(trace))
    found = _review_op_at(trace, ops, revs, failpoint, target)
    return found[0] if found is not None and found[0].session_id == target else None


_AFTER_THE_VERDICT = ("after_permission_decision", "after_revalidation")
"""Failpoints between an operation's verdict and its start: a cancel landing there finds an
operation allowed to run and not yet run, the review's last window (as L2.8 judges a rule
change there)."""

_RESUMING = ("run_turn", "concurrent_turn", "answer_approval")
"""Driver calls by which the caller resumes a session: a cancel stands until one of them."""


def _resumed_after(trace: Trace, session_id: str, at: int) -> int:
    """Index of the first driver call after ``at`` by which the caller resumes the session
    (not one the runner made from inside a failpoint), or past the end."""
    for event in trace.of_kind(Kind.DRIVER_CALL):
        if event.index <= at or event.data.get("via_failpoint") or event.data.get("skipped"):
            continue
        method = event.data.get("method")
        if method not in _RESUMING:
            continue
        session = F.driver_args(event).get("session_id")
        if method == "answer_approval" or session == session_id:
            return event.index
    return F.last_index(trace) + 1


def _tool_calls(op: F.Op) -> list[TraceEvent]:
    """Every time the world's tool port was asked to run the operation: ledger rows and
    refusals to start alike (the cancel asks that the tool not be called at all)."""
    return sorted([*F.attempt_rows(op), *op.unavailable], key=lambda e: e.index)


def _cancelled_after_the_verdict(trace: Trace, ops, revs) -> list[tuple[F.Op, TraceEvent]]:
    """Operations a ``cancel`` fault of their own session caught after their verdict allowed
    them (the world's grant, review or approval) and before the tool was first called."""
    cases = []
    for event in trace.of_kind(Kind.FAILPOINT):
        if event.data.get("name") not in _AFTER_THE_VERDICT or event.data.get("action") != "cancel":
            continue
        target = F.arg_session(F.fault_params(trace, event), F.default_session(trace))
        context = event.data.get("context") if isinstance(event.data.get("context"), dict) else {}
        for op in ops.values():
            if op.session_id != target or not F.context_names_op(context, op):
                continue
            if any(e.index < event.index for e in _tool_calls(op)):
                continue  # a later run of an operation that already ran: not the first call
            if F.authorization(trace, op, event.index, revs).ok:
                cases.append((op, event))
    return cases


def check_l2_7(trace: Trace) -> Verdict:
    """An operation whose session was cancelled while the classifier reviewed it (or whose
    review was answered 'cancelled') is not executed and stays not_started; one whose
    session was cancelled after its verdict and before its tool was called is not executed
    either, until the caller resumes the session (a new turn or an answer).

    Exercised: per operation under review when a ``cancel`` fault fired at
    ``during_classifier_review``, or whose review the world answered ``cancelled``; per
    operation allowed to run and not yet run when a ``cancel`` fault of its session fired at
    ``after_permission_decision`` or ``after_revalidation``.
    """
    violations: list[Evidence] = []
    exercised = 0
    ops = F.operations(trace)
    revs = F.reviews(trace, ops)
    cases: list[tuple[F.Op, int]] = []
    for event in trace.of_kind(Kind.FAILPOINT):
        if event.data.get("name") == "during_classifier_review" and event.data.get("action") == "cancel":
            op = _reviewed_op_a_fault_targets(trace, ops, revs, event)
            if op is not None:
                cases.append((op, event.index))
    answered_cancelled: set[F.OpKey] = set()
    for review in revs:
        if review.outcome == "cancelled" and review.op_key in ops:
            if all(op.key != review.op_key for op, _ in cases):
                cases.append((ops[review.op_key], review.event.index))
                answered_cancelled.add(review.op_key)
    for op, at in cases:
        exercised += 1
        # A review the classifier answered 'cancelled' gives no verdict; another review of
        # the same call that allowed it afterwards may run it (found by generation: a
        # duplicate held during its review, answered 'cancelled', while the other instance's
        # review allowed the call and ran it).
        allowed = [r.event.index for r in revs if r.op_key == op.key and r.outcome == "allow"
                   and r.event.index > at] if op.key in answered_cancelled else []
        for row in op.rows:
            if row.index > at and not any(at < a < row.index for a in allowed):
                violations.append(_ev(
                    f"{F.describe(op)}: executed although its review was cancelled",
                    (at, row.index), (_seq(row),)))
                break
        view = op.latest
        if view is not None and (F.value(view.outcome) != "not_started" or view.execution_started):
            if not op.rows:
                violations.append(_ev(
                    f"{F.describe(op)}: cancelled during review but stored as "
                    f"{F.value(view.outcome)} (execution_started={view.execution_started})",
                    (at, op.latest_point.index)))
    for op, cancel in _cancelled_after_the_verdict(trace, ops, revs):
        exercised += 1
        until = _resumed_after(trace, op.session_id, cancel.index)
        ran = [e for e in _tool_calls(op) if cancel.index < e.index < until]
        if ran:
            violations.append(_ev(
                f"{F.describe(op)}: the session was cancelled at {cancel.data.get('name')}, "
                "after the verdict and before the start, and the tool was still called",
                (cancel.index, ran[0].index), tuple(_seq(r) for r in ran[:1] if r.kind == Kind.TOOL_EXECUTED)))
    return judge("L2.7", exercised, violations,
                 "no cancellation during a classifier review or between a verdict and its start")


def _fresh_authorization(trace: Trace, op: F.Op, since: int, at: int, revs) -> bool:
    """Was running ``op`` at ``at`` authorized by a decision taken after ``since``?"""
    decision = F.decision_at(trace, op, at)
    if decision.permission is Permission.DENY:
        return False
    if decision.permission is Permission.ALLOW:
        return True
    if F.approval_between(trace, op, since, at) is not None:
        return True
    return decision.permission is None and F.classifier_allowed_between(revs, trace, op.key, since, at) is not None


def check_l2_8(trace: Trace) -> Verdict:
    """When the rules or the permission version change while an operation is under review
    (or between its verdict and its execution), the old verdict is void: the operation does
    not run unless a decision taken under the new rules allows it, and then under the new
    version.

    Exercised: per operation whose rules changed while it was under review (a
    ``change_rules`` fault at ``during_classifier_review``) or between its review and its
    execution.
    """
    violations: list[Evidence] = []
    exercised = 0
    ops = F.operations(trace)
    revs = F.reviews(trace, ops)
    judged: dict[F.OpKey, int] = {}
    for event in trace.of_kind(Kind.FAILPOINT):
        if event.data.get("name") == "during_classifier_review" and event.data.get("action") == "change_rules":
            op = _reviewed_op_a_fault_targets(trace, ops, revs, event)
            if op is not None:
                judged.setdefault(op.key, event.index)
    for op in ops.values():
        first = _first_attempt(op)
        mine = [r for r in F.reviews_of(revs, op.key) if first is None or r.event.index < first.index]
        if first is None or not mine:
            continue
        changes = F.rule_changes_between(trace, op.session_id, mine[0].event.index, first.index)
        if changes:
            judged.setdefault(op.key, changes[0].start)
    for key, change_at in judged.items():
        op = ops[key]
        exercised += 1
        for row in F.attempt_rows(op):
            if row.index < change_at:
                continue
            state = F.rules_at(trace, op.session_id, row.index)
            if not _fresh_authorization(trace, op, change_at, row.index, revs):
                violations.append(_ev(
                    f"{F.describe(op)}: executed on a verdict given before the rules changed "
                    f"(now v{state.permission_version})", (change_at, row.index), (_seq(row),)))
            elif int(row.data.get("permission_version", -1)) != state.permission_version:
                violations.append(_ev(
                    f"{F.describe(op)}: executed under permission version "
                    f"{row.data.get('permission_version')} after the change to v{state.permission_version}",
                    (change_at, row.index), (_seq(row),)))
            break
    return judge("L2.8", exercised, violations, "no rule change during or after a classifier review")


# --------------------------------------------------------------------------- L2.9


def _file_changes(trace: Trace, op: F.Op, lo: int, hi: int) -> list[TraceEvent]:
    path = op.args.get("path")
    if not isinstance(path, str) or not (
        "expect_sha" in op.args or F.tool_kind(trace, op.tool, op.session_id) == "file_edit"
    ):
        return []
    return [
        row for row in F.events_between(trace, lo, hi, Kind.TOOL_EXECUTED)
        if (row.data.get("args") or {}).get("path") == path
        and row.data.get("effect") != "none"
        and (row.data.get("session_id"), row.data.get("tool_call_id")) != op.key
    ]


def check_l2_9(trace: Trace) -> Verdict:
    """Right before execution the permission version, the args, the approval and the file
    preconditions are rechecked: an approval given before a rule change or before the file
    it edits changed does not make the operation run; what runs carries the version in
    force and exactly the approved args.

    Exercised: per approved operation whose rules or edited file changed between its
    prompt and its execution, and per operation executed after a rule change.
    """
    violations: list[Evidence] = []
    exercised = 0
    ops = F.operations(trace)
    answered = F.answers(trace)
    for op in ops.values():
        first = _first_attempt(op)
        judged = False
        for prompt in op.prompts:
            answer = answered.get(str(prompt.data.get("wait_id")))
            if answer is None or not answer.approve:
                continue
            if first is not None and first.index < prompt.index:
                continue
            until = first.index if first is not None and first.index > answer.index else answer.index + 1
            changes = F.rule_changes_between(trace, op.session_id, prompt.index, until)
            edits = _file_changes(trace, op, prompt.index, until)
            if not changes and not edits:
                if first is not None and first.index > answer.index:
                    if first.data.get("args") != prompt.data.get("args"):
                        violations.append(_ev(
                            f"{F.describe(op)}: executed with args other than those approved",
                            (prompt.index, first.index), (_seq(first),)))
                continue
            judged = True
            if first is None or first.index < answer.index:
                continue
            last_change = max([c.start for c in changes] + [e.index for e in edits])
            renewed = F.approval_between(trace, op, last_change, first.index)
            # The host saw the write (it went through one of its own operations): the stale
            # precondition is its to catch; a tool that refuses the edit itself is the last
            # line of defence, not the revalidation this criterion asks for.
            refused = bool(first.data.get("precondition_failed")) and first.data.get("effect") == "none"
            if edits and renewed is None:
                violations.append(_ev(
                    f"{F.describe(op)}: {op.args.get('path')} changed after the approval "
                    f"(row {edits[0].data.get('ledger_seq')}) and the edit "
                    + ("was still sent to the tool, which refused it itself: the host did not "
                       "revalidate the file precondition" if refused else "still ran"),
                    (prompt.index, edits[0].index, first.index), (_seq(edits[0]), _seq(first))))
            elif changes and renewed is None and F.decision_at(trace, op, first.index).permission is not Permission.ALLOW:
                violations.append(_ev(
                    f"{F.describe(op)}: approved under v{F.rules_at(trace, op.session_id, prompt.index).permission_version}, "
                    f"executed after the change to v{changes[-1].permission_version} without a new decision",
                    (prompt.index, changes[-1].start, first.index), (_seq(first),)))
            break
        for row in F.attempt_rows(op)[:1]:
            if F.rule_changes_between(trace, op.session_id, -1, row.index):
                judged = True
                state = F.rules_at(trace, op.session_id, row.index)
                if int(row.data.get("permission_version", -1)) != state.permission_version:
                    violations.append(_ev(
                        f"{F.describe(op)}: executed under permission version "
                        f"{row.data.get('permission_version')} while v{state.permission_version} was in force",
                        (row.index,), (_seq(row),)))
        if judged:
            exercised += 1
    return judge("L2.9", exercised, violations,
                 "no approval outlived a rule or file change and no version changed before an execution")


# --------------------------------------------------------------------------- L2.10


def check_l2_10(trace: Trace) -> Verdict:
    """execution_started is exact: false for a pre-call denial, true for an operation that
    ran in the sandbox and was then refused extra permission (its outcome is then not
    not_started: effects may be partial), and true for anything the ledger shows ran.

    Exercised (the hard case only): per sandboxed run that asked for escalation, judged on
    the store after it. The world asks for it (a ``partial_escalate`` tool behaviour), so
    it arises for every implementation, with ``sandbox_escalation`` or without (then the
    request is a definite failure, execution started). Pre-call denials and ledger rows are
    still checked, and fail the criterion when wrong, but they exercise nothing: writing
    ``false`` on every denial passes them, which is exactly the defect this criterion is
    about.
    """
    violations: list[Evidence] = []
    exercised = 0
    for op in F.operations(trace).values():
        view = op.latest
        if view is None:
            continue
        point = op.latest_point.index
        if F.pre_call_denied(op) and not op.unavailable:
            if view.execution_started:
                violations.append(_ev(
                    f"{F.describe(op)}: a pre-call denial recorded execution_started=true", (point,)))
            continue
        escalations = [r for r in op.rows if r.data.get("escalation_requested")]
        if escalations:
            exercised += point > escalations[0].index  # the store was read after it
            retried = any(F.is_escalation_retry(op, r) for r in op.rows)
            if point > escalations[0].index and not view.execution_started:
                violations.append(_ev(
                    f"{F.describe(op)}: ran in the sandbox and asked for more permission, yet "
                    f"execution_started=false", (escalations[0].index, point), op.ledger_seqs))
            elif point > escalations[0].index and not retried and F.value(view.outcome) == "not_started" \
                    and F.value(view.delivery) != "pending":
                # (pending: no result was saved, e.g. the instance crashed between the tool's
                # return and the save and nothing recovered it yet: nothing was refused)
                violations.append(_ev(
                    f"{F.describe(op)}: the escalation was refused after a sandboxed run with "
                    f"effect {escalations[0].data.get('effect')!r}, yet the outcome is not_started",
                    (escalations[0].index, point), op.ledger_seqs))
            continue
        if op.rows and point > op.rows[0].index and not view.execution_started:
            violations.append(_ev(
                f"{F.describe(op)}: the ledger shows it ran, the store says execution_started=false",
                (op.rows[0].index, point), op.ledger_seqs))
    return judge("L2.10", exercised, violations,
                 "no sandboxed run asked for escalation (the hard case: a denial after a "
                 "sandboxed attempt)")


# --------------------------------------------------------------------------- L2.11


def check_l2_11(trace: Trace) -> Verdict:
    """A retry without sandbox after an escalation request happens only after an approval
    of its own, prompted after that request: retrying is not authorization.

    Exercised: per sandboxed run that asked for escalation.
    """
    violations: list[Evidence] = []
    exercised = 0
    for op in F.operations(trace).values():
        escalations = [r for r in op.rows if r.data.get("escalation_requested")]
        if not escalations:
            continue
        exercised += 1
        asked = escalations[0]
        for row in op.rows:
            if row.index <= asked.index or row.data.get("sandboxed", True):
                continue
            if F.approval_between(trace, op, asked.index, row.index) is None:
                violations.append(_ev(
                    f"{F.describe(op)}: retried without sandbox after its escalation request with no "
                    f"approval of its own", (asked.index, row.index), (_seq(asked), _seq(row))))
    return judge("L2.11", exercised, violations, "no sandboxed run asked for escalation")


# --------------------------------------------------------------------------- catalogue


CRITERIA: tuple[Criterion, ...] = (
    Criterion(
        id="L2.1",
        stage=STAGE,
        title="Precedence",
        statement=(
            "Hard constraints come before identity capabilities, then plan mode, explicit deny, "
            "ask, exact grant and finally the classifier; the classifier cannot override any "
            "layer above it and an exact grant needs no classifier."
        ),
        seed_clause="保留当前硬约束、身份能力、计划模式、显式 deny、ask 和精确授权的优先级，分类器不能覆盖它们。",
        check=check_l2_1,
    ),
    Criterion(
        id="L2.2",
        stage=STAGE,
        title="Full-operation review",
        statement=(
            "The classifier receives the complete arguments exactly as they would execute, with "
            "the task context (trusted working directory, permission scope and user requirements); "
            "an allow authorizes only the operation whose complete arguments it received; nothing "
            "is truncated, an operation too large for review gets no verdict and is not "
            "auto-approved, and in auto mode Bash is reviewed like any tool instead of being "
            "refused by name."
        ),
        seed_clause=(
            "在登记执行前异步审查完整操作。传入可信工作目录、权限范围和必要的用户要求；"
            "模型描述与仓库文本视为不可信输入。过大参数不得截断后批准。 … "
            "auto 模式在分析命令前按工具名称拒绝 Bash；"
        ),
        check=check_l2_2,
        required_features=(Feature.AUTO_MODE,),
    ),
    Criterion(
        id="L2.3",
        stage=STAGE,
        title="Dangerous tail",
        statement=(
            "An operation whose dangerous part lies anywhere in it — beyond the first 800 "
            "characters or deep inside a long argument — is not auto-approved."
        ),
        seed_clause=(
            "分类器只读取参数前 800 个字符，缺少可信工作目录和任务上下文。 … 危险尾部不会被忽略"
        ),
        check=check_l2_3,
        required_features=(Feature.AUTO_MODE,),
    ),
    Criterion(
        id="L2.4",
        stage=STAGE,
        title="Untrusted text stays untrusted",
        statement=(
            "Model-written descriptions and repository text reach the classifier only as "
            "untrusted input; wording such as \"safe, pre-approved\" changes no decision."
        ),
        seed_clause="模型描述与仓库文本视为不可信输入。",
        check=check_l2_4,
        required_features=(Feature.AUTO_MODE,),
    ),
    Criterion(
        id="L2.5",
        stage=STAGE,
        title="Classifier outcomes kept apart",
        statement=(
            "Timeouts, service failures, cancellations and explicit risk denials are recorded "
            "as distinct outcomes; only an explicit allow leads to execution, and a missing "
            "verdict is never counted as a risk denial."
        ),
        seed_clause="分类器超时、服务失败、取消和明确风险拒绝分别记录。没有明确允许就不执行，也不能把“无判断结果”统计成风险结论。",
        check=check_l2_5,
        required_features=(Feature.AUTO_MODE,),
    ),
    Criterion(
        id="L2.6",
        stage=STAGE,
        title="Review before registration",
        statement="No execution of an operation is registered or started before its review verdict.",
        seed_clause="在登记执行前异步审查完整操作。",
        check=check_l2_6,
        required_features=(Feature.AUTO_MODE,),
    ),
    Criterion(
        id="L2.7",
        stage=STAGE,
        title="Cancellation during review",
        statement="An operation cancelled while under review, or after its verdict and before "
                  "its start, is not executed.",
        seed_clause="审查期间取消或撤销权限不执行。",
        check=check_l2_7,
        required_features=(Feature.AUTO_MODE,),
    ),
    Criterion(
        id="L2.8",
        stage=STAGE,
        title="Revocation during review",
        statement=(
            "If the rules or the permission version change during review, the old verdict is "
            "void and the operation does not execute on it."
        ),
        seed_clause="审查期间规则改变，旧结论失效。",
        check=check_l2_8,
        required_features=(Feature.AUTO_MODE,),
    ),
    Criterion(
        id="L2.9",
        stage=STAGE,
        title="Revalidation before execution",
        statement=(
            "Permission version, argument digest, approval identity and file preconditions are "
            "checked again right before execution; any mismatch means the operation does not run."
        ),
        seed_clause="执行前重新核对权限版本、参数摘要、审批身份和文件前置条件。",
        check=check_l2_9,
    ),
    Criterion(
        id="L2.10",
        stage=STAGE,
        title="execution_started is exact",
        statement=(
            "Pre-call denials record execution_started=false; a denial of extra permission after "
            "a sandboxed attempt records that execution started, since effects may be partial. "
            "It is never written as false across the board."
        ),
        seed_clause="不要在所有拒绝结果上统一写 execution_started=false：调用前拒绝可以确定未执行，但沙箱执行后申请额外权限被拒，原操作可能已经部分执行。",
        check=check_l2_10,
    ),
    Criterion(
        id="L2.11",
        stage=STAGE,
        title="A retry grants nothing",
        statement=(
            "An escalation such as a retry without sandbox must be allowed by policy and approved "
            "in its own right; retrying is not authorization."
        ),
        seed_clause="所有工具共用调用前预检；申请额外权限必须符合策略，重试本身不授予权限。",
        check=check_l2_11,
        required_features=(Feature.SANDBOX_ESCALATION,),
    ),
)
