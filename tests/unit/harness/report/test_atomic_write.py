"""Atomic writes: all or nothing; write_reports writes every format."""

from __future__ import annotations

import os

import pytest

from harness.report import atomic, write_reports


def test_write_replaces_the_whole_file(tmp_path):
    target = tmp_path / "r.txt"
    atomic.write_text(target, "old")
    atomic.write_text(target, "new content")
    assert target.read_text() == "new content"
    assert os.listdir(tmp_path) == ["r.txt"]
    assert target.stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize("failing", ["fsync", "replace"])
def test_failed_write_leaves_no_partial_file(tmp_path, monkeypatch, failing):
    target = tmp_path / "report.json"

    def boom(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic.os, failing, boom)
    with pytest.raises(OSError):
        atomic.write_text(target, "x" * 10_000)
    assert os.listdir(tmp_path) == []

    monkeypatch.undo()
    atomic.write_text(target, "old")
    monkeypatch.setattr(atomic.os, failing, boom)
    with pytest.raises(OSError):
        atomic.write_text(target, "new")
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["report.json"]


def test_write_reports_writes_every_format(failing_result, tmp_path):
    paths = write_reports(failing_result, tmp_path / "deep" / "dir")
    assert set(paths) == {"json", "junit", "markdown", "html"}
    assert sorted(p.name for p in paths.values()) == ["junit.xml", "report.html", "report.json", "report.md"]
    assert all(p.is_file() and p.stat().st_size > 0 for p in paths.values())
    assert sorted(os.listdir(tmp_path / "deep" / "dir")) == ["junit.xml", "report.html", "report.json", "report.md"]
