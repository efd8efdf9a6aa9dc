"""Scenario files load into frozen values; every class of bad input is a ScenarioError that
names the file, the key path and the valid choices."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from harness import contract as c
from harness.contract.errors import ScenarioError
from harness.faults.plan import Action
from harness.scenarios.loader import (
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


def test_no_digest_of_the_bundled_suite_moved_with_rfc_8785():
    # Canonical JSON became RFC 8785, which writes floats, keys past U+FFFF and integers past
    # 2**53 - 1 otherwise than the Python text before it. No call of the suite (regressions
    # included) has any of them in its args, so every args_digest is what it was, and the
    # contract's version did not need to move. (Placeholders expand to strings.) The one
    # scenario written since to judge RFC 8785 itself is new (no digest of it moved) and must
    # differ, or it would test nothing.
    judging_rfc_8785 = "x-canonical-json-of-numbers-and-keys"
    calls, differing = [], []
    for scenario in discover([DEFAULT_SCENARIO_DIR]):
        for response in scenario.model:
            for call in response.tool_calls:
                before = json.dumps({"tool": call.tool, "args": call.args}, sort_keys=True,
                                    separators=(",", ":"), ensure_ascii=False)
                if c.canonical_json({"tool": call.tool, "args": call.args}) != before:
                    differing.append((scenario.id, call.tool_call_id))
                calls.append(call)
    assert len(calls) > 300  # the scan sees the suite
    assert sorted(set(differing)) == [(judging_rfc_8785, "a1"), (judging_rfc_8785, "c1")]


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
    # a rule on a field whose pattern matches the empty text (but is not `*`) leaves to the
    # implementation whether it matches a call without the field: refused wherever rules are
    for where, pattern in (("sessions[0].rules[0].pattern", '""'), ("sessions[0].rules[0].pattern", '"**"')):
        bad(replace('id = "s1"', f'id = "s1"\nrules = [{{ effect = "allow", tool = "write_file", '
                                 f'field = "mode", pattern = {pattern} }}]'),
            f"{where}: {pattern[1:-1]!r} on field 'mode' matches the empty text",
            "use '*' to match every call")
    bad(MINIMAL + '[[steps]]\ndo = "update_rules"\npermission_version = 2\n'
        'rules = [{ effect = "deny", tool = "write_file", field = "path", pattern = "***" }]\n',
        "steps[1].rules[0].pattern: '***' on field 'path' matches the empty text")
    for fine in ('field = "mode", pattern = "*"', 'field = "mode", pattern = "?*"',
                 'pattern = "**"'):  # `*`, a pattern needing a character, or the whole args
        loads(replace('id = "s1"', f'id = "s1"\nrules = [{{ effect = "allow", '
                                       f'tool = "write_file", {fine} }}]'))
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


# --------------------------------------------------------------------------- limits (issue 12)

from harness.contract.scenario_limits import LIMITS, check_data, check_text  # noqa: E402
from harness.scenarios.loader import loads_all  # noqa: E402
from harness.world.templates import FAKER_PROVIDERS, Templates  # noqa: E402


def test_nesting_is_bounded_before_the_toml_parser_recurses():
    # The value is enclosed by: document, model, its table, tool_calls, its table, args.
    inside = LIMITS.nesting_depth_max - 6
    ok = loads(replace('content = "x"', "content = " + "[" * inside + "1" + "]" * inside), "ok")
    assert ok.model[0].tool_calls[0].args["content"]
    deeper = "content = " + "[" * (inside + 1) + "1" + "]" * (inside + 1)
    bad(replace('content = "x"', deeper), "(limit nesting_depth_max)")
    for opener, closer in (("[", "]"), ("{ a = ", " }")):
        message = bad(replace('content = "x"', "content = " + opener * 340 + "1" + closer * 340),
                      "nested more than 32 levels deep (limit nesting_depth_max)")
        assert message.startswith("bad.toml: line 10:")
    # Brackets in strings and comments do not nest.
    check_text('a = "' + "[" * 500 + '" # ' + "{" * 500 + "\nb = '''" + "[" * 500 + "'''", "f")
    # Dotted keys and headers nest without brackets: the parsed data is checked too.
    bad(MINIMAL + "[files" + ".a" * 40 + "]\nb = 1\n", "limit nesting_depth_max")


def test_counts_hits_and_durations_are_bounded_at_load():
    assert loads(MINIMAL.replace("[[steps]]", "repeat = 10000\n[[steps]]"), "ok").model[0].repeat \
        == LIMITS.count_max
    bad(MINIMAL.replace("[[steps]]", "repeat = 1000000000\n[[steps]]"),
        "model[0].repeat: 1000000000 exceeds the maximum of 10000 (limit count_max)")
    bad(MINIMAL.replace("[[steps]]", f"repeat = {2**63 - 1}\n[[steps]]"),
        "model[0].repeat: the integer 9223372036854775807 is outside", "integer_abs_max")
    two = MINIMAL.replace("[[steps]]", "repeat = 6000\n[[model]]\ntext = 'x'\nrepeat = 6000\n"
                                       "[[steps]]")
    bad(two, "model[1].repeat", "limit model_responses_max")
    crash = MINIMAL + '[[faults]]\nfailpoint = "after_prepare"\naction = "crash"\nhits = "{}"\n'
    crash = crash.replace("{", "{{").replace("}", "}}").replace("{{}}", "{}")
    assert loads(crash.format("9999*off->crash"), "ok").faults[0].hits == "10000+"
    bad(crash.format("1000000000*crash"), "faults[0].hits: 1000000000 in '1000000000*crash' "
                                          "exceeds the maximum hit number 10000 (limit count_max)")
    bad(crash.format("9999*off->2*crash"), "counts 10001 hits or more")
    bad(crash.format("10000*off->crash"), "starts firing at hit 10001")
    bad(crash.format("1," + "9" * 900), "a number of 900 digits", "limit count_max")
    bad(crash.format("1," * 600), "a hit expression of 1200 characters")
    bad(MINIMAL.replace("[[steps]]", "repeat = " + "9" * 5000 + "\n[[steps]]"),
        "integer_abs_max")  # tomllib's int() refuses 4,300+ digits: still a ScenarioError
    hang = MINIMAL + '[[tool_behaviour]]\ncall = "c1"\nbehaviour = "hang"\ntimes = {}\nseconds = {}\n'
    hang = hang.replace("{", "{{").replace("}", "}}").replace("{{}}", "{}")
    assert loads(hang.format(10000, 604800), "ok").tool_behaviours[0].times == 10000
    bad(hang.format(10001, 1), "tool_behaviour[0].times: 10001 exceeds the maximum of 10000")
    bad(hang.format(1, "1e300"), "tool_behaviour[0].seconds", "limit seconds_max")
    delay = MINIMAL + '[[faults]]\nfailpoint = "after_prepare"\naction = "delay"\nseconds = 1e9\n'
    bad(delay, "faults[0].seconds: 1000000000.0 exceeds the maximum of 604800 (limit seconds_max)")
    bad(replace('id = "s1"', 'id = "s1"\nthresholds = { auto_retries_max = 100000 }'),
        "sessions[0].thresholds.auto_retries_max", "limit count_max")
    bad(replace('id = "s1"', 'id = "s1"\nthresholds = { classifier_timeout_s = 1e12 }'),
        "sessions[0].thresholds.classifier_timeout_s", "limit seconds_max")
    bad(MINIMAL + "[classifier]\nscript = [{ review = 20000, outcome = 'timeout' }]\n",
        "classifier.script[0].review", "limit count_max")


def test_sizes_are_bounded_at_load():
    bad(replace('content = "x"', 'content = "' + "x" * (LIMITS.string_chars_max + 1) + '"'),
        "args.content: a string of 200001 characters; at most 200000 (limit string_chars_max)")
    bad(replace('content = "x"', "content = [" + "1, " * 1001 + "]"),
        "args.content: an array of 1001 items", "limit array_items_max")
    bad(replace('content = "x"', "content = { " + ", ".join(f"k{i} = 1" for i in range(1001))
                + " }"), "a table of 1001 keys", "limit table_keys_max")
    bad(replace('text = "go"', 'text = "' + "{{faker:word}}" * 1001 + '"'),
        "limit placeholders_max")
    rules = ", ".join('{ effect = "deny", tool = "write_file" }' for _ in range(600))
    bad(replace('id = "s1"', f'id = "s1"\nrules = [{rules}]\nhard_constraints = [{rules}]'),
        "sessions[0].rules", "limit rules_max")
    with pytest.raises(ScenarioError, match="limit values_max"):
        check_data({"a": [[0] * 1000] * 101}, "f")
    with pytest.raises(ScenarioError, match="limit file_bytes_max"):
        loads("#" * (LIMITS.file_bytes_max + 1), "f")


@pytest.mark.parametrize("value, fragment", [
    ("nan", "nan is not allowed"), ("inf", "inf is not allowed"), ("-inf", "-inf is not allowed"),
    ("1979-05-27T07:32:00Z", "a TOML date/time"), ("07:32:00", "a TOML date/time"),
])
def test_values_json_cannot_carry_are_load_errors(value, fragment):
    """A nan argument was a false X2 failure in process and an encoding error blamed on the
    implementation out of process: JSON has no nan, inf or dates."""
    bad(replace('content = "x"', f"content = {value}"),
        "model[0].tool_calls[0].args.content: " + fragment)
    bad(MINIMAL + f"[files]\n\"/a\" = {value}\n", "files./a")
    with pytest.raises(ScenarioError, match="lone surrogate"):
        check_data({"args": {"x": "\ud800"}}, "f")


@pytest.mark.parametrize("provider", ["enum", "xml", "image", "date_time", "iso8601",
                                      "pydict", "profile"])
def test_faker_providers_off_the_allow_list_are_load_errors(provider):
    """Each passed Faker's own catalogue and failed (or varied) at every run."""
    bad(replace('content = "x"', f'content = "{{{{faker:{provider}}}}}"'),
        f"unknown Faker provider {provider!r}", "not on the allow-list", "valid: address")


