"""Socket Mode end to end: the real bot (real PostgreSQL, the Web API stand-in, a real agent
receiver) connected through ``bot.socket_mode.connect`` to a Socket Mode stand-in on loopback.

Clicks arrive as ``interactive`` envelopes carrying the very ``block_actions`` payload HTTP mode
posts (unsigned: the socket is authenticated by the app token), are acknowledged by envelope id,
and settle through the same listeners. Sockets are refreshed, cut mid-run and envelopes
redelivered: no click is lost and none is applied twice.
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from slack_sdk.errors import SlackApiError

from bot import app as bot_app
from bot import socket_mode
from bot.sandbox.standin import SlackUser
from tests.support import waiting
from tests.support.agent_receiver import verify
from tests.support.harness import (
    BOT_TOKEN,
    CALLBACK_SECRET,
    CHANNEL,
    FINANCE,
    REQUESTER,
    Harness,
)
from tests.support.response_urls import ResponseUrls
from tests.support.socket_mode import APP_ID, SocketModeStandIn, block_actions_payload

# short, so that a dropped socket is noticed and replaced within about a second
PING_INTERVAL = 0.5


@pytest.fixture
async def socket(harness: Harness) -> AsyncIterator[SocketModeStandIn]:
    """The harness's bot, also connected over Socket Mode (as ``countersign run`` connects it
    when ``SLACK_APP_TOKEN`` is set)."""
    slack = SocketModeStandIn(harness.standin)
    await slack.start()
    try:
        async with contextlib.AsyncExitStack() as stack:
            runner = harness._runner
            assert runner is not None
            await socket_mode.connect(
                stack, runner.app[bot_app.BOLT], slack.app_token, ping_interval=PING_INTERVAL
            )
            await slack.wait_connections(1)
            yield slack
    finally:
        await slack.stop()


@pytest.fixture
async def response_urls() -> AsyncIterator[ResponseUrls]:
    server = ResponseUrls()
    await server.start()
    yield server
    await server.stop()


async def click(
    slack: SocketModeStandIn,
    user: SlackUser,
    approval_id: str,
    action: str = "countersign_approve",
    *,
    lose_ack: bool = False,
) -> str:
    """A button click as Slack sends it over Socket Mode; its envelope id."""
    payload = block_actions_payload(user, approval_id, action, channel_id=CHANNEL)
    return await slack.send("interactive", payload, lose_ack=lose_ack)


async def status_of(harness: Harness, approval_id: str) -> str:
    status, body = await harness.call("GET", f"/v1/approvals/{approval_id}")
    assert status == 200, body
    return str(body["status"])


async def settlements(harness: Harness, approval_id: str) -> int:
    conn = await asyncpg.connect(harness.database_url)
    try:
        sql = "SELECT count(*) FROM settlements WHERE approval_id = $1"
        return int(await conn.fetchval(sql, approval_id))
    finally:
        await conn.close()


async def outcomes(harness: Harness, approval_id: str, count: int) -> list[str]:
    """The outcomes of the approval's attempts, once ``count`` are recorded."""
    store = harness.store
    assert store is not None

    async def recorded() -> bool:
        return len(await store.attempts(approval_id)) >= count

    await waiting.until(recorded, what=f"{count} attempts")
    return [a.outcome.value for a in await store.attempts(approval_id)]


async def assert_settled_once(harness: Harness, approval_id: str, approver: SlackUser) -> None:
    """One settlement, one callback body (delivered once), decided by ``approver``."""
    [received] = await harness.receiver.wait_delivered(1)
    await harness.settle_quietly()  # a second settlement or callback would show up meanwhile
    assert len(harness.receiver.received) == 1
    assert await settlements(harness, approval_id) == 1
    decision = json.loads(received.body)
    assert decision["approval_id"] == approval_id
    assert decision["status"] == "approved"
    assert [d["slack_user_id"] for d in decision["decided_by"]] == [approver.id]


async def test_a_click_over_socket_mode_settles_and_calls_the_agent_back(
    harness: Harness, socket: SocketModeStandIn
) -> None:
    created = await harness.submit()
    approval_id = created["approval_id"]
    ts = await harness.card_ts(approval_id)
    # the socket's URL was asked for through the configured Web API, with the app token
    assert socket.opened == 1
    approver = FINANCE[0]

    envelope = await click(socket, approver, approval_id)

    ack = await socket.wait_ack(envelope)
    assert (ack.connection, ack.payload) == (1, None)
    [received] = await harness.receiver.wait_delivered(1)
    assert verify(CALLBACK_SECRET, received.body, received.signature)
    assert received.idempotency_key == approval_id
    decision = json.loads(received.body)
    assert decision["status"] == "approved"
    assert decision["approval_id"] == approval_id
    assert decision["arguments_sha256"] == created["arguments_sha256"]
    assert decision["decided_by"][0]["slack_user_id"] == approver.id
    await harness.standin.wait_for(
        lambda: "actions" not in str(harness.standin.card(CHANNEL, ts)["blocks"])
    )
    assert f"<@{approver.id}>" in json.dumps(harness.standin.card(CHANNEL, ts)["blocks"])
    assert await outcomes(harness, approval_id, 1) == ["accepted"]
    assert len(socket.connections) == 1  # nothing needed a reconnect


