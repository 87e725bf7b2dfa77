"""The hot queries read indexes, not whole tables, once the tables have history.

A database with a few thousand settled and pending approvals (and their settlements, attempts,
outbox rows, timers and turn verdicts: :mod:`tests.bench.seed`, cloned from rows the bot made
itself) is ANALYZEd; then each hot query of ``approvals/sql/queries.sql``, taken by name as the
repository runs it, is EXPLAINed twice: with its parameters (the custom plan PostgreSQL makes
for a statement's first executions) and as the generic plan (``plan_cache_mode =
force_generic_plan``: what a prepared statement, asyncpg's way, may switch to after five). No plan
may hold a ``Seq Scan`` of a table that grows with use. ``enable_seqscan`` stays on: the planner
is free to choose, and it must not choose to read the history.

Plans are not timings: this is a structural check, the figures are ``make bench``'s (growth).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from approvals import audit_chain, sql_loader
from tests.bench import seed
from tests.support import harness, postgres

# the tables that grow with every approval
BIG = frozenset({"approvals", "outbox", "timers", "attempts", "settlements", "turn_verdicts"})
SETTLED = 20000
PENDING = 3000

# seeding and two plans per query, once per module: on one worker under pytest-xdist
pytestmark = [pytest.mark.timeout(180), pytest.mark.xdist_group("query_plans")]


# the sealer's reads of each kind of event (a range of the chain's order: audit_events_KIND),
# and the export's (events at or after a time: audit_export_KIND), as many as queries.sql has
AUDIT_EVENTS = tuple(n for n in sql_loader.queries() if n.startswith("audit_events_"))
AUDIT_EXPORT = tuple(n for n in sql_loader.queries() if n.startswith("audit_export_"))
# the kind of event each audit_events_ query reads (its table's key is a number or a text)
AUDIT_KINDS = {
    "attempts": "attempt",
    "created": "created",
    "deliveries": "delivery",
    "edits": "edit",
    "claims": "execution",
    "grants": "grant",
    "outcomes": "outcome",
    "passkeys": "passkey",
    "settlements": "settlement",
    "timers": "timer",
    "turns": "turn",
}


@dataclass(frozen=True)
class Seeded:
    dsn: str
    templates: seed.Templates
    horizon: int  # a transaction id after the seeding: where the sealer would read from


@pytest.fixture(scope="module")
async def seeded(pg_template: str) -> AsyncIterator[Seeded]:
    dsn = await postgres.fresh_database(pg_template)
    try:
        conn = await asyncpg.connect(dsn)
        try:
            bot = await harness.Harness(database_url=dsn).start()
            try:
                templates = await seed.make_templates(bot, conn)
            finally:
                await bot.stop()  # its workers would only add noise to the plans
            await seed.seed(conn, templates, settled=SETTLED, pending=PENDING)
            horizon = int(await conn.fetchval("SELECT pg_snapshot_xmin(pg_current_snapshot())"))
        finally:
            await conn.close()
        yield Seeded(dsn, templates, horizon)
    finally:
        await postgres.drop_database(pg_template, dsn)


def _params(s: Seeded) -> dict[str, tuple[Any, ...]]:
    """Each hot query with parameters the repository would pass."""
    now = datetime.now(UTC)
    a_settled, a_pending = s.templates.settled, s.templates.pending
    seeded_pending = "apr_5eed" + format(SETTLED + 1, "x").rjust(20, "0")
    return {
        "get_approvals": ([a_pending, a_settled, seeded_pending],),
        "approval_id_by_request": ("sales-bot", "seed-session-7", "seed-7"),
        "settle_if_pending": (a_pending, "approved", "[]", [], 0),
        "edit_if_pending": (a_pending, "approved", "[]", [], 0),
        # every click: the compare-and-set with its settlement, attempts and outbox rows
        "settle_one": (
            *(a_pending, "approved", "[]", [], 0, True, None, now, "v1"),
            *([], [], [], [], [], [], []),
            *(["callback"], ["{}"], [now], "countersign_outbox", "countersign_settled"),
            [now],
        ),
        # clicks settling at the same time, and the expiry sweep's batch: their
        # compare-and-sets and rows in one statement
        "settle_batch": (
            *([a_pending, seeded_pending], ["approved"] * 2, ["[]"] * 2, ["[]"] * 2, [0] * 2),
            *([True] * 2, [None] * 2, [now] * 2, ["v1"] * 2),
            *([a_pending], ["U1"], [None], ["Ann"], ["approve"], ["accepted"], [""], [now]),
            *([a_pending], ["callback"], ["{}"], [now], [now]),
            *("countersign_outbox", "countersign_settled"),
        ),
        # every submission while a rule lists editable paths: is it the call again of an edit?
        "recall_candidate": ("sales-bot", "seed-session-7", "transfer_money", "0" * 64),
        # every claim (and a call again) locks the approval, then claims
        "claim_lock": (a_settled,),
        "claim_execution": (a_settled, "exc_" + "0" * 24, "k", now),
        "recall_open": (a_settled, "0" * 64, now),
        # every submission whose rule allows standing grants, and each use of one
        "live_grants": ("sales-bot", "transfer_money", "seed-session-7", now),
        "use_grant": ("grt_" + "0" * 24, now),
        "list_attempts": (a_settled,),
        "pending_expired": (now, 100),
        "pending_ids": (200,),
        # each App Home open (and /approvals) whose window of 200 is full
        "count_pending_upto": (1201,),
        "requested_by": (harness.REQUESTER.id, harness.REQUESTER.email, 20),
        "claim_outbox": (now, now + timedelta(seconds=30), 50, []),
        # every settlement, in the relay of each replica: its callback
        "claim_callbacks": (now, now + timedelta(seconds=30), [a_settled, seeded_pending], []),
        "outbox_next_due": (),
        "claim_due_timers": (now, 100),
        # read at every /metrics scrape
        "outbox_backlog": (now,),
        "outbox_dead_by_kind": (),
        "pending_by_rule": (),
        # the relay's bookkeeping of the deliveries that finished together, by primary key
        "outbox_done": ([1, 2], [now, now]),
        # the cards the relay posted together, by primary key
        "set_cards": ([a_pending, seeded_pending], ["C0REVIEWS"] * 2, ["1.1", "1.2"]),
        # the timer loop, before each sleep
        "timers_next_due": (),
        # a group of submissions committed together: which of them inserted
        "approvals_among": ([a_pending, seeded_pending],),
        # the audit sealer, every few seconds: the events since the last seal (a recent
        # transaction id: what the seeded history is below), a page at a time
        **{name: (*_chain_bounds(name, s.horizon), 1001) for name in AUDIT_EVENTS},
        # the export of the last hour
        **{name: (now - timedelta(hours=1),) for name in AUDIT_EXPORT},
    }


def _chain_bounds(name: str, horizon: int) -> tuple[int, int | str, int, int | str]:
    """The bounds the sealer passes to read ``name``'s events from ``horizon`` on."""
    kind = AUDIT_KINDS[name.removeprefix("audit_events_")]
    bounds = audit_chain.kind_range(kind, (horizon, "", 0, ""), (2**63 - 1, "", 0, ""))
    assert bounds is not None
    return bounds


