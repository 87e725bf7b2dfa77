"""The relay's delivery slots (``concurrency``, COUNTERSIGN_RELAY_CONCURRENCY): never more
deliveries at once than it has slots, on a real database; and the running bot's relay has as
many slots as the setting says."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pytest

from approvals import models, outbox
from approvals.repository import Repository
from bot import app as bot_app
from bot.config import Config
from tests.support import waiting
from tests.support.harness import Harness
from tests.support.records import T0, approval

SLOTS = 2


async def test_deliveries_claimed_as_slots_free_never_outnumber_the_slots(
    store: Repository,
) -> None:
    """Two slots, five card updates. The first two block; one is let through, and the other
    finishes while the relay's next claim is in the database: the row that claim brings is
    started but has not run yet when the relay counts its free slots again. It must count that
    row's slot as taken, else it claims two more and runs three at once."""
    for n in range(5):
        a = approval(n)
        await store.create_approval(a, [])
        await store.queue_outbox([models.card_update(a.approval_id)], T0)
    gates: dict[str, asyncio.Event] = {}
    started: list[str] = []
    running_now = most = 0

    async def update(item: models.OutboxItem) -> None:
        nonlocal running_now, most
        started.append(item.approval_id)
        running_now += 1
        most = max(most, running_now)
        try:
            await gates.setdefault(item.approval_id, asyncio.Event()).wait()
        finally:
            running_now -= 1

    def release(approval_id: str) -> None:
        gates.setdefault(approval_id, asyncio.Event()).set()

    claim_outbox = store.claim_outbox
    claims = 0

    async def claim(
        now: datetime, lease_until: datetime, limit: int, held: Any = ()
    ) -> list[models.OutboxItem]:
        nonlocal claims
        claims += 1
        if claims == 2:  # the relay claims for the slot the first freed: the second frees too
            release(started[1])
            await waiting.until(lambda: running_now == 0)
        return await claim_outbox(now, lease_until, limit, held)

    store.claim_outbox = claim  # type: ignore[method-assign]  # the real claim, observed
    relay = outbox.Relay(
        store=store, handlers={models.OutboxKind.UPDATE_CARD: update}, concurrency=SLOTS
    )
    draining = asyncio.create_task(relay.drain())
    try:
        await waiting.until(lambda: len(started) == 2, timeout=5)
        release(started[0])
        await waiting.until(lambda: len(started) >= 4, timeout=5)
        await asyncio.sleep(0.2)  # room for a fifth to start, were it let
        assert most == SLOTS
    finally:
        for approval_id in [approval(n).approval_id for n in range(5)]:
            release(approval_id)
        assert await asyncio.wait_for(draining, 10) == 5


@dataclass
class FewSlotsHarness(Harness):
    def config(self) -> Config:
        config = super().config()
        settings = config.settings.model_copy(update={"relay_concurrency": SLOTS})
        return dataclasses.replace(config, settings=settings)


@pytest.fixture
async def few_slots(database_url: str) -> AsyncIterator[FewSlotsHarness]:
    h = FewSlotsHarness(database_url=database_url)
    await h.start()
    yield h
    await h.stop()


async def test_the_running_bots_relay_has_the_slots_the_setting_gives(
    few_slots: FewSlotsHarness,
) -> None:
    runner = few_slots._runner
    assert runner is not None
    assert runner.app[bot_app.READY].relay.concurrency == SLOTS
