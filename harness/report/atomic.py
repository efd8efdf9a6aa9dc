"""Atomic file writes: a reader sees the old file or the complete new one, never a part.

Guarantees: the content goes to a temporary file in the destination's own directory (same
file system), is flushed and fsynced, then renamed over the destination with ``os.replace``;
the directory is fsynced where the platform allows. If anything fails before the rename,
the temporary file is removed and the destination is left untouched.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Atomically replace ``path`` with ``data``; returns the path written."""
    target = Path(path)
    directory = target.parent
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            _set_mode(handle.fileno(), target)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, target)
    except BaseException:
        try:
            os.unlink(tmp_name)
        except FileNotFoundError:
            pass
        raise
    _fsync_dir(directory)
    return target


def write_text(path: str | os.PathLike[str], text: str, encoding: str = "utf-8") -> Path:
    """Atomically replace ``path`` with ``text`` encoded as ``encoding``."""
    return write_bytes(path, text.encode(encoding))


def _set_mode(fd: int, target: Path) -> None:
    """Keep the destination's mode, or make a new file readable like an ordinary one
    (``mkstemp`` creates 0600)."""
    try:
        mode = target.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o644
    if hasattr(os, "fchmod"):
        os.fchmod(fd, mode)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # e.g. Windows cannot open directories
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
