"""The Block Kit pieces every surface is built of (cards, forms, the App Home): pure builders of
Slack's JSON. Text handed to them is already escaped (:mod:`bot.untrusted_text`)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from approvals import models
from bot.untrusted_text import value

__all__ = [
    "Block",
    "button",
    "context",
    "date",
    "mention",
    "modal",
    "mrkdwn",
    "optional_input",
    "section",
]

Block = dict[str, Any]  # one Block Kit block, as JSON


def mrkdwn(text: str) -> dict[str, Any]:
    """A mrkdwn text object: verbatim, so Slack links nothing we did not write as markup."""
    return {"type": "mrkdwn", "text": text, "verbatim": True}


def section(text: str, block_id: str | None = None) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "section", "text": mrkdwn(text)}
    if block_id is not None:
        block["block_id"] = block_id
    return block


def context(text: str, block_id: str | None = None) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "context", "elements": [mrkdwn(text)]}
    if block_id is not None:
        block["block_id"] = block_id
    return block


def mention(slack_user_id: str) -> str:
    """A decider's mention; an id not shaped like Slack's is shown as text instead."""
    if models.SLACK_USER_ID.fullmatch(slack_user_id):
        return f"<@{slack_user_id}>"
    return value(slack_user_id, 100)


def date(at: datetime) -> str:
    """Slack renders this in the reader's time zone; the fallback is UTC ISO."""
    return f"<!date^{int(at.timestamp())}^{{date_short_pretty}} {{time}}|{at.isoformat()}>"


def button(label: str, action_id: str, value: str, style: str | None = None) -> dict[str, Any]:
    found = {
        "type": "button",
        "action_id": action_id,
        "text": {"type": "plain_text", "text": label},
        "value": value,  # an id only: everything else is looked up server-side
    }
    if style is not None:
        found["style"] = style
    return found


def optional_input(block_id: str, label: str, element: Block) -> Block:
    return {
        "type": "input",
        "block_id": block_id,
        "optional": True,
        "label": {"type": "plain_text", "text": label},
        "element": element,
    }


def modal(
    callback_id: str, metadata: dict[str, Any], title: str, submit: str, blocks: list[Block]
) -> dict[str, Any]:
    """A modal view; ``metadata`` (what its submission must name: the approval, where to
    answer) travels as its ``private_metadata``."""
    return {
        "type": "modal",
        "callback_id": callback_id,
        "private_metadata": json.dumps(metadata),
        "title": {"type": "plain_text", "text": title},
        "submit": {"type": "plain_text", "text": submit},
        "close": {"type": "plain_text", "text": "Cancel"},
        "blocks": blocks,
    }
