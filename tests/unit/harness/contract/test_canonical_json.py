"""canonical_json is RFC 8785 (JCS): the RFC's own examples, the rfc8785 library's text for
every JSON value (its fast path and its exact path agree), the old Python text for every
value without a float, a non-BMP key or a long integer (so no digest of such a value moved),
and a refusal naming the path of what RFC 8785 has no text for."""

from __future__ import annotations

import hashlib
import json
import math
import struct

import pytest
import rfc8785
from hypothesis import given
from hypothesis import strategies as st

from harness import contract as c

# RFC 8785, Appendix B: IEEE-754 doubles (as bits) and the text ECMAScript writes for them.
NUMBERS = {
    0x0000000000000000: "0", 0x8000000000000000: "0", 0x0000000000000001: "5e-324",
    0x8000000000000001: "-5e-324", 0x7fefffffffffffff: "1.7976931348623157e+308",
    0xffefffffffffffff: "-1.7976931348623157e+308", 0x4340000000000000: "9007199254740992",
    0xc340000000000000: "-9007199254740992", 0x4430000000000000: "295147905179352830000",
    0x44b52d02c7e14af5: "9.999999999999997e+22", 0x44b52d02c7e14af6: "1e+23",
    0x44b52d02c7e14af7: "1.0000000000000001e+23", 0x444b1ae4d6e2ef4e: "999999999999999700000",
    0x444b1ae4d6e2ef4f: "999999999999999900000", 0x444b1ae4d6e2ef50: "1e+21",
    0x3eb0c6f7a0b5ed8c: "9.999999999999997e-7", 0x3eb0c6f7a0b5ed8d: "0.000001",
    0x41b3de4355555553: "333333333.3333332", 0x41b3de4355555554: "333333333.33333325",
    0x41b3de4355555555: "333333333.3333333", 0x41b3de4355555556: "333333333.3333334",
    0x41b3de4355555557: "333333333.33333343", 0xbecbf647612f3696: "-0.0000033333333333333333",
    0x43143ff3c1cb0959: "1424953923781206.2",
}


def double(bits: int) -> float:
    return struct.unpack(">d", bits.to_bytes(8, "big"))[0]


