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
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from tests import slack_requests

__all__ = ["Background", "Click", "ClickRun", "LongPolls", "Run", "clicks", "post_json"]


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
    # approval id -> time.time() its long-poll (``GET …?wait=``, opened before the clicks)
    # answered settled, when long-polls were asked for
    answered: dict[str, float] = field(default_factory=dict)
    background: Run | None = None  # the submissions made meanwhile, when asked for


@dataclass(frozen=True)
class Background:
    """Submissions to make while clicking (cards being posted meanwhile): ``post_json``'s
    arguments, and how long to submit before the first click (seconds)."""

    url: str
    prime_url: str
    headers: dict[str, str]
    template: dict[str, Any]
    prefix: str
    count: int
    concurrency: int
    lead: float


@dataclass(frozen=True)
class LongPolls:
    """A long-poll per clicked approval, opened before the clicks: ``GET {base}/{id}?wait=``."""

    base: str
    headers: dict[str, str]
    wait: float = 30.0


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
    long_polls: LongPolls | None = None,
    background: Background | None = None,
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
    answered: dict[str, float] = {}
    submitting: asyncio.Task[Run] | None = None
    async with _session(concurrency) as session, _session(len(targets)) as polling:
        await _prime(session, prime_url, concurrency)
        queue = iter(requests)

        async def clicker() -> None:
            for approval_id, request in queue:
                body = request.body.encode()
                sent, wall, started = time.monotonic(), time.time(), time.perf_counter()
                status = await _post(session, url, body, request.headers)
                latency = time.perf_counter() - started
                done.append(Click(approval_id, sent, wall, latency, status))

        async def long_poll(polls: LongPolls, approval_id: str) -> None:
            address = f"{polls.base}/{approval_id}?wait={polls.wait:g}"
            async with polling.get(address, headers=polls.headers) as response:
                answer = await response.json()
            if answer.get("status") != "pending":
                answered[approval_id] = time.time()

        polls: list[asyncio.Task[None]] = []
        if long_polls is not None:
            await _prime(polling, prime_url, len(targets))
            polls = [asyncio.create_task(long_poll(long_polls, t[0])) for t in targets]
            await asyncio.sleep(0.2)  # every long-poll waiting in the bot before the clicks
        if background is not None:
            submitting = asyncio.create_task(_post_json(*_background_args(background)))
            await asyncio.sleep(background.lead)
        wall0 = time.perf_counter()
        await asyncio.gather(*(clicker() for _ in range(concurrency)))
        wall = time.perf_counter() - wall0
        await asyncio.gather(*polls, return_exceptions=True)
        ran = await submitting if submitting is not None else None
    return ClickRun(clicks=done, wall=wall, answered=answered, background=ran)


def _background_args(b: Background) -> tuple[Any, ...]:
    return (b.url, b.prime_url, b.headers, b.template, b.prefix, b.count, b.concurrency)


def clicks(
    url: str,
    prime_url: str,
    signing_secret: str,
    channel: str,
    targets: list[tuple[str, str, str]],
    concurrency: int,
    long_polls: LongPolls | None = None,
    background: Background | None = None,
) -> ClickRun:
    """Slack-signed Approve clicks, one per ``(approval_id, user_id, user_name)``, up to
    ``concurrency`` at once; with ``long_polls``, each approval long-polled from before the
    clicks; with ``background``, submissions made meanwhile (from ``lead`` seconds before)."""
    return asyncio.run(
        _clicks(
            url, prime_url, signing_secret, channel, targets, concurrency, long_polls, background
        )
    )
