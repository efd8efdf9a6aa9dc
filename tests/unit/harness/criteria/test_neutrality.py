"""The static neutrality check: hand-built scenarios whose required faults every allowed
implementation reaches (no finding) beside neighbours that rely on a hit, a call order or a
commit grouping the docs leave free (a finding naming the fault and the choices)."""

from __future__ import annotations

import pytest

from harness.criteria import neutrality
from harness.criteria.pipeline_model import Chooser, walk
from harness.scenarios.loader import loads

HEAD = '''
id = "hand-built"
stage = "x"

[[sessions]]
id = "s1"
rules = [{ effect = "deny", tool = "drop_table" }, { effect = "allow", tool = "write_file" }]

[[tools]]
name = "drop_table"
kind = "external"

[[tools]]
name = "write_file"
kind = "write"
'''
DENIED_THEN_WRITE = HEAD + '''
[[model]]
tool_calls = [{ id = "c1", tool = "drop_table", args = { table = "users" } }]

[[model]]
tool_calls = [{ id = "c2", tool = "write_file", args = { path = "/repo/a.txt", content = "x" } }]

[[steps]]
do = "turn"
text = "go"
'''


def fault(failpoint: str, hits: str = "1", action: str = "crash", extra: str = "") -> str:
    return f'''
[[faults]]
failpoint = "{failpoint}"
hits = "{hits}"
action = "{action}"
{extra}
'''


def findings(text: str) -> list[str]:
    return [f.text() for f in neutrality.findings(loads(text, "hand-built.toml"))]


# --------------------------------------------------------------------------- must pass


@pytest.mark.parametrize("planned", [
    fault("after_result_saved"),  # the write's result: the only documented after_result_saved
    fault("after_permission_decision"),  # the denial's decision: a documented step
    fault("after_permission_decision", "2"),  # the write's decision
    fault("after_start_recorded") + fault("after_permission_decision", "2"),
    fault("after_result_saved", "2", extra="optional = true"),  # free hit, but optional
    fault("before_model_request", "3"),
])
def test_faults_on_documented_hits_are_neutral(planned):
    assert findings(DENIED_THEN_WRITE + planned) == []


def test_the_reference_path_is_the_first_and_counts_what_the_reference_does():
    scenario = loads(DENIED_THEN_WRITE, "hand-built.toml")
    first = next(neutrality.paths(scenario))
    assert first.departures() == ()
    every = walk(scenario, Chooser(), every_failpoint=True)
    # the reference passes the delivery failpoints for the denial too: two of each
    assert every.reached["after_result_saved"] == 2
    assert every.reached["after_prepare"] == 2 and every.reached["before_model_request"] == 3


# --------------------------------------------------------------------------- must fail


def test_a_crash_on_the_deny_paths_after_result_saved_is_a_finding():
    """Issue 31, case 2: hit 2 exists only if saving the denial passes after_result_saved."""
    found = findings(DENIED_THEN_WRITE + fault("after_result_saved", "2"))
    assert len(found) == 1
    assert "fault 1: after_result_saved, hit #2 -> crash" in found[0]
    assert "after_result_saved is reached only 1 time(s)" in found[0]
    assert "saving the refusal of s1/c1: passes no after_result_saved" in found[0]


def test_a_crash_at_the_decision_of_a_cancelled_sessions_call_is_a_finding():
    """Issue 31, case 3: the call of a session cancelled at after_prepare may be closed
    without a decision step."""
    text = DENIED_THEN_WRITE + fault("after_prepare", action="cancel", extra='session = "s1"') \
        + fault("after_permission_decision")
    found = findings(text)
    assert len(found) == 1 and "fault 2: after_permission_decision, hit #1" in found[0]
    assert "after_permission_decision is never reached" in found[0]
    assert "is closed because its session was cancelled: passes no after_permission_decision" \
        in found[0]
    assert "committed: after after_prepare" in found[0]  # the other free choice on that path


def test_a_hit_only_recovery_might_pass_is_a_finding_even_for_the_reference():
    text = HEAD + '''
[[model]]
tool_calls = [{ id = "c2", tool = "write_file", args = { path = "/repo/a.txt", content = "x" } }]

[[steps]]
do = "turn"
text = "go"
''' + fault("after_tool_returned") + fault("during_checkpoint_build", action="raise")
    found = findings(text)
    assert len(found) == 1 and "fault 2: during_checkpoint_build" in found[0]
    assert "never reached, even as the reference implementation behaves" in found[0]


def test_a_fault_relying_on_the_order_of_the_calls_of_one_answer_is_a_finding():
    text = HEAD.replace('{ effect = "allow", tool = "write_file" }',
                        '{ effect = "allow", tool = "write_file" }, '
                        '{ effect = "ask", tool = "drop_table" }').replace(
        '{ effect = "deny", tool = "drop_table" }, ', "") + '''
[[model]]
tool_calls = [{ id = "c1", tool = "write_file", args = { path = "/repo/a.txt", content = "x" } },
              { id = "c2", tool = "drop_table", args = { table = "users" } }]

[[steps]]
do = "turn"
text = "go"
''' + fault("after_start_recorded")
    found = findings(text)
    assert len(found) == 1
    assert "after_start_recorded is never reached" in found[0]
    assert "the calls c1, c2 of one answer are taken up: c2 then c1" in found[0]


def test_a_hold_only_the_deny_path_reaches_is_a_finding():
    text = HEAD + '''
requires = ["multi_instance"]

[[model]]
tool_calls = [{ id = "c1", tool = "drop_table", args = { table = "users" } }]

[[steps]]
do = "concurrent_turn"
text = "go"
hold_at = "after_projection"
'''
    text = text.replace('requires = ["multi_instance"]\n', "").replace(
        'stage = "x"', 'stage = "x"\nrequires = ["multi_instance"]')
    found = findings(text)
    assert len(found) == 1 and "concurrent_turn (step 1) hold at after_projection" in found[0]
    assert "saving the refusal of s1/c1: passes no after_projection" in found[0]
    assert findings(text.replace('hold_at = "after_projection"',
                                 'hold_at = "after_projection"\noptional = true')) == []


def test_a_fault_after_what_the_model_cannot_follow_is_a_finding():
    text = HEAD + '''
[[model]]
tool_calls = [{ id = "c2", tool = "write_file", args = { path = "/repo/a.txt", content = "x" } }]

[[steps]]
do = "load_checkpoint"
fixture = "v1"

[[steps]]
do = "turn"
text = "go"
''' + fault("after_result_saved")
    found = findings(text)
    assert len(found) == 1 and "cannot follow the path past this: step 1 loads a checkpoint" \
        in found[0]


def test_too_many_paths_is_one_finding_not_a_pass():
    text = DENIED_THEN_WRITE + fault("after_result_saved", "2")
    scenario = loads(text, "hand-built.toml")
    (found,) = neutrality.findings(scenario, limit=1)
    assert found.what == "the fault plan" and "more than 1 paths" in found.why


def test_the_command_exits_1_on_findings_0_without_and_2_on_bad_input(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text(DENIED_THEN_WRITE + fault("after_result_saved", "2"), encoding="utf-8")
    good = tmp_path / "good.toml"
    good.write_text(DENIED_THEN_WRITE + fault("after_result_saved"), encoding="utf-8")
    assert neutrality.main([str(bad)]) == 1
    assert "after_result_saved, hit #2" in capsys.readouterr().out
    assert neutrality.main([str(good)]) == 0
    assert "1 scenario(s), 0 finding(s)" in capsys.readouterr().out
    assert neutrality.main([str(tmp_path / "missing.toml")]) == 2
