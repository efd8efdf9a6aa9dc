"""Writing the reports as one set, into a directory checked before the run.

Guarantees of :func:`write_set`:

* never through a symbolic link: a report dir that is a link is refused, every file is
  created anew (``O_CREAT | O_EXCL | O_NOFOLLOW``), and an old file or link at a report's
  name is replaced or unlinked, never written through;
* fresh modes: files ``0644``, directories ``0755``, both less the umask; nothing is copied
  from what was there before (a setuid bit included);
* one set: when the report dir holds nothing but reports, the new set is written into a
  hidden staging directory beside it and swapped in by rename (an atomic exchange where the
  system has ``renameat2``), so a reader or a kill sees the old set or the new one, never a
  new ``report.json`` beside an old ``report.html``. A report dir shared with other files
  (``.``, say) cannot be swapped: there the old reports are unlinked first and each new one
  is renamed into place, so a kill can leave part of the new set but never a mix;
* no leftovers: a failed write removes its staging files; staging directories of a writer
  that died (its pid is gone) are removed by the next write beside them.

:func:`check_report_dir` says, before anything runs, why a directory cannot take the reports;
:func:`prepare_report_dir` does that and then creates the directory and a probe file in it,
so a directory the permission bits allow but the file system refuses (``/proc``, ``/sys``, a
read-only mount, as root) is refused before the run, not after it.
"""

from __future__ import annotations

import ctypes
import errno
import os
import secrets
import shutil
from pathlib import Path
from typing import Mapping

from harness.report.atomic import DIR_MODE, FILE_MODE, TEMP_INFIX, fsync_dir, write_bytes

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_BINARY = getattr(os, "O_BINARY", 0)
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


class ReportDirError(ValueError):
    """The report directory cannot take the reports; the message says why and what to do."""


def check_report_dir(report_dir: str | os.PathLike[str]) -> str | None:
    """Why ``report_dir`` cannot take the reports, or None when it can (it need not exist:
    then its nearest existing parent must be a writable directory)."""
    text = os.fspath(report_dir)
    if text == "":
        return ("the report directory is empty text; name a directory, e.g. --report-dir "
                "reports (or --report-dir . for the current directory)")
    path = Path(text)
    if path.is_symlink():
        return (f"{text} is a symbolic link; reports are never written through a link: give "
                "the directory it points to, or another path")
    if path.exists():
        if not path.is_dir():
            return f"{text} exists and is not a directory; give a directory path"
        if not os.access(path, os.W_OK | os.X_OK):
            return f"{text} is not writable by this user; give a writable directory"
        return None
    parent = path.absolute().parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        return f"{text} cannot be created: {parent} is not a directory"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"{text} cannot be created: {parent} is not writable by this user"
    return None


def prepare_report_dir(report_dir: str | os.PathLike[str]) -> str | None:
    """Like :func:`check_report_dir`, then create the directory (with its parents) and a
    probe file in it (removed at once): why it cannot take the reports, or None."""
    problem = check_report_dir(report_dir)
    if problem is not None:
        return problem
    text = os.fspath(report_dir)
    path = Path(text)
    try:
        path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    except OSError as exc:
        return (f"{text} cannot be created: {exc.strerror or exc}; give a directory on a "
                "writable file system")
    probe = path / f".lh-probe-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, FILE_MODE)
    except OSError as exc:
        return (f"{text} does not take files: {exc.strerror or exc}; give a directory on a "
                "writable file system")
    os.close(fd)
    try:
        os.unlink(probe)
    except OSError:
        pass
    return None


def write_set(report_dir: str | os.PathLike[str], files: Mapping[str, bytes]) -> dict[str, Path]:
    """Write ``files`` (file name → content) into ``report_dir`` as one set (see the module
    guarantees); returns file name → path written."""
    problem = check_report_dir(report_dir)
    if problem is not None:
        raise ReportDirError(problem)
    target = Path(os.fspath(report_dir))
    names = tuple(files)
    if (target.name in ("", ".", "..") or _is_cwd(target)
            or (target.exists() and not _holds_only(target, names))):
        _write_in_place(target, files)
    elif not _swap_in(target, files):
        _write_in_place(target, files)
    return {name: target / name for name in names}