async def test_the_requesters_click_over_socket_mode_is_refused_and_stays_pending(
    harness: Harness, socket: SocketModeStandIn
) -> None:
    approval_id = (await harness.submit())["approval_id"]
    await harness.card_ts(approval_id)

    envelope = await click(socket, REQUESTER, approval_id)

    await socket.wait_ack(envelope)
    [why] = await harness.wait_ephemeral(REQUESTER)
    assert "you requested this call" in why
    assert await outcomes(harness, approval_id, 1) == ["self"]
    assert await status_of(harness, approval_id) == "pending"
    assert harness.receiver.received == []
    # still open for an eligible approver
    await socket.wait_ack(await click(socket, FINANCE[1], approval_id))
    await assert_settled_once(harness, approval_id, FINANCE[1])


async def test_after_a_refresh_the_client_reconnects_and_clicks_settle(
    harness: Harness, socket: SocketModeStandIn
) -> None:
    approval_id = (await harness.submit())["approval_id"]
    await harness.card_ts(approval_id)

    first = await socket.disconnect("refresh_requested")

    second = await socket.wait_connections(2)
    assert socket.opened >= 2  # a fresh URL: the old ticket is not reused
    assert second.ticket != first.ticket
    assert socket.refused == []
    await waiting.until(lambda: not first.open, what="the client to close the old socket")
    assert first.ended == "client"
    envelope = await click(socket, FINANCE[0], approval_id)
    ack = await socket.wait_ack(envelope)
    assert ack.connection == socket.connections[-1].number >= 2
    await assert_settled_once(harness, approval_id, FINANCE[0])


async def test_a_click_whose_ack_was_lost_is_redelivered_and_applied_once(
    harness: Harness, socket: SocketModeStandIn
) -> None:
    approval_id = (await harness.submit())["approval_id"]
    await harness.card_ts(approval_id)

    # the bot gets the click and acks it; the ack never reaches Slack: the socket breaks
    envelope = await click(socket, FINANCE[0], approval_id, lose_ack=True)

    await socket.wait_connections(2)
    ack = await socket.wait_ack(envelope)  # the redelivery's, on the new socket
    assert ack.connection >= 2
    assert socket.deliveries(envelope) == [1, ack.connection]
    assert socket.connections[0].ended == "dropped"
    await assert_settled_once(harness, approval_id, FINANCE[0])
    # both deliveries were applied as clicks; the compare-and-set let one settle
    assert Counter(await outcomes(harness, approval_id, 2)) == {"accepted": 1, "stale": 1}


async def test_a_click_cut_off_in_flight_is_not_lost(
    harness: Harness, socket: SocketModeStandIn
) -> None:
    approval_id = (await harness.submit())["approval_id"]
    await harness.card_ts(approval_id)

    envelope = await click(socket, FINANCE[0], approval_id)
    socket.drop()  # at once: the client may or may not have read it; its ack is not heard

    await socket.wait_connections(2)
    ack = await socket.wait_ack(envelope)
    assert ack.connection >= 2
    await assert_settled_once(harness, approval_id, FINANCE[0])
    # one accepted attempt; a second (stale) one only if the first delivery got through too
    found = Counter(await outcomes(harness, approval_id, 1))
    assert found["accepted"] == 1
    assert set(found) <= {"accepted", "stale"}


async def test_a_click_sent_while_the_socket_is_down_is_delivered_on_the_next_one(
    harness: Harness, socket: SocketModeStandIn
) -> None:
    approval_id = (await harness.submit())["approval_id"]
    await harness.card_ts(approval_id)
    socket.drop()

    envelope = await click(socket, FINANCE[0], approval_id)  # no socket open: it waits

    assert socket.deliveries(envelope) == []
    await socket.wait_connections(2)
    ack = await socket.wait_ack(envelope)
    assert socket.deliveries(envelope) == [ack.connection]
    await assert_settled_once(harness, approval_id, FINANCE[0])
    assert await outcomes(harness, approval_id, 1) == ["accepted"]


