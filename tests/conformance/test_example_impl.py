"""The example in examples/ is what its README pointer promises: an implementation written
from the docs, importing neither the harness nor the reference, that meets the core over the
wire protocol (real processes, real SIGKILL crashes)."""

from __future__ import annotations

import ast
import importlib.util
import io
import json
import os
import shlex
import signal
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.cli import app as cli
from harness.contract import SAFE_INTEGER_MAX, canonical_json
from harness.remote import forkserver
from harness.remote.forkserver import ForkedProcess
from harness.remote.launcher import ProcessImplementation
from harness.running.runner import run_scenario
from harness.scenarios.loader import load

from remote_recording import Recording  # tests/remote_recording.py

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "minimal_runtime.py"
FORBIDDEN = ("harness", "reference_impl")
CRASH = load(ROOT / "scenarios/l4/crash_after_result_saved.toml")


def imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            found.add("." if node.level else (node.module or "").split(".")[0])
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "") in (
                "__import__", "import_module"):
            found |= {str(arg.value).split(".")[0] for arg in node.args
                      if isinstance(arg, ast.Constant)}
    return found


def test_the_scan_sees_every_kind_of_import(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import harness.contract\nfrom reference_impl import x\n"
                     "from . import y\n__import__('harness')\n", encoding="utf-8")
    assert imported_packages(probe) >= {"harness", "reference_impl", "."}


def test_every_example_imports_only_the_standard_library():
    examples = sorted((ROOT / "examples").glob("*.py"))
    assert EXAMPLE in examples
    for path in examples:
        imported = imported_packages(path)
        assert not imported & {*FORBIDDEN, "."}, (path.name, imported)
        assert imported <= set(sys.stdlib_module_names) | {"__future__"}, (path.name, imported)


def _example_module():
    spec = importlib.util.spec_from_file_location("minimal_runtime_under_test", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_EXAMPLE = _example_module()


def test_the_example_says_unchanged_only_to_its_last_reading_of_an_unchanged_store(tmp_path):
    example = _example_module()
    data_dir = str(tmp_path / "data")
    inspector = example.Inspector()
    absent = inspector.inspect_since(data_dir, "")
    assert absent["reading"] and absent["observation"] == example.empty_observation()
    store = example.Store(data_dir)
    first = inspector.inspect_since(data_dir, absent["reading"])
    assert first["observation"] == example.empty_observation()  # a store now, still empty
    assert first["reading"] != absent["reading"]
    assert inspector.inspect_since(data_dir, first["reading"]) == {
        "reading": first["reading"], "observation": None}
    stale = inspector.inspect_since(data_dir, absent["reading"])  # not the last token
    assert stale["observation"] == first["observation"] and stale["reading"] != first["reading"]
    with store as db:  # another connection commits
        db.execute("INSERT INTO sessions (session_id, config, rules, permission_version,"
                   " turn_status) VALUES ('s1', '{}', '[]', 1, 'idle')")
    changed = inspector.inspect_since(data_dir, stale["reading"])
    assert [s["session_id"] for s in changed["observation"]["sessions"]] == ["s1"]
    assert changed["observation"] == example.inspect(data_dir)  # a one-shot reading agrees
    assert inspector.inspect_since(data_dir, changed["reading"])["observation"] is None
    # another store file at the same path: read again, never "unchanged"
    store.db.close()
    for leftover in Path(data_dir).glob("minimal.sqlite3*"):
        leftover.unlink()
    example.Store(data_dir).db.close()
    replaced = inspector.inspect_since(data_dir, changed["reading"])
    assert replaced["observation"] == example.empty_observation()


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-SAFE_INTEGER_MAX, SAFE_INTEGER_MAX)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=5)
    | st.text(st.sampled_from("a\u00e9\ufb01\U0001f600\n\"\\\x7f\x01"), max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.text(max_size=3) | st.text(st.sampled_from("a\ufb01\uffff\U00010000"), max_size=3),
        inner, max_size=4),
    max_leaves=15,
)


@given(_json_values)
def test_the_examples_hand_written_rfc_8785_is_the_harnesss_canonical_json(value):
    # docs/contract.md "Canonical JSON" promises a few lines of any language suffice
    assert _EXAMPLE.canonical_json(value) == canonical_json(value)


def test_the_examples_numbers_are_the_rfcs():
    for number, text in ((1.0, "1"), (1e-7, "1e-7"), (1e21, "1e+21"), (1e-6, "0.000001"),
                         (-0.0, "0"), (5e-324, "5e-324"), (333333333.3333333, "333333333.3333333"),
                         (1.7976931348623157e308, "1.7976931348623157e+308")):
        assert _EXAMPLE.canonical_json(number) == text == canonical_json(number)


def test_the_example_writes_an_integer_past_2_53_only_when_it_is_a_double():
    # the harness's wire writes the double 1e20 as RFC 8785 does, 100000000000000000000,
    # which Python's json reads back as an int (found by x/canonical_json_of_numbers_and_keys:
    # the example refused every integer past 2**53 - 1)
    for number in (10**20, 10**16, 53401225956765130):
        assert _EXAMPLE.canonical_json(number) == str(number) == canonical_json(number)
    with pytest.raises(ValueError, match="no double"):
        _EXAMPLE.canonical_json(2**53 + 1)


