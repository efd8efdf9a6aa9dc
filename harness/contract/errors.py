"""The harness's root exception and its direct kinds, mapped to distinct CLI exit codes.

Conformance failures are never exceptions: they are verdicts. These errors mean the harness
could not do its job (bad input, misbehaving implementation that prevents a run, bug).
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_CONFORMANCE_FAILURE = 1
EXIT_USAGE_OR_INPUT_ERROR = 2
EXIT_HARNESS_BUG = 3


class HarnessError(Exception):
    """Root of every error the harness raises on purpose."""

    exit_code = EXIT_USAGE_OR_INPUT_ERROR


class UsageError(HarnessError):
    """Bad command-line arguments or options."""


class ScenarioError(HarnessError):
    """A scenario file is invalid; the message names the file, the key and the valid choices."""


class ImplementationLoadError(HarnessError):
    """The implementation under test cannot be found or constructed (--impl)."""


class ExpectationsError(HarnessError):
    """An expectations file is invalid."""
