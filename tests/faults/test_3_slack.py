"""Scenario 3: Slack answers 429 and 500 to every card post and update for 30 s. Afterwards
every card is posted (once) and shows its outcome, and every decision reached the agent."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.faults import table
from tests.faults.conftest import MakeWorld
from tests.faults.ledger import Ledger
from tests.faults.test_1_kill9 import duplicate_cards
from tests.faults.world import FaultHarness
from tests.support.harness import CHANNEL, FINANCE

OUTAGE = 30.0
BEFORE = 10  # cards posted before the outage; decided during it (their updates fail)
DURING = 20  # submitted during the outage: their posts fail
MAX_DELAY = 5  # the relay's backoff cap (COUNTERSIGN_DELIVERY_MAX_DELAY)


def break_slack(h: FaultHarness) -> None:
    """429 (Retry-After 1) and 500 in turn on every write, more than 30 s can use up."""
    for method in ("chat.postMessage", "chat.update"):
        for _ in range(2000):
            h.standin.fail(method, status=429, retry_after=1)
            h.standin.fail(method, status=500)


def decided_cards(h: FaultHarness, approval_ids: set[str]) -> bool:
    """Each of these cards shows its outcome: its buttons are gone."""
    shown = 0
    for message in h.standin.messages.get(CHANNEL, []):
        approval_id = ((message.get("metadata") or {}).get("event_payload") or {}).get(
            "approval_id"
        )
        if approval_id in approval_ids and not any(
            b.get("type") == "actions" for b in message.get("blocks") or []
        ):
            shown += 1
    return shown >= len(approval_ids)


@pytest.mark.timeout(OUTAGE + 120)
async def test_slack_answering_429_and_500_for_30_s(make_world: MakeWorld) -> None:
    h = await make_world(extra_env={"COUNTERSIGN_DELIVERY_MAX_DELAY": str(MAX_DELAY)})
    ledger = Ledger(h)
    before = [await ledger.submit(f"s{i}") for i in range(BEFORE)]
    assert await ledger.eventually(ledger.all_cards, timeout=20)

    break_slack(h)
    outage_started = time.monotonic()
    clicks = [ledger.click(FINANCE[i % 5], a, counts=True) for i, a in enumerate(before)]
    assert set(await asyncio.gather(*clicks)) == {200}
    during = [await ledger.submit(f"d{i}") for i in range(DURING)]
    await h.sleep_through(OUTAGE - (time.monotonic() - outage_started))
    failed_calls = len(h.standin.calls)
    h.standin.clear_failures()
    ledger.fault_end = time.monotonic()

    cards = await ledger.eventually(ledger.all_cards, timeout=60)
    clicks = [ledger.click(FINANCE[i % 5], a, counts=True) for i, a in enumerate(during)]
    assert set(await asyncio.gather(*clicks)) == {200}
    delivered = await ledger.eventually(ledger.all_delivered, timeout=30)
    updated = await ledger.eventually(
        lambda: decided_cards(h, set(ledger.accepted.values())), timeout=60
    )
    if updated:
        ledger.cards_done_at = time.monotonic()
    doubled_cards = duplicate_cards(ledger)
    row = table.record(
        await ledger.measure(
            "3. Slack 429/500 for 30 s",
            notes=[
                f"{failed_calls} Slack calls during the outage",
                f"backoff cap {MAX_DELAY} s",
                f"{doubled_cards} cards posted twice",
            ],
        )
    )
    assert cards, ledger.explain(row)
    assert delivered, ledger.explain(row)
    assert updated, ledger.explain(row)
    assert row.clean(), ledger.explain(row)
    assert doubled_cards == 0, ledger.explain(row)
