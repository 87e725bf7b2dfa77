"""The relay's loop says whether it is alive (for /readyz) from when it last turned."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

from approvals import models, outbox
from approvals.repository import Repository
from tests.support import reads, waiting
from tests.support.records import approval, post_card


async def test_a_relay_is_alive_while_its_loop_turns_and_stalled_after(store: Repository) -> None:
    relay = outbox.Relay(store=store, handlers={}, poll_interval=0.01)
    assert relay.stalled(time.monotonic()) == "the relay loop has not run yet"
    task = asyncio.create_task(relay.run())
    try:
        await asyncio.sleep(0.05)
        assert relay.stalled(time.monotonic()) is None
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    stopped = time.monotonic()
    assert relay.stalled(stopped + outbox.STALLED_MIN_SECONDS - 1) is None
    later = relay.stalled(stopped + outbox.STALLED_MIN_SECONDS + 5)
    assert later is not None
    assert later.startswith("the relay loop last ran ")


async def test_a_live_relay_renews_its_leases_so_a_slow_delivery_runs_once(
    store: Repository,
) -> None:
    """A short lease (what a relay that dies leaves behind) must not lapse under a delivery
    still running: the relay renews what it holds, and the other replica never gets the row."""

    a = approval()
    await store.create_approval(a, [post_card(a)])
    deliveries: list[str] = []

    async def slow(item: models.OutboxItem) -> None:
        deliveries.append("slow")
        await asyncio.sleep(1.0)  # over three leases of 0.3 s

    async def quick(item: models.OutboxItem) -> None:
        deliveries.append("other replica")

    lease = timedelta(seconds=0.3)
    holder = outbox.Relay(store=store, handlers=dict.fromkeys(models.OutboxKind, slow), lease=lease)
    other = outbox.Relay(store=store, handlers=dict.fromkeys(models.OutboxKind, quick), lease=lease)
    running = asyncio.create_task(holder.run())
    try:
        await waiting.until(lambda: deliveries == ["slow"], timeout=2)

        async def done_while_the_other_replica_looks() -> bool:
            # The other replica keeps looking while the delivery runs (over three leases), until
            # the holder has recorded it done; on a loaded machine that can take well past 1 s.
            await other.drain()
            return (await reads.outbox_counts(store))[0] == 0

        await waiting.until(done_while_the_other_replica_looks, timeout=10, interval=0.1)
        assert deliveries == ["slow"]
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
