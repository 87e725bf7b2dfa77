"""The human side of an end-to-end test: waits for the card in the Slack stand-in and clicks,
exactly as Slack would (signed block_actions through the bot's /slack/events)."""

from __future__ import annotations

import json

from bot.sandbox.standin import SlackUser
from tests.support.harness import CHANNEL, Harness


async def card_for_call(harness: Harness, call_id: str, timeout: float = 10.0) -> str:
    """The approval id of the card whose tool call id is ``call_id`` (waits for it)."""

    def find() -> str | None:
        for message in harness.standin.messages.get(CHANNEL, []):
            text = json.dumps(message.get("blocks"))
            if f"(call {call_id})" in text:
                for block in message["blocks"]:
                    for element in block.get("elements", []):
                        if element.get("action_id") == "countersign_approve":
                            return str(element["value"])
        return None

    await harness.standin.wait_for(lambda: find() is not None, timeout)
    found = find()
    assert found is not None
    return found


async def refused_then_decided(
    harness: Harness,
    call_id: str,
    *,
    requester: SlackUser,
    approver: SlackUser,
    action: str = "countersign_approve",
) -> str:
    """The requester's click is refused (four eyes), then ``approver`` decides. Returns the id."""
    approval_id = await card_for_call(harness, call_id)
    await harness.click(requester, approval_id, action)
    [why] = await harness.wait_ephemeral(requester)
    assert "you requested this call" in why
    await harness.click(approver, approval_id, action)
    return approval_id
