"""Waiting for background work (the relay, the listeners) without fixed sleeps."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable


async def until(
    check: Callable[[], bool | Awaitable[bool]],
    *,
    timeout: float = 10.0,
    interval: float = 0.02,
    what: str = "the condition",
) -> None:
    """Return once ``check()`` is true; fail the test after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(interval)
