"""``python -m harness.adapters.langgraph_server [--durability sync|async|exit]``: the
LangGraph adapter (:mod:`harness.adapters.langgraph_runtime`) served over the wire protocol
(``docs/protocol.md``), so a crash is a real ``SIGKILL`` at the failpoint."""

from __future__ import annotations

import sys

from harness.adapters.serve import serve_main


def main(argv: list[str] | None = None) -> int:
    from harness.adapters.langgraph_runtime import DURABILITY_MODES, LangGraphImplementation

    return serve_main("langgraph_server", argv, {
        "durability": (DURABILITY_MODES, "sync")}, LangGraphImplementation,
        preload=("langgraph.config", "langgraph.graph", "langgraph.types",
                 "langgraph.checkpoint.sqlite"))


if __name__ == "__main__":
    sys.exit(main())
