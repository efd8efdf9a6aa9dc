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
from dataclasses import dataclass, field
from typing import Mapping

INSTALL_HINT = "pip install -e '.[adapters]'"
OPENPROGRAM_HINT = ("pip install -e '.[openprogram]' (the PyPI release), or pip install -e "
                    "PATH/TO/OpenProgram (a source checkout)")


@dataclass(frozen=True, slots=True)
class AdapterInfo:
    name: str
    impl_spec: str
    """A ``process:`` spec for ``--impl`` (``adapter:NAME`` resolves to it)."""
    installed: bool
    missing_reason: str
    """Empty when installed; otherwise which module is missing and how to install it."""
    not_applicable: Mapping[str, str] = field(default_factory=dict)
    startup_timeout_s: float | None = None
    """A higher ceiling for its server's ``initialize`` (its fork template imports the
    library first); None: the launcher's default."""
    """Criterion id -> why the installed library cannot be judged on it (its capabilities,
    detected without importing it); the suite reports those n/a with the reason."""


@dataclass(frozen=True, slots=True)
class _Adapter:
    name: str
    server_module: str
    server_args: tuple[str, ...]
    needs: tuple[tuple[str, str], ...]
    """(importable module, distribution that provides it)."""
    hint: str = INSTALL_HINT
    startup_timeout_s: float | None = None


_LANGGRAPH_NEEDS = (("langgraph", "langgraph"),
                    ("langgraph.checkpoint.sqlite", "langgraph-checkpoint-sqlite"))
ADAPTERS: tuple[_Adapter, ...] = tuple(
    _Adapter(f"langgraph-{mode}", "harness.adapters.langgraph_server",
             ("--durability", mode), _LANGGRAPH_NEEDS)
    for mode in ("sync", "async", "exit")
) + (
    _Adapter("dbos", "harness.adapters.dbos_server", (), (("dbos", "dbos"),)),
    _Adapter("openprogram", "harness.adapters.openprogram_server", (),
             (("openprogram", "openprogram"),), OPENPROGRAM_HINT, 120.0),
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
                    f"{distribution!r}); install it: {adapter.hint}")
    return ""


def _not_applicable(adapter: _Adapter) -> dict[str, str]:
    if adapter.name != "openprogram":
        return {}
    from harness.adapters.openprogram_runtime import capabilities, not_applicable

    return not_applicable(capabilities())


def available() -> tuple[AdapterInfo, ...]:
    """Every adapter, installed or not, in a stable order."""
    infos = []
    for adapter in ADAPTERS:
        missing = _missing(adapter)
        infos.append(AdapterInfo(adapter.name, process_spec(adapter), not missing, missing,
                                 {} if missing else _not_applicable(adapter),
                                 adapter.startup_timeout_s))
    return tuple(infos)


def find(name: str) -> AdapterInfo | None:
    """The adapter called ``name`` (or an alias of it), installed or not."""
    name = ALIASES.get(name, name)
    for info in available():
        if info.name == name:
            return info
    return None
