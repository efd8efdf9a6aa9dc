"""The trace: what really happened in one scenario run, its canonical text and digests.

Guarantees: a :class:`Trace` is plain frozen data built by the runner, never by an
implementation; :func:`trace_digest` is the same for the same run on any machine (a pure
function of the trace's content, version :data:`DIGEST_VERSION`, linear in its size); the text
renderings (:mod:`harness.trace.lines`), the determinism check
(:mod:`harness.trace.determinism`) and the world's view of a run with its first divergence
(:mod:`harness.trace.world_view`) read only the trace. Depends on the contract alone.
"""

from __future__ import annotations

from harness.trace.record import (  # noqa: F401 - the face
    Source, Kind, TraceEvent, ObservationPoint, FaultSpec, TraceMeta, Trace, positions_by_kind,
    trace_to_json, trace_from_json, trace_canonical_json, trace_digest, digest_pieces,
    DIGEST_VERSION,
)

