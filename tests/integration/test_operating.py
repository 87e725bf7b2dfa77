"""What an operator sees: ``/readyz`` names what is not ready (the database, Slack, the relay),
and ``/metrics`` shows the backlog, dead letters, pending approvals and the latencies, all on
real parts (aiohttp, PostgreSQL, the Slack stand-in, an agent receiver)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import aiohttp
import asyncpg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from approvals import models, sql_loader
from approvals.repository import Repository
from bot import app as bot_app
from bot import slack_setup
from bot.sandbox.standin import SlackStandIn
from tests.support import postgres, waiting
from tests.support.harness import BOT_TOKEN, FINANCE, Harness
from tests.support.records import T0, approval, approved

LATEST = max(version for version, _, _ in sql_loader.migrations())
ALL_OK = {"database": {"ok": True}, "slack": {"ok": True}, "relay": {"ok": True}}
TRANSFERS = "rules[0] tool=transfer_*"


async def _ready(harness: Harness, base_url: str | None = None) -> tuple[int, Any]:
    assert harness.session is not None
    async with harness.session.get((base_url or harness.base_url) + "/readyz") as response:
        return response.status, await response.json()


async def _scrape(harness: Harness) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of ``/metrics``, by name and labels."""
    status, text = await harness.call("GET", "/metrics", token=None)
    assert status == 200
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _value(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


# -- /readyz ------------------------------------------------------------------------------------


async def test_ready_when_the_database_slack_and_the_relay_are(harness: Harness) -> None:
    assert await _ready(harness) == (200, {"ready": True, "checks": ALL_OK})
    asked = len(harness.standin.methods_called("auth.test"))
    for _ in range(3):
        assert (await _ready(harness))[0] == 200
    # Slack's answer is kept: probes do not call Slack each time
    assert len(harness.standin.methods_called("auth.test")) == asked
    status, body = await harness.call("GET", "/healthz", token=None)
    assert (status, body) == (200, {"ok": True})


async def test_not_ready_naming_the_database_when_postgresql_is_gone(pg_template: str) -> None:
    dsn = await postgres.fresh_database(pg_template)
    harness = await Harness(database_url=dsn).start()
    try:
        assert (await _ready(harness))[0] == 200
        # FORCE: the bot's connections are cut, and new ones find no database
        await postgres.drop_database(pg_template, dsn)
        status, body = await asyncio.wait_for(_ready(harness), timeout=5)
        assert status == 503
        assert body["ready"] is False
        database = body["checks"]["database"]
        assert database["ok"] is False
        assert database["problem"].startswith("DATABASE_URL: cannot reach the database: ")
        assert body["checks"]["slack"] == {"ok": True}
        assert body["checks"]["relay"] == {"ok": True}  # its loop keeps turning, and retrying
        # alive all the same: restarting the process would not bring the database back
        assert (await harness.call("GET", "/healthz", token=None))[0] == 200
        # the metrics still answer, and say that their gauges are stale
        samples = await _scrape(harness)
        assert _value(samples, "countersign_database_up") == 0
        # and what /readyz says, for alerting
        assert _value(samples, "countersign_ready", check="database") == 0
        assert _value(samples, "countersign_ready", check="slack") == 1
        assert _value(samples, "countersign_ready", check="relay") == 1
    finally:
        await harness.stop()


async def test_not_ready_when_the_schema_is_behind_this_code(
    harness: Harness, database_url: str
) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("DELETE FROM schema_migrations WHERE version = $1", LATEST)
    finally:
        await conn.close()
    status, body = await _ready(harness)
    assert status == 503
    assert body["checks"]["database"] == {
        "ok": False,
        "problem": f"the database schema is at migration {LATEST - 1}, this code needs "
        f"{LATEST}: run countersign migrate",
    }


async def test_ready_when_the_schema_is_ahead_of_this_code(
    harness: Harness, database_url: str
) -> None:
    """A rolling deploy: a newer replica migrated first; this one stays in service."""
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            "INSERT INTO schema_migrations (version, name) VALUES ($1, 'from_a_newer_release')",
            LATEST + 1,
        )
    finally:
        await conn.close()
    status, body = await _ready(harness)
    assert (status, body["checks"]["database"]) == (200, {"ok": True})


