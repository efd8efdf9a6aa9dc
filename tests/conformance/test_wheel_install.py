"""A built wheel, installed in a fresh venv outside the repository, finds its own bundled
suite and gives the verdicts of the editable install: `run`, `replay`, `list` and the pytest
plugin.

The wheel is built from a copy of the product files (so the test never writes into the
checkout) with this environment's setuptools (offline: --no-build-isolation), and installed
with --no-deps --no-index into a venv created without pip; the venv reaches the installed
dependencies (pytest, faker, pyfakefs…) through a plain path to this environment's
site-packages, whose .pth files, among them the editable install's, are not processed. Every
command runs with its working directory in a temporary folder, so the source tree cannot be
imported.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("pyproject.toml", "README.md", "harness", "reference_impl", "scenarios")
TIMEOUT_S = 1200


def _setuptools_builds_wheels() -> bool:
    try:
        version = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:
        return False
    major, minor = (int(part) for part in re.findall(r"\d+", version)[:2])
    return (major, minor) >= (70, 1)


pytestmark = pytest.mark.process


@pytest.fixture(scope="module")
def wheel_env(tmp_path_factory, run_once):
    """(venv, work dir): the wheel built and installed once per test run, whichever worker
    asks first (conftest.py)."""
    venv, work = run_once("wheel-env", lambda: _build_wheel_env(tmp_path_factory))
    return Path(venv), Path(work)


def _build_wheel_env(tmp_path_factory) -> list[str]:
    if not _setuptools_builds_wheels():
        pytest.skip("needs setuptools>=70.1 in this environment (the test extra installs it) "
                    "to build the wheel offline")
    base = tmp_path_factory.mktemp("wheel")
    source = base / "source"
    source.mkdir()
    for name in PRODUCT:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, source / name)
    dist = base / "dist"
    _check([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
            "--wheel-dir", str(dist), str(source)], cwd=base)
    (wheel,) = dist.glob("lifecycle_harness-*.whl")
    venv = base / "venv"
    _check([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=base)
    python = venv / "bin" / "python"
    _check([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
            "--no-deps", "--no-index", str(wheel)], cwd=base)
    purelib = Path(_check([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          cwd=base).strip())
    outer = [p for p in site.getsitepackages() if Path(p).is_dir()]
    (purelib / "_outer_dependencies.pth").write_text("\n".join(outer) + "\n", encoding="utf-8")
    work = base / "work"
    work.mkdir()
    return [str(venv), str(work)]


def _environment(venv: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTEST_ADDOPTS")}
    if venv is not None:
        env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["VIRTUAL_ENV"] = str(venv)
    return env


def _check(argv, cwd, venv=None) -> str:
    done = subprocess.run(argv, cwd=cwd, env=_environment(venv), capture_output=True, text=True,
                          timeout=TIMEOUT_S)
    assert done.returncode == 0, f"{argv} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _in_venv(wheel_env, *argv, expect=0):
    venv, work = wheel_env
    done = subprocess.run([str(venv / "bin" / argv[0]), *argv[1:]], cwd=work,
                          env=_environment(venv), capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == expect, f"{argv} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_the_venv_imports_the_installed_wheel_and_its_bundled_suite(wheel_env):
    venv, _ = wheel_env
    out = _in_venv(wheel_env, "python", "-c",
                   "import harness, reference_impl, harness.scenarios.loader as s; "
                   "print(harness.__file__); print(reference_impl.__file__); print(s.bundled_suite_dir())")
    for line in out.splitlines():
        assert Path(line).resolve().is_relative_to(venv.resolve()), line
    bundled = Path(out.splitlines()[2])
    assert sorted(p.relative_to(bundled) for p in bundled.rglob("*.toml")) == sorted(
        p.relative_to(ROOT / "scenarios") for p in (ROOT / "scenarios").rglob("*.toml"))


def test_run_in_the_wheel_gives_the_editable_install_s_verdicts(wheel_env, reference_suite_run):
    venv, work = wheel_env
    # A generous hang limit: this compares what the two installs find and judge, and a busy
    # machine must not turn a slow driver call into a "hang" in one of them.
    wheel_log = work / "wheel.log"
    with open(wheel_log, "w") as log:
        wheel_run = subprocess.run(
            [str(venv / "bin" / "lifecycle-harness"), "run", "--time-limit-s", "300",
             "--report-dir", str(work / "wheel-report")],
            cwd=work, env=_environment(venv), stdout=log, stderr=subprocess.STDOUT,
            timeout=TIMEOUT_S)
    # the editable install's side is the session's shared run of the suite (conftest.py)
    assert reference_suite_run.code == 0, reference_suite_run.out[-3000:]
    assert wheel_run.returncode == 0, wheel_log.read_text()[-3000:]
    wheel = json.loads((work / "wheel-report" / "report.json").read_text(encoding="utf-8"))
    editable = reference_suite_run.report

    def verdicts(report):
        return ({c["id"]: (c["status"], c["exercised"]) for c in report["criteria"]},
                {s["id"]: (s["status"], s["trace_digest"]) for s in report["scenarios"]})

    assert verdicts(wheel) == verdicts(editable)
    assert {status for status, _ in verdicts(wheel)[0].values()} == {"passed"}
    assert len(wheel["criteria"]) == 55


def test_replay_and_list_of_the_bundled_suite_in_the_wheel(wheel_env):
    listed = _in_venv(wheel_env, "lifecycle-harness", "list", "scenarios")
    assert "l1-old-checkpoints" in listed and "l4-crash-after-result-saved" in listed
    bundled = _in_venv(wheel_env, "python", "-c",
                       "import harness.scenarios.loader as s; print(s.bundled_suite_dir())").strip()
    replayed = _in_venv(wheel_env, "lifecycle-harness", "replay",
                        str(Path(bundled) / "l1" / "old_checkpoints.toml"), "--seed", "0")
    assert "L1.6" in replayed


def test_the_pytest_plugin_in_the_wheel_collects_the_bundled_suite(wheel_env):
    from harness.scenarios.loader import DEFAULT_SCENARIO_DIR, discover

    total = len(discover([DEFAULT_SCENARIO_DIR]))
    # One pytest process, the plugin loaded from the wheel's entry point: it collects the
    # whole bundled suite, then runs two; a probe lists the harness's modules pytest
    # assert-rewrote (it marks every package of a plugin's distribution; the plugin unmarks
    # its own, which otherwise were compiled from source at every run that used it).
    ran = _in_venv(wheel_env, "python", "-c", PROBE, "-p", "no:cacheprovider", "-rA",
                   "--lifecycle-impl", "reference", "-k", "l1-old-checkpoints or m-eof-without-text")
    assert f"collected {total} items / {total - 2} deselected / 2 selected" in ran, ran
    assert re.search(rf"2 passed, {total - 2} deselected", ran), ran
    assert "lifecycle gate PASSED: partial run: 2 of" in ran
    rewritten = json.loads(re.search(r"^REWRITTEN (.*)$", ran, re.M).group(1))
    assert rewritten["imported"] > 50  # the run imported the harness and the reference
    assert rewritten["rewritten"] == ["harness", "harness.pytest_plugin"], rewritten


# pytest.main as `python -m pytest` runs it (entry points autoloaded), plus a probe
PROBE = r"""
import json, sys, pytest
class Probe:
    def pytest_sessionfinish(self):
        own = sorted(n for n in sys.modules if n.split(".")[0] in ("harness", "reference_impl"))
        rewritten = [n for n in own if type(getattr(sys.modules[n], "__loader__", None)).__name__
                     == "AssertionRewritingHook"]
        print("\nREWRITTEN " + json.dumps({"imported": len(own), "rewritten": rewritten}))
sys.exit(pytest.main(sys.argv[1:], plugins=[Probe()]))
"""
