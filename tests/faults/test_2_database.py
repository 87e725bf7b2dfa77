"""Scenario 2: PostgreSQL stopped for 10 s under traffic, then started again. The bot recovers
without a restart; meanwhile the agent API answers 503 with ``Retry-After`` (never a 500, never
a 2xx that was not stored), ``/readyz`` says why, and a click is answered with an ephemeral
"try again"; clicking again afterwards settles it, once."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from bot import messages
from tests.faults import table
from tests.faults.conftest import MakeWorld
from tests.faults.ledger import Ledger
from tests.faults.pg import StoppablePostgres
from tests.faults.world import FaultHarness
from tests.support.harness import FINANCE

OUTAGE = 10.0
BEFORE = 10  # approvals with cards before the outage; half settled before it


async def readyz(h: FaultHarness) -> tuple[int, Any]:
    assert h.session is not None
    async with h.session.get(h.base_url + "/readyz") as response:
        return response.status, await response.json()


async def traffic(ledger: Ledger, stop: asyncio.Event, prefix: str) -> None:
    """An agent submitting one request after another until told to stop."""
    n = 0
    while not stop.is_set():
        await ledger.submit(f"{prefix}{n}")
        n += 1


def away_ephemerals(h: FaultHarness, user_id: str) -> int:
    prefix = messages.DATABASE_AWAY[:40]
    return sum(1 for e in h.standin.ephemerals if e["user"] == user_id and prefix in e["text"])


@pytest.mark.timeout(OUTAGE + 90)
async def test_database_stopped_for_10_s_under_traffic(
    make_world: MakeWorld, fault_pg: StoppablePostgres
) -> None:
    h = await make_world()
    ledger = Ledger(h)
    before = [await ledger.submit(f"b{i}") for i in range(BEFORE)]
    assert await ledger.eventually(ledger.all_cards, timeout=20)
    settled_before = before[: BEFORE // 2]
    for i, approval_id in enumerate(settled_before):
        assert await ledger.click(FINANCE[i % 5], approval_id, counts=True) == 200
    stop = asyncio.Event()
    agents = [asyncio.create_task(traffic(ledger, stop, f"t{k}-")) for k in range(2)]
    await asyncio.sleep(0.5)  # let the traffic run before the fault
    accepted_before_outage = len(ledger.accepted)

    await asyncio.to_thread(fault_pg.stop)
    outage_started = time.monotonic()
    ready_status, ready_body = await readyz(h)
    get_status, _ = await h.call("GET", f"/v1/approvals/{before[-1]}")
    clicked_in_outage = before[BEFORE // 2 :]
    click_statuses = []
    for i, approval_id in enumerate(clicked_in_outage):
        user = FINANCE[i % 5]
        seen = away_ephemerals(h, user.id)
        click_statuses.append(await ledger.click(user, approval_id, counts=False))
        answered = await ledger.eventually(
            lambda user=user, seen=seen: away_ephemerals(h, user.id) > seen, timeout=5
        )
        assert answered, (
            "no 'try again' ephemeral for a click while the database is away: "
            f"{h.standin.ephemerals[-3:]}"
        )
    await h.sleep_through(OUTAGE - (time.monotonic() - outage_started))
    await asyncio.to_thread(fault_pg.start)
    ledger.fault_end = time.monotonic()

    # recovers without a restart: the same process becomes ready again
    await h.wait_until(
        lambda: readyz_ok(h), timeout=30, what="/readyz 200 after the database is back"
    )
    ready_again = time.monotonic() - ledger.fault_end
    stop.set()
    await asyncio.gather(*agents)
    assert await ledger.eventually(ledger.all_cards, timeout=30)
    # everyone clicks again what is still open (the ephemeral asked them to)
    pending = [a for a in ledger.accepted.values() if a not in settled_before]
    clicks = [ledger.click(FINANCE[i % 5], a, counts=True) for i, a in enumerate(pending)]
    assert set(await asyncio.gather(*clicks)) == {200}
    delivered = await ledger.eventually(ledger.all_delivered, timeout=30)
    row = table.record(
        await ledger.measure(
            "2. PostgreSQL stopped 10 s under traffic",
            notes=[
                f"ready again {ready_again:.1f} s after the start, no restart",
                f"{len(ledger.accepted) - accepted_before_outage} submitted during or after it",
            ],
        )
    )
    assert delivered, ledger.explain(row)
    assert row.clean(), ledger.explain(row)
    assert h.bots[0].starts == 1
    assert h.bots[0].alive()
    # while it was away: the probe said why, the API said try again, clicks were answered
    assert ready_status == 503, ready_body
    assert ready_body["checks"]["database"]["ok"] is False, ready_body
    assert "database" in ready_body["checks"]["database"]["problem"].lower(), ready_body
    assert get_status == 503, h.answers[-len(click_statuses) - 1 :]
    assert click_statuses == [200] * len(clicked_in_outage)
    outage_answers = [
        a
        for a in h.answers
        if a.kind == "api" and outage_started <= a.at <= ledger.fault_end and a.status
    ]
    assert outage_answers, "no agent request was answered during the outage"
    assert {a.status for a in outage_answers} <= {200, 201, 503}, outage_answers
    assert all(a.retry_after for a in outage_answers if a.status == 503), outage_answers


async def readyz_ok(h: FaultHarness) -> bool:
    try:
        status, _ = await readyz(h)
    except (OSError, TimeoutError):
        return False
    return status == 200
