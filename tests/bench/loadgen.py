"""The load generator, run in a process of its own so that its CPU is not the server's.

Each entry point is a plain function (picklable, for a ``ProcessPoolExecutor``) that runs one
measurement on a fresh event loop and returns plain data. Bodies and signatures are built before
the clock starts; every connection is opened (``GET prime_url``) before the clock starts too.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp

from tests import slack_requests

__all__ = ["Click", "ClickRun", "Run", "clicks", "post_json"]


@dataclass(frozen=True)
class Run:
    """One load run: latencies (s) of the 2xx answers, every status, wall and CPU time (s)."""

    latencies: list[float]
    statuses: dict[int, int]
    wall: float
    cpu: float


@dataclass(frozen=True)
class Click:
    approval_id: str
    sent: float  # time.monotonic() just before the request went out (system-wide on Linux)
    sent_wall: float  # time.time() then, to compare with the bot's decided_at
    latency: float  # seconds until the HTTP answer (bolt's ack) was read
    status: int


@dataclass(frozen=True)
class ClickRun:
    clicks: list[Click]
    wall: float


async def _post(
    session: aiohttp.ClientSession, url: str, body: bytes, headers: dict[str, str]
) -> int:
    try:
        async with session.post(url, data=body, headers=headers) as response:
            await response.read()
            return response.status
    except (aiohttp.ClientError, TimeoutError):
        return 0


async def _prime(session: aiohttp.ClientSession, prime_url: str, concurrency: int) -> None:
    async def one() -> None:
        async with session.get(prime_url) as response:
            await response.read()

    await asyncio.gather(*(one() for _ in range(concurrency)))


def _session(concurrency: int) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(limit=concurrency, force_close=False)
    return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=30))


async def _post_json(
    url: str,
    prime_url: str,
    headers: dict[str, str],
    template: dict[str, Any],
    prefix: str,
    count: int,
    concurrency: int,
) -> Run:
    bodies = [
        json.dumps({**template, "request_id": f"{prefix}-{i}"}).encode() for i in range(count)
    ]
    all_headers = {**headers, "Content-Type": "application/json"}
    latencies: list[float] = []
    statuses: Counter[int] = Counter()
    async with _session(concurrency) as session:
        await _prime(session, prime_url, concurrency)
        queue: Iterator[bytes] = iter(bodies)

        async def client() -> None:
            for body in queue:  # one iterator shared by every client: each body is sent once
                started = time.perf_counter()
                status = await _post(session, url, body, all_headers)
                elapsed = time.perf_counter() - started
                statuses[status] += 1
                if 200 <= status < 300:
                    latencies.append(elapsed)

        cpu0, wall0 = time.process_time(), time.perf_counter()
        await asyncio.gather(*(client() for _ in range(concurrency)))
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    return Run(latencies=latencies, statuses=dict(statuses), wall=wall, cpu=cpu)


def post_json(
    url: str,
    prime_url: str,
    headers: dict[str, str],
    template: dict[str, Any],
    prefix: str,
    count: int,
    concurrency: int,
) -> Run:
    """POST ``count`` copies of ``template`` (each with ``request_id`` = ``prefix-i``) to ``url``
    from ``concurrency`` clients that share one keep-alive connection pool."""
    return asyncio.run(_post_json(url, prime_url, headers, template, prefix, count, concurrency))


async def _clicks(
    url: str,
    prime_url: str,
    signing_secret: str,
    channel: str,
    targets: list[tuple[str, str, str]],
    concurrency: int,
) -> ClickRun:
    requests = [
        (
            approval_id,
            slack_requests.block_actions(
                signing_secret=signing_secret,
                user_id=user_id,
                user_name=user_name,
                action_id="countersign_approve",
                value=approval_id,
                channel_id=channel,
            ),
        )
        for approval_id, user_id, user_name in targets
    ]
    done: list[Click] = []
    async with _session(concurrency) as session:
        await _prime(session, prime_url, concurrency)
        queue = iter(requests)

        async def clicker() -> None:
            for approval_id, request in queue:
                body = request.body.encode()
                sent, wall, started = time.monotonic(), time.time(), time.perf_counter()
                status = await _post(session, url, body, request.headers)
                latency = time.perf_counter() - started
                done.append(Click(approval_id, sent, wall, latency, status))

        wall0 = time.perf_counter()
        await asyncio.gather(*(clicker() for _ in range(concurrency)))
        wall = time.perf_counter() - wall0
    return ClickRun(clicks=done, wall=wall)


def clicks(
    url: str,
    prime_url: str,
    signing_secret: str,
    channel: str,
    targets: list[tuple[str, str, str]],
    concurrency: int,
) -> ClickRun:
    """Slack-signed Approve clicks, one per ``(approval_id, user_id, user_name)``."""
    return asyncio.run(_clicks(url, prime_url, signing_secret, channel, targets, concurrency))
