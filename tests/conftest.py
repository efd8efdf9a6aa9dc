"""The README's test command (`python -m pytest -q`, no paths) uses every core.

When pytest collects its configured testpaths and pytest-xdist is loaded, the run is spread
over one worker per core (`-n auto`, xdist's `load` distribution). Results several tests
read are built once per run whichever worker asks first (`run_once` in
tests/conformance/conftest.py), so they need no scheduling of their own (xdist 3.8's
`--dist loadgroup` groups nothing under pytest 9.2: it renames items through an attribute
pytest 9.2 no longer reads). Anything the command line says wins: `-n 0` or `-p no:xdist`
runs in one process, `-n N`/`--dist` are left alone, and a run of named paths (a targeted
run) stays in one process unless it asks for workers. `--pdb` and `--collect-only` are never
distributed.

Tests go to the workers one at a time (`--maxschedchunk 1`: a worker holds the test it runs
and the next one), so the workers share one queue in collection order. xdist's default hands
each worker a quarter of its share in one consecutive chunk up front (229 of 1,838 tests):
the first chunk held every whole-suite test (tests/conformance, tests/hostile) and kept one
worker busy for 110 s after the other had run out of work (the workers' tests took 296 s
and 409 s; 7 min 11 s wall on a busy machine). The tests that start a shared result run
first (tests/conformance/conftest.py).
"""

from __future__ import annotations

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    # Registered after xdist's own tryfirst hook, so pluggy calls this one first: xdist then
    # turns "auto" into a worker count and the worker transports as if typed on the line.
    # Workers parse the controller's command line again and must not spread further.
    if not config.pluginmanager.hasplugin("xdist") or hasattr(config, "workerinput"):
        return
    if config.args_source is not pytest.Config.ArgsSource.TESTPATHS:
        return
    if config.getoption("numprocesses", None) is not None or config.getoption("usepdb", False):
        return
    if config.getoption("collectonly", False):
        return
    config.option.numprocesses = "auto"
    if config.getoption("maxschedchunk", None) is None:
        config.option.maxschedchunk = 1