def test_every_allowed_faker_provider_expands_to_a_short_seeded_string():
    text = " ".join(f"{{{{faker:{name}}}}}" for name in sorted(FAKER_PROVIDERS))
    first, second = Templates(11).expand(text), Templates(11).expand(text)
    assert first == second and "{{" not in first
    for name in sorted(FAKER_PROVIDERS):
        value = Templates(3).expand(f"{{{{faker:{name}}}}}")
        assert isinstance(value, str) and 0 < len(value) <= 1_000, (name, value)


TEMPLATE = MINIMAL.replace('content = "x"', 'content = "{{m:big}}{{m:big}}"') + """
[matrix]
big = [VALUES]
n = [NS]
[[faults]]
failpoint = "after_prepare"
action = "crash"
hits = "{{m:n|str}}"
"""


def template(values: str, ns: str) -> str:
    return TEMPLATE.replace("VALUES", values).replace("NS", ns)


def test_template_expansion_is_bounded_while_the_variants_are_built():
    small = template('"ab", "cd"', "1, 2")
    assert len(loads_all(small, "t.toml")) == 4
    # Each placeholder use of a long value: the grown string is refused mid-substitution.
    long = "y" * 150_000
    bad_text = template(f'"{long}"', "1")
    with pytest.raises(ScenarioError, match=r"grows past 200000 characters .*string_chars_max"):
        loads_all(bad_text, "t.toml")
    # Many variants of a moderately long value: the template's total is refused.
    many = template(", ".join(f'"{i}{"z" * 90_000}"' for i in range(8)),
                           ns=", ".join(str(i) for i in range(1, 65)))
    with pytest.raises(ScenarioError, match="limit expanded_chars_max"):
        loads_all(many, "t.toml")


def test_the_limits_and_the_faker_allow_list_are_documented():
    import dataclasses as dc
    doc = (Path(__file__).parents[4] / "docs" / "scenarios.md").read_text(encoding="utf-8")
    limits = doc[doc.index("## Limits"):]
    for limit in dc.fields(LIMITS):
        assert f"| `{limit.name}` |" in limits, limit.name
    providers = doc[doc.index("Faker providers allowed"):doc.index("Hits. Hits are counted")]
    assert set(re.findall(r"`([a-z0-9_]+)`", providers)) >= FAKER_PROVIDERS
