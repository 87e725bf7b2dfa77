"""Canonical JSON and the hashes that bind a decision to exactly one request."""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["arguments_sha256", "canonical_json", "sha256_hex"]


def canonical_json(value: Any) -> bytes:
    """Sorted keys, no insignificant whitespace, UTF-8 (non-ASCII kept as is, not escaped).

    Floats use Python's shortest round-trip repr, so ``1.0`` and ``1`` hash differently: the
    agent's framework sees them as different values too.
    """
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def arguments_sha256(arguments: Any) -> str:
    """The hash every decision echoes so an agent can check what was approved."""
    return sha256_hex(canonical_json(arguments))