async def test_an_acked_click_redelivered_after_a_drop_is_not_applied_twice(
    harness: Harness, socket: SocketModeStandIn
) -> None:
    approval_id = (await harness.submit())["approval_id"]
    await harness.card_ts(approval_id)
    envelope = await click(socket, FINANCE[0], approval_id)
    await socket.wait_ack(envelope)
    await harness.receiver.wait_delivered(1)

    socket.drop()
    await socket.wait_connections(2)
    await socket.redeliver(envelope)  # Slack may send it again, acknowledged or not

    await socket.wait_ack(envelope, count=2)
    await assert_settled_once(harness, approval_id, FINANCE[0])
    assert await outcomes(harness, approval_id, 2) == ["accepted", "stale"]
    # the approver is told it is settled already, not asked again
    [note] = await harness.wait_ephemeral(FINANCE[0])
    assert "already approved" in note


@pytest.mark.parametrize(
    ("token", "error"),
    [("xapp-1-A0OTHER-1-wrong", "invalid_auth"), (BOT_TOKEN, "not_allowed_token_type")],
)
async def test_an_app_token_slack_refuses_fails_at_start(
    harness: Harness, socket: SocketModeStandIn, token: str, error: str
) -> None:
    runner = harness._runner
    assert runner is not None
    with pytest.raises(SlackApiError) as refused:
        async with contextlib.AsyncExitStack() as stack:
            await socket_mode.connect(
                stack, runner.app[bot_app.BOLT], token, ping_interval=PING_INTERVAL
            )
    assert refused.value.response["error"] == error
    assert len(socket.connections) == 1  # the fixture's own: no socket was opened


@pytest.mark.parametrize("status", [500, 503])
async def test_slack_away_at_start_does_not_stop_the_bot_and_it_connects_once_slack_answers(
    harness: Harness, status: int
) -> None:
    """Slack's 5xx on ``apps.connections.open`` at start is no refusal (a 429 is waited out by
    the client's retry handler): connect returns without a socket, HTTP serves meanwhile, and
    the socket opens once Slack answers."""
    slack = SocketModeStandIn(harness.standin)
    await slack.start()
    harness.standin.fail("apps.connections.open", status=status, retry_after=1, times=2)
    runner = harness._runner
    assert runner is not None
    try:
        async with contextlib.AsyncExitStack() as stack:
            await socket_mode.connect(
                stack, runner.app[bot_app.BOLT], slack.app_token, ping_interval=PING_INTERVAL
            )
            assert slack.connections == []  # not connected yet, and connect did not wait
            approval_id = (await harness.submit())["approval_id"]  # HTTP serves meanwhile
            await harness.card_ts(approval_id)

            await slack.wait_connections(1, timeout=15.0)
            assert slack.opened >= 3  # asked again after each refusal
            await slack.wait_ack(await click(slack, FINANCE[0], approval_id))
            await assert_settled_once(harness, approval_id, FINANCE[0])
    finally:
        await slack.stop()


def slash_command(user: SlackUser, response_url: str) -> dict[str, Any]:
    """The payload of ``/approvals`` as a ``slash_commands`` envelope carries it."""
    return {
        "token": "legacy",
        "team_id": "T0TEAM",
        "team_domain": "standin",
        "channel_id": CHANNEL,
        "channel_name": CHANNEL.lower(),
        "user_id": user.id,
        "user_name": user.name,
        "command": "/approvals",
        "text": "",
        "api_app_id": APP_ID,
        "is_enterprise_install": "false",
        "response_url": response_url,
        "trigger_id": "1.2.3",
    }


def home_opened(user: SlackUser) -> dict[str, Any]:
    """The payload of an ``app_home_opened`` event as an ``events_api`` envelope carries it."""
    return {
        "token": "legacy",
        "team_id": "T0TEAM",
        "api_app_id": APP_ID,
        "type": "event_callback",
        "event_id": "Ev0HOME1",
        "event_time": 1_700_000_000,
        "event": {
            "type": "app_home_opened",
            "user": user.id,
            "channel": "D0HOME",
            "tab": "home",
            "event_ts": "1700000000.000001",
        },
    }


async def test_the_queue_command_and_the_app_home_over_socket_mode(
    harness: Harness, socket: SocketModeStandIn, response_urls: ResponseUrls
) -> None:
    approval_id = (await harness.submit())["approval_id"]
    await harness.card_ts(approval_id)
    url = response_urls.url()

    command = await socket.send("slash_commands", slash_command(FINANCE[0], url))
    home = await socket.send("events_api", home_opened(FINANCE[0]))

    ack = await socket.wait_ack(command)
    assert ack.payload is None  # answered through the response_url, not in the ack
    answer = await response_urls.wait_answer(url)
    assert answer["response_type"] == "ephemeral"
    assert approval_id in json.dumps(answer)
    await socket.wait_ack(home)
    await harness.standin.wait_for(lambda: FINANCE[0].id in harness.standin.home)
    assert approval_id in json.dumps(harness.standin.home[FINANCE[0].id])
