"""Containment: the harness opens no path an implementation names, and writes its reports
only where it was told, never through a link, with fresh modes, as one set.

Each case is a hostile input: a declared checkpoint fixture escaping the implementation's
folder (in process, and named as an absolute host path by a process-mode server), a report
dir that is a planted symlink, a setuid file at a report's name, a writer killed mid-set,
and an empty ``--report-dir``.
"""

from __future__ import annotations

import hashlib
import os
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import reference_impl
from harness.cli import app as cli
from harness.contract import CHECKPOINT_FIXTURE_BYTES_MAX, ImplementationInfo
from harness.criteria.base import Status
from harness.criteria.l1 import check_l1_6
from harness.remote.launcher import ProcessImplementation
from harness.report import ReportDirError
from harness.report.report_set import write_set
from harness.running.runner import run_scenario
from harness.scenarios.loader import load
from harness.trace.record import Kind

REPO = Path(__file__).resolve().parents[2]
OLD_CHECKPOINTS = load(REPO / "scenarios" / "l1" / "old_checkpoints.toml")
REFERENCE_DIR = Path(reference_impl.__file__).resolve().parent
V1 = REFERENCE_DIR / "fixtures" / "checkpoints" / "v1_basic.json"
REPORTS = ("junit.xml", "report.html", "report.json", "report.md")


class _Declaring:
    """The reference with other declared fixtures and no checkpoint_fixture method: the
    harness falls back to reading below the implementation's own package (``reference_impl``)."""

    fixture_module = "reference_impl"

    def __init__(self, *fixtures: str) -> None:
        self._base = reference_impl.implementation()
        info = self._base.info
        self.info = ImplementationInfo(info.name, info.version, info.features, fixtures)

    def open(self, data_dir, world):
        return self._base.open(data_dir, world)

    def inspect(self, data_dir):
        return self._base.inspect(data_dir)


def _loads(run):
    return [e.data["args"] for e in run.trace.of_kind(Kind.DRIVER_CALL)
            if e.data.get("method") == "load_checkpoint"]


# --------------------------------------------------------------------------- fixtures


@pytest.mark.parametrize("declared", [
    "../../../../../../../../../etc/v1.json",
    "/etc/v1.json",
    "fixtures/../../../../../../../../../etc/v1.json",
])
def test_a_declared_fixture_escaping_the_package_is_an_error_naming_it(declared):
    run = run_scenario(_Declaring(declared, "fixtures/checkpoints/v2_with_failures.json"),
                       OLD_CHECKPOINTS, 0)
    assert declared in run.error
    assert "outside the implementation's folder" in run.error or "absolute" in run.error
    assert _loads(run) == []  # nothing was loaded from the host


def test_a_symlink_in_the_package_pointing_out_is_an_error(tmp_path, monkeypatch):
    package = tmp_path / "iut_pkg"
    (package / "fixtures").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    secret = tmp_path / "secret.json"
    secret.write_text('{"v": 1, "history": [["user", "secret"]]}')
    (package / "fixtures" / "v1.json").symlink_to(secret)
    monkeypatch.syspath_prepend(str(tmp_path))
    impl = _Declaring("fixtures/v1.json")
    impl.fixture_module = "iut_pkg"
    __import__("iut_pkg")
    run = run_scenario(impl, OLD_CHECKPOINTS, 0)
    assert "fixtures/v1.json" in run.error and str(secret) in run.error
    assert "outside the implementation's folder" in run.error and _loads(run) == []


def test_an_oversized_fixture_offered_in_process_is_an_error():
    class Flooding(_Declaring):
        def checkpoint_fixture(self, name):
            return b"x" * (CHECKPOINT_FIXTURE_BYTES_MAX + 1)

    run = run_scenario(Flooding("fixtures/checkpoints/v1_basic.json"), OLD_CHECKPOINTS, 0)
    assert "larger than" in run.error and _loads(run) == []


def test_the_reference_hands_its_fixtures_over_in_process():
    run = run_scenario(reference_impl.implementation(), OLD_CHECKPOINTS, 0)
    assert run.error == ""
    first = _loads(run)[0]
    assert first["sha256"] == hashlib.sha256(V1.read_bytes()).hexdigest()
    assert first["fixture_content"] and first["expected_messages"]
    assert check_l1_6(run.trace).status is Status.PASS


