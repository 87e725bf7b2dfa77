"""The pacer's token buckets, on a controlled clock (slots, bursts, held slots, pauses), and the
stand-in's own per-channel limit. The relay's handling of a row told "not yet" is in
tests/integration/test_pacing.py."""

from __future__ import annotations

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.pacing import Call, Pacer, Rate
from bot.sandbox.standin import SlackStandIn

POST_A = (Call.POST, "C0A")
POST_B = (Call.POST, "C0B")
UPDATE_A = (Call.UPDATE, "C0A")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def pacer(clock: Clock, *, per_second: float = 10.0, burst: int = 3) -> Pacer:
    return Pacer({Call.POST: Rate(per_second, burst), Call.UPDATE: Rate(1.0, 1)}, clock)


def take(p: Pacer, key: int, *calls: tuple[Call, str]) -> float:
    """What a handler does: ask, and use the slots when they are now."""
    wait = p.wait(key, calls)
    if wait == 0:
        p.use(key, calls)
    return wait


def test_a_burst_goes_at_once_then_one_slot_per_interval() -> None:
    clock = Clock()
    p = pacer(clock)
    waits = [p.wait(key, [POST_A]) for key in range(6)]
    assert waits == pytest.approx([0, 0, 0, 0.1, 0.2, 0.3])


def test_asking_again_keeps_the_slot_and_it_comes_nearer() -> None:
    clock = Clock()
    p = pacer(clock, burst=1)
    assert take(p, 1, POST_A) == 0
    assert p.wait(2, [POST_A]) == pytest.approx(0.1)
    assert p.wait(3, [POST_A]) == pytest.approx(0.2)
    clock.now += 0.05
    assert p.wait(2, [POST_A]) == pytest.approx(0.05)  # not pushed back behind 3
    assert p.wait(3, [POST_A]) == pytest.approx(0.15)
    clock.now += 0.05
    assert take(p, 2, POST_A) == 0
    assert p.wait(4, [POST_A]) == pytest.approx(0.2)  # behind 3, who still holds its slot


def test_channels_and_kinds_of_call_are_paced_apart() -> None:
    clock = Clock()
    p = pacer(clock, burst=1)
    for key in range(50):  # a backlog on one channel
        p.wait(key, [POST_A])
    assert take(p, 100, POST_B) == 0
    assert take(p, 101, UPDATE_A) == 0
    assert p.wait(102, [UPDATE_A]) == pytest.approx(1.0)  # updates at their own rate


def test_a_row_needing_two_channels_waits_for_the_later_slot() -> None:
    clock = Clock()
    p = pacer(clock, burst=1)
    for key in range(5):
        p.wait(key, [POST_A])
    assert p.wait(9, [POST_B, POST_A]) == pytest.approx(0.5)
    # its slot on B is held meanwhile: the next row on B comes after it
    assert p.wait(10, [POST_B]) == pytest.approx(0.1)


def test_two_busy_channels_never_starve_a_row_needing_both() -> None:
    """Each of the row's slots is kept while it waits for the later one: it goes when that
    comes, however busy both channels stay (before, each wait let the other slot lapse)."""
    clock = Clock()
    p = pacer(clock, burst=1)  # 0.1 s apart
    for key in range(50):  # a backlog of 5 s on A
        p.wait(key, [POST_A])
    wait = p.wait(99, [POST_B, POST_A])
    assert wait == pytest.approx(5.0)
    next_key = 100
    while clock.now < 100.0 + wait:  # B stays busy all along: a new row each interval
        take(p, next_key, POST_B)
        next_key += 1
        clock.now += 0.1
        for key in range(50):
            if clock.now >= 100.0 + 0.1 * key:
                take(p, key, POST_A)
    assert take(p, 99, POST_B, POST_A) == 0  # both slots, at once, when A's comes


def test_two_calls_to_one_channel_take_two_slots() -> None:
    """An escalation whose on-call channel is the reviewer channel posts twice there."""
    clock = Clock()
    p = pacer(clock, burst=1)
    assert take(p, 1, POST_A, POST_A) == pytest.approx(0.1)
    clock.now += 0.1
    assert take(p, 1, POST_A, POST_A) == 0
    assert p.wait(2, [POST_A]) == pytest.approx(0.1)  # after both of 1's


def test_a_pause_holds_the_whole_channel_and_allows_no_burst_after_it() -> None:
    clock = Clock()
    p = pacer(clock, burst=3)
    held = p.wait(1, [POST_A])
    assert held == 0
    p.pause(Call.POST, "C0A", 2.0)
    assert p.wait(1, [POST_A]) == pytest.approx(2.0)  # its earlier slot is void
    assert p.wait(2, [POST_A]) == pytest.approx(2.1)
    assert take(p, 3, POST_B) == 0  # another channel is not paused
    clock.now += 2.0
    assert take(p, 1, POST_A) == 0
    assert p.wait(2, [POST_A]) == pytest.approx(0.1)


def test_a_slot_missed_by_far_lapses_and_the_key_asks_afresh() -> None:
    clock = Clock()
    p = pacer(clock, burst=1)
    assert take(p, 1, POST_A) == 0
    assert p.wait(2, [POST_A]) == pytest.approx(0.1)  # its row never comes back in time
    clock.now += 5.0
    assert take(p, 3, POST_A) == 0
    assert p.wait(2, [POST_A]) == pytest.approx(0.1)  # a new slot, after 3's
    assert take(p, 2, POST_A) == pytest.approx(0.1)


def test_idle_time_refills_the_burst_but_never_beyond_it() -> None:
    clock = Clock()
    p = pacer(clock, burst=3)
    for key in range(3):
        assert take(p, key, POST_A) == 0
    clock.now += 60.0
    waits = [take(p, key, POST_A) for key in range(10, 14)]
    assert waits == pytest.approx([0, 0, 0, 0.1])


@pytest.mark.parametrize(("per_second", "burst"), [(0.0, 1), (-1.0, 1), (1.0, 0)])
def test_a_rate_must_be_positive(per_second: float, burst: int) -> None:
    with pytest.raises(ValueError, match="per_second > 0"):
        Rate(per_second, burst)


# -- the Slack stand-in enforces a per-channel rate, so the pacing above can be tested ---------


async def test_the_standin_answers_429_past_a_channels_rate_and_counts_it() -> None:
    standin = SlackStandIn(channels=["C0A", "C0B"])
    base_url = await standin.start()
    try:
        client = AsyncWebClient(token=standin.token, base_url=base_url)
        standin.rate_limit("chat.postMessage", per_second=1.0, burst=2)
        for _ in range(2):
            await client.chat_postMessage(channel="C0A", text="within the burst")
        with pytest.raises(SlackApiError) as refused:
            await client.chat_postMessage(channel="C0A", text="one too many")
        assert refused.value.response.status_code == 429
        assert refused.value.response.headers["Retry-After"] == "1"
        await client.chat_postMessage(channel="C0B", text="another channel has its own")
        assert standin.rate_limited == {"chat.postMessage": 1}
        assert len(standin.messages["C0A"]) == 2
    finally:
        await standin.stop()
