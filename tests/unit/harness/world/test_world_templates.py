"""Placeholders expand deterministically from the seed and are checked at load."""

from harness.world.templates import Templates, check, file_sha256


def test_faker_values_follow_the_seed():
    value = {"to": "{{faker:email}}", "list": ["{{faker:name}}", 3], "plain": "no placeholder"}
    first, again = Templates(5).expand(value), Templates(5).expand(value)
    other = Templates(6).expand(value)
    assert first == again and first != other
    assert "@" in first["to"] and first["list"][1] == 3 and first["plain"] == "no placeholder"


def test_sha256_names_an_initial_file():
    templates = Templates(0, {"/repo/a": "hello"})
    assert templates.expand("{{sha256:/repo/a}}") == file_sha256("hello")
    assert file_sha256("hello").startswith("sha256:") and len(file_sha256("")) == 71


def test_check_reports_every_bad_placeholder():
    assert check("{{faker:email}} and {{ sha256:/a }}", {"/a": ""}) == []
    problems = check("{{faker:nope}} {{x}} {{sha256:/b}} {{what:ever}}", {"/a": ""})
    assert len(problems) == 4
    assert "unknown Faker provider 'nope'" in problems[0]
    assert "malformed placeholder '{{x}}'" in problems[1]
    assert "names no initial file (valid: /a)" in problems[2]
    assert "unknown placeholder kind 'what'" in problems[3]
