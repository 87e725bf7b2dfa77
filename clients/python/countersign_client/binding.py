"""Stricter than the frameworks: a decision counts only for the exact request still pending."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import rfc8785

from countersign_client.errors import BindingMismatch
from countersign_client.models import Approval

__all__ = ["PendingCall", "arguments_sha256", "check_binding"]

# beyond it an integer is no longer exact as an IEEE-754 double (I-JSON, RFC 7493)
_MAX_SAFE_INTEGER = 2**53 - 1


def arguments_sha256(arguments: Any) -> str:
    """SHA-256 of the RFC 8785 (JCS) form of ``arguments``, as the server computes it.

    JSON numbers are IEEE-754 doubles: ``1`` and ``1.0`` are one number, and RFC 8785 writes a
    large double as digits (1e16 as ``10000000000000000``) that Python reads back as an int.
    An int past ±(2^53 − 1) therefore counts as a double when it is exactly how RFC 8785 writes
    one, so arguments read back from a decision hash as they did when sent. Any other such int
    (``2**53 + 1``: no double is it), NaN, an infinity or a lone surrogate raises ValueError;
    the server refuses those with a 422.
    """
    return hashlib.sha256(rfc8785.dumps(_as_json_numbers(arguments))).hexdigest()


def _as_json_numbers(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and abs(value) > _MAX_SAFE_INTEGER:
        return _written_double(value)
    if isinstance(value, dict):
        return {key: _as_json_numbers(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_as_json_numbers(item) for item in value]
    return value


def _written_double(value: int) -> float:
    """The double RFC 8785 writes as ``value``'s digits; ValueError when there is none."""
    try:
        double = float(value)  # the nearest double, as any JSON parser reads the digits
    except OverflowError:
        double = float("inf")
    if double in (float("inf"), float("-inf")) or rfc8785.dumps(double) != str(value).encode():
        raise ValueError("an integer beyond ±(2^53 − 1) that is not the text of a JSON double")
    return double


@dataclass(frozen=True)
class PendingCall:
    """What the agent session itself holds about the call it paused on."""

    approval_id: str
    request_id: str
    session_id: str
    call_id: str
    arguments: dict[str, Any]

    @property
    def arguments_sha256(self) -> str:
        return arguments_sha256(self.arguments)


def check_binding(decision: Approval, pending: PendingCall) -> Approval:
    """``decision`` if every echoed field matches ``pending``; raises BindingMismatch."""
    for field, expected, got in (
        ("approval_id", pending.approval_id, decision.approval_id),
        ("request_id", pending.request_id, decision.request_id),
        ("session_id", pending.session_id, decision.session_id),
        ("tool.call_id", pending.call_id, decision.tool.call_id),
        ("arguments_sha256", pending.arguments_sha256, decision.arguments_sha256),
    ):
        if expected != got:
            raise BindingMismatch(field, expected, got)
    return decision
