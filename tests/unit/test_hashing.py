"""Canonical JSON (RFC 8785) and arguments_sha256: the hash that binds a decision to one request."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from approvals import hashing

# Written by hand, byte for byte: sorted keys at every depth, no spaces, UTF-8 (not \\u escapes).
FIXED_INPUT: dict[str, Any] = {
    "to": {"tags": ["b", "a"], "iban": "DE89 3704"},
    "memo": "Zoë pays 🚀",
    "currency": "EUR",
    "amount": 500,
}
FIXED_BYTES = (
    b'{"amount":500,"currency":"EUR","memo":"Zo\xc3\xab pays \xf0\x9f\x9a\x80",'
    b'"to":{"iban":"DE89 3704","tags":["b","a"]}}'
)
FIXED_SHA256 = "e67bdf586039a4fdd9c8d6f5c36d4421dc4d4e8911dfaf799beb6435a08f1b08"


def test_fixed_input_has_the_fixed_canonical_bytes() -> None:
    assert hashing.canonical_json(FIXED_INPUT) == FIXED_BYTES


def test_fixed_input_has_the_fixed_hash() -> None:
    expected = hashlib.sha256(FIXED_BYTES).hexdigest()
    assert expected == FIXED_SHA256  # the literal guards the test's own bytes
    assert hashing.arguments_sha256(FIXED_INPUT) == expected
    assert hashing.sha256_hex(FIXED_BYTES) == expected


def test_empty_arguments_hash() -> None:
    assert hashing.arguments_sha256({}) == hashlib.sha256(b"{}").hexdigest()


def test_keys_sorted_at_every_depth() -> None:
    value = {"b": {"z": 1, "a": [{"y": 1, "x": 2}]}, "a": 0}
    assert hashing.canonical_json(value) == b'{"a":0,"b":{"a":[{"x":2,"y":1}],"z":1}}'


def test_no_insignificant_whitespace() -> None:
    value = {"list": [1, 2, {"k": None}], "obj": {"t": True, "f": False}}
    out = hashing.canonical_json(value)
    assert b" " not in out
    assert b"\n" not in out
    assert out == b'{"list":[1,2,{"k":null}],"obj":{"f":false,"t":true}}'


def test_whitespace_inside_strings_is_kept() -> None:
    assert hashing.canonical_json({"s": "a b\tc"}) == b'{"s":"a b\\tc"}'


@pytest.mark.parametrize("text", ["Zoë", "Ærøskøbing", "日本語", "🚀✅", "Ω≈ç√"])
def test_non_ascii_is_utf8_not_escaped(text: str) -> None:
    out = hashing.canonical_json({"name": text})
    assert out == b'{"name":"' + text.encode("utf-8") + b'"}'
    assert b"\\u" not in out
    assert out.decode("utf-8") == '{"name":"' + text + '"}'


def test_output_is_bytes_that_round_trip() -> None:
    out = hashing.canonical_json(FIXED_INPUT)
    assert isinstance(out, bytes)
    assert json.loads(out) == FIXED_INPUT


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ({"a": 1, "b": 2}, {"b": 2, "a": 1}),
        ({"x": {"p": 1, "q": [{"m": 1, "n": 2}]}}, {"x": {"q": [{"n": 2, "m": 1}], "p": 1}}),
    ],
)
def test_key_order_does_not_change_the_hash(one: dict[str, Any], other: dict[str, Any]) -> None:
    assert json.dumps(one) != json.dumps(other)  # the inputs really differ in key order
    assert hashing.arguments_sha256(one) == hashing.arguments_sha256(other)


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ({"x": "1"}, {"x": 1}),
        ({"x": True}, {"x": 1}),
        ({"x": False}, {"x": 0}),
        ({"x": None}, {"x": "null"}),
        ({"x": None}, {}),
        ({"x": [1, 2]}, {"x": [2, 1]}),
        ({"x": {}}, {"x": []}),
        ({"x": 500}, {"x": 5000}),
        ({"x": "a"}, {"x": "a "}),
        ({"x": "é"}, {"x": "e\u0301"}),  # NFC vs NFD: different bytes, different call
        ({"x": 0.1}, {"x": 0.10000000000000002}),
        ({"amount": 500}, {"Amount": 500}),
    ],
)
def test_different_values_change_the_hash(one: dict[str, Any], other: dict[str, Any]) -> None:
    assert hashing.arguments_sha256(one) != hashing.arguments_sha256(other)


@pytest.mark.parametrize(
    "value",
    [
        {"x": float("nan")},
        {"x": float("inf")},
        {"x": float("-inf")},
        {"deep": [{"x": float("nan")}]},
    ],
)
def test_nan_and_infinity_are_refused(value: dict[str, Any]) -> None:
    with pytest.raises(hashing.NotCanonical, match="RFC 8785"):
        hashing.canonical_json(value)
    with pytest.raises(ValueError, match="RFC 8785"):
        hashing.arguments_sha256(value)


def test_sha256_hex_is_lowercase_hex_of_64() -> None:
    digest = hashing.sha256_hex(b"countersign")
    assert len(digest) == 64
    assert digest == digest.lower()
    assert int(digest, 16) >= 0
    assert digest == hashlib.sha256(b"countersign").hexdigest()


# -- RFC 8785 itself ------------------------------------------------------------------------


def test_the_rfc_8785_example_of_section_3_2_2() -> None:
    """The RFC's own example, parsed from its JSON text and canonicalised, byte for byte."""
    source = (
        '{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],'
        ' "string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/",'
        ' "literals": [null, true, false]}'
    )
    expected = (
        '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
        '"string":"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
    ).encode()
    assert hashing.canonical_json(json.loads(source)) == expected


