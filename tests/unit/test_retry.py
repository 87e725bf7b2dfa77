"""Durable backoff: when the next delivery attempt is due, as a pure function of attempts."""

from __future__ import annotations

import itertools
import random
import statistics
from datetime import UTC, datetime, timedelta

import pytest

from approvals import retry

SEEDS = range(200)
T0 = datetime(2030, 1, 1, tzinfo=UTC)
DAY = timedelta(days=1)


def samples(attempts: int, *, retry_after: float | None = None) -> list[float]:
    return [retry.delay(attempts, retry_after=retry_after, rng=random.Random(s)) for s in SEEDS]


def test_first_retry_within_about_a_second() -> None:
    delays = samples(1)
    assert all(0.5 <= d <= 1.0 for d in delays)
    assert len(set(delays)) > 100  # jittered, so many rows do not retry in lock step


@pytest.mark.parametrize("attempts", [*range(1, 40), 100, 500, 1000])
def test_never_more_than_600_seconds_apart(attempts: int) -> None:
    assert max(samples(attempts)) <= 600.0
    assert max(samples(attempts, retry_after=10**9)) <= 600.0


@pytest.mark.parametrize("attempts", range(1, 30))
def test_never_sooner_than_half_the_nominal_delay(attempts: int) -> None:
    nominal = min(600.0, 2.0 ** (attempts - 1))
    assert min(samples(attempts)) >= nominal / 2


def test_grows_exponentially_in_the_median() -> None:
    medians = [statistics.median(samples(n)) for n in range(1, 10)]
    for n, (low, high) in enumerate(itertools.pairwise(medians), start=1):
        assert 1.7 <= high / low <= 2.3, (n, low, high)
    # full jitter over the upper half: the median sits near three quarters of the nominal delay
    assert 0.65 <= medians[0] <= 0.85
    assert 0.65 * 256 <= medians[8] <= 0.85 * 256


def test_plateaus_at_the_cap() -> None:
    late = statistics.median(samples(30))
    assert 300.0 <= late <= 600.0
    assert statistics.median(samples(60)) == pytest.approx(late, rel=0.1)


def test_same_seed_same_delay() -> None:
    one = retry.delay(5, rng=random.Random(42))
    assert one == retry.delay(5, rng=random.Random(42))
    assert 8.0 <= one <= 16.0


@pytest.mark.parametrize("attempts", [1, 2, 3, 5])
def test_retry_after_is_honoured(attempts: int) -> None:
    assert samples(attempts, retry_after=30.0) == [30.0] * len(SEEDS)


def test_retry_after_shorter_than_the_backoff_does_not_shorten_it() -> None:
    assert min(samples(10, retry_after=1.0)) >= 256.0


@pytest.mark.parametrize("retry_after", [601.0, 3600.0, 86400.0, 1e12])
def test_retry_after_is_capped_at_600(retry_after: float) -> None:
    assert samples(1, retry_after=retry_after) == [600.0] * len(SEEDS)


def test_next_attempt_at_within_budget() -> None:
    now = T0 + timedelta(minutes=10)
    due = retry.next_attempt_at(
        attempts=3, now=now, first_attempt_at=T0, budget=DAY, rng=random.Random(7)
    )
    expected = now + timedelta(seconds=retry.delay(3, rng=random.Random(7)))
    assert due == expected
    assert now + timedelta(seconds=2) <= due <= now + timedelta(seconds=4)


def test_next_attempt_at_honours_retry_after() -> None:
    due = retry.next_attempt_at(
        attempts=1, now=T0, first_attempt_at=T0, budget=DAY, retry_after=120.0
    )
    assert due == T0 + timedelta(seconds=120)


@pytest.mark.parametrize(
    ("now", "retry_after"),
    [
        (T0 + DAY, None),  # the budget is spent
        (T0 + DAY - timedelta(milliseconds=100), None),  # even the shortest delay overshoots
        (T0 + DAY - timedelta(seconds=60), 120.0),  # Retry-After pushes it past the budget
        (T0 + 2 * DAY, None),
    ],
)
def test_next_attempt_at_none_past_the_budget(now: datetime, retry_after: float | None) -> None:
    for seed in SEEDS:
        assert (
            retry.next_attempt_at(
                attempts=1,
                now=now,
                first_attempt_at=T0,
                budget=DAY,
                retry_after=retry_after,
                rng=random.Random(seed),
            )
            is None
        )


