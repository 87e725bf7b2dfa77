"""The stand-in's channels answer like Slack's, through slack_sdk: ``conversations.info`` with
the scope each kind of channel needs, and ``chat.*`` refusing an archived channel, a channel the
bot is not in, and a private channel hidden from it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from tests.slack_standin import DEFAULT_SCOPES, SlackStandIn

TOKEN = "xoxb-test-token"
CHANNEL = "C0REVIEWS"


@pytest.fixture
async def standin() -> AsyncIterator[SlackStandIn]:
    server = SlackStandIn(token=TOKEN, channels=[CHANNEL])
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
def client(standin: SlackStandIn) -> AsyncWebClient:
    """Without retry handlers, so every failure surfaces."""
    return AsyncWebClient(token=TOKEN, base_url=standin.base_url, retry_handlers=[])


async def _refusal(call: Awaitable[object]) -> str:
    """Slack's error code for ``call``, which must fail."""
    with pytest.raises(SlackApiError) as refused:
        await call
    return str(refused.value.response["error"])


async def test_conversations_info_is_shaped_like_slacks(
    standin: SlackStandIn, client: AsyncWebClient
) -> None:
    standin.set_channel(CHANNEL, name="reviews")
    info = (await client.conversations_info(channel=CHANNEL))["channel"]
    assert info == {
        "id": CHANNEL,
        "name": "reviews",
        "is_channel": True,
        "is_group": False,
        "is_private": False,
        "is_archived": False,
        "is_member": True,
    }
    assert await _refusal(client.conversations_info(channel="C0NOWHERE")) == "channel_not_found"


@pytest.mark.parametrize(
    ("private", "archived", "member", "error"),
    [
        (False, False, False, "not_in_channel"),
        (False, True, True, "is_archived"),
        (True, False, False, "channel_not_found"),  # a private channel is hidden from the bot
    ],
)
async def test_a_channel_the_bot_cannot_write_to(
    standin: SlackStandIn,
    client: AsyncWebClient,
    private: bool,
    archived: bool,
    member: bool,
    error: str,
) -> None:
    standin.set_channel(CHANNEL, is_private=private, is_archived=archived, is_member=member)
    assert await _refusal(client.chat_postMessage(channel=CHANNEL, text="card")) == error
    assert standin.messages[CHANNEL] == []


async def test_inviting_the_bot_lets_it_post(standin: SlackStandIn, client: AsyncWebClient) -> None:
    standin.set_channel(CHANNEL, is_member=False)
    assert not (await client.conversations_info(channel=CHANNEL))["channel"]["is_member"]
    standin.set_channel(CHANNEL, is_member=True)
    await client.chat_postMessage(channel=CHANNEL, text="card")
    assert len(standin.messages[CHANNEL]) == 1


@pytest.mark.parametrize(("private", "needed"), [(False, "channels:read"), (True, "groups:read")])
async def test_conversations_info_needs_the_scope_of_its_kind(private: bool, needed: str) -> None:
    server = SlackStandIn(token=TOKEN, channels=[CHANNEL], scopes=DEFAULT_SCOPES - {needed})
    server.set_channel(CHANNEL, is_private=private)
    await server.start()
    try:
        client = AsyncWebClient(token=TOKEN, base_url=server.base_url, retry_handlers=[])
        with pytest.raises(SlackApiError) as refused:
            await client.conversations_info(channel=CHANNEL)
    finally:
        await server.stop()
    assert refused.value.response["error"] == "missing_scope"
    assert refused.value.response["needed"] == needed
