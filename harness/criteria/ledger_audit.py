"""The durability audit of one trace, from the world's records alone: lost results and
double executions.

Guarantees of :func:`audit` (a pure function of the Trace; nothing the implementation says
about itself is read, only the world's ``TOOL_EXECUTED`` ledger rows and ``UI_PUBLISH``
publications):

* ``executed``: the execution identities the ledger shows a tool ran for, in ledger order;
* a **lost result** is an executed identity whose last UI publication is missing or still
  says ``not_started``: the tool ran but what came of it was never shown (neither its result
  nor, after a crash before the result was saved, an honest ``unknown``);
* a **double execution** is a ledger row of an identity that already took effect
  (``applied``/``partial``) in an earlier row that did not ask for sandbox escalation —
  the tool ran again although its first run counted (an escalated rerun of a run the sandbox
  refused, and a retry of a run with no effect, are not doubles).
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.trace.record import Kind, Trace

TOOK_EFFECT = ("applied", "partial")


@dataclass(frozen=True, slots=True)
class LedgerAudit:
    executed: tuple[str, ...]
    """Execution ids with at least one ledger row, in first-row order."""
    lost: tuple[str, ...]
    doubles: tuple[str, ...]
    """Execution ids run again after a run that took effect (each once)."""
    evidence: tuple[str, ...] = ()
    """One line per problem: the identity, the ledger rows, the last publication."""

    @property
    def clean(self) -> bool:
        return not self.lost and not self.doubles


def audit(trace: Trace) -> LedgerAudit:
    executed: list[str] = []
    effective: dict[str, int] = {}
    doubles: list[str] = []
    evidence: list[str] = []
    for event in trace.of_kind(Kind.TOOL_EXECUTED):
        data = event.data
        identity = str(data.get("execution_id", ""))
        if identity not in executed:
            executed.append(identity)
        if identity in effective and identity not in doubles:
            doubles.append(identity)
            evidence.append(f"double execution of {identity}: ledger rows "
                            f"{effective[identity]} and {data.get('ledger_seq')} (trace index "
                            f"{event.index}) both ran it")
        if data.get("effect") in TOOK_EFFECT and not data.get("escalation_requested"):
            effective.setdefault(identity, data.get("ledger_seq", event.index))
    shown: dict[str, tuple[int, str]] = {}
    for event in trace.of_kind(Kind.UI_PUBLISH):
        projection = event.data.get("projection") or {}
        identity = str(projection.get("execution_id", ""))
        shown[identity] = (event.index, str(projection.get("outcome", "")))
    lost = []
    for identity in executed:
        last = shown.get(identity)
        if last is None or last[1] == "not_started":
            lost.append(identity)
            evidence.append(f"lost result of {identity}: the ledger shows it ran, "
                            + ("no publication shows it" if last is None else
                               f"its last publication (trace index {last[0]}) says not_started"))
    return LedgerAudit(tuple(executed), tuple(lost), tuple(doubles), tuple(evidence))
