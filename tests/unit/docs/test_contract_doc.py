"""docs/contract.md stays true: each documented example is recomputed with the harness's own
functions, each vocabulary equals the harness's constant, and the feature and event tables
equal what ``harness.contract.conformance`` and the criteria use. A page that drifts fails here."""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import itertools
import json
import re
from pathlib import Path

import pytest

import reference_impl
from harness import contract as c
from harness.contract.conformance import OPTIONAL, scenario_requirements
from harness.faults.plan import describe, make_fault
from harness.running.runner import run_scenario
from harness.scenarios.loader import DEFAULT_SCENARIO_DIR, discover, load
from harness.trace.record import Kind

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "contract.md"
TEXT = DOC.read_text(encoding="utf-8")
FENCE = re.compile(r"^```(contract-example|contract-list) (\w+)\n(.*?)^```", re.M | re.S)


def blocks(kind: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for match in FENCE.finditer(TEXT):
        if match.group(1) == kind:
            found.setdefault(match.group(2), []).append(match.group(3))
    return found


EXAMPLES = {name: [json.loads(body) for body in bodies]
            for name, bodies in blocks("contract-example").items()}
LISTS = {name: [line.split("#", 1)[0].strip() for line in body[0].splitlines()
                if line.split("#", 1)[0].strip()]
         for name, body in blocks("contract-list").items()}


def table_rows(heading: str) -> list[list[str]]:
    """The body rows of the first markdown table after ``heading`` (cells stripped)."""
    start = TEXT.index(heading)
    lines = TEXT[start:].splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[first + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def ticked(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def sha256_prefixed(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------- the parser itself


def test_the_page_has_every_example_and_list_this_test_knows():
    assert set(EXAMPLES) == {"canonical_json", "canonical_refused", "execution_id",
                             "args_digest", "result_digest", "projection", "thresholds",
                             "crash_fault"}
    assert set(LISTS) == set(ENUM_LISTS) | {"projection_statuses", "RecoveryAction",
                                            "CORE_FEATURES"}


# --------------------------------------------------------------------------- formulas


def test_canonical_json_example():
    assert len(EXAMPLES["canonical_json"]) >= 4  # plain, escapes, floats, non-BMP names
    for example in EXAMPLES["canonical_json"]:
        assert c.canonical_json(example["value"]) == example["canonical"]
    # the page's examples hold what RFC 8785 changed: floats, and a name past U+FFFF
    assert any(isinstance(v, float) for e in EXAMPLES["canonical_json"]
               for v in e["value"].values())
    assert any(max(k) > "\uffff" for e in EXAMPLES["canonical_json"] for k in e["value"])


def test_what_the_page_says_has_no_canonical_text_is_refused_as_it_says():
    for example in EXAMPLES["canonical_refused"]:
        with pytest.raises(c.CanonicalJsonError) as refused:
            c.canonical_json(example["value"])
        assert example["refused"] in str(refused.value)


def test_execution_id_example_and_its_spelled_out_formula():
    for example in EXAMPLES["execution_id"]:
        session, call = example["session_id"], example["tool_call_id"]
        assert c.execution_id_for(session, call) == example["execution_id"]
        by_hand = "ex-" + hashlib.sha256(f"{session}\x00{call}".encode()).hexdigest()[:16]
        assert by_hand == example["execution_id"]


def test_args_digest_example_hashes_the_documented_text():
    for example in EXAMPLES["args_digest"]:
        hashed = c.canonical_json({"tool": example["tool"], "args": example["args"]})
        assert hashed == example["hashed"]
        assert c.args_digest(example["tool"], example["args"]) == example["args_digest"]
        assert sha256_prefixed(example["hashed"]) == example["args_digest"]


def test_result_digest_example_hashes_the_documented_text():
    for example in EXAMPLES["result_digest"]:
        hashed = c.canonical_json({"status": example["status"], "output": example["output"]})
        assert hashed == example["hashed"]
        assert c.result_digest(example["status"], example["output"]) == example["result_digest"]
        assert sha256_prefixed(example["hashed"]) == example["result_digest"]


def test_projection_examples_are_what_expected_projection_says():
    assert len(EXAMPLES["projection"]) >= 3
    for example in EXAMPLES["projection"]:
        status, actions = c.expected_projection(
            c.Permission(example["permission"]), c.Outcome(example["outcome"]),
            c.DecisionSource(example["decided_by"]),
            c.FailureKind(example["failure_kind"]) if example["failure_kind"] else None,
            example["reconciliation_required"], example["wait_pending"])
        assert status == example["status"]
        assert {a.value for a in actions} == set(example["recovery_actions"])


def test_the_crash_fault_is_described_as_the_runner_handles_it():
    for example in EXAMPLES["crash_fault"]:
        fault = make_fault(example["failpoint"], example["hits"], "crash")
        assert describe(fault) == example["described"]


def test_default_thresholds_are_the_contracts():
    (example,) = EXAMPLES["thresholds"]
    assert example == c.to_json(c.Thresholds())
    assert example["failure_table_capacity"] == c.FAILURE_TABLE_CAPACITY


# --------------------------------------------------------------------------- vocabularies

ENUM_LISTS: dict[str, type[enum.Enum]] = {
    "Permission": c.Permission, "Outcome": c.Outcome, "Delivery": c.Delivery,
    "DecisionSource": c.DecisionSource, "ClassifierOutcome": c.ClassifierOutcome,
    "FailureKind": c.FailureKind, "ModelRequestStatus": c.ModelRequestStatus,
    "TurnStatus": c.TurnStatus, "WaitStatus": c.WaitStatus,
}


@pytest.mark.parametrize("name", sorted(ENUM_LISTS))
def test_each_enum_vocabulary_is_the_contracts(name):
    assert LISTS[name] == [member.value for member in ENUM_LISTS[name]]


def every_projection() -> set[tuple[str, tuple[str, ...]]]:
    out = set()
    for permission, outcome, source, kind, reconcile, pending in itertools.product(
            c.Permission, c.Outcome, c.DecisionSource, (None, *c.FailureKind),
            (False, True), (False, True)):
        status, actions = c.expected_projection(permission, outcome, source, kind, reconcile,
                                                pending)
        out.add((status, tuple(a.value for a in actions)))
    return out


def test_projection_statuses_and_actions_are_all_expected_projection_can_give():
    produced = every_projection()
    assert sorted(LISTS["projection_statuses"]) == sorted({status for status, _ in produced})
    assert LISTS["RecoveryAction"] == [a.value for a in c.RecoveryAction]
    assert {a for _, actions in produced for a in actions} == set(LISTS["RecoveryAction"])


def test_the_lifecycle_projection_table_names_every_status():
    lifecycle = (ROOT / "docs" / "lifecycle.md").read_text(encoding="utf-8")
    rows = table_rows_of(lifecycle, "## What the UI shows")
    assert {ticked(row[1])[0] for row in rows} == set(LISTS["projection_statuses"])


def table_rows_of(text: str, heading: str) -> list[list[str]]:
    lines = text[text.index(heading):].splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[first + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


# --------------------------------------------------------------------------- features


def test_core_features_are_the_contracts():
    assert sorted(LISTS["CORE_FEATURES"]) == sorted(f.value for f in c.CORE_FEATURES)


def test_the_feature_table_is_harness_conformance_optional():
    rows = table_rows("| optional feature | criteria it gates |")
    documented = {(ticked(row[0])[0], tuple(x.strip() for x in row[1].split(",")),
                   "" if row[2] == "(none)" else row[2]) for row in rows}
    actual = {(o.feature.value, o.criteria, o.implied_by) for o in OPTIONAL}
    assert documented == actual


def test_the_behaviour_table_is_what_shows_each_feature_and_the_way_out_without_it():
    rows = table_rows("| optional feature | shown when")
    documented = {(ticked(row[0])[0], row[1], row[2]) for row in rows}
    assert documented == {(o.feature.value, o.shown_by, o.without) for o in OPTIONAL}


def test_the_feature_table_names_the_bundled_scenarios_written_for_each_feature():
    documented = {ticked(row[0])[0]: set(ticked(row[3])) for row in
                  table_rows("| optional feature | criteria it gates |")}
    actual: dict[str, set[str]] = {o.feature.value: set() for o in OPTIONAL}
    for scenario in discover([DEFAULT_SCENARIO_DIR]):
        relative = Path(scenario.file).resolve().relative_to(DEFAULT_SCENARIO_DIR.resolve())
        if relative.parts[0] == "regressions":
            continue  # recorded from the files below; the page says so
        for feature in scenario_requirements(scenario):
            actual[feature.value].add(relative.as_posix())
    assert documented == actual
    assert actual["multi_instance"] and actual["checkpoint_import"]  # the scan works


# --------------------------------------------------------------------------- types


def documented_types() -> dict[str, list[str]]:
    """``#### `Name` `` heading of "Types, field by field" -> the fields its table lists."""
    start = TEXT.index("## Types, field by field")
    section = TEXT[start:TEXT.index("\n## ", start + 1)]
    found: dict[str, list[str]] = {}
    for match in re.finditer(r"^#### `(\w+)`", section, re.M):
        rows = table_rows_of(section[match.start():], match.group(0))
        found[match.group(1)] = [ticked(row[0])[0] for row in rows]
    return found


def test_every_field_of_every_type_is_explained_in_order():
    types = {name: [f.name for f in dataclasses.fields(value)] for name, value in vars(c).items()
             if isinstance(value, type) and dataclasses.is_dataclass(value)}
    assert len(types) > 25  # the scan sees the face
    assert documented_types() == types


# --------------------------------------------------------------------------- events


def documented_event_fields() -> dict[str, tuple[str, ...]]:
    rows = table_rows("| event type |")
    return {ticked(row[0])[0]: tuple(ticked(row[1])) for row in rows}


def test_the_event_table_is_event_fields_read():
    assert documented_event_fields() == {t.value: f for t, f in c.EVENT_FIELDS_READ.items()}


_READS = (
    re.compile(r'get\("type"\)\s*(?:==|!=|in)\s*"(\w+)"'),
    re.compile(r'get\("type"\)\s*(?:==|!=)\s*EventType\.(\w+)\.value'),
    re.compile(r'lifecycle_of\(trace,\s*"(\w+)"'),
    re.compile(r'_events_by_request\(trace,\s*"(\w+)"'),
)


def event_types_the_criteria_read() -> set[str]:
    found = set()
    for path in (ROOT / "harness" / "criteria").glob("*.py"):
        source = path.read_text(encoding="utf-8")
        for pattern in _READS:
            for name in pattern.findall(source):
                found.add(c.EventType[name].value if name.isupper() else name)
    return found


def test_every_event_type_a_criterion_reads_is_documented():
    read = event_types_the_criteria_read()
    assert {"model_request_ended", "result_saved", "turn_ended"} <= read  # the scan works
    assert read <= set(documented_event_fields())


def test_the_reference_emits_every_documented_field():
    # A passing implementation must be able to meet the table: the reference does.
    scenario = load(DEFAULT_SCENARIO_DIR / "x" / "three_states_and_denial_continues.toml")
    trace = run_scenario(reference_impl.implementation(), scenario, 0).trace
    seen = set()
    for _, payload in trace.lifecycle_events():
        fields = c.EVENT_FIELDS_READ.get(c.EventType(payload["type"]))
        if fields is None:
            continue
        seen.add(payload["type"])
        for name in fields:
            value = (payload["data"].get(name[5:]) if name.startswith("data.")
                     else payload.get(name))
            assert value not in (None, ""), (payload["type"], name, payload)
    assert {"permission_decided", "result_saved", "model_request_started",
            "model_request_ended", "turn_ended"} <= seen


# --------------------------------------------------------------------------- links


def test_the_page_is_linked_from_readme_and_protocol():
    for name in ("README.md", "docs/protocol.md", "docs/lifecycle.md"):
        assert "contract.md" in (ROOT / name).read_text(encoding="utf-8"), name
