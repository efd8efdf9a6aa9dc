"""Where a run's reports go when ``--report-dir`` is not given.

Each run gets its own directory ``reports/<UTC start>-<run id>/`` (e.g.
``reports/20261201T132000Z-3fa9c1/``), and ``reports/latest`` points at the newest: a
relative symbolic link, or, where links cannot be made, a small text file ``latest``
holding the directory's name.

Guarantees:

* :func:`new_run_dir` names a directory that does not exist yet (a clash draws another id);
* :func:`point_latest` replaces ``latest`` atomically (a reader sees the old target or the
  new one); an old-layout ``reports/latest`` *directory* (reports written before this
  layout) is renamed to a run directory first, never deleted;
* :func:`prune` keeps the newest ``keep`` run directories and removes older ones only when
  they match the run-directory name pattern and hold nothing but report files, so a folder
  a user keeps there is never removed.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import secrets
import shutil
from pathlib import Path
from typing import Collection

REPORTS_ROOT = "reports"
LATEST = "latest"
KEEP_RUNS = 20
RUN_DIR_PATTERN = re.compile(r"^\d{8}T\d{6}Z-[0-9a-f]{6}$")


def run_dir_name(started: _dt.datetime, run_id: str | None = None) -> str:
    stamp = started.astimezone(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{run_id or secrets.token_hex(3)}"


def new_run_dir(root: str | os.PathLike[str], started: _dt.datetime) -> Path:
    """A fresh ``root/<UTC stamp>-<id>`` path (not created)."""
    while True:
        candidate = Path(root) / run_dir_name(started)
        if not os.path.lexists(candidate):
            return candidate


def point_latest(root: str | os.PathLike[str], run_dir: str | os.PathLike[str]) -> Path:
    """Make ``root/latest`` point at ``run_dir`` (a child of ``root``); returns its path."""
    root = Path(root)
    latest = root / LATEST
    target = Path(run_dir).name
    if latest.is_dir() and not latest.is_symlink():
        _retire_old_layout(latest)
    temporary = root / f".{LATEST}.lh-{os.getpid()}-{secrets.token_hex(3)}.tmp"
    try:
        os.symlink(target, temporary, target_is_directory=True)
    except (OSError, NotImplementedError):
        temporary.write_text(target + "\n", encoding="utf-8")
    try:
        os.replace(temporary, latest)
    except OSError:
        temporary.unlink(missing_ok=True)
        raise
    return latest


def resolve_latest(root: str | os.PathLike[str]) -> Path | None:
    """The directory ``root/latest`` points at (link or file form), or None."""
    latest = Path(root) / LATEST
    if latest.is_symlink() or latest.is_dir():
        return latest.resolve() if latest.exists() else None
    if latest.is_file():
        name = latest.read_text(encoding="utf-8").strip()
        return Path(root) / name if name and (Path(root) / name).is_dir() else None
    return None


def _retire_old_layout(latest: Path) -> None:
    stamp = _dt.datetime.fromtimestamp(latest.stat().st_mtime, _dt.timezone.utc)
    os.rename(latest, new_run_dir(latest.parent, stamp))


def prune(root: str | os.PathLike[str], report_names: Collection[str],
          keep: int = KEEP_RUNS) -> tuple[Path, ...]:
    """Remove run directories beyond the newest ``keep``; returns those removed."""
    root = Path(root)
    try:
        entries = sorted(e.name for e in os.scandir(root)
                         if RUN_DIR_PATTERN.match(e.name) and e.is_dir(follow_symlinks=False))
    except OSError:
        return ()
    current = resolve_latest(root)
    removed = []
    for name in entries[:-keep] if keep > 0 else entries:
        path = root / name
        if current is not None and path.resolve() == current:
            continue
        if _holds_only_reports(path, report_names):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return tuple(removed)


def _holds_only_reports(directory: Path, report_names: Collection[str]) -> bool:
    try:
        return all(name in report_names for name in os.listdir(directory))
    except OSError:
        return False
