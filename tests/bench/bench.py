"""Countersign benchmark: figures, never assertions on timings.

``python -m tests.bench.bench`` (``make bench``; ``--help`` for the knobs). Everything runs on
loopback, on real parts: the bot as :mod:`tests.bench.rig` builds it (PostgreSQL, the Slack
stand-in in its own process, an agent receiver), a bare aiohttp + asyncpg baseline in the same
process and the same PostgreSQL, and one load generator in a process of its own that drives
both alike.

Phases (``--phases``, comma-separated; default ``all``: ``intake,clicks,timers,growth,memory``;
``make bench-memory`` runs the memory phase alone). Last comes a summary of the performance
targets, each beside its figure and its baseline from this run (:mod:`tests.bench.targets`).

``intake``
   ``POST /v1/approvals`` at 32 concurrent clients (``--concurrency``): throughput and latency
   p50/p99 of Countersign beside a *null* handler (parse JSON, answer) and the *baseline*
   (parse JSON, one INSERT). Countersign runs twice: as deployed, and with its outbox relay
   stopped (the request path alone; the cards it queued are then marked done unposted). CPU
   per request is counted from /proc until the relay has posted every card the run queued, per
   process group. Then the same at each of ``--levels`` (1 client: latency, with
   ``--level-requests`` POSTs a run; 128 clients: saturation, with ``--requests``).
``clicks``
   Slack Approve clicks on pending approvals by an eligible approver: latency of bolt's ack
   (the HTTP answer of ``/slack/events``) beside a baseline ack (signature check + payload
   parse), and click → signed callback received by the agent, split at the settlement's
   ``decided_at``; at ``--click-concurrency`` clicks at a time (1), then at ``--burst-clicks``
   (50) at once.
``timers``
   On a database of its own, ``--timer-approvals`` (1 000) approvals of a tool whose rule
   reminds after ``--timer-after`` seconds (the bench's rule, :data:`rig.TIMER_TOOL`) and that
   expire after ``--expiry-after`` seconds, submitted at once so that all are pending when the
   first falls due. Delay of each reminder behind its ``due_at`` (``timers.fired_at -
   due_at``), of its post in the card's thread (the outbox row done), and of each expiry
   behind ``expires_at`` (the settlement's ``decided_at``), as the bot's own clock stamped
   them.
``growth``
   The same probe on two databases of their own: an empty one, and one seeded in SQL
   (:mod:`tests.bench.seed`) with ``--growth-settled`` (100 000) settled and
   ``--growth-pending`` (10 000) pending approvals and their history (settlements, attempts,
   outbox rows done, timers fired, turn verdicts), ANALYZEd and its audit sealed before the
   clock starts. The probe: ``--growth-submits`` POSTs (p50/p99), ``--growth-clicks`` clicks
   one at a time (click → settled, from the settlement's ``decided_at``), ``--home-opens`` App
   Home opens (an ``app_home_opened`` event through ``/slack/events`` until its
   ``views.publish`` reaches the stand-in); ratios seeded/empty per repetition.
``memory``
   The bot in a process of its own (:class:`rig.BotProcess`) on a database of its own: its
   VmRSS after 1 %, 10 % and 100 % of ``--memory-submissions`` (100 000) submissions, every
   card posted and the bot at rest (three poll intervals idle) before each reading; the ratio of
   the last to the first.

``--quick`` runs every phase it is given small (seconds to a minute: a smoke test, not
figures); flags given beside it still win.

Each measurement is repeated (3 times by default), the targets in a rotating order so that
drift on a noisy machine hits all of them alike; the table shows medians over repetitions,
ratios are medians of per-repetition ratios. The last lines are JSON, one object a line (the
``env`` object last).

PostgreSQL: ``TEST_DATABASE_URL`` if set, else an embedded one (pgserver).
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import cProfile
import functools
import json
import logging
import math
import multiprocessing
import os
import platform
import pstats
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

import asyncpg

from approvals.repository import Repository
from bot import rendering, slack_cards
from tests import slack_requests
from tests.bench import loadgen, rig, seed, targets
from tests.bench.baseline import Baseline, Card
from tests.bench.cpu import CpuMeter, postmaster_of
from tests.bench.rig import PRODUCTION_WORKERS, BenchHarness
from tests.support import harness, postgres

T = TypeVar("T")

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
PHASES = ("intake", "clicks", "timers", "growth", "memory")
POST_TARGETS = (
    "null",
    "baseline",
    "baseline-carded",
    "countersign-norelay",
    "countersign-unsealed",
    "countersign",
)
POST_LABELS = {
    "null": "null (parse JSON, answer)",
    "baseline": "baseline (parse + 1 INSERT)",
    "baseline-carded": "baseline + card (slack_sdk)",
    "countersign-norelay": "countersign, relay stopped",
    "countersign-unsealed": "countersign, audit unsealed",
    "countersign": "countersign",
}
CLICK_TARGETS = ("baseline", "countersign")
# a burst run's clicks all go at once, so a repetition is several bursts (samples enough for a
# p99), each on approvals of its own; while cards post, --cards-meanwhile submissions are made
# from 0.3 s before the burst (their cards still being posted as it settles)
BURSTS = 3
GROWTH_TARGETS = ("empty", "seeded")
# the App Home's viewer: an approver (finance) whose queue is the 200 newest pending approvals
HOME_VIEWER = harness.FINANCE[0]


# --------------------------------------------------------------------------- figures


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100) of a non-empty sequence."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(p / 100 * len(ordered))) - 1]


def ms(values: Sequence[float], p: float) -> float | None:
    return percentile(values, p) * 1000 if values else None


def top_ms(values: Sequence[float]) -> float | None:
    return max(values) * 1000 if values else None


@dataclass(frozen=True)
class PostSample:
    """One run of POSTs at one target; CPU figures are µs per request."""

    rps: float
    p50_ms: float | None
    p99_ms: float | None
    errors: int
    server_cpu_us: float | None  # this process: the bot (or baseline) and the agent receiver
    pg_cpu_us: float | None  # the bench's PostgreSQL server
    standin_cpu_us: float | None  # the Slack stand-in's process (Slack's side, not ours)
    client_cpu_us: float  # the load generator, while it sent
    drain_s: float | None  # from the last answer until the relay had posted every card
    carded_rps: float | None  # requests / (run + drain): the rate with every card posted
    foreign_cores: float | None  # other processes on the machine, cores busy on average
    steal_cores: float | None  # CPU the hypervisor gave to other guests


@dataclass(frozen=True)
class ClickSample:
    ack_p50_ms: float | None
    ack_p99_ms: float | None
    ack_max_ms: float | None
    errors: int
    callback_p50_ms: float | None = None  # click sent -> callback received by the agent
    callback_p99_ms: float | None = None
    callback_max_ms: float | None = None
    settled_p50_ms: float | None = None  # click sent -> settlement's decided_at
    settled_p99_ms: float | None = None
    relay_p50_ms: float | None = None  # decided_at -> callback received (relay: card, callback)
    relay_p99_ms: float | None = None
    missing_callbacks: int = 0
    wake_p50_ms: float | None = None  # decided_at -> the approval's long-poll answered
    wake_p99_ms: float | None = None
    cards_meanwhile: int = 0  # cards the submissions made meanwhile queued (while cards post)


@dataclass(frozen=True)
class TimerSample:
    """One batch of approvals with a reminder and a short expiry; delays in ms."""

    submit_s: float  # how long the batch took to submit (all pending before the first due?)
    remind_p50_ms: float | None  # timers.fired_at - due_at
    remind_p99_ms: float | None
    remind_max_ms: float | None
    posted_p50_ms: float | None  # due_at -> the reminder's post in the card's thread done
    posted_p99_ms: float | None
    expiry_p50_ms: float | None  # settlement decided_at - expires_at
    expiry_p99_ms: float | None
    expiry_max_ms: float | None
    errors: int  # submissions refused
    missing: int  # reminders or expiries that did not happen within the wait


@dataclass(frozen=True)
class GrowthSample:
    submit_p50_ms: float | None
    submit_p99_ms: float | None
    settled_p50_ms: float | None  # click sent -> settlement's decided_at
    settled_p99_ms: float | None
    home_p50_ms: float | None  # app_home_opened sent -> views.publish reached the stand-in
    home_p99_ms: float | None
    home_max_ms: float | None
    errors: int  # the three below
    refused: int  # POSTs not answered 2xx
    unsettled: int  # clicks without a settlement
    unpublished: int  # App Home opens without a views.publish within 10 s


@dataclass(frozen=True)
class Options:
    """The knobs, resolved (defaults and --quick's: :data:`KNOBS`)."""

    requests: int
    warmup: int
    concurrency: int
    reps: int
    clicks: int
    click_concurrency: int
    budget: float
    profile: str | None
    phases: tuple[str, ...]
    levels: tuple[int, ...]  # more intake client counts besides `concurrency`
    level_requests: int  # POSTs a run at 1 client
    burst_clicks: int  # clicks at once in the burst run (0: none)
    cards_meanwhile: int  # submissions made during each burst of the cards-posting run
    timer_approvals: int
    timer_after: int  # s from creation to the reminder
    expiry_after: int  # s from creation to the expiry
    growth_settled: int
    growth_pending: int
    growth_submits: int
    growth_clicks: int
    home_opens: int
    memory_submissions: int
    quick: bool

    def level_count(self, concurrency: int) -> int:
        """POSTs a run at ``concurrency`` clients (one client: fewer, each waits its turn)."""
        return self.level_requests if concurrency == 1 else self.requests


# --------------------------------------------------------------------------- the run


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class Bench:
    def __init__(
        self,
        options: Options,
        bot: BenchHarness,
        baseline: Baseline,
        pool: concurrent.futures.Executor,
        meter: CpuMeter,
        admin_dsn: str,
    ) -> None:
        self.o = options
        self.bot = bot
        self.baseline = baseline
        self.pool = pool
        self.meter = meter
        self.admin_dsn = admin_dsn
        self.profiler = cProfile.Profile() if options.profile else None
        self._tag = 0
        self.notes: dict[str, Any] = {}  # set-up figures of the phases (seeding, sealing)

    def tag(self, what: str) -> str:
        self._tag += 1
        return f"bench-{what}-{self._tag}-{time.time_ns()}"

    async def in_pool(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, functools.partial(fn, *args))

    def profiling(self, on: bool) -> None:
        if self.profiler is not None:
            if on:
                self.profiler.enable()
            else:
                self.profiler.disable()

    @contextlib.asynccontextmanager
    async def own_database(self) -> AsyncIterator[str]:
        """A fresh database the bot serves from meanwhile (then back to the main one)."""
        main = self.bot.database_url
        dsn = await postgres.fresh_database(self.admin_dsn)
        try:
            await self.bot.use_database(dsn)
            yield dsn
        finally:
            await self.bot.use_database(main)
            await postgres.drop_database(self.admin_dsn, dsn)

    async def ids_of(self, prefix: str, limit: int | None = None) -> list[str]:
        """Approval ids of the requests the load generator sent with ``prefix``, oldest first."""
        rows = await (await self.bot.probe()).fetch(
            "SELECT approval_id FROM approvals WHERE request_id LIKE $1"
            " ORDER BY created_at LIMIT $2",
            prefix + "-%",
            limit,
        )
        return [r["approval_id"] for r in rows]

    def agent_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {harness.AGENT_TOKEN}"}

    # -- 1. POST /v1/approvals -----------------------------------------------------------

    def post_url(self, name: str) -> tuple[str, str]:
        """(POST url, url that opens the connections) of a target."""
        b, c = self.baseline.base_url, self.bot.base_url
        return {
            "null": (b + "/null", b + "/healthz"),
            "baseline": (b + "/v1/approvals", b + "/healthz"),
            "baseline-carded": (b + "/v1/approvals/carded", b + "/healthz"),
            "countersign-norelay": (c + "/v1/approvals", c + "/healthz"),
            "countersign-unsealed": (c + "/v1/approvals", c + "/healthz"),
            "countersign": (c + "/v1/approvals", c + "/healthz"),
        }[name]

    async def post_once(self, name: str, count: int, concurrency: int) -> PostSample:
        norelay = name == "countersign-norelay"
        unsealed = name == "countersign-unsealed"
        await self.bot.quiesce()
        if norelay:
            await self.bot.stop_bot()
            await self.bot.start_bot(workers=False)
        if unsealed:  # what sealing costs intake: the same bot with its sealer idle
            await self.bot.use_seal_interval(rig.SEALER_IDLE)
        url, prime = self.post_url(name)
        self.profiling(name.startswith("countersign"))
        before = self.meter.snapshot()
        run: loadgen.Run = await self.in_pool(
            loadgen.post_json,
            url,
            prime,
            self.agent_headers(),
            self.bot.request_body(),
            self.tag(name),
            count,
            concurrency,
        )
        if name == "baseline-carded":
            drain: float | None = await self.baseline.drain()
        else:
            drain = None if norelay else await self.bot.quiesce()
        used = CpuMeter.used(before, self.meter.snapshot())
        self.profiling(False)
        if norelay:
            await self.bot.mark_cards_done()
            await self.bot.stop_bot()
            await self.bot.start_bot()
        if unsealed:  # its events sealed now, not charged to the next run
            await self.bot.use_seal_interval(None)
            await self.bot.seal_now()
        return PostSample(
            rps=count / run.wall,
            p50_ms=ms(run.latencies, 50),
            p99_ms=ms(run.latencies, 99),
            errors=count - len(run.latencies),
            server_cpu_us=used.per_request_us("server", count),
            pg_cpu_us=used.per_request_us("postgres", count),
            standin_cpu_us=used.per_request_us("standin", count),
            client_cpu_us=run.cpu / count * 1e6,
            drain_s=drain,
            carded_rps=None if drain is None else count / (run.wall + drain),
            foreign_cores=used.cores(used.foreign),
            steal_cores=used.cores(used.steal),
        )

    async def post_phase(
        self, concurrency: int, count: int, warmup: int
    ) -> dict[str, list[PostSample]]:
        for name in POST_TARGETS:
            if warmup:
                await self.post_once(name, warmup, concurrency)
        samples: dict[str, list[PostSample]] = {name: [] for name in POST_TARGETS}
        for rep in range(self.o.reps):
            shift = rep % len(POST_TARGETS)
            for name in POST_TARGETS[shift:] + POST_TARGETS[:shift]:
                s = await self.post_once(name, count, concurrency)
                samples[name].append(s)
                progress(
                    f"  rep {rep + 1} c{concurrency} {name:<20} {s.rps:6.0f} req/s"
                    f"  p50 {fmt(s.p50_ms):>6} ms  p99 {fmt(s.p99_ms):>6} ms  errors {s.errors}"
                    f"  other load {fmt(s.foreign_cores, 2)} cores"
                )
        return samples

    # -- 2. clicks ------------------------------------------------------------------------

    async def pending(self, count: int) -> list[str]:
        """``count`` new pending approvals (role finance), their cards posted."""
        prefix = self.tag("click")
        semaphore = asyncio.Semaphore(8)

        async def one(i: int) -> str:
            async with semaphore:
                created = await self.bot.submit(request_id=f"{prefix}-{i}")
                return str(created["approval_id"])

        ids = await asyncio.gather(*(one(i) for i in range(count)))
        await self.bot.quiesce()
        return list(ids)

    @staticmethod
    def click_targets(ids: Sequence[str]) -> list[tuple[str, str, str]]:
        approvers = harness.FINANCE  # in S0FINANCE, not the requester: every click settles
        return [
            (approval_id, approvers[i % len(approvers)].id, approvers[i % len(approvers)].name)
            for i, approval_id in enumerate(ids)
        ]

    async def click_once(
        self, name: str, ids: list[str], concurrency: int, cards: bool = False
    ) -> ClickSample:
        """One run of clicks on ``ids``; at a burst (more than one at once), each approval is
        long-polled from before the clicks, and with ``cards`` submissions are made meanwhile,
        so that their cards are being posted while the clicks settle."""
        base = self.bot.base_url if name == "countersign" else self.baseline.base_url
        ours = name == "countersign"
        long_polls = (
            loadgen.LongPolls(base + "/v1/approvals", self.agent_headers())
            if ours and concurrency > 1
            else None
        )
        background = (
            loadgen.Background(
                url=base + "/v1/approvals",
                prime_url=base + "/healthz",
                headers=self.agent_headers(),
                template=self.bot.request_body(),
                prefix=self.tag("meanwhile"),
                count=self.o.cards_meanwhile,
                concurrency=8,
                lead=0.3,
            )
            if ours and cards
            else None
        )
        self.profiling(ours)
        run: loadgen.ClickRun = await self.in_pool(
            loadgen.clicks,
            base + "/slack/events",
            base + "/healthz",
            harness.SIGNING_SECRET,
            harness.CHANNEL,
            self.click_targets(ids),
            concurrency,
            long_polls,
            background,
        )
        acks = [c.latency for c in run.clicks if c.status == 200]
        if name != "countersign":
            self.profiling(False)
            return ClickSample(
                ms(acks, 50), ms(acks, 99), top_ms(acks), len(run.clicks) - len(acks)
            )
        arrivals = await self.bot.timed.wait_arrivals(ids, timeout=30.0)
        decided = await self.bot.timed.decided_at()
        callbacks: list[float] = []
        settled: list[float] = []
        relayed: list[float] = []
        woken: list[float] = []
        for c in run.clicks:
            if c.approval_id in arrivals:
                mono, wall = arrivals[c.approval_id]
                callbacks.append(mono - c.sent)
                if c.approval_id in decided:
                    settled.append(decided[c.approval_id] - c.sent_wall)
                    relayed.append(wall - decided[c.approval_id])
            if c.approval_id in run.answered and c.approval_id in decided:
                woken.append(run.answered[c.approval_id] - decided[c.approval_id])
        await self.bot.quiesce()  # the card updates
        self.profiling(False)
        return ClickSample(
            ack_p50_ms=ms(acks, 50),
            ack_p99_ms=ms(acks, 99),
            ack_max_ms=top_ms(acks),
            errors=len(run.clicks) - len(acks),
            callback_p50_ms=ms(callbacks, 50),
            callback_p99_ms=ms(callbacks, 99),
            callback_max_ms=top_ms(callbacks),
            settled_p50_ms=ms(settled, 50),
            settled_p99_ms=ms(settled, 99),
            relay_p50_ms=ms(relayed, 50),
            relay_p99_ms=ms(relayed, 99),
            missing_callbacks=len(ids) - len(callbacks),
            wake_p50_ms=ms(woken, 50) if long_polls else None,
            wake_p99_ms=ms(woken, 99) if long_polls else None,
            cards_meanwhile=run.background.statuses.get(201, 0) if run.background else 0,
        )

    async def click_phase(
        self, concurrency: int, warm: bool, cards: bool = False
    ) -> dict[str, list[ClickSample]]:
        """Clicks ``concurrency`` at a time: one at a time, ``o.clicks`` a run; more, a burst
        of exactly that many at once a run, :data:`BURSTS` runs a repetition (``cards``: while
        cards are being posted)."""
        if warm:
            ids = await self.pending(min(20, self.o.clicks))
            for name in CLICK_TARGETS:  # also fills the approver directory's cache (TTL 60 s)
                await self.click_once(name, ids, concurrency)
        samples: dict[str, list[ClickSample]] = {name: [] for name in CLICK_TARGETS}
        burst = concurrency > 1
        count = concurrency if burst else self.o.clicks
        for rep in range(self.o.reps * (BURSTS if burst else 1)):
            ids = await self.pending(count)
            for name in CLICK_TARGETS if rep % 2 == 0 else CLICK_TARGETS[::-1]:
                s = await self.click_once(name, ids, concurrency, cards)
                samples[name].append(s)
                progress(
                    f"  rep {rep + 1} click c{concurrency} {name:<12}"
                    f" ack p50 {fmt(s.ack_p50_ms):>5} ms  p99 {fmt(s.ack_p99_ms):>5} ms"
                    f"  callback p50 {fmt(s.callback_p50_ms)} ms  p99 {fmt(s.callback_p99_ms)} ms"
                )
        return samples

    # -- 3. timers ------------------------------------------------------------------------

    async def timer_once(self) -> TimerSample:
        o = self.o
        prefix = self.tag("timer")
        body = self.bot.request_body(
            tool={"name": rig.TIMER_TOOL, "call_id": "t", "arguments": {}},
            expires_in=o.expiry_after,
        )
        url, prime = self.post_url("countersign")
        run: loadgen.Run = await self.in_pool(
            loadgen.post_json,
            url,
            prime,
            self.agent_headers(),
            body,
            prefix,
            o.timer_approvals,
            o.concurrency,
        )
        ids = await self.ids_of(prefix)
        probe = await self.bot.probe()
        # every reminder fired and every approval expired (or the wait is over: counted missing)
        deadline = time.monotonic() + o.expiry_after + 60
        done = False
        while not done and time.monotonic() < deadline:
            done = await probe.fetchval(
                "SELECT (SELECT count(*) FROM timers WHERE approval_id = ANY($1)"
                "        AND kind = 'remind' AND fired_at IS NOT NULL) = $2"
                " AND (SELECT count(*) FROM settlements WHERE approval_id = ANY($1)"
                "      AND status = 'expired') = $2",
                ids,
                len(ids),
            )
            if not done:
                await asyncio.sleep(0.2)
        await self.bot.quiesce()  # the reminders' posts, the expired cards' updates, callbacks
        seconds = "extract(epoch FROM {})::float8"
        reminded = await probe.fetch(
            f"SELECT {seconds.format('fired_at - due_at')} AS late FROM timers"
            " WHERE approval_id = ANY($1) AND kind = 'remind' AND fired_at IS NOT NULL",
            ids,
        )
        posted = await probe.fetch(
            f"SELECT {seconds.format('o.done_at - t.due_at')} AS late FROM outbox o"
            " JOIN timers t ON t.approval_id = o.approval_id AND t.kind = 'remind'"
            " WHERE o.approval_id = ANY($1) AND o.kind = 'remind' AND o.done_at IS NOT NULL",
            ids,
        )
        expired = await probe.fetch(
            f"SELECT {seconds.format('s.decided_at - a.expires_at')} AS late"
            " FROM settlements s JOIN approvals a USING (approval_id)"
            " WHERE s.approval_id = ANY($1) AND s.status = 'expired'",
            ids,
        )
        r, p, e = ([row["late"] for row in rows] for rows in (reminded, posted, expired))
        return TimerSample(
            submit_s=run.wall,
            remind_p50_ms=ms(r, 50),
            remind_p99_ms=ms(r, 99),
            remind_max_ms=top_ms(r),
            posted_p50_ms=ms(p, 50),
            posted_p99_ms=ms(p, 99),
            expiry_p50_ms=ms(e, 50),
            expiry_p99_ms=ms(e, 99),
            expiry_max_ms=top_ms(e),
            errors=o.timer_approvals - len(run.latencies),
            missing=2 * len(ids) - len(r) - len(e),
        )

    async def timer_phase(self) -> list[TimerSample]:
        samples = []
        async with self.own_database():
            for rep in range(self.o.reps):
                s = await self.timer_once()
                samples.append(s)
                progress(
                    f"  rep {rep + 1} timers: submitted in {s.submit_s:.1f} s;"
                    f" remind late p50 {fmt(s.remind_p50_ms)} ms p99 {fmt(s.remind_p99_ms)} ms;"
                    f" expiry late p50 {fmt(s.expiry_p50_ms)} ms p99 {fmt(s.expiry_p99_ms)} ms;"
                    f" missing {s.missing}"
                )
        return samples

    # -- 4. growth ------------------------------------------------------------------------

    async def seal(self, dsn: str) -> tuple[float, int]:
        """Seal the audit of ``dsn`` now, as the bot's sealer would: (seconds, events)."""
        store = await Repository.connect(dsn, listen=False)
        try:
            started = time.perf_counter()
            sealed = await store.audit.seal(await store.database_time(), wait=True)
            return time.perf_counter() - started, sealed.count if sealed is not None else 0
        finally:
            await store.close()

    async def seed_history(self, dsn: str) -> None:
        """Fill ``dsn`` (the bot serving from it) with the growth phase's history."""
        o = self.o
        probe = await self.bot.probe()
        templates = await seed.make_templates(self.bot, probe)
        await self.bot.quiesce()
        await self.bot.stop_bot()
        # the templates sealed, their copies are history sealed long ago (see tests.bench.seed)
        await self.seal(dsn)
        seeded = await seed.seed(
            probe, templates, settled=o.growth_settled, pending=o.growth_pending
        )
        seconds, events = await self.seal(dsn)
        self.notes |= {
            "seed_s": round(seeded.seconds, 1),
            "seal_after_seed_s": round(seconds, 2),
            "sealed_after_seed": events,
        }
        progress(
            f"  seeded {seeded.settled} settled, {seeded.pending} pending approvals,"
            f" {seeded.turns} turn verdicts in {seeded.seconds:.1f} s"
        )
        await self.bot.start_bot()

    async def home_open(self, user: str) -> float | None:
        """Seconds from an ``app_home_opened`` event sent to its ``views.publish`` reaching the
        stand-in (None: not within 10 s, or the event was refused)."""
        request = slack_requests.app_home_opened(
            signing_secret=harness.SIGNING_SECRET, user_id=user
        )
        seen = len(await self.bot.slack.published())
        sent = time.monotonic()
        if await self.bot.post_slack(request) != 200:
            return None
        deadline = sent + 10.0
        while time.monotonic() < deadline:
            stamps = await self.bot.slack.published()
            if len(stamps) > seen:
                return stamps[seen] - sent
            await asyncio.sleep(0.01)  # the stamp is the stand-in's: this only looks
        return None

    async def growth_once(self, dsn: str) -> GrowthSample:
        o = self.o
        if self.bot.database_url != dsn:
            await self.bot.use_database(dsn)
        url, prime = self.post_url("countersign")
        headers, body = self.agent_headers(), self.bot.request_body()
        # warm: connections, the directory cache (a click looks the approver up), the queries
        warm = self.tag("growth-warm")
        await self.in_pool(loadgen.post_json, url, prime, headers, body, warm, 40, 8)
        await self.bot.quiesce()
        await self.in_pool(
            loadgen.clicks,
            self.bot.base_url + "/slack/events",
            prime,
            harness.SIGNING_SECRET,
            harness.CHANNEL,
            self.click_targets(await self.ids_of(warm, 10)),
            1,
        )
        await self.home_open(HOME_VIEWER.id)
        await self.bot.quiesce()

        prefix = self.tag("growth")
        run: loadgen.Run = await self.in_pool(
            loadgen.post_json, url, prime, headers, body, prefix, o.growth_submits, o.concurrency
        )
        await self.bot.quiesce()
        ids = await self.ids_of(prefix, o.growth_clicks)
        clicked: loadgen.ClickRun = await self.in_pool(
            loadgen.clicks,
            self.bot.base_url + "/slack/events",
            prime,
            harness.SIGNING_SECRET,
            harness.CHANNEL,
            self.click_targets(ids),
            1,
        )
        probe = await self.bot.probe()
        # bolt acks first and settles after: wait for the settlements (bounded; a click that
        # settles nothing within it is counted unsettled)
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline and await probe.fetchval(  # noqa: ASYNC110
            "SELECT count(*) FROM settlements WHERE approval_id = ANY($1)", ids
        ) < len(ids):
            await asyncio.sleep(0.05)
        decided = {
            r["approval_id"]: r["at"]
            for r in await probe.fetch(
                "SELECT approval_id, extract(epoch FROM decided_at)::float8 AS at"
                " FROM settlements WHERE approval_id = ANY($1)",
                ids,
            )
        }
        settled = [
            decided[c.approval_id] - c.sent_wall for c in clicked.clicks if c.approval_id in decided
        ]
        await self.bot.quiesce()
        homes: list[float] = []
        for _ in range(o.home_opens):
            took = await self.home_open(HOME_VIEWER.id)
            if took is not None:
                homes.append(took)
        refused = o.growth_submits - len(run.latencies)
        unsettled = len(ids) - len(settled)
        unpublished = o.home_opens - len(homes)
        return GrowthSample(
            submit_p50_ms=ms(run.latencies, 50),
            submit_p99_ms=ms(run.latencies, 99),
            settled_p50_ms=ms(settled, 50),
            settled_p99_ms=ms(settled, 99),
            home_p50_ms=ms(homes, 50),
            home_p99_ms=ms(homes, 99),
            home_max_ms=top_ms(homes),
            errors=refused + unsettled + unpublished,
            refused=refused,
            unsettled=unsettled,
            unpublished=unpublished,
        )

    async def growth_phase(self) -> dict[str, list[GrowthSample]]:
        async with self.own_database() as seeded, self.own_database() as empty:
            await self.bot.use_database(seeded)
            await self.seed_history(seeded)
            dsns = {"empty": empty, "seeded": seeded}
            samples: dict[str, list[GrowthSample]] = {name: [] for name in GROWTH_TARGETS}
            for rep in range(self.o.reps):
                for name in GROWTH_TARGETS if rep % 2 == 0 else GROWTH_TARGETS[::-1]:
                    s = await self.growth_once(dsns[name])
                    samples[name].append(s)
                    progress(
                        f"  rep {rep + 1} growth {name:<7} submit p99 {fmt(s.submit_p99_ms)} ms"
                        f"  click → settled p99 {fmt(s.settled_p99_ms)} ms"
                        f"  App Home p50 {fmt(s.home_p50_ms)} ms  errors {s.errors}"
                    )
        return samples

    # -- 5. memory ------------------------------------------------------------------------

    async def memory_phase(self) -> list[dict[str, Any]]:
        """[{"submissions", "VmRSS", "VmHWM"}] of the bot in its own process, kB."""
        total = self.o.memory_submissions
        marks = sorted({max(1, total // 100), max(1, total // 10), total})
        dsn = await postgres.fresh_database(self.admin_dsn)
        bot = rig.BotProcess(dsn, self.bot.slack.base_url)
        probe: asyncpg.Connection | None = None
        readings: list[dict[str, Any]] = []
        try:
            url = await bot.start()
            probe = await asyncpg.connect(dsn)
            body = self.bot.request_body(callback_url=bot.callback_url)
            sent = refused = 0
            for mark in marks:
                while sent < mark:
                    chunk = min(10_000, mark - sent)  # the bodies are built up front: bounded
                    run: loadgen.Run = await self.in_pool(
                        loadgen.post_json,
                        url + "/v1/approvals",
                        url + "/healthz",
                        self.agent_headers(),
                        body,
                        self.tag("memory"),
                        chunk,
                        self.o.concurrency,
                    )
                    sent += chunk
                    refused += chunk - len(run.latencies)
                    await rig.quiesce(probe, timeout=600)
                if refused:  # a reading after refusals would not be of what it says
                    raise RuntimeError(f"memory: {refused} of {sent} submissions refused")
                # at rest: the relay hands memory back once idle a poll interval (bot/memory.py)
                await asyncio.sleep(3 * PRODUCTION_WORKERS.poll_interval)
                reading = {"submissions": sent, **await bot.memory()}
                readings.append(reading)
                progress(f"  memory after {sent} submissions: {reading}")
        finally:
            if probe is not None:
                await probe.close()
            await bot.stop()
            await postgres.drop_database(self.admin_dsn, dsn)
        return readings


# --------------------------------------------------------------------------- report


def fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def med(samples: Sequence[Any], attr: str) -> float | None:
    values = [getattr(s, attr) for s in samples]
    if not values or any(v is None for v in values):
        return None
    return float(statistics.median(values))


def paired_ratio(a: Sequence[Any], b: Sequence[Any], attr: str) -> float | None:
    """Median over repetitions of a[i].attr / b[i].attr."""
    ratios = []
    for x, y in zip(a, b, strict=True):
        top, bottom = getattr(x, attr), getattr(y, attr)
        if top is None or not bottom:
            return None
        ratios.append(top / bottom)
    return float(statistics.median(ratios)) if ratios else None


def _round(value: Any) -> Any:
    if isinstance(value, float):
        return None if math.isnan(value) else round(value, 3)
    return value


def summary(samples: Sequence[Any]) -> dict[str, Any]:
    """Medians (counts of errors: sums) and the per-repetition values."""
    names = list(asdict(samples[0]))
    out: dict[str, Any] = {f: _round(med(samples, f)) for f in names}
    for f in ("errors", "missing_callbacks", "missing", "refused", "unsettled", "unpublished"):
        if f in out:
            out[f] = sum(getattr(s, f) for s in samples)
    out["per_rep"] = {f: [_round(getattr(s, f)) for s in samples] for f in names}
    return out


def x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


RULE = "-" * 100


def report_header(o: Options, env: dict[str, Any]) -> None:
    print()
    print(
        f"Countersign bench — {env['cpus']} CPUs, Python {env['python']}, PostgreSQL "
        f"{env['postgres']} ({env['database']}); load average {env['loadavg_start']} at start"
    )
    print(
        f"medians of {o.reps} repetitions; ratios are medians of per-repetition ratios; "
        f"bot workers {env['workers']}"
        + ("; QUICK MODE (smoke test, not figures)" if o.quick else "")
    )
    print(RULE)


def report_posts(
    o: Options, concurrency: int, requests: int, warmup: int, posts: dict[str, list[PostSample]]
) -> dict[str, Any]:
    print(
        f"POST /v1/approvals — {requests} requests a run, {concurrency} concurrent clients, "
        f"{warmup} warm-up; CPU µs/request counted until the relay has posted the run's cards"
    )
    print(
        f"{'target':<29}{'req/s':>7}{'(min-max)':>12}{'p50 ms':>8}{'p99 ms':>8}"
        f" |{'bot':>7}{'pg':>7}{'slack':>6}{'client':>7} |{'other':>6}{'err':>5}"
    )
    for name, samples in posts.items():
        rps = [s.rps for s in samples]
        print(
            f"{POST_LABELS[name]:<29}{statistics.median(rps):7.0f}"
            f"{f'({min(rps):.0f}-{max(rps):.0f})':>12}"
            f"{fmt(med(samples, 'p50_ms')):>8}{fmt(med(samples, 'p99_ms')):>8}"
            f" |{fmt(med(samples, 'server_cpu_us'), 0):>7}{fmt(med(samples, 'pg_cpu_us'), 0):>7}"
            f"{fmt(med(samples, 'standin_cpu_us'), 0):>6}"
            f"{fmt(med(samples, 'client_cpu_us'), 0):>7}"
            f" |{fmt(med(samples, 'foreign_cores'), 2):>6}{sum(s.errors for s in samples):>5}"
        )
    ratios: dict[str, dict[str, float | None]] = {}
    # each countersign run beside the bare INSERT; the deployed one also beside the bare stack
    # doing the same I/O (one INSERT, one card posted, its ts stored): "countersign/carded"
    pairs = [
        (name, name, "baseline")
        for name in ("countersign", "countersign-norelay", "countersign-unsealed")
    ]
    pairs.append(("countersign/carded", "countersign", "baseline-carded"))
    for key, name, base in pairs:
        r = ratios[key] = {
            a: paired_ratio(posts[name], posts[base], a)
            for a in ("rps", "carded_rps", "p50_ms", "p99_ms", "server_cpu_us", "pg_cpu_us")
        }
        label = (
            "ratio " + name.replace("countersign", "cs") + "/" + base.replace("-carded", "+card")
        )
        print(
            f"{label:<29}{x(r['rps']):>7}"
            f"{'':>12}{x(r['p50_ms']):>8}{x(r['p99_ms']):>8}"
            f" |{x(r['server_cpu_us']):>7}{x(r['pg_cpu_us']):>7}"
            f"   carded {x(r['carded_rps'])}"
        )
    cs = posts["countersign"]
    if concurrency == o.concurrency:  # the legend once, under the main table
        print(
            "CPU columns, µs per request: bot = this process (the bot or the baseline, the agent "
            "receiver);\n  pg = the bench's PostgreSQL; slack = the stand-in's process; client = "
            "the load generator.\n  other = cores kept busy by other processes on the machine "
            "(noise), average over the runs"
        )
    carded = posts["baseline-carded"]
    print(
        f"countersign: the cards still queued when a run's last answer came took "
        f"{fmt(med(cs, 'drain_s'), 2)} s more to post;\n  counting that, "
        f"{fmt(med(cs, 'carded_rps'), 0)} approvals/s were taken in and shown (the stand-in has "
        f"no rate limit; Slack's is ~1 message/s per channel);\n  the bare stack posting the "
        f"same cards: {fmt(med(carded, 'carded_rps'), 0)}/s ({fmt(med(carded, 'drain_s'), 2)} s "
        f"to drain)"
    )
    print(RULE)
    return {
        "bench": "post_approvals"
        if concurrency == o.concurrency
        else f"post_approvals_c{concurrency}",
        "requests": requests,
        "concurrency": concurrency,
        "reps": o.reps,
        "targets": {name: summary(samples) for name, samples in posts.items()},
        "ratio_to_baseline": {
            name: {k: _round(v) for k, v in r.items()} for name, r in ratios.items()
        },
    }


def report_clicks(
    o: Options,
    concurrency: int,
    count: int,
    clicks: dict[str, list[ClickSample]],
    cards: bool = False,
) -> dict[str, Any]:
    cc, cb = clicks["countersign"], clicks["baseline"]
    if concurrency == 1:
        shape = f"{count} Approve clicks a run, 1 at a time"
    else:
        shape = f"{count} Approve clicks at once a run, {len(cc)} runs ({BURSTS} a repetition)" + (
            f", while {med(cc, 'cards_meanwhile') or 0:.0f} submissions a run (from 0.3 s"
            " before) have their cards posted"
            if cards
            else ""
        )
    print(
        f"Slack click → ack (HTTP answer of /slack/events) — {shape}, on as many pending"
        " approvals, eligible approvers"
    )
    print(f"{'':<29}{'p50 ms':>8}{'p99 ms':>8}{'max ms':>8}{'err':>5}")
    click_labels = {"baseline": "baseline ack (verify, parse)", "countersign": "countersign ack"}
    for name, click_runs in clicks.items():
        print(
            f"{click_labels[name]:<29}{fmt(med(click_runs, 'ack_p50_ms')):>8}"
            f"{fmt(med(click_runs, 'ack_p99_ms')):>8}{fmt(med(click_runs, 'ack_max_ms')):>8}"
            f"{sum(s.errors for s in click_runs):>5}"
        )
    ack_ratio = {a: paired_ratio(cc, cb, a) for a in ("ack_p50_ms", "ack_p99_ms")}
    print(
        f"{'ratio cs/baseline':<29}{x(ack_ratio['ack_p50_ms']):>8}{x(ack_ratio['ack_p99_ms']):>8}"
    )
    print(
        f"{'click → callback received':<29}{fmt(med(cc, 'callback_p50_ms')):>8}"
        f"{fmt(med(cc, 'callback_p99_ms')):>8}{fmt(med(cc, 'callback_max_ms')):>8}"
        f"{sum(s.missing_callbacks for s in cc):>5}  (err: no callback within 30 s)"
    )
    print(
        f"{'  click → settled':<29}{fmt(med(cc, 'settled_p50_ms')):>8}"
        f"{fmt(med(cc, 'settled_p99_ms')):>8}"
    )
    print(
        f"{'  settled → callback (relay)':<29}{fmt(med(cc, 'relay_p50_ms')):>8}"
        f"{fmt(med(cc, 'relay_p99_ms')):>8}"
    )
    if med(cc, "wake_p50_ms") is not None:
        print(
            f"{'settled → long-poll answered':<29}{fmt(med(cc, 'wake_p50_ms')):>8}"
            f"{fmt(med(cc, 'wake_p99_ms')):>8}"
        )
    if concurrency > 1:
        print(
            f"targets: click → callback p50 < 100 ms, p99 < 250 ms; long-poll p99 < 50 ms"
            f" (medians over the {len(cc)} runs)"
        )
    print(RULE)
    name = "slack_click" if concurrency == o.click_concurrency else f"slack_click_c{concurrency}"
    return {
        "bench": name + ("_cards" if cards else ""),
        "clicks": count,
        "concurrency": concurrency,
        "reps": o.reps,
        "targets": {name: summary(samples) for name, samples in clicks.items()},
        "ratio_to_baseline": {"countersign": {k: _round(v) for k, v in ack_ratio.items()}},
    }


def report_timers(o: Options, samples: list[TimerSample]) -> dict[str, Any]:
    print(
        f"Timers — {o.timer_approvals} approvals pending at once, each reminded {o.timer_after} s"
        f" and expired {o.expiry_after} s after creation;\n  lateness behind due_at as the "
        f"bot's clock stamped it (the timer loop as it is, sweep interval "
        f"{PRODUCTION_WORKERS.expiry_interval} s)"
    )
    print(f"{'':<40}{'p50 ms':>8}{'p99 ms':>8}{'max ms':>8}")
    print(
        f"{'reminder fired (fired_at - due_at)':<40}{fmt(med(samples, 'remind_p50_ms')):>8}"
        f"{fmt(med(samples, 'remind_p99_ms')):>8}{fmt(med(samples, 'remind_max_ms')):>8}"
    )
    print(
        f"{'  … and posted in the thread':<40}{fmt(med(samples, 'posted_p50_ms')):>8}"
        f"{fmt(med(samples, 'posted_p99_ms')):>8}"
    )
    print(
        f"{'expired (decided_at - expires_at)':<40}{fmt(med(samples, 'expiry_p50_ms')):>8}"
        f"{fmt(med(samples, 'expiry_p99_ms')):>8}{fmt(med(samples, 'expiry_max_ms')):>8}"
    )
    submit = med(samples, "submit_s")
    late = submit is not None and submit >= o.timer_after
    print(
        f"submitted in {fmt(submit)} s"
        + (" — NOT all pending when the first fell due: raise --timer-after" if late else "")
        + f"; refused {sum(s.errors for s in samples)}, never fired or expired "
        f"{sum(s.missing for s in samples)}"
    )
    print(RULE)
    return {
        "bench": "timers",
        "approvals": o.timer_approvals,
        "remind_after_s": o.timer_after,
        "expires_in_s": o.expiry_after,
        "reps": o.reps,
        **summary(samples),
    }


def report_growth(
    o: Options, samples: dict[str, list[GrowthSample]], notes: dict[str, Any]
) -> dict[str, Any]:
    print(
        f"Growth — an empty database beside one with {o.growth_settled} settled and "
        f"{o.growth_pending} pending approvals and their history (seeded in "
        f"{notes.get('seed_s')} s, its audit sealed already);\n  a run: "
        f"{o.growth_submits} POSTs at {o.concurrency} clients, {o.growth_clicks} clicks one at "
        f"a time, {o.home_opens} App Home opens (event sent → views.publish at the stand-in)"
    )
    attrs = (
        ("submit p50", "submit_p50_ms"),
        ("submit p99", "submit_p99_ms"),
        ("click → settled p50", "settled_p50_ms"),
        ("click → settled p99", "settled_p99_ms"),
        ("App Home open p50", "home_p50_ms"),
        ("App Home open p99", "home_p99_ms"),
    )
    print(f"{'ms':<29}{'empty':>9}{'seeded':>9}{'ratio':>9}")
    ratios: dict[str, float | None] = {}
    for label, attr in attrs:
        ratio = ratios[attr] = paired_ratio(samples["seeded"], samples["empty"], attr)
        print(
            f"{label:<29}{fmt(med(samples['empty'], attr)):>9}"
            f"{fmt(med(samples['seeded'], attr)):>9}{x(ratio):>9}"
        )
    for name, runs in samples.items():
        print(
            f"{name}: POSTs refused {sum(s.refused for s in runs)}, clicks unsettled "
            f"{sum(s.unsettled for s in runs)}, App Home opens unpublished "
            f"{sum(s.unpublished for s in runs)}"
        )
    print(RULE)
    return {
        "bench": "growth",
        "settled": o.growth_settled,
        "pending": o.growth_pending,
        "reps": o.reps,
        **notes,
        "targets": {name: summary(runs) for name, runs in samples.items()},
        "ratio_seeded_to_empty": {k: _round(v) for k, v in ratios.items()},
    }


def report_memory(o: Options, readings: list[dict[str, Any]]) -> dict[str, Any]:
    print(
        f"Memory — the bot in a process of its own, {o.memory_submissions} submissions at "
        f"{o.concurrency} clients, every card posted and the bot at rest before each reading (kB)"
    )
    print(f"{'submissions':>12}{'VmRSS':>10}{'VmHWM':>10}")
    for r in readings:
        print(f"{r['submissions']:>12}{r.get('VmRSS', '-'):>10}{r.get('VmHWM', '-'):>10}")
    first, last = readings[0].get("VmRSS"), readings[-1].get("VmRSS")
    ratio = last / first if first and last else None
    print(
        f"VmRSS after {readings[-1]['submissions']} / after {readings[0]['submissions']}: "
        f"{x(ratio)}"
    )
    print(RULE)
    return {"bench": "memory", "readings": readings, "rss_ratio": _round(ratio)}


# --------------------------------------------------------------------------- main


async def bench_card(bot: BenchHarness) -> Card:
    """The card Countersign posts for the bench's request (one submitted now), for the
    baseline to post the same bytes."""
    status, created = await bot.call(
        "POST", "/v1/approvals", json_body=bot.request_body(request_id="bench-card")
    )
    assert status == 201, created
    assert bot.store is not None
    approval = await bot.store.get_approval(created["approval_id"])
    assert approval is not None
    text, blocks = rendering.card(approval, approval.created_at)
    return Card(text=text, blocks=blocks, event_type=slack_cards.CARD_EVENT)


async def run(o: Options, admin_dsn: str, database: str) -> list[dict[str, Any]]:
    loadavg = " ".join(f"{v:.2f}" for v in os.getloadavg())
    await postgres.create_template(admin_dsn)
    dsn = await postgres.fresh_database(admin_dsn)
    pool = concurrent.futures.ProcessPoolExecutor(
        max_workers=1, mp_context=multiprocessing.get_context("spawn")
    )
    bot: BenchHarness | None = None
    baseline: Baseline | None = None
    finished = False
    lines: list[dict[str, Any]] = []
    try:
        conn = await asyncpg.connect(dsn)
        try:
            pg_version = str(await conn.fetchval("SHOW server_version"))
        finally:
            await conn.close()
        bot = await BenchHarness(database_url=dsn, timer_after=o.timer_after).start()
        baseline = await Baseline.start(
            dsn,
            harness.SIGNING_SECRET,
            slack_url=bot.slack.base_url,
            slack_token=harness.BOT_TOKEN,
            channel=harness.CHANNEL,
            card=await bench_card(bot),
        )
        meter = CpuMeter(await postmaster_of(dsn), bot.slack.pid)
        bench = Bench(o, bot, baseline, pool, meter, admin_dsn)
        started = time.perf_counter()
        # each section is printed as soon as its phase ends (a long run shows figures early)
        env: dict[str, Any] = {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "postgres": pg_version,
            "database": database,
            "loadavg_start": loadavg,
            "workers": {k: v for k, v in asdict(PRODUCTION_WORKERS).items() if k != "run"},
            "phases": list(o.phases),
            "quick": o.quick,
            "profiled": o.profile is not None,
        }
        report_header(o, env)
        if "intake" in o.phases:
            progress(f"POST /v1/approvals at {o.concurrency} clients …")
            posts = await bench.post_phase(o.concurrency, o.requests, o.warmup)
            lines.append(report_posts(o, o.concurrency, o.requests, o.warmup, posts))
            for level in o.levels:
                if level == o.concurrency:
                    continue
                progress(f"POST /v1/approvals at {level} clients …")
                count = o.level_count(level)
                posts = await bench.post_phase(level, count, 0)
                lines.append(report_posts(o, level, count, 0, posts))
        if "clicks" in o.phases:
            progress(f"Slack clicks, {o.click_concurrency} at a time …")
            clicks = await bench.click_phase(o.click_concurrency, warm=True)
            lines.append(report_clicks(o, o.click_concurrency, o.clicks, clicks))
            if o.burst_clicks and o.burst_clicks != o.click_concurrency:
                progress(f"Slack clicks, {o.burst_clicks} at once …")
                clicks = await bench.click_phase(o.burst_clicks, warm=False)
                lines.append(report_clicks(o, o.burst_clicks, o.burst_clicks, clicks))
                progress(f"Slack clicks, {o.burst_clicks} at once while cards post …")
                clicks = await bench.click_phase(o.burst_clicks, warm=False, cards=True)
                lines.append(report_clicks(o, o.burst_clicks, o.burst_clicks, clicks, cards=True))
        if "timers" in o.phases:
            progress(f"Timers, {o.timer_approvals} pending approvals …")
            lines.append(report_timers(o, await bench.timer_phase()))
        if "growth" in o.phases:
            progress(f"Growth: {o.growth_settled} settled + {o.growth_pending} pending vs empty …")
            lines.append(report_growth(o, await bench.growth_phase(), bench.notes))
        if "memory" in o.phases:
            progress(f"Memory, {o.memory_submissions} submissions …")
            lines.append(report_memory(o, await bench.memory_phase()))
        lines.append(targets.report(lines, o.concurrency, o.levels, o.burst_clicks, RULE))
        env["loadavg_end"] = " ".join(f"{v:.2f}" for v in os.getloadavg())
        env["seconds"] = round(time.perf_counter() - started, 1)
        lines.append({"bench": "env", **env})
        if bench.profiler is not None and o.profile:
            bench.profiler.dump_stats(o.profile)
            print(f"cProfile of this process during the countersign runs -> {o.profile}")
            pstats.Stats(bench.profiler).sort_stats("tottime").print_stats(25)
        finished = True
    finally:
        if not finished:  # out of time or failed: a load run may still be going, end it
            for process in list(pool._processes.values()):
                process.terminate()
        if baseline is not None:
            await baseline.stop()
        if bot is not None:
            await bot.stop()
        pool.shutdown(wait=finished, cancel_futures=True)
        await postgres.drop_database(admin_dsn, dsn)
    if bot is not None:
        lines[-1]["slack_calls"] = bot.slack_calls  # what the relay asked of "Slack"
    return lines


# (default, --quick) of every knob that --quick shrinks
KNOBS: dict[str, tuple[Any, Any]] = {
    "requests": (2000, 200),
    "warmup": (300, 50),
    "reps": (3, 1),
    "clicks": (200, 20),
    "level_requests": (500, 50),
    "burst_clicks": (50, 10),
    "cards_meanwhile": (1000, 20),
    "timer_approvals": (1000, 50),
    "timer_after": (10, 3),
    "expiry_after": (20, 5),
    "growth_settled": (100_000, 2000),
    "growth_pending": (10_000, 300),
    "growth_submits": (3000, 100),
    "growth_clicks": (500, 10),
    "home_opens": (100, 3),
    "memory_submissions": (100_000, 2000),
}


def _phases(text: str) -> tuple[str, ...]:
    names = PHASES if text == "all" else tuple(p.strip() for p in text.split(",") if p.strip())
    unknown = [p for p in names if p not in PHASES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"phases are {', '.join(PHASES)} or all; not {unknown}")
    return tuple(p for p in PHASES if p in names)  # in the order they run


def _levels(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of client counts: {text!r}") from None
    if any(v < 1 for v in levels):
        raise argparse.ArgumentTypeError("client counts are at least 1")
    return levels


def parse_args(argv: Sequence[str] | None) -> Options:
    p = argparse.ArgumentParser(prog="python -m tests.bench.bench", description=__doc__)
    p.formatter_class = argparse.RawDescriptionHelpFormatter

    def knob(flag: str, help_text: str, kind: type = int) -> None:
        default, quick = KNOBS[flag.lstrip("-").replace("-", "_")]
        p.add_argument(
            flag, type=kind, default=None, help=f"{help_text} ({default}; quick {quick})"
        )

    p.add_argument(
        "--phases",
        type=_phases,
        default=PHASES,
        help=f"comma-separated, of {', '.join(PHASES)}; or all (the default)",
    )
    p.add_argument("--quick", action="store_true", help="every phase small: a smoke test")
    knob("--requests", "POSTs a run")
    knob("--warmup", "warm-up POSTs a target")
    p.add_argument("--concurrency", type=int, default=32, help="concurrent POST clients (32)")
    p.add_argument(
        "--levels",
        type=_levels,
        default=(1, 128),
        help="more client counts for the intake, comma-separated (1,128)",
    )
    knob("--level-requests", "POSTs a run at 1 client")
    knob("--reps", "repetitions of each measurement")
    knob("--clicks", "clicks a run")
    p.add_argument("--click-concurrency", type=int, default=1, help="clicks at a time (1)")
    knob("--burst-clicks", "clicks at once in the burst run (0: none)")
    knob("--cards-meanwhile", "submissions (cards) made during each burst of the cards run")
    knob("--timer-approvals", "approvals pending in the timer phase")
    knob("--timer-after", "seconds to their reminder")
    knob("--expiry-after", "seconds to their expiry")
    knob("--growth-settled", "settled approvals seeded")
    knob("--growth-pending", "pending approvals seeded")
    knob("--growth-submits", "POSTs a growth run")
    knob("--growth-clicks", "clicks a growth run")
    knob("--home-opens", "App Home opens a growth run")
    knob("--memory-submissions", "submissions of the memory phase")
    p.add_argument(
        "--budget",
        type=float,
        default=None,
        help="give up after SECONDS (1200; 3900 with memory; 300 quick)",
    )
    p.add_argument("--profile", metavar="FILE", help="cProfile this process into FILE")
    a = p.parse_args(argv)
    values = {
        name: getattr(a, name) if getattr(a, name) is not None else pair[1 if a.quick else 0]
        for name, pair in KNOBS.items()
    }
    if values["expiry_after"] <= values["timer_after"]:
        p.error("--expiry-after must be later than --timer-after (a reminder comes first)")
    budget = a.budget
    if budget is None:
        budget = 300.0 if a.quick else 1200.0
        if "memory" in a.phases and not a.quick:
            budget += 2700.0
    return Options(
        concurrency=a.concurrency,
        click_concurrency=a.click_concurrency,
        budget=budget,
        profile=a.profile,
        phases=a.phases,
        levels=a.levels,
        quick=a.quick,
        **values,
    )


class OutOfBudget(Exception):
    """The run took longer than ``--budget``."""


async def _bounded(o: Options, admin_dsn: str, database: str) -> list[dict[str, Any]]:
    try:
        async with asyncio.timeout(o.budget) as budget:
            return await run(o, admin_dsn, database)
    except TimeoutError:
        if budget.expired():
            raise OutOfBudget from None
        raise  # a wait of the run's own that gave up: its traceback says which


def main(argv: Sequence[str] | None = None) -> int:
    o = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for name in PROXY_VARIABLES:  # loopback only; slack_sdk honours proxies but not NO_PROXY
        os.environ.pop(name, None)
        os.environ.pop(name.lower(), None)
    env_url = os.environ.get("TEST_DATABASE_URL")
    with postgres.server_dsn(env_url) as admin_dsn:
        try:
            lines = asyncio.run(
                _bounded(o, admin_dsn, "TEST_DATABASE_URL" if env_url else "embedded")
            )
        except OutOfBudget:
            progress(f"bench: gave up after the {o.budget:.0f} s budget (--budget)")
            return 1
    for line in lines:
        print(json.dumps(line, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
