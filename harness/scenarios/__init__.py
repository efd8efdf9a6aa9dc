"""Scenarios: load and validate scenario files into frozen values; matrix templates; fixtures.

Guarantees: anything invalid in a scenario file raises ``ScenarioError`` naming the file, the
key path and the fix; a loaded :class:`Scenario` holds only values the world and the runner use
as they are. Templates (:mod:`harness.scenarios.matrix`) expand before validation, checkpoint
fixtures (:mod:`harness.scenarios.checkpoint_fixture`, :mod:`harness.scenarios.fixture_source`)
are read from the implementation's own package. Depends on the contract, trace, faults and world.
"""

from __future__ import annotations

from harness.scenarios.loader import (  # noqa: F401 - the face
    BUNDLED_SUITE_RESOURCE, bundled_suite_dir, DEFAULT_SCENARIO_DIR, STAGES, ID_PATTERN,
    STANDARD_TOOLS, LIBRARIES, StepKind, Step, STEP_KEYS, STEP_REQUIRED, Scenario, TOP_KEYS,
    SESSION_KEYS, TOOL_KEYS, RULE_KEYS, CLASSIFIER_KEYS, REVIEW_KEYS, MODEL_KEYS, CALL_KEYS,
    BEHAVIOUR_KEYS, FAULT_KEYS, parse, parse_all, loads_all, loads, load, load_all, discover,
)