def python_text(value) -> str:
    """What canonical JSON was before RFC 8785 (contract.md until then)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@pytest.mark.parametrize("bits", sorted(NUMBERS))
def test_numbers_are_written_as_ecmascript_writes_them(bits):
    number, text = double(bits), NUMBERS[bits]
    assert c.canonical_json(number) == text
    # inside a document too (the fast path must send every float the exact way)
    assert c.canonical_json({"n": [1, number]}) == f'{{"n":[1,{text}]}}'


def test_the_rfc_example_of_section_3_2_2():
    value = json.loads(
        '{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],'
        ' "string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/",'
        ' "literals": [null, true, false]}')
    assert c.canonical_json(value) == (
        '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
        '"string":"\u20ac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}')


def test_keys_sort_by_utf16_code_units_as_in_section_3_2_3():
    value = {"\u20ac": "Euro Sign", "\r": "Carriage Return",
             "\ufb33": "Hebrew Letter Dalet With Dagesh", "1": "One",
             "\U0001f600": "Emoji: Grinning Face", "\u0080": "Control",
             "\u00f6": "Latin Small Letter O With Diaeresis"}
    keys = list(json.loads(c.canonical_json(value)))
    assert keys == ["\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001f600", "\ufb33"]
    # by code point the emoji would come last: the one place the old text differed
    assert list(json.loads(python_text(value)))[-1] == "\U0001f600"


def test_the_differences_from_the_old_python_text_are_these():
    assert c.canonical_json({"timeout": 30.0, "ratio": 0.5, "tiny": 1e-7, "big": 1e21}) == \
        '{"big":1e+21,"ratio":0.5,"timeout":30,"tiny":1e-7}'
    assert python_text({"timeout": 30.0, "tiny": 1e-7}) == '{"timeout":30.0,"tiny":1e-07}'
    assert c.canonical_json(-0.0) == "0" and c.canonical_json(1e16) == "10000000000000000"


_scalars = (st.none() | st.booleans() | st.integers(-c.SAFE_INTEGER_MAX, c.SAFE_INTEGER_MAX)
            | st.integers(-99, 99) | st.text(max_size=6))
_wide = st.text(st.sampled_from("aZ\u00e9\u20ac\ufb01\uffff\U00010000\U0001f600\n\"\\"), max_size=3)


def _json(leaves, keys):
    return st.recursive(leaves, lambda inner: st.lists(inner, max_size=4)
                        | st.dictionaries(keys, inner, max_size=4), max_leaves=20)


@given(_json(_scalars | st.floats(allow_nan=False, allow_infinity=False) | _wide,
             st.text(max_size=4) | _wide))
def test_the_text_is_the_rfc8785_librarys_for_every_json_value(value):
    assert c.canonical_json(value) == rfc8785.dumps(value).decode("utf-8")


@given(_json(_scalars | st.text(st.characters(max_codepoint=0xFFFF, exclude_categories=["Cs"])),
             st.text(st.characters(max_codepoint=0xFFFF, exclude_categories=["Cs"]), max_size=4)))
def test_without_floats_astral_keys_or_long_integers_the_old_text_is_unchanged(value):
    assert c.canonical_json(value) == python_text(value)
    digest_before = "sha256:" + hashlib.sha256(
        python_text({"tool": "t", "args": {"v": value}}).encode()).hexdigest()
    assert c.args_digest("t", {"v": value}) == digest_before


def test_a_string_that_looks_like_a_number_is_written_as_it_is():
    # the fast path's check may look inside strings; it must never change them
    for text in ("x:1.5,", "[1e+07]", ",12345678901234567]", "sha256:677102e5"):
        assert c.canonical_json({"s": text}) == python_text({"s": text})


@pytest.mark.parametrize("value, path, says", [
    ({"args": {"n": 2**53 + 1}}, "$.args.n", "the integer 9007199254740993 is past"),
    ([1, -(2**53) - 1], "$[1]", "the integer -9007199254740993 is past"),
    ({"x": math.nan}, "$.x", "nan has no JSON text"),
    ([math.inf], "$[0]", "inf has no JSON text"),
    ({"t": "ok \ud800"}, "$.t", "lone surrogate U+D800"),
    ({"\udfff": 1}, "$", "the key '\\udfff' holds a lone surrogate"),
    (2**60, "$", "the integer 1152921504606846976 is past"),
])
def test_what_rfc_8785_has_no_text_for_is_refused_with_its_path(value, path, says):
    with pytest.raises(c.CanonicalJsonError) as caught:
        c.canonical_json(value)
    assert f"{path}: " in str(caught.value) and says in str(caught.value)
    assert c.canonical_json_problem(value).startswith(f"{path}: ")
    assert isinstance(caught.value, ValueError)  # as json's own refusals are


@given(_json(_scalars | st.floats(allow_nan=False, allow_infinity=False) | _wide,
             st.text(max_size=4) | _wide))
def test_a_canonical_text_read_back_is_written_the_same(value):
    # a float such as 5.340122595676513e16 is written 53401225956765130, which Python reads
    # back as an int past 2**53 - 1: that int is the double's own text, so it is written again
    text = c.canonical_json(value)
    assert c.canonical_json(json.loads(text)) == text


def test_past_2_53_an_integer_is_written_only_as_the_text_of_its_double():
    assert c.canonical_json([53401225956765130, 2**53, 1152921504606847000]) == \
        "[53401225956765130,9007199254740992,1152921504606847000]"
    assert c.integer_problem(53401225956765130) == ""
    assert "the double written 1152921504606847000" in c.integer_problem(2**60)
    assert "infinity" in c.integer_problem(10**400)


def test_the_largest_exact_integers_are_written():
    assert c.canonical_json([c.SAFE_INTEGER_MAX, -c.SAFE_INTEGER_MAX]) == \
        "[9007199254740991,-9007199254740991]"
    assert c.canonical_json_problem({"a": [1, 1.5, "x", None, True]}) == ""
