"""Stricter than the frameworks: a decision counts only for the exact request still pending."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import rfc8785

from countersign_client.errors import BindingMismatch
from countersign_client.models import Approval, Edit

__all__ = ["PendingCall", "arguments_sha256", "check_binding", "check_edit"]

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


def check_edit(decision: Approval) -> Edit | None:
    """A reviewer's edit of an approved decision, once it holds: its arguments hash to its
    ``arguments_sha256``, which is not the requested one, and its patch (RFC 6902 ``replace``
    operations) takes the requested arguments to exactly those. None when the decision is not
    approved or carries no edit; raises BindingMismatch otherwise."""
    edit = decision.edit
    if edit is None or not decision.approved:
        return None
    if arguments_sha256(edit.arguments) != edit.arguments_sha256:
        raise BindingMismatch(
            "edit.arguments_sha256", arguments_sha256(edit.arguments), edit.arguments_sha256
        )
    if edit.arguments_sha256 == decision.arguments_sha256:
        raise BindingMismatch("edit.arguments_sha256", "a change", edit.arguments_sha256)
    patched = _patched(decision.tool.arguments, edit.patch)
    if patched is None or arguments_sha256(patched) != edit.arguments_sha256:
        raise BindingMismatch("edit.patch", edit.arguments_sha256, "another result")
    return edit


def _patched(arguments: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any] | None:
    """``arguments`` with the patch's replace operations applied (each at a value that is there),
    or None for a patch that is not that."""
    out = json.loads(json.dumps(arguments))
    for op in patch:
        path = op.get("path")
        if op.get("op") != "replace" or not isinstance(path, str) or not path.startswith("/"):
            return None
        parts = [p.replace("~1", "/").replace("~0", "~") for p in path.split("/")[1:]]
        node: Any = out
        for part in parts[:-1]:
            node = _step(node, part)
            if node is None:
                return None
        last = parts[-1]
        if isinstance(node, dict) and last in node:
            node[last] = op.get("value")
        elif isinstance(node, list) and last.isdigit() and int(last) < len(node):
            node[int(last)] = op.get("value")
        else:
            return None
    return out if isinstance(out, dict) else None


def _step(node: Any, part: str) -> Any:
    if isinstance(node, dict):
        return node.get(part)
    if isinstance(node, list) and part.isdigit() and int(part) < len(node):
        return node[int(part)]
    return None
