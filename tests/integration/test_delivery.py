"""Nothing lost: callbacks survive agent outages, bot restarts and Slack trouble; expiry fails
closed; dead letters are visible and redrivable."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import AsyncIterator
from datetime import datetime

import asyncpg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support import waiting
from tests.support.agent_receiver import verify
from tests.support.cli import run_cli
from tests.support.harness import CALLBACK_SECRET, CHANNEL, FINANCE, Harness

# what the card's error and the log say about a reviewer channel the bot was not invited to
NOT_IN_CHANNEL_FIX = f"the bot is not a member: invite it: /invite @countersign in {CHANNEL}"


async def _callback_row(
    harness: Harness, approval_id: str, kind: str = "callback"
) -> asyncpg.Record | None:
    """The callback's outbox row (or another ``kind``'s); None until the click's settlement
    (or the submission) has committed."""
    conn = await asyncpg.connect(harness.database_url)
    try:
        row: asyncpg.Record | None = await conn.fetchrow(
            "SELECT * FROM outbox WHERE approval_id = $1 AND kind = $2", approval_id, kind
        )
        return row
    finally:
        await conn.close()


async def _row(harness: Harness, approval_id: str, kind: str = "callback") -> asyncpg.Record:
    row = await _callback_row(harness, approval_id, kind)
    assert row is not None
    return row


async def _failed_once(harness: Harness, approval_id: str, kind: str = "callback") -> None:
    async def attempted() -> bool:
        row = await _callback_row(harness, approval_id, kind)
        return row is not None and int(row["attempts"]) >= 1

    await waiting.until(attempted, what=f"a failed {kind} attempt")


async def _approved(harness: Harness) -> str:
    approval_id = str((await harness.submit())["approval_id"])
    await harness.card_ts(approval_id)
    await harness.click(FINANCE[0], approval_id)
    return approval_id


async def test_agent_down_then_up_is_delivered(harness: Harness) -> None:
    await harness.receiver.stop()
    approval_id = await _approved(harness)

    await _failed_once(harness, approval_id)
    row = await _row(harness, approval_id)
    assert "unreachable" in row["last_error"]
    assert row["done_at"] is None
    # the first durable retry comes within seconds
    assert (row["next_attempt_at"] - harness.clock()).total_seconds() < 5
    await harness.receiver.start()
    [received] = await harness.receiver.wait_delivered(1, timeout=15)
    assert verify(CALLBACK_SECRET, received.body, received.signature)

    async def recorded() -> bool:
        # the relay marks the row done after the agent's 2xx reaches it: a moment later
        _, body = await harness.call("GET", f"/v1/approvals/{approval_id}")
        return bool(body["delivery"]["status"] == "delivered")

    await waiting.until(recorded, what="the delivery to be recorded")
    _, body = await harness.call("GET", f"/v1/approvals/{approval_id}")
    assert body["delivery"]["attempts"] >= 2


async def test_redelivery_sends_the_same_body_and_key(harness: Harness) -> None:
    harness.receiver.answers = [500, 503, 502, 500]  # more than the quick tries of one attempt
    approval_id = await _approved(harness)
    await harness.receiver.wait_delivered(1, timeout=15)
    received = harness.receiver.received
    assert [r.answered for r in received] == [500, 503, 502, 500, 200]
    assert {r.body for r in received} == {received[0].body}
    assert {r.idempotency_key for r in received} == {approval_id}
    assert all(verify(CALLBACK_SECRET, r.body, r.signature) for r in received)


async def test_retry_after_is_honoured(harness: Harness) -> None:
    harness.receiver.answers = [429]
    harness.receiver.retry_after = "120"
    approval_id = await _approved(harness)

    await _failed_once(harness, approval_id)
    row = await _row(harness, approval_id)
    wait = (row["next_attempt_at"] - harness.clock()).total_seconds()
    assert 110 < wait <= 120
    assert len(harness.receiver.received) == 1  # no quick retry against the agent's wish
    harness.clock.advance(121)
    await harness.receiver.wait_delivered(1)


async def test_bot_stopped_between_settlement_and_delivery(harness: Harness) -> None:
    approval_id = str((await harness.submit())["approval_id"])
    await harness.card_ts(approval_id)
    await harness.stop_bot()
    await harness.start_bot(workers=False)  # the settlement commits, then the bot dies
    await harness.click(FINANCE[0], approval_id)
    assert harness.store is not None

    store = harness.store

    async def settled() -> bool:
        approval = await store.get_approval(approval_id)
        return approval is not None and approval.settled

    await waiting.until(settled, what="the settlement")
    await harness.stop_bot()
    assert harness.receiver.received == []
    await harness.start_bot()
    [received] = await harness.receiver.wait_delivered(1)
    assert json.loads(received.body)["status"] == "approved"


async def test_expiry_is_never_an_approval(harness: Harness) -> None:
    created = await harness.submit(expires_in=60)
    approval_id = created["approval_id"]
    ts = await harness.card_ts(approval_id)
    harness.clock.advance(61)
    [received] = await harness.receiver.wait_delivered(1)
    decision = json.loads(received.body)
    assert decision["status"] == "expired"
    assert decision["resume"]["approved"] is False
    assert decision["decided_by"] == []
    await harness.standin.wait_for(
        lambda: "Expired" in json.dumps(harness.standin.card(CHANNEL, ts)["blocks"])
    )
    assert "actions" not in json.dumps(harness.standin.card(CHANNEL, ts)["blocks"])
    # a late click changes nothing
    await harness.click(FINANCE[0], approval_id)
    [note] = await harness.wait_ephemeral(FINANCE[0])
    assert "already expired" in note
    _, body = await harness.call("GET", f"/v1/approvals/{approval_id}")
    assert body["status"] == "expired"


async def test_expires_in_is_capped_by_policy(harness: Harness) -> None:
    created = await harness.submit(expires_in=10**9)
    created_at = datetime.fromisoformat(created["created_at"])
    expires_at = datetime.fromisoformat(created["expires_at"])
    assert (expires_at - created_at).total_seconds() == 86400
    default = await harness.submit(request_id="r2", expires_in=None)
    span = datetime.fromisoformat(default["expires_at"]) - datetime.fromisoformat(
        default["created_at"]
    )
    assert span.total_seconds() == 3600


async def test_slack_rate_limit_is_retried(harness: Harness) -> None:
    harness.standin.fail("chat.postMessage", status=429, retry_after=1, times=1)
    approval_id = (await harness.submit())["approval_id"]
    await harness.card_ts(approval_id, timeout=10)
    assert len(harness.standin.methods_called("chat.postMessage")) == 2


async def test_slack_outage_then_cancel_card_shows_outcome(harness: Harness) -> None:
    # longer than slack_sdk's own retries: the relay's durable backoff takes over
    harness.standin.fail("chat.postMessage", status=500, times=4)
    approval_id = (await harness.submit())["approval_id"]
    status, _ = await harness.call("POST", f"/v1/approvals/{approval_id}/cancel")
    assert status == 200
    ts = await harness.card_ts(approval_id, timeout=20)
    await harness.standin.wait_for(
        lambda: "Cancelled" in json.dumps(harness.standin.card(CHANNEL, ts)["blocks"]), 10
    )
    assert len(harness.standin.messages[CHANNEL]) == 1  # one card, never a duplicate


@pytest.fixture
async def short_budget(database_url: str) -> AsyncIterator[Harness]:
    h = await Harness(database_url=database_url, delivery_budget=5).start()
    yield h
    await h.stop()


async def test_dead_letter_is_visible_and_redrivable(short_budget: Harness) -> None:
    harness = short_budget
    await harness.receiver.stop()
    approval_id = await _approved(harness)

    await _failed_once(harness, approval_id)
    harness.clock.advance(10)  # past the 5 s budget: the next failure dead-letters

    async def dead() -> bool:
        return (await _row(harness, approval_id))["dead_at"] is not None

    await waiting.until(dead, what="the dead letter")
    _, body = await harness.call("GET", f"/v1/approvals/{approval_id}")
    assert body["status"] == "approved"
    assert body["delivery"]["status"] == "dead_letter"
    assert "unreachable" in body["delivery"]["last_error"]
    ts = await harness.card_ts(approval_id)

    def card_text() -> str:
        return json.dumps(harness.standin.card(CHANNEL, ts)["blocks"])

    await harness.standin.wait_for(lambda: "The agent was not told" in card_text())
    assert harness.session is not None
    async with harness.session.get(harness.base_url + "/metrics") as response:
        assert 'countersign_outbox_dead_letters_total{kind="callback"}' in await response.text()

    await harness.receiver.start()
    result = await run_cli(
        "redrive", approval_id, env={**os.environ, "DATABASE_URL": harness.database_url}
    )
    assert result.returncode == 0, result.stderr
    assert "1 dead-lettered" in result.stdout
    [received] = await harness.receiver.wait_delivered(1)
    assert json.loads(received.body)["approval_id"] == approval_id
    await harness.standin.wait_for(lambda: "The agent was not told" not in card_text())


async def test_the_resource_shows_where_the_card_stands(short_budget: Harness) -> None:
    """A card Slack refuses shows ``pending`` with Slack's error, then ``failed`` once its
    budget is spent; a redrive posts it and the resource says ``posted`` with channel and ts."""
    harness = short_budget
    harness.standin.fail("chat.postMessage", status=200, error="not_in_channel", times=2)
    approval_id = (await harness.submit())["approval_id"]

    async def card() -> dict[str, object]:
        _, body = await harness.call("GET", f"/v1/approvals/{approval_id}")
        assert isinstance(body["card"], dict)
        return body["card"]

    async def refused_once() -> bool:
        return "not_in_channel" in str((await card()).get("error"))

    await waiting.until(refused_once, what="the card's first refusal")
    assert (await card())["status"] == "pending"
    harness.clock.advance(10)  # past the 5 s budget: the next refusal dead-letters the card

    async def failed() -> bool:
        return (await card())["status"] == "failed"

    await waiting.until(failed, what="the card's dead letter")
    assert await card() == {
        "status": "failed",
        "channel": None,
        "ts": None,
        "error": f"slack: not_in_channel (HTTP 200): {NOT_IN_CHANNEL_FIX}",
    }
    assert harness.standin.messages.get(CHANNEL, []) == []

    result = await run_cli(
        "redrive", approval_id, env={**os.environ, "DATABASE_URL": harness.database_url}
    )
    assert result.returncode == 0, result.stderr
    ts = await harness.card_ts(approval_id)

    async def posted() -> bool:
        return (await card())["status"] == "posted"

    await waiting.until(posted, what="the card's ts on the resource")
    assert await card() == {"status": "posted", "channel": CHANNEL, "ts": ts, "error": None}


async def _slack_errors(harness: Harness, code: str) -> float:
    """``countersign_slack_errors_total`` for a permanent ``code``, as /metrics serves it."""
    assert harness.session is not None
    async with harness.session.get(harness.base_url + "/metrics") as response:
        text = await response.text()
    wanted = {"code": code, "permanent": "true"}
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "countersign_slack_errors_total" and sample.labels == wanted
    )


async def test_a_card_refused_until_the_bot_is_invited(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """not_in_channel is a set-up error: logged at ERROR with its fix, counted, shown on the
    resource while the card is pending, tried again 5 minutes later (not on the quick backoff),
    and posted on that try once the bot is invited, without a restart."""
    harness.standin.set_channel(CHANNEL, is_member=False)
    before = await _slack_errors(harness, "not_in_channel")
    with caplog.at_level(logging.ERROR, logger="bot.slack_cards"):
        approval_id = (await harness.submit())["approval_id"]
        await _failed_once(harness, approval_id, "post_card")
    [logged] = [r for r in caplog.records if r.name == "bot.slack_cards"]
    assert logged.levelno == logging.ERROR
    assert logged.getMessage().endswith(f"(not_in_channel): {NOT_IN_CHANNEL_FIX}")
    assert await _slack_errors(harness, "not_in_channel") == before + 1
    _, body = await harness.call("GET", f"/v1/approvals/{approval_id}")
    assert body["status"] == "pending"
    assert body["card"] == {
        "status": "pending",
        "channel": None,
        "ts": None,
        "error": f"slack: not_in_channel (HTTP 200): {NOT_IN_CHANNEL_FIX}",
    }
    row = await _row(harness, approval_id, "post_card")
    assert 295 < (row["next_attempt_at"] - harness.clock()).total_seconds() <= 300

    harness.standin.set_channel(CHANNEL, is_member=True)  # someone typed /invite @countersign
    await harness.settle_quietly()
    assert len(harness.standin.methods_called("chat.postMessage")) == 1  # not retried sooner
    harness.clock.advance(300)
    ts = await harness.card_ts(approval_id)

    async def posted() -> bool:
        _, body = await harness.call("GET", f"/v1/approvals/{approval_id}")
        return bool(
            body["card"] == {"status": "posted", "channel": CHANNEL, "ts": ts, "error": None}
        )

    await waiting.until(posted, what="the card posted on the resource")
    assert len(harness.standin.methods_called("chat.postMessage")) == 2
