"""Clicks through bolt's dispatch: four eyes, authority at click time, exactly one settlement."""

from __future__ import annotations

import asyncio
import json

import asyncpg

from tests import slack_requests
from tests.support import waiting
from tests.support.harness import (
    APPROVER,
    CHANNEL,
    FINANCE,
    OUTSIDER,
    REQUESTER,
    SIGNING_SECRET,
    TWIN,
    Harness,
)


async def _count(harness: Harness, sql: str, *args: object) -> int:
    conn = await asyncpg.connect(harness.database_url)
    try:
        return int(await conn.fetchval(sql, *args))
    finally:
        await conn.close()


async def test_double_click_settles_once(harness: Harness) -> None:
    approval_id = (await harness.submit())["approval_id"]
    await harness.card_ts(approval_id)
    approver = FINANCE[0]
    assert await harness.click(approver, approval_id) == 200
    assert await harness.click(approver, approval_id) == 200
    await harness.receiver.wait_delivered(1)
    [note] = await harness.wait_ephemeral(approver)
    assert "already approved by <@U0FIN0>" in note
    await harness.settle_quietly()
    assert len(harness.receiver.received) == 1
    assert harness.store is not None
    outcomes = [a.outcome.value for a in await harness.store.attempts(approval_id)]
    assert outcomes == ["accepted", "stale"]


async def test_twenty_concurrent_clicks_one_settlement_one_callback(harness: Harness) -> None:
    approval_id = (await harness.submit())["approval_id"]
    await harness.card_ts(approval_id)
    clickers = [FINANCE[i % len(FINANCE)] for i in range(20)]
    actions = ["countersign_approve" if i % 3 else "countersign_deny" for i in range(20)]
    statuses = await asyncio.gather(
        *(harness.click(u, approval_id, a) for u, a in zip(clickers, actions, strict=True))
    )
    assert statuses == [200] * 20
    await harness.receiver.wait_delivered(1)
    assert harness.store is not None

    store = harness.store

    async def all_recorded() -> bool:
        return len(await store.attempts(approval_id)) >= 20

    await waiting.until(all_recorded, what="20 attempts")
    attempts = await store.attempts(approval_id)
    outcomes = [a.outcome.value for a in attempts]
    assert outcomes.count("accepted") == 1
    assert outcomes.count("stale") == 19
    assert (
        await _count(
            harness, "SELECT count(*) FROM settlements WHERE approval_id = $1", approval_id
        )
        == 1
    )
    assert (
        await _count(
            harness,
            "SELECT count(*) FROM outbox WHERE approval_id = $1 AND kind = 'callback'",
            approval_id,
        )
        == 1
    )
    await harness.settle_quietly()
    assert len(harness.receiver.received) == 1
    decision = json.loads(harness.receiver.received[0].body)
    winner = next(a for a in attempts if a.outcome.value == "accepted")
    assert decision["status"] == ("approved" if winner.action == "approve" else "denied")
    assert decision["decided_by"][0]["slack_user_id"] == winner.slack_user_id


async def test_requester_by_email_on_another_account_is_refused(harness: Harness) -> None:
    # TWIN has a different Slack id but the requester's e-mail (other case)
    approval_id = (await harness.submit(requester={"email": "rita@example.com"}))["approval_id"]
    await harness.card_ts(approval_id)
    harness.standin.set_usergroup("S0FINANCE", [TWIN.id])
    await harness.click(TWIN, approval_id)
    [why] = await harness.wait_ephemeral(TWIN)
    assert "you requested this call" in why
    _, body = await harness.call("GET", f"/v1/approvals/{approval_id}")
    assert body["status"] == "pending"


async def test_authority_is_checked_at_click_time(harness: Harness) -> None:
    approval_id = (await harness.submit())["approval_id"]
    await harness.card_ts(approval_id)
    # FINANCE[2] was in the group when the card was posted, and is removed before the click
    harness.standin.set_usergroup("S0FINANCE", [FINANCE[0].id])
    await harness.click(FINANCE[2], approval_id)
    [why] = await harness.wait_ephemeral(FINANCE[2])
    assert "finance" in why
    _, body = await harness.call("GET", f"/v1/approvals/{approval_id}")
    assert body["status"] == "pending"


async def test_failed_lookup_is_refused_and_stays_pending(harness: Harness) -> None:
    approval_id = (await harness.submit())["approval_id"]
    await harness.card_ts(approval_id)
    harness.standin.fail_lookups(times=10)
    await harness.click(FINANCE[0], approval_id)
    [why] = await harness.wait_ephemeral(FINANCE[0])
    assert "could not be checked" in why
    assert harness.store is not None
    [attempt] = await harness.store.attempts(approval_id)
    assert attempt.outcome.value == "lookup_failed"
    _, body = await harness.call("GET", f"/v1/approvals/{approval_id}")
    assert body["status"] == "pending"
    # an eligible approver can still settle it once Slack answers again
    harness.standin.clear_failures()
    await harness.click(FINANCE[1], approval_id)
    await harness.receiver.wait_delivered(1)


