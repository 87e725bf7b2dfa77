"""Scenario 4: the agent's endpoint down. Longer than the retry interval cap: delivered soon
after it returns (the cap bounds the wait). Past the delivery budget: dead-lettered, shown on
the card, and ``countersign redrive`` delivers it."""

from __future__ import annotations

import asyncio
import time

import asyncpg
import pytest

from tests.faults import table
from tests.faults.conftest import MakeWorld
from tests.faults.ledger import Ledger
from tests.faults.world import FaultHarness
from tests.support.cli import run_cli
from tests.support.harness import CHANNEL, FINANCE

CAP = 2.0  # COUNTERSIGN_DELIVERY_MAX_DELAY
DOWN = 6.0  # the agent's endpoint is away for three caps
BUDGET = 5  # COUNTERSIGN_DELIVERY_BUDGET of the second part
APPROVALS = 5


async def settle_all(ledger: Ledger, approval_ids: list[str]) -> None:
    clicks = [ledger.click(FINANCE[i % 5], a, counts=True) for i, a in enumerate(approval_ids)]
    assert set(await asyncio.gather(*clicks)) == {200}


async def dead_callbacks(h: FaultHarness) -> int:
    conn = await asyncpg.connect(h.database_url)
    try:
        return int(
            await conn.fetchval(
                "SELECT count(*) FROM outbox WHERE kind = 'callback' AND dead_at IS NOT NULL"
            )
        )
    finally:
        await conn.close()


@pytest.mark.timeout(90)
async def test_agent_down_longer_than_the_retry_cap(make_world: MakeWorld) -> None:
    h = await make_world(extra_env={"COUNTERSIGN_DELIVERY_MAX_DELAY": str(CAP)})
    ledger = Ledger(h)
    approval_ids = [await ledger.submit(f"a{i}") for i in range(APPROVALS)]
    assert await ledger.eventually(ledger.all_cards, timeout=20)
    await h.receiver.stop()
    down_at = time.monotonic()
    await settle_all(ledger, approval_ids)
    await h.sleep_through(DOWN - (time.monotonic() - down_at))
    await h.receiver.start()
    ledger.fault_end = time.monotonic()
    delivered = await ledger.eventually(ledger.all_delivered, timeout=30)
    row = table.record(
        await ledger.measure(
            "4a. agent down 6 s, retry cap 2 s", notes=[f"cap {CAP:.0f} s, down {DOWN:.0f} s"]
        )
    )
    assert delivered, ledger.explain(row)
    assert row.clean(), ledger.explain(row)
    # the cap holds: the next try comes within it (plus one delivery's quick tries)
    assert row.recover_s is not None
    assert row.recover_s <= CAP + 2.0, ledger.explain(row)


@pytest.mark.timeout(90)
async def test_agent_down_past_the_budget_dead_letter_then_redrive(
    make_world: MakeWorld,
) -> None:
    h = await make_world(
        delivery_budget=BUDGET, extra_env={"COUNTERSIGN_DELIVERY_MAX_DELAY": str(CAP)}
    )
    ledger = Ledger(h)
    approval_ids = [await ledger.submit(f"dl{i}") for i in range(APPROVALS)]
    assert await ledger.eventually(ledger.all_cards, timeout=20)
    await h.receiver.stop()
    await settle_all(ledger, approval_ids)
    await h.wait_until(
        lambda: _all_dead(h), timeout=BUDGET + 20, what="every callback dead-lettered"
    )

    def cards_say_so() -> bool:
        texts = [str(m.get("blocks")) for m in h.standin.messages.get(CHANNEL, [])]
        return sum("The agent was not told" in t for t in texts) >= APPROVALS

    shown = await ledger.eventually(cards_say_so, timeout=20)
    await h.receiver.start()
    ledger.fault_end = time.monotonic()
    env = h.bot_env(0)
    redriven = await asyncio.gather(*(run_cli("redrive", a, env=env) for a in approval_ids))
    delivered = await ledger.eventually(ledger.all_delivered, timeout=30)
    row = table.record(
        await ledger.measure(
            "4b. agent down past a 5 s budget, redrive",
            notes=[f"{APPROVALS} dead letters, redriven by `countersign redrive`"],
        )
    )
    assert [r.returncode for r in redriven] == [0] * APPROVALS, [r.stderr for r in redriven]
    assert shown, "the cards do not say the agent was not told"
    assert delivered, ledger.explain(row)
    assert row.clean(), ledger.explain(row)


async def _all_dead(h: FaultHarness) -> bool:
    return await dead_callbacks(h) >= APPROVALS
