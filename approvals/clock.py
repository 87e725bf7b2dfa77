"""The clock every replica agrees on: the database's.

Timers, expiry, leases and decision times are compared across replicas: one whose system clock
is minutes off would fire a reminder early (or late), expire a request that the others still
accept, or take over a lease another replica still holds. So a process keeps time as its own
clock plus its offset to PostgreSQL's ``clock_timestamp()``, measured at start and again every
minute. Each measurement takes the middle of the round trip, so its error is at most half of
it. Reading the clock costs no query, and the domain keeps a plain synchronous :data:`Clock`
(defined here, with :func:`utcnow`, the host's clock), which tests replace.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol

from approvals import errors, metrics

__all__ = ["Clock", "DatabaseClock", "TimeSource", "utcnow"]

log = logging.getLogger(__name__)

# An offset this large is a host whose clock is not kept (no NTP): worth a line in the log.
NOTEWORTHY_OFFSET = timedelta(seconds=1)

Clock = Callable[[], datetime]
"""What the domain reads the time from: a plain synchronous call (tests pass their own)."""


def utcnow() -> datetime:
    """This host's clock, in UTC: the default :data:`Clock`, and a :class:`DatabaseClock`'s wall."""
    return datetime.now(UTC)


class TimeSource(Protocol):
    async def database_time(self) -> datetime: ...


class DatabaseClock:
    """``wall()`` plus the latest offset to the database's clock (zero until :meth:`sync`)."""

    def __init__(self, source: TimeSource, wall: Clock = utcnow) -> None:
        self._source = source
        self._wall = wall
        self._offset = timedelta(0)

    def __call__(self) -> datetime:
        return self._wall() + self._offset

    @property
    def offset(self) -> timedelta:
        return self._offset

    async def sync(self) -> timedelta:
        """Measure the offset again; returns it."""
        started, before = time.monotonic(), self._wall()
        database = await self._source.database_time()
        round_trip = timedelta(seconds=time.monotonic() - started)
        offset = database - (before + round_trip / 2)
        if abs(offset - self._offset) > NOTEWORTHY_OFFSET and abs(offset) > NOTEWORTHY_OFFSET:
            log.warning(
                "this host's clock is %.1f s %s the database's: keeping time by the database's",
                abs(offset.total_seconds()),
                "behind" if offset > timedelta(0) else "ahead of",
                extra={"action": "clock", "offset_seconds": offset.total_seconds()},
            )
        self._offset = offset
        metrics.CLOCK_OFFSET_SECONDS.set(offset.total_seconds())
        return offset

    async def keep_synced(self, interval: float) -> None:
        """:meth:`sync` every ``interval`` seconds until cancelled; while the database is
        away the last offset stands (clocks drift by milliseconds a day, not seconds)."""
        while True:
            await asyncio.sleep(interval)
            try:
                await self.sync()
            except errors.DatabaseUnavailable as exc:
                log.warning("clock not synced: %s", exc, extra={"action": "clock"})
            except Exception:
                log.exception("clock not synced", extra={"action": "clock"})
