"""What standing grants and rules that approve by themselves cost the intake: figures, never
assertions (``make bench`` runs it after governance.py; ``--help`` for the knobs).

One bot as :mod:`tests.bench.rig` builds it (production workers, the Slack stand-in in a process
of its own, real PostgreSQL), its policy with these rules first, and one load generator in a
process of its own posting ``--requests`` calls a run from ``--concurrency`` clients to ``POST
/v1/approvals`` (then ``--level-requests`` from one client: the cost of a call alone, without
contention). The targets, in a rotating order, ``--reps`` times:

``plain``
   a tool whose rule allows no grants (the catch-all): pending, a card. The run's baseline.
``grant rule, none live``
   a tool whose rule allows grants, none of them live: the lookup runs and finds nothing; a card.
``grant rule, 20 live, none match``
   20 live agent-wide grants for the tool, each holding ``account`` to another value: the lookup
   reads all 20 (its limit) and checks each; a card.
``grant used``
   calls a live grant meets (``amount`` at most its value): each is approved at once, no card;
   each use is one compare-and-set of the grant's row, which every concurrent client contends
   on (enough grants of 1 000 uses are made first).
``decide: approve``
   a rule that approves by itself: approved at once, no card.

Each grant is made as Approve & allow more makes it: a pending call, then the service's
``grant`` (every check of a click) by an approver of the rule. The table shows medians over
repetitions; ratios to ``plain`` are medians of per-repetition ratios (a noisy 2-core machine
drifts; pairs measured close together drift alike). The last line is JSON.

PostgreSQL: ``TEST_DATABASE_URL`` if set, else an embedded one (pgserver).
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import functools
import json
import logging
import multiprocessing
import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from approvals import service
from approvals.repository import Repository
from guards import authority
from tests.bench import loadgen
from tests.bench.rig import BenchHarness
from tests.support import harness, postgres

GRANTS = {"max_seconds": 86400, "max_uses": 1000, "scopes": ["session", "agent"]}
RULES = (
    # the used grants' cards in a channel of their own, where no run posts: the bench's stand-in
    # keeps only the last 5 000 messages of a channel, and each use updates its grant's card
    {"tool": "quote_used", "require": "approvers", "grants": GRANTS, "channel": harness.ONCALL},
    {"tool": "quote_*", "require": "approvers", "grants": GRANTS},
    {"tool": "lookup_*", "decide": "approve"},
)
BUSY = 20  # live_grants reads at most this many (queries.sql): the most a call is checked against
TARGETS = {  # name: (tool, arguments)
    "plain": ("bench_plain", {"account": "ACME", "amount": 10}),
    "grant rule, none live": ("quote_none", {"account": "ACME", "amount": 10}),
    f"grant rule, {BUSY} live, none match": ("quote_busy", {"account": "ACME", "amount": 10}),
    "grant used": ("quote_used", {"account": "ACME", "amount": 10}),
    "decide: approve": ("lookup_account", {"account": "ACME", "amount": 10}),
}
APPROVED = {"grant used", "decide: approve"}


class _Approver:
    """The grant maker's directory: the approver as Slack would describe them."""

    async def approver(self, slack_user_id: str, usergroups: frozenset[str]) -> authority.Approver:
        person = harness.APPROVER
        assert slack_user_id == person.id
        return authority.Approver(
            slack_user_id=person.id, email=person.email, name=person.name, usergroups=frozenset()
        )


async def make_grant(
    h: BenchHarness, approvals: service.ApprovalService, tool: str, arguments: dict[str, Any]
) -> None:
    """A pending call of ``tool``, approved with a grant (agent-wide, a day, 1 000 uses;
    ``account`` exactly, ``amount`` at most), as Approve & allow more does it."""
    body = h.request_body(
        request_id=f"grant-{time.time_ns()}",
        tool={"name": tool, "call_id": "c", "arguments": arguments},
    )
    status, created = await h.call("POST", "/v1/approvals", json_body=body)
    assert status == 201, created
    await h.quiesce()  # its card posted: a reviewer grants from the card
    terms = {
        "scope": "agent",
        "seconds": 86400,
        "uses": 1000,
        "kinds": {"account": "exactly", "amount": "at_most"},
    }
    result = await approvals.grant(
        created["approval_id"],
        slack_user_id=harness.APPROVER.id,
        terms=terms,
        directory=_Approver(),
    )
    assert isinstance(result, service.Settled), result


