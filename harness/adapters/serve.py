"""Serve an adapter over the wire protocol (the reference's server, another factory).

Guarantees: a bad command-line option ends the process with status 2 and a one-line message
on stderr naming the option, the valid values and the fix; stdout carries protocol messages
only (file descriptor 1 is pointed at stderr, as ``reference_impl.remote`` does). Given the
harness's fork socket, the process offers the fork server (``docs/protocol.md``) as the
reference's does: it imports the adapter's libraries once (``preload``) and every instance
and inspector is forked from it, instead of each being a new process importing them (one to
two seconds of CPU each for LangGraph or DBOS).
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any, Callable

EXIT_BAD_OPTION = 2


def serve_main(program: str, argv: list[str] | None,
               options: dict[str, tuple[tuple[str, ...], str]],
               factory: Callable[..., Any], preload: tuple[str, ...] = ()) -> int:
    """Parse ``--NAME VALUE`` options (each with its valid values and default), build the
    implementation with them and serve it on stdin/stdout; as a fork template when the
    harness passed a fork socket, after importing the modules ``preload`` names (what every
    instance needs and the implementation imports only when it opens one)."""
    args = list(sys.argv[1:] if argv is None else argv)
    chosen = {name: default for name, (_, default) in options.items()}
    while args:
        flag = args.pop(0)
        name = flag[2:] if flag.startswith("--") else ""
        if name not in options or not args:
            return _bad(program, f"unknown option or missing value at {flag!r}", options)
        value = args.pop(0)
        if value not in options[name][0]:
            return _bad(program, f"--{name} {value!r} is not one of "
                        f"{', '.join(options[name][0])}", options)
        chosen[name] = value
    from reference_impl.remote import ForkTemplate, fork_socket_from_environment, serve

    protocol_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    fork_socket = fork_socket_from_environment()
    if fork_socket is not None:
        for module in preload:
            importlib.import_module(module)
        return ForkTemplate(lambda: factory(**chosen), fork_socket, sys.stdin.fileno(),
                            protocol_out).run()
    return serve(factory(**chosen), sys.stdin.buffer, protocol_out)


def _bad(program: str, problem: str, options: dict[str, tuple[tuple[str, ...], str]]) -> int:
    usage = " ".join(f"[--{name} {'|'.join(values)}]" for name, (values, _) in options.items())
    print(f"{program}: {problem}; usage: python -m harness.adapters.{program} {usage}",
          file=sys.stderr)
    return EXIT_BAD_OPTION
