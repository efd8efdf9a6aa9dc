"""junit.xml parses, has one testcase per criterion, and maps statuses as promised."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from harness.report import junit


def _criteria_suite(path):
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["ref<impl> criteria", "ref<impl> scenarios"]
    return root, suites[0], suites[1]


def test_one_testcase_per_criterion_with_status_mapping(failing_result, tmp_path):
    path = junit.write(failing_result, tmp_path)
    root, criteria, scenarios = _criteria_suite(path)
    cases = criteria.findall("testcase")
    assert len(cases) == len(failing_result.criteria)
    by_id = {case.get("name").split(":")[0]: case for case in cases}
    assert set(by_id) == {c.id for c in failing_result.criteria}
    assert by_id["L4.1"].get("classname") == "ref<impl>.l4"

    failure = by_id["L4.1"].find("failure")
    assert failure is not None and failure.get("type") == "failed"
    assert "lifecycle-harness replay scenarios/l4/crash.toml --seed 7 --impl reference" in failure.text
    assert '<script>alert("x")</script>' in failure.text  # evidence kept (escaped by XML)
    assert "\x00" not in failure.text
    assert "L4.1 — statement L4.1\nSource (design document, Chinese): 「clause L4.1」" in failure.text
    assert "seed clause" not in failure.text
    assert ">   18 world   tool_executed" in failure.text  # every cited event, not only the first
    assert "cited ledger rows:" in failure.text and '{"ledger_seq":1,"tool":"write_file"}' in failure.text
    assert by_id["L4.2"].find("error") is not None
    assert by_id["L2.3"].find("failure").get("type") == "not_exercised"
    assert by_id["L5.3"].find("skipped") is not None and by_id["L5.3"].find("failure") is None
    assert "issue 12" in by_id["M1"].find("skipped").get("message")
    for cid in ("X1", "M2"):
        assert by_id[cid].find("failure") is None and by_id[cid].find("error") is None

    assert (criteria.get("tests"), criteria.get("failures"), criteria.get("errors"), criteria.get("skipped")) == (
        "7", "2", "1", "2",
    )
    props = {p.get("name"): p.get("value") for p in criteria.iter("property")}
    assert props["seed"] == "7" and props["implementation"] == "ref<impl>"


def test_errored_scenario_shows_as_an_error(failing_result, tmp_path):
    _, _, scenarios = _criteria_suite(junit.write(failing_result, tmp_path))
    by_name = {case.get("name"): case for case in scenarios.findall("testcase")}
    assert "hung in run_turn" in by_name["l4-hang"].find("error").text
    assert by_name["l4-crash"].find("failure") is not None
    assert by_name["x-ok"].find("failure") is None


def test_passing_run_has_no_failures(passing_result, tmp_path):
    root, criteria, _ = _criteria_suite(junit.write(passing_result, tmp_path))
    assert root.get("failures") == "0" and root.get("errors") == "0"
    assert criteria.get("skipped") == "1"
