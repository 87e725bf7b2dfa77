"""Several replicas on one database settle and deliver once; no network call runs inside a
database transaction; an accepted request survives a crash before its card is posted."""

from __future__ import annotations

import asyncio
import json

import asyncpg

from tests.support import waiting
from tests.support.harness import CHANNEL, FINANCE, Harness


async def test_two_replicas_settle_and_deliver_once(harness: Harness) -> None:
    replica_url, runner, store = await harness.serve_bot()
    try:
        approval_ids = [(await harness.submit(request_id=f"r{i}"))["approval_id"] for i in range(5)]
        for approval_id in approval_ids:
            await harness.card_ts(approval_id)
        clicks = [
            harness.click(FINANCE[i % 5], approval_id, base_url=url)
            for approval_id in approval_ids
            for i, url in enumerate([harness.base_url, replica_url] * 4)
        ]
        assert set(await asyncio.gather(*clicks)) == {200}
        await harness.receiver.wait_delivered(5)
        await harness.settle_quietly(0.5)
        bodies = [json.loads(r.body) for r in harness.receiver.received]
        assert sorted(b["approval_id"] for b in bodies) == sorted(approval_ids)
        # one card per approval, each posted once by one of the two relays
        assert len(harness.standin.messages[CHANNEL]) == 5
    finally:
        await runner.cleanup()
        await store.close()


async def _idle_in_transaction(database_url: str) -> int:
    conn = await asyncpg.connect(database_url)
    try:
        return int(
            await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND state LIKE 'idle in transaction%'"
                # between two statements of one transaction a backend is briefly idle in it;
                # a transaction held across a 1 s network call is idle for far longer
                " AND state_change < now() - interval '250 milliseconds'"
            )
        )
    finally:
        await conn.close()


async def test_no_transaction_stays_open_while_slack_or_the_agent_is_slow(
    harness: Harness,
) -> None:
    harness.standin.slow("chat.postMessage", 1.0)
    harness.standin.slow("chat.update", 1.0)
    harness.receiver.latency = 1.0
    approval_id = (await harness.submit())["approval_id"]
    samples = []
    for _ in range(10):  # while the card is being posted (1 s)
        samples.append(await _idle_in_transaction(harness.database_url))
        await asyncio.sleep(0.05)
    await harness.card_ts(approval_id)
    await harness.click(FINANCE[0], approval_id)
    for _ in range(10):  # while the callback and the card update are in flight (1 s each)
        samples.append(await _idle_in_transaction(harness.database_url))
        await asyncio.sleep(0.05)
    await harness.receiver.wait_delivered(1)
    assert samples == [0] * len(samples)


async def test_accepted_request_survives_a_crash_before_its_card(harness: Harness) -> None:
    harness.standin.fail("chat.postMessage", status=500, times=100)
    approval_id = (await harness.submit())["approval_id"]
    store = harness.store
    assert store is not None

    async def tried() -> bool:
        return len(harness.standin.methods_called("chat.postMessage")) >= 1

    await waiting.until(tried, what="a first post attempt")
    await harness.stop_bot()  # the process dies; Slack comes back while it is down
    harness.standin.clear_failures()
    harness.clock.advance(30)  # past any backoff the dead process had scheduled
    await harness.start_bot()
    await harness.card_ts(approval_id, timeout=10)
    _, body = await harness.call("GET", f"/v1/approvals/{approval_id}")
    assert body["status"] == "pending"


async def test_a_slow_agent_never_holds_back_other_deliveries(harness: Harness) -> None:
    harness.receiver.latency = 4.0  # every callback takes 4 s to answer
    slow = (await harness.submit(request_id="slow"))["approval_id"]
    await harness.card_ts(slow)
    await harness.click(FINANCE[0], slow)

    async def callback_in_flight() -> bool:
        return (
            len(harness.receiver.received) == 0
            and len(harness.standin.methods_called("chat.update")) >= 1
        )

    await waiting.until(callback_in_flight, what="the slow callback in flight")
    loop = asyncio.get_running_loop()
    started = loop.time()
    other = (await harness.submit(request_id="other"))["approval_id"]
    await harness.card_ts(other, timeout=3)  # posted while the slow callback is still waiting
    assert loop.time() - started < 2
    assert harness.receiver.received == []
