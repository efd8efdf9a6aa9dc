"""The package's one root exception and its kinds.

Guarantees: every error the reference implementation raises on purpose is a
:class:`ReferenceImplError`. Errors coming from the world (``harness.contract.WorldError``)
and :class:`harness.contract.SimulatedCrash` are never wrapped: they pass through unchanged.
"""

from __future__ import annotations


class ReferenceImplError(Exception):
    """Root of every error raised on purpose by ``reference_impl``."""


class StoreError(ReferenceImplError):
    """The durable store is missing, newer than this code, or otherwise unusable."""


class UnknownSessionError(ReferenceImplError):
    """A driver call named a session that was never opened on this data dir."""


class UnknownWaitError(ReferenceImplError):
    """``answer_approval`` named a wait id that does not exist."""


class CheckpointFormatError(ReferenceImplError):
    """Checkpoint bytes are not a valid checkpoint of any supported format version."""


class RuntimeClosedError(ReferenceImplError):
    """A driver call arrived after ``close()``."""
