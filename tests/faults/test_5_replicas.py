"""Scenario 5: three replicas on one PostgreSQL, 200 approvals, each clicked at once by three
approvers through three different replicas: exactly one settlement and one callback body per
approval, one card each."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import TypeVar

import pytest

from tests.faults import table
from tests.faults.conftest import MakeWorld
from tests.faults.ledger import Ledger
from tests.faults.test_1_kill9 import duplicate_cards
from tests.support.harness import FINANCE

APPROVALS = 200
REPLICAS = 3
T = TypeVar("T")


async def bounded(limit: int, jobs: Sequence[Awaitable[T]]) -> list[T]:
    gate = asyncio.Semaphore(limit)

    async def one(job: Awaitable[T]) -> T:
        async with gate:
            return await job

    return await asyncio.gather(*(one(j) for j in jobs))


@pytest.mark.timeout(240)
async def test_three_replicas_200_approvals_concurrent_clicks(make_world: MakeWorld) -> None:
    h = await make_world()
    for _ in range(REPLICAS - 1):
        await h.add_replica()
    urls = [b.url for b in h.bots]
    ledger = Ledger(h)
    await bounded(
        20, [ledger.submit(f"r{i}", base_url=urls[i % REPLICAS]) for i in range(APPROVALS)]
    )
    assert await ledger.eventually(ledger.all_cards, timeout=90)
    # three different approvers per approval, through three different replicas, all at once
    clicks = [
        ledger.click(
            FINANCE[(i + k) % len(FINANCE)], a, base_url=urls[(i + k) % REPLICAS], counts=True
        )
        for i, a in enumerate(ledger.accepted.values())
        for k in range(REPLICAS)
    ]
    statuses = await bounded(30, clicks)
    delivered = await ledger.eventually(ledger.all_delivered, timeout=90)
    doubled_cards = duplicate_cards(ledger)
    row = table.record(
        await ledger.measure(
            "5. 3 replicas, 200 approvals × 3 concurrent clicks",
            notes=[f"{len(statuses)} clicks", f"{doubled_cards} cards posted twice"],
        )
    )
    assert set(statuses) == {200}, ledger.explain(row)
    assert delivered, ledger.explain(row)
    assert row.clean(), ledger.explain(row)
    assert doubled_cards == 0, ledger.explain(row)
