"""Scenario 6: SIGTERM under load. Requests in flight are answered, the relay's leased rows
are handed back (none is left locked to the stopped process), and once a process serves again
nothing is lost: every acknowledged submission and click counts and is delivered."""

from __future__ import annotations

import asyncio
import time

import asyncpg
import pytest

from tests.faults import table
from tests.faults.conftest import MakeWorld
from tests.faults.ledger import Ledger
from tests.faults.world import FaultHarness
from tests.support.harness import FINANCE

AGENTS = 6
PER_AGENT = 12
# rows still leased after the stop would wait out the 30 s lease: longer than this
AFTER_RESTART = 20.0


async def leased_rows(h: FaultHarness) -> list[str]:
    """The outbox rows still leased (to nobody, once the process is gone): kind and attempts."""
    conn = await asyncpg.connect(h.database_url)
    try:
        rows = await conn.fetch(
            "SELECT kind, attempts FROM outbox WHERE done_at IS NULL AND dead_at IS NULL"
            " AND locked_until > now()"
        )
    finally:
        await conn.close()
    return [f"{r['kind']} (attempts {r['attempts']})" for r in rows]


async def agent(ledger: Ledger, n: int) -> None:
    for i in range(PER_AGENT):
        await ledger.submit(f"g{n}-{i}")


async def approvers(ledger: Ledger, done: asyncio.Event) -> None:
    """Click every approval once its card shows, until the agents are done and all clicked."""
    clicked: set[str] = set()
    while not (done.is_set() and clicked >= set(ledger.accepted.values())):
        for approval_id in sorted(ledger.cards() - clicked):
            user = FINANCE[len(clicked) % len(FINANCE)]
            status = await ledger.click(user, approval_id, counts=True)
            if status == 200:
                clicked.add(approval_id)
        await asyncio.sleep(0.05)


@pytest.mark.timeout(150)
async def test_sigterm_under_load(make_world: MakeWorld) -> None:
    h = await make_world()
    ledger = Ledger(h)
    h.receiver.latency = 0.3  # callbacks in flight at the signal
    h.standin.slow("chat.postMessage", 0.1)
    h.standin.slow("chat.update", 0.1)
    done = asyncio.Event()
    agents = asyncio.gather(*(agent(ledger, n) for n in range(AGENTS)))
    clicking = asyncio.create_task(approvers(ledger, done))
    total = AGENTS * PER_AGENT
    assert await ledger.eventually(lambda: len(ledger.must_count) >= total // 4, timeout=30)
    in_flight = ledger.receiver.in_flight
    signalled = time.monotonic()
    code = await h.bots[0].terminate()
    cut = [a for a in h.answers if a.failure == "cut"]
    stopped_in = time.monotonic() - signalled
    left_leased = await leased_rows(h)
    await h.restart(h.bots[0])
    ledger.fault_end = time.monotonic()
    await agents
    done.set()
    await asyncio.wait_for(clicking, timeout=AFTER_RESTART)
    delivered = await ledger.eventually(ledger.all_delivered, timeout=AFTER_RESTART)
    row = table.record(
        await ledger.measure(
            "6. SIGTERM under load, restart",
            notes=[
                f"stopped in {stopped_in:.1f} s (exit {code})",
                f"{in_flight} callbacks in flight at the signal",
                f"{len(left_leased)} rows left leased {left_leased}",
                f"cut: {[a.kind for a in cut]}",
            ],
        )
    )
    assert code == 0, h.bots[0].log_tail()
    assert left_leased == [], ledger.explain(row)
    assert cut == [], ledger.explain(row)
    assert delivered, ledger.explain(row)
    assert row.clean(), ledger.explain(row)
