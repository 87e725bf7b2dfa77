"""Canonical JSON and the hashes that bind a decision to exactly one request.

The canonical form is RFC 8785 (JSON Canonicalization Scheme) over I-JSON (RFC 7493) values:
keys sorted by their UTF-16 code units, no insignificant whitespace, UTF-8, and numbers written
as ECMAScript writes a double (``1.0`` → ``1``, ``1e16`` → ``10000000000000000``, ``-0.0`` →
``0``). Any JCS library in any language computes the same bytes, so an agent can recompute
``arguments_sha256`` itself; the arguments it gets back are these very bytes.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import rfc8785

__all__ = [
    "MAX_SAFE_INTEGER",
    "NotCanonical",
    "arguments_sha256",
    "canonical_json",
    "legacy_canonical_text",
    "parse_canonical",
    "sha256_hex",
]

# I-JSON's integer range: beyond it an integer is no longer exact as an IEEE-754 double
MAX_SAFE_INTEGER = 2**53 - 1


class NotCanonical(ValueError):
    """A value RFC 8785 cannot write: NaN or an infinity, an integer beyond ±(2^53 − 1), a
    string that is not valid Unicode (a lone surrogate), a key that is not a string, or a type
    JSON does not have."""


def canonical_json(value: Any) -> bytes:
    """The RFC 8785 bytes of ``value``; raises :class:`NotCanonical` outside I-JSON."""
    if _plain(value):
        # For these values the standard library's sorted, compact form is the RFC 8785 form
        # (tests/unit/test_hashing.py holds the two equal), at C speed: rfc8785 writes in pure
        # Python, and was a quarter of a submission's CPU.
        try:
            return json.dumps(
                value, ensure_ascii=False, separators=(",", ":"), sort_keys=True
            ).encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: rfc8785 says why, below
            pass
    try:
        return rfc8785.dumps(value)
    # a lone surrogate in a key escapes rfc8785's own check and fails in the UTF-8 codec
    except (rfc8785.CanonicalizationError, UnicodeEncodeError) as exc:
        raise NotCanonical(f"not canonical JSON (RFC 8785): {exc}") from exc


def _plain(value: Any) -> bool:
    """Whether ``value`` holds only what both forms write alike: strings, booleans, null,
    integers within I-JSON's range, lists, and objects whose keys are strings within the Basic
    Multilingual Plane (where code point order is UTF-16 order). Floats (ECMAScript's number
    format) and anything else go to rfc8785, which writes them or refuses them."""
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        return bool(-MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER)
    if kind is list:
        return all(_plain(item) for item in value)
    if kind is dict:
        return all(
            type(key) is str and (key.isascii() or max(key) < "\U00010000") and _plain(item)
            for key, item in value.items()
        )
    return False


def parse_canonical(text: str | bytes) -> Any:
    """The values of RFC 8785 text that :func:`canonical_json` wrote, which writes them again
    as the same bytes. Its numbers are doubles: an integer beyond ±(2^53 − 1) in it (a double
    such as ``1e16``, written in digits) is read as that double, not as a Python int, which
    :func:`canonical_json` would refuse as inexact."""
    return json.loads(text, parse_int=_int_or_double)


def _int_or_double(digits: str) -> int | float:
    number = int(digits)
    return number if -MAX_SAFE_INTEGER <= number <= MAX_SAFE_INTEGER else float(number)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def arguments_sha256(arguments: Any) -> str:
    """The hash every decision echoes so an agent can check what was approved."""
    return sha256_hex(canonical_json(arguments))


def legacy_canonical_text(value: Any) -> str:
    """The form hashed before RFC 8785 (sorted keys, compact, Python's float repr): the text of
    arguments stored before migration 0007, rebuilt from their ``jsonb`` value. For integers,
    strings, booleans and null it is the RFC 8785 text too (key order aside, for keys outside
    the Basic Multilingual Plane)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