@dataclass(frozen=True)
class Sample:
    rps: float
    p50_ms: float
    p99_ms: float
    errors: int
    approved: int  # answers that were approved at once


async def post_run(
    h: BenchHarness, pool: concurrent.futures.Executor, name: str, count: int, concurrency: int
) -> Sample:
    tool, arguments = TARGETS[name]
    try:  # the last run's cards (and a grant's card at each use) done first
        await h.quiesce(timeout=60)
    except TimeoutError:  # rows retrying (e.g. a card Slack says is gone): say so, go on
        left = await h.outbox_backlog()
        print(f"  (outbox not drained: {left} rows still retrying)", file=sys.stderr, flush=True)
    prefix = f"g-{name.split()[0].strip(':')}-{time.time_ns()}"
    template = h.request_body(tool={"name": tool, "call_id": "c", "arguments": arguments})
    headers = {"Authorization": f"Bearer {harness.AGENT_TOKEN}"}
    loop = asyncio.get_running_loop()
    run: loadgen.Run = await loop.run_in_executor(
        pool,
        functools.partial(
            loadgen.post_json,
            h.base_url + "/v1/approvals",
            h.base_url + "/healthz",
            headers,
            template,
            prefix,
            count,
            concurrency,
        ),
    )
    conn = await h.probe()
    approved = await conn.fetchval(
        "SELECT count(*) FROM approvals WHERE request_id LIKE $1 AND status = 'approved'",
        prefix + "-%",
    )
    ordered = sorted(run.latencies)
    return Sample(
        rps=count / run.wall,
        p50_ms=statistics.median(ordered) * 1000,
        p99_ms=ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))] * 1000,
        errors=count - len(run.latencies),
        approved=int(approved),
    )


async def measure(
    o: argparse.Namespace,
    h: BenchHarness,
    pool: concurrent.futures.Executor,
    concurrency: int,
    count: int,
) -> dict[str, Any]:
    """Every target at ``concurrency`` clients, ``count`` POSTs a run, in a rotating order."""
    names = list(TARGETS)
    for name in names:
        await post_run(h, pool, name, o.warmup, concurrency)
    samples: dict[str, list[Sample]] = {name: [] for name in names}
    for rep in range(o.reps):
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            sample = await post_run(h, pool, name, count, concurrency)
            samples[name].append(sample)
            print(
                f"  rep {rep + 1} c{concurrency} {name:<32} {sample.rps:6.0f} req/s"
                f"  p50 {sample.p50_ms:6.1f} ms  p99 {sample.p99_ms:6.1f} ms",
                file=sys.stderr,
                flush=True,
            )
    return report(count, concurrency, o.reps, samples)


async def run(o: argparse.Namespace, admin_dsn: str) -> list[dict[str, Any]]:
    await postgres.create_template(admin_dsn)
    dsn = await postgres.fresh_database(admin_dsn)
    pool = concurrent.futures.ProcessPoolExecutor(
        max_workers=1, mp_context=multiprocessing.get_context("spawn")
    )
    h = BenchHarness(database_url=dsn, first_rules=RULES)
    store: Repository | None = None
    try:
        await h.start()
        store = await Repository.connect(dsn)
        current = h.config().policy
        approvals = service.ApprovalService(store=store, policy=lambda: current, clock=h.clock)
        for i in range(BUSY):  # live, agent-wide, for another account each: none matches
            await make_grant(h, approvals, "quote_busy", {"account": f"OTHER-{i}", "amount": 10})
        runs = [
            (level, o.requests if level == o.concurrency else o.level_requests)
            for level in (o.concurrency, 1)
        ]
        uses = sum(o.warmup + count * o.reps for _, count in runs) // 1000 + 1
        for i in range(uses):  # each above every earlier one's amount: no earlier grant meets it
            await make_grant(h, approvals, "quote_used", {"account": "ACME", "amount": 50 + i})
        return [await measure(o, h, pool, level, count) for level, count in runs]
    finally:
        if store is not None:
            await store.close()
        await h.stop()
        pool.shutdown(wait=True, cancel_futures=True)
        await postgres.drop_database(admin_dsn, dsn)


