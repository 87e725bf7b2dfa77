"""Slack's rate limits are paced, not hit: a burst of approvals to one channel is posted at the
channel's rate with (almost) no 429s, and that channel's backlog delays neither another
channel's cards nor the agents' callbacks. At the relay, a row told "not yet" waits its turn
without an attempt or a slot.

The rates are scaled (20 posts a second per channel instead of Slack's one) so the burst takes
seconds. The stand-in enforces a burst of 5; the bot paces with a burst of 3, the margin a
deployment keeps under Slack's tolerance, which absorbs the jitter between sending a call and
Slack counting it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import REGISTRY

from approvals import errors, models, outbox, policy
from approvals.repository import Repository
from bot import pacing
from bot.config import Config
from tests.support import cores, reads, waiting
from tests.support.harness import APPROVER, CHANNEL, Harness

RATE = 20.0  # posts a second per channel, in the stand-in and the bot
SLACK_BURST = 5
BOT_BURST = 3
BURST_SIZE = 300
MINIMUM = BURST_SIZE / RATE  # seconds: the rate limit's floor for the whole burst


@dataclass
class PacedHarness(Harness):
    """The harness with the bot paced at the scaled rate."""

    def config(self) -> Config:
        config = super().config()
        per_minute = RATE * 60
        settings = config.settings.model_copy(
            update={
                "slack_posts_per_minute": per_minute,
                "slack_post_burst": BOT_BURST,
                "slack_updates_per_minute": per_minute,
                "slack_update_burst": BOT_BURST,
            }
        )
        return dataclasses.replace(config, settings=settings)


@pytest.fixture
async def paced(database_url: str) -> AsyncIterator[PacedHarness]:
    h = PacedHarness(database_url=database_url)
    await h.start()
    h.standin.rate_limit("chat.postMessage", per_second=RATE, burst=SLACK_BURST)
    h.standin.rate_limit("chat.update", per_second=RATE, burst=SLACK_BURST)
    yield h
    await h.stop()


def _cards(harness: Harness) -> list[dict[str, object]]:
    return [m for m in harness.standin.messages.get(CHANNEL, []) if "thread_ts" not in m]


async def test_a_burst_to_one_channel_is_posted_at_its_rate_and_callbacks_do_not_wait(
    paced: PacedHarness,
) -> None:
    harness = paced
    # one card up before the burst: it is settled while the burst's backlog is queued
    first = (await harness.submit(request_id="before", tool=_tool("first")))["approval_id"]
    await harness.card_ts(first)
    await asyncio.sleep(1.0)  # the channel's burst is back

    waits_before = _paced_waits()
    started = time.monotonic()
    submitted = await asyncio.gather(
        *(harness.submit(request_id=f"b-{n}", tool=_tool(f"c{n}")) for n in range(BURST_SIZE))
    )
    ids = {body["approval_id"] for body in submitted}

    # the backlog is queued (a few cards posted, most not): a click now is delivered at once
    clicked = time.monotonic()
    assert await harness.click(APPROVER, first) == 200
    await harness.receiver.wait_delivered(1, timeout=5)
    callback_seconds = time.monotonic() - clicked
    backlog_then = BURST_SIZE + 1 - len(_cards(harness))

    await harness.standin.wait_for(lambda: len(_cards(harness)) == BURST_SIZE + 1, 3 * MINIMUM)
    elapsed = time.monotonic() - started
    posted = [_approval_id(m) for m in _cards(harness)]
    limited = harness.standin.rate_limited.get("chat.postMessage", 0)
    print(
        f"\n{BURST_SIZE} cards at {RATE:.0f}/s (Slack burst {SLACK_BURST}, bot burst {BOT_BURST}):"
        f" {elapsed:.2f} s = {elapsed / MINIMUM:.3f} x the minimum {MINIMUM:.1f} s;"
        f" 429s {limited}; callback {callback_seconds * 1000:.0f} ms after the click"
        f" with {backlog_then} cards still queued"
    )
    assert len(posted) == len(set(posted))  # no card twice
    assert ids <= set(posted)  # none lost
    assert limited <= 3
    # counted once the callback was delivered: it did not wait behind the backlog (told by
    # order, not by a wall-clock bound that a loaded 2-core runner misses; the time is printed)
    assert backlog_then > BURST_SIZE / 2
    assert _paced_waits() - waits_before >= BURST_SIZE - SLACK_BURST  # the waits are visible
    # the bound is 1.1 x on a quiet machine; a loaded 2-core runner is given slack (printed;
    # CI on a noisy runner once measured 1.248 x): paced, never stalled
    assert elapsed <= 1.5 * MINIMUM


def _paced_waits() -> float:
    return REGISTRY.get_sample_value("countersign_slack_paced_waits_total", {"call": "post"}) or 0


def _tool(call_id: str) -> dict[str, object]:
    return {"name": "send_note", "call_id": call_id, "arguments": {}}


def _approval_id(message: dict[str, object]) -> str:
    metadata = message.get("metadata")
    assert isinstance(metadata, dict)
    return str(metadata["event_payload"]["approval_id"])


# -- the relay's side: a row told "not yet" waits its turn without a slot or an attempt --------


class World:
    """A core on ``store`` whose cards are delivered by ``deliver``."""

    def __init__(self, store: Repository, *, lease: float = 120.0, concurrency: int = 20) -> None:
        self.now = datetime(2026, 3, 4, 10, 0, tzinfo=UTC)
        self.store = store
        self.calls: list[tuple[str, int]] = []  # (request id, attempts) of each handler run
        self.not_yet: dict[str, list[float]] = {}  # request id -> the waits still to answer
        current = policy.Policy.model_validate(
            {
                "slack": {"reviewer_channel": "C0REVIEWS"},
                "agents": {"sales-bot": {"token_env": "SALES_BOT_TOKEN"}},
                "roles": {"approvers": {"users": ["U0ANA"]}},
                "rules": [{"tool": "*", "require": "approvers"}],
            }
        )
        self.core = cores.core(
            self.store,
            lambda: current,
            {models.OutboxKind.POST_CARD: self.deliver},
            clock=lambda: self.now,
        )
        # the knobs under test, on a relay of this core
        self.relay = outbox.Relay(
            store=self.store,
            handlers={models.OutboxKind.POST_CARD: self.deliver},
            clock=lambda: self.now,
            lease=timedelta(seconds=lease),
            concurrency=concurrency,
        )

    async def deliver(self, item: models.OutboxItem) -> None:
        approval = await self.store.get_approval(item.approval_id)
        assert approval is not None
        self.calls.append((approval.request_id, item.attempts))
        waits = self.not_yet.get(approval.request_id)
        if waits:
            raise errors.NotYet(after=waits.pop(0))

    async def submit(self, request_id: str) -> None:
        request = models.ApprovalRequest.model_validate(
            {
                "request_id": request_id,
                "session_id": "s-1",
                "tool": {"name": "send_note", "call_id": request_id, "arguments": {}},
                "requester": {"slack_user_id": "U0REQ", "name": "Rita"},
            }
        )
        await self.core.approvals.submit("sales-bot", request)


async def test_a_row_not_yet_due_runs_again_in_its_turn_without_an_attempt(
    store: Repository,
) -> None:
    world = World(store)
    await world.submit("r-1")
    world.not_yet["r-1"] = [0.1, 0.1]
    started = time.monotonic()
    assert await world.relay.drain() == 1  # drain waits for it: every due row is done
    assert time.monotonic() - started >= 0.2
    assert world.calls == [("r-1", 0)] * 3
    assert await reads.outbox_counts(world.store) == (0, 0)  # delivered, not rescheduled


async def test_a_row_waiting_its_turn_holds_no_slot(store: Repository) -> None:
    world = World(store, concurrency=1)
    await world.submit("slow")
    await world.submit("fast")
    world.not_yet["slow"] = [0.3]
    drained = asyncio.create_task(world.relay.drain())
    await asyncio.sleep(0.15)
    assert world.calls == [("slow", 0), ("fast", 0)]  # fast went while slow waited
    assert await drained == 2


async def test_a_wait_past_the_lease_goes_back_to_the_database_without_an_attempt(
    store: Repository,
) -> None:
    world = World(store, lease=1.0)
    await world.submit("r-1")
    world.not_yet["r-1"] = [30.0]
    assert await world.relay.drain() == 1  # at once: the row is not held past its lease
    assert await world.relay.drain() == 0  # due in 30 s
    world.now += timedelta(seconds=31)
    assert await world.relay.drain() == 1
    assert world.calls == [("r-1", 0), ("r-1", 0)]  # waiting its turn was no failed attempt
    assert await reads.outbox_counts(world.store) == (0, 0)


async def test_a_relay_stopped_while_a_row_waits_hands_the_row_back(store: Repository) -> None:
    world = World(store)
    await world.submit("r-1")
    world.not_yet["r-1"] = [30.0]
    drained = asyncio.create_task(world.relay.drain())
    await asyncio.sleep(0.1)
    drained.cancel()
    await asyncio.gather(drained, return_exceptions=True)
    assert await world.relay.drain() == 1  # released: claimable at once, not after the lease
    assert world.calls == [("r-1", 0), ("r-1", 0)]


# -- two channels, at the relay: one channel's backlog never holds another's cards -------------

CHANNEL_A, CHANNEL_B = "C0AAA", "C0BBB"


class TwoChannels:
    """A core on ``store`` whose cards go to channel A or B by request id, each paced as the
    card publisher paces them (ask the pacer; not soon → NotYet)."""

    def __init__(self, store: Repository) -> None:
        self.store = store
        self.pacer = pacing.Pacer({pacing.Call.POST: pacing.Rate(RATE, BOT_BURST)}, time.monotonic)
        self.sent: dict[str, list[float]] = {CHANNEL_A: [], CHANNEL_B: []}
        current = policy.Policy.model_validate(
            {
                "slack": {"reviewer_channel": CHANNEL_A},
                "agents": {"sales-bot": {"token_env": "SALES_BOT_TOKEN"}},
                "roles": {"approvers": {"users": ["U0ANA"]}},
                "rules": [{"tool": "*", "require": "approvers"}],
            }
        )
        self.core = cores.core(
            self.store,
            lambda: current,
            {models.OutboxKind.POST_CARD: self.post},
            poll_interval=0.05,
        )

    async def post(self, item: models.OutboxItem) -> None:
        approval = await self.store.get_approval(item.approval_id)
        assert approval is not None
        channel = CHANNEL_B if approval.request_id.startswith("b") else CHANNEL_A
        wait = self.pacer.wait(item.id, [(pacing.Call.POST, channel)])
        if wait > 0.05:
            raise errors.NotYet(after=wait)
        await asyncio.sleep(wait)
        self.pacer.use(item.id, [(pacing.Call.POST, channel)])
        self.sent[channel].append(time.monotonic())

    async def submit(self, request_id: str) -> None:
        request = models.ApprovalRequest.model_validate(
            {
                "request_id": request_id,
                "session_id": "s-1",
                "tool": {"name": "send_note", "call_id": request_id, "arguments": {}},
                "requester": {"slack_user_id": "U0REQ", "name": "Rita"},
            }
        )
        await self.core.approvals.submit("sales-bot", request)


async def test_a_backlog_on_one_channel_does_not_delay_another(store: Repository) -> None:
    world = TwoChannels(store)
    backlog = 100  # 5 s at the scaled rate
    for n in range(backlog):
        await world.submit(f"a-{n}")
    relay = asyncio.create_task(world.core.relay.run())
    try:
        await asyncio.sleep(0.5)  # A's backlog is claimed and waiting its turn
        submitted = time.monotonic()
        for n in range(5):
            await world.submit(f"b-{n}")
        await waiting.until(lambda: len(world.sent[CHANNEL_B]) == 5, timeout=2.0, what="B's cards")
        b_seconds = world.sent[CHANNEL_B][-1] - submitted
        a_left = backlog - len(world.sent[CHANNEL_A])
        await waiting.until(
            lambda: len(world.sent[CHANNEL_A]) == backlog,
            timeout=backlog / RATE + 5,
            what="A's cards",
        )
    finally:
        relay.cancel()
        await asyncio.gather(relay, return_exceptions=True)
    print(f"\nchannel B's 5 cards posted {b_seconds * 1000:.0f} ms after submission,")
    print(f"with {a_left} of channel A's {backlog} still queued")
    assert a_left > backlog / 2
    assert b_seconds < 1.0
    # A's posts keep to a token bucket: any n in a row span at least (n - burst) / rate (a
    # little timer jitter allowed). Single gaps may be ~0 after a stalled event loop: catching
    # up within the burst is what a bucket allows.
    sent = world.sent[CHANNEL_A]
    for i in range(len(sent)):
        for j in range(i + BOT_BURST + 1, len(sent)):
            assert sent[j] - sent[i] > 0.8 * (j - i - BOT_BURST) / RATE
    assert await reads.outbox_counts(world.store) == (0, 0)