def test_keys_are_sorted_by_utf16_code_units_as_in_rfc_8785_section_3_2_3() -> None:
    keys = ["\u20ac", "\r", "\ufb33", "1", "\U0001f600", "\u0080", "\u00f6"]
    out = hashing.canonical_json(dict.fromkeys(keys, 0))
    order = ["\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001f600", "\ufb33"]
    members = ",".join(json.dumps(k, ensure_ascii=False) + ":0" for k in order)
    assert out == ("{" + members + "}").encode()


@pytest.mark.parametrize(
    ("number", "text"),
    [
        (1e16, b"10000000000000000"),  # Python's repr says 1e+16
        (-0.0, b"0"),
        (1.5e300, b"1.5e+300"),
        (1.0, b"1"),
        (1e21, b"1e+21"),
        (1e20, b"100000000000000000000"),
        (1e-7, b"1e-7"),
        (0.000001, b"0.000001"),
        (5e-324, b"5e-324"),
        (-1.7976931348623157e308, b"-1.7976931348623157e+308"),
        (0.1, b"0.1"),
        (9007199254740991, b"9007199254740991"),
        (-9007199254740991, b"-9007199254740991"),
    ],
)
def test_numbers_are_written_as_ecmascript_writes_a_double(number: float, text: bytes) -> None:
    assert hashing.canonical_json({"n": number}) == b'{"n":' + text + b"}"


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ({"x": 1}, {"x": 1.0}),  # one IEEE-754 double, one JSON number: the same call
        ({"x": 0.0}, {"x": -0.0}),
    ],
)
def test_the_same_double_hashes_the_same(one: dict[str, Any], other: dict[str, Any]) -> None:
    assert hashing.canonical_json(one) == hashing.canonical_json(other)


@pytest.mark.parametrize(
    "value",
    [
        {"x": 2**53},
        {"x": -(2**53)},
        {"x": 10**16},  # the double 1e16 is fine; as an integer it is past I-JSON's range
        {"x": 10**400},
        {"x": "\ud800"},  # a lone surrogate is not Unicode text
        {"\udfff": "x"},  # nor in a key (where rfc8785 leaves it to the UTF-8 codec)
        {1: "key of another type"},
        {"x": {1, 2}},
        {"x": b"bytes"},
    ],
)
def test_values_outside_i_json_are_refused(value: Any) -> None:
    with pytest.raises(hashing.NotCanonical):
        hashing.canonical_json(value)