# --------------------------------------------------------------------------- the swap


def _swap_in(target: Path, files: Mapping[str, bytes]) -> bool:
    """Stage the set beside ``target`` and rename it in; False when no staging directory
    can be made beside it (e.g. the parent is not writable)."""
    parent = target.absolute().parent
    parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    _remove_orphans(parent, target.name)
    try:
        staging = _make_staging(parent, target.name)
    except PermissionError:
        return False
    try:
        for name, data in files.items():
            _create(staging / name, data)
        fsync_dir(staging)
        try:
            old = _exchange(staging, target)
        except OSError:  # e.g. the dir is a mount point: it cannot be swapped
            shutil.rmtree(staging, ignore_errors=True)
            return False
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    fsync_dir(parent)
    return True


def _exchange(staging: Path, target: Path) -> Path | None:
    """Put ``staging`` at ``target``; returns where the old directory went (to delete)."""
    if not target.exists():
        try:
            os.rename(staging, target)
            return None
        except OSError as exc:  # created meanwhile: exchange with it below
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
    if _renameat2_exchange(staging, target):
        return staging
    # No atomic exchange here: the old set moves aside first, so the name is briefly
    # missing, but never holds a mixed set.
    aside = staging.with_name(staging.name + "-old")
    os.rename(target, aside)
    try:
        os.rename(staging, target)
    except OSError:
        os.rename(aside, target)
        raise
    return aside


def _renameat2_exchange(first: Path, second: Path) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                          ctypes.c_uint]
    renameat2.restype = ctypes.c_int
    done = renameat2(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second),
                     _RENAME_EXCHANGE)
    return done == 0


def _is_cwd(target: Path) -> bool:
    try:
        return target.exists() and target.samefile(os.getcwd())
    except OSError:
        return False


def _make_staging(parent: Path, name: str) -> Path:
    while True:
        staging = parent / f".{name}{TEMP_INFIX}{os.getpid()}-{secrets.token_hex(4)}"
        try:
            os.mkdir(staging, DIR_MODE)
            return staging
        except FileExistsError:
            continue


def _remove_orphans(parent: Path, name: str) -> None:
    """Staging directories beside ``name`` whose writer (the pid in the name) is gone."""
    prefix = f".{name}{TEMP_INFIX}"
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return
    for entry in entries:
        if not entry.name.startswith(prefix) or not entry.is_dir(follow_symlinks=False):
            continue
        pid_text = entry.name[len(prefix):].split("-", 1)[0]
        if pid_text.isdigit() and not _alive(int(pid_text)):
            shutil.rmtree(entry.path, ignore_errors=True)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _create(path: Path, data: bytes) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC | _BINARY
    fd = os.open(path, flags, FILE_MODE)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


# --------------------------------------------------------------------------- shared dir


def _holds_only(directory: Path, names: tuple[str, ...]) -> bool:
    """Does ``directory`` hold nothing but these report names (and our temporary files)?"""
    try:
        entries = os.listdir(directory)
    except OSError:
        return False
    return all(entry in names or (entry.startswith(".") and TEMP_INFIX in entry)
               for entry in entries)


def _write_in_place(target: Path, files: Mapping[str, bytes]) -> None:
    target.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    stale = tuple(f".{name}{TEMP_INFIX}" for name in files)
    for entry in os.listdir(target):  # temporary files of a writer killed before its rename
        if entry.startswith(stale) and entry.endswith(".tmp"):
            try:
                os.unlink(target / entry)
            except OSError:
                pass
    for name in files:  # old reports (or links planted at their names) go first
        try:
            os.unlink(target / name)
        except FileNotFoundError:
            pass
        except IsADirectoryError:
            raise ReportDirError(f"{target / name} is a directory; remove it or choose another "
                                 "--report-dir") from None
    fsync_dir(target)
    for name, data in files.items():
        write_bytes(target / name, data)
