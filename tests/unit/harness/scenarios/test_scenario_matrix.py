"""Scenario templates: expansion, ids, typed substitution, exclusions and every load error."""

from __future__ import annotations

import tomllib

import pytest

from harness.scenarios import matrix as M
from harness.scenarios import loader as scenarios
from harness.contract.errors import ScenarioError
from harness.scenarios.loader import DEFAULT_SCENARIO_DIR, discover, load, load_all, loads, loads_all
from harness.running.suite import replay_command

BASE = '''
id = "l3-t"
stage = "l3"
tags = ["auto"]
{top}

[matrix]
{matrix}

[[sessions]]
id = "s1"
mode = "auto"

[classifier]
script = [{{ review = "{{{{m:position}}}}", outcome = "{{{{m:outcome}}}}" }}]

[[tools]]
name = "Bash"
kind = "bash"

[[model]]
tool_calls = [{{ id = "c1", tool = "Bash", args = {{ command = "echo {{{{m:outcome}}}}" }} }}]

[[steps]]
do = "turn"
text = "go"
'''


def template(matrix: str, top: str = "") -> str:
    return BASE.format(matrix=matrix, top=top)


def test_a_plain_file_is_its_own_single_variant():
    data = {"id": "x", "stage": "x"}
    (variant,) = M.expand(data, "f.toml")
    assert variant.key == "" and variant.data is data and variant.params == ()


def test_every_combination_in_order_with_stable_ids_and_typed_values():
    text = template('outcome = ["allow", "timeout"]\nposition = [1, 2, 3]')
    found = loads_all(text, "t.toml")
    assert [s.id for s in found] == [
        f"l3-t.outcome-{o}.position-{p}" for o in ("allow", "timeout") for p in (1, 2, 3)]
    assert [s.variant for s in found][0] == "outcome-allow.position-1"
    # a whole placeholder keeps the TOML type (review is an int), an inner one becomes text
    assert found[4].classifier.script[0].review == 2
    assert found[4].classifier.script[0].outcome.value == "timeout"
    assert found[4].model[0].tool_calls[0].args == {"command": "echo timeout"}
    assert all("variant" in s.tags and "auto" in s.tags for s in found)
    assert loads_all(text, "t.toml") == found  # deterministic


def test_table_values_labels_fields_and_str_filter():
    text = template(
        'outcome = [{ label = "deny", v = "risk_deny" }, { label = "ok", v = "allow" }]\n'
        'position = [{ label = "first", n = 1 }]',
        top='faults = [{ failpoint = "after_prepare", hits = "{{m:position.n|str}}", '
            'action = "crash" }]').replace("{{m:outcome}}", "{{m:outcome.v}}").replace(
        "{{m:position}}", "{{m:position.n}}")
    found = loads_all(text, "t.toml")
    assert [s.variant for s in found] == ["outcome-deny.position-first",
                                          "outcome-ok.position-first"]
    assert found[0].faults[0].hits == "1"
    assert found[1].classifier.script[0].outcome.value == "allow"


def test_a_value_may_use_another_parameter_one_level_deep():
    text = template(
        'outcome = ["allow"]\nposition = [1]\n'
        'plan = [{ label = "p", steps = [{ do = "turn", text = "pos {{m:position}}" }] }]',
        top='steps = "{{m:plan.steps}}"').replace('[[steps]]\ndo = "turn"\ntext = "go"\n', "")
    (scenario,) = loads_all(text, "t.toml")
    assert scenario.steps[0].text == "pos 1"


def test_exclusions_by_value_and_by_label():
    text = template('outcome = ["allow", "timeout"]\nposition = [1, 2]') + (
        '\n[[matrix_exclude]]\noutcome = "allow"\nposition = 2\n'
        '\n[[matrix_exclude]]\noutcome = "timeout"\n')
    assert [s.variant for s in loads_all(text, "t.toml")] == ["outcome-allow.position-1"]


