"""Implementations under test: turn an ``--impl`` spec into an :class:`~harness.contract.Implementation`.

Guarantees: :func:`resolve` returns a checked implementation or raises
``ImplementationLoadError`` naming what was wrong and the valid forms (reference, python:,
process:, docker:, mutant:, profile:, adapter:). It sits above the packages that provide
implementations (remote, adapters, profiles, mutants) and below the campaigns and the command
line that choose them.
"""

from __future__ import annotations

from harness.implementations.specs import (  # noqa: F401 - the face
    REFERENCE, PYTHON_PREFIX, Loader, register, valid_forms, resolve, InProcessImplementation,
    not_applicable_of,
)

