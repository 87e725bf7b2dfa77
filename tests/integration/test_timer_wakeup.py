"""The timer loop sleeps until the next due row, and a new approval or timer due sooner wakes it
(a notification, from any replica), so expiry and reminders fire on time without a fast poll.

The loop's poll bound here is a minute: were it the only thing waking the loop, nothing in
these tests would fire within their wait."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

import pytest

from tests.support import waiting
from tests.support.harness import TEST_WORKERS, Harness

SLOW_POLL = dataclasses.replace(TEST_WORKERS, expiry_interval=60.0)


@pytest.fixture
async def slow_poll(database_url: str) -> AsyncIterator[Harness]:
    h = await Harness(database_url=database_url, workers=SLOW_POLL).start()
    yield h
    await h.stop()


async def status(harness: Harness, approval_id: str) -> str:
    code, body = await harness.call("GET", f"/v1/approvals/{approval_id}")
    assert code == 200, body
    assert isinstance(body, dict)
    return str(body["status"])


async def test_an_approval_created_while_the_loop_sleeps_expires_on_time(
    slow_poll: Harness,
) -> None:
    await slow_poll.settle_quietly(0.3)  # the loop found nothing due and went to sleep
    created = await slow_poll.submit(expires_in=1)
    approval_id = created["approval_id"]

    async def expired() -> bool:
        return await status(slow_poll, approval_id) == "expired"

    await waiting.until(expired, timeout=15, what="the approval to expire")


async def test_a_sooner_approval_wakes_a_loop_sleeping_until_a_later_one(
    slow_poll: Harness,
) -> None:
    later = await slow_poll.submit(request_id="later", expires_in=3600)
    await slow_poll.settle_quietly(0.3)  # asleep until the later one (an hour: the poll bound)
    sooner = await slow_poll.submit(request_id="sooner", expires_in=1)

    async def expired() -> bool:
        return await status(slow_poll, sooner["approval_id"]) == "expired"

    await waiting.until(expired, timeout=15, what="the sooner approval to expire")
    assert await status(slow_poll, later["approval_id"]) == "pending"