async def test_deny_by_eligible_approver(harness: Harness) -> None:
    approval_id = (await harness.submit(tool={"name": "deploy", "call_id": "c9", "arguments": {}}))[
        "approval_id"
    ]
    ts = await harness.card_ts(approval_id)
    await harness.click(APPROVER, approval_id, "countersign_deny")
    [received] = await harness.receiver.wait_delivered(1)
    decision = json.loads(received.body)
    assert decision["status"] == "denied"
    assert "not executed" in decision["reason"]
    assert decision["resume"]["approved"] is False
    await harness.standin.wait_for(
        lambda: "Denied" in json.dumps(harness.standin.card(CHANNEL, ts)["blocks"])
    )


async def test_unknown_approval_and_malformed_payloads_are_answered(harness: Harness) -> None:
    assert await harness.click(OUTSIDER, "apr_0123456789abcdef01234567") == 200
    [why] = await harness.wait_ephemeral(OUTSIDER)
    assert "not known" in why
    bad_value = slack_requests.block_actions(
        signing_secret=SIGNING_SECRET,
        user_id=REQUESTER.id,
        action_id="countersign_approve",
        value="apr_../../etc",
    )
    assert await harness.post_slack(bad_value) == 200
    [why] = await harness.wait_ephemeral(REQUESTER)
    assert "could not read" in why
    garbage = slack_requests.raw("payload=%7Bnot-json", signing_secret=SIGNING_SECRET)
    status = await harness.post_slack(garbage)
    assert status < 500


async def test_unsigned_or_badly_signed_requests_are_rejected(harness: Harness) -> None:
    approval_id = (await harness.submit())["approval_id"]
    forged = slack_requests.block_actions(
        signing_secret="not-the-secret",
        user_id=FINANCE[0].id,
        action_id="countersign_approve",
        value=approval_id,
    )
    assert await harness.post_slack(forged) == 401
    stale = slack_requests.block_actions(
        signing_secret=SIGNING_SECRET,
        user_id=FINANCE[0].id,
        action_id="countersign_approve",
        value=approval_id,
        timestamp=1_000_000_000,
    )
    assert await harness.post_slack(stale) == 401
    await harness.settle_quietly()
    _, body = await harness.call("GET", f"/v1/approvals/{approval_id}")
    assert body["status"] == "pending"
    assert harness.store is not None
    assert await harness.store.attempts(approval_id) == []


async def test_signed_but_malformed_payloads_never_500(harness: Harness) -> None:
    import json as _json
    from urllib.parse import quote

    payloads: list[object] = [
        [1, 2],
        "just a string",
        {"type": "block_actions", "user": {"id": "U0FIN0"}, "actions": []},
        {"type": "block_actions", "user": {"id": "U0FIN0"}, "actions": "x"},
        {"type": "block_actions", "user": "U0FIN0", "actions": [{"action_id": ["x"]}]},
        {"type": "block_actions", "user": {"id": "U0FIN0"}, "actions": [{"action_id": ["x"]}]},
    ]
    for payload in payloads:
        request = slack_requests.raw(
            "payload=" + quote(_json.dumps(payload)), signing_secret=SIGNING_SECRET
        )
        assert await harness.post_slack(request) < 500, payload


async def test_listed_user_decides_even_when_group_lookups_fail(harness: Harness) -> None:
    # APPROVER holds "approvers" by the users list: a failing user-group lookup elsewhere
    # must not refuse them (their e-mail was fetched, so four eyes still holds)
    approval_id = (await harness.submit(tool={"name": "deploy", "call_id": "d1", "arguments": {}}))[
        "approval_id"
    ]
    await harness.card_ts(approval_id)
    harness.standin.fail("usergroups.users.list", times=10)
    await harness.click(APPROVER, approval_id)
    await harness.receiver.wait_delivered(1)


async def test_group_lookup_failure_refuses_with_a_reason(harness: Harness) -> None:
    approval_id = (await harness.submit())["approval_id"]
    await harness.card_ts(approval_id)
    harness.standin.fail("usergroups.users.list", times=10)
    await harness.click(FINANCE[0], approval_id)
    [why] = await harness.wait_ephemeral(FINANCE[0])
    assert "user-group membership could not be checked" in why
    assert harness.store is not None
    [attempt] = await harness.store.attempts(approval_id)
    assert attempt.outcome.value == "lookup_failed"
