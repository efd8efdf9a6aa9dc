"""Escaped processes: the harness is its children's *child subreaper* (Linux).

A process an implementation starts can leave every trace the launcher's sweep follows: it
double-forks (its parent is gone), calls ``setsid`` (its own session and group), closes
every descriptor (no pipe of ours) and re-executes itself with an empty environment (no
mark). The kernel still knows one thing: with ``prctl(PR_SET_CHILD_SUBREAPER)`` set on the
harness process, every orphan among its descendants is re-parented to it, not to init. So
such a process ends up a *child of the harness in a session the harness did not start*.

Guarantees:

* :func:`become_subreaper` sets the attribute once per process (it is not inherited by a
  fork: a worker process calls it again when it starts children); False where the platform
  has no ``prctl`` (then only the sweep by session, group, parent, mark and pipes applies);
* :func:`spawning` is held while a child is started and its pid registered (:func:`adopt`),
  and :func:`escaped` takes it too: a child being started is never taken for an escaped one;
* :func:`escaped` finds this process's children that it did not start (pid not registered
  by :func:`adopt`) and that live in a session other than its own (no child the harness
  starts with ``subprocess`` in its own session, e.g. the ``docker`` client, can be one:
  a process can never join a session it was not born in), and all their descendants;
  SIGKILLs them, reaps those that are its children (bounded), and returns them as ``(pid,
  command line)``; orphans that already ended (zombies) are reaped and not reported. It
  repeats until a scan finds nothing new (at most :data:`ROUNDS` times), so one forked
  while it killed is found too;
* in a process forked from a subreaper (a ``--jobs`` worker), orphans of the processes it
  started through its parent (instances forked by the parent's fork template) go to the
  parent, not to it: :func:`escaped` with ``since`` also kills and returns the parent's
  children in another session that the parent had not registered when it forked this
  process and that started at ``since`` or later (clock ticks since boot: the start of the
  child whose end is being handled, before which none of its descendants can have started);
  the parent reaps them.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from typing import Iterable

PR_SET_CHILD_SUBREAPER = 36
ROUNDS = 4
"""Scans of one :func:`escaped` call at most (a process forking while being killed)."""
REAP_WAIT_S = 1.0
"""How long :func:`escaped` waits for a killed child to become reapable."""
COMMAND_CHARS = 120
"""How much of a stray's command line a report quotes."""

_PROC = "/proc"
_SPAWNING = threading.RLock()
_ADOPTED: set[int] = set()
_ADOPTED_BY = 0
"""The pid whose children :data:`_ADOPTED` lists (a forked copy starts an empty set)."""
_SUBREAPER_OF = 0
_PARENT: tuple[int, frozenset[int]] | None = None
"""In a process forked from a subreaper: (its pid, the children it had registered)."""


def _forked() -> None:
    global _PARENT
    parent = os.getppid()
    _PARENT = None
    if _SUBREAPER_OF == parent:
        _PARENT = (parent, frozenset(_ADOPTED) if _ADOPTED_BY == parent else frozenset())


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


def become_subreaper() -> bool:
    """Make this process the child subreaper of its descendants (once per process)."""
    global _SUBREAPER_OF
    pid = os.getpid()
    if _SUBREAPER_OF == pid:
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        done = libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
    if done:
        _SUBREAPER_OF = pid
    return done


def spawning() -> threading.RLock:
    """The lock to hold from before a child is started until :func:`adopt` registered it."""
    return _SPAWNING


def _adopted() -> set[int]:
    global _ADOPTED_BY
    if _ADOPTED_BY != os.getpid():  # a forked copy: its parent's children are not its own
        _ADOPTED.clear()
        _ADOPTED_BY = os.getpid()
    return _ADOPTED


def adopt(pid: int) -> None:
    """Register ``pid`` as a child this process started on purpose."""
    with _SPAWNING:
        _adopted().add(pid)


def forget(pid: int, reap: bool = False) -> None:
    """``pid`` has ended and was reaped (``reap``: reap it here if it is a child of ours,
    e.g. an instance re-parented to us when its fork template died): the number may be
    reused by anything."""
    if reap:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass  # its template's to reap
    with _SPAWNING:
        _adopted().discard(pid)


def _table() -> dict[int, tuple[int, int, str, int]]:
    """pid -> (parent, session, state, start ticks) of every process (Linux ``/proc``)."""
    table = {}
    try:
        entries = os.listdir(_PROC)
    except OSError:
        return {}
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"{_PROC}/{entry}/stat", "rb") as handle:
                fields = handle.read().rpartition(b")")[2].split()
        except OSError:
            continue
        if len(fields) >= 20:
            table[int(entry)] = (int(fields[1]), int(fields[3]),
                                 fields[0].decode("ascii", "replace"), int(fields[19]))
    return table


def command_of(pid: int) -> str:
    """The command line of ``pid`` (its name when the command line is empty), shortened."""
    try:
        with open(f"{_PROC}/{pid}/cmdline", "rb") as handle:
            text = handle.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        text = ""
    if not text:
        try:
            with open(f"{_PROC}/{pid}/comm", "rb") as handle:
                text = f"[{handle.read().decode('utf-8', 'replace').strip()}]"
        except OSError:
            text = "?"
    return text if len(text) <= COMMAND_CHARS else text[:COMMAND_CHARS] + "..."


def _descendants(table: dict[int, tuple[int, int, str, int]], roots: Iterable[int]
                 ) -> set[int]:
    found = set(roots)
    changed = True
    while changed:
        changed = False
        for pid, (ppid, _, _, _) in table.items():
            if pid not in found and ppid in found:
                found.add(pid)
                changed = True
    return found


def _reap(pids: Iterable[int], wait_s: float) -> None:
    """Collect the exit of each of ``pids`` (children of ours) within ``wait_s`` overall."""
    pending = set(pids)
    deadline = time.monotonic() + wait_s
    while pending:
        for pid in list(pending):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid  # not (or no longer) ours to reap
            if done:
                pending.discard(pid)
        if not pending or time.monotonic() > deadline:
            return
        time.sleep(0.01)


def escaped(since: int | None = None) -> list[tuple[int, str]]:
    """Kill and return every process that escaped into this process's care, and (``since``
    given, in a process forked from a subreaper) into its parent's (module doc)."""
    parent = _PARENT if since is not None and _PARENT is not None \
        and _PARENT[0] == os.getppid() else None
    if not os.path.isdir(_PROC) or (_SUBREAPER_OF != os.getpid() and parent is None):
        return []
    own, session = os.getpid(), os.getsid(0)
    mine = _SUBREAPER_OF == own
    reported: dict[int, str] = {}
    with _SPAWNING:
        adopted = set(_adopted())
        for _ in range(ROUNDS):
            table = _table()
            roots = {pid for pid, (ppid, sid, _, _) in table.items()
                     if mine and ppid == own and sid != session and pid not in adopted}
            theirs = set() if parent is None else {
                pid for pid, (ppid, sid, state, start) in table.items()
                if ppid == parent[0] and sid != session and pid not in parent[1]
                and pid not in adopted and state != "Z" and start >= (since or 0)}
            ended = {pid for pid in roots if table[pid][2] == "Z"}
            live = {pid for pid in _descendants(table, (roots - ended) | theirs)
                    if table[pid][2] != "Z" and pid not in reported}
            for pid in sorted(live):
                reported[pid] = command_of(pid)
            for pid in sorted(live):
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            _reap(ended | (live & roots), REAP_WAIT_S)
            if not live and not ended:
                break
    return sorted(reported.items())
