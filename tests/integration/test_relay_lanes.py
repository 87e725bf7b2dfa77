"""The relay's callback lane, its claims after a short one, and its rest hook, on a real
database with the relay's own loop running (``run()``: the lane and the rests are its)."""

from __future__ import annotations

import asyncio
import functools
import operator
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from approvals import models, outbox
from approvals.repository import Repository
from tests.support import waiting
from tests.support.records import T0, approval, approved, attempt, callback, post_card

Handler = Callable[[models.OutboxItem], Awaitable[None]]


@pytest.fixture
async def elsewhere(database_url: str) -> AsyncIterator[Repository]:
    """The same database as another process sees it: what settles through it, the relay
    under test hears of only by the notification."""
    repository = await Repository.connect(database_url)
    yield repository
    await repository.close()


@asynccontextmanager
async def running(relay: outbox.Relay) -> AsyncIterator[None]:
    task = asyncio.create_task(relay.run())
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


@asynccontextmanager
async def scan_slot_held(store: Repository, agent: Handler) -> AsyncIterator[None]:
    """A running relay with one delivery slot, held by a card update (of an approval of its
    own) that does not finish until the end: callbacks, delivered to ``agent``, can go by the
    lane alone. The slot is taken before anything settles, else the scan might claim a
    callback itself (rows due at the same instant come in no set order)."""
    blocker = approval(99)
    await store.create_approval(blocker, [])
    release, stuck = asyncio.Event(), asyncio.Event()

    async def stuck_update(item: models.OutboxItem) -> None:
        stuck.set()
        await release.wait()

    relay = outbox.Relay(
        store=store,
        handlers={models.OutboxKind.UPDATE_CARD: stuck_update, models.OutboxKind.CALLBACK: agent},
        concurrency=1,
        poll_interval=60,
    )
    async with running(relay):
        try:
            await waiting.until(lambda: relay.stalled(time.monotonic()) is None)
            await store.queue_outbox([models.card_update(blocker.approval_id)], T0)
            await asyncio.wait_for(stuck.wait(), 5)
            yield
        finally:
            release.set()


async def test_a_settled_callback_is_not_held_behind_the_scans_rows(
    store: Repository, elsewhere: Repository
) -> None:
    """One delivery slot, held by a card update that does not finish: the scan could not run
    the callback of an approval settled in another process, and the lane delivers it anyway,
    once."""
    a = approval()
    await store.create_approval(a, [])
    release = asyncio.Event()
    delivered: list[str] = []

    async def stuck_update(item: models.OutboxItem) -> None:
        delivered.append("update_card")
        await release.wait()

    async def agent(item: models.OutboxItem) -> None:
        delivered.append("callback")

    relay = outbox.Relay(
        store=store,
        handlers={models.OutboxKind.UPDATE_CARD: stuck_update, models.OutboxKind.CALLBACK: agent},
        concurrency=1,
        poll_interval=60,
    )
    async with running(relay):
        await waiting.until(lambda: relay.stalled(time.monotonic()) is None)
        # the card update first, so that the scan takes it (one slot) before the callback
        moved = await elsewhere.settle(
            approved(a),
            attempt(a, models.AttemptOutcome.ACCEPTED),
            [models.card_update(a.approval_id), callback(a)],
        )
        assert moved
        await waiting.until(lambda: "callback" in delivered, timeout=5)
        assert delivered.count("update_card") <= 1  # still stuck, holding the only slot
        release.set()
        await waiting.until(lambda: delivered.count("update_card") == 1, timeout=5)
    assert delivered.count("callback") == 1


