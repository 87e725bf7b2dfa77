"""Durable retry as data: when the next delivery attempt is due, a pure function of attempts.

Exponential backoff with full jitter over the upper half (so retries of many rows spread out
but never come back sooner than half the nominal delay), capped at 10 minutes, honouring a
``Retry-After`` the far side sent. Past the budget the row is dead-lettered.

A *permanent* failure (the far side refused in a way only a person can fix: a bot not invited
to its channel, a revoked token) is not retried on the backoff, which would hammer a refusal
that cannot change by itself and then dead-letter a row hours before anyone read the log. It
comes back on a slow, fixed cadence instead (``PERMANENT_DELAY``), so the fix takes effect
within minutes without a restart; its last try is at the end of the budget, never earlier.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta

__all__ = ["BASE_DELAY", "MAX_DELAY", "PERMANENT_DELAY", "delay", "next_attempt_at"]

_RNG = random.Random()
BASE_DELAY = 1.0  # seconds before the first retry
MAX_DELAY = 600.0  # never more than 10 minutes apart
PERMANENT_DELAY = 300.0  # a refusal a person must fix: tried again every 5 minutes


def delay(
    attempts: int,
    *,
    retry_after: float | None = None,
    max_delay: float = MAX_DELAY,
    rng: random.Random | None = None,
) -> float:
    """Seconds to wait after the ``attempts``-th failed attempt (1 = the first failure), never
    more than ``max_delay`` (an operator's cap; ``MAX_DELAY`` by default)."""
    # the exponent is capped: 2**30 s is far past any cap, and 2.0**1024 would overflow
    nominal = min(max_delay, BASE_DELAY * 2.0 ** min(max(0, attempts - 1), 30))
    jittered = nominal / 2 + (rng or _RNG).uniform(0, nominal / 2)
    if retry_after is not None:
        jittered = max(jittered, min(retry_after, max_delay))
    return jittered


def next_attempt_at(
    *,
    attempts: int,
    now: datetime,
    first_attempt_at: datetime,
    budget: timedelta,
    retry_after: float | None = None,
    permanent: bool = False,
    max_delay: float = MAX_DELAY,
    rng: random.Random | None = None,
) -> datetime | None:
    """When to try again, or ``None`` when the budget is spent (dead-letter)."""
    deadline = first_attempt_at + budget
    if permanent:
        # a fixed cadence: the fix is picked up within PERMANENT_DELAY, however many tries
        # have failed; the last one at the deadline, so the budget is spent and never cut short
        cadence = timedelta(seconds=min(PERMANENT_DELAY, max_delay))
        return min(now + cadence, deadline) if now < deadline else None
    wait = delay(attempts, retry_after=retry_after, max_delay=max_delay, rng=rng)
    due = now + timedelta(seconds=wait)
    if due > deadline:
        return None
    return due
