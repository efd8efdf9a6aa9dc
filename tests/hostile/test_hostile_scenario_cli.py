"""`lifecycle-harness run --scenarios BADFILE`: each hostile file is exit 2 with one line.

Each case was a harness traceback (exit 3), a memory blow-up or a false verdict before the
limits of ``harness/contract/scenario_limits.py``: deep nesting, huge counts and hit numbers, Faker
providers that fail when expanded, nan/inf in tool-call arguments."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from harness.cli.app import main
from harness.contract.errors import EXIT_USAGE_OR_INPUT_ERROR

BASE = """
id = "hostile"
stage = "l4"
[[sessions]]
id = "s1"
rules = [{{ effect = "allow", tool = "write_file" }}]
[[tools]]
name = "write_file"
kind = "write"
[[model]]
tool_calls = [{{ id = "c1", tool = "write_file", args = {{ path = "/repo/a.txt", content = {content} }} }}]
repeat = {repeat}
[[tool_behaviour]]
call = "c1"
behaviour = "hang"
times = {times}
seconds = {seconds}
[[faults]]
failpoint = "after_result_saved"
hits = "{hits}"
action = "crash"
[[steps]]
do = "turn"
text = "go"
"""
SANE = dict(content='"alpha"', repeat="1", times="1", seconds="1.0", hits="1")


def scenario(**changes: str) -> str:
    return BASE.format(**{**SANE, **changes})


CASES = {
    # 1: nesting that made the TOML parser (or a walk after it) recurse past Python's limit
    "inline-tables-340-deep": (scenario(content="{ a = " * 340 + "1" + " }" * 340),
                               "nesting_depth_max"),
    "arrays-2000-deep": (scenario(content="[" * 2000 + "1" + "]" * 2000), "nesting_depth_max"),
    "dotted-key-500-deep": (scenario() + "[files" + ".a" * 500 + "]\nb = 1\n",
                            "nesting_depth_max"),
    # 2: counts, hits, durations, sizes
    "repeat-1e9": (scenario(repeat="1000000000"), "model[0].repeat"),
    "repeat-2**63": (scenario(repeat=str(2**63)), "model[0].repeat"),
    "hits-1e9-chain": (scenario(hits="1000000000*crash"), "faults[0].hits"),
    "hit-of-990-digits": (scenario(hits="9" * 990), "a number of 990 digits"),
    "hit-of-5000-digits": (scenario(hits="9" * 5000), "a hit expression of 5000 characters"),
    "integer-of-5000-digits": (scenario(repeat="9" * 5000), "integer_abs_max"),
    "times-1e12": (scenario(times="1000000000000"), "tool_behaviour[0].times"),
    "seconds-1e300": (scenario(seconds="1e300"), "tool_behaviour[0].seconds"),
    "string-of-300000": (scenario(content='"' + "x" * 300_000 + '"'), "string_chars_max"),
    "array-of-5000": (scenario(content="[" + "1, " * 5000 + "]"), "array_items_max"),
    # 3: Faker providers that pass a name check and fail when expanded
    "faker-enum": (scenario(content='"{{faker:enum}}"'), "faker:enum"),
    "faker-xml": (scenario(content='"{{faker:xml}}"'), "faker:xml"),
    "faker-image": (scenario(content='"{{faker:image}}"'), "faker:image"),
    # 4: values JSON cannot carry
    "nan-argument": (scenario(content="nan"), "model[0].tool_calls[0].args.content"),
    "inf-argument": (scenario(content="-inf"), "model[0].tool_calls[0].args.content"),
    "date-argument": (scenario(content="1979-05-27T07:32:00Z"), "no JSON form"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_hostile_scenario_file_is_exit_2_with_a_one_line_message(name, tmp_path):
    text, expected = CASES[name]
    bad = tmp_path / f"{name}.toml"
    bad.write_text(text, encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()

    code = main(["run", "--scenarios", str(bad), "--report-dir", str(tmp_path / "rep")],
                stdout=out, stderr=err)

    message = err.getvalue().strip()
    assert code == EXIT_USAGE_OR_INPUT_ERROR, message
    assert "\n" not in message and len(message) < 2_000, message
    assert str(bad) in message and expected in message, message
    assert "internal error" not in message
    assert not (tmp_path / "rep" / "report.json").exists()


def test_the_sane_base_file_runs(tmp_path):
    """The cases above differ from a scenario that passes in the one value they name."""
    good = tmp_path / "sane.toml"
    good.write_text(scenario(), encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    code = main(["run", "--scenarios", str(good), "--report-dir", str(tmp_path / "rep")],
                stdout=out, stderr=err)
    # One scenario exercises few criteria, so the gate fails (1); the scenario itself passes.
    assert code in (0, 1), err.getvalue()
    assert "passed hostile" in out.getvalue() + err.getvalue()


def test_a_file_over_the_size_limit_is_refused_before_it_is_read(tmp_path):
    big = tmp_path / "big.toml"
    with big.open("wb") as handle:
        handle.truncate(2 * 1_048_576)  # sparse: no memory or disk spent on the content
    err = io.StringIO()
    code = main(["run", "--scenarios", str(big)], stdout=io.StringIO(), stderr=err)
    assert code == EXIT_USAGE_OR_INPUT_ERROR
    assert "file_bytes_max" in err.getvalue() and str(big) in err.getvalue()


def test_a_device_is_refused_without_reading_it(tmp_path):
    """/dev/zero never ends: reading it whole would exhaust memory."""
    err = io.StringIO()
    code = main(["run", "--scenarios", "/dev/zero"], stdout=io.StringIO(), stderr=err)
    assert code == EXIT_USAGE_OR_INPUT_ERROR
    assert "/dev/zero: not a regular file" in err.getvalue()
    from harness.contract.errors import ScenarioError
    from harness.scenarios.loader import load
    with pytest.raises(ScenarioError, match="not a regular file"):
        load("/dev/zero")
