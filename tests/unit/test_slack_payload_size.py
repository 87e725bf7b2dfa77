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
from bot import interactions, rendering, slack_app, untrusted_text, wire
from tests.unit.test_rendering import make_approval

# what each costs on the wire per UTF-16 unit, once JSON-escaped and form-encoded
COSTLY = ["é", "😀", '"', "<", "&", "\u202e"]
HOME_ITEMS = rendering.HOME_ITEMS + 5  # more than the Home shows: the rest are only counted


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
    text, card = rendering.card(at_the_limits(0, ch))
    message = {"type": "message", "text": text, "blocks": card, "ts": "1700000000.000100"}
    return on_the_wire({"type": "block_actions", "message": message, "state": {"values": {}}})


def home_click(ch: str) -> int:
    approvals = [at_the_limits(i, ch) for i in range(HOME_ITEMS)]
    view = rendering.home_view(approvals, approvals)
    return on_the_wire({"type": "block_actions", "view": {**view, "state": {"values": {}}}})


def deny_submission(ch: str) -> int:
    presets = tuple(ch * 200 for _ in range(100))
    modal = rendering.deny_modal(at_the_limits(0, ch), "C0REVIEWS", presets)
    typed = {interactions.REASON_BLOCK: {"reason_input": {"value": ch * 2000}}}
    return on_the_wire({"type": "view_submission", "view": {**modal, "state": {"values": typed}}})


@pytest.mark.parametrize("ch", COSTLY)
@pytest.mark.parametrize("surface", [card_click, home_click, deny_submission])
def test_slack_requests_about_our_surfaces_fit_the_limit(surface: Any, ch: str) -> None:
    # two thirds of the limit at most: room for what Slack adds (ids, state, its own fields)
    assert surface(ch) < slack_app.MAX_PAYLOAD / 1.5


def test_a_card_click_alone_can_be_past_the_agent_apis_limit() -> None:
    """Why the application's limit cannot be the agent API's 64 KiB."""
    assert max(card_click(ch) for ch in COSTLY) > wire.MAX_BODY


# Slack has answered msg_blocks_too_long for cards near 12,000 characters of text in all, each
# block within its own limit: a card keeps its whole text under 10,000.
CARD_TEXT_LIMIT = 10_000


def card_texts(value: object) -> list[str]:
    """Every text of a rendering (nested text objects included)."""
    if isinstance(value, dict):
        return [
            text
            for key, inner in value.items()
            for text in ([inner] if key == "text" and isinstance(inner, str) else card_texts(inner))
        ]
    if isinstance(value, list):
        return [text for inner in value for text in card_texts(inner)]
    return []


def utf16(text: str) -> int:
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def every_state(approval: models.Approval, ch: str) -> list[models.Approval]:
    """The approval at the limits, pending (escalated, voted, a lead-facing turn's) and
    settled (approved by ten, run, with the longest outcome detail)."""
    long = ch * 20_000
    at = approval.created_at
    deciders = tuple(
        models.Decider(slack_user_id=f"U0DECIDER{i}", name=long[:200], at=at) for i in range(10)
    )
    lead = approval.evolve(
        request_id=models.TURN_REQUEST_PREFIX + "call_9",
        context={"channel": long[:500], "lead_id": long[:500], "why": long},
        escalated_at=at,
        decided_by=deciders[:9],
        required=models.Required(role="finance", approvals=10),
    )
    run = models.Execution(
        claim_id="clm_1",
        idempotency_key="k" * 64,
        claimed_at=at,
        outcome=models.ExecutionOutcome(status="error", detail=long[:4000], reported_at=at),
    )
    approved = approval.evolve(
        status=models.Status.APPROVED,
        decided_by=deciders,
        decided_at=at,
        execution=run,
        argument_schemas=(long[:500],),
    )
    return [approval, lead, approved]


@pytest.mark.parametrize("ch", ["a", *COSTLY, "*", "`"])
def test_a_card_at_its_limits_keeps_its_text_under_ten_thousand(ch: str) -> None:
    for approval in every_state(at_the_limits(0, ch), ch):
        _, card = rendering.card(approval)
        total = sum(utf16(text) for text in card_texts(card))
        assert total < CARD_TEXT_LIMIT, (ch, approval.status, approval.lead_facing, total)
        # what was cut says so, with the marker that names the whole's hash
        by_id = {block.get("block_id"): block["text"]["text"] for block in card if "text" in block}
        assert "[truncated:" in by_id["arguments"], ch  # 20,000 characters never fit
        summary = by_id["summary"]
        assert summary == untrusted_text.escape(approval.summary) or "[truncated:" in summary


def test_a_short_card_is_not_cut() -> None:
    approval = make_approval(arguments={"note": "x" * 2500}, summary="y" * 2500)
    _, card = rendering.card(approval)
    assert "[truncated:" not in json.dumps(card)
