"""The bot as the harness builds it, with what a benchmark needs besides:

* production-like worker settings (relay poll 1 s, expiry sweep 1 s, directory cache 60 s) and
  the real clock instead of the harness's test settings;
* the Slack stand-in in a process of its own (Slack is remote in production: its CPU, its
  deep copies and its linear message search must not be charged to the bot's event loop);
* an agent receiver, in a process of its own too (an agent is remote as well: reading and
  answering the callbacks must not take the bot's event loop, nor a callback's arrival be
  stamped only once the bot's loop lets the receiver run), that stamps when each callback
  arrived (``time.monotonic()``, which is system-wide on Linux, so it compares with the load
  generator's stamps), and a stand-in that stamps when each App Home view was published
  (``views.publish``) the same way;
* a rule of the bench's own in front of the harness's test policy: a call of
  :data:`TIMER_TOOL` is decided by the approvers and reminded after ``timer_after`` seconds (the
  timer phase reads how late each reminder fired);
* :class:`BotProcess`: the same bot in a process of its own, whose memory (VmRSS) can be read
  apart from the bench's.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import json
import logging
import multiprocessing
import os
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

import aiohttp
import asyncpg
from aiohttp import web

from approvals import policy
from bot import app as bot_app
from bot import memory
from bot.config import Config
from bot.sandbox.standin import SlackStandIn
from tests.support import harness
from tests.support.agent_receiver import AgentReceiver

__all__ = [
    "PRODUCTION_WORKERS",
    "SEALER_IDLE",
    "TIMER_TOOL",
    "BenchHarness",
    "BotProcess",
    "ReceiverProcess",
    "StandInProcess",
    "TimedReceiver",
    "memory_kb",
]

# a seal interval long enough that no seal falls within a run: the sealer idles
SEALER_IDLE = 3600.0
PRODUCTION_WORKERS = bot_app.Workers(
    run=True, poll_interval=1.0, expiry_interval=1.0, lookup_ttl=60.0
)
# The stand-in keeps every message; chat.update searches them in order. Keep the recent ones:
# enough that a card outlives what comes after it until its last update (the timer phase posts
# 1 000 cards and a reminder in each one's thread before expiry updates the first of them; a
# reply or update to a message dropped here fails as Slack's would, message_not_found).
KEEP_MESSAGES = 5000
# a call of this tool is decided by the approvers and reminded after BenchHarness.timer_after s
TIMER_TOOL = "bench_timer"


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


async def _serve_receiver(conn: Connection) -> None:
    receiver = TimedReceiver()
    await receiver.start()
    conn.send(receiver.port)
    parent = os.getppid()
    try:
        while True:
            if await asyncio.to_thread(conn.poll, 0.5):
                asked = conn.recv()
                if asked == "stop":
                    break
                if asked == "decided_at":
                    conn.send(receiver.decided_at())
                else:  # ("arrivals", keys, timeout)
                    _, keys, timeout = asked
                    conn.send(dict(await receiver.wait_arrivals(keys, timeout)))
            if os.getppid() != parent:  # orphaned: stop by ourselves
                return
    finally:
        await receiver.stop()


def serve_receiver(conn: Connection) -> None:
    """Entry point of the agent receiver's process: sends its port, serves until told to
    stop; answers ``"decided_at"`` and ``("arrivals", keys, timeout)`` as
    :class:`TimedReceiver`'s methods of those names."""
    asyncio.run(_serve_receiver(conn))


