"""harness.cli.report_location: timestamped run dirs, reports/latest, bounded history."""

from __future__ import annotations

import datetime as dt
import os

from harness.cli import report_location as rl

STARTED = dt.datetime(2026, 12, 1, 13, 20, 0, tzinfo=dt.timezone.utc)
REPORTS = {"report.json", "report.md"}


def _run_dir(root, name):
    path = root / name
    path.mkdir(parents=True)
    (path / "report.json").write_text("{}")
    return path


def test_run_dir_names_are_utc_and_never_reused(tmp_path):
    assert rl.run_dir_name(STARTED, "abc123") == "20261201T132000Z-abc123"
    local = STARTED.astimezone(dt.timezone(dt.timedelta(hours=5)))
    assert rl.run_dir_name(local, "abc123") == "20261201T132000Z-abc123"
    first = rl.new_run_dir(tmp_path, STARTED)
    assert rl.RUN_DIR_PATTERN.match(first.name) and not first.exists()


def test_latest_is_a_relative_link_replaced_in_place(tmp_path):
    one = _run_dir(tmp_path, "20261201T132000Z-aaaaaa")
    two = _run_dir(tmp_path, "20261201T132100Z-bbbbbb")
    latest = rl.point_latest(tmp_path, one)
    assert latest.is_symlink() and os.readlink(latest) == one.name
    rl.point_latest(tmp_path, two)
    assert os.readlink(latest) == two.name and rl.resolve_latest(tmp_path) == two.resolve()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([one.name, two.name, "latest"])


def test_without_symlinks_latest_is_a_file_naming_the_dir(tmp_path, monkeypatch):
    def no_links(*args, **kwargs):
        raise OSError("symlinks not permitted")

    monkeypatch.setattr(os, "symlink", no_links)
    run = _run_dir(tmp_path, "20261201T132000Z-aaaaaa")
    latest = rl.point_latest(tmp_path, run)
    assert latest.is_file() and latest.read_text().strip() == run.name
    assert rl.resolve_latest(tmp_path) == run


def test_an_old_layout_latest_directory_is_kept_as_a_run_dir(tmp_path):
    old = tmp_path / "latest"
    old.mkdir()
    (old / "report.json").write_text('{"old": true}')
    new = _run_dir(tmp_path, "20261201T132000Z-bbbbbb")
    rl.point_latest(tmp_path, new)
    kept = [p for p in tmp_path.iterdir() if p.name not in ("latest", new.name)]
    assert len(kept) == 1 and rl.RUN_DIR_PATTERN.match(kept[0].name)
    assert (kept[0] / "report.json").read_text() == '{"old": true}'


def test_prune_keeps_the_newest_and_never_a_foreign_folder(tmp_path):
    runs = [_run_dir(tmp_path, f"20261201T1320{i:02d}Z-aaaaaa") for i in range(5)]
    (runs[0] / "notes.txt").write_text("mine")  # a user's file: that dir stays
    mine = _run_dir(tmp_path, "my-baseline")
    rl.point_latest(tmp_path, runs[1])  # latest is never pruned
    removed = rl.prune(tmp_path, REPORTS, keep=2)
    assert set(removed) == {runs[2]}
    assert all(p.exists() for p in (runs[0], runs[1], runs[3], runs[4], mine))
