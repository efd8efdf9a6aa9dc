"""A launcher that keeps the child of every instance it opened, for the tests of process
mode (tests/unit/harness/remote, tests/conformance: importable from both, as `tests/` is on
the path through its conftest.py)."""

from __future__ import annotations

from harness.remote.launcher import ProcessImplementation


class Recording(ProcessImplementation):
    """Keeps the child of every opened instance, to look at its pid and exit status."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.children = []

    def open(self, data_dir, world):
        runtime = super().open(data_dir, world)
        self.children.append(runtime._child)
        return runtime