async def test_a_callback_heard_while_a_lane_claim_is_out_is_claimed_at_once(
    store: Repository, elsewhere: Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a burst of clicks a claim takes tens of milliseconds: an approval heard settling
    meanwhile goes in a claim of its own at once (up to LANE_CLAIMS in flight), not after
    the one out. Each callback is still delivered once."""
    first, second = approval(1), approval(2)
    for a in (first, second):
        await store.create_approval(a, [])
    gate, out = asyncio.Event(), asyncio.Event()
    real = store.claim_callbacks

    async def slow_for_first(approval_ids: Sequence[str], *args: Any) -> Any:
        if first.approval_id in approval_ids:
            out.set()
            await gate.wait()  # this claim is still out
        return await real(approval_ids, *args)

    monkeypatch.setattr(store, "claim_callbacks", slow_for_first)
    delivered: list[str] = []

    async def agent(item: models.OutboxItem) -> None:
        delivered.append(item.approval_id)

    async with scan_slot_held(store, agent):
        try:
            for a in (first, second):  # settled in another process
                assert await elsewhere.settle(
                    approved(a),
                    attempt(a, models.AttemptOutcome.ACCEPTED),
                    [models.card_update(a.approval_id), callback(a)],
                )
                await asyncio.wait_for(out.wait(), 5)  # the first's claim is out
            await waiting.until(lambda: second.approval_id in delivered, timeout=5)
            assert first.approval_id not in delivered  # its claim is still out
            gate.set()
            await waiting.until(lambda: first.approval_id in delivered, timeout=5)
        finally:
            gate.set()
    assert sorted(delivered) == sorted([first.approval_id, second.approval_id])


async def test_rows_queued_during_a_drain_are_claimed_once_notified(store: Repository) -> None:
    """After a claim that came back short the relay claims again only once a notification was
    heard; rows a delivery queues meanwhile are notified, so they still go at once (the poll
    interval, a minute here, is never what finds them)."""
    first, second = approval(1), approval(2)
    await store.create_approval(first, [])
    await store.create_approval(second, [])
    delivered: list[str] = []

    async def post(item: models.OutboxItem) -> None:
        delivered.append(item.approval_id)
        if item.approval_id == first.approval_id:
            await store.queue_outbox([post_card(second)], T0)

    relay = outbox.Relay(
        store=store, handlers={models.OutboxKind.POST_CARD: post}, poll_interval=60
    )
    async with running(relay):
        await store.queue_outbox([post_card(first)], T0)
        await waiting.until(lambda: len(delivered) == 2, timeout=5)
    assert delivered == [first.approval_id, second.approval_id]


async def test_the_relay_rests_after_work_and_says_how_much_it_did(store: Repository) -> None:
    rests: list[int] = []

    async def post(item: models.OutboxItem) -> None:
        return None

    relay = outbox.Relay(
        store=store,
        handlers={models.OutboxKind.POST_CARD: post},
        poll_interval=0.05,
        on_rest=rests.append,
    )
    async with running(relay):
        for n in range(1, 4):
            a = approval(n)
            await store.create_approval(a, [post_card(a)])
        await waiting.until(lambda: sum(rests) == 3, timeout=5)
        await asyncio.sleep(0.2)  # idle turns: no rest told of nothing
    assert sum(rests) == 3
    assert all(r > 0 for r in rests)


async def test_a_failing_rest_hook_does_not_stop_the_relay(store: Repository) -> None:
    delivered: list[str] = []

    async def post(item: models.OutboxItem) -> None:
        delivered.append(item.approval_id)

    def broken(_delivered: int) -> None:
        raise RuntimeError("boom")

    relay = outbox.Relay(
        store=store,
        handlers={models.OutboxKind.POST_CARD: post},
        poll_interval=0.05,
        on_rest=broken,
    )
    async with running(relay):
        for a in (approval(1), approval(2)):
            await store.create_approval(a, [post_card(a)])
            await waiting.until(functools.partial(operator.contains, delivered, a.approval_id))
            await asyncio.sleep(0.15)  # a rest, and its failing hook, before the next row


async def test_a_click_settled_here_has_its_callback_delivered_with_no_claim(
    store: Repository, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A click settled in the relay's own process writes its callback already claimed and
    hands it over once committed: delivered though no lane claim ever returns and the scan's
    only slot is held, once, and recorded done under that first claim."""
    a = approval(1)
    await store.create_approval(a, [])
    never = asyncio.Event()

    async def claim_never_returns(*args: Any) -> list[models.OutboxItem]:
        await never.wait()  # until the test ends (the notification may come before the hand-over)
        return []

    monkeypatch.setattr(store, "claim_callbacks", claim_never_returns)
    delivered: list[models.OutboxItem] = []

    async def agent(item: models.OutboxItem) -> None:
        delivered.append(item)

    async with scan_slot_held(store, agent):
        try:
            assert await store.settle(
                approved(a),
                attempt(a, models.AttemptOutcome.ACCEPTED),
                [models.card_update(a.approval_id), callback(a)],
            )
            await waiting.until(lambda: len(delivered) == 1, timeout=5)
            # recorded done by the relay, under the claim the settlement wrote
            await waiting.until(lambda: _callback_done(database_url, a), timeout=5)
        finally:
            never.set()
    (item,) = delivered
    assert (item.approval_id, item.claims, item.claim_no) == (a.approval_id, 1, 1)
    row = await _callback_row(database_url, a)
    assert (row["claims"], row["claim_no"], row["attempts"]) == (1, 1, 1)


async def test_with_no_relay_taking_them_a_settled_callback_is_written_unclaimed(
    store: Repository, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Callbacks are written claimed only for a relay of this process that takes them; one
    that stopped taking while the click settled has the row handed back at once."""
    plain, raced = approval(1), approval(2)
    for each in (plain, raced):
        await store.create_approval(each, [])
    assert await store.settle(
        approved(plain), attempt(plain, models.AttemptOutcome.ACCEPTED), [callback(plain)]
    )
    row = await _callback_row(database_url, plain)
    assert (row["locked_until"], row["claims"]) == (None, 0)

    taken: list[models.OutboxItem] = []
    stop = store.take_callbacks(taken.extend, outbox.LEASE)
    real = store._db.fetchrow

    async def stops_taking_meanwhile(query: str, *args: Any) -> Any:
        row = await real(query, *args)
        stop()  # the relay stopped while the statement was out
        return row

    monkeypatch.setattr(store._db, "fetchrow", stops_taking_meanwhile)
    assert await store.settle(
        approved(raced), attempt(raced, models.AttemptOutcome.ACCEPTED), [callback(raced)]
    )
    row = await _callback_row(database_url, raced)
    assert taken == []
    assert (row["locked_until"], row["claims"]) == (None, 0)
    now = T0 + timedelta(days=3650)
    claimed = await store.claim_outbox(now, now + outbox.LEASE, 10, ())
    assert [c.approval_id for c in claimed] == [plain.approval_id, raced.approval_id]


async def _callback_row(database_url: str, a: models.Approval) -> asyncpg.Record:
    conn = await asyncpg.connect(database_url)
    try:
        row = await conn.fetchrow(
            "SELECT * FROM outbox WHERE approval_id = $1 AND kind = 'callback'", a.approval_id
        )
    finally:
        await conn.close()
    assert row is not None
    return row


async def _callback_done(database_url: str, a: models.Approval) -> bool:
    return (await _callback_row(database_url, a))["done_at"] is not None
