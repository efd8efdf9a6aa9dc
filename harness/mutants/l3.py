"""Mutants of the reference (see :mod:`harness.mutants.catalogue`): area `l3`.

Each proves that an L3 criterion judges behaviour from the world and uses ``inspect()`` only
as a second witness: the defects below either act wrongly while the store reports honest
counts, or make the store report the counts a naive check expects while acting wrongly.
"""

from __future__ import annotations

from harness.mutants.mutant import Mutant
from harness.mutants.source_patch import edit, edits
from harness.mutants.targets import AP, EX, RC, DC

INSPECTION = "reference_impl.inspection"

MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "silent-denial-fallback",
        "once the denial thresholds are reached, the next operation is simply denied without "
        "a review or an approval wait and the loop goes on; the counters stay honest",
        ("L3.1",),
        edits(edit(EX, find="            if trigger is not None:\n"
                            "                return Decision(\n"
                            "                    Permission.ASK,\n",
                   replace="            if trigger is not None:  # enough risk: refuse it outright\n"
                           "                return Decision(\n"
                           "                    Permission.DENY,\n")),
        trust_class="world_judges",
    ),
    Mutant(
        "fallback-counts-classifier-faults",
        "the fallback decision counts classifier timeouts, service errors and cancellations "
        "as denials, while the stored counters (what inspect reports) stay unchanged",
        ("L3.8", "L3.1"),
        edits(edit(EX, find="            trigger = denial_counters.fallback_trigger(counts, config.thresholds)\n",
                   replace="            faults = self._store.connection.execute(\n"
                           "                \"SELECT COUNT(*) FROM operations WHERE session_id = ? AND permission_version = ?\"\n"
                           "                \" AND classifier_outcome IN ('timeout', 'service_error', 'cancelled')\",\n"
                           "                (op.session_id, session.permission_version)).fetchone()[0]\n"
                           "            counts = denial_counters.DenialCounts(counts.consecutive + faults,\n"
                           "                                                  counts.cumulative + faults)\n"
                           "            trigger = denial_counters.fallback_trigger(counts, config.thresholds)\n")),
        trust_class="world_judges",
    ),
    Mutant(
        "approved-wait-never-run",
        "an approval is recorded on the wait, but the operation is left waiting and never runs",
        ("L3.2",),
        edits(edit(AP, find="    if approve:\n        permission, reason = Permission.ALLOW, \"approved by the owner\"\n",
                   replace="    if approve:  # the run is picked up later\n        return True\n")),
        trust_class="world_judges",
    ),
    Mutant(
        "answer-applied-twice",
        "recovery re-applies every approved answer to make sure it took effect, so an "
        "approved operation runs a second time after a restart",
        ("L3.2",),
        edits(edit(RC, find="    for wait in approvals.unprompted(store.connection):\n",
                   replace="    from harness.contract import ToolCall\n"
                           "    for row in store.connection.execute(\n"
                           "            \"SELECT execution_id FROM approval_waits\"\n"
                           "            \" WHERE status = 'approved' AND purpose = 'permission'\").fetchall():\n"
                           "        with store.transaction() as conn:  # make sure the answer took effect\n"
                           "            conn.execute(\"UPDATE operations SET stage = ? WHERE execution_id = ?\",\n"
                           "                         (Stage.DECIDED.value, row['execution_id']))\n"
                           "        op = records.load_operation(store.connection, row['execution_id'])\n"
                           "        pipeline.run(op.session_id, ToolCall(op.tool_call_id, op.tool, op.args))\n"
                           "    for wait in approvals.unprompted(store.connection):\n")),
        trust_class="world_judges",
    ),
    Mutant(
        "inspect-reports-expected-counters",
        "allowed operations reset the cumulative count too (so the cumulative fallback never "
        "comes), while inspect reports the cumulative count as the number of counted denials",
        ("L3.1", "L3.5"),
        edits(
            edit(DC, find="        \"UPDATE denial_counters SET consecutive = 0\"\n"
                          "        \" WHERE session_id = ? AND permission_version = ?\",\n",
                 replace="        \"UPDATE denial_counters SET consecutive = 0, cumulative = 0\"\n"
                         "        \" WHERE session_id = ? AND permission_version = ?\",\n"),
            edit(INSPECTION,
                 find="        DenialCounterView(row[\"session_id\"], row[\"permission_version\"], row[\"consecutive\"],\n"
                      "                          row[\"cumulative\"])\n",
                 replace="        DenialCounterView(row[\"session_id\"], row[\"permission_version\"], row[\"consecutive\"],\n"
                         "                          conn.execute(\"SELECT COUNT(*) FROM counted_denials\"\n"
                         "                                       \" WHERE session_id = ? AND permission_version = ?\",\n"
                         "                                       (row[\"session_id\"], row[\"permission_version\"])\n"
                         "                                       ).fetchone()[0])\n"),
        ),
        trust_class="world_judges",
    ),
    Mutant(
        "crash-loses-denial-count",
        "the risk denial is counted in its own transaction after the decision is announced, "
        "so a crash right after the decision loses the count",
        ("L3.7",),
        edits(
            edit(EX, find="            if decided and decision.counts_as_risk_denial:\n"
                          "                denial_counters.record_risk_denial(\n"
                          "                    conn, op.session_id, session.permission_version, op.execution_id\n"
                          "                )\n",
                 replace=""),
            edit(EX, find="        self._signals.failpoint(Failpoint.AFTER_PERMISSION_DECISION, op.session_id,\n"
                          "                                op.execution_id, op.tool_call_id)\n",
                 replace="        self._signals.failpoint(Failpoint.AFTER_PERMISSION_DECISION, op.session_id,\n"
                         "                                op.execution_id, op.tool_call_id)\n"
                         "        if decision.counts_as_risk_denial:  # bookkeeping, once the decision is out\n"
                         "            with self._store.transaction() as conn:\n"
                         "                denial_counters.record_risk_denial(\n"
                         "                    conn, op.session_id, session.permission_version, op.execution_id)\n"),
        ),
        trust_class="world_judges",
    ),
    Mutant(
        "recovery-skips-unshown-waits",
        "recovery leaves a wait that was committed but never shown (its instance crashed "
        "before the prompt) pending without showing it: the store says it waits for the "
        "owner, who was never asked",
        ("L3.2",),
        edits(edit(RC, find="    for wait in approvals.unprompted(store.connection):\n"
                            "        pipeline.prompt(wait, with_failpoint=False)\n",
                   replace="")),
        trust_class="world_judges",
    ),
    Mutant(
        "escalation-asks-anyone",
        "a sandboxed attempt that asks for more permission gets an escalation wait whether or "
        "not anyone can answer it (a non-interactive session, an owner without the right): "
        "the turn waits for an approval that cannot come",
        ("L3.3", "L3.10"),
        edits(edit(EX, find="            asks_owner = sandboxed and outcome.escalation_requested and owner_can_answer(\n"
                            "                current.config)\n",
                   replace="            asks_owner = sandboxed and outcome.escalation_requested\n")),
        trust_class="world_judges",
    ),
)
