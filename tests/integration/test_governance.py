"""Governance on real parts: conditions on arguments, quorum under concurrency, ceilings."""

from __future__ import annotations

import asyncio
import json

import asyncpg

from tests.support import waiting
from tests.support.harness import CHANNEL, FINANCE, REQUESTER, Harness


async def _settlements(harness: Harness, approval_id: str) -> int:
    conn = await asyncpg.connect(harness.database_url)
    try:
        return int(
            await conn.fetchval(
                "SELECT count(*) FROM settlements WHERE approval_id = $1", approval_id
            )
        )
    finally:
        await conn.close()


def wire(amount: int = 1000) -> dict[str, object]:
    return {"name": "wire_funds", "call_id": "w1", "arguments": {"amount": amount}}


async def test_the_matching_rule_is_explained(harness: Harness) -> None:
    big = await harness.submit(
        tool={"name": "refund", "call_id": "r1", "arguments": {"amount": 12000}}
    )
    assert big["required"]["role"] == "finance"
    assert big["rule"].endswith("] tool=refund")
    assert big["why"] == "arguments.amount 12000 > 10000"
    small = await harness.submit(
        request_id="r2", tool={"name": "refund", "call_id": "r2", "arguments": {"amount": 50}}
    )
    assert small["required"]["role"] == "approvers"  # the condition failed: the next rule
    ts = await harness.card_ts(big["approval_id"])
    assert "arguments.amount 12000 &gt; 10000" in json.dumps(
        harness.standin.card(CHANNEL, ts)["blocks"]
    )


async def test_two_of_three_quorum_with_concurrent_clicks(harness: Harness) -> None:
    created = await harness.submit(tool=wire())
    approval_id = created["approval_id"]
    assert created["required"] == {"role": "finance", "approvals": 2}
    await harness.card_ts(approval_id)
    # the requester is in S0FINANCE too: refused, and never counts towards the quorum
    clickers = [REQUESTER, FINANCE[0], FINANCE[1], FINANCE[2]] * 5
    statuses = await asyncio.gather(*(harness.click(u, approval_id) for u in clickers))
    assert set(statuses) == {200}
    [received] = await harness.receiver.wait_delivered(1)
    decision = json.loads(received.body)
    assert decision["status"] == "approved"
    voters = [d["slack_user_id"] for d in decision["decided_by"]]
    assert len(voters) == 2
    assert len(set(voters)) == 2
    assert REQUESTER.id not in voters
    assert await _settlements(harness, approval_id) == 1
    store = harness.store
    assert store is not None

    async def all_recorded() -> bool:
        return len(await store.attempts(approval_id)) >= 20

    await waiting.until(all_recorded, what="20 attempts")
    outcomes = [a.outcome.value for a in await store.attempts(approval_id)]
    assert outcomes.count("accepted") == 2
    assert outcomes.count("self") == 5
    assert set(outcomes) <= {"accepted", "self", "duplicate", "stale"}
    await harness.settle_quietly()
    assert len(harness.receiver.received) == 1


async def test_quorum_progress_and_one_person_counts_once(harness: Harness) -> None:
    approval_id = (await harness.submit(tool=wire()))["approval_id"]
    ts = await harness.card_ts(approval_id)
    await harness.click(FINANCE[0], approval_id)
    [note] = await harness.wait_ephemeral(FINANCE[0])
    assert "1 of 2" in note
    await harness.standin.wait_for(
        lambda: "1 of 2 approvals" in json.dumps(harness.standin.card(CHANNEL, ts)["blocks"])
    )
    _, body = await harness.call("GET", f"/v1/approvals/{approval_id}")
    assert body["status"] == "pending"
    assert [d["slack_user_id"] for d in body["decided_by"]] == [FINANCE[0].id]
    await harness.click(FINANCE[0], approval_id)  # the same person again
    notes = await harness.wait_ephemeral(FINANCE[0], 2)
    assert "already approved" in notes[1]
    _, body = await harness.call("GET", f"/v1/approvals/{approval_id}")
    assert body["status"] == "pending"
    await harness.click(FINANCE[1], approval_id, "countersign_deny")  # one eligible deny settles
    [received] = await harness.receiver.wait_delivered(1)
    assert json.loads(received.body)["status"] == "denied"


