"""The outbox relay: does the I/O that committed state changes asked for.

Claims due rows with a lease (SKIP LOCKED, so replicas never share a row), runs the handler for
each row's kind outside any transaction, then marks the row done, due again later (durable
backoff from :mod:`approvals.retry`), or dead. Woken by the store's notifications, with polling
as the backstop. ``drain()`` processes everything due now and returns, for tests and the CLI.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta

from approvals import errors, metrics, models, retry
from approvals.repository import Repository
from approvals.service import Clock, utcnow

__all__ = ["Handler", "Relay"]

log = logging.getLogger(__name__)

REFILL_INTERVAL = 0.05  # seconds between claims while deliveries are in flight
# A loop that has not turned for this many poll intervals (or 30 s, the longer) is stuck: a
# healthy one turns at least once per interval, busy or idle.
STALLED_POLLS = 10
STALLED_MIN_SECONDS = 30.0
Handler = Callable[[models.OutboxItem], Awaitable[None]]


@dataclass(frozen=True)
class _Failure:
    """Why a delivery failed, when the other side asked to be tried again (seconds), and
    whether only a person can fix it (then it is retried slowly, see :mod:`approvals.retry`)."""

    error: str
    retry_after: float | None
    permanent: bool = False


class Relay:
    def __init__(
        self,
        *,
        store: Repository,
        handlers: Mapping[models.OutboxKind, Handler],
        budget: timedelta = timedelta(hours=24),
        clock: Clock = utcnow,
        lease: timedelta = timedelta(minutes=2),
        concurrency: int = 20,
        poll_interval: float = 1.0,
    ) -> None:
        self._store = store
        self._handlers = handlers
        self._budget = budget
        self._clock = clock
        self._lease = lease
        self._concurrency = concurrency
        self._poll_interval = poll_interval
        self._last_turn: float | None = None  # time.monotonic() of the loop's latest turn

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
        the rest. (A card update that overtakes its card's post retries a second later.)
        """
        total = 0
        running: set[asyncio.Task[None]] = set()
        try:
            while True:
                self._turn()
                free = self._concurrency - len(running)
                if free > 0:
                    now = self._clock()
                    items = await self._store.claim_outbox(now, now + self._lease, free)
                    running.update(asyncio.create_task(self._process(i)) for i in items)
                    total += len(items)
                if not running:
                    return total
                _, running = await asyncio.wait(
                    running, timeout=REFILL_INTERVAL, return_when=asyncio.FIRST_COMPLETED
                )
        finally:
            for task in running:  # cancelled: each hands its row back (see _process)
                task.cancel()
            if running:
                await asyncio.wait(running)

    async def _process(self, item: models.OutboxItem) -> None:
        handler = self._handlers[item.kind]
        started = time.perf_counter()
        try:
            failure = await self._deliver(handler, item)
            if failure is None:
                metrics.DELIVERIES.labels(item.kind.value, "ok").inc()
                # shielded: a relay told to stop right after a delivery still records it, so
                # the row is not sent again once its lease lapses
                await asyncio.shield(self._store.outbox_done(item.id, self._clock()))
                return
        finally:
            metrics.DELIVERY_SECONDS.labels(item.kind.value).observe(time.perf_counter() - started)
        metrics.DELIVERIES.labels(item.kind.value, "failed").inc()
        await self._reschedule(item, failure)

    async def _deliver(self, handler: Handler, item: models.OutboxItem) -> _Failure | None:
        """Run the row's handler; what went wrong, or None when it was delivered."""
        try:
            await handler(item)
        except asyncio.CancelledError:
            # Shutting down: hand the row back now rather than when the lease lapses. The
            # delivery may have happened; at-least-once is the contract, keys de-duplicate.
            await asyncio.shield(self._store.outbox_release(item.id))
            raise
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
            await self._store.outbox_retry(item.id, due, failure.error)
            return
        metrics.DEAD_LETTERS.labels(item.kind.value).inc()
        log.error("outbox row dead-lettered after its retry budget", extra=context)
        # the card shows that the agent was never told (a dead card update shows nothing)
        follow_up = (
            [models.card_update(item.approval_id)]
            if item.kind is models.OutboxKind.CALLBACK
            else []
        )
        await self._store.outbox_dead(item.id, now, failure.error, follow_up)

    async def run(self) -> None:
        """Drain, then sleep until notified, the next row is due, or the poll interval ends.

        Runs until cancelled; a row cancelled mid-delivery keeps its lease until it lapses,
        then any relay retries it (at least once, never lost)."""
        while True:
            self._turn()
            try:
                await self.drain()
                timeout = self._poll_interval
                next_due = await self._store.outbox_next_due()
                if next_due is not None:
                    until = (next_due - self._clock()).total_seconds()
                    timeout = max(0.0, min(timeout, until))
            except Exception:  # the database may be briefly away: keep going
                log.exception("outbox relay loop failed", extra={"action": "outbox"})
                timeout = self._poll_interval
            if timeout > 0:
                await self._store.wait_for_outbox(timeout)
