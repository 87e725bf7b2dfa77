"""The largest request Slack can send back about our own surfaces fits the application's body
limit (``slack_app.MAX_PAYLOAD``, aiohttp's ``client_max_size``).

Slack's interaction payloads echo the surface the click came from (the card's message, the App
Home view, the Deny modal with its input), JSON with every non-ASCII character as a ``\\uXXXX``
escape, form-encoded as one ``payload`` field. Each surface is rendered here at its limits
(every untrusted text as long as the wire allows, in the characters that cost the most bytes)
and measured as Slack would send it.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

import pytest

from approvals import models
from bot import blocks, slack_app, webhook
from tests.unit.test_blocks import make_approval

# what each costs on the wire per UTF-16 unit, once JSON-escaped and form-encoded
COSTLY = ["é", "😀", '"', "<", "&", "\u202e"]
HOME_ITEMS = blocks.HOME_ITEMS + 5  # more than the Home shows: the rest are only counted


def at_the_limits(index: int, ch: str) -> models.Approval:
    long = ch * 20_000
    approval = make_approval(
        summary=long[:2000],
        tool=("t" + long)[:200],
        call_id=("c" + long)[:200],
        arguments={"note": long},
        session_id=long[:200],
        agent=long[:200],
        requester=models.Requester(slack_user_id="U0REQ", name=long[:200]),
    )
    return approval.evolve(
        approval_id=f"apr_{index:024x}",
        why=long[:2000],
        delivery=models.Delivery(status="dead_letter", attempts=7, last_error=long),
        card=models.CardRef(channel="C0REVIEWS", ts="1700000000.000100"),
    )


def on_the_wire(payload: dict[str, Any]) -> int:
    encoded = json.dumps(payload, ensure_ascii=True, separators=(",", ":"))
    return len(urlencode({"payload": encoded}))


def card_click(ch: str) -> int:
    text, card = blocks.card(at_the_limits(0, ch))
    message = {"type": "message", "text": text, "blocks": card, "ts": "1700000000.000100"}
    return on_the_wire({"type": "block_actions", "message": message, "state": {"values": {}}})


def home_click(ch: str) -> int:
    approvals = [at_the_limits(i, ch) for i in range(HOME_ITEMS)]
    view = blocks.home_view(approvals, approvals)
    return on_the_wire({"type": "block_actions", "view": {**view, "state": {"values": {}}}})


def deny_submission(ch: str) -> int:
    presets = tuple(ch * 200 for _ in range(100))
    modal = blocks.deny_modal(at_the_limits(0, ch), "C0REVIEWS", presets)
    typed = {blocks.REASON_BLOCK: {"reason_input": {"value": ch * 2000}}}
    return on_the_wire({"type": "view_submission", "view": {**modal, "state": {"values": typed}}})


@pytest.mark.parametrize("ch", COSTLY)
@pytest.mark.parametrize("surface", [card_click, home_click, deny_submission])
def test_slack_requests_about_our_surfaces_fit_the_limit(surface: Any, ch: str) -> None:
    # two thirds of the limit at most: room for what Slack adds (ids, state, its own fields)
    assert surface(ch) < slack_app.MAX_PAYLOAD / 1.5


def test_a_card_click_alone_can_be_past_the_agent_apis_limit() -> None:
    """Why the application's limit cannot be the agent API's 64 KiB."""
    assert max(card_click(ch) for ch in COSTLY) > webhook.MAX_BODY
