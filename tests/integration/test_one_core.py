"""The app's wiring: the card publisher, a relay handler, escalates through the core's own
approval service, so the early escalation it schedules runs on the clock the app was given."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.support import waiting
from tests.support.harness import ONCALL, Harness


async def test_the_card_publishers_early_escalation_is_due_on_the_apps_clock(
    harness: Harness,
) -> None:
    # a day behind the wall clock: a service on its own (wall) clock would date the escalation
    # a day in the app's future, and it would never fire
    harness.clock.advance(-timedelta(days=1).total_seconds())
    created = await harness.submit(tool={"name": "solo_task", "call_id": "s1", "arguments": {}})
    await harness.card_ts(created["approval_id"])

    await waiting.until(
        lambda: len(harness.standin.messages.get(ONCALL, [])) == 1,
        what="the immediate escalation",
    )
    status, body = await harness.call("GET", f"/v1/approvals/{created['approval_id']}/events")
    assert status == 200, body
    [timer] = [e for e in body["events"] if e["kind"] == "timer"]
    assert timer["outcome"] == "escalated"
    # dated by the app's clock, whichever moment of the request it names
    due_at = datetime.fromisoformat(timer["due_at"])
    assert datetime.fromisoformat(created["created_at"]) <= due_at <= harness.clock()
    assert due_at < datetime.now(UTC) - timedelta(hours=23)
