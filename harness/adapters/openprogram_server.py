"""``python -m harness.adapters.openprogram_server``: the installed OpenProgram's agent loop,
permission gate, classifier and approvals (:mod:`harness.adapters.openprogram_runtime`)
served over the wire protocol (``docs/protocol.md``), so a crash is a real ``SIGKILL`` at
the failpoint."""

from __future__ import annotations

import sys

from harness.adapters.serve import serve_main


def main(argv: list[str] | None = None) -> int:
    from harness.adapters.openprogram_runtime import OpenProgramImplementation, preload

    return serve_main("openprogram_server", argv, {}, OpenProgramImplementation,
                      preload=preload())


if __name__ == "__main__":
    sys.exit(main())
