"""``python -m harness.adapters.dbos_server``: the DBOS adapter
(:mod:`harness.adapters.dbos_runtime`) served over the wire protocol (``docs/protocol.md``),
so a crash is a real ``SIGKILL`` at the failpoint."""

from __future__ import annotations

import sys

from harness.adapters.serve import serve_main


def main(argv: list[str] | None = None) -> int:
    def factory() -> object:
        from harness.adapters.dbos_adapter import DBOSImplementation

        return DBOSImplementation()

    return serve_main("dbos_server", argv, {}, factory,
                      preload=("harness.adapters.dbos_runtime",))


if __name__ == "__main__":
    sys.exit(main())