async def test_not_ready_naming_the_relay_when_its_task_stopped(harness: Harness) -> None:
    base_url, runner, store = await harness.serve_bot()
    try:
        task = runner.app[bot_app.READY].relay_task
        assert task is not None
        task.cancel()
        await asyncio.wait([task])
        status, body = await _ready(harness, base_url)
        assert status == 503
        assert body["checks"]["relay"] == {
            "ok": False,
            "problem": "the outbox relay stopped: cancelled",
        }
        assert body["checks"]["database"] == {"ok": True}
    finally:
        await runner.cleanup()
        await store.close()


async def test_not_ready_naming_slack_when_it_refuses_the_token(harness: Harness) -> None:
    harness.standin.token = "xoxb-another-token"  # the bot's token is no longer the app's
    base_url, runner, store = await harness.serve_bot(workers=False)
    try:
        status, body = await _ready(harness, base_url)
        assert status == 503
        slack = body["checks"]["slack"]
        assert slack["ok"] is False
        assert slack["problem"].startswith("SLACK_BOT_TOKEN: Slack refused it (invalid_auth): ")
    finally:
        await runner.cleanup()
        await store.close()


# -- Slack's verdict on the token, kept -----------------------------------------------------------


@pytest.fixture
async def slack() -> AsyncIterator[tuple[SlackStandIn, aiohttp.ClientSession]]:
    standin = SlackStandIn(token=BOT_TOKEN)
    await standin.start()
    async with aiohttp.ClientSession() as session:
        yield standin, session
    await standin.stop()


async def test_slack_auth_is_asked_again_only_after_its_interval(
    slack: tuple[SlackStandIn, aiohttp.ClientSession],
) -> None:
    standin, session = slack
    client = bot_app.slack_client(BOT_TOKEN, standin.base_url, session)
    kept = slack_setup.SlackAuth(client, standin.base_url, recheck_after=3600)
    assert await kept.problem() is None
    standin.token = "xoxb-revoked"
    assert await kept.problem() is None  # the kept answer: Slack is not asked again yet
    assert len(standin.methods_called("auth.test")) == 1
    fresh = slack_setup.SlackAuth(client, standin.base_url, recheck_after=0)
    problem = await fresh.problem()
    assert problem is not None
    assert problem.startswith("SLACK_BOT_TOKEN: Slack refused it (invalid_auth)")
    standin.token = BOT_TOKEN
    assert await fresh.problem() is None  # the token works again: ready again


async def test_slack_out_of_reach_keeps_the_last_verdict(
    slack: tuple[SlackStandIn, aiohttp.ClientSession],
) -> None:
    standin, session = slack
    url = standin.base_url
    client = bot_app.slack_client(BOT_TOKEN, url, session)
    known = slack_setup.SlackAuth(client, url, recheck_after=0)
    assert await known.problem() is None
    never = slack_setup.SlackAuth(client, url, recheck_after=0)
    await standin.stop()
    # Slack away: intake goes on and cards wait in the outbox, so the token's verdict stands
    assert await known.problem() is None
    problem = await never.problem()  # but without one, nothing says the token works
    assert problem is not None
    assert problem.startswith(f"SLACK_API_URL: cannot reach Slack at {url}: ")


# -- /metrics -----------------------------------------------------------------------------------


async def test_metrics_after_approvals_clicks_and_deliveries(harness: Harness) -> None:
    before = await _scrape(harness)
    ids = [(await harness.submit(request_id=f"m-{n}"))["approval_id"] for n in range(3)]
    for approval_id in ids:
        await harness.card_ts(approval_id)
    assert await harness.click(FINANCE[0], ids[0]) == 200
    await harness.receiver.wait_delivered(1)

    async def quiet() -> bool:
        samples = await _scrape(harness)
        delivered = _value(samples, "countersign_settled_delivered_seconds_count")
        backlog = sum(
            _value(samples, "countersign_outbox_backlog", kind=k.value) for k in models.OutboxKind
        )
        return backlog == 0 and delivered > _value(
            before, "countersign_settled_delivered_seconds_count"
        )

    await waiting.until(quiet, what="the callback delivered and the outbox empty")
    after = await _scrape(harness)

    def grew(name: str) -> float:
        return _value(after, name) - _value(before, name)

    assert _value(after, "countersign_pending_approvals", rule=TRANSFERS) == 2
    assert grew("countersign_card_posted_seconds_count") == 3
    assert grew("countersign_settled_delivered_seconds_count") == 1
    assert grew("countersign_click_settled_seconds_count") == 1
    assert _value(after, "countersign_database_up") == 1
    for kind in models.OutboxKind:
        assert _value(after, "countersign_outbox_oldest_seconds", kind=kind.value) == 0
        assert _value(after, "countersign_outbox_dead", kind=kind.value) == 0


