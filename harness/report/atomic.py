"""Atomic file writes: a reader sees the old file or the complete new one, never a part.

Guarantees: the content goes to a new temporary file in the destination's own directory
(same file system), created exclusively and never through a symbolic link
(``O_CREAT | O_EXCL | O_NOFOLLOW``), with a fresh mode (``0644`` less the umask, whatever
mode an old file at the destination had: a setuid bit is never carried over); it is flushed
and fsynced, then renamed over the destination with ``os.replace`` (which replaces a
symbolic link at the destination itself, never what it points to); the directory is fsynced
where the platform allows. If anything fails before the rename, the temporary file is
removed and the destination is left untouched.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

FILE_MODE = 0o644
"""Mode of a new report file, before the umask."""
DIR_MODE = 0o755
"""Mode of a new report directory, before the umask."""
TEMP_INFIX = ".lh-"
"""Temporary names are ``.<name>.lh-<random>.tmp``: hidden, and recognisable as ours."""

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_BINARY = getattr(os, "O_BINARY", 0)


def write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Atomically replace ``path`` with ``data``; returns the path written."""
    target = Path(path)
    directory = target.parent
    tmp_name = create_exclusive(directory, f".{target.name}{TEMP_INFIX}", ".tmp", data)
    try:
        os.replace(tmp_name, target)
    except BaseException:
        _unlink_quietly(tmp_name)
        raise
    fsync_dir(directory)
    return target


def write_text(path: str | os.PathLike[str], text: str, encoding: str = "utf-8") -> Path:
    """Atomically replace ``path`` with ``text`` encoded as ``encoding``."""
    return write_bytes(path, text.encode(encoding))


def create_exclusive(directory: Path, prefix: str, suffix: str, data: bytes) -> Path:
    """A new file ``directory/<prefix><random><suffix>`` holding ``data`` (fsynced), created
    exclusively, never through a link, with mode :data:`FILE_MODE` less the umask (the
    kernel applies it). Removed again if writing fails."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC | _BINARY
    while True:
        name = directory / f"{prefix}{secrets.token_hex(6)}{suffix}"
        try:
            fd = os.open(name, flags, FILE_MODE)
            break
        except FileExistsError:
            continue
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        _unlink_quietly(name)
        raise
    return name


def fsync_dir(directory: Path) -> None:
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


def _unlink_quietly(path: str | os.PathLike[str]) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