SERVER_NAMING_HOST_PATHS = """
import os, sys
import reference_impl
from harness.contract import ImplementationInfo
from reference_impl.remote import serve

class Impl(reference_impl.ReferenceImplementation):
    # Declares absolute host paths that do not exist: only asking works.
    def __init__(self):
        super().__init__()
        info = self.info
        self.info = ImplementationInfo(info.name, info.version, info.features, (
            "/nonexistent/lh-containment/v1_basic.json",
            "/nonexistent/lh-containment/v2_with_failures.json"))

    def checkpoint_fixture(self, name):
        return super().checkpoint_fixture("fixtures/checkpoints/" + name.rsplit("/", 1)[1])

out = os.fdopen(os.dup(1), "wb")
os.dup2(2, 1)
sys.exit(serve(Impl(), sys.stdin.buffer, out))
"""


@pytest.mark.process
def test_process_mode_fixtures_come_over_the_protocol(tmp_path):
    server = tmp_path / "server.py"
    server.write_text(textwrap.dedent(SERVER_NAMING_HOST_PATHS))
    with ProcessImplementation([sys.executable, str(server)]) as implementation:
        run = run_scenario(implementation, OLD_CHECKPOINTS, 0)
    assert run.error == ""
    first = _loads(run)[0]
    assert first["path"] == "/nonexistent/lh-containment/v1_basic.json"
    assert first["sha256"] == hashlib.sha256(V1.read_bytes()).hexdigest()
    assert first["fixture_content"]["messages"] and first["expected_messages"]
    assert check_l1_6(run.trace).status is Status.PASS


@pytest.mark.process
def test_process_mode_reference_passes_l1_6():
    with ProcessImplementation([sys.executable, "-m", "reference_impl.remote"]) as implementation:
        run = run_scenario(implementation, OLD_CHECKPOINTS, 0)
    assert run.error == "" and len(_loads(run)) == 2
    assert check_l1_6(run.trace).status is Status.PASS


# --------------------------------------------------------------------------- reports


