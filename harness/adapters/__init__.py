"""Real agent runtimes under the contract, as optional extras (``pip install -e '.[adapters]'``).

Each adapter is a wire-protocol server (``docs/protocol.md``) run as a child process, so its
crashes are real ``SIGKILL`` s; ``--impl adapter:NAME`` resolves to its ``process:`` spec.
What each library offers, what it lacks and what the harness found are in the adapter's
module docstring and in ``docs/adapters.md``.

Guarantees: :func:`available` names every adapter, whether its libraries are installed
(found by :func:`importlib.util.find_spec`, nothing imported) and, when not, the missing
distribution and the command that installs it.
"""

from __future__ import annotations

import importlib.util
import shlex
import sys
from dataclasses import dataclass

INSTALL_HINT = "pip install -e '.[adapters]'"


@dataclass(frozen=True, slots=True)
class AdapterInfo:
    name: str
    impl_spec: str
    """A ``process:`` spec for ``--impl`` (``adapter:NAME`` resolves to it)."""
    installed: bool
    missing_reason: str
    """Empty when installed; otherwise which module is missing and how to install it."""


@dataclass(frozen=True, slots=True)
class _Adapter:
    name: str
    server_module: str
    server_args: tuple[str, ...]
    needs: tuple[tuple[str, str], ...]
    """(importable module, distribution that provides it)."""


_LANGGRAPH_NEEDS = (("langgraph", "langgraph"),
                    ("langgraph.checkpoint.sqlite", "langgraph-checkpoint-sqlite"))
ADAPTERS: tuple[_Adapter, ...] = tuple(
    _Adapter(f"langgraph-{mode}", "harness.adapters.langgraph_server",
             ("--durability", mode), _LANGGRAPH_NEEDS)
    for mode in ("sync", "async", "exit")
) + (
    _Adapter("dbos", "harness.adapters.dbos_server", (), (("dbos", "dbos"),)),
)
ALIASES = {"langgraph": "langgraph-sync"}


def process_spec(adapter: _Adapter) -> str:
    argv = [sys.executable, "-m", adapter.server_module, *adapter.server_args]
    return "process:" + shlex.join(argv)


def _missing(adapter: _Adapter) -> str:
    for module, distribution in adapter.needs:
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:  # its parent package is absent
            found = False
        if not found:
            return (f"{adapter.name}: module {module!r} is not installed (distribution "
                    f"{distribution!r}); install the adapters extra: {INSTALL_HINT}")
    return ""


def available() -> tuple[AdapterInfo, ...]:
    """Every adapter, installed or not, in a stable order."""
    infos = []
    for adapter in ADAPTERS:
        missing = _missing(adapter)
        infos.append(AdapterInfo(adapter.name, process_spec(adapter), not missing, missing))
    return tuple(infos)


def find(name: str) -> AdapterInfo | None:
    """The adapter called ``name`` (or an alias of it), installed or not."""
    name = ALIASES.get(name, name)
    for info in available():
        if info.name == name:
            return info
    return None
