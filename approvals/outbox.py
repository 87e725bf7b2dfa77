"""The outbox relay: does the I/O that committed state changes asked for.

Claims due rows with a lease (SKIP LOCKED, so replicas never share a row), runs the handler for
each row's kind outside any transaction, then marks the row done, due again later (durable
backoff from :mod:`approvals.retry`), or dead. Woken by the store's notifications, with polling
as the backstop. ``drain()`` processes everything due now and returns (tests use it; only
``run()`` renews the leases of what it holds).

A handler may answer "not yet" (``errors.NotYet``, e.g. its Slack channel's rate leaves no room):
the row waits in this relay, keeping its lease but not a delivery slot, and runs again when its
turn comes, with no attempt counted. So a backlog on one channel never holds the slots that other
channels' cards and the agents' callbacks need. A wait longer than the lease allows goes back to
the database due at its turn (``outbox_later``: no attempt counted, so waiting never spends the
retry budget), so no row is held past its lease.

An agent waits on its callback, so callbacks have a lane of their own, beside whatever the scan
of due rows holds (card posts and updates waiting on Slack's pace, say), needing no slot:
- a click settled in this process writes its callback already claimed by this relay (see
  ``Repository.take_callbacks``), which delivers it as soon as the settlement commits;
- any other settlement ``run()`` hears of (the notification that wakes long-polls, from any
  process) has its callback claimed at once, by its approval.
The scan stays the backstop: a callback the lane missed (its process away, the claim failed) is
due like any row once its lease, if it had one, lapsed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from approvals import errors, metrics, models, retry
from approvals.clock import Clock, utcnow
from approvals.repository import Repository

__all__ = ["Handler", "Relay"]

log = logging.getLogger(__name__)

REFILL_INTERVAL = 0.05  # seconds between claims while deliveries are in flight
# Deliveries in flight at once, by default (COUNTERSIGN_RELAY_CONCURRENCY). Measured with
# `make bench` on two cores: at 64, cards kept pace with 32 clients submitting, but the process
# served 20-30 % fewer of their requests a second; at 20, the cards fall a few seconds behind.
CONCURRENCY = 20
# A loop that has not turned for this many poll intervals (or 30 s, the longer) is stuck: a
# healthy one turns at least once per interval, busy or idle.
STALLED_POLLS = 10
STALLED_MIN_SECONDS = 30.0
# A lease is short, so that the rows of a relay that died are taken up again soon, and renewed
# while held (every third of it), so that it never lapses under a delivery still running.
LEASE = timedelta(seconds=30)
RENEWALS_PER_LEASE = 3
# A row waiting for its turn stays in memory only within this share of its lease (then it goes
# back to the database due at its turn), so that a long backlog is not all held in memory.
LEASE_SHARE = 0.5
# The callback lane claims the callbacks of at most this many settled approvals a statement.
LANE_BATCH = 256
# Claims of the callback lane in flight at once: an approval heard settling while one claim is
# out goes in the next at once, rather than after it (under a burst of clicks a claim takes tens
# of milliseconds, and a callback heard just after one began waited for two).
LANE_CLAIMS = 4
# Approvals whose callbacks this relay was handed at settlement, remembered (the latest this
# many) so that the notification of the same settlement claims nothing again.
TAKEN_REMEMBERED = 4096
Handler = Callable[[models.OutboxItem], Awaitable[None]]


@dataclass(frozen=True)
class _Failure:
    """Why a delivery failed, when the other side asked to be tried again (seconds), and
    whether only a person can fix it (then it is retried slowly, see :mod:`approvals.retry`)."""

    error: str
    retry_after: float | None
    permanent: bool = False


class _HandedBack:
    """A row that waited its turn past its lease and went back to the database unfailed."""


HANDED_BACK = _HandedBack()


async def _unclaim(store: Repository, items: list[models.OutboxItem]) -> None:
    """Hand back at once rows whose delivery never started, their claims undone (shielded: this
    runs while the relay is told to stop)."""
    for item in items:
        await asyncio.shield(store.outbox_unclaim(item))


class Relay:
    def __init__(
        self,
        *,
        store: Repository,
        handlers: Mapping[models.OutboxKind, Handler],
        budget: timedelta = timedelta(hours=24),
        max_delay: timedelta = timedelta(seconds=retry.MAX_DELAY),
        clock: Clock = utcnow,
        lease: timedelta = LEASE,
        concurrency: int = CONCURRENCY,
        poll_interval: float = 1.0,
        on_rest: Callable[[int], None] | None = None,
    ) -> None:
        self._store = store
        # told, each time the loop has had nothing to do for a poll interval, how many rows it
        # delivered since the last time (the edge hands memory back after a burst:
        # bot/memory.py)
        self._on_rest = on_rest
        self._since_rest = 0
        self._worked_at = 0.0  # time.monotonic() of the last drain that delivered rows
        self._handlers = handlers
        self._budget = budget
        self._max_delay = max_delay.total_seconds()
        self._clock = clock
        self._lease = lease
        self._concurrency = concurrency
        self._poll_interval = poll_interval
        self._last_turn: float | None = None  # time.monotonic() of the loop's latest turn
        self._active = 0  # deliveries running now (rows waiting their turn are not counted)
        # rows whose delivery task is made but has not run yet: their slots are taken too, or
        # a claim made before they run would count them free
        self._starting: set[int] = set()
        # the rows this relay is processing or holding, by id (their claims fence what it
        # records: a claim that lapsed and was taken by another relay changes nothing)
        self._held: dict[int, models.OutboxItem] = {}
        self._unstarted: list[models.OutboxItem] = []  # claimed, then cancelled before they ran
        self._freed = asyncio.Event()  # a slot was freed: drain may claim more at once
        # the callback lane: approvals heard settling whose callbacks it has not claimed yet
        # (in the order heard), the tasks claiming them, and the deliveries they started
        self._settled: dict[str, None] = {}
        self._taken: dict[str, None] = {}  # approvals whose callbacks were handed over here
        self._lanes: set[asyncio.Task[None]] = set()
        self._lane_deliveries: set[asyncio.Task[None]] = set()

    @property
    def concurrency(self) -> int:
        """How many deliveries run at once at most (rows waiting their turn not counted)."""
        return self._concurrency

    def stalled(self, now: float) -> str | None:
        """Why the loop does not look alive at ``now`` (``time.monotonic()``): it never turned,
        or not lately; None when it did. For readiness probes: it only reads a timestamp."""
        if self._last_turn is None:
            return "the relay loop has not run yet"
        idle = now - self._last_turn
        if idle > max(STALLED_MIN_SECONDS, STALLED_POLLS * self._poll_interval):
            return f"the relay loop last ran {idle:.0f} s ago"
        return None

    def _turn(self) -> None:
        self._last_turn = time.monotonic()

    async def drain(self) -> int:
        """Process every row due now (rows rescheduled for later wait); returns how many.

        Rows run concurrently, up to ``concurrency`` at once, and freed slots are refilled while
        others are still in flight: one slow agent or a rate-limited Slack call never holds back
        the rest. Rows waiting their turn (``NotYet``) hold no slot, and are waited for: drain
        returns once each claimed row is delivered or back in the database. (A card update that
        overtakes its card's post retries a second later.)
        """
        total = 0
        running: set[asyncio.Task[None]] = set()
        # the notifications heard before the last claim, when it came back short (it took
        # every row due then): no claim again until another is heard
        short_at: int | None = None
        try:
            while True:
                self._turn()
                self._freed.clear()
                free = self._concurrency - self._active - len(self._starting)
                if free > 0 and not self._nothing_new(short_at):
                    heard = self._store.outbox_notices
                    now = self._clock()
                    items = await self._claim(now, free)
                    running.update(self._start(i) for i in items)
                    total += len(items)
                    short_at = heard if len(items) < free else None
                running = {task for task in running if not task.done()}
                if not running:
                    return total
                # until a row finishes or goes to wait its turn: a backlog that waits is
                # claimed through at once, so rows queued behind it (callbacks) are not held up
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(REFILL_INTERVAL):
                        await self._freed.wait()
        finally:
            await self._stop(running)

    def _nothing_new(self, short_at: int | None) -> bool:
        """Whether no row can be due that the last claim, which came back short at
        ``short_at`` notifications, did not take: nothing was notified since (rows made due
        later, retries and another relay's lapsed leases, are the loop's, not drain's). Only
        when notifications are heard; else every turn claims."""
        return (
            short_at is not None
            and self._store.hears_outbox
            and self._store.outbox_notices == short_at
        )

    async def _stop(self, running: set[asyncio.Task[None]]) -> None:
        """Cancel deliveries in flight: each hands its row back (see _process)."""
        for task in running:
            task.cancel()
        if running:
            await asyncio.wait(running)
        # a task cancelled before it ever ran never saw its row: hand those back here
        unstarted, self._unstarted = self._unstarted, []
        try:
            await _unclaim(self._store, unstarted)
        except Exception:  # the database away: their leases lapse instead; the stop stands
            log.warning("outbox rows not handed back", extra={"action": "outbox"})

    async def _claim(self, now: datetime, limit: int) -> list[models.OutboxItem]:
        """Lease due rows (see :meth:`_leased`)."""
        # never a row held here, even one whose lease lapsed (a renewal the database missed,
        # a moved clock): it runs once
        return await self._leased(
            self._store.claim_outbox(now, now + self._lease, limit, self._held.keys())
        )

    async def _leased(
        self, claiming: Awaitable[list[models.OutboxItem]]
    ) -> list[models.OutboxItem]:
        """The rows a claim leased; told to stop while the claim is in flight, the rows it
        leased are handed back rather than left leased until the lease lapses."""
        claim = asyncio.ensure_future(claiming)
        try:
            return await asyncio.shield(claim)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await _unclaim(self._store, await claim)
            raise

    def _start(self, item: models.OutboxItem) -> asyncio.Task[None]:
        self._held[item.id] = item
        self._starting.add(item.id)
        task = asyncio.create_task(self._process(item))
        # on the task too: a task cancelled before it ran still lets go of its row
        task.add_done_callback(lambda done: self._finished(item, done))
        return task

    def _finished(self, item: models.OutboxItem, task: asyncio.Task[None]) -> None:
        if item.id in self._held and task.cancelled():
            self._unstarted.append(item)  # _process never ran: nothing let the row go
        self._let_go(item.id)

    def _let_go(self, item_id: int) -> None:
        self._held.pop(item_id, None)
        self._starting.discard(item_id)
        self._freed.set()

    async def _process(self, item: models.OutboxItem) -> None:
        try:
            await self._deliver_and_record(item)
        except asyncio.CancelledError:
            # Shutting down: hand the row back now rather than when the lease lapses (a no-op
            # once it is done or rescheduled). The delivery may have happened; at-least-once is
            # the contract, and the far side de-duplicates (Idempotency-Key, card metadata).
            await asyncio.shield(self._store.outbox_release(item))
            raise
        finally:
            # before the task is done: a drain that sees it done may claim the row again
            self._let_go(item.id)

    async def _deliver_and_record(self, item: models.OutboxItem) -> None:
        started = time.perf_counter()
        try:
            failure = await self._deliver_in_turn(item)
            if failure is HANDED_BACK:
                return
            if failure is None:
                metrics.DELIVERIES.labels(item.kind.value, "ok").inc()
                # shielded: a relay told to stop right after a delivery still records it, so
                # the row is not sent again once its lease lapses
                await asyncio.shield(self._store.outbox_done(item, self._clock()))
                return
        finally:
            metrics.DELIVERY_SECONDS.labels(item.kind.value).observe(time.perf_counter() - started)
        assert isinstance(failure, _Failure)
        metrics.DELIVERIES.labels(item.kind.value, "failed").inc()
        await self._reschedule(item, failure)

    async def _deliver_in_turn(self, item: models.OutboxItem) -> _Failure | _HandedBack | None:
        """Run the handler, and again each time it says not yet, waiting meanwhile without a
        slot, as long as the lease lasts; past it, the row goes back to the database due at its
        turn (not a failure: no attempt counted)."""
        handler = self._handlers[item.kind]
        lease_ends = time.monotonic() + self._lease.total_seconds() * LEASE_SHARE
        self._starting.discard(item.id)  # from here on counted in _active, while it runs
        while True:
            # counted while it runs; once waiting its turn, it holds no slot
            self._active += 1
            try:
                outcome = await self._deliver(handler, item)
            finally:
                self._active -= 1
                self._freed.set()
            if not isinstance(outcome, errors.NotYet):
                return outcome
            if time.monotonic() + outcome.after > lease_ends:
                due = self._clock() + timedelta(seconds=outcome.after)
                await asyncio.shield(self._store.outbox_later(item, due))
                return HANDED_BACK
            await asyncio.sleep(outcome.after)
            # its turn: it runs even when every slot is taken (a paced call is short, and
            # its rate already bounds how many come back at once)

    async def _deliver(
        self, handler: Handler, item: models.OutboxItem
    ) -> _Failure | errors.NotYet | None:
        """Run the row's handler; what went wrong, not yet, or None when it was delivered."""
        try:
            await handler(item)
        except errors.NotYet as exc:
            return exc
        except errors.DeliveryFailed as exc:
            return _Failure(str(exc), exc.retry_after, exc.permanent)
        except Exception as exc:  # a handler bug must not stop the relay
            log.exception("outbox handler crashed", extra={"action": "outbox", "id": item.id})
            return _Failure(f"{type(exc).__name__}: {exc}", None)
        return None

    async def _reschedule(self, item: models.OutboxItem, failure: _Failure) -> None:
        """A failed row is due again after its backoff, or dead once its budget is spent."""
        now = self._clock()
        due = retry.next_attempt_at(
            attempts=item.attempts + 1,
            now=now,
            first_attempt_at=item.created_at,
            budget=self._budget,
            retry_after=failure.retry_after,
            permanent=failure.permanent,
            max_delay=self._max_delay,
        )
        context = {
            "action": "outbox",
            "kind": item.kind.value,
            "approval_id": item.approval_id,
            "attempts": item.attempts + 1,
            "error": failure.error,
            "permanent": failure.permanent,
        }
        if due is not None:
            log.warning("outbox delivery failed; will retry", extra={**context, "due": str(due)})
            await self._store.outbox_retry(item, due, failure.error)
            return
        # the card shows that the agent was never told (a dead card update shows nothing)
        follow_up = (
            [models.card_update(item.approval_id)]
            if item.kind is models.OutboxKind.CALLBACK
            else []
        )
        if not await self._store.outbox_dead(item, now, failure.error, follow_up):
            # another relay holds the row now (this lease lapsed): its verdict stands
            log.info("outbox row not dead-lettered: claimed since", extra=context)
            return
        metrics.DEAD_LETTERS.labels(item.kind.value).inc()
        log.error("outbox row dead-lettered after its retry budget", extra=context)

    async def run(self) -> None:
        """Drain, then sleep until notified, the next row is due, or the poll interval ends.

        Runs until cancelled; a row cancelled mid-delivery is handed back, and the rows of a
        relay that died are taken up by any relay once their lease lapses (at least once, never
        lost). Meanwhile the leases of the rows held here are renewed."""
        renewing = asyncio.create_task(self._renew_leases(), name="outbox-leases")
        stop_hearing = self._store.on_settled(self._heard_settled)
        stop_taking = self._store.take_callbacks(self._take_settled, self._lease)
        try:
            await self._loop()
        finally:
            stop_taking()
            stop_hearing()
            self._settled.clear()
            renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewing
            for lane in self._lanes:
                lane.cancel()
            if self._lanes:
                await asyncio.wait(self._lanes)
            await self._stop(self._lane_deliveries)

    def _rested(self, delivered: int) -> None:
        """Count a drain's rows; once drains have found none for a whole poll interval after
        others did, the loop rests (a pause between two bursts close together is no rest)."""
        now = time.monotonic()
        if delivered:
            self._since_rest += delivered
            self._worked_at = now
            return
        if not self._since_rest or now - self._worked_at < self._poll_interval:
            return
        if self._on_rest is not None:
            try:
                self._on_rest(self._since_rest)
            except Exception:  # a hook must not stop the relay
                log.exception("outbox relay's rest hook failed", extra={"action": "outbox"})
        self._since_rest = 0

    def _take_settled(self, items: list[models.OutboxItem]) -> None:
        """Callbacks written claimed by this relay as a click settled here: delivered now."""
        for item in items:
            self._taken[item.approval_id] = None
            if len(self._taken) > TAKEN_REMEMBERED:
                del self._taken[next(iter(self._taken))]
            self._deliver_now(item)

    def _deliver_now(self, item: models.OutboxItem) -> None:
        """Deliver a callback the lane holds, needing no slot of the scan's."""
        delivery = self._start(item)
        self._lane_deliveries.add(delivery)
        delivery.add_done_callback(self._lane_deliveries.discard)

    def _heard_settled(self, approval_id: str) -> None:
        """An approval settled: its callback (if it has one) goes in the callback lane now,
        unless it was handed over here already."""
        if approval_id in self._taken:
            return
        self._settled[approval_id] = None
        if len(self._lanes) < LANE_CLAIMS:
            lane = asyncio.create_task(self._callback_lane(), name="outbox-callbacks")
            self._lanes.add(lane)
            lane.add_done_callback(self._lanes.discard)

    async def _callback_lane(self) -> None:
        """Claim the callbacks of the approvals heard settling, all heard meanwhile in one
        statement, and deliver each at once (each runs as a row of the scan runs, recorded
        the same way); up to :data:`LANE_CLAIMS` of these run at once. A claim that fails
        leaves them to the scan."""
        while self._settled:
            approval_ids = list(self._settled)[:LANE_BATCH]
            for approval_id in approval_ids:
                del self._settled[approval_id]
            now = self._clock()
            try:
                items = await self._leased(
                    self._store.claim_callbacks(
                        approval_ids, now, now + self._lease, self._held.keys()
                    )
                )
            except errors.DatabaseUnavailable as exc:
                log.warning("callback lane: %s", exc, extra={"action": "outbox"})
                continue
            except Exception:  # a bug must not stop the lane either
                log.exception("callback lane failed", extra={"action": "outbox"})
                continue
            for item in items:
                self._deliver_now(item)

    async def _renew_leases(self) -> None:
        every = self._lease.total_seconds() / RENEWALS_PER_LEASE
        while True:
            await asyncio.sleep(every)
            if not self._held:
                continue
            try:
                await self._store.outbox_renew(
                    list(self._held.values()), self._clock() + self._lease
                )
            except errors.DatabaseUnavailable as exc:
                log.warning("outbox leases not renewed: %s", exc, extra={"action": "outbox"})
            except Exception:
                log.exception("outbox leases not renewed", extra={"action": "outbox"})

    async def _loop(self) -> None:
        while True:
            self._turn()
            try:
                delivered = await self.drain()
                self._rested(delivered)
                timeout = self._poll_interval
                next_due = await self._store.outbox_next_due()
                if next_due is not None:
                    until = (next_due - self._clock()).total_seconds()
                    timeout = max(0.0, min(timeout, until))
            except errors.DatabaseUnavailable as exc:  # briefly away: keep going
                log.warning("outbox relay: %s", exc, extra={"action": "outbox"})
                timeout = self._poll_interval
            except Exception:  # a bug must not stop the relay either
                log.exception("outbox relay loop failed", extra={"action": "outbox"})
                timeout = self._poll_interval
            if timeout > 0:
                await self._store.wait_for_outbox(timeout)
