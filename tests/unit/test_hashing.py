"""Canonical JSON and arguments_sha256: the hash that binds a decision to one request."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

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
        ({"x": 1}, {"x": 1.0}),
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
    with pytest.raises(ValueError, match="JSON"):
        hashing.canonical_json(value)
    with pytest.raises(ValueError, match="JSON"):
        hashing.arguments_sha256(value)


def test_sha256_hex_is_lowercase_hex_of_64() -> None:
    digest = hashing.sha256_hex(b"countersign")
    assert len(digest) == 64
    assert digest == digest.lower()
    assert int(digest, 16) >= 0
    assert digest == hashlib.sha256(b"countersign").hexdigest()
