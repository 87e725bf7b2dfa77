"""The multi-row writes of the outbox lock their rows in id order, so two of them never deadlock.

Two statements that each lock several rows, in different orders, can each hold a row the other
waits for: PostgreSQL then aborts one with ``DeadlockDetectedError`` (a bench run saw
``outbox_renew`` against ``outbox_done``). The interleaving is made deterministic here: a third
transaction holds the middle row, so each statement stops at a known point, and the planner is
steered to a nested loop over the statements' arrays (as it picks on a big outbox), which visits
rows in array order unless the query itself sorts them before it locks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from approvals import sql_loader
from approvals.repository import Repository
from tests.support.records import T0, approval, post_card

QUERIES = sql_loader.queries()
LEASE = T0 + timedelta(minutes=5)
# what makes a nested loop over unnest(...) the plan, whatever the size of the tables
NESTED_LOOP = (
    "SET enable_seqscan = off; SET enable_hashjoin = off; SET enable_mergejoin = off;"
    " SET enable_bitmapscan = off; SET deadlock_timeout = '100ms'"
)


@pytest.fixture
async def three_claimed_rows(database_url: str) -> list[int]:
    """Three outbox rows, ids ascending, each leased by its first claim (claim_no 1)."""
    store = await Repository.connect(database_url, listen=False)
    try:
        for n in (1, 2, 3):
            a = approval(n)
            await store.create_approval(a, [post_card(a)])
        items = await store.claim_outbox(T0, LEASE, 10)
    finally:
        await store.close()
    assert [i.claim_no for i in items] == [1, 1, 1]
    return [i.id for i in items]


async def _connect(dsn: str) -> asyncpg.Connection:
    conn = await asyncpg.connect(dsn)
    await conn.execute(NESTED_LOOP)
    return conn


async def _waits_for_a_lock(watcher: asyncpg.Connection, conn: asyncpg.Connection) -> None:
    pid = conn.get_server_pid()
    for _ in range(500):
        state = await watcher.fetchval(
            "SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1", pid
        )
        if state == "Lock":
            return
        await asyncio.sleep(0.01)
    pytest.fail("the statement never waited for the row held")


async def _race(
    dsn: str, first: str, first_args: tuple[Any, ...], second: str, second_args: tuple[Any, ...]
) -> list[Any]:
    """Run ``first`` and then ``second`` (named queries) while the middle row is held, each
    until it waits for a lock; then let the row go, and return what each gave or raised."""
    holder, watcher = await asyncpg.connect(dsn), await asyncpg.connect(dsn)
    one, two = await _connect(dsn), await _connect(dsn)
    try:
        middle = await watcher.fetchval("SELECT id FROM outbox ORDER BY id OFFSET 1 LIMIT 1")
        hold = holder.transaction()
        await hold.start()
        await holder.execute("SELECT 1 FROM outbox WHERE id = $1 FOR UPDATE", middle)
        runs: list[Awaitable[Any]] = []
        for conn, name, args in ((one, first, first_args), (two, second, second_args)):
            runs.append(asyncio.ensure_future(conn.fetch(QUERIES[name], *args)))
            await _waits_for_a_lock(watcher, conn)
        await hold.rollback()
        async with asyncio.timeout(10):
            return await asyncio.gather(*runs, return_exceptions=True)
    finally:
        for conn in (holder, watcher, one, two):
            await conn.close()


async def test_renew_and_done_in_opposite_orders_do_not_deadlock(
    database_url: str, three_claimed_rows: list[int]
) -> None:
    """The relay renews every lease it holds (ids ascending) while the deliveries that finished
    together are recorded in the order they finished (here: last row first)."""
    low, middle, high = three_claimed_rows
    renewed, done = await _race(
        database_url,
        "outbox_renew",
        ([low, middle, high], [1, 1, 1], LEASE + timedelta(minutes=1)),
        "outbox_done",
        ([high, low], [T0, T0]),
    )
    assert not isinstance(renewed, Exception), renewed
    assert not isinstance(done, Exception), done
    assert sorted(r["id"] for r in done) == [low, high]
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch("SELECT id, done_at, locked_until FROM outbox ORDER BY id")
    finally:
        await conn.close()
    # the renewal went first (it held the low row), then both deliveries were recorded
    assert [(r["id"], r["done_at"] is not None) for r in rows] == [
        (low, True),
        (middle, False),
        (high, True),
    ]
    assert rows[1]["locked_until"] == LEASE + timedelta(minutes=1)


async def test_two_recordings_of_deliveries_in_opposite_orders_do_not_deadlock(
    database_url: str, three_claimed_rows: list[int]
) -> None:
    """Two relays (or two groups of one) record overlapping deliveries in opposite orders."""
    low, middle, high = three_claimed_rows
    first, second = await _race(
        database_url,
        "outbox_done",
        ([low, middle, high], [T0, T0, T0]),
        "outbox_done",
        ([high, low], [T0, T0]),
    )
    assert not isinstance(first, Exception), first
    assert not isinstance(second, Exception), second
    # each row recorded once, by whichever came first
    assert sorted(r["id"] for r in first) == [low, middle, high]
    assert second == []
