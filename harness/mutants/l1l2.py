"""Mutants of the reference (see :mod:`harness.mutants.catalogue`): area `l1l2`.

Each proves that L1/L2 are judged from the world (the failures and classifier reviews the
world recorded, the fixture bytes the harness read) rather than from what the
implementation reports about itself, or that a sharpened catalogue entry is enforced.
"""

from __future__ import annotations

from harness.mutants.mutant import Mutant
from harness.mutants.source_patch import edit, edits
from harness.mutants.targets import CC, CG, FP

_INSPECTION = "reference_impl.inspection"

MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "failure-table-unbounded-inspect-bounded",
        "the recent-failure table is never evicted (its checkpoints grow past 16 entries) while "
        "inspect() reports only the 16 most recent entries of each session",
        ("L1.1",),
        edits(
            edit(FP, find='    conn.execute(\n        "DELETE FROM failure_table WHERE session_id = ? AND touched NOT IN ("',
                 replace='    return\n    conn.execute(\n        "DELETE FROM failure_table WHERE session_id = ? AND touched NOT IN ("'),
            edit(_INSPECTION,
                 find='                        " last_execution_id FROM failure_table ORDER BY rowid").fetchall()',
                 replace='                        " last_execution_id FROM failure_table AS f WHERE (SELECT COUNT(*)'
                         ' FROM failure_table AS g WHERE g.session_id = f.session_id'
                         ' AND g.touched > f.touched) < 16 ORDER BY rowid").fetchall()'),
        ),
        trust_class="world_judges",
    ),
    Mutant(
        "old-checkpoint-loses-failure-entries",
        "an old checkpoint loads its conversation but not its recent-failure entries "
        "(the fixture's .expect.json sidecar, which lists messages only, still matches)",
        ("L1.6",),
        edits(edit(CC, find="        return reader(document)\n",
                   replace="        loaded = reader(document)\n"
                           "        if loaded.format_version < CURRENT_FORMAT_VERSION:\n"
                           "            loaded = Continuation(loaded.session_id, loaded.sequence,"
                           " loaded.last_execution_id, loaded.messages, (), loaded.format_version)\n"
                           "        return loaded\n")),
        trust_class="world_judges",
    ),
    Mutant(
        "classifier-without-task-context",
        "the classifier receives the full operation but not the task context: no trusted "
        "working directory, permission scope or user requirements",
        ("L2.2",),
        edits(edit(CG, find="        trusted_cwd=config.trusted_cwd,\n"
                            "        permission_scope=config.permission_scope,\n"
                            "        user_requirements=config.user_requirements,",
                   replace='        trusted_cwd="",\n        permission_scope="",\n        user_requirements="",')),
        trust_class="catalogue",
    ),
    Mutant(
        "classifier-allow-cached-by-call-id",
        "a classifier allow is cached by tool_call_id and reused for a later operation with the "
        "same call id but other arguments, which then runs unreviewed",
        ("L2.2",),
        edits(
            edit(CG, find="        request = build_request(session, op.tool, op.args)\n",
                 replace="        cache = self.__dict__.setdefault('_allowed_by_call_id', {})\n"
                         "        if op.tool_call_id in cache:\n"
                         "            return cache[op.tool_call_id]\n"
                         "        request = build_request(session, op.tool, op.args)\n"),
            edit(CG, find="        if verdict.outcome is ClassifierOutcome.ALLOW:\n"
                          "            return Decision(",
                 replace="        if verdict.outcome is ClassifierOutcome.ALLOW:\n"
                         "            return cache.setdefault(op.tool_call_id, Decision("),
            edit(CG, find="                classifier_outcome=ClassifierOutcome.ALLOW,\n            )\n",
                 replace="                classifier_outcome=ClassifierOutcome.ALLOW,\n            ))\n"),
        ),
        trust_class="world_judges",
    ),
    Mutant(
        "definite-failure-retried",
        "a definite failure (error_kind failed, effects possibly partial) is retried "
        "automatically like a transient one",
        ("L1.7", "L1.8"),
        edits(edit(FP, find="        and result.error_kind is FailureKind.TRANSIENT\n"
                            "        and not result.escalation_requested\n"
                            "        and idempotent\n",
                   replace="        and result.error_kind in (FailureKind.TRANSIENT, FailureKind.FAILED)\n"
                           "        and not result.escalation_requested\n"
                           "        and (idempotent or result.error_kind is FailureKind.FAILED)\n")),
        trust_class="catalogue",
    ),
    Mutant(
        "late-allow-accepted",
        "a classifier allow that comes back after the session's classifier timeout is taken as "
        "an allow and the call runs, instead of counting as a timeout (no verdict)",
        ("L2.5",),
        edits(edit(CG, find="        if too_slow and verdict.outcome is not ClassifierOutcome.TIMEOUT:\n",
                   replace="        if too_slow and verdict.outcome is ClassifierOutcome.RISK_DENY:\n")),
    ),
    Mutant(
        "old-checkpoint-failure-counts-reset",
        "a version-2 checkpoint's failure entries load with every count reset to 1 (the keys "
        "and the conversation survive, what the entries counted does not)",
        ("L1.6",),
        edits(edit(CC, find="            count=int(entry.get(\"count\", 1)),\n",
                   replace="            count=1,\n"),
              # _READERS holds the readers themselves: rebuild it so it holds the edited one
              edit(CC, find="_READERS = {1: _read_v1, 2: _read_v2, 3: _read_v3}\n",
                   replace="_READERS = {1: _read_v1, 2: _read_v2, 3: _read_v3}  # this build's readers\n")),
        trust_class="world_judges",
    ),
)
