"""The contract: the vocabulary shared by the harness and every implementation, and its checks.

Guarantees: ``harness.contract`` (this face) is the only part of the harness an implementation
may import, and everything it exports is the vocabulary of :mod:`harness.contract.vocabulary`
(the three states, operation identity, events, the ports of the world, the Observation, the
JSON round trip). Its sibling modules hold what the rest of the harness builds on and that
depends on nothing above the contract: value checks (:mod:`value_checks`), the canonical text of
arguments (:mod:`canonical_text`), size limits (:mod:`limits`, :mod:`scenario_limits`),
conformance levels (:mod:`conformance`), expectation files (:mod:`expectations`) and the
harness's root exception with its exit codes (:mod:`errors`).
"""

from __future__ import annotations

from harness.contract.vocabulary import (  # noqa: F401 - the face
    CONTRACT_VERSION, ContractError, Permission, Outcome, Delivery, ClassifierOutcome,
    ModelRequestStatus, FailureKind, Mode, ToolKind, RuleEffect, DecisionSource,
    RecoveryAction, WaitStatus, TurnStatus, ChunkKind, ToolStatus, EventType,
    EVENT_FIELDS_READ, Feature, CORE_FEATURES, OPTIONAL_FEATURES, Failpoint,
    FAILPOINT_DESCRIPTIONS, WorldError, ModelTransportError, ModelStreamCancelled,
    ToolUnavailable, InjectedFault, SimulatedCrash, canonical_json, CanonicalJsonError,
    canonical_json_problem, integer_problem, SAFE_INTEGER_MAX, args_digest, result_digest,
    execution_id_for, FAILURE_TABLE_CAPACITY, Thresholds, Rule, ToolSpec, SessionConfig,
    ToolCall, OperationIdentity, Message, ModelRequest, ModelChunk, ClassifierRequest,
    ClassifierVerdict, ToolInvocation, ToolResult, ApprovalPrompt, Projection, LifecycleEvent,
    OperationView, ApprovalWaitView, DenialCounterView, FailureEntryView, CheckpointView,
    ModelRequestView, SessionView, Observation, ImplementationInfo,
    CHECKPOINT_FIXTURE_BYTES_MAX, CheckpointFixture, TurnResult, RecoveryReport, ModelStream,
    World, Runtime, Implementation, CheckpointFixtureSource, to_json, type_hints, from_json,
    expected_projection,
)

