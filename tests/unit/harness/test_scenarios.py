"""Scenario files load into frozen values; every class of bad input is a ScenarioError that
names the file, the key path and the valid choices."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness import contract as c
from harness.errors import ScenarioError
from harness.faults import Action
from harness.scenarios import (
    DEFAULT_SCENARIO_DIR,
    STANDARD_TOOLS,
    Scenario,
    StepKind,
    discover,
    load,
    loads,
)
from harness.world.model import StreamEnd
from harness.world.tools import Behaviour

DATA = Path(__file__).parent / "data"

MINIMAL = """
id = "m1"
stage = "x"
[[sessions]]
id = "s1"
[[tools]]
name = "write_file"
kind = "write"
[[model]]
tool_calls = [{ id = "c1", tool = "write_file", args = { path = "/a", content = "x" } }]
[[steps]]
do = "turn"
text = "go"
"""


def test_a_full_file_loads_into_contract_values():
    s = load(DATA / "valid_full.toml")
    assert isinstance(s, Scenario)
    assert (s.id, s.stage, s.title, s.tags) == ("loader-full", "l2", "Everything the format can say",
                                                ("loader", "example"))
    assert s.file == str(DATA / "valid_full.toml")
    s1, s2 = s.sessions
    assert s1.mode is c.Mode.AUTO and s1.permission_version == 3 and s1.trusted_cwd == "/work"
    assert s1.rules[0] == c.Rule(c.RuleEffect.ALLOW, "write_file", "/work/*", "path")
    assert s1.rules[1] == c.Rule(c.RuleEffect.ASK, "Bash")
    assert s1.hard_constraints == (c.Rule(c.RuleEffect.DENY, "Bash", "*sudo*", "command"),)
    assert s1.thresholds == c.Thresholds(auto_retries_max=4, classifier_timeout_s=5.0)
    assert s2.interactive is False and s2.mode is c.Mode.PLAN and s2.thresholds == c.Thresholds()
    assert s.tools[: len(STANDARD_TOOLS)] == STANDARD_TOOLS
    assert s.tools[-1] == c.ToolSpec("deploy", c.ToolKind.EXTERNAL, True, "ship it")
    assert s1.tools == s2.tools == s.tools
    assert {t.kind for t in s.tools} == set(c.ToolKind)  # the library covers every kind
    assert s.files["/work/app.cfg"] == "port = 80"
    assert s.classifier.dangerous == ("rm -rf /", "curl evil")
    assert s.classifier.input_chars_max == 500 and s.classifier.delay_s == 0.5
    assert [(o.review, o.outcome, o.delay_s) for o in s.classifier.script] == [
        (2, c.ClassifierOutcome.TIMEOUT, None), (3, c.ClassifierOutcome.RISK_DENY, 1.0)]
    first, second = s.model
    assert first.session == "s1" and first.repeat == 2 and first.end is StreamEnd.END
    assert first.tool_calls[1] == c.ToolCall("c2", "Bash", {"command": "ls", "description": "list"})
    assert second.session == "s2" and second.end is StreamEnd.EOF
    assert [(b.call, b.tool, b.behaviour, b.times) for b in s.tool_behaviours] == [
        ("c2", "", Behaviour.TRANSIENT, 2), ("", "deploy", Behaviour.HANG, 1)]
    assert s.tool_behaviours[1].seconds == 90.0
    crash, checkpoint, rules, delay, cancel, raise_, hold = s.faults
    assert (crash.failpoint, crash.hits, crash.action) == (c.Failpoint.AFTER_RESULT_SAVED, "3", Action.CRASH)
    assert (checkpoint.failpoint, checkpoint.action) == (c.Failpoint.DURING_CHECKPOINT_BUILD, Action.RAISE)
    assert rules.rules() == (c.Rule(c.RuleEffect.DENY, "Bash"),)
    assert delay.hits == "1,3" and delay.params == {"seconds": 2.0}
    assert cancel.params == {"session": "s1"}  # the default session
    assert raise_.params == {"message": "disk on fire"}
    assert hold.action is Action.HOLD
    assert [step.do for step in s.steps] == list(StepKind)
    assert s.steps[1].approve is False and s.steps[1].wait == "next"
    assert s.steps[2].rules == (c.Rule(c.RuleEffect.DENY, "deploy"),)
    assert s.steps[3].session == "s1" and s.steps[5].hold_at is None
    assert s.steps[6].fixture == "v1" and s.steps[7].label == "end"


def test_defaults_of_a_minimal_file():
    s = loads(MINIMAL, "mini.toml")
    (config,) = s.sessions
    assert config == c.SessionConfig("s1", tools=(c.ToolSpec("write_file", c.ToolKind.WRITE),))
    assert s.title == "" and s.tags == () and s.faults == () and s.files == {}
    assert s.steps[0].session == "s1" and s.default_session == "s1"


def test_the_repository_suite_loads():
    scenarios = discover([DEFAULT_SCENARIO_DIR])
    assert DEFAULT_SCENARIO_DIR.name == "scenarios"
    assert len({s.id for s in scenarios}) == len(scenarios)


def bad(text: str, *fragments: str) -> str:
    with pytest.raises(ScenarioError) as info:
        loads(text, "bad.toml")
    message = str(info.value)
    assert message.startswith("bad.toml: "), message
    for fragment in fragments:
        assert fragment in message, message
    return message


def replace(old: str, new: str) -> str:
    assert old in MINIMAL
    return MINIMAL.replace(old, new, 1)


def test_unknown_keys_name_the_path_and_the_valid_keys():
    bad(replace('[[sessions]]\nid = "s1"', '[[sessions]]\nid = "s1"\ncolour = "red"'),
        "sessions[0].colour: unknown key", "valid: id, interactive")
    bad(MINIMAL + 'wat = 1\n', "steps[0].wat: unknown key", "valid: do, session, text")
    bad('extra = 1\n' + MINIMAL, "extra: unknown key", "valid: id, stage, title")
    bad(replace('args = { path', 'argz = { path'), "model[0].tool_calls[0].argz", "valid: id, tool, args")


def test_bad_enum_values_list_the_choices():
    bad(replace('id = "s1"', 'id = "s1"\nmode = "fast"'),
        "sessions[0].mode: 'fast' is not valid (valid: default, auto, plan)")
    bad(replace('kind = "write"', 'kind = "teleport"'), "tools[0].kind", "read, write, external, bash")
    bad(replace('do = "turn"', 'do = "dance"'), "steps[0].do", "turn, answer, update_rules")
    bad(replace('[[steps]]', '[[model]]\nend = "boom"\n[[steps]]'), "model[1].end",
        "end, eof, transport_error, cancelled")
    bad(MINIMAL + '[[tool_behaviour]]\ncall = "c1"\nbehaviour = "explode"\n',
        "tool_behaviour[0].behaviour", "ok, param_error, fail, transient, unavailable")
    bad(MINIMAL + '[classifier]\nscript = [{ review = 1, outcome = "maybe" }]\n',
        "classifier.script[0].outcome", "allow, risk_deny, timeout")
    bad(replace('id = "s1"', 'id = "s1"\nrules = [{ effect = "perhaps", tool = "x" }]'),
        "sessions[0].rules[0].effect", "allow, ask, deny")
    bad(replace('stage = "x"', 'stage = "l9"'), "stage: 'l9' is not a stage", "x, l1, l2, l3, l4, l5, m")


def test_bad_failpoints_and_fault_fields():
    msg = bad(MINIMAL + '[[faults]]\nfailpoint = "after_lunch"\naction = "crash"\n',
              "faults[0].failpoint: 'after_lunch' is not a failpoint", "after_result_saved")
    assert "during_checkpoint_build" in msg
    bad(MINIMAL + '[[faults]]\nfailpoint = "after_prepare"\naction = "nuke"\n',
        "faults[0].action", "crash, raise, delay, change_rules, cancel, hold, fail_checkpoint")
    bad(MINIMAL + '[[faults]]\nfailpoint = "after_prepare"\nhits = "zero"\naction = "crash"\n',
        "faults[0].hits", '"1,3"')
    bad(MINIMAL + '[[faults]]\nfailpoint = "after_prepare"\naction = "delay"\n',
        "faults[0].seconds: required by action delay")
    bad(MINIMAL + '[[faults]]\nfailpoint = "after_prepare"\naction = "crash"\nseconds = 1\n',
        "faults[0].seconds: not a parameter of action crash")
    bad(MINIMAL + '[[faults]]\nfailpoint = "after_prepare"\naction = "crash"\n'
        '[[faults]]\nfailpoint = "after_prepare"\nhits = "1,2"\naction = "raise"\n',
        "faults[1].hits: fires on the same hit of after_prepare as faults[0]")
    bad(MINIMAL + '[[faults]]\nfailpoint = "after_prepare"\naction = "fail_checkpoint"\n',
        "faults[0].failpoint", "only applies at during_checkpoint_build")
    bad(MINIMAL + '[[faults]]\nfailpoint = "after_prepare"\naction = "hold"\n',
        "faults[0].action: hold only acts during a concurrent_turn step")
    bad(MINIMAL + '[[faults]]\nfailpoint = "after_prepare"\naction = "cancel"\nsession = "s9"\n',
        "faults[0].session: 's9' is not a declared session (valid: s1)")
    bad(replace('do = "turn"', 'do = "concurrent_turn"'), "steps[0].hold_at: required", "after_prepare")
    bad(replace('do = "turn"', 'do = "concurrent_turn"\nhold_at = "never"'),
        "steps[0].hold_at: 'never' is not valid", "after_prepare")


def test_wrong_types_say_what_was_expected():
    bad(replace('id = "s1"', 'id = "s1"\ninteractive = "yes"'),
        "sessions[0].interactive: expected a boolean")
    bad(replace('id = "s1"', 'id = "s1"\npermission_version = "2"'),
        "sessions[0].permission_version: expected an integer")
    bad(replace('id = "s1"', 'id = "s1"\ncapabilities = "write_file"'),
        "sessions[0].capabilities: expected an array of strings")
    bad(replace('id = "s1"', 'id = "s1"\nthresholds = { failure_table_capacity = 1.5 }'),
        "sessions[0].thresholds.failure_table_capacity: expected an integer")
    bad(replace('id = "s1"', 'id = "s1"\nthresholds = { failure_table_capacity = 4 }'),
        "sessions[0].thresholds.failure_table_capacity", "fixed at 16")
    bad(replace('id = "s1"', 'id = "s1"\nthresholds = { capacity = 1 }'),
        "sessions[0].thresholds.capacity: unknown key", "failure_table_capacity")
    bad(replace('text = "go"', 'text = 3'), "steps[0].text: expected a string")
    bad('sessions = 3\n' + MINIMAL.replace('[[sessions]]\nid = "s1"\n', ''),
        "sessions: expected an array of tables")
    bad(MINIMAL + '[files]\n"relative.txt" = "x"\n', "files.relative.txt: file paths must be absolute")


def test_references_must_name_declared_things():
    bad(replace('[[steps]]\ndo = "turn"', '[[steps]]\ndo = "turn"\nsession = "ghost"'),
        "steps[0].session: 'ghost' is not a declared session (valid: s1)")
    bad(MINIMAL + '[[tool_behaviour]]\ncall = "c9"\nbehaviour = "fail"\n',
        "tool_behaviour[0].call: 'c9' is not a declared tool-call id", "valid: c1")
    bad(MINIMAL + '[[tool_behaviour]]\ntool = "nope"\nbehaviour = "fail"\n',
        "tool_behaviour[0].tool: 'nope' is not a declared tool (valid: write_file)")
    bad(MINIMAL + '[[tool_behaviour]]\nbehaviour = "fail"\n', "tool_behaviour[0]: give exactly one")
    bad(replace('id = "s1"', 'id = "s1"\ncapabilities = ["rm"]'),
        "sessions[0].capabilities[0]: 'rm' is not a declared tool")
    bad(replace('[[tools]]', '[[tools]]\nlibrary = "fancy"\n[[tools]]'),
        "tools[0].library: 'fancy' is not a tool library (valid: standard)")
    bad(replace('[[tools]]', '[[tools]]\nlibrary = "standard"\n[[tools]]'),
        "tools[1]: tool 'write_file' is already declared by tools[0] (library standard)")


def test_every_reference_of_the_format_is_checked_at_load():
    # a model tool call names a declared tool
    bad(replace('tool = "write_file", args', 'tool = "writefile", args'),
        "model[0].tool_calls[0].tool: 'writefile' is not a declared tool", "valid: write_file")
    # the tool of every rule matches a declared tool: session rules, hard constraints,
    # update_rules steps, change_rules faults
    bad(replace('id = "s1"', 'id = "s1"\nrules = [{ effect = "allow", tool = "write_fiel" }]'),
        "sessions[0].rules[0].tool: 'write_fiel' matches no declared tool", "valid: write_file")
    bad(replace('id = "s1"', 'id = "s1"\nhard_constraints = [{ tool = "Bash", pattern = "*sudo*" }]'),
        "sessions[0].hard_constraints[0].tool: 'Bash' matches no declared tool")
    bad(MINIMAL + '[[steps]]\ndo = "update_rules"\npermission_version = 2\n'
        'rules = [{ effect = "deny", tool = "send_mail" }]\n',
        "steps[1].rules[0].tool: 'send_mail' matches no declared tool")
    bad(MINIMAL + '[[faults]]\nfailpoint = "after_prepare"\naction = "change_rules"\n'
        'permission_version = 2\nrules = [{ effect = "deny", tool = "wirte_file" }]\n',
        "faults[0].rules[0].tool: 'wirte_file' matches no declared tool", "declare it under [[tools]]")
    # an answer names its wait by a tool call of the model script (wait ids are the IUT's)
    bad(MINIMAL + '[[steps]]\ndo = "answer"\nwait = "wait-123"\n',
        "steps[1].wait: 'wait-123' is neither \"next\", \"again\" nor a tool-call id",
        "valid: next, again, c1")
    # a session named by a change_rules fault is declared
    bad(MINIMAL + '[[faults]]\nfailpoint = "after_prepare"\naction = "change_rules"\n'
        'session = "s2"\npermission_version = 2\nrules = []\n',
        "faults[0].session: 's2' is not a declared session")
    # patterns and references that do match load
    ok = loads(replace('id = "s1"', 'id = "s1"\nrules = [{ effect = "allow", tool = "write_*" }]')
               + '[[steps]]\ndo = "answer"\nwait = "c1"\n', "ok.toml")
    assert ok.steps[1].wait == "c1" and ok.sessions[0].rules[0].tool == "write_*"


def test_optional_faults_are_carried_into_the_fault_and_its_trace_spec():
    s = loads(MINIMAL + '[[faults]]\nfailpoint = "after_prepare"\naction = "crash"\noptional = true\n'
              '[[faults]]\nfailpoint = "after_tool_returned"\naction = "crash"\n', "o.toml")
    assert [f.optional for f in s.faults] == [True, False]
    assert [f.spec().optional for f in s.faults] == [True, False]
    bad(MINIMAL + '[[faults]]\nfailpoint = "after_prepare"\naction = "crash"\noptional = "yes"\n',
        "faults[0].optional: expected a boolean")


def test_placeholders_are_checked_at_load():
    bad(replace('text = "go"', 'text = "{{faker:no_such_provider}}"'),
        "steps[0].text: unknown Faker provider 'no_such_provider'")
    bad(replace('content = "x"', 'content = "{{sha256:/missing}}"'),
        "model[0].tool_calls[0].args.content", "names no initial file")
    bad(replace('text = "go"', 'text = "{{oops}}"'), "steps[0].text: malformed placeholder")


def test_structure_errors():
    bad(MINIMAL.replace('id = "m1"\n', ''), "id: required key is missing")
    bad(replace('id = "m1"', 'id = "Has Spaces"'), "id: 'Has Spaces' must match")
    bad(MINIMAL.split("[[steps]]")[0], "steps: required")
    bad(replace('[[sessions]]\nid = "s1"', '[[sessions]]\nid = "s1"\n[[sessions]]\nid = "s1"'),
        "sessions[1].id: duplicate session id 's1'")
    bad(MINIMAL + '[[steps]]\ndo = "update_rules"\n', "steps[1].rules: required key is missing")
    bad(MINIMAL + '[[steps]]\ndo = "restart"\nsession = "s1"\n', "steps[1].session: unknown key")
    bad("id = [", "not valid TOML")


def test_discover_recurses_sorts_and_rejects_duplicates(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "two.toml").write_text(MINIMAL.replace('"m1"', '"two"'))
    (tmp_path / "a.toml").write_text(MINIMAL.replace('"m1"', '"one"'))
    (tmp_path / "notes.txt").write_text("not a scenario")
    found = discover([tmp_path, tmp_path / "a.toml"])
    assert [s.id for s in found] == ["one", "two"]
    (tmp_path / "b" / "dup.toml").write_text(MINIMAL.replace('"m1"', '"one"'))
    with pytest.raises(ScenarioError, match=r"dup\.toml: id: duplicate scenario id 'one' \(also in .*a\.toml\)"):
        discover([tmp_path])
    with pytest.raises(ScenarioError, match="no such scenario file or directory"):
        discover([tmp_path / "missing"])
    (tmp_path / "b" / "dup.toml").write_text("id = ")
    with pytest.raises(ScenarioError, match=re.escape(str(tmp_path / "b" / "dup.toml"))):
        discover([tmp_path])