class ReceiverProcess(AgentReceiver):
    """A :class:`TimedReceiver` in a process of its own, asked through a pipe."""

    def __init__(self) -> None:
        super().__init__()
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process: BaseProcess = context.Process(
            target=serve_receiver, args=(child,), name="agent-receiver", daemon=True
        )
        self._asking = asyncio.Lock()

    async def start(self) -> None:
        self._process.start()
        if not await asyncio.to_thread(self._conn.poll, 30.0):
            raise RuntimeError("the agent receiver did not start within 30 s")
        self.port = int(self._conn.recv())

    async def stop(self) -> None:
        if self._process.is_alive():
            self._conn.send("stop")
        await asyncio.to_thread(self._process.join, 5.0)
        if self._process.is_alive():
            self._process.terminate()

    async def _ask(self, question: Any, timeout: float) -> Any:
        async with self._asking:
            self._conn.send(question)
            if not await asyncio.to_thread(self._conn.poll, timeout + 10.0):
                raise RuntimeError("the agent receiver did not answer")
            return self._conn.recv()

    async def wait_arrivals(
        self, keys: Iterable[str], timeout: float
    ) -> dict[str, tuple[float, float]]:
        """As :meth:`TimedReceiver.wait_arrivals`, of the receiver's process."""
        arrivals: dict[str, tuple[float, float]] = await self._ask(
            ("arrivals", list(keys), timeout), timeout
        )
        return arrivals

    async def decided_at(self) -> dict[str, float]:
        """As :meth:`TimedReceiver.decided_at`, of the receiver's process."""
        decided: dict[str, float] = await self._ask("decided_at", 0.0)
        return decided


class TimedStandIn(SlackStandIn):
    """The stand-in, stamping when each ``views.publish`` arrived (``time.monotonic()``)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.published: list[float] = []

    async def _handle(self, request: web.Request) -> web.Response:
        if request.match_info.get("method") == "views.publish":
            self.published.append(time.monotonic())
        return await super()._handle(request)


async def _serve_standin(conn: Connection) -> None:
    # the same workspace the harness builds (every role's user group: an approver's look-up
    # reads each group the policy names, and a group Slack does not know fails it)
    standin = TimedStandIn(
        token=harness.BOT_TOKEN,
        users=[
            harness.REQUESTER,
            harness.OUTSIDER,
            harness.APPROVER,
            harness.TWIN,
            *harness.FINANCE,
            harness.LEAD_TWIN,
            harness.SALES_LEAD,
            harness.OPERATOR,
            harness.SUPPORT,
        ],
        usergroups={
            "S0FINANCE": [harness.REQUESTER.id, *(u.id for u in harness.FINANCE)],
            "S0SALESLEAD": [harness.LEAD_TWIN.id, harness.SALES_LEAD.id],
            "S0SOLO": [harness.REQUESTER.id],
        },
        channels=[harness.CHANNEL, harness.ONCALL],
    )
    conn.send(await standin.start())
    parent = os.getppid()
    calls: Counter[str] = Counter()
    try:
        while True:
            if await asyncio.to_thread(conn.poll, 0.5):
                if conn.recv() != "published":
                    break  # "stop"
                conn.send(list(standin.published))
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
    then sends the count of calls per Web API method. Told ``"published"``, it sends the
    stamps of every ``views.publish`` so far."""
    asyncio.run(_serve_standin(conn))


