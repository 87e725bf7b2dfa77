"""The bot as the harness builds it, with what a benchmark needs besides:

* production-like worker settings (relay poll 1 s, expiry sweep 1 s, directory cache 60 s) and
  the real clock instead of the harness's test settings;
* the Slack stand-in in a process of its own (Slack is remote in production: its CPU, its
  deep copies and its linear message search must not be charged to the bot's event loop);
* an agent receiver that stamps when each callback arrived (``time.monotonic()``, which is
  system-wide on Linux, so it compares with the load generator's stamps).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import os
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess

import aiohttp
import asyncpg
from aiohttp import web

from bot import app as bot_app
from bot.sandbox.standin import SlackStandIn
from tests.support import harness
from tests.support.agent_receiver import AgentReceiver

__all__ = ["PRODUCTION_WORKERS", "BenchHarness", "StandInProcess", "TimedReceiver"]

PRODUCTION_WORKERS = bot_app.Workers(
    run=True, poll_interval=1.0, expiry_interval=1.0, lookup_ttl=60.0
)
# The stand-in keeps every message; chat.update searches them in order. Keep the recent ones.
KEEP_MESSAGES = 1000


class TimedReceiver(AgentReceiver):
    def __init__(self) -> None:
        super().__init__()
        # Idempotency-Key (the approval id) -> first arrival, as (time.monotonic(), time.time())
        self.arrivals: dict[str, tuple[float, float]] = {}
        self.arrived = asyncio.Event()

    async def _handle(self, request: web.Request) -> web.Response:
        arrived = time.monotonic(), time.time()
        self.arrivals.setdefault(request.headers.get("Idempotency-Key", ""), arrived)
        self.arrived.set()
        return await super()._handle(request)

    def decided_at(self) -> dict[str, float]:
        """approval id -> its ``decided_at`` (unix seconds), from the callbacks received."""
        out: dict[str, float] = {}
        for received in self.received:
            decided = json.loads(received.body).get("decided_at")
            if decided:
                out[received.idempotency_key] = datetime.fromisoformat(decided).timestamp()
        return out

    async def wait_arrivals(
        self, keys: Iterable[str], timeout: float
    ) -> dict[str, tuple[float, float]]:
        """The arrivals, once every key in ``keys`` has one or ``timeout`` s have passed."""
        wanted = set(keys)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                while not wanted <= self.arrivals.keys():
                    self.arrived.clear()
                    await self.arrived.wait()
        return self.arrivals


async def _serve_standin(conn: Connection) -> None:
    # the same workspace the harness builds
    standin = SlackStandIn(
        token=harness.BOT_TOKEN,
        users=[
            harness.REQUESTER,
            harness.OUTSIDER,
            harness.APPROVER,
            harness.TWIN,
            *harness.FINANCE,
        ],
        usergroups={"S0FINANCE": [harness.REQUESTER.id, *(u.id for u in harness.FINANCE)]},
        channels=[harness.CHANNEL],
    )
    conn.send(await standin.start())
    parent = os.getppid()
    calls: Counter[str] = Counter()
    try:
        while not await asyncio.to_thread(conn.poll, 0.5):
            calls.update(name for name, _ in standin.calls)
            standin.calls.clear()
            for messages in standin.messages.values():
                del messages[:-KEEP_MESSAGES]
            if os.getppid() != parent:  # orphaned: stop by ourselves
                return
        calls.update(name for name, _ in standin.calls)
        conn.send(dict(calls))
    finally:
        await standin.stop()


def serve_standin(conn: Connection) -> None:
    """Entry point of the stand-in's process: sends its base URL, serves until told to stop,
    then sends the count of calls per Web API method."""
    asyncio.run(_serve_standin(conn))


class StandInProcess:
    def __init__(self) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process: BaseProcess = context.Process(
            target=serve_standin, args=(child,), name="slack-standin", daemon=True
        )
        self.base_url = ""

    @property
    def pid(self) -> int | None:
        return self._process.pid

    async def start(self) -> str:
        self._process.start()
        if not await asyncio.to_thread(self._conn.poll, 30.0):
            raise RuntimeError("the Slack stand-in did not start within 30 s")
        self.base_url = str(self._conn.recv())
        return self.base_url

    async def stop(self) -> dict[str, int]:
        calls: dict[str, int] = {}
        if self._process.is_alive():
            self._conn.send("stop")
            if await asyncio.to_thread(self._conn.poll, 10.0):
                calls = dict(self._conn.recv())
        await asyncio.to_thread(self._process.join, 5.0)
        if self._process.is_alive():
            self._process.terminate()
        return calls


@dataclass
class BenchHarness(harness.Harness):
    receiver: AgentReceiver = field(default_factory=TimedReceiver)
    workers: bot_app.Workers = PRODUCTION_WORKERS
    slack: StandInProcess = field(default_factory=StandInProcess)
    slack_calls: dict[str, int] = field(default_factory=dict)
    _probe: asyncpg.Connection | None = None
    paced: bool = False  # the stand-in enforces no Slack rate: the bench measures our own costs

    @property
    def timed(self) -> TimedReceiver:
        assert isinstance(self.receiver, TimedReceiver)
        return self.receiver

    async def start(self) -> BenchHarness:
        await self.slack.start()
        await self.receiver.start()
        self.session = aiohttp.ClientSession()
        await self.start_bot()
        return self

    def slack_api_url(self) -> str:
        return self.slack.base_url  # the stand-in runs in its own process here

    async def stop(self) -> None:
        if self._probe is not None:
            await self._probe.close()
        await self.stop_bot()
        await self.receiver.stop()
        if self.session is not None:
            await self.session.close()
        self.slack_calls = await self.slack.stop()

    async def outbox_backlog(self) -> int:
        """Outbox rows not done yet, by the relay's own partial index (cheap to poll)."""
        if self._probe is None:
            self._probe = await asyncpg.connect(self.database_url)
        count: int = await self._probe.fetchval(
            "SELECT count(*) FROM outbox WHERE done_at IS NULL AND dead_at IS NULL"
            " AND created_at <= now()"  # not the card updates scheduled for a deadline
        )
        return count

    async def mark_cards_done(self) -> int:
        """Mark every queued card post done without posting it; returns how many.

        For runs with the relay stopped: those approvals are never shown or clicked, the bench
        only measured their intake, and their cards must not be charged to the next run."""
        if self._probe is None:
            self._probe = await asyncpg.connect(self.database_url)
        status = await self._probe.execute(
            "UPDATE outbox SET done_at = now() WHERE done_at IS NULL AND dead_at IS NULL"
            " AND kind = 'post_card'"
        )
        return int(status.split()[-1])

    async def quiesce(self, timeout: float = 60.0) -> float:
        """Wait until the relay has done everything queued; returns the seconds it took."""
        started = time.perf_counter()
        async with asyncio.timeout(timeout):
            # polling the table is the point: it is the outbox's own record of what is left
            while await self.outbox_backlog() > 0:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
        return time.perf_counter() - started
