"""Governance benchmark: figures, never assertions (``make bench`` runs it after bench.py).

1. Click → settlement with quorum 2 under 20 concurrent clickers: 20 signed Approve clicks by
   five eligible approvers (and the requester) at once on one approval; time from sending them
   to the agent receiving the signed callback, repeated; p50/p99.
2. Timer firing delay behind ``due_at`` with 1 000 pending approvals: each has a reminder due
   600 s after creation; the test clock is shifted so they fall due at the pace they were
   created, and each reminder's delay is (posted in the card's thread) − (due). The timer loop
   runs with the production bound (1 s) and this includes the relay's post to Slack; p50/p99.
   The clock jumps forward here, which a loop sleeping until the next due time learns of only
   at its bound: issue 12's figure is bench.py's ``timers`` phase (real clock, the delays as
   the bot stamped them in the database).

Loopback only, bounded in count and time. PostgreSQL: ``TEST_DATABASE_URL`` or embedded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import sys
import time
from collections.abc import Sequence

from bot import app as bot_app
from tests.support import harness, postgres

PRODUCTION_TIMERS = bot_app.Workers(poll_interval=1.0, expiry_interval=1.0, lookup_ttl=60.0)
# release_* and wire_* need finance, whose ceiling names amount: part of the tool's contract
RELEASE = {"name": "release_build", "call_id": "rel", "arguments": {"build": 1, "amount": 1}}


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def quorum(h: harness.Harness, rounds: int) -> list[float]:
    latencies = []
    clickers = [harness.REQUESTER, *harness.FINANCE] * 4  # 24 clicks, 20 of them eligible
    for i in range(rounds):
        body = h.request_body(
            request_id=f"q{i}",
            tool={"name": "wire_funds", "call_id": f"w{i}", "arguments": {"amount": 1}},
        )
        _, created = await h.call("POST", "/v1/approvals", json_body=body)
        await h.card_ts(created["approval_id"])
        before = len(h.receiver.delivered)
        started = time.perf_counter()
        await asyncio.gather(*(h.click(u, created["approval_id"]) for u in clickers[:20]))
        await h.receiver.wait_delivered(before + 1, timeout=30)
        latencies.append((time.perf_counter() - started) * 1000)
    return latencies


async def timers(h: harness.Harness, count: int) -> list[float]:
    created_at: dict[str, float] = {}
    t0 = time.perf_counter()
    for i in range(count):
        body = h.request_body(request_id=f"t{i}", tool={**RELEASE, "call_id": f"rel-{i}"})
        _, created = await h.call("POST", "/v1/approvals", json_body=body)
        created_at[created["approval_id"]] = time.perf_counter()
    await h.standin.wait_for(
        lambda: len(h.standin.messages.get(harness.CHANNEL, [])) >= count, timeout=120
    )
    ts_of = {
        a: str(m["ts"])
        for m in h.standin.messages[harness.CHANNEL]
        for a in created_at
        if a in json.dumps(m["blocks"])
    }
    # replay the creation schedule shifted by `shift`: approval i falls due at created_i + shift
    shift = time.perf_counter() - t0 + 1.0
    h.clock.advance(600 - shift)
    seen: dict[str, float] = {}
    deadline = time.perf_counter() + shift + 60
    while len(seen) < count and time.perf_counter() < deadline:
        now = time.perf_counter()
        for message in h.standin.messages[harness.CHANNEL]:
            thread = message.get("thread_ts")
            if thread and thread not in seen:
                seen[str(thread)] = now
        await asyncio.sleep(0.01)
    return [
        (seen[ts_of[a]] - (created_at[a] + shift)) * 1000
        for a in created_at
        if a in ts_of and ts_of[a] in seen
    ]


async def run(admin_dsn: str, rounds: int, count: int) -> dict[str, object]:
    await postgres.create_template(admin_dsn)
    results: dict[str, object] = {}
    for name in ("quorum", "timers"):
        dsn = await postgres.fresh_database(admin_dsn)
        h = harness.Harness(database_url=dsn, workers=PRODUCTION_TIMERS, paced=False)
        await h.start()
        try:
            if name == "quorum":
                values = await quorum(h, rounds)
            else:
                values = await timers(h, count)
        finally:
            await h.stop()
            await postgres.drop_database(admin_dsn, dsn)
        results[name] = {
            "n": len(values),
            "p50_ms": round(statistics.median(values), 1),
            "p99_ms": round(pct(values, 0.99), 1),
            "max_ms": round(max(values), 1),
        }
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.governance", description=__doc__)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--approvals", type=int, default=1000)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        os.environ.pop(name, None)
    with postgres.server_dsn(os.environ.get("TEST_DATABASE_URL")) as admin_dsn:
        results = asyncio.run(run(admin_dsn, args.rounds, args.approvals))
    quorum_r, timers_r = results["quorum"], results["timers"]
    print("Governance bench (loopback stand-in, production intervals: sweep 1 s, relay poll 1 s)")
    print(f"click → settlement, quorum 2, 20 concurrent clickers: {quorum_r}")
    print(f"timer delay behind due_at, {args.approvals} pending approvals: {timers_r}")
    print(json.dumps({"governance": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
