"""The whole loop on real parts: POST → card → refused clicks → approval → signed callback."""

from __future__ import annotations

import json

from tests.support.agent_receiver import verify
from tests.support.harness import (
    CALLBACK_SECRET,
    CHANNEL,
    FINANCE,
    OUTSIDER,
    REQUESTER,
    Harness,
)


async def test_full_loop(harness: Harness) -> None:
    created = await harness.submit()
    approval_id = created["approval_id"]
    assert created["status"] == "pending"
    assert created["required"] == {"role": "finance", "approvals": 1}
    ts = await harness.card_ts(approval_id)

    # the requester holds the role (in S0FINANCE) and is still refused: four eyes
    assert await harness.click(REQUESTER, approval_id) == 200
    [why] = await harness.wait_ephemeral(REQUESTER)
    assert "you requested this call" in why

    assert await harness.click(OUTSIDER, approval_id) == 200
    [why] = await harness.wait_ephemeral(OUTSIDER)
    assert "role 'finance'" in why
    _, body = await harness.call("GET", f"/v1/approvals/{approval_id}")
    assert body["status"] == "pending"

    approver = FINANCE[0]
    assert await harness.click(approver, approval_id) == 200
    [received] = await harness.receiver.wait_delivered(1)
    assert verify(CALLBACK_SECRET, received.body, received.signature)
    assert received.idempotency_key == approval_id
    decision = json.loads(received.body)
    assert decision["status"] == "approved"
    assert decision["approval_id"] == approval_id
    assert decision["request_id"] == "af-call-7"
    assert decision["session_id"] == "thread-1"
    assert decision["tool"]["call_id"] == "call_1"
    assert decision["arguments_sha256"] == created["arguments_sha256"]
    assert decision["decided_by"][0]["slack_user_id"] == approver.id
    assert decision["resume"] == {"approved": True, "status": "approved", "reason": ""}

    await harness.standin.wait_for(
        lambda: "actions" not in str(harness.standin.card(CHANNEL, ts)["blocks"])
    )
    card = json.dumps(harness.standin.card(CHANNEL, ts)["blocks"])
    assert f"<@{approver.id}>" in card
    assert "Approved" in card
    assert harness.store is not None
    outcomes = [a.outcome.value for a in await harness.store.attempts(approval_id)]
    assert outcomes == ["self", "no_authority", "accepted"]


async def test_audit_trail_through_the_api_and_the_cli(harness: Harness) -> None:
    import asyncio
    import os
    import subprocess
    import sys

    created = await harness.submit()
    approval_id = created["approval_id"]
    await harness.card_ts(approval_id)
    await harness.click(REQUESTER, approval_id)
    await harness.wait_ephemeral(REQUESTER)
    await harness.click(FINANCE[0], approval_id)
    await harness.receiver.wait_delivered(1)
    status, body = await harness.call("GET", f"/v1/approvals/{approval_id}/events")
    assert status == 200
    assert [(e["kind"], e.get("outcome") or e.get("status")) for e in body["events"]] == [
        ("created", None),
        ("attempt", "self"),
        ("attempt", "accepted"),
        ("settlement", "approved"),
    ]
    status, _ = await harness.call("GET", "/v1/approvals/apr_000000000000000000000000/events")
    assert status == 404

    result = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "bot.cli", "audit", "export", "--since", created["created_at"]],
        env={**os.environ, "DATABASE_URL": harness.database_url},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    exported = [json.loads(line) for line in result.stdout.splitlines()]
    # seals land whenever the sealer runs, and the card's post may be recorded after a click:
    # the decision's own events in order, the deliveries apart
    lines = [e for e in exported if e["kind"] not in ("seal", "delivery")]
    assert [(e["kind"], e["approval_id"]) for e in lines] == [
        ("created", approval_id),
        ("attempt", approval_id),
        ("attempt", approval_id),
        ("settlement", approval_id),
    ]
    delivered = [e["data"]["delivered"] for e in exported if e["kind"] == "delivery"]
    assert sorted(delivered) == ["callback", "post_card"]
    assert lines[0]["data"]["tool_name"] == "transfer_money"