async def test_over_ceiling_approver_is_refused(harness: Harness) -> None:
    approval_id = (
        await harness.submit(
            tool={"name": "transfer_money", "call_id": "t9", "arguments": {"amount": 75000}}
        )
    )["approval_id"]
    await harness.card_ts(approval_id)
    await harness.click(FINANCE[0], approval_id)
    [why] = await harness.wait_ephemeral(FINANCE[0])
    assert "up to 50000" in why
    store = harness.store
    assert store is not None
    [attempt] = await store.attempts(approval_id)
    assert attempt.outcome.value == "over_limit"
    _, body = await harness.call("GET", f"/v1/approvals/{approval_id}")
    assert body["status"] == "pending"


async def test_any_of_several_roles_may_decide(harness: Harness) -> None:
    from tests.support.harness import APPROVER, SUPPORT

    first = await harness.submit(tool={"name": "rotate_keys", "call_id": "k1", "arguments": {}})
    assert first["required"] == {"role": "approvers", "approvals": 1, "any_of": ["support"]}
    second = await harness.submit(
        request_id="r2", tool={"name": "rotate_keys", "call_id": "k2", "arguments": {}}
    )
    ts = await harness.card_ts(first["approval_id"])
    assert "role approvers or support" in json.dumps(harness.standin.card(CHANNEL, ts)["blocks"])
    await harness.card_ts(second["approval_id"])
    await harness.click(FINANCE[0], first["approval_id"])
    [why] = await harness.wait_ephemeral(FINANCE[0])
    assert "none of the roles 'approvers', 'support'" in why
    await harness.click(SUPPORT, first["approval_id"])  # the second role
    await harness.click(APPROVER, second["approval_id"])  # the first role
    delivered = await harness.receiver.wait_delivered(2)
    assert {json.loads(r.body)["status"] for r in delivered} == {"approved"}


async def _resource(harness: Harness, approval_id: str) -> dict[str, object]:
    status, body = await harness.call("GET", f"/v1/approvals/{approval_id}")
    assert status == 200
    assert isinstance(body, dict)
    return body


async def test_a_vote_whose_voter_lost_the_role_does_not_count_at_settlement(
    harness: Harness,
) -> None:
    created = await harness.submit(tool=wire())
    approval_id = created["approval_id"]
    await harness.card_ts(approval_id)
    await harness.click(FINANCE[0], approval_id)
    await harness.wait_ephemeral(FINANCE[0])  # "counted, 1 of 2"
    assert [d["slack_user_id"] for d in (await _resource(harness, approval_id))["decided_by"]] == [  # type: ignore[attr-defined]
        FINANCE[0].id
    ]
    # FINANCE[0] leaves the finance user group before the second approval arrives
    harness.standin.set_usergroup(
        "S0FINANCE", [REQUESTER.id, *(u.id for u in FINANCE if u is not FINANCE[0])]
    )
    await harness.click(FINANCE[1], approval_id)
    await harness.wait_ephemeral(FINANCE[1])
    after = await _resource(harness, approval_id)
    assert after["status"] == "pending"  # one vote left that still holds: not a quorum of 2
    assert [d["slack_user_id"] for d in after["decided_by"]] == [FINANCE[1].id]  # type: ignore[attr-defined]
    status, events = await harness.call("GET", f"/v1/approvals/{approval_id}/events")
    assert status == 200
    outcomes = [(e.get("slack_user_id"), e.get("outcome")) for e in events["events"]]
    assert (FINANCE[0].id, "vote_dropped") in outcomes
    await harness.click(FINANCE[2], approval_id)
    [received] = await harness.receiver.wait_delivered(1)
    decision = json.loads(received.body)
    assert decision["status"] == "approved"
    assert [d["slack_user_id"] for d in decision["decided_by"]] == [FINANCE[1].id, FINANCE[2].id]
    assert await _settlements(harness, approval_id) == 1


async def test_a_vote_that_cannot_be_rechecked_does_not_count(harness: Harness) -> None:
    created = await harness.submit(tool=wire())
    approval_id = created["approval_id"]
    await harness.card_ts(approval_id)
    await harness.click(FINANCE[0], approval_id)
    await harness.wait_ephemeral(FINANCE[0])
    # the first voter's profile can no longer be fetched (deactivated, say): fail closed
    del harness.standin.users[FINANCE[0].id]
    await harness.click(FINANCE[1], approval_id)
    await harness.wait_ephemeral(FINANCE[1])
    assert (await _resource(harness, approval_id))["status"] == "pending"
