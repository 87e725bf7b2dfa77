"""The stand-in's channels answer like Slack's, through slack_sdk: ``conversations.info`` and
``conversations.history`` with the scope each kind of channel needs, ``chat.*`` refusing an
archived channel, a channel the bot is not in, and a private channel hidden from it, and the
history keeping message metadata: newest first, a time window, pages with a cursor, metadata
only when asked for."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.sandbox.standin import DEFAULT_SCOPES, SlackStandIn

TOKEN = "xoxb-test-token"
CHANNEL = "C0REVIEWS"
METADATA = {"event_type": "countersign_approval", "event_payload": {"approval_id": "apr_1"}}


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
        "is_ext_shared": False,
        "is_shared": False,
    }
    assert await _refusal(client.conversations_info(channel="C0NOWHERE")) == "channel_not_found"
    # a Slack Connect channel says so, as Slack's does
    standin.set_channel(CHANNEL, is_ext_shared=True)
    shared = (await client.conversations_info(channel=CHANNEL))["channel"]
    assert (shared["is_ext_shared"], shared["is_shared"]) == (True, True)


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


@pytest.mark.parametrize(
    ("method", "private", "needed"),
    [
        ("conversations_info", False, "channels:read"),
        ("conversations_info", True, "groups:read"),
        ("conversations_history", False, "channels:history"),
        ("conversations_history", True, "groups:history"),
    ],
)
async def test_reading_a_channel_needs_the_scope_of_its_kind(
    method: str, private: bool, needed: str
) -> None:
    server = SlackStandIn(token=TOKEN, channels=[CHANNEL], scopes=DEFAULT_SCOPES - {needed})
    server.set_channel(CHANNEL, is_private=private)
    await server.start()
    try:
        client = AsyncWebClient(token=TOKEN, base_url=server.base_url, retry_handlers=[])
        with pytest.raises(SlackApiError) as refused:
            await getattr(client, method)(channel=CHANNEL)
    finally:
        await server.stop()
    assert refused.value.response["error"] == "missing_scope"
    assert refused.value.response["needed"] == needed


async def _post(client: AsyncWebClient, text: str, **extra: Any) -> str:
    return str((await client.chat_postMessage(channel=CHANNEL, text=text, **extra))["ts"])


async def test_metadata_is_kept_and_shown_only_when_asked_for(
    standin: SlackStandIn, client: AsyncWebClient
) -> None:
    ts = await _post(client, "card", metadata=METADATA)
    assert standin.card(CHANNEL, ts)["metadata"] == METADATA

    [plain] = (await client.conversations_history(channel=CHANNEL))["messages"]
    assert "metadata" not in plain
    [full] = (await client.conversations_history(channel=CHANNEL, include_all_metadata=True))[
        "messages"
    ]
    assert full["metadata"] == METADATA
    assert (full["ts"], full["user"], full["text"]) == (ts, standin.bot_user_id, "card")


async def test_malformed_metadata_is_refused(client: AsyncWebClient) -> None:
    bad = client.chat_postMessage(channel=CHANNEL, text="x", metadata={"event_type": "x"})
    assert await _refusal(bad) == "invalid_metadata_schema"


async def test_history_is_newest_first_in_pages_without_thread_replies(
    client: AsyncWebClient,
) -> None:
    posted = [await _post(client, f"m{i}") for i in range(5)]
    await client.chat_postMessage(channel=CHANNEL, thread_ts=posted[0], text="a reply")
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        page = await client.conversations_history(channel=CHANNEL, limit=2, cursor=cursor)
        pages += 1
        seen += [m["ts"] for m in page["messages"]]
        if not page["has_more"]:
            assert "response_metadata" not in page
            break
        cursor = page["response_metadata"]["next_cursor"]
    assert seen == posted[::-1]
    assert pages == 3
    assert await _refusal(client.conversations_history(channel=CHANNEL, cursor="nope")) == (
        "invalid_cursor"
    )


async def test_oldest_and_latest_bound_the_posting_time(client: AsyncWebClient) -> None:
    await _post(client, "before")
    middle = time.time()
    await _post(client, "after")

    async def texts(**bounds: Any) -> list[str]:
        page = await client.conversations_history(channel=CHANNEL, **bounds)
        return [m["text"] for m in page["messages"]]

    assert await texts(oldest=f"{middle:.6f}") == ["after"]
    assert await texts(latest=f"{middle:.6f}") == ["before"]
    assert await texts(oldest=f"{time.time() + 60:.6f}") == []


async def test_history_of_a_channel_the_bot_is_not_in(
    standin: SlackStandIn, client: AsyncWebClient
) -> None:
    standin.set_channel(CHANNEL, is_member=False)
    assert await _refusal(client.conversations_history(channel=CHANNEL)) == "not_in_channel"
    assert await _refusal(client.conversations_history(channel="C0NOWHERE")) == (
        "channel_not_found"
    )