HOT = tuple(_params(Seeded("", seed.Templates("", "", 0), 0)))

# Known sequential scans, reported to the owner of the queries and migrations (issue 12), with
# the index that would serve them. strict: once the index exists the test says to drop the mark.
KNOWN: dict[str, str] = {}


def _seq_scans(plan: Any) -> Iterator[str]:
    """The big tables a plan (EXPLAIN FORMAT JSON) reads sequentially, subplans included."""
    if isinstance(plan, list):
        for item in plan:
            yield from _seq_scans(item)
    elif isinstance(plan, dict):
        if plan.get("Node Type") == "Seq Scan" and plan.get("Relation Name") in BIG:
            yield str(plan["Relation Name"])
        for key in ("Plan", "Plans"):
            if key in plan:
                yield from _seq_scans(plan[key])


async def _explain(
    conn: asyncpg.Connection, name: str, args: tuple[Any, ...], generic: bool
) -> tuple[list[str], str]:
    """(big tables read sequentially, the plan as text) of one query."""
    sql = sql_loader.queries().get(name)
    if sql is None:
        pytest.fail(f"no query named {name!r} in queries.sql: update HOT in this test")
    await conn.execute(f"SET plan_cache_mode = {'force_generic_plan' if generic else 'auto'}")
    try:
        raw = await conn.fetchval("EXPLAIN (FORMAT JSON) " + sql, *args)
        text = "\n".join(r[0] for r in await conn.fetch("EXPLAIN " + sql, *args))
    except (asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        pytest.fail(f"{name}: {exc} — its parameters changed? update _params in this test")
    return sorted(set(_seq_scans(json.loads(raw)))), text


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=KNOWN[n])) if n in KNOWN else n
        for n in HOT
    ],
)
async def test_hot_query_reads_no_big_table_sequentially(seeded: Seeded, name: str) -> None:
    conn = await asyncpg.connect(seeded.dsn)
    try:
        args = _params(seeded)[name]
        for generic in (False, True):
            scans, text = await _explain(conn, name, args, generic)
            kind = "generic" if generic else "custom"
            assert not scans, f"{name} ({kind} plan) reads {scans} sequentially:\n{text}"
    finally:
        await conn.close()


async def test_the_seeded_history_is_there(seeded: Seeded) -> None:
    """The plans above were made on tables this big (else a seq scan would be the right plan
    and the check would prove nothing)."""
    conn = await asyncpg.connect(seeded.dsn)
    try:
        counts = {
            table: await conn.fetchval(f"SELECT count(*) FROM {table}") for table in sorted(BIG)
        }
        pending = await conn.fetchval("SELECT count(*) FROM approvals WHERE status = 'pending'")
        unfired = await conn.fetchval("SELECT count(*) FROM timers WHERE fired_at IS NULL")
    finally:
        await conn.close()
    assert counts["approvals"] >= SETTLED + PENDING
    assert counts["settlements"] >= SETTLED
    assert counts["attempts"] >= SETTLED
    assert counts["outbox"] >= 2 * SETTLED
    assert counts["timers"] >= 2 * (SETTLED + PENDING)
    assert counts["turn_verdicts"] >= (SETTLED + PENDING) // 10
    assert pending >= PENDING
    assert unfired >= 2 * PENDING