@pytest.mark.parametrize("matrix, top, needle", [
    ("", "", "matrix: expected a table"),
    ('outcome = []\nposition = [1]', "", "matrix.outcome: expected a non-empty list"),
    ('outcome = ["allow"]\nposition = [1]\nunused = [1]', "", "matrix.unused: no {{m:unused}}"),
    ('outcome = ["allow"]', "", "no parameter 'position'"),
    ('outcome = ["allow"]\nposition = [1]\n"9x" = [1]', "", "matrix.9x: a parameter name"),
    ('outcome = ["allow"]\nposition = [{ n = 1 }, { n = 2 }]\nx = [{ a = 1 }]', "",
     "no {{m:x}}"),
])
def test_bad_matrices_are_load_errors_naming_the_key(matrix, top, needle):
    with pytest.raises(ScenarioError) as info:
        loads_all(template(matrix, top), "bad.toml")
    assert needle in str(info.value) and "bad.toml" in str(info.value)


def test_too_many_variants_is_an_error():
    many = ", ".join(str(i) for i in range(60))
    with pytest.raises(ScenarioError, match="combinations; at most"):
        loads_all(template(f'outcome = [{many}]\nposition = [{many}]'), "big.toml")


def test_exclusion_errors():
    base = template('outcome = ["allow"]\nposition = [1]')
    for extra, needle in [
        ('\n[[matrix_exclude]]\nnope = 1\n', "not a parameter"),
        ('\n[[matrix_exclude]]\nposition = 7\n', "is not one of its values"),
        ('\n[[matrix_exclude]]\nposition = 1\n', "every combination is excluded"),
    ]:
        with pytest.raises(ScenarioError, match=needle):
            loads_all(base + extra, "t.toml")


def test_placeholders_are_refused_in_the_id():
    text = template('outcome = ["allow"]\nposition = [1]').replace('id = "l3-t"', 'id = "l3-{{m:outcome}}"')
    with pytest.raises(ScenarioError, match="id: placeholders are not allowed"):
        loads_all(text, "t.toml")


def test_a_table_cannot_be_spliced_into_a_string():
    text = template('outcome = [{ label = "a", v = 1 }]\nposition = [1]')
    with pytest.raises(ScenarioError, match="cannot be part of a longer string"):
        loads_all(text, "t.toml")


def test_a_variant_error_names_the_variant():
    text = template('outcome = ["allow", "bogus"]\nposition = [1]')
    with pytest.raises(ScenarioError, match=r"variant outcome-bogus\.position-1"):
        loads_all(text, "t.toml")


def test_load_needs_a_variant_for_a_template_and_finds_it(tmp_path):
    path = tmp_path / "t.toml"
    path.write_text(template('outcome = ["allow", "timeout"]\nposition = [1]'), encoding="utf-8")
    with pytest.raises(ScenarioError, match="--variant KEY"):
        load(path)
    assert load(path, "outcome-timeout.position-1").id == "l3-t.outcome-timeout.position-1"
    assert load(path, "l3-t.outcome-allow.position-1").variant == "outcome-allow.position-1"
    with pytest.raises(ScenarioError, match="no variant 'nope'"):
        load(path, "nope")
    assert len(load_all(path)) == 2 and len(discover([tmp_path])) == 2
    assert loads(template('outcome = ["allow"]\nposition = [1]'), "one.toml").variant


def test_replay_command_names_the_variant():
    assert "--variant outcome-allow.position-1 " in replay_command(
        "scenarios/l3/t.toml", 0, "reference", "outcome-allow.position-1")
    assert "--variant" not in replay_command("scenarios/l3/t.toml", 0, "reference")


def test_bundled_templates_expand_and_every_variant_is_tagged():
    found = [s for s in discover([DEFAULT_SCENARIO_DIR]) if s.variant]
    files = {s.file for s in found}
    assert len(files) >= 6 and len(found) >= 60
    for s in found:
        assert s.id.endswith("." + s.variant) and "variant" in s.tags and "neighbours" in s.tags
        raw = tomllib.loads(open(s.file, encoding="utf-8").read())
        assert M.is_template(raw)


def test_chaos_reads_a_variant_back_expanded():
    from harness.campaigns.chaos import read_raw

    variant = next(s for s in discover([DEFAULT_SCENARIO_DIR]) if s.variant)
    raw = read_raw(variant)
    assert "matrix" not in raw and raw["id"] == variant.id
    assert scenarios.parse(raw, variant.file, variant.variant) == variant
