"""The pytest plugin in real pytest runs (pytester): usage errors, collection, -k selection,
a mutant failing its criterion, expectations, pytest-xdist.

Runs are in-process (a fresh pytest session that loads the plugin through its ``pytest11``
entry point, as any run does) except the xdist run, where separate processes are the point.
A pytest subprocess pays the interpreter start and the assertion rewriting of
every plugin package (hypothesis, faker, pyfakefs…) again, seconds each on a busy machine."""

import json
import re
from pathlib import Path

import jsonschema
import pytest

# What a plugin run imports lazily, imported before pytester snapshots sys.modules: an
# in-process run drops every module it imported first, so without these each run would
# import (and compile) the harness again. Hypothesis's pytest plugin imports hypothesis at
# every session's end (its terminal summary).
import hypothesis.internal.observability  # noqa: F401
import harness.criteria.catalogue  # noqa: F401
import harness.contract.expectations  # noqa: F401
import harness.criteria.fault_coverage  # noqa: F401
import harness.implementations.specs  # noqa: F401
import harness.running.keyword_selection  # noqa: F401
import harness.report  # noqa: F401
import harness.running.runner  # noqa: F401
import harness.scenarios.loader  # noqa: F401
import harness.mutants.catalogue  # noqa: F401
import harness.running.suite  # noqa: F401
import harness.world  # noqa: F401
import reference_impl  # noqa: F401

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[4]
SCENARIOS = ROOT / "scenarios"
SCHEMA = json.loads((ROOT / "fixtures" / "report.schema.json").read_text(encoding="utf-8"))
# Three quick scenarios of three stages: l4 (tagged crash), m (model streams), l1 (fixtures).
CRASH = SCENARIOS / "l4" / "crash_after_start_recorded.toml"
EOF = SCENARIOS / "m" / "eof_without_text.toml"
OLD = SCENARIOS / "l1" / "old_checkpoints.toml"


def _scenario_args(*paths):
    return [arg for path in paths for arg in ("--lifecycle-scenarios", str(path))]


ALL3 = _scenario_args(CRASH, EOF, OLD)


def _run(pytester, *args):
    return pytester.runpytest_inprocess("-p", "no:cacheprovider", *args)


def _run_subprocess(pytester, *args):
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)


def _items(out: str, outcome: str) -> set[str]:
    return set(re.findall(rf"^{outcome} \S*lifecycle::(\S+)", out, re.M))


def _table(out: str) -> dict[str, str]:
    return dict(re.findall(r"^([XLM][0-9.]+)\s+(\w+)\s+exercised \d+$", out, re.M))


def test_the_plugin_stays_out_of_runs_that_do_not_ask_for_it(pytester):
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = _run(pytester, "-q")
    result.assert_outcomes(passed=1)
    assert "lifecycle" not in result.stdout.str()


class _Hook:
    def __init__(self, marked: set[str]) -> None:
        self._must_rewrite = marked
        self._marked_for_rewrite_cache = {"harness.running.suite": True}


class _Manager:
    def __init__(self, hook: object) -> None:
        self.rewrite_hook = hook


def test_the_plugin_unmarks_only_its_own_packages_for_assert_rewriting():
    from harness.pytest_plugin import _not_rewritten

    hook = _Hook({"harness", "reference_impl", "faker", "my_plugin"})
    _not_rewritten(_Manager(hook))
    assert hook._must_rewrite == {"faker", "my_plugin"}
    assert hook._marked_for_rewrite_cache == {}  # no earlier answer outlives the change
    # (a real wheel install, with pytest's own hook: tests/conformance/test_wheel_install.py)
    # pytest's private state absent or different: nothing to unmark, no error
    _not_rewritten(_Manager(None))
    _not_rewritten(_Manager(_Hook(frozenset({"harness"}))))  # type: ignore[arg-type]
    _not_rewritten(object())  # type: ignore[arg-type]


