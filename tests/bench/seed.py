"""History in the database, fast: settled and pending approvals cloned in SQL from real ones.

A few *template* rows are made the way production makes them (through the bot's own API and a
signed click: :func:`make_templates`); :func:`seed` then copies them ``INSERT … SELECT FROM
generate_series`` with new ids and shifted times, every table at once:

* settled approvals (oldest first, 10 s apart) with their settlement, accepted attempt, outbox
  rows done (card post, callback, card update) and timers fired;
* pending approvals (the newest) with their card posted (``card_ts`` set, the post done), their
  reminder and escalation timers not fired and every deadline 30 days ahead, so that nothing
  seeded falls due while a benchmark runs;
* turn verdicts, one for every ten approvals.

Copies are made with ``jsonb_populate_record(template, overrides)``: every column of the
template row is kept but the ids and times named here, so a column a migration adds later is
carried over without this module knowing it. Requesters vary (one Slack user in ten is the
template's, the rest are spread over 1 000 made-up users), so a requester's queue is a slice of
the table, not all of it.

The audit chain's transaction ids are the templates' (see :data:`SEALED_XID`): seal the
templates first (``AuditStore.seal``) and the copies are history already sealed, which
the bot's sealer never reads again, as in a database that has run for months.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import asyncpg

from tests.support import harness

__all__ = ["RELEASE", "Seeded", "Templates", "make_templates", "seed"]

# release_* needs finance (the amount is part of its contract) and has a reminder at 600 s and
# an escalation at 1800 s: its approvals have timers, as a production ladder's do
RELEASE = {"name": "release_build", "call_id": "seed", "arguments": {"build": 1, "amount": 1}}
# an allowed lead-facing turn (under the discount limit): a verdict row and no approval
TURN = {"name": "grant_discount", "call_id": "seed-turn", "arguments": {"discount_pct": 5}}

# seeded ids: apr_ + 24 hex digits as service.new_approval_id mints them, "5eed" in front
SEED_ID = "'apr_5eed' || lpad(to_hex(g), 20, '0')"
# the seeded approval g is created this long before the seeding ends (the last one a minute)
CREATED = "now() - interval '1 minute' - ($4::int - g) * interval '10 seconds'"
# what falls due later for a pending copy: 30 days ahead of its template
AHEAD = "interval '30 days'"
# a settled copy was decided 2 000 s after it was created (after its reminder and escalation)
DECIDED = "interval '2000 seconds'"


@dataclass(frozen=True)
class Templates:
    """The rows that get copied."""

    settled: str  # approval id: approved by a signed click, its callback and card update done
    pending: str  # approval id: its card posted, its timers not fired
    turn: int  # turn_verdicts.id


@dataclass(frozen=True)
class Seeded:
    settled: int
    pending: int
    turns: int
    seconds: float  # the copies and ANALYZE


async def _until(conn: asyncpg.Connection, query: str, *args: object, timeout: float) -> None:
    """Poll until ``query`` returns true: the bot works in the background."""
    async with asyncio.timeout(timeout):
        # polling the tables is the point: they are the record of what the bot has done
        while not await conn.fetchval(query, *args):  # noqa: ASYNC110
            await asyncio.sleep(0.02)


async def make_templates(
    h: harness.Harness, conn: asyncpg.Connection, timeout: float = 30.0
) -> Templates:
    """One pending and one settled approval and one turn verdict, made by the running bot of
    ``h`` (its relay on), on the database ``conn`` is connected to."""
    tag = f"seed-template-{time.time_ns()}"
    pending = await h.submit(request_id=f"{tag}-p", tool={**RELEASE, "call_id": f"{tag}-p"})
    settled = await h.submit(request_id=f"{tag}-s", tool={**RELEASE, "call_id": f"{tag}-s"})
    ids = [str(pending["approval_id"]), str(settled["approval_id"])]
    await _until(
        conn,
        "SELECT count(*) = 2 FROM approvals WHERE approval_id = ANY($1) AND card_ts IS NOT NULL",
        ids,
        timeout=timeout,
    )
    approver = harness.FINANCE[0]
    assert await h.click(approver, ids[1]) == 200
    # settled, its callback delivered and its card updated: nothing of it left to do now
    await _until(
        conn,
        "SELECT EXISTS (SELECT FROM settlements WHERE approval_id = $1)"
        " AND NOT EXISTS (SELECT FROM outbox WHERE approval_id = $1 AND done_at IS NULL"
        "                 AND created_at <= now())",  # not the card update due at a deadline
        ids[1],
        timeout=timeout,
    )
    status, verdict = await h.call(
        "POST",
        "/v1/turns",
        json_body={
            "session_id": f"{tag}-wa",
            "request_id": f"{tag}-t",
            "channel": "whatsapp",
            "lead": {"id": "lead-seed", "name": "Lena", "email": harness.LEAD_EMAIL},
            "operator": {"slack_user_id": harness.OPERATOR.id, "name": "Omar"},
            "funnel": {"stage": "qualified", "deal_value": 12000},
            "tool": TURN,
            "callback_url": h.receiver.url,
        },
    )
    assert status == 200, verdict
    assert verdict["verdict"] == "allow", verdict
    turn = await conn.fetchval("SELECT id FROM turn_verdicts WHERE request_id = $1", f"{tag}-t")
    return Templates(settled=ids[1], pending=ids[0], turn=int(turn))


# a copy's columns: column -> SQL expression over the template row c and the copy number g
Overrides = dict[str, str]


# The audit chain (migration 0017) records in each event row the transaction that wrote it, and
# seals by transaction ranges. A copy keeps its template's transaction id: the templates are
# sealed before they are copied (the caller's job), so the copies fall in a sealed range, as
# history sealed long ago does, and the bot's sealer never reads them (it reads from the last
# seal on). An event the template has not had yet (a timer fired, a card update done) takes
# the template approval's own creation id, sealed as well.
SEALED_XID = "coalesce(c.{col}, a.created_xid)"


def _copy_sql(table: str, overrides: Overrides, source: str, where: str) -> str:
    pairs = ",\n    ".join(f"'{col}', {expr}" for col, expr in overrides.items())
    # in FROM (LATERAL), not as (f(c)).* in the select list: that form calls f once per column
    return (
        f"INSERT INTO {table}\nSELECT r.*\n{source}\n"
        f"CROSS JOIN LATERAL jsonb_populate_record(c, jsonb_build_object(\n    {pairs}\n)) AS r\n"
        f"{where}"
    )


def _statements(pending: bool, xids: dict[str, list[str]]) -> list[str]:
    """The copies of one template approval and of its settlement, attempts, outbox rows and
    timers. Parameters: $1 the template's id, $2 and $3 the first and last copy number g of
    this kind, $4 the last of all (the newest copy)."""
    series = "generate_series($2::int, $3::int) g"
    # the time shift of copy g: its creation minus the template's
    shift = f"({CREATED} - a.created_at)"
    settled_shift = f"{shift} + {DECIDED}"
    new_id = "nextval(pg_get_serial_sequence('{table}', 'id'))"
    # a pending copy's lifetime is its template's, 30 days on (after its timers, as theirs is)
    expires = f"c.expires_at + {shift}" + (f" + {AHEAD}" if pending else "")
    approval: Overrides = {
        "approval_id": SEED_ID,
        "request_id": "'seed-' || g",
        "session_id": "'seed-session-' || (g % 5000)",
        "call_id": "'seed-call-' || g",
        "requester": "CASE WHEN g % 10 = 0 THEN c.requester ELSE c.requester"
        " || jsonb_build_object('slack_user_id', 'U0SEED' || (g % 1000),"
        " 'email', 'seed' || (g % 1000) || '@example.com') END",
        "card_ts": "(1600000000 + g)::text || '.000100'",
        "created_at": CREATED,
        "expires_at": expires,
    }
    statements = [
        _copy_sql(
            "approvals",
            approval,
            f"FROM approvals c, approvals a, {series}",
            "WHERE c.approval_id = $1 AND a.approval_id = $1",
        )
    ]

    def child(table: str, overrides: Overrides, lateral: str = "") -> str:
        return _copy_sql(
            table,
            {"approval_id": SEED_ID, **overrides},
            f"FROM approvals a CROSS JOIN {series} JOIN {table} c ON c.approval_id = a.approval_id"
            + lateral,
            "WHERE a.approval_id = $1",
        )

    if not pending:
        statements.append(child("settlements", {"decided_at": f"c.decided_at + {settled_shift}"}))
        statements.append(
            child(
                "attempts",
                {"id": new_id.format(table="attempts"), "at": f"c.at + {settled_shift}"},
            )
        )
    # outbox: a settled copy has nothing left to do (its card posted when it was made, the
    # settlement's rows done when it was settled, the card update at a deadline done then); a
    # pending copy's card is posted, and what its template has still to do (a card update due
    # at the deadline) is due 30 days ahead
    if pending:
        by = f"CASE WHEN c.done_at IS NULL THEN {shift} + {AHEAD} ELSE {shift} END"
        done = "c.done_at + m.by"
    else:
        by = f"CASE WHEN c.kind = 'post_card' THEN {shift} ELSE {settled_shift} END"
        done = "coalesce(c.done_at, c.next_attempt_at) + m.by"
    outbox: Overrides = {
        "id": new_id.format(table="outbox"),
        "created_at": "c.created_at + m.by",
        "next_attempt_at": "c.next_attempt_at + m.by",
        "locked_until": "NULL",
        "done_at": done,
    }
    if not pending and "done_xid" in xids.get("outbox", []):
        outbox["done_xid"] = SEALED_XID.format(col="done_xid")  # every row of it is done
    statements.append(child("outbox", outbox, f" CROSS JOIN LATERAL (SELECT {by} AS by) m"))
    # timers: a settled copy's fired when due (then it was settled), a pending copy's due later
    timers: Overrides = {"id": new_id.format(table="timers")}
    if pending:
        timers |= {"due_at": f"c.due_at + {shift} + {AHEAD}", "fired_at": "NULL"}
        if "fired_xid" in xids.get("timers", []):
            timers["fired_xid"] = "NULL"  # not fired
    else:
        timers |= {
            "due_at": f"c.due_at + {shift}",
            "fired_at": f"c.due_at + {shift} + interval '50 milliseconds'",
        }
        if "fired_xid" in xids.get("timers", []):
            timers["fired_xid"] = SEALED_XID.format(col="fired_xid")
    statements.append(child("timers", timers))
    return statements


def _turns_sql() -> str:
    # $1 the template verdict's id, $2 how many copies
    overrides: Overrides = {
        "id": "nextval(pg_get_serial_sequence('turn_verdicts', 'id'))",
        "request_id": "'seed-turn-' || g",
        "session_id": "'seed-wa-' || (g % 5000)",
        "at": "c.at - ($2::int - g) * interval '100 seconds'",
    }
    return _copy_sql(
        "turn_verdicts",
        overrides,
        "FROM turn_verdicts c, generate_series(1, $2::int) g",
        "WHERE c.id = $1",
    )


async def _xid_columns(conn: asyncpg.Connection) -> dict[str, list[str]]:
    rows = await conn.fetch(
        "SELECT table_name, column_name FROM information_schema.columns"
        " WHERE table_schema = current_schema() AND data_type = 'xid8'"
    )
    out: dict[str, list[str]] = {}
    for r in rows:
        out.setdefault(r["table_name"], []).append(r["column_name"])
    return out


async def seed(
    conn: asyncpg.Connection, templates: Templates, *, settled: int, pending: int
) -> Seeded:
    """Copy the templates: ``settled`` settled and ``pending`` pending approvals with their
    history, a turn verdict for every ten, then ANALYZE (the planner sees the new sizes)."""
    started = time.perf_counter()
    last = settled + pending
    xids = await _xid_columns(conn)
    async with conn.transaction():
        if settled:
            for sql in _statements(False, xids):
                await conn.execute(sql, templates.settled, 1, settled, last)
        if pending:
            # the same numbering: g > settled, so the pending copies are the newest
            for sql in _statements(True, xids):
                await conn.execute(sql, templates.pending, settled + 1, last, last)
        if last // 10:
            await conn.execute(_turns_sql(), templates.turn, last // 10)
    await conn.execute("ANALYZE")
    return Seeded(settled, pending, last // 10, time.perf_counter() - started)
