"""benchmarks/bench_harness.py: which exits a timed suite run may have, and the adapters'
figures (installed ones only, ratios from their own numbers); no timing asserted."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
_SPEC = importlib.util.spec_from_file_location("bench_harness",
                                               ROOT / "benchmarks" / "bench_harness.py")
bench_harness = importlib.util.module_from_spec(_SPEC)
sys.modules.setdefault("bench_harness", bench_harness)
_SPEC.loader.exec_module(bench_harness)


def _fake_cli(monkeypatch, code: int, scenarios: int = 3) -> list[tuple[str, ...]]:
    calls = []

    def cli(*argv: str) -> int:
        calls.append(argv)
        report_dir = Path(argv[argv.index("--report-dir") + 1])
        report_dir.mkdir(parents=True)
        (report_dir / "report.json").write_text(json.dumps({"scenarios": [{}] * scenarios}))
        return code

    monkeypatch.setattr(bench_harness, "_cli", cli)
    return calls


@pytest.mark.parametrize("code, allowed, measured", [
    (0, (0,), True), (1, (0,), False), (1, (0, 1), True), (2, (0, 1), False),
    (3, (0, 1), False)])
def test_a_suite_run_is_measured_only_with_an_exit_it_may_have(monkeypatch, tmp_path, code,
                                                                allowed, measured):
    calls = _fake_cli(monkeypatch, code)
    if measured:
        figures = bench_harness._suite("adapter:dbos", str(tmp_path), exit_codes=allowed)
        assert figures["scenarios"] == 3
    else:
        with pytest.raises(SystemExit, match=f"exited {code}"):
            bench_harness._suite("adapter:dbos", str(tmp_path), exit_codes=allowed)
    ((_, _, impl, *_),) = calls
    assert impl == "adapter:dbos"


class _Info:
    def __init__(self, name: str, installed: bool) -> None:
        self.name, self.installed = name, installed
        self.impl_spec = f"process:python -m {name}_server"


def test_only_installed_adapters_are_timed_and_their_ratios_are_their_own(monkeypatch, tmp_path):
    import harness.adapters

    monkeypatch.setattr(harness.adapters, "available",
                        lambda: (_Info("one", True), _Info("two", False)))
    started, ran = [], []

    def instance_start(samples, spec):
        started.append(spec)
        return {"forked_cpu_s": 0.02, "spawned_cpu_s": 2.0}

    def suite(impl, root, time_limit_s, exit_codes=(0,)):
        ran.append((impl, exit_codes))
        return {"wall_s": 30.0, "cpu_s": 45.0, "scenarios": 170, "scenarios_per_s": 5.67}

    monkeypatch.setattr(bench_harness, "_instance_start", instance_start)
    monkeypatch.setattr(bench_harness, "_suite", suite)
    figures = bench_harness._adapters(str(tmp_path), {"wall_s": 10.0, "cpu_s": 15.0}, None)
    assert list(figures) == ["one"]
    assert started == ["process:python -m one_server"]
    assert ran == [("adapter:one", (0, 1))]  # an adapter's findings exit 1
    assert figures["one"]["wall_ratio_to_reference"] == 3.0
    assert figures["one"]["cpu_ratio_to_reference"] == 3.0
    assert figures["one"]["instance_spawned_cpu_s"] == 2.0