def _old_set(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name in REPORTS:
        (directory / name).write_bytes(b"old")


def _new_files() -> dict[str, bytes]:
    return {name: b"new " + name.encode() for name in REPORTS}


def test_a_symlinked_report_dir_is_refused_and_its_target_untouched(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("precious")
    link = tmp_path / "reports"
    link.symlink_to(victim)
    with pytest.raises(ReportDirError, match="symbolic link"):
        write_set(link, _new_files())
    assert sorted(os.listdir(victim)) == ["keep.txt"]
    with open(os.devnull, "w") as out, open(tmp_path / "err.txt", "w") as err:
        code = cli.main(["run", "--report-dir", str(link)], stdout=out, stderr=err)
    assert code == 2 and "symbolic link" in (tmp_path / "err.txt").read_text()
    assert sorted(os.listdir(victim)) == ["keep.txt"]


@pytest.mark.parametrize("shared", [False, True])
def test_setuid_victim_mode_is_not_copied_and_links_are_not_followed(tmp_path, shared):
    reports = tmp_path / "reports"
    _old_set(reports)
    if shared:
        (reports / "notes.txt").write_text("the user's")
    os.chmod(reports / "report.json", 0o4755)
    outside = tmp_path / "outside.txt"
    outside.write_text("do not touch")
    os.chmod(outside, 0o4755)
    (reports / "report.md").unlink()
    (reports / "report.md").symlink_to(outside)
    old_umask = os.umask(0o022)
    try:
        write_set(reports, _new_files())
    finally:
        os.umask(old_umask)
    for name in REPORTS:
        info = os.lstat(reports / name)
        assert stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o644, name
        assert (reports / name).read_bytes() == b"new " + name.encode()
    assert outside.read_text() == "do not touch" and stat.S_IMODE(outside.stat().st_mode) == 0o4755
    assert stat.S_IMODE(reports.stat().st_mode) == 0o755
    assert (reports / "notes.txt").exists() == shared


def test_modes_follow_the_umask(tmp_path):
    old_umask = os.umask(0o077)
    try:
        write_set(tmp_path / "a" / "reports", _new_files())
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE((tmp_path / "a" / "reports").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "a" / "reports" / "report.json").stat().st_mode) == 0o600


KILLED_WRITER = """
import os, signal, sys
from harness.report import report_set

calls = []
def dying(*args):
    calls.append(args)
    if len(calls) == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(*args)

real = getattr(report_set, sys.argv[2])
setattr(report_set, sys.argv[2], dying)
report_set.write_set(sys.argv[1], {n: b"new" for n in
                     ("junit.xml", "report.html", "report.json", "report.md")})
"""


def _killed_writer(tmp_path: Path, reports: Path, hook: str) -> None:
    script = tmp_path / "writer.py"
    script.write_text(KILLED_WRITER)
    done = subprocess.run([sys.executable, str(script), str(reports), hook], timeout=60)
    assert done.returncode == -signal.SIGKILL


@pytest.mark.process
def test_a_writer_killed_mid_set_leaves_the_old_set_and_no_leftovers(tmp_path):
    reports = tmp_path / "reports"
    _old_set(reports)
    _killed_writer(tmp_path, reports, "_create")
    assert {n: (reports / n).read_bytes() for n in REPORTS} == {n: b"old" for n in REPORTS}
    write_set(reports, _new_files())  # the next write cleans up after the dead one
    assert sorted(os.listdir(tmp_path)) == ["reports", "writer.py"]
    assert sorted(os.listdir(reports)) == sorted(REPORTS)
    assert all((reports / n).read_bytes().startswith(b"new") for n in REPORTS)


@pytest.mark.process
def test_a_writer_killed_in_a_shared_dir_never_leaves_a_mix(tmp_path):
    reports = tmp_path / "shared"
    _old_set(reports)
    (reports / "notes.txt").write_text("the user's")
    _killed_writer(tmp_path, reports, "write_bytes")
    present = {n: (reports / n).read_bytes() for n in REPORTS if (reports / n).exists()}
    assert present and set(present.values()) == {b"new"}  # part of the new set, no old one
    (reports / ".report.json.lh-0123456789ab.tmp").write_bytes(b"a killed rename's leftover")
    write_set(reports, _new_files())
    assert sorted(os.listdir(reports)) == sorted((*REPORTS, "notes.txt"))


def test_a_failed_write_keeps_the_old_set_and_leaves_nothing(tmp_path, monkeypatch):
    from harness.report import report_set

    reports = tmp_path / "reports"
    _old_set(reports)

    def full(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(report_set, "fsync_dir", full)
    with pytest.raises(OSError):
        write_set(reports, _new_files())
    assert sorted(os.listdir(tmp_path)) == ["reports"]
    assert {n: (reports / n).read_bytes() for n in REPORTS} == {n: b"old" for n in REPORTS}


def test_an_empty_report_dir_exits_2_before_running(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    started = []
    monkeypatch.setattr(cli, "run_suite", lambda *a, **k: started.append(a))
    with open(os.devnull, "w") as out, open(tmp_path / "err.txt", "w") as err:
        code = cli.main(["run", "--report-dir", ""], stdout=out, stderr=err)
    said = (tmp_path / "err.txt").read_text()
    assert code == 2 and "--report-dir" in said and "--report-dir ." in said
    assert started == [] and "fault plans" not in said
    assert sorted(os.listdir(tmp_path)) == ["err.txt"]


@pytest.mark.parametrize("where, says", [
    ("/proc/lh-reports-{}", "cannot be created"),    # the permission bits allow it to root
    ("/sys/lh-reports-{}", "cannot be created"),
    ("/proc/1/task/lh-{}", "cannot be created"),
])
def test_a_report_dir_the_file_system_refuses_exits_2_before_running(tmp_path, monkeypatch,
                                                                      where, says):
    # As root the permission bits of /proc and /sys say "writable": only creating the
    # directory shows it cannot be. That must happen before the suite runs (issue 28: it
    # ran everything, then exited 2 and the results were lost).
    started = []
    monkeypatch.setattr(cli, "run_suite", lambda *a, **k: started.append(a))
    report_dir = where.format(os.getpid())
    with open(os.devnull, "w") as out, open(tmp_path / "err.txt", "w") as err:
        code = cli.main(["run", "--report-dir", report_dir], stdout=out, stderr=err)
    said = (tmp_path / "err.txt").read_text()
    assert code == 2 and started == [], said
    assert f"--report-dir {report_dir!r}" in said
    assert says in said or "not writable" in said, said


def test_a_directory_that_takes_no_files_is_refused_before_running(tmp_path):
    from harness.report import prepare_report_dir

    assert prepare_report_dir(tmp_path / "new" / "reports") is None
    assert (tmp_path / "new" / "reports").is_dir()
    assert os.listdir(tmp_path / "new" / "reports") == []  # the probe file is gone
    problem = prepare_report_dir("/proc/self/fdinfo")
    assert problem is not None and ("does not take files" in problem or "not writable" in problem)
