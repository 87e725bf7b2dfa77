"""The bot's audit sealer: started with the other background loops, it seals what the bot
writes every ``COUNTERSIGN_AUDIT_SEAL_INTERVAL`` seconds, logs each seal's hash (what
``countersign audit verify --head`` checks against), and stops with the other loops."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncIterator

import pytest

from approvals import repository
from bot.config import Config
from tests.support import waiting
from tests.support.harness import FINANCE, REQUESTER, Harness


@dataclasses.dataclass
class SealingHarness(Harness):
    """A bot whose sealer runs every 50 ms (5 s in production)."""

    def config(self) -> Config:
        config = super().config()
        settings = config.settings.model_copy(update={"audit_seal_interval": 0.05})
        return dataclasses.replace(config, settings=settings)


@pytest.fixture
async def sealing(database_url: str) -> AsyncIterator[Harness]:
    h = await SealingHarness(database_url=database_url).start()
    yield h
    await h.stop()


async def test_the_bot_seals_what_it_writes_and_logs_each_head(
    sealing: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    created = await sealing.submit()
    approval_id = created["approval_id"]
    await sealing.card_ts(approval_id)
    await sealing.click(REQUESTER, approval_id)
    await sealing.wait_ephemeral(REQUESTER)
    await sealing.click(FINANCE[0], approval_id)
    await sealing.receiver.wait_delivered(1)
    store = sealing.store
    assert store is not None

    async def all_sealed() -> bool:
        result = await store.audit.verify()
        assert result.ok, result.problems
        # created, two attempts, the settlement, the card's post and the callback delivered
        return result.unsealed == 0 and result.sealed >= 6

    await waiting.until(all_sealed, what="the sealer to seal the decision's events")
    await sealing.stop_bot()  # the sealer stops with the other loops: no seal after this
    assert not [r for r in caplog.records if r.getMessage() == "worker did not stop"]
    assert not [r for r in caplog.records if r.getMessage() == "audit seal failed"]

    logged = [r.__dict__ for r in caplog.records if r.getMessage() == "audit sealed"]
    assert logged, "no seal was logged"
    assert {r["action"] for r in logged} == {"audit_seal"}
    later = await repository.Repository.connect(sealing.database_url, listen=False)
    try:
        result = await later.audit.verify()
    finally:
        await later.close()
    assert result.ok, result.problems
    # the head logged last is the chain's head: kept outside, it checks the chain
    assert (logged[-1]["seq"], logged[-1]["hash"]) == result.head
