"""Stricter than the frameworks: a decision counts only for the exact request still pending."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from countersign_client.errors import BindingMismatch
from countersign_client.models import Approval

__all__ = ["PendingCall", "arguments_sha256", "check_binding"]


def arguments_sha256(arguments: Any) -> str:
    """SHA-256 of canonical JSON (sorted keys, no spaces, UTF-8), as the server computes it."""
    canonical = json.dumps(
        arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


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
