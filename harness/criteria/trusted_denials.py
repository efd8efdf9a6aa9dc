"""Trusted denials of one exact call: what may justify recording "not executed" (L4.8).

The design lets a repair conclude that a call did not run only from "the exact call and
trusted permission events" ("必须核对精确调用与可信权限事件"), never from tool text or another
call's denial. Here a denial is trusted when the harness itself witnessed it, for the exact
call (same session, tool_call_id, tool and argument digest):

* the rules in force (session config, ``update_rules`` calls, ``change_rules`` faults)
  deny exactly these arguments at some point after the call was served (a hard constraint,
  a missing capability, plan mode, an explicit deny rule);
* the world's classifier reviewed exactly these arguments for this call and gave no allow
  (risk deny, timeout, service error, cancellation, no verdict: "没有明确允许就不执行");
* the owner rejected an approval prompt the world showed for exactly this call;
* the harness cancelled the session after the call was served;
* the world refused to start the tool for this call (``tool_unavailable``).

What the implementation says about itself (its permission events, its store, the tool's
output) is never a trusted denial. Pure functions over a Trace.
"""

from __future__ import annotations

from harness.contract import args_digest, canonical_json
from harness.criteria import trace_readings as s
from harness.criteria.approval_answers import first_answers
from harness.trace.record import Kind, Trace


def trusted_denial(trace: Trace, key: s.OpKey, before: int) -> int | None:
    """The index of the first trusted denial of exactly this call before event ``before``,
    or None. The call's tool and arguments come from what the world served."""
    served = s.first_emissions(trace).get(key)
    if served is None or served.tool is None or served.args is None:
        return None
    tool, args = served.tool, served.args
    digest = args_digest(tool, args)
    session, tool_call_id = key
    found: list[int] = []

    changes = s.rule_changes(trace)
    moments = [served.index + 1] + [c.index + 1 for c in changes
                                    if c.session_id == session and served.index < c.index < before]
    for moment in moments:
        if s.rules_in_force(trace, session, moment, changes).denial_for(tool, args) is not None:
            found.append(moment - 1)
            break

    operation = canonical_json(dict(args))
    for review in s.reviews(trace):
        if (review.index < before and review.session_id == session and review.tool_call_id == tool_call_id
                and review.tool == tool and review.operation == operation and review.outcome != "allow"):
            found.append(review.index)
            break

    rejected = {wait_id: a.index for wait_id, a in first_answers(trace).items()
                if not a.approve and a.index < before}
    for prompt in trace.of_kind(Kind.APPROVAL_PROMPT):
        d = prompt.data
        if (d.get("wait_id") in rejected and (d.get("session_id"), d.get("tool_call_id")) == key
                and d.get("tool") == tool and args_digest(str(d.get("tool")), d.get("args") or {}) == digest):
            found.append(rejected[d["wait_id"]])

    for event in trace.of_kind(Kind.DRIVER_CALL):
        if (event.data.get("method") == "cancel" and served.index < event.index < before
                and (event.data.get("args") or {}).get("session_id", session) == session):
            found.append(event.index)
            break

    for event in trace.of_kind(Kind.TOOL_UNAVAILABLE):
        if event.index < before and (event.data.get("session_id"), event.data.get("tool_call_id")) == key:
            found.append(event.index)
            break
    return min(found) if found else None


def denials_of_other_calls(trace: Trace, key: s.OpKey, before: int) -> tuple[s.OpKey, ...]:
    """Other calls of the same session with a trusted denial before ``before`` (for evidence:
    the denial a guessing repair may have borrowed)."""
    others = [k for k in s.first_emissions(trace) if k[0] == key[0] and k != key]
    return tuple(k for k in others if trusted_denial(trace, k, before) is not None)