def test_the_safe_integer_bound_is_i_jsons() -> None:
    assert hashing.MAX_SAFE_INTEGER == 9007199254740991
    assert hashing.canonical_json(hashing.MAX_SAFE_INTEGER) == b"9007199254740991"
    with pytest.raises(hashing.NotCanonical):
        hashing.canonical_json(hashing.MAX_SAFE_INTEGER + 1)


def test_it_is_the_rfc8785_package() -> None:
    assert hashing.canonical_json(FIXED_INPUT) == rfc8785.dumps(FIXED_INPUT)


# -- existing agents keep working: no floats, no keys outside the BMP → the same hash as before


BMP_TEXT = st.text(st.characters(max_codepoint=0xFFFF, exclude_categories=["Cs"]), max_size=8)
ANY_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=8)
SAFE_INTS = st.integers(-hashing.MAX_SAFE_INTEGER, hashing.MAX_SAFE_INTEGER)


def _json_values(keys: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    scalars = st.none() | st.booleans() | SAFE_INTS | ANY_TEXT
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
        max_leaves=12,
    )


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(BMP_TEXT, _json_values(BMP_TEXT), max_size=5))
def test_without_floats_the_hash_is_the_one_agents_computed_before(value: dict[str, Any]) -> None:
    """Integers, strings, booleans and null: RFC 8785 writes exactly what the sorted compact
    JSON of earlier versions wrote (for keys inside the Basic Multilingual Plane)."""
    assert hashing.canonical_json(value).decode("utf-8") == hashing.legacy_canonical_text(value)


def test_keys_outside_the_bmp_are_the_one_difference_in_key_order() -> None:
    value = {"\U0001f600": 1, "\uff61": 2}  # U+1F600 is D83D DE00 in UTF-16: before U+FF61
    assert hashing.canonical_json(value) == '{"\U0001f600":1,"\uff61":2}'.encode()
    assert hashing.legacy_canonical_text(value) == '{"\uff61":2,"\U0001f600":1}'


@settings(max_examples=200, deadline=None)
@given(_json_values(ANY_TEXT) | st.floats(allow_nan=False, allow_infinity=False))
def test_canonical_bytes_parse_back_to_the_same_canonical_bytes(value: Any) -> None:
    """Idempotent: the canonical text, read as JSON numbers are (doubles), canonicalises to
    itself; this is what an agent re-hashing the returned arguments relies on."""
    once = hashing.canonical_json(value)
    assert hashing.canonical_json(json.loads(once, parse_int=float)) == once


# -- the fast path (the standard library's form where it is RFC 8785's) is rfc8785, always

_EDGY_TEXT = st.text(
    st.sampled_from(list('a\u00e9\u20ac\ue000\uffff\U00010000\U0001f600"\\\n\x00\x1f\x7f\u2028'))
    | st.characters(),
    max_size=6,
)
_EDGY_NUMBERS = (
    st.integers(-(2**54), 2**54)
    | st.sampled_from([hashing.MAX_SAFE_INTEGER, -hashing.MAX_SAFE_INTEGER, 10**400])
    | st.floats(allow_nan=True, allow_infinity=True)
)
_EDGY_VALUES = st.recursive(
    st.none() | st.booleans() | _EDGY_NUMBERS | _EDGY_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_EDGY_TEXT, inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=1500, deadline=None)
@given(_EDGY_VALUES)
def test_canonical_json_is_rfc8785_or_refuses_as_it_does(value: Any) -> None:
    try:
        expected = rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, UnicodeEncodeError):
        with pytest.raises(hashing.NotCanonical):
            hashing.canonical_json(value)
        return
    assert hashing.canonical_json(value) == expected


@pytest.mark.parametrize(
    "text", ['{"n":10000000000000000}', '{"n":-1152921504606847000}', "[9007199254740991,1e+21]"]
)
def test_canonical_text_parses_back_to_values_that_write_the_same_bytes(text: str) -> None:
    assert hashing.canonical_json(hashing.parse_canonical(text)).decode() == text
