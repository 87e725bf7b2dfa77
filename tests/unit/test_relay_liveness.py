"""The relay's loop says whether it is alive (for /readyz) from when it last turned."""

from __future__ import annotations

import asyncio
import time

from approvals import outbox
from approvals.repository import Repository


async def test_a_relay_is_alive_while_its_loop_turns_and_stalled_after() -> None:
    relay = outbox.Relay(store=Repository.in_memory(), handlers={}, poll_interval=0.01)
    assert relay.stalled(time.monotonic()) == "the relay loop has not run yet"
    task = asyncio.create_task(relay.run())
    try:
        await asyncio.sleep(0.05)
        assert relay.stalled(time.monotonic()) is None
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    stopped = time.monotonic()
    assert relay.stalled(stopped + outbox.STALLED_MIN_SECONDS - 1) is None
    later = relay.stalled(stopped + outbox.STALLED_MIN_SECONDS + 5)
    assert later is not None
    assert later.startswith("the relay loop last ran ")