@pytest.mark.parametrize("args, message", [
    (["--lifecycle-impl", "python:no_such_module_xyz:make"], "no_such_module_xyz"),
    (["--lifecycle-impl", "reference", "--lifecycle-expectations", "missing.toml"],
     "expectations file not found"),
    (["--lifecycle-impl", "reference", "--lifecycle-scenarios", "no/such/dir"],
     "no such scenario file or directory"),
    (["--lifecycle-impl", "reference", *ALL3, "--lifecycle-require-features", "warp"],
     "unknown feature 'warp'"),
])
def test_bad_input_is_one_usage_error_line_and_nothing_runs(pytester, args, message):
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = _run(pytester, "-q", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("ERROR: lifecycle-harness: ")
    assert message in errors[0]
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    assert "passed" not in result.stdout.str()


def test_an_unknown_criterion_in_the_expectations_is_a_usage_error(pytester):
    expectations = pytester.makefile(".toml", expect='[[expected_fail]]\ncriterion = "L9.9"\nreason = "x"\n')
    result = _run(pytester, "--lifecycle-impl", "reference", *ALL3,
                  "--lifecycle-expectations", str(expectations))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "unknown criterion id(s) L9.9" in result.stderr.str()


def test_collect_only_lists_one_item_per_scenario_and_k_selects_by_stage_criterion_tag(pytester):
    result = _run(pytester, "--collect-only", "-q", "--lifecycle-impl", "reference", *ALL3)
    assert result.ret == 0
    listed = set(re.findall(r"^lifecycle::(\S+)$", result.stdout.str(), re.M))
    assert listed == {"l4-crash-after-start-recorded", "m-eof-without-text", "l1-old-checkpoints"}
    assert "3 tests collected" in result.stdout.str()

    def selected(expression):
        out = _run(pytester, "--collect-only", "-q", "--lifecycle-impl", "reference", *ALL3,
                   "-k", expression).stdout.str()
        return set(re.findall(r"^lifecycle::(\S+)$", out, re.M))

    assert selected("L4") == {"l4-crash-after-start-recorded"}       # the stage's criteria
    assert selected("M2") == {"m-eof-without-text"}                  # a criterion id
    assert selected("crash") == {"l4-crash-after-start-recorded"}    # a tag
    assert selected("l1 or m") == {"m-eof-without-text", "l1-old-checkpoints"}
    assert selected("not lifecycle") == set()


def test_k_runs_only_the_selected_scenarios_and_the_rest_of_the_criteria_are_not_selected(pytester):
    result = _run(pytester, "-rA", "--lifecycle-impl", "reference", *ALL3, "-k", "M2")
    out = result.stdout.str()
    assert result.ret == 0, out
    assert _items(out, "PASSED") == {"m-eof-without-text"}
    assert "2 deselected" in out
    assert _table(out) == {"M2": "passed"}
    assert "not selected (54)" in out and "not exercised" not in out.split("lifecycle conformance")[-1].split("lifecycle gate")[0]
    assert "lifecycle gate PASSED" in out and "no level claimed by a partial run" in out


def test_a_mutant_fails_its_scenario_and_criterion_and_xdist_gives_the_same_verdicts(
        pytester, monkeypatch):
    def run(runner, *extra):
        report_dir = pytester.path / f"reports{len(extra)}"
        result = runner(pytester, "-rA", "--lifecycle-impl", "mutant:eof-reported-completed", *ALL3,
                      "--lifecycle-report-dir", str(report_dir), *extra)
        return result, json.loads((report_dir / "report.json").read_text())

    plain, plain_report = run(_run, "-p", "no:xdist")
    out = plain.stdout.str()
    assert plain.ret == pytest.ExitCode.TESTS_FAILED
    assert _items(out, "FAILED") == {"m-eof-without-text"}
    assert _items(out, "PASSED") == {"l4-crash-after-start-recorded", "l1-old-checkpoints"}
    assert "M2 End status: failed" in out and "stored as completed" in out
    assert "replay: lifecycle-harness replay" in out and "--impl mutant:eof-reported-completed" in out
    table = _table(out)
    assert table["M2"] == "failed" and table["M5"] == "failed" and table["L1.6"] == "passed"
    assert "lifecycle gate FAILED: partial run: 3 of 3 scenarios" in out

    # Three pytest processes (the controller, two workers): each would assertion-rewrite
    # every autoloaded plugin's package (hypothesis, faker, pyfakefs); the run needs two
    # plugins, named here (the entry point itself is what the in-process runs load).
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    spread, spread_report = run(_run_subprocess, "-p", "xdist.plugin", "-p",
                                "harness.pytest_plugin", "-n", "2")
    assert "2 workers" in spread.stdout.str() or "gw1" in spread.stdout.str()
    assert spread.ret == pytest.ExitCode.TESTS_FAILED
    assert _table(spread.stdout.str()) == table

    def verdicts(report):
        return ([(c["id"], c["status"], c["exercised"], c["scenarios_exercising"]) for c in report["criteria"]],
                [(s["id"], s["status"], s["trace_digest"]) for s in report["scenarios"]])

    assert verdicts(spread_report) == verdicts(plain_report)
    jsonschema.validate(plain_report, SCHEMA)
    assert [s["id"] for s in plain_report["scenarios"]] == [
        "l4-crash-after-start-recorded", "m-eof-without-text", "l1-old-checkpoints"]


def test_expected_failures_xfail_and_an_unexpected_pass_is_strict_unless_lenient(pytester):
    expectations = pytester.makefile(".toml", expect=(
        '[[expected_fail]]\ncriterion = "M2"\nreason = "known"\n'
        '[[expected_fail]]\ncriterion = "M5"\nreason = "known"\n'))
    known = _run(pytester, "-rA", "--lifecycle-impl", "mutant:eof-reported-completed",
                 *_scenario_args(EOF), "--lifecycle-expectations", str(expectations))
    out = known.stdout.str()
    assert known.ret == 0, out
    assert _items(out, "XFAIL") == {"m-eof-without-text"}
    assert _table(out)["M2"] == "expected_fail"

    strict = _run(pytester, "--lifecycle-impl", "reference", *_scenario_args(EOF),
                  "--lifecycle-expectations", str(expectations))
    out = strict.stdout.str()
    assert strict.ret == pytest.ExitCode.TESTS_FAILED
    assert _table(out)["M2"] == "unexpected_pass"
    assert "M2 passed but is listed as expected to fail (known): fails the gate; remove it from the expectations file" in out

    lenient = _run(pytester, "--lifecycle-impl", "reference", *_scenario_args(EOF),
                   "--lifecycle-expectations", str(expectations), "--lifecycle-lenient-expectations")
    assert lenient.ret == 0
    assert "reported (lenient); remove it from the expectations file" in lenient.stdout.str()