def test_a_row_is_retried_until_its_budget_then_dead_lettered() -> None:
    """Walking the schedule: attempts stay ≤ 600 s apart and end within the budget."""
    rng = random.Random(3)
    budget = timedelta(hours=6)
    now, attempts, times = T0, 1, [T0]
    while (
        due := retry.next_attempt_at(
            attempts=attempts, now=now, first_attempt_at=T0, budget=budget, rng=rng
        )
    ) is not None:
        assert timedelta(0) < due - now <= timedelta(seconds=600)
        now, attempts = due, attempts + 1
        times.append(due)
    assert times[-1] <= T0 + budget
    assert T0 + budget - times[-1] <= timedelta(seconds=600)
    assert 30 < attempts < 60  # ~10 quick retries, then one every 5-10 minutes


def test_delay_for_very_many_attempts_is_capped_not_an_overflow() -> None:
    assert retry.delay(1100, rng=random.Random(1)) <= 600.0


# -- permanent failures: a refusal only a person can fix (a bot not invited to its channel) ----

PERMANENT = timedelta(seconds=retry.PERMANENT_DELAY)


@pytest.mark.parametrize("attempts", [1, 2, 10, 100])
def test_a_permanent_failure_comes_back_in_five_minutes(attempts: int) -> None:
    """However many tries failed (never sooner, as the backoff's first tries would be; never
    later, as its 10-minute plateau would be), and whatever Retry-After said."""
    now = T0 + timedelta(hours=1)
    for retry_after in (None, 1.0, 3600.0):
        due = retry.next_attempt_at(
            attempts=attempts,
            now=now,
            first_attempt_at=T0,
            budget=DAY,
            retry_after=retry_after,
            permanent=True,
        )
        assert due == now + PERMANENT == now + timedelta(minutes=5)


def test_a_permanent_failure_is_tried_once_more_at_the_end_of_its_budget() -> None:
    """Never dead-lettered before the budget is spent: the last try is at the deadline."""
    now = T0 + DAY - timedelta(seconds=10)
    due = retry.next_attempt_at(
        attempts=50, now=now, first_attempt_at=T0, budget=DAY, permanent=True
    )
    assert due == T0 + DAY
    for past in (T0 + DAY, T0 + DAY + timedelta(seconds=1)):
        assert (
            retry.next_attempt_at(
                attempts=51, now=past, first_attempt_at=T0, budget=DAY, permanent=True
            )
            is None
        )


def test_a_permanent_failure_walks_the_budget_every_five_minutes() -> None:
    budget = timedelta(hours=2)
    now, attempts, times = T0, 1, [T0]
    while (
        due := retry.next_attempt_at(
            attempts=attempts, now=now, first_attempt_at=T0, budget=budget, permanent=True
        )
    ) is not None:
        now, attempts = due, attempts + 1
        times.append(due)
    assert [b - a for a, b in itertools.pairwise(times)] == [PERMANENT] * 24
    assert times[-1] == T0 + budget


# -- an operator's cap (COUNTERSIGN_DELIVERY_MAX_DELAY) --------------------------------------


@pytest.mark.parametrize("attempts", [1, 3, 10, 100])
def test_an_operators_cap_bounds_the_backoff_and_a_retry_after(attempts: int) -> None:
    capped = [
        retry.delay(attempts, retry_after=r, max_delay=2.0, rng=random.Random(s))
        for s in SEEDS
        for r in (None, 30.0)
    ]
    assert max(capped) <= 2.0
    assert min(capped) >= min(0.5 * 2.0 ** (attempts - 1), 1.0)  # still half the nominal


def test_an_operators_cap_shortens_the_permanent_cadence_too() -> None:
    due = retry.next_attempt_at(
        attempts=1, now=T0, first_attempt_at=T0, budget=DAY, permanent=True, max_delay=60.0
    )
    assert due == T0 + timedelta(seconds=60)
