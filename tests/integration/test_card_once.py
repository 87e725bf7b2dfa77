"""A crash between ``chat.postMessage`` and storing the card's ts never leaves two cards: each
card carries its approval id as message metadata, and a post that may have been tried before
finds it in the reviewer channel and adopts it.

The crash is real: PostgreSQL refuses (or holds, while the bot is stopped) the update that
stores the ts, by a trigger the test installs, after the stand-in has shown the card."""

from __future__ import annotations

import json
from datetime import datetime

import asyncpg
import pytest

from tests.support import waiting
from tests.support.harness import CHANNEL, FINANCE, Harness

CARD_EVENT = "countersign_approval"

# The first update that stores a card's ts fails (after ``pg_sleep`` seconds); later ones pass.
# A sequence counts, because it is not rolled back with the failing statement.
_FAULT = """
CREATE SEQUENCE fault_card_seq;
CREATE FUNCTION fault_card() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.card_ts IS NOT NULL AND OLD.card_ts IS NULL AND nextval('fault_card_seq') = 1 THEN
        PERFORM pg_sleep({pause});
        RAISE EXCEPTION 'injected fault: the card''s ts was not stored';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER fault_card BEFORE UPDATE ON approvals
    FOR EACH ROW EXECUTE FUNCTION fault_card();
"""


async def _inject(harness: Harness, pause: float = 0) -> None:
    conn = await asyncpg.connect(harness.database_url)
    try:
        await conn.execute(_FAULT.format(pause=pause))
    finally:
        await conn.close()


async def _card(harness: Harness, approval_id: str) -> dict[str, object]:
    status, body = await harness.call("GET", f"/v1/approvals/{approval_id}")
    assert status == 200, body
    card = body["card"]
    assert isinstance(card, dict)
    return card


async def _posted(harness: Harness, approval_id: str) -> dict[str, object]:
    """The approval's card object, once it is ``posted``."""

    async def posted() -> bool:
        return (await _card(harness, approval_id))["status"] == "posted"

    await waiting.until(posted, what="the card's ts on the resource")
    return await _card(harness, approval_id)


def _cards(harness: Harness, approval_id: str) -> list[str]:
    """The ts of every message in the reviewer channel carrying this approval's metadata."""
    return [
        str(m["ts"])
        for m in harness.standin.messages[CHANNEL]
        if m.get("metadata")
        == {"event_type": CARD_EVENT, "event_payload": {"approval_id": approval_id}}
    ]


async def _click_settles(harness: Harness, approval_id: str, ts: str) -> None:
    assert await harness.click(FINANCE[0], approval_id) == 200
    await harness.standin.wait_for(
        lambda: "actions" not in json.dumps(harness.standin.card(CHANNEL, ts)["blocks"])
    )
    status, body = await harness.call("GET", f"/v1/approvals/{approval_id}")
    assert (status, body["status"]) == (200, "approved")


@pytest.fixture
async def refused_once(harness: Harness) -> Harness:
    """A harness whose database refuses the first update that stores a card's ts."""
    await _inject(harness)
    return harness


async def test_a_card_whose_ts_was_not_stored_is_adopted_not_posted_again(
    refused_once: Harness,
) -> None:
    harness = refused_once
    created = await harness.submit()
    approval_id = str(created["approval_id"])
    card = await _posted(harness, approval_id)

    [ts] = _cards(harness, approval_id)  # posted once, before the failure; found, not re-posted
    assert card == {"status": "posted", "channel": CHANNEL, "ts": ts, "error": None}
    assert len(harness.standin.methods_called("chat.postMessage")) == 1
    [lookup] = harness.standin.methods_called("conversations.history")
    assert lookup["channel"] == CHANNEL
    assert lookup["include_all_metadata"] in ("1", "true")
    # bounded: from a minute (clock skew) before the approval was created
    submitted = datetime.fromisoformat(str(created["created_at"])).timestamp()
    assert submitted - 61 < float(lookup["oldest"]) < submitted
    await _click_settles(harness, approval_id, ts)


async def test_a_relay_stopped_before_storing_the_ts_leaves_one_card(harness: Harness) -> None:
    """The bot stops (its relay cancelled, the row handed back at once) while the ts is being
    stored; the row, claimed for the second time, is taken again after the restart and adopts
    the card (however fresh it is: a restart takes seconds)."""
    await _inject(harness, pause=3)
    approval_id = str((await harness.submit())["approval_id"])
    await harness.standin.wait_for(lambda: len(_cards(harness, approval_id)) == 1)
    await harness.stop_bot()  # Slack shows the card; its ts was never stored

    await harness.start_bot()
    card = await _posted(harness, approval_id)
    [ts] = _cards(harness, approval_id)
    assert card["ts"] == ts
    assert len(harness.standin.methods_called("chat.postMessage")) == 1
    # none before the first post (its first claim), one that found the card
    assert len(harness.standin.methods_called("conversations.history")) == 1
    await _click_settles(harness, approval_id, ts)


async def test_a_failed_look_up_posts_again_and_either_card_settles_once(
    refused_once: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """Slack cannot say whether the card is there (the app was created before the bot asked for
    ``channels:history``): a second card beats none, the log says how to fix it, and the
    approval still settles exactly once (the stored card is the second one)."""
    harness = refused_once
    harness.standin.scopes.discard("channels:history")
    approval_id = str((await harness.submit())["approval_id"])
    card = await _posted(harness, approval_id)

    first, second = _cards(harness, approval_id)
    assert card["ts"] == second
    assert any(
        "card look-up refused" in r.getMessage() and "channels:history" in r.getMessage()
        for r in caplog.records
    )
    await _click_settles(harness, approval_id, second)
    # the stored card shows the outcome; the other one stays as it was
    assert [a["ts"] for a in harness.standin.methods_called("chat.update")] == [second]
    assert "actions" in json.dumps(harness.standin.card(CHANNEL, first)["blocks"])


async def test_a_fresh_card_is_posted_without_a_look_up(harness: Harness) -> None:
    """Only a row that may have been tried before costs a conversations.history call."""
    approval_id = str((await harness.submit())["approval_id"])
    card = await _posted(harness, approval_id)
    assert _cards(harness, approval_id) == [card["ts"]]
    assert harness.standin.methods_called("conversations.history") == []
