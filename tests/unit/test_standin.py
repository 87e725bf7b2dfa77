"""Quick checks that the Slack stand-in answers like Slack, through slack_sdk."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qs

import aiohttp
import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

from bot.sandbox.standin import SlackStandIn, SlackUser
from tests.slack_requests import block_actions, raw, view_submission

TOKEN = "xoxb-test-token"
CHANNEL = "C0REVIEWS"
SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"

ALICE = SlackUser(id="U0ALICE", name="alice", email="alice@example.com", real_name="Alice Liddell")
BOB = SlackUser(id="U0BOB", name="bob")


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    # slack_sdk reads HTTP(S)_PROXY and ignores NO_PROXY, so a proxy in the
    # environment would swallow requests meant for loopback.
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
async def standin() -> AsyncIterator[SlackStandIn]:
    """A running stand-in with two users and one usergroup."""
    server = SlackStandIn(token=TOKEN, users=[ALICE, BOB], usergroups={"S0LEADS": ["U0ALICE"]})
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
def client(standin: SlackStandIn) -> AsyncWebClient:
    """A slack_sdk client without retry handlers, so every failure surfaces."""
    return AsyncWebClient(token=TOKEN, base_url=standin.base_url, retry_handlers=[])


async def test_post_then_update_a_message(standin: SlackStandIn, client: AsyncWebClient) -> None:
    posted = await client.chat_postMessage(channel=CHANNEL, text="pending", blocks=[_section("a")])
    ts = posted["ts"]
    assert ts == "1700000000.000100", "first ts should match slack_requests' default"
    assert posted["message"]["user"] == "U0BOT"

    updated = await client.chat_update(
        channel=CHANNEL, ts=ts, text="approved", blocks=[_section("b")]
    )
    assert updated["ts"] == ts
    assert updated["text"] == "approved"

    card = standin.card(CHANNEL, ts)
    assert card["text"] == "approved"
    assert card["blocks"] == [_section("b")]
    assert "edited" in card
    assert len(standin.messages[CHANNEL]) == 1, "update must edit in place, not post"
    assert [method for method, _ in standin.calls] == ["chat.postMessage", "chat.update"]

    second = await client.chat_postMessage(channel=CHANNEL, text="next", thread_ts=ts)
    assert second["ts"] == "1700000000.000200", "edits must not shift the ts of later posts"
    assert standin.card(CHANNEL, second["ts"])["thread_ts"] == ts


async def test_update_of_unknown_message(client: AsyncWebClient) -> None:
    with pytest.raises(SlackApiError) as excinfo:
        await client.chat_update(channel=CHANNEL, ts="1.000001", text="x")
    assert excinfo.value.response["error"] == "message_not_found"


async def test_channel_not_found(standin: SlackStandIn, client: AsyncWebClient) -> None:
    with pytest.raises(SlackApiError) as excinfo:
        await client.chat_postMessage(channel="C0NOWHERE", text="hi")
    assert excinfo.value.response.status_code == 200
    assert excinfo.value.response["error"] == "channel_not_found"
    # Failed calls are recorded too.
    assert standin.methods_called("chat.postMessage") == [{"channel": "C0NOWHERE", "text": "hi"}]


async def test_too_many_blocks_is_invalid(client: AsyncWebClient) -> None:
    with pytest.raises(SlackApiError) as excinfo:
        await client.chat_postMessage(
            channel=CHANNEL, text="x", blocks=[_section(str(i)) for i in range(51)]
        )
    assert excinfo.value.response["error"] == "invalid_blocks"
    # The limit itself is allowed.
    await client.chat_postMessage(
        channel=CHANNEL, text="x", blocks=[_section(str(i)) for i in range(50)]
    )


async def test_overlong_section_text_is_invalid(client: AsyncWebClient) -> None:
    with pytest.raises(SlackApiError) as excinfo:
        await client.chat_postMessage(channel=CHANNEL, text="x", blocks=[_section("a" * 3001)])
    assert excinfo.value.response["error"] == "invalid_blocks"
    await client.chat_postMessage(channel=CHANNEL, text="x", blocks=[_section("a" * 3000)])


async def test_invalid_auth(standin: SlackStandIn) -> None:
    wrong = AsyncWebClient(token="xoxb-wrong", base_url=standin.base_url, retry_handlers=[])
    with pytest.raises(SlackApiError) as excinfo:
        await wrong.auth_test()
    assert excinfo.value.response.status_code == 200
    assert excinfo.value.response["error"] == "invalid_auth"


async def test_auth_test(client: AsyncWebClient) -> None:
    response = await client.auth_test()
    assert response["user_id"] == "U0BOT"
    assert response["team_id"] == "T0TEAM"
    assert response["bot_id"] == "B0BOT"


async def test_injected_429_carries_retry_after(
    standin: SlackStandIn, client: AsyncWebClient
) -> None:
    standin.fail("chat.postMessage", status=429, retry_after=7)
    with pytest.raises(SlackApiError) as excinfo:
        await client.chat_postMessage(channel=CHANNEL, text="hi")
    response = excinfo.value.response
    assert response.status_code == 429
    assert response.headers["Retry-After"] == "7"
    assert response["error"] == "ratelimited"
    # times=1: the next call goes through, and both were recorded.
    await client.chat_postMessage(channel=CHANNEL, text="hi")
    assert len(standin.methods_called("chat.postMessage")) == 2
    assert len(standin.messages[CHANNEL]) == 1


async def test_injected_slack_level_error(standin: SlackStandIn, client: AsyncWebClient) -> None:
    standin.fail("chat.update", status=200, error="cant_update_message", times=2)
    posted = await client.chat_postMessage(channel=CHANNEL, text="hi")
    for _ in range(2):
        with pytest.raises(SlackApiError) as excinfo:
            await client.chat_update(channel=CHANNEL, ts=posted["ts"], text="x")
        assert excinfo.value.response.status_code == 200
        assert excinfo.value.response["error"] == "cant_update_message"
    await client.chat_update(channel=CHANNEL, ts=posted["ts"], text="x")


async def test_users_info(client: AsyncWebClient) -> None:
    alice = (await client.users_info(user="U0ALICE"))["user"]
    assert alice["id"] == "U0ALICE"
    assert alice["profile"]["email"] == "alice@example.com"
    assert alice["real_name"] == "Alice Liddell"

    bob = (await client.users_info(user="U0BOB"))["user"]
    assert "email" not in bob["profile"]

    with pytest.raises(SlackApiError) as excinfo:
        await client.users_info(user="U0NOBODY")
    assert excinfo.value.response["error"] == "user_not_found"


async def test_usergroups_users_list(standin: SlackStandIn, client: AsyncWebClient) -> None:
    response = await client.usergroups_users_list(usergroup="S0LEADS")
    assert response["users"] == ["U0ALICE"]

    standin.set_usergroup("S0LEADS", ["U0ALICE", "U0BOB"])
    response = await client.usergroups_users_list(usergroup="S0LEADS")
    assert response["users"] == ["U0ALICE", "U0BOB"]

    with pytest.raises(SlackApiError) as excinfo:
        await client.usergroups_users_list(usergroup="S0NONE")
    assert excinfo.value.response["error"] == "no_such_subteam"


async def test_fail_lookups(standin: SlackStandIn, client: AsyncWebClient) -> None:
    standin.fail_lookups()
    with pytest.raises(SlackApiError) as user_error:
        await client.users_info(user="U0ALICE")
    with pytest.raises(SlackApiError) as group_error:
        await client.usergroups_users_list(usergroup="S0LEADS")
    assert user_error.value.response.status_code == 500
    assert group_error.value.response.status_code == 500
    assert (await client.users_info(user="U0ALICE"))["ok"] is True


async def test_ephemeral_views_and_permalink(standin: SlackStandIn, client: AsyncWebClient) -> None:
    await client.chat_postEphemeral(channel=CHANNEL, user="U0BOB", text="not yours to approve")
    assert standin.ephemerals == [
        {"channel": CHANNEL, "user": "U0BOB", "text": "not yours to approve", "blocks": []}
    ]
    with pytest.raises(SlackApiError) as excinfo:
        await client.chat_postEphemeral(channel=CHANNEL, user="U0NOBODY", text="x")
    assert excinfo.value.response["error"] == "user_not_found"

    modal = {
        "type": "modal",
        "callback_id": "deny_reason",
        "title": {"type": "plain_text", "text": "Deny"},
        "blocks": [],
    }
    opened = await client.views_open(trigger_id="123.456.abc", view=modal)
    assert opened["view"]["id"].startswith("V")
    assert opened["view"]["callback_id"] == "deny_reason"
    assert standin.views == [{"trigger_id": "123.456.abc", "view": modal}]

    posted = await client.chat_postMessage(channel=CHANNEL, text="hi")
    link = await client.chat_getPermalink(channel=CHANNEL, message_ts=posted["ts"])
    assert link["permalink"].endswith(f"/archives/{CHANNEL}/p{posted['ts'].replace('.', '')}")


async def test_form_posts_with_json_string_blocks(standin: SlackStandIn) -> None:
    """Not every client sends JSON: form posts carry blocks as a JSON string."""
    blocks = [_section("from a form")]
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            standin.base_url + "chat.postMessage",
            data={"token": TOKEN, "channel": CHANNEL, "text": "t", "blocks": json.dumps(blocks)},
        ) as response,
    ):
        body = await response.json()
    assert body["ok"] is True
    assert standin.card(CHANNEL, body["ts"])["blocks"] == blocks


async def test_missing_token_and_unknown_method(standin: SlackStandIn) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.post(standin.base_url + "auth.test") as response:
            assert response.status == 200
            assert (await response.json()) == {"ok": False, "error": "not_authed"}
        async with session.get(
            standin.base_url + "emoji.list", headers={"Authorization": f"Bearer {TOKEN}"}
        ) as response:
            assert (await response.json())["error"] == "unknown_method"


async def test_wait_for_times_out_with_a_clear_message(standin: SlackStandIn) -> None:
    with pytest.raises(AssertionError, match=r"not met within 0\.05s"):
        await standin.wait_for(lambda: False, timeout=0.05)
    await standin.wait_for(lambda: True)


def test_block_actions_signature_verifies() -> None:
    request = block_actions(
        signing_secret=SIGNING_SECRET,
        user_id="U0ALICE",
        action_id="countersign_approve",
        value="req-123",
    )
    verifier = SignatureVerifier(SIGNING_SECRET)
    assert verifier.is_valid_request(request.body, request.headers)
    assert not SignatureVerifier("another-secret").is_valid_request(request.body, request.headers)
    assert request.headers["Content-Type"] == "application/x-www-form-urlencoded"

    payload = json.loads(parse_qs(request.body)["payload"][0])
    assert payload["type"] == "block_actions"
    assert payload["user"]["id"] == "U0ALICE"
    assert payload["container"]["message_ts"] == "1700000000.000100"
    action = payload["actions"][0]
    assert (action["action_id"], action["value"], action["style"]) == (
        "countersign_approve",
        "req-123",
        "primary",
    )


def test_stale_and_other_requests_sign_consistently() -> None:
    stale = raw("payload=%7B", signing_secret=SIGNING_SECRET, timestamp=int(time.time()) - 600)
    verifier = SignatureVerifier(SIGNING_SECRET)
    assert not verifier.is_valid_request(stale.body, stale.headers), "replay window is 5 min"

    submitted = view_submission(
        signing_secret=SIGNING_SECRET,
        user_id="U0BOB",
        callback_id="deny_reason",
        private_metadata='{"request_id": "req-123"}',
        values={"reason": {"reason_input": {"type": "plain_text_input", "value": "no"}}},
    )
    assert verifier.is_valid_request(submitted.body, submitted.headers)
    view = json.loads(parse_qs(submitted.body)["payload"][0])["view"]
    assert view["callback_id"] == "deny_reason"
    assert view["state"]["values"]["reason"]["reason_input"]["value"] == "no"
