"""The ``lifecycle-harness`` command line: parse arguments, run a command, map errors to exit codes.

Guarantees: :func:`main` never raises; it returns 0 (conformant), 1 (a conformance failure),
2 (bad input), 3 (a harness bug), or 128+N after a signal, having ended every child process it
started. The command line is the top of the harness: it may import every package below it, and
nothing in the harness imports it. Modules: :mod:`~harness.cli.app` (the parser and the
commands ``run``, ``replay``, ``list``, ``selftest``), :mod:`~harness.cli.options` (options
shared by commands), :mod:`~harness.cli.campaign_commands` (``chaos``, ``sweep``, ``merge``,
``compare``, ``matrix``), :mod:`~harness.cli.terminal` (colour and the progress line),
:mod:`~harness.cli.report_location` (where a run's reports go).
"""

from __future__ import annotations

from harness.cli.app import main  # noqa: F401 - the face: the console script's entry point
