"""Threads abandoned after a hang, and the taint a surviving one leaves on its implementation.

A thread cannot be killed. After a hang the runner raises :class:`Abandoned` into the
abandoned call's thread (CPython delivers it at the next bytecode, so a busy loop in Python
ends; a call blocked in C or one that swallows it does not). A thread that survives taints
its implementation: the remaining scenarios of that implementation each run in a forked
worker process (:func:`harness.running.runner.run_scenario`), which holds only the forking thread,
so they neither share the interpreter lock with the spinning thread nor inherit it; the
worker exits after its scenario, taking whatever it started with it. Where fork is
unavailable the later results say that they ran beside it.

Guarantees: :func:`stop_abandoned` waits at most :data:`STOP_GRACE_S` of wall clock per
thread; :func:`still_running` is ``""`` exactly when no thread an earlier hang of this
implementation left behind is alive (dead ones are forgotten as they are found).
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

from harness.running.driving.calls import Call

STOP_GRACE_S = 1.0
"""How long (wall clock) the runner waits for an abandoned thread to end after a hang."""
STOP_ATTEMPTS = 10
CAN_FORK = hasattr(os, "fork") and sys.platform != "emscripten"
TAINTS: dict[int, tuple[Any, list[str], list[threading.Thread]]] = {}
"""id(implementation) -> (the implementation, kept so the id stays its own; the hangs'
descriptions; the abandoned threads still running)."""


class Abandoned(BaseException):
    """Raised asynchronously into the thread of a driver call the runner gave up on."""


def stop_abandoned(abandoned: list[tuple[str, Call]]) -> list[tuple[str, threading.Thread]]:
    """Try to end each abandoned call's thread; the ones still running afterwards."""
    import ctypes

    alive = []
    for method, call in abandoned:
        thread = call.thread
        for _ in range(STOP_ATTEMPTS):
            if call.done or not thread.is_alive() or thread.ident is None:
                break
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident),
                                                       ctypes.py_object(Abandoned))
            thread.join(STOP_GRACE_S / STOP_ATTEMPTS)
        if not call.done and thread.is_alive():
            alive.append((method, thread))
    return alive


def describe(threads: list[tuple[str, threading.Thread]]) -> str:
    return ", ".join(f"{method} (thread {thread.name!r})" for method, thread in threads)


def taint(implementation: Any, scenario_id: str, threads: list[tuple[str, threading.Thread]]
          ) -> None:
    _, hangs, alive = TAINTS.setdefault(id(implementation), (implementation, [], []))
    hangs.append(f"{describe(threads)} from the hang in scenario {scenario_id}")
    alive.extend(thread for _, thread in threads)


def still_running(implementation: Any) -> str:
    """"" unless threads abandoned in an earlier hang of this implementation still run."""
    entry = TAINTS.get(id(implementation))
    if entry is None:
        return ""
    _, hangs, alive = entry
    alive[:] = [thread for thread in alive if thread.is_alive()]
    if not alive:
        del TAINTS[id(implementation)]
        return ""
    return (f"{len(alive)} thread(s) abandoned after a hang still run in the harness "
            f"process ({'; '.join(hangs)})")
