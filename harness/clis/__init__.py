"""Real agent CLIs under the harness as black boxes (``--impl cli:NAME``).

Each CLI (Claude Code, the Codex CLI, OpenCode: ``docs/real-systems.md``) is a child process
the driver (:mod:`harness.clis.driver`) starts in a per-case sandbox, serves the world's
model through the model API the CLI speaks (one module per wire API: Anthropic Messages,
OpenAI Responses, Chat Completions), whose tool runs go through the ledger program
(:mod:`harness.clis.tool_command`), whose approvals are answered through the CLI's own
programmatic channel, and which a crash SIGKILLs and a restart resumes with the CLI's own
resume. Nothing is vendored: the CLI is installed from
the npm registry (:attr:`CliInfo.install`) and found on ``PATH`` or at the path given.

Guarantees: :func:`available` names every known CLI, whether its binary is found (nothing
is run to find it) and, when not, the npm command that installs it; :func:`load` returns a
checked :class:`~harness.clis.driver.CliImplementation` or raises
:class:`~harness.contract.errors.ImplementationLoadError` naming the missing binary and its
install command, or a binary that does not answer ``--version``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

from harness.clis.claude_code import ClaudeCode
from harness.clis.codex import Codex
from harness.clis.opencode import OpenCode
from harness.clis.driver import CliImplementation, Dialect
from harness.contract.errors import ImplementationLoadError

DIALECTS: dict[str, Dialect] = {"claude-code": ClaudeCode(), "codex": Codex(),
                                "opencode": OpenCode()}
ALIASES = {"claude": "claude-code"}
PATH_ENV = "LH_CLI_PATH"
"""``--cli-path``: the binary to run instead of the one on PATH (``run`` sets it)."""
VERSION_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class CliInfo:
    name: str
    binary: str
    """The binary's path, or its bare name when it is not found."""
    installed: bool
    install: str
    """The command that installs it (npm, into a local prefix)."""
    missing_reason: str


def install_command(dialect: Dialect) -> str:
    return (f"npm install --prefix ~/.lh-clis {dialect.package} && "
            f"export PATH=~/.lh-clis/node_modules/.bin:$PATH")


def _find(dialect: Dialect, path: str | None) -> str | None:
    if path:
        return path if os.path.isfile(path) and os.access(path, os.X_OK) else None
    return shutil.which(dialect.binary)


def available(path: str | None = None) -> tuple[CliInfo, ...]:
    infos = []
    for name, dialect in DIALECTS.items():
        found = _find(dialect, path)
        missing = "" if found else (
            f"cli:{name}: the {dialect.binary!r} binary is not on PATH; install it from the "
            f"npm registry: {install_command(dialect)} (or give its path with --cli-path)")
        infos.append(CliInfo(name, found or dialect.binary, found is not None,
                             install_command(dialect), missing))
    return tuple(infos)


def load(name: str, path: str | None = None) -> CliImplementation:
    name = ALIASES.get(name.strip(), name.strip())
    dialect = DIALECTS.get(name)
    if dialect is None:
        raise ImplementationLoadError(
            f"--impl cli:{name}: no such CLI; known: {', '.join(DIALECTS)}")
    path = path or os.environ.get(PATH_ENV) or None
    binary = _find(dialect, path)
    if binary is None:
        where = f"at {path!r} (--cli-path)" if path else "on PATH"
        raise ImplementationLoadError(
            f"--impl cli:{name}: the {dialect.binary!r} binary is not {where}; install it "
            f"from the npm registry: {install_command(dialect)}")
    try:
        done = subprocess.run(dialect.version_argv(binary), capture_output=True, text=True,
                              timeout=VERSION_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ImplementationLoadError(
            f"--impl cli:{name}: {binary} --version failed ({exc}); reinstall it: "
            f"{install_command(dialect)}") from exc
    version = (done.stdout.strip().splitlines() or [""])[0]
    if done.returncode != 0 or not version:
        raise ImplementationLoadError(
            f"--impl cli:{name}: {binary} --version exited {done.returncode} "
            f"({done.stderr.strip()[:300]}); reinstall it: {install_command(dialect)}")
    return CliImplementation(dialect, binary, version)
