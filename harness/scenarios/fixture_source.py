"""Where the runner gets a declared checkpoint fixture's content: from the implementation.

Guarantees: the harness never opens a path an implementation names. :func:`fetch` asks an
implementation that offers ``checkpoint_fixture(name)`` (in process, or over the protocol
for ``process:``/``docker:``) for the content; only an in-process implementation without
that method is read from disk, and then only below its own package folder (the outermost
package holding its module, or the module's folder), with the path resolved (symlinks and
``..`` included) and confined to that folder: a declared path that escapes it, or an
absolute one, is a :class:`FixtureError` naming the path. Every answer is size-limited
(:data:`harness.contract.CHECKPOINT_FIXTURE_BYTES_MAX`).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path, PurePosixPath
from typing import Any

from harness.contract import CHECKPOINT_FIXTURE_BYTES_MAX, CheckpointFixture


class FixtureError(Exception):
    """A declared fixture that cannot be had: missing, escaping its root, or too large."""


class FixtureNotFound(FixtureError):
    """The declared fixture is not there."""


def fetch(implementation: Any, declared: str) -> CheckpointFixture:
    """The content (and sidecar messages) of the declared fixture ``declared``."""
    offer = getattr(implementation, "checkpoint_fixture", None)
    if callable(offer):
        return _checked(offer(declared), declared)
    root = package_root(implementation)
    if root is None:
        raise FixtureNotFound(f"checkpoint fixture {declared!r}: the implementation offers no "
                              "checkpoint_fixture(name) and has no package folder to read it from")
    return read_below(root, declared, _module_folder(implementation) or root)


def package_root(implementation: Any) -> Path | None:
    """The implementation's own folder: the outermost package holding its module (named by
    a ``fixture_module`` attribute for a wrapper), else the module's folder."""
    folder = _module_folder(implementation)
    if folder is None:
        return None
    while (folder / "__init__.py").is_file() and (folder.parent / "__init__.py").is_file():
        folder = folder.parent
    return folder


def read_below(root: Path, declared: str, start: Path | None = None) -> CheckpointFixture:
    """``declared`` looked up from ``start`` (default ``root``) up to ``root``, each
    candidate resolved and confined to ``root``; its ``.expect.json`` sidecar likewise."""
    root = root.resolve()
    relative = PurePosixPath(declared.replace(os.sep, "/"))
    if not declared or relative.is_absolute() or Path(declared).is_absolute():
        raise FixtureError(f"checkpoint fixture {declared!r}: an absolute or empty path; "
                           f"declare it relative to the implementation's folder {root}")
    folder = (start or root).resolve()
    if not folder.is_relative_to(root):
        folder = root
    while True:
        candidate = _confined(root, folder / relative, declared)
        if candidate.is_file():
            return CheckpointFixture(_read_limited(candidate, declared),
                                     _sidecar_messages(root, candidate))
        if folder == root:
            raise FixtureNotFound(f"checkpoint fixture {declared!r} was not found below the "
                                  f"implementation's folder {root}")
        folder = folder.parent


def _confined(root: Path, path: Path, declared: str) -> Path:
    resolved = path.resolve()
    if not resolved.is_relative_to(root):
        raise FixtureError(f"checkpoint fixture {declared!r} resolves to {resolved}, outside "
                           f"the implementation's folder {root}; declared fixtures must stay "
                           "inside it")
    return resolved


def _read_limited(path: Path, declared: str) -> bytes:
    with open(path, "rb") as handle:
        data = handle.read(CHECKPOINT_FIXTURE_BYTES_MAX + 1)
    if len(data) > CHECKPOINT_FIXTURE_BYTES_MAX:
        raise FixtureError(f"checkpoint fixture {declared!r} is larger than "
                           f"{CHECKPOINT_FIXTURE_BYTES_MAX} bytes")
    return data


def _sidecar_messages(root: Path, fixture: Path) -> tuple[dict[str, Any], ...] | None:
    """The messages of ``<stem>.expect.json`` / ``<name>.expect.json`` beside ``fixture``."""
    stem = fixture.name.split(".")[0]
    for name in (stem + ".expect.json", fixture.name + ".expect.json"):
        sidecar = fixture.with_name(name)
        if not sidecar.is_file():
            continue
        try:
            resolved = _confined(root, sidecar, name)
            data = json.loads(_read_limited(resolved, name).decode("utf-8"))
        except (FixtureError, OSError, ValueError):
            return None
        return expected_messages(data)
    return None


def expected_messages(data: Any) -> tuple[dict[str, Any], ...] | None:
    """A sidecar document (``{"messages": [...]}`` or the bare list) as messages, or None."""
    if isinstance(data, dict):
        data = data.get("messages")
    if not isinstance(data, list) or not all(isinstance(m, dict) for m in data):
        return None
    return tuple(data)


def _checked(answer: Any, declared: str) -> CheckpointFixture:
    if isinstance(answer, (bytes, bytearray, memoryview)):
        answer = CheckpointFixture(bytes(answer))
    if not isinstance(answer, CheckpointFixture) or not isinstance(answer.content, bytes):
        raise FixtureError(f"checkpoint fixture {declared!r}: checkpoint_fixture() returned "
                           f"{type(answer).__name__}, not bytes or a CheckpointFixture")
    if len(answer.content) > CHECKPOINT_FIXTURE_BYTES_MAX:
        raise FixtureError(f"checkpoint fixture {declared!r} is larger than "
                           f"{CHECKPOINT_FIXTURE_BYTES_MAX} bytes")
    return answer


def _module_folder(implementation: Any) -> Path | None:
    name = getattr(implementation, "fixture_module", None) or type(implementation).__module__
    file = getattr(sys.modules.get(name), "__file__", None)
    return Path(file).resolve().parent if file else None
