"""Countersign benchmark: figures, never assertions on timings.

``python -m tests.bench.bench`` (``make bench``; ``--help`` for the knobs). Everything runs on
loopback, on real parts: the bot as :mod:`tests.bench.rig` builds it (PostgreSQL, the Slack
stand-in in its own process, an agent receiver), a bare aiohttp + asyncpg baseline in the same
process and the same PostgreSQL, and one load generator in a process of its own that drives
both alike.

1. ``POST /v1/approvals`` at 32 concurrent clients: throughput and latency p50/p99 of Countersign
   beside a *null* handler (parse JSON, answer) and the *baseline* (parse JSON, one INSERT).
   Countersign runs twice: as deployed, and with its outbox relay stopped (the request path
   alone; the cards it queued are then marked done unposted). CPU per request is counted from
   /proc until the relay has posted every card the run queued, per process group.
2. Slack Approve clicks on pending approvals by an eligible approver: latency of bolt's ack (the
   HTTP answer of ``/slack/events``) beside a baseline ack (signature check + payload parse), and
   click → signed callback received by the agent, split at the settlement's ``decided_at``.

Each measurement is repeated (3 times by default), the targets in a rotating order so that
drift on a noisy machine hits all of them alike; the table shows medians over repetitions,
ratios are medians of per-repetition ratios. The last lines are JSON, one object a line.

PostgreSQL: ``TEST_DATABASE_URL`` if set, else an embedded one (pgserver).
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
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
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

import asyncpg

from tests.bench import loadgen
from tests.bench.baseline import Baseline
from tests.bench.cpu import CpuMeter, postmaster_of
from tests.bench.rig import PRODUCTION_WORKERS, BenchHarness
from tests.support import harness, postgres

T = TypeVar("T")

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
POST_TARGETS = ("null", "baseline", "countersign-norelay", "countersign")
POST_LABELS = {
    "null": "null (parse JSON, answer)",
    "baseline": "baseline (parse + 1 INSERT)",
    "countersign-norelay": "countersign, relay stopped",
    "countersign": "countersign",
}
CLICK_TARGETS = ("baseline", "countersign")


# --------------------------------------------------------------------------- figures


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100) of a non-empty sequence."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(p / 100 * len(ordered))) - 1]


def ms(values: Sequence[float], p: float) -> float | None:
    return percentile(values, p) * 1000 if values else None


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


@dataclass(frozen=True)
class Options:
    requests: int
    warmup: int
    concurrency: int
    reps: int
    clicks: int
    click_concurrency: int
    budget: float
    profile: str | None


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
    ) -> None:
        self.o = options
        self.bot = bot
        self.baseline = baseline
        self.pool = pool
        self.meter = meter
        self.profiler = cProfile.Profile() if options.profile else None
        self._tag = 0

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

    # -- 1. POST /v1/approvals -----------------------------------------------------------

    def post_url(self, name: str) -> tuple[str, str]:
        """(POST url, url that opens the connections) of a target."""
        b, c = self.baseline.base_url, self.bot.base_url
        return {
            "null": (b + "/null", b + "/healthz"),
            "baseline": (b + "/v1/approvals", b + "/healthz"),
            "countersign-norelay": (c + "/v1/approvals", c + "/healthz"),
            "countersign": (c + "/v1/approvals", c + "/healthz"),
        }[name]

    async def post_once(self, name: str, count: int) -> PostSample:
        norelay = name == "countersign-norelay"
        await self.bot.quiesce()
        if norelay:
            await self.bot.stop_bot()
            await self.bot.start_bot(workers=False)
        url, prime = self.post_url(name)
        headers = {"Authorization": f"Bearer {harness.AGENT_TOKEN}"}
        self.profiling(name.startswith("countersign"))
        before = self.meter.snapshot()
        run: loadgen.Run = await self.in_pool(
            loadgen.post_json,
            url,
            prime,
            headers,
            self.bot.request_body(),
            self.tag(name),
            count,
            self.o.concurrency,
        )
        drain = None if norelay else await self.bot.quiesce()
        used = CpuMeter.used(before, self.meter.snapshot())
        self.profiling(False)
        if norelay:
            await self.bot.mark_cards_done()
            await self.bot.stop_bot()
            await self.bot.start_bot()
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

    async def post_phase(self) -> dict[str, list[PostSample]]:
        for name in POST_TARGETS:
            await self.post_once(name, self.o.warmup)
        samples: dict[str, list[PostSample]] = {name: [] for name in POST_TARGETS}
        for rep in range(self.o.reps):
            shift = rep % len(POST_TARGETS)
            for name in POST_TARGETS[shift:] + POST_TARGETS[:shift]:
                s = await self.post_once(name, self.o.requests)
                samples[name].append(s)
                progress(
                    f"  rep {rep + 1} {name:<20} {s.rps:6.0f} req/s  p50 {fmt(s.p50_ms):>6} ms"
                    f"  p99 {fmt(s.p99_ms):>6} ms  errors {s.errors}"
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

    async def click_once(self, name: str, ids: list[str]) -> ClickSample:
        base = self.bot.base_url if name == "countersign" else self.baseline.base_url
        approvers = harness.FINANCE  # in S0FINANCE, not the requester: every click settles
        targets = [
            (approval_id, approvers[i % len(approvers)].id, approvers[i % len(approvers)].name)
            for i, approval_id in enumerate(ids)
        ]
        self.profiling(name == "countersign")
        run: loadgen.ClickRun = await self.in_pool(
            loadgen.clicks,
            base + "/slack/events",
            base + "/healthz",
            harness.SIGNING_SECRET,
            harness.CHANNEL,
            targets,
            self.o.click_concurrency,
        )
        acks = [c.latency for c in run.clicks if c.status == 200]
        if name != "countersign":
            self.profiling(False)
            top = max(acks) * 1000 if acks else None
            return ClickSample(ms(acks, 50), ms(acks, 99), top, len(run.clicks) - len(acks))
        arrivals = await self.bot.timed.wait_arrivals(ids, timeout=30.0)
        decided = self.bot.timed.decided_at()
        callbacks: list[float] = []
        settled: list[float] = []
        relayed: list[float] = []
        for c in run.clicks:
            if c.approval_id in arrivals:
                mono, wall = arrivals[c.approval_id]
                callbacks.append(mono - c.sent)
                if c.approval_id in decided:
                    settled.append(decided[c.approval_id] - c.sent_wall)
                    relayed.append(wall - decided[c.approval_id])
        await self.bot.quiesce()  # the card updates
        self.profiling(False)
        return ClickSample(
            ack_p50_ms=ms(acks, 50),
            ack_p99_ms=ms(acks, 99),
            ack_max_ms=max(acks) * 1000 if acks else None,
            errors=len(run.clicks) - len(acks),
            callback_p50_ms=ms(callbacks, 50),
            callback_p99_ms=ms(callbacks, 99),
            callback_max_ms=max(callbacks) * 1000 if callbacks else None,
            settled_p50_ms=ms(settled, 50),
            settled_p99_ms=ms(settled, 99),
            relay_p50_ms=ms(relayed, 50),
            relay_p99_ms=ms(relayed, 99),
            missing_callbacks=len(ids) - len(callbacks),
        )

    async def click_phase(self) -> dict[str, list[ClickSample]]:
        warm = await self.pending(min(20, self.o.clicks))
        for name in CLICK_TARGETS:  # also fills the approver directory's cache (TTL 60 s)
            await self.click_once(name, warm)
        samples: dict[str, list[ClickSample]] = {name: [] for name in CLICK_TARGETS}
        for rep in range(self.o.reps):
            ids = await self.pending(self.o.clicks)
            for name in CLICK_TARGETS if rep % 2 == 0 else CLICK_TARGETS[::-1]:
                s = await self.click_once(name, ids)
                samples[name].append(s)
                progress(
                    f"  rep {rep + 1} click {name:<12} ack p50 {fmt(s.ack_p50_ms):>5} ms"
                    f"  p99 {fmt(s.ack_p99_ms):>5} ms  callback p50 {fmt(s.callback_p50_ms)} ms"
                    f"  p99 {fmt(s.callback_p99_ms)} ms"
                )
        return samples


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
    for f in ("errors", "missing_callbacks"):
        if f in out:
            out[f] = sum(getattr(s, f) for s in samples)
    out["per_rep"] = {f: [_round(getattr(s, f)) for s in samples] for f in names}
    return out


def x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def report(
    o: Options,
    env: dict[str, Any],
    posts: dict[str, list[PostSample]],
    clicks: dict[str, list[ClickSample]],
) -> list[dict[str, Any]]:
    rule = "-" * 100
    print()
    print(
        f"Countersign bench — {env['cpus']} CPUs, Python {env['python']}, PostgreSQL "
        f"{env['postgres']} ({env['database']}); load average {env['loadavg_start']} at start"
    )
    print(
        f"medians of {o.reps} repetitions; ratios are medians of per-repetition ratios; "
        f"bot workers {env['workers']}"
    )
    print(rule)
    print(
        f"POST /v1/approvals — {o.requests} requests a run, {o.concurrency} concurrent clients, "
        f"{o.warmup} warm-up; CPU µs/request counted until the relay has posted the run's cards"
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
    for name in ("countersign", "countersign-norelay"):
        r = ratios[name] = {
            a: paired_ratio(posts[name], posts["baseline"], a)
            for a in ("rps", "p50_ms", "p99_ms", "server_cpu_us", "pg_cpu_us")
        }
        print(
            f"{'ratio ' + name.replace('countersign', 'cs') + '/baseline':<29}{x(r['rps']):>7}"
            f"{'':>12}{x(r['p50_ms']):>8}{x(r['p99_ms']):>8}"
            f" |{x(r['server_cpu_us']):>7}{x(r['pg_cpu_us']):>7}"
        )
    cs = posts["countersign"]
    print(
        "CPU columns, µs per request: bot = this process (the bot or the baseline, the agent "
        "receiver);\n  pg = the bench's PostgreSQL; slack = the stand-in's process; client = "
        "the load generator.\n  other = cores kept busy by other processes on the machine "
        "(noise), average over the runs"
    )
    print(
        f"countersign: the cards still queued when a run's last answer came took "
        f"{fmt(med(cs, 'drain_s'), 2)} s more to post;\n  counting that, "
        f"{fmt(med(cs, 'carded_rps'), 0)} approvals/s were taken in and shown (the stand-in has "
        f"no rate limit; Slack's is ~1 message/s per channel)"
    )
    print(rule)
    print(
        f"Slack click → ack (HTTP answer of /slack/events) — {o.clicks} Approve clicks a run on as "
        f"many pending approvals, eligible approvers, {o.click_concurrency} at a time"
    )
    print(f"{'':<29}{'p50 ms':>8}{'p99 ms':>8}{'max ms':>8}{'err':>5}")
    click_labels = {"baseline": "baseline ack (verify, parse)", "countersign": "countersign ack"}
    for name, click_runs in clicks.items():
        print(
            f"{click_labels[name]:<29}{fmt(med(click_runs, 'ack_p50_ms')):>8}"
            f"{fmt(med(click_runs, 'ack_p99_ms')):>8}{fmt(med(click_runs, 'ack_max_ms')):>8}"
            f"{sum(s.errors for s in click_runs):>5}"
        )
    cc, cb = clicks["countersign"], clicks["baseline"]
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
    print(rule)
    return [
        {
            "bench": "post_approvals",
            "requests": o.requests,
            "concurrency": o.concurrency,
            "reps": o.reps,
            "targets": {name: summary(samples) for name, samples in posts.items()},
            "ratio_to_baseline": {
                name: {k: _round(v) for k, v in r.items()} for name, r in ratios.items()
            },
        },
        {
            "bench": "slack_click",
            "clicks": o.clicks,
            "concurrency": o.click_concurrency,
            "reps": o.reps,
            "targets": {name: summary(samples) for name, samples in clicks.items()},
            "ratio_to_baseline": {"countersign": {k: _round(v) for k, v in ack_ratio.items()}},
        },
        {"bench": "env", **env},
    ]


# --------------------------------------------------------------------------- main


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
    try:
        conn = await asyncpg.connect(dsn)
        try:
            pg_version = str(await conn.fetchval("SHOW server_version"))
        finally:
            await conn.close()
        bot = await BenchHarness(database_url=dsn).start()
        baseline = await Baseline.start(dsn, harness.SIGNING_SECRET)
        meter = CpuMeter(await postmaster_of(dsn), bot.slack.pid)
        bench = Bench(o, bot, baseline, pool, meter)
        started = time.perf_counter()
        progress("POST /v1/approvals …")
        posts = await bench.post_phase()
        progress("Slack clicks …")
        clicks = await bench.click_phase()
        env = {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "postgres": pg_version,
            "database": database,
            "loadavg_start": loadavg,
            "loadavg_end": " ".join(f"{v:.2f}" for v in os.getloadavg()),
            "workers": {k: v for k, v in asdict(PRODUCTION_WORKERS).items() if k != "run"},
            "seconds": round(time.perf_counter() - started, 1),
            "profiled": o.profile is not None,
        }
        lines = report(o, env, posts, clicks)
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


def parse_args(argv: Sequence[str] | None) -> Options:
    p = argparse.ArgumentParser(prog="python -m tests.bench.bench", description=__doc__)
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("--requests", type=int, default=2000, help="POSTs a run (2000)")
    p.add_argument("--warmup", type=int, default=300, help="warm-up POSTs a target (300)")
    p.add_argument("--concurrency", type=int, default=32, help="concurrent POST clients (32)")
    p.add_argument("--reps", type=int, default=3, help="repetitions of each measurement (3)")
    p.add_argument("--clicks", type=int, default=200, help="clicks a run (200)")
    p.add_argument("--click-concurrency", type=int, default=1, help="clicks at a time (1)")
    p.add_argument("--budget", type=float, default=170.0, help="give up after SECONDS (170)")
    p.add_argument("--profile", metavar="FILE", help="cProfile this process into FILE")
    a = p.parse_args(argv)
    return Options(
        requests=a.requests,
        warmup=a.warmup,
        concurrency=a.concurrency,
        reps=a.reps,
        clicks=a.clicks,
        click_concurrency=a.click_concurrency,
        budget=a.budget,
        profile=a.profile,
    )


async def _bounded(o: Options, admin_dsn: str, database: str) -> list[dict[str, Any]]:
    async with asyncio.timeout(o.budget):
        return await run(o, admin_dsn, database)


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
        except TimeoutError:
            progress(f"bench: gave up after the {o.budget:.0f} s budget")
            return 1
    for line in lines:
        print(json.dumps(line, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
