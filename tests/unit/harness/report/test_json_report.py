"""report.json validates against fixtures/report.schema.json and round-trips exactly."""

from __future__ import annotations

import copy
import json

import jsonschema
import pytest

from harness.report import json_report


def _validator(schema):
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


@pytest.mark.parametrize("which", ["failing_result", "passing_result"])
def test_report_json_validates_against_the_schema(which, request, report_schema, tmp_path):
    result = request.getfixturevalue(which)
    path = json_report.write(result, tmp_path)
    assert path == tmp_path / "report.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    _validator(report_schema).validate(data)
    assert data["gate_passed"] is result.gate_passed
    assert data["schema_version"] == 6
    assert data["implementation"]["features"] == ["approvals", "auto_mode"]
    for criterion in data["criteria"]:
        for violation in criterion["violations"]:
            assert violation["replay"].startswith("lifecycle-harness replay ")


def test_report_json_round_trips_to_the_same_run_result(failing_result, tmp_path):
    json_report.write(failing_result, tmp_path)
    assert json_report.load(tmp_path / "report.json") == failing_result


def test_schema_rejects_drift(failing_result, report_schema):
    validator = _validator(report_schema)
    good = json_report.to_dict(failing_result)
    bad_status = copy.deepcopy(good)
    bad_status["criteria"][0]["status"] = "green"
    vacuous = copy.deepcopy(good)
    vacuous["criteria"][0]["exercised"] = 0  # a pass must be exercised
    unknown_key = copy.deepcopy(good)
    unknown_key["summary"]["bonus"] = 1
    missing = copy.deepcopy(good)
    del missing["run"]["seed"]
    for data in (bad_status, vacuous, unknown_key, missing):
        assert not validator.is_valid(data)


def test_same_result_gives_the_same_bytes(failing_result):
    assert json_report.dumps(failing_result) == json_report.dumps(failing_result)
