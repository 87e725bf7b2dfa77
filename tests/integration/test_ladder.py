"""Reminders and escalation to on-call on a controlled clock: durable timers that survive a
restart and fire once across replicas; expiry stays distinct from denial."""

from __future__ import annotations

import json
import logging

import pytest

from tests.support import reads, waiting
from tests.support.harness import CHANNEL, FINANCE, ONCALL, Harness

# release_* needs finance, whose ceiling names amount: part of the tool's contract
RELEASE = {"name": "release_build", "call_id": "rel-1", "arguments": {"build": 42, "amount": 1}}


def thread(harness: Harness, ts: str) -> list[str]:
    return [
        str(m["text"])
        for m in harness.standin.messages.get(CHANNEL, [])
        if m.get("thread_ts") == ts
    ]


def oncall(harness: Harness) -> list[str]:
    return [str(m["text"]) for m in harness.standin.messages.get(ONCALL, [])]


async def test_the_full_ladder_with_a_restart_in_the_middle(harness: Harness) -> None:
    created = await harness.submit(tool=RELEASE, expires_in=3600)
    approval_id = created["approval_id"]
    ts = await harness.card_ts(approval_id)
    await harness.settle_quietly(0.3)
    assert thread(harness, ts) == []  # nothing before its time

    harness.clock.advance(601)
    await harness.standin.wait_for(lambda: len(thread(harness, ts)) == 1)
    [reminder] = thread(harness, ts)
    assert "<!subteam^S0FINANCE>" in reminder
    assert oncall(harness) == []

    async def reminder_recorded() -> bool:
        assert harness.store is not None
        backlog, _dead = await reads.outbox_counts(harness.store)
        return backlog == 0

    # the reminder is marked sent before the restart: a stop in between would (rightly, the
    # relay is at-least-once) send it again once its lease lapses, and this test is about timers
    await waiting.until(reminder_recorded, what="the reminder's outbox row to be done")
    await harness.stop_bot()  # a restart between the reminder and the escalation
    harness.clock.advance(1200)
    await harness.start_bot()
    await harness.standin.wait_for(lambda: len(oncall(harness)) == 1)
    [post] = oncall(harness)
    assert "<!subteam^S0ONCALL>" in post
    assert "standin.slack.com/archives/C0REVIEWS" in post  # a link to the card, no buttons
    await harness.standin.wait_for(
        lambda: "Escalated to on-call" in json.dumps(harness.standin.card(CHANNEL, ts)["blocks"])
    )
    await harness.settle_quietly(0.3)
    assert len(thread(harness, ts)) == 2  # the reminder, then the escalation note; nothing twice
    assert len(oncall(harness)) == 1

    # the card is still the one place that decides
    await harness.click(FINANCE[0], approval_id)
    [received] = await harness.receiver.wait_delivered(1)
    assert json.loads(received.body)["status"] == "approved"
    _, audit = await harness.call("GET", f"/v1/approvals/{approval_id}/events")
    assert [e.get("outcome") or e.get("status") for e in audit["events"]] == [
        None,  # created
        "reminded",
        "escalated",
        "accepted",
        "approved",
    ]


async def test_expiry_after_the_ladder_is_expired_not_denied(harness: Harness) -> None:
    approval_id = (await harness.submit(tool=RELEASE, expires_in=3600))["approval_id"]
    ts = await harness.card_ts(approval_id)
    harness.clock.advance(3601)
    [received] = await harness.receiver.wait_delivered(1)
    assert json.loads(received.body)["status"] == "expired"
    await harness.settle_quietly(0.3)
    # every rung was due, but the approval had already expired: none of them fired
    assert oncall(harness) == []
    assert thread(harness, ts) == []
    card = json.dumps(harness.standin.card(CHANNEL, ts)["blocks"])
    assert "Expired" in card
    assert "Denied" not in card


async def test_two_replicas_fire_each_timer_once(harness: Harness) -> None:
    replica_url, runner, store = await harness.serve_bot()
    try:
        ids = [
            (await harness.submit(request_id=f"r{i}", tool={**RELEASE, "call_id": f"rel-{i}"}))[
                "approval_id"
            ]
            for i in range(4)
        ]
        for approval_id in ids:
            await harness.card_ts(approval_id)

        def reminders() -> list[dict[str, object]]:
            return [
                m
                for m in harness.standin.messages[CHANNEL]
                if "still waiting" in str(m.get("text"))
            ]

        harness.clock.advance(1801)
        await harness.standin.wait_for(lambda: len(oncall(harness)) == 4, timeout=10)
        # the reviewer channel's posts (cards, reminders, escalation notes) are paced at 1/s
        # past their burst: a reminder may come a moment after the escalations
        await harness.standin.wait_for(lambda: len(reminders()) == 4, timeout=10)
        await harness.settle_quietly(0.5)
        assert len(oncall(harness)) == 4
        assert len(reminders()) == 4  # once each, across both replicas
    finally:
        await runner.cleanup()
        await store.close()
        del replica_url


async def test_a_role_nobody_holds_escalates_at_once(harness: Harness) -> None:
    created = await harness.submit(tool={"name": "launch_rocket", "call_id": "l1", "arguments": {}})
    ts = await harness.card_ts(created["approval_id"])

    await waiting.until(lambda: len(oncall(harness)) == 1, what="the immediate escalation")
    await harness.standin.wait_for(
        lambda: "Escalated to on-call" in json.dumps(harness.standin.card(CHANNEL, ts)["blocks"])
    )


async def test_a_group_whose_only_member_is_the_requester_escalates_at_once(
    harness: Harness,
) -> None:
    created = await harness.submit(tool={"name": "solo_task", "call_id": "s1", "arguments": {}})
    ts = await harness.card_ts(created["approval_id"])
    await waiting.until(lambda: len(oncall(harness)) == 1, what="the immediate escalation")
    await harness.standin.wait_for(
        lambda: "Escalated to on-call" in json.dumps(harness.standin.card(CHANNEL, ts)["blocks"])
    )


async def test_a_group_that_cannot_be_resolved_escalates_nothing_early(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    # a Slack-level error (not retried by slack_sdk): who is in S0SOLO is unknown, not "nobody"
    harness.standin.fail("usergroups.users.list", status=200, error="no_such_subteam")
    with caplog.at_level(logging.WARNING, logger="approvals.core"):
        created = await harness.submit(tool={"name": "solo_task", "call_id": "s2", "arguments": {}})
        await harness.card_ts(created["approval_id"])
        await waiting.until(
            lambda: any("user group lookup failed" in r.message for r in caplog.records),
            what="the failed lookup to be logged",
        )
    await harness.settle_quietly(0.3)
    assert oncall(harness) == []  # the ordinary ladder runs (here: expiry)
    [record] = [r for r in caplog.records if "user group lookup failed" in r.message]
    assert record.__dict__["approval_id"] == created["approval_id"]
    assert record.__dict__["usergroup"] == "S0SOLO"
    assert "no_such_subteam" in record.__dict__["error"]
