"""The README's test command (`python -m pytest -q`, no paths) uses every core.

When pytest collects its configured testpaths and pytest-xdist is loaded, the run is spread
over one worker per core (`-n auto`) with `--dist loadgroup`: tests that share an expensive
session fixture carry `pytest.mark.xdist_group(...)`, so each such fixture is built once, on
one worker. Anything the command line says wins: `-n 0` or `-p no:xdist` runs in one
process, `-n N`/`--dist` are left alone, and a run of named paths (a targeted run) stays in
one process unless it asks for workers. `--pdb` and `--collect-only` are never distributed.
"""

from __future__ import annotations

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    # Registered after xdist's own tryfirst hook, so pluggy calls this one first: xdist then
    # turns "auto" into a worker count and the worker transports as if typed on the line.
    if not config.pluginmanager.hasplugin("xdist") or hasattr(config, "workerinput"):
        return
    if config.args_source is not pytest.Config.ArgsSource.TESTPATHS:
        return
    if config.getoption("numprocesses", None) is not None or config.getoption("usepdb", False):
        return
    if config.getoption("collectonly", False):
        return
    config.option.numprocesses = "auto"
    if config.getoption("dist", "no") == "no":
        config.option.dist = "loadgroup"