class StandInProcess:
    def __init__(self) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process: BaseProcess = context.Process(
            target=serve_standin, args=(child,), name="slack-standin", daemon=True
        )
        self.base_url = ""
        self._asking = asyncio.Lock()

    @property
    def pid(self) -> int | None:
        return self._process.pid

    async def start(self) -> str:
        self._process.start()
        if not await asyncio.to_thread(self._conn.poll, 30.0):
            raise RuntimeError("the Slack stand-in did not start within 30 s")
        self.base_url = str(self._conn.recv())
        return self.base_url

    async def published(self) -> list[float]:
        """When each ``views.publish`` so far reached the stand-in (``time.monotonic()``)."""
        async with self._asking:
            self._conn.send("published")
            if not await asyncio.to_thread(self._conn.poll, 10.0):
                raise RuntimeError("the Slack stand-in did not answer within 10 s")
            stamps: list[float] = self._conn.recv()
        return stamps

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
    receiver: AgentReceiver = field(default_factory=ReceiverProcess)
    workers: bot_app.Workers = PRODUCTION_WORKERS
    slack: StandInProcess = field(default_factory=StandInProcess)
    slack_calls: dict[str, int] = field(default_factory=dict)
    _probe: asyncpg.Connection | None = None
    paced: bool = False  # the stand-in enforces no Slack rate: the bench measures our own costs
    timer_after: int = 10  # seconds from creation to the reminder of a TIMER_TOOL call
    seal_interval: float | None = None  # None: the production default (Settings)
    # rules of a bench of its own, in front of every other (e.g. grants.py's)
    first_rules: tuple[dict[str, Any], ...] = ()

    @property
    def timed(self) -> ReceiverProcess:
        assert isinstance(self.receiver, ReceiverProcess)
        return self.receiver

    def config(self) -> Config:
        config = super().config()
        data = config.policy.model_dump(mode="json", by_alias=True, exclude_none=True)
        rule = {
            "tool": TIMER_TOOL,
            "require": "approvers",
            "escalation": [{"after": self.timer_after, "action": "remind"}],
        }
        data["rules"] = [*self.first_rules, rule, *data["rules"]]
        settings = config.settings
        if self.seal_interval is not None:
            settings = settings.model_copy(update={"audit_seal_interval": self.seal_interval})
        return dataclasses.replace(
            config, settings=settings, policy=policy.Policy.model_validate(data)
        )

    async def start_bot(self, *, workers: bool = True, same_port: bool = False) -> None:
        await super().start_bot(workers=workers, same_port=same_port)
        memory.freeze_startup()  # as the bot's command does once it serves

    async def start(self) -> BenchHarness:
        await self.slack.start()
        await self.receiver.start()
        self.session = aiohttp.ClientSession()
        await self.start_bot()
        return self

    def slack_api_url(self) -> str:
        return self.slack.base_url  # the stand-in runs in its own process here

    async def stop(self) -> None:
        await self._close_probe()
        await self.stop_bot()
        await self.receiver.stop()
        if self.session is not None:
            await self.session.close()
        self.slack_calls = await self.slack.stop()

    async def _close_probe(self) -> None:
        if self._probe is not None:
            await self._probe.close()
            self._probe = None

    async def use_database(self, dsn: str) -> None:
        """Serve from the database at ``dsn`` from now on (the bot restarts on it)."""
        await self._close_probe()
        await self.stop_bot()
        self.database_url = dsn
        await self.start_bot()

    async def use_seal_interval(self, seconds: float | None) -> None:
        """Restart the bot sealing its audit every ``seconds`` (None: the default). A bot seals
        once as it starts, so the sealer then idles for that long."""
        self.seal_interval = seconds
        await self.stop_bot()
        await self.start_bot()
        await self.seal_now()

    async def seal_now(self) -> None:
        """Seal every event committed so far (as the bot's sealer would at its next turn)."""
        assert self.store is not None
        await self.store.audit.seal(datetime.now(UTC), wait=True)

    async def probe(self) -> asyncpg.Connection:
        """A connection of the bench's own to the bot's database (not one of the bot's)."""
        if self._probe is None:
            self._probe = await asyncpg.connect(self.database_url)
        return self._probe

    async def outbox_backlog(self) -> int:
        """Outbox rows not done yet, by the relay's own partial index (cheap to poll)."""
        return await outbox_backlog(await self.probe())

    async def mark_cards_done(self) -> int:
        """Mark every queued card post done without posting it; returns how many.

        For runs with the relay stopped: those approvals are never shown or clicked, the bench
        only measured their intake, and their cards must not be charged to the next run."""
        status = await (await self.probe()).execute(
            # done_xid: a row done records the transaction that did it (the audit chain, 0017)
            "UPDATE outbox SET done_at = now(), done_xid = pg_current_xact_id()"
            " WHERE done_at IS NULL AND dead_at IS NULL AND kind = 'post_card'"
        )
        return int(status.split()[-1])

    async def quiesce(self, timeout: float = 60.0) -> float:
        """Wait until the relay has done everything queued; returns the seconds it took."""
        return await quiesce(await self.probe(), timeout)


