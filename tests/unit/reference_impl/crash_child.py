"""Child process for the process-crash tests: run one write turn and die at a failpoint.

Usage: python crash_child.py DATA_DIR LEDGER_JSONL FAILPOINT

The world appends every tool execution to LEDGER_JSONL and calls ``os._exit(137)`` at
FAILPOINT: no ``finally``, no ``atexit``, no clean close: the store keeps only what was
committed.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ref_fakes import WRITE_CALL, FakeWorld, Reply, allow, config  # noqa: E402
from reference_impl import implementation  # noqa: E402


def main(data_dir: str, ledger_path: str, failpoint: str) -> None:
    world = FakeWorld(replies={"s1": [Reply("writing", (WRITE_CALL,))]},
                      ledger_path=ledger_path, exit_at=failpoint)
    runtime = implementation().open(data_dir, world)
    runtime.open_session(config(rules=(allow("write_file"),)))
    runtime.run_turn("s1", "please write a.txt")
    sys.exit(3)  # the failpoint was never reached: the parent reports it


if __name__ == "__main__":
    main(*sys.argv[1:4])
