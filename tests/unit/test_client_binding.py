"""The agent-side hash (countersign_client.arguments_sha256) is the server's: RFC 8785, with
JSON's numbers (IEEE-754 doubles), so arguments read back from a decision hash as when sent."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from approvals import hashing
from countersign_client import arguments_sha256

TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=6)
VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-hashing.MAX_SAFE_INTEGER, hashing.MAX_SAFE_INTEGER)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=16,
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(TEXT, VALUES, max_size=6))
def test_the_client_computes_the_servers_hash(arguments: dict[str, Any]) -> None:
    assert arguments_sha256(arguments) == hashing.arguments_sha256(arguments)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(TEXT, VALUES, max_size=6))
def test_the_canonical_text_read_back_by_python_hashes_the_same(arguments: dict[str, Any]) -> None:
    """json.loads reads 10000000000000000 (the canonical 1e16) as an int: still the same hash."""
    echoed = json.loads(hashing.canonical_json(arguments))
    assert arguments_sha256(echoed) == hashing.arguments_sha256(arguments)


def test_the_reproduced_break() -> None:
    sent = {"x": 1e16, "y": -0.0, "z": 1.5e300}
    echoed = json.loads('{"x":10000000000000000,"y":0,"z":1.5e+300}')
    assert isinstance(echoed["x"], int)
    assert arguments_sha256(echoed) == arguments_sha256(sent) == hashing.arguments_sha256(sent)


@pytest.mark.parametrize(
    "value",
    [
        {"x": 2**53 + 1},  # no double is this integer: hashing it as one would change it
        {"x": 10**400},
        {"x": float("nan")},
        {"x": float("inf")},
        {"x": "\ud800"},
    ],
)
def test_what_json_cannot_carry_exactly_is_refused(value: dict[str, Any]) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - the client's documented contract
        arguments_sha256(value)


def test_unchanged_for_integers_and_strings() -> None:
    """Agents that hashed sorted compact JSON before keep their hashes (BMP keys, no floats)."""
    arguments = {"amount": 500, "memo": "Zoë", "to": {"iban": "DE89", "tags": ["b", "a"]}}
    legacy = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert arguments_sha256(arguments) == hashing.sha256_hex(legacy.encode())
