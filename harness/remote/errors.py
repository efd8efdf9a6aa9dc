"""The one root exception of ``harness.remote`` on the harness side.

Guarantees: every failure of an out-of-process implementation that is not the
implementation's own exception (a child that exits, writes garbage, stays silent, rejects a
request, cannot be started) leaves ``harness.remote`` as a :class:`RemoteError` whose message
names the command, its exit status and the tail of its stderr. Failing to *load* an
implementation (resolving ``--impl``) is an :class:`~harness.contract.errors.ImplementationLoadError`
instead, so the CLI reports it as a usage/input error.
"""

from __future__ import annotations

from harness.contract.errors import HarnessError


class RemoteError(HarnessError):
    """An out-of-process implementation broke the protocol or died (see the module doc)."""