async def outbox_backlog(conn: asyncpg.Connection) -> int:
    count: int = await conn.fetchval(
        "SELECT count(*) FROM outbox WHERE done_at IS NULL AND dead_at IS NULL"
        " AND created_at <= now()"  # not the card updates scheduled for a deadline
    )
    return count


async def quiesce(conn: asyncpg.Connection, timeout: float = 60.0) -> float:
    """Wait until the relay of the database ``conn`` is on has done everything queued; returns
    the seconds it took."""
    started = time.perf_counter()
    async with asyncio.timeout(timeout):
        # polling the table is the point: it is the outbox's own record of what is left
        while await outbox_backlog(conn) > 0:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
    return time.perf_counter() - started


# --------------------------------------------------------------------------- the bot alone


def memory_kb() -> dict[str, int]:
    """This process's VmRSS and VmHWM (peak) in kB, after a full collection (so that garbage
    waiting for the cycle collector is not counted as kept); empty off Linux."""
    gc.collect()
    out: dict[str, int] = {}
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    out[key] = int(value.split()[0])
    except OSError:
        pass
    return out


async def _serve_bot(conn: Connection, database_url: str, slack_url: str) -> None:
    # in this process: only the memory phase runs this bot, and it reads no arrival
    h = BenchHarness(database_url=database_url, receiver=TimedReceiver())
    h.slack.base_url = slack_url  # the parent's stand-in: this process serves only the bot
    # the agent's receiver: the policy allows callbacks to its port only (callback hosts)
    await h.receiver.start()
    h.session = aiohttp.ClientSession()
    await h.start_bot()
    conn.send((h.base_url, h.receiver.url))
    parent = os.getppid()
    try:
        while True:
            if await asyncio.to_thread(conn.poll, 0.5):
                if conn.recv() != "memory":
                    break  # "stop"
                conn.send(memory_kb())
            if os.getppid() != parent:  # orphaned: stop by ourselves
                return
    finally:
        await h.stop_bot()
        await h.receiver.stop()
        await h.session.close()


def serve_bot(conn: Connection, database_url: str, slack_url: str) -> None:
    """Entry point of the bot's own process: sends its base URL and the callback URL its
    policy allows, serves until told to stop. Told ``"memory"``, it sends :func:`memory_kb` of
    itself."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):  # loopback only
        os.environ.pop(name, None)
        os.environ.pop(name.lower(), None)
    asyncio.run(_serve_bot(conn, database_url, slack_url))


class BotProcess:
    """The bench's bot (production workers, its relay on) in a process of its own, on
    ``database_url``, talking to the stand-in at ``slack_url``."""

    def __init__(self, database_url: str, slack_url: str) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process: BaseProcess = context.Process(
            target=serve_bot,
            args=(child, database_url, slack_url),
            name="countersign-bot",
            daemon=True,
        )
        self.base_url = ""
        self.callback_url = ""  # of the agent receiver in that process: what its policy allows

    async def start(self) -> str:
        self._process.start()
        if not await asyncio.to_thread(self._conn.poll, 60.0):
            raise RuntimeError("the bot's process did not start within 60 s")
        self.base_url, self.callback_url = self._conn.recv()
        return self.base_url

    async def memory(self) -> dict[str, int]:
        """The bot process's VmRSS and VmHWM, kB."""
        self._conn.send("memory")
        if not await asyncio.to_thread(self._conn.poll, 30.0):
            raise RuntimeError("the bot's process did not answer within 30 s")
        found: dict[str, int] = self._conn.recv()
        return found

    async def stop(self) -> None:
        if self._process.is_alive():
            self._conn.send("stop")
        await asyncio.to_thread(self._process.join, 15.0)
        if self._process.is_alive():
            self._process.terminate()