def _ratio(samples: list[Sample], base: list[Sample], attr: str) -> float:
    ratios: list[float] = [
        getattr(s, attr) / getattr(b, attr) for s, b in zip(samples, base, strict=True)
    ]
    return statistics.median(ratios)


def report(
    requests: int, concurrency: int, reps: int, samples: dict[str, list[Sample]]
) -> dict[str, Any]:
    print(
        f"POST /v1/approvals with grants and self-deciding rules — {requests} requests a run, "
        f"{concurrency} clients, {reps} repetitions; medians, ratios to plain"
    )
    print(f"{'target':<34}{'req/s':>7}{'p50 ms':>8}{'p99 ms':>8}{'x req/s':>9}{'x p50':>7}")
    base = samples["plain"]
    line: dict[str, Any] = {
        "bench": f"grants_intake_c{concurrency}",
        "requests": requests,
        "concurrency": concurrency,
        "reps": reps,
    }
    for name, taken in samples.items():
        figures = {
            "rps": statistics.median(s.rps for s in taken),
            "p50_ms": statistics.median(s.p50_ms for s in taken),
            "p99_ms": statistics.median(s.p99_ms for s in taken),
            "rps_ratio": _ratio(taken, base, "rps"),
            "p50_ratio": _ratio(taken, base, "p50_ms"),
            "errors": sum(s.errors for s in taken),
            "approved_at_once": sum(s.approved for s in taken),
        }
        expected = requests * reps if name in APPROVED else 0
        figures["approved_as_expected"] = figures["approved_at_once"] == expected
        line[name] = {k: round(v, 3) if isinstance(v, float) else v for k, v in figures.items()}
        print(
            f"{name:<34}{figures['rps']:7.0f}{figures['p50_ms']:8.1f}{figures['p99_ms']:8.1f}"
            f"{figures['rps_ratio']:8.2f}x{figures['p50_ratio']:6.2f}x"
            + ("" if figures["approved_as_expected"] else "  (approved at once: unexpected count)")
        )
    print(json.dumps(line, sort_keys=True))
    return line


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tests.bench.grants", description=__doc__)
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("--requests", type=int, default=None, help="POSTs a run (1000; quick 100)")
    p.add_argument("--warmup", type=int, default=None, help="warm-up POSTs a target (200; 20)")
    p.add_argument("--reps", type=int, default=None, help="repetitions (3; quick 1)")
    p.add_argument(
        "--level-requests", type=int, default=None, help="POSTs a run at 1 client (200; 20)"
    )
    p.add_argument("--concurrency", type=int, default=32, help="concurrent clients (32)")
    p.add_argument("--quick", action="store_true", help="small: a smoke test, not figures")
    o = p.parse_args(argv)
    knobs = (
        ("requests", 1000, 100),
        ("warmup", 200, 20),
        ("reps", 3, 1),
        ("level_requests", 200, 20),
    )
    for name, default, quick in knobs:
        if getattr(o, name) is None:
            setattr(o, name, quick if o.quick else default)
    return o


def main(argv: Sequence[str] | None = None) -> int:
    o = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):  # loopback only
        os.environ.pop(name, None)
        os.environ.pop(name.lower(), None)
    with postgres.server_dsn(os.environ.get("TEST_DATABASE_URL")) as admin_dsn:
        asyncio.run(run(o, admin_dsn))
    return 0


if __name__ == "__main__":
    sys.exit(main())
