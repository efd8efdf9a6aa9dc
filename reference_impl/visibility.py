"""What the model may see (tools) and what the UI shows (projections) (L5.1-L5.4).

Guarantees:

* the tool list of every model request is computed from the rules in force at the moment
  the request is built: a tool denied outright (hard constraint, capability, plan mode,
  deny rule with pattern ``*``) is absent; any other tool is listed, since some call of it
  can run (L5.1, L5.3); saved operations are never rewritten by this filter;
* a projection is derived only from the authoritative record through the contract's
  ``expected_projection``, so status, reason and recovery actions always agree with the
  backend (L5.4).
"""

from __future__ import annotations

from harness.contract import (
    Outcome,
    Permission,
    Projection,
    RecoveryAction,
    SessionConfig,
    expected_projection,
)
from reference_impl.permissions import denied_outright
from reference_impl.records import OperationRecord
from reference_impl.results import ResultRecord


def visible_tools(config: SessionConfig) -> tuple[str, ...]:
    return tuple(spec.name for spec in config.tools if not denied_outright(config, spec.name))


def operation_status(
    op: OperationRecord, result: ResultRecord | None, wait_pending: bool
) -> tuple[Permission, Outcome, str, str, tuple[RecoveryAction, ...]]:
    outcome = result.outcome if result else Outcome.NOT_STARTED
    status, actions = expected_projection(
        op.permission,
        outcome,
        op.decided_by,
        result.failure_kind if result else None,
        result.reconciliation_required if result else False,
        wait_pending,
    )
    reason = result.reason if result else op.reason
    return op.permission, outcome, status, reason, actions


def projection_for(
    op: OperationRecord, result: ResultRecord | None, wait_pending: bool
) -> Projection:
    permission, outcome, status, reason, actions = operation_status(op, result, wait_pending)
    return Projection(
        session_id=op.session_id,
        execution_id=op.execution_id,
        tool_call_id=op.tool_call_id,
        permission=permission,
        outcome=outcome,
        status=status,
        reason=reason,
        recovery_actions=actions,
    )