def _parent_and_session(pid: int) -> tuple[int, int]:
    fields = Path(f"/proc/{pid}/stat").read_bytes().rpartition(b")")[2].split()
    return int(fields[1]), int(fields[3])


@pytest.mark.process
@pytest.mark.skipif(not forkserver.supported(), reason="needs Linux pidfds")
def test_the_example_forks_its_instances_from_a_template(tmp_path):
    # The fork server of docs/protocol.md, written from the page: every instance (and the
    # inspector) a child of the template, in a session of its own, holding nothing of the
    # template's; a crash a SIGKILL of one instance, whose status the template reports.
    with Recording([sys.executable, str(EXAMPLE)]) as implementation:
        run = run_scenario(implementation, CRASH, 0)
        assert run.error == "" and run.trace.completed
        assert implementation.fork_off is None
        template = implementation._template
        crashed, restarted = implementation.children
        inspector = implementation._inspectors[None]
        assert all(isinstance(c.popen, ForkedProcess) for c in (crashed, restarted, inspector))
        assert crashed.killed and crashed.popen.returncode == -signal.SIGKILL
        assert [e.data["mode"] for e in run.trace.crashes()] == ["process"]
        assert len(run.trace.ledger()) == 1  # executed once across the crash
        assert template.alive and inspector.alive  # a kill ends exactly one instance
        assert _parent_and_session(inspector.pid) == (template.pid, inspector.pid)
        fds = {int(fd): os.readlink(f"/proc/{inspector.pid}/fd/{fd}")
               for fd in os.listdir(f"/proc/{inspector.pid}/fd")}
        assert not any(target.startswith("socket:") for target in fds.values()), fds
        assert fds[1] == fds[2]  # a stray print goes to stderr
        restarted.popen.wait(5)
        assert restarted.popen.returncode == 0  # closed and shut down in order


@pytest.mark.process
def test_the_example_spawned_per_instance_survives_a_crash(tmp_path):
    # The whole suite runs it forked (below); spawned is what a harness without pidfds does.
    implementation = ProcessImplementation([sys.executable, str(EXAMPLE)])
    implementation.fork_server = False
    with implementation:
        run = run_scenario(implementation, CRASH, 0)
        assert implementation._template is None
    assert run.error == "" and run.trace.completed
    assert [e.data["mode"] for e in run.trace.crashes()] == ["process"]
    assert len(run.trace.ledger()) == 1


@pytest.mark.process
def test_the_example_meets_the_core_as_a_process(tmp_path):
    command = shlex.join([sys.executable, str(EXAMPLE)])
    out, err = io.StringIO(), io.StringIO()
    # The default limit: it bounds a call that stops calling the world, so the longest
    # scenario's turn (twenty classifier reviews, each a round trip with store probes) may
    # take longer than 20 s on a loaded machine without being a hang.
    code = cli.main(["run", "--impl", f"process:{command}", "--report-dir", str(tmp_path)],
                    stdout=out, stderr=err)
    report = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    conformance = report["conformance"]
    assert conformance["core_met"], conformance["headline"] + "\n" + out.getvalue()[-4000:]
    assert code == 0, out.getvalue()[-4000:] + err.getvalue()
    core = {c["id"]: c for c in report["criteria"] if not c["required_features"]}
    assert sorted(core) == sorted(conformance["core_criteria"]) and len(core) == 51
    assert all(c["status"] == "passed" and c["exercised"] >= 1 for c in core.values())
    # It declares no optional feature, and every scenario runs: it publishes projections,
    # so web_projection is shown by behaviour and L5.4 judges them (and passes); it takes
    # escalation requests as definite failures (L2.10's hard case, core), declares no
    # checkpoint fixture and refuses a second live instance: those three stay n/a, with
    # no false failure from the scenarios written for them.
    assert conformance["claimed"] == ["web_projection"]
    assert conformance["shown_not_declared"] == ["web_projection"]
    gated = {c["id"]: c["status"] for c in report["criteria"] if c["required_features"]}
    assert gated == {"L1.6": "not_applicable", "L2.11": "not_applicable",
                     "L4.10": "not_applicable", "L5.4": "passed"}
    assert {s["status"] for s in report["scenarios"]} == {"passed"}
    shown = {f for s in report["scenarios"] for f in s["features_shown"]}
    assert shown == {"web_projection"}
    concurrent = [s for s in report["scenarios"] if "multi_instance" in s["requires"]]
    assert concurrent and all(s["status"] == "passed" for s in concurrent)


@pytest.mark.process
def test_the_example_refuses_a_second_live_instance_as_the_contract_says(tmp_path):
    # docs/contract.md, "Features": without multi_instance, open raises while another
    # instance is live on the data dir; the harness drops B and A finishes the turn alone
    scenario = load(ROOT / "scenarios/l4/concurrent_duplicates.toml")
    implementation = ProcessImplementation([sys.executable, str(EXAMPLE)])
    with implementation:
        run = run_scenario(implementation, scenario, 0)
    assert run.error == "" and run.trace.completed, run.error
    refused = [e for e in run.trace.events if e.kind == "driver_raised"]
    assert [(e.data["method"], e.data.get("refused")) for e in refused] == [("open", True)]
    assert "another live instance holds" in refused[0].data["message"]
    assert len(run.trace.ledger()) == 1
