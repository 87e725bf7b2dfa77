"""How long the timer loop sleeps after a sweep: a pure function of what the sweep saw."""

from __future__ import annotations

from approvals.core import TIMER_RETRY_SECONDS, timer_sleep

INTERVAL = 1.0


def test_sleeps_until_the_next_due_work_never_past_the_interval() -> None:
    assert timer_sleep(0.25, False, 0.04, INTERVAL) == (0.25, TIMER_RETRY_SECONDS)
    assert timer_sleep(30.0, True, 0.04, INTERVAL) == (INTERVAL, TIMER_RETRY_SECONDS)
    assert timer_sleep(None, False, 0.04, INTERVAL) == (INTERVAL, TIMER_RETRY_SECONDS)


def test_a_wave_falling_due_while_each_sweep_runs_is_swept_again_at_once() -> None:
    # 1 000 expiries a second or two apart: each sweep takes some, and by its end more are due.
    # Every sweep goes again at once; the loop never backs off as it does for a row not taken
    # (it did: 5, 10, 20 … 160 ms, so the wave's last expiries were that late).
    retry = TIMER_RETRY_SECONDS
    for _ in range(20):
        timeout, retry = timer_sleep(-0.001, True, retry, INTERVAL)
        assert (timeout, retry) == (0.0, TIMER_RETRY_SECONDS)


def test_a_row_due_but_not_taken_is_looked_at_again_less_and_less_often() -> None:
    # another replica holds it (SKIP LOCKED), or nothing could settle it: never a spin
    retry = TIMER_RETRY_SECONDS
    timeouts = []
    for _ in range(12):
        timeout, retry = timer_sleep(-0.5, False, retry, INTERVAL)
        timeouts.append(timeout)
    assert timeouts[:4] == [0.005, 0.01, 0.02, 0.04]
    assert timeouts == sorted(timeouts)
    assert timeouts[-1] == INTERVAL
    assert all(t > 0 for t in timeouts)


def test_progress_after_a_backoff_starts_the_backoff_over() -> None:
    _, retry = timer_sleep(-0.5, False, 0.32, INTERVAL)
    assert retry == 0.64
    assert timer_sleep(-0.5, True, retry, INTERVAL) == (0.0, TIMER_RETRY_SECONDS)
    assert timer_sleep(0.1, False, retry, INTERVAL) == (0.1, TIMER_RETRY_SECONDS)
