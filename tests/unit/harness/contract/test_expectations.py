"""Expectation files load into criterion → reason, and every bad file names file, key and fix."""

import pytest

from harness.contract.errors import ExpectationsError
from harness.contract.expectations import load_expectations


def _write(tmp_path, text):
    path = tmp_path / "expect.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_entries_map_criterion_to_reason_with_link(tmp_path):
    path = _write(tmp_path, '''
[[expected_fail]]
criterion = "L4.1"
reason = "re-executes writes after a crash"
link = "https://tracker.example/R-1"

[[expected_fail]]
criterion = "M5"
reason = "EOF taken as an answer"
''')
    assert load_expectations(path) == {
        "L4.1": "re-executes writes after a crash (https://tracker.example/R-1)",
        "M5": "EOF taken as an answer",
    }


def test_an_empty_file_expects_nothing(tmp_path):
    assert load_expectations(_write(tmp_path, "")) == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[[expected_fail]]\ncriterion = 'L4.1'\n", r"expected_fail\[1\]\.reason: say why L4\.1"),
        ("[[expected_fail]]\nreason = 'x'\n", r"expected_fail\[1\]\.criterion"),
        ("[[expected_fail]]\ncriterion = 'L4.1'\nreason = 'x'\nowner = 'me'\n", r"unknown key\(s\) \['owner'\]"),
        ("[expectations]\n", r"unknown top-level key"),
        ("[[expected_fail]\n", r"not valid TOML"),
        (
            "[[expected_fail]]\ncriterion = 'X1'\nreason = 'a'\n[[expected_fail]]\ncriterion = 'X1'\nreason = 'b'\n",
            r"X1 is listed twice",
        ),
    ],
)
def test_bad_files_are_rejected_with_file_and_key(tmp_path, text, message):
    path = _write(tmp_path, text)
    with pytest.raises(ExpectationsError, match=message) as info:
        load_expectations(path)
    assert str(path) in str(info.value)


def test_missing_file_is_an_expectations_error(tmp_path):
    with pytest.raises(ExpectationsError, match="not found"):
        load_expectations(tmp_path / "nope.toml")


def test_expected_errors_load_beside_expected_failures(tmp_path):
    from harness.contract.expectations import ExpectedError, load_expectation_file

    path = _write(tmp_path, '''
[[expected_fail]]
criterion = "L4.1"
reason = "re-executes writes after a crash"

[[expected_error]]
scenario = "x-reconciliation-only-when-honest"
cause = "fault 2: after_result_saved"
reason = "the deny path passes no failpoint"
link = "https://tracker.example/R-2"
''')
    loaded = load_expectation_file(path)
    assert loaded.criteria == {"L4.1": "re-executes writes after a crash"}
    (error,) = loaded.errors
    assert error == ExpectedError("x-reconciliation-only-when-honest",
                                  "fault 2: after_result_saved",
                                  "the deny path passes no failpoint (https://tracker.example/R-2)")
    assert loaded.error_for("x-reconciliation-only-when-honest") == (error,)
    assert loaded.error_for("other") == ()
    assert error.matches("x-reconciliation-only-when-honest",
                         "planned but not carried out: fault 2: after_result_saved, hit #2")
    assert not error.matches("x-reconciliation-only-when-honest", "hung in run_turn")
    assert not error.matches("other", "fault 2: after_result_saved")
    assert load_expectations(path) == {"L4.1": "re-executes writes after a crash"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[[expected_error]]\ncause = 'x'\nreason = 'r'\n", r"expected_error\[1\]\.scenario"),
        ("[[expected_error]]\nscenario = 's'\nreason = 'r'\n", r"expected_error\[1\]\.cause"),
        ("[[expected_error]]\nscenario = 's'\ncause = ' '\nreason = 'r'\n",
         r"expected_error\[1\]\.cause"),
        ("[[expected_error]]\nscenario = 's'\ncause = 'x'\n",
         r"expected_error\[1\]\.reason: say why s is expected to error"),
        ("[[expected_error]]\nscenario = 's'\ncause = 'x'\nreason = 'r'\ncriterion = 'X1'\n",
         r"unknown key\(s\) \['criterion'\]"),
        ("[[expected_error]]\nscenario = 's'\ncause = 'x'\nreason = 'a'\n"
         "[[expected_error]]\nscenario = 's'\ncause = 'x'\nreason = 'b'\n", r"listed twice"),
        ("expected_error = 3\n", r"expected_error must be an array of tables"),
    ],
)
def test_bad_expected_errors_are_rejected_with_file_and_key(tmp_path, text, message):
    from harness.contract.expectations import load_expectation_file

    path = _write(tmp_path, text)
    with pytest.raises(ExpectationsError, match=message) as info:
        load_expectation_file(path)
    assert str(path) in str(info.value)
