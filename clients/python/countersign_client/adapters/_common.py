"""What every adapter tells the model when a call is not approved."""

from __future__ import annotations

from countersign_client.models import Approval

__all__ = ["NOT_EXECUTED", "denial_text"]

NOT_EXECUTED = "The tool call was not executed; do not retry it unchanged."


def denial_text(decision: Approval) -> str:
    """The reason for anything but an approval (denied, expired, cancelled), ending with the
    instruction not to retry unchanged (added once, if the server's reason lacks it)."""
    reason = (decision.reason or "").strip() or f"The approval request was {decision.status}."
    return reason if NOT_EXECUTED in reason else f"{reason} {NOT_EXECUTED}"
