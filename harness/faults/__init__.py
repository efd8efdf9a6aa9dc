"""Faults are data: the failpoint catalogue and fault plans (which failpoint, which hit, what action).

Guarantees: every fault is a frozen, validated value; only catalogued failpoints are valid
names; a plan renders to the text printed at the start of a run and parses back to itself.
Depends on the contract and the trace only.
"""

from __future__ import annotations

from harness.faults.plan import (  # noqa: F401 - the face
    FailpointInfo, CATALOGUE, Action, ACTION_PARAMS, DEFAULT_RAISE_MESSAGE,
    DEFAULT_CHECKPOINT_MESSAGE, HitSchedule, HIT_MAX, parse_hits, Fault, make_fault, FaultPlan,
    describe, render, from_spec,
)

