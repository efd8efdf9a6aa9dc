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