async def test_snapshot_counts_backlog_dead_letters_and_pending(store: Repository) -> None:
    pending, settled = approval(1), approval(2)
    post = models.OutboxEntry(approval_id=pending.approval_id, work=models.PostCard())
    await store.create_approval(pending, [post])
    await store.create_approval(settled, [])
    callback = models.OutboxEntry(
        approval_id=settled.approval_id,
        work=models.Callback(url="u", body="{}", agent=settled.agent),
    )
    await store.settle(approved(settled), None, [callback])
    now = T0 + timedelta(minutes=10)
    snapshot = await store.snapshot(now)
    assert snapshot.pending == {TRANSFERS: 1}
    assert snapshot.dead == {}
    assert snapshot.backlog[models.OutboxKind.POST_CARD].rows == 1
    assert snapshot.backlog[models.OutboxKind.POST_CARD].oldest_seconds == 600
    assert snapshot.backlog[models.OutboxKind.CALLBACK].oldest_seconds == 540  # settled at +1 min

    items = await store.claim_outbox(now, now + timedelta(minutes=2), 10)
    dead = next(i for i in items if i.kind is models.OutboxKind.CALLBACK)
    await store.outbox_dead(dead, now, "gone")
    snapshot = await store.snapshot(now)
    assert snapshot.dead == {models.OutboxKind.CALLBACK: 1}
    assert set(snapshot.backlog) == {models.OutboxKind.POST_CARD}


async def test_schema_version_is_the_latest_migration(store: Repository) -> None:
    assert await store.schema_version() == LATEST


# -- the gauges' queries stay on indexes --------------------------------------------------------

# a large delivered history: a scrape must not read it
HISTORY = 20_000


async def _history(dsn: str) -> None:
    """``HISTORY`` settled approvals, each with a delivered outbox row, then ANALYZE."""
    store = await Repository.connect(dsn, listen=False)
    try:
        await store.create_approval(approval(1), [])
    finally:
        await store.close()
    conn = await asyncpg.connect(dsn)
    try:
        columns = await conn.fetch(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'approvals'"
            " ORDER BY ordinal_position"
        )
        names = [c["column_name"] for c in columns]
        varied = {
            "approval_id": "a.approval_id || '_' || g",
            "request_id": "a.request_id || '_' || g",
            "status": "'approved'",
        }
        picked = ", ".join(varied.get(n, f"a.{n}") for n in names)
        await conn.execute(
            f"INSERT INTO approvals ({', '.join(names)}) SELECT {picked} "
            f"FROM approvals a, generate_series(1, {HISTORY}) g"
        )
        await conn.execute(
            "INSERT INTO outbox (approval_id, kind, payload, created_at, next_attempt_at,"
            " attempts, done_at) SELECT approval_id, 'callback', '{}', created_at, created_at,"
            " 1, created_at FROM approvals WHERE status = 'approved'"
        )
        await conn.execute("ANALYZE")
    finally:
        await conn.close()


@pytest.mark.parametrize(
    "query", ["outbox_backlog", "outbox_dead_by_kind", "pending_by_rule", "outbox_next_due"]
)
async def test_the_gauges_queries_use_partial_indexes(database_url: str, query: str) -> None:
    await _history(database_url)
    conn = await asyncpg.connect(database_url)
    try:
        sql = sql_loader.queries()[query].replace("$1", "now()")  # the backlog's "now"
        plan = "\n".join(r[0] for r in await conn.fetch("EXPLAIN " + sql))
    finally:
        await conn.close()
    assert "Seq Scan" not in plan, plan
