"""The audit's hash chain: sealing, verification of an untouched history, and every single-row
tampering named (edited, deleted, inserted); sealing under concurrent load with two sealers; the
CLI (``audit seal``, ``audit verify``, the export) and the README's offline recipe."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from approvals import audit_chain, audit_store, models, sql_loader
from approvals.repository import Repository
from tests.support import waiting
from tests.support.cli import run_cli
from tests.support.doc_samples import ROOT, of_kind
from tests.support.harness import Harness
from tests.support.records import T0, approval, approved, attempt, post_card

# the events' own times are T0 and a few minutes on; the seals are stamped a little later, as a
# sealer running every few seconds stamps them
SEALED = T0 + timedelta(minutes=30)


# -- raw access to each database, to tamper with it as someone with database access would -----


@dataclass
class Backdoor:
    """Writes straight to the tables, past the repository (the attacker's view)."""

    store: Repository
    dsn: str

    async def sql(self, statement: str, *args: Any) -> list[asyncpg.Record]:
        conn = await asyncpg.connect(self.dsn)
        try:
            return list(await conn.fetch(statement, *args))
        finally:
            await conn.close()

    async def edit(self, table: str, key: str, column: str, value: Any) -> None:
        await self.sql(
            f"UPDATE {table} SET {column} = $2 WHERE {_pk(table)} = $1", _id(table, key), value
        )

    async def delete(self, table: str, key: str) -> None:
        await self.sql(f"DELETE FROM {table} WHERE {_pk(table)} = $1", _id(table, key))

    async def copy_attempt(self, key: str, *, xid: int | None = None) -> str:
        """A new attempt row like attempt ``key`` (a forged click), written now: with a fresh
        transaction id, or with ``xid`` (the attacker setting it, to land in a sealed range)."""
        columns = "approval_id, slack_user_id, email, name, action, outcome, detail, at"
        xid_value = ", xid" if xid is not None else ""
        xid_select = ", $2::text::xid8" if xid is not None else ""
        [row] = await self.sql(
            f"INSERT INTO attempts ({columns}{xid_value}) "
            f"SELECT approval_id, slack_user_id, email, name, action, outcome, 'forged', at"
            f"{xid_select} FROM attempts WHERE id = $1 RETURNING id",
            *((int(key), str(xid)) if xid is not None else (int(key),)),
        )
        return str(row["id"])

    async def edit_seal(self, seq: int, column: str, value: Any) -> None:
        await self.sql(f"UPDATE audit_seals SET {column} = $2 WHERE seq = $1", seq, value)

    async def delete_seal(self, seq: int) -> None:
        await self.sql("DELETE FROM audit_seals WHERE seq = $1", seq)

    async def forget_xids(self) -> None:
        """Every event row as migration 0017 left the rows written before it: no transaction
        id (the history sealed, as "transaction 0", by the first pass after the upgrade)."""
        for table, column in XID_COLUMNS:
            await self.sql(f"ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {table}_{column}_check")
            await self.sql(f"UPDATE {table} SET {column} = NULL")


# every event's transaction id column (migration 0017)
XID_COLUMNS = (
    ("approvals", "created_xid"),
    ("attempts", "xid"),
    ("settlements", "xid"),
    ("turn_verdicts", "xid"),
    ("executions", "claimed_xid"),
    ("executions", "reported_xid"),
    ("timers", "fired_xid"),
    ("outbox", "done_xid"),
)


_KEYED_BY_APPROVAL = {"approvals", "settlements", "executions"}


def _pk(table: str) -> str:
    return "approval_id" if table in _KEYED_BY_APPROVAL else "id"


def _id(table: str, key: str) -> Any:
    return key if table in _KEYED_BY_APPROVAL else int(key)


@pytest.fixture
async def backdoor(database_url: str, store: Repository) -> Backdoor:
    return Backdoor(store, database_url)


# -- a history with every kind of event --------------------------------------------------------


async def history(store: Repository, n: int = 1, base: datetime = T0) -> models.Approval:
    """One approval with an event of every kind (10 events), from ``base`` on: created, a card
    posted, a refused attempt, a reminder fired, the accepted attempt and the settlement, the
    callback delivered, the execution claimed and its outcome, and a lead-facing turn."""

    def at(minutes: float) -> datetime:
        return base + timedelta(minutes=minutes)

    a = approval(n, created_at=base, expires_at=at(120))
    remind = models.TimerEntry(approval_id=a.approval_id, kind="remind", step=0, due_at=at(2))
    await store.create_approval(a, [post_card(a)], [remind])
    await deliver(store, at(0), models.OutboxKind.POST_CARD)
    await store.record_attempt(attempt(a, models.AttemptOutcome.SELF, "U0REQ").evolve(at=at(1)))
    assert await store.fire_due_timers(at(2), 10)
    settled = approved(a).evolve(decided_at=at(3))
    clicked = attempt(a, models.AttemptOutcome.ACCEPTED).evolve(at=at(3))
    callback = models.OutboxEntry(
        approval_id=a.approval_id, work=models.Callback(url="u", body="{}", agent=a.agent)
    )
    assert await store.settle(settled, clicked, [callback])
    await deliver(store, at(3), models.OutboxKind.CALLBACK)
    decided = at(4)
    assert await store.claim_execution(a.approval_id, f"exc_{n}", f"k{n}", decided, None)
    ok = models.ExecutionOutcome(status="ok", detail="paid", reported_at=decided)
    assert await store.report_outcome(a.approval_id, f"k{n}", ok)
    await store.record_turn(
        models.TurnRecord(
            agent="sales-bot",
            session_id="s-1",
            request_id=f"turn-{n}",
            channel="whatsapp",
            lead_id="lead-1",
            tool_name="book_demo",
            call_id=f"c{n}",
            inputs_sha256="b" * 64,
            policy_version="pol_x",
            verdict="allow",
            rule="tools.book_demo",
            reason_code="allowed",
            message="",
            evaluated=(),
            at=at(5),
        )
    )
    return a


async def deliver(store: Repository, now: datetime, kind: models.OutboxKind) -> None:
    """Deliver the due outbox rows of ``kind`` (the others are handed back untried)."""
    for item in await store.claim_outbox(now, now + timedelta(minutes=1), 100):
        if item.kind is kind:
            await store.outbox_done(item, now + timedelta(seconds=1))
        else:
            await store.outbox_unclaim(item)


KINDS = ["attempt", "created", "delivery", "execution", "outcome", "settlement", "timer", "turn"]


async def test_an_untouched_history_verifies_and_every_kind_is_sealed(backdoor: Backdoor) -> None:
    store = backdoor.store
    assert (await store.audit.verify()).summary() == (
        "audit verified: 0 seals, 0 events sealed, 0 not sealed yet; no seal yet"
    )
    await history(store, 1)
    first = await store.audit.seal(SEALED)
    assert first is not None
    assert first.seq == 1
    assert first.prev_hash == audit_chain.GENESIS
    assert sorted({e.kind for e in first.events}) == KINDS
    assert first.count == 10
    assert await store.audit.seal(SEALED) is None  # nothing new: no empty seal
    await history(store, 2, base=SEALED)
    second = await store.audit.seal(SEALED + timedelta(minutes=10))
    assert second is not None
    assert (second.seq, second.prev_hash, second.from_xid) == (2, first.hash, first.to_xid)
    late = attempt(approval(2), models.AttemptOutcome.STALE).evolve(
        at=SEALED + timedelta(minutes=9)
    )
    await store.record_attempt(late)
    result = await store.audit.verify()
    assert result.ok, result.problems
    assert (result.seals, result.sealed, result.unsealed) == (2, 20, 1)
    assert result.head == (2, second.hash)
    assert (await store.audit.verify(head=(1, first.hash))).ok


# each kind's row, the column an attacker edits and its new value
EDITS = [
    ("created", "approvals", "arguments_sha256", "c" * 64),
    ("attempt", "attempts", "outcome", "accepted"),
    ("settlement", "settlements", "reason", "looks fine"),
    ("timer", "timers", "step", 7),
    ("execution", "executions", "claimed_at", T0 + timedelta(minutes=4, seconds=1)),
    ("outcome", "executions", "detail", "nothing happened"),
    ("turn", "turn_verdicts", "verdict", "refuse"),
    ("delivery", "outbox", "attempts", 5),
]


async def _sealed_history(store: Repository) -> audit_chain.Seal:
    await history(store, 1)
    await history(store, 2)
    seal = await store.audit.seal(SEALED)
    assert seal is not None
    # a later seal too: tampering with seal 1's events is found under seal 2 as well
    await store.record_attempt(attempt(approval(1), models.AttemptOutcome.STALE).evolve(at=SEALED))
    assert await store.audit.seal(SEALED + timedelta(seconds=5)) is not None
    return seal


def _entry(seal: audit_chain.Seal, kind: str) -> audit_chain.SealEntry:
    """The first sealed event of ``kind`` (a turn verdict's key is its id)."""
    return next(e for e in seal.events if e.kind == kind)


@pytest.mark.parametrize(("kind", "table", "column", "value"), EDITS, ids=[e[0] for e in EDITS])
async def test_an_edited_event_is_named(
    backdoor: Backdoor, kind: str, table: str, column: str, value: Any
) -> None:
    seal = await _sealed_history(backdoor.store)
    target = _entry(seal, kind)
    await backdoor.edit(table, target.key, column, value)
    result = await backdoor.store.audit.verify()
    assert not result.ok
    first = result.problems[0]
    assert (first.kind, first.subject, first.seq) == ("edited", f"{kind} {target.key}", 1)
    assert len(result.problems) == 1, result.problems  # that one, nothing else


DELETABLE = [
    ("created", "approvals"),  # with its dependants gone first, as a delete needs
    ("attempt", "attempts"),
    ("settlement", "settlements"),
    ("timer", "timers"),
    ("turn", "turn_verdicts"),
    ("delivery", "outbox"),
]


@pytest.mark.parametrize(("kind", "table"), DELETABLE, ids=[d[0] for d in DELETABLE])
async def test_a_deleted_event_is_named(backdoor: Backdoor, kind: str, table: str) -> None:
    seal = await _sealed_history(backdoor.store)
    target = _entry(seal, kind)
    if kind == "created":  # an approval nothing refers to: one made for this
        lone = approval(9, created_at=SEALED, expires_at=SEALED + timedelta(hours=1))
        await backdoor.store.create_approval(lone, [])
        late = await backdoor.store.audit.seal(SEALED + timedelta(seconds=10))
        assert late is not None
        target, seal = late.events[0], late
    await backdoor.delete(table, target.key)
    result = await backdoor.store.audit.verify()
    first = result.problems[0]
    assert (first.kind, first.subject, first.seq) == ("deleted", f"{kind} {target.key}", seal.seq)
    assert len(result.problems) == 1, result.problems


async def test_an_execution_row_deleted_names_its_claim_and_its_outcome(backdoor: Backdoor) -> None:
    seal = await _sealed_history(backdoor.store)
    target = _entry(seal, "execution")
    await backdoor.delete("executions", target.key)
    result = await backdoor.store.audit.verify()
    assert {(p.kind, p.subject) for p in result.problems} == {
        ("deleted", f"execution {target.key}"),
        ("deleted", f"outcome {target.key}"),
    }


async def test_an_event_inserted_after_sealing_is_named(backdoor: Backdoor) -> None:
    seal = await _sealed_history(backdoor.store)
    forged = await backdoor.copy_attempt(_entry(seal, "attempt").key)
    # not sealed yet, but older than the last seal: written after it
    result = await backdoor.store.audit.verify()
    first = result.problems[0]
    assert (first.kind, first.subject, first.seq) == ("inserted", f"attempt {forged}", None)
    assert "written after that seal" in first.detail
    assert len(result.problems) == 1, result.problems
    # sealed by the next seal as if new: still named, by its time
    late = await backdoor.store.audit.seal(SEALED + timedelta(minutes=1))
    assert late is not None
    result = await backdoor.store.audit.verify()
    first = result.problems[0]
    assert (first.kind, first.subject, first.seq) == ("inserted", f"attempt {forged}", late.seq)
    assert len(result.problems) == 1, result.problems


async def test_an_event_inserted_into_a_sealed_range_is_named(backdoor: Backdoor) -> None:
    seal = await _sealed_history(backdoor.store)
    inside = seal.from_xid + 1 if seal.to_xid - seal.from_xid > 1 else seal.from_xid
    forged = await backdoor.copy_attempt(_entry(seal, "attempt").key, xid=inside)
    result = await backdoor.store.audit.verify()
    first = result.problems[0]
    assert (first.kind, first.subject, first.seq) == ("inserted", f"attempt {forged}", 1)
    assert len(result.problems) == 1, result.problems


async def test_a_seal_edited_or_deleted_is_named(backdoor: Backdoor) -> None:
    await _sealed_history(backdoor.store)
    third = await backdoor.store.audit.seal(SEALED + timedelta(seconds=9))
    assert third is None  # nothing new
    await backdoor.store.record_attempt(
        attempt(approval(2), models.AttemptOutcome.STALE).evolve(at=SEALED)
    )
    assert await backdoor.store.audit.seal(SEALED + timedelta(seconds=10)) is not None
    await backdoor.edit_seal(2, "sealed_at", SEALED + timedelta(days=1))
    result = await backdoor.store.audit.verify()
    assert str(result.problems[0]) == "seal 2: edited: its fields no longer hash to its hash"
    await backdoor.edit_seal(2, "sealed_at", SEALED + timedelta(seconds=5))  # back as it was
    assert (await backdoor.store.audit.verify()).ok
    await backdoor.delete_seal(2)
    result = await backdoor.store.audit.verify()
    first = result.problems[0]
    assert (first.kind, first.subject) == ("seal", "seal 2")
    assert first.detail.startswith("missing (deleted)")


async def test_a_chain_cut_short_is_caught_by_a_head_kept_elsewhere(backdoor: Backdoor) -> None:
    await _sealed_history(backdoor.store)
    head = (await backdoor.store.audit.verify()).head
    assert head is not None
    await backdoor.delete_seal(head[0])  # the last seal, and the events only it held
    result = await backdoor.store.audit.verify(head=head)
    assert [p.subject for p in result.problems] == [f"seal {head[0]}"]
    assert "is not the head kept elsewhere" in result.problems[0].detail


# -- concurrency: nothing lost, nothing sealed twice, two sealers as two replicas ---------------


# whole: every pass one seal, as a sealer every few seconds finds; chunked: every pass cut into
# seals of 5 events, so seals start and end inside transactions (a settlement's attempt and
# settlement, a submission's approval) while others commit around them
@pytest.mark.parametrize("chunk", [audit_chain.SEAL_EVENTS, 5], ids=["whole", "chunked"])
async def test_sealing_under_concurrent_load_loses_nothing_and_seals_nothing_twice(
    database_url: str, chunk: int
) -> None:
    replicas = [await Repository.connect(database_url) for _ in range(2)]
    writer = await Repository.connect(database_url, max_size=20)
    stop = asyncio.Event()
    sealed_by: list[int] = [0, 0]

    async def sealer(i: int) -> None:
        while not stop.is_set():
            if await replicas[i].audit.seal(T0, chunk=chunk) is not None:
                sealed_by[i] += 1
            await asyncio.sleep(0)

    async def submit_and_click(n: int) -> None:
        a = approval(n)
        await writer.create_approval(a, [post_card(a)])
        clicks = [
            writer.settle(
                approved(a, f"U0X{i}"), attempt(a, models.AttemptOutcome.ACCEPTED, f"U0X{i}"), []
            )
            for i in range(3)
        ]
        refused = writer.record_attempt(attempt(a, models.AttemptOutcome.SELF, "U0REQ"))
        results = await asyncio.gather(*clicks, refused)
        assert results[:3].count(True) == 1

    sealers = [asyncio.create_task(sealer(i)) for i in range(2)]
    await asyncio.gather(*(submit_and_click(n) for n in range(1, 121)))
    stop.set()
    await asyncio.gather(*sealers)
    while await replicas[0].audit.seal(T0, chunk=chunk) is not None:
        pass
    try:
        conn = await asyncpg.connect(database_url)
        try:
            rows = await conn.fetch("SELECT seq, events, to_event FROM audit_seals ORDER BY seq")
            stored = {
                "created": await conn.fetchval("SELECT count(*) FROM approvals"),
                "attempt": await conn.fetchval("SELECT count(*) FROM attempts"),
                "settlement": await conn.fetchval("SELECT count(*) FROM settlements"),
            }
        finally:
            await conn.close()
        listed = [(e["kind"], e["key"]) for r in rows for e in json.loads(r["events"])]
        assert len(listed) == len(set(listed))  # never sealed twice
        assert max(len(json.loads(r["events"])) for r in rows) <= chunk
        if chunk < audit_chain.SEAL_EVENTS:
            assert any(r["to_event"] is not None for r in rows), "no seal ended inside a pass"
        # one click of three wins (the others write nothing), and one refused attempt each
        assert stored == {"created": 120, "attempt": 240, "settlement": 120}
        for kind, count in stored.items():  # none lost
            assert sum(k == kind for k, _ in listed) == count
        assert [r["seq"] for r in rows] == list(range(1, len(rows) + 1))
        assert len(rows) > 1, "the sealers ran while the load did"
        result = await writer.audit.verify()
        assert result.ok, result.problems
        assert result.unsealed == 0
    finally:
        for store in (*replicas, writer):
            await store.close()


async def test_two_sealers_at_once_write_one_seal(database_url: str) -> None:
    one, two = [await Repository.connect(database_url) for _ in range(2)]
    try:
        await history(one, 1)
        seals = await asyncio.gather(one.audit.seal(SEALED), two.audit.seal(SEALED))
        assert sum(s is not None for s in seals) == 1
        assert await one.audit.seal(SEALED) is None
        assert await two.audit.seal(SEALED, wait=True) is None
    finally:
        await one.close()
        await two.close()


async def test_rows_from_before_the_chain_are_in_the_first_seal(database_url: str) -> None:
    store = await Repository.connect(database_url)
    try:
        await history(store, 1)
        conn = await asyncpg.connect(database_url)
        try:  # as migration 0017 leaves the rows written before it
            for table, column in XID_COLUMNS:
                check = f"{table}_{column}_check"
                await conn.execute(f"ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {check}")
                await conn.execute(f"UPDATE {table} SET {column} = NULL")
        finally:
            await conn.close()
        await history(store, 2)
        seal = await store.audit.seal(SEALED)
        assert seal is not None
        assert seal.from_xid == 0
        assert seal.count == 20  # the old history and the new
        assert (await store.audit.verify()).ok
    finally:
        await store.close()


# -- a backlog: several seals of at most `chunk` events, written in one pass -------------------


async def test_a_backlog_bigger_than_a_seal_is_sealed_as_several_that_verify(
    backdoor: Backdoor, tmp_path: Path
) -> None:
    """The first pass after the upgrade: the history from before the chain (no transaction ids:
    all "transaction 0") and what came since, more than a seal holds. It is sealed as
    consecutive seals of at most ``chunk`` events in one pass, cut inside transaction 0's events
    where it must; the chain verifies however verify pages through it, the export puts each
    event with the seal that lists it, and the README's offline check accepts it."""
    store = backdoor.store
    for n in (1, 2, 3):
        await history(store, n)
    await backdoor.forget_xids()  # 30 events of "transaction 0"
    await history(store, 4, base=T0 + timedelta(minutes=10))  # 10 with their own
    written: list[audit_chain.Seal] = []
    head = await store.audit.seal(SEALED, chunk=7, on_seal=written.append)
    assert head is not None
    assert head == written[-1]
    assert [(s.seq, s.count) for s in written] == [(1, 7), (2, 7), (3, 7), (4, 7), (5, 7), (6, 5)]
    assert {s.sealed_at for s in written} == {SEALED}  # one pass
    first = written[0]
    assert (first.from_xid, first.from_event, first.to_xid) == (0, None, 0)
    assert first.to_event is not None  # cut inside transaction 0
    assert written[-1].to_event is None  # the pass ends where every transaction had finished
    for before, seal in itertools.pairwise(written):
        assert (seal.from_xid, seal.from_event) == (before.to_xid, before.to_event)
        assert seal.prev_hash == before.hash
    listed = [e.ref for s in written for e in s.events]
    assert len(listed) == len(set(listed)) == 40  # each event sealed, once
    assert await store.audit.seal(SEALED + timedelta(seconds=5)) is None  # nothing left behind

    for page in (3, 7, 1000):  # a few events at a time: a seal read over several pages
        result = await store.audit.verify(page=page)
        assert result.ok, result.problems
        assert (result.seals, result.sealed, result.unsealed, result.head) == (
            6,
            40,
            0,
            (6, head.hash),
        )

    held, seals = await store.audit.export(T0 - timedelta(days=1))
    assert [s.seq for s in seals] == [1, 2, 3, 4, 5, 6]
    assert {(e.ref, s.seq if s else None) for e, s in held} == {
        (entry.ref, seal.seq) for seal in written for entry in seal.events
    }
    lines = [e.body() | {"sha256": e.sha256, "seal": s.seq if s else None} for e, s in held]
    lines += [s.line() for s in seals]
    target = tmp_path / "audit.jsonl"
    target.write_text("".join(json.dumps(line) + "\n" for line in lines))
    offline = await asyncio.to_thread(_recipe, target, SINCE)
    assert offline.returncode == 0, offline.stderr
    assert offline.stderr.startswith("verified offline: 6 seals, 40 events, 0 not sealed yet")

    # an event edited is named in the seal that holds it (seal 3: all of transaction 0)
    target_entry = written[2].events[3]
    _, table, column, value = next(e for e in EDITS if e[0] == target_entry.kind)
    await backdoor.edit(table, target_entry.key, column, value)
    result = await store.audit.verify(page=4)
    [problem] = result.problems
    assert (problem.kind, problem.subject, problem.seq) == (
        "edited",
        f"{target_entry.kind} {target_entry.key}",
        3,
    )


async def test_a_seal_hands_the_event_loop_back_while_it_hashes(
    backdoor: Backdoor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hashing a seal's events is Python work: a few thousand of them held the loop 100 ms and
    more, and every click and long-poll in flight waited. They are hashed a slice at a time,
    with a turn of the loop between slices, and the seal is the same as hashed at once."""
    store = backdoor.store
    for n in (1, 2, 3, 4):
        await history(store, n)
    async with store.audit._db.transaction() as conn:
        rows, _ = await audit_store._chain_rows(
            conn, audit_chain.START, audit_chain.order(2**62), 1000
        )
    assert len(rows) == 40
    monkeypatch.setattr(audit_store, "ENTRIES_PER_TURN", 3)
    turns = 0

    async def elsewhere() -> None:  # another task: a click, a long-poll
        nonlocal turns
        while True:
            await asyncio.sleep(0)
            turns += 1

    other = asyncio.create_task(elsewhere())
    await asyncio.sleep(0)
    before = turns
    await audit_store._hashed(rows)  # no I/O: the only turns are its own
    during = turns - before
    other.cancel()
    assert during == 13  # between the 14 slices of 3

    head = await store.audit.seal(SEALED)
    assert head is not None
    assert head.count == 40
    assert head == audit_chain.build_seal(
        seq=1,
        prev_hash=audit_chain.GENESIS,
        from_xid=head.from_xid,
        to_xid=head.to_xid,
        sealed_at=SEALED,
        events=[audit_store._chain_event(kind, row) for _, kind, row in rows],
    )
    assert (await store.audit.verify()).ok


async def test_an_event_forged_into_a_split_transaction_is_named_in_its_seal(
    backdoor: Backdoor,
) -> None:
    """A row written later with transaction id 0 lands among the history from before the
    chain: in the one seal whose range (cut inside transaction 0) holds its place, not listed
    there."""
    store = backdoor.store
    for n in (1, 2, 3):
        await history(store, n)
    await backdoor.forget_xids()
    written: list[audit_chain.Seal] = []
    assert await store.audit.seal(SEALED, chunk=4, on_seal=written.append) is not None
    assert len(written) == 8
    some_attempt = next(e for s in written for e in s.events if e.kind == "attempt")
    forged = await backdoor.copy_attempt(some_attempt.key, xid=0)
    place = audit_chain.order(0, f"attempt {forged}")
    [holder] = [s for s in written if s.start <= place < s.end]
    result = await store.audit.verify(page=3)
    [problem] = result.problems
    assert (problem.kind, problem.subject, problem.seq) == (
        "inserted",
        f"attempt {forged}",
        holder.seq,
    )
    assert "not listed by it" in problem.detail


async def test_a_new_event_row_without_its_xid_is_refused(database_url: str) -> None:
    """The checks of 0017 hold for every row written since: an event no later seal would cover
    (a timer fired by a query that forgot fired_xid) fails at once."""
    store = await Repository.connect(database_url)
    try:
        await history(store, 1)
    finally:
        await store.close()
    conn = await asyncpg.connect(database_url)
    try:
        with pytest.raises(asyncpg.CheckViolationError, match="timers_fired_xid_check"):
            await conn.execute(
                "INSERT INTO timers (approval_id, kind, step, due_at, fired_at)"
                " SELECT approval_id, 'remind', 9, $1, $1 FROM approvals",
                T0,
            )
        with pytest.raises(asyncpg.CheckViolationError, match="attempts_xid_check"):
            await conn.execute(
                "INSERT INTO attempts (approval_id, slack_user_id, action, outcome, detail, at,"
                " xid) SELECT approval_id, 'U0X', 'approve', 'stale', '', $1, NULL FROM approvals",
                T0,
            )
    finally:
        await conn.close()


async def test_a_delivery_recorded_without_its_xid_is_named(database_url: str) -> None:
    """The outbox has no such check (tooling marks rows done in bulk): a delivery recorded
    without its xid lands where rows without one belong, seal 1's range, unlisted there."""
    store = await Repository.connect(database_url)
    try:
        a = await history(store, 1)
        assert await store.audit.seal(SEALED) is not None
        conn = await asyncpg.connect(database_url)
        try:
            forged = await conn.fetchval(
                "INSERT INTO outbox (approval_id, kind, payload, created_at, next_attempt_at,"
                " attempts, done_at) VALUES ($1, 'callback', '{}', $2, $2, 1, $2) RETURNING id",
                a.approval_id,
                SEALED,
            )
        finally:
            await conn.close()
        assert await store.audit.seal(SEALED + timedelta(seconds=5)) is None  # never sealed
        result = await store.audit.verify()
        [problem] = result.problems
        assert (problem.kind, problem.subject, problem.seq) == ("inserted", f"delivery {forged}", 1)
    finally:
        await store.close()


async def test_the_running_bot_seals_what_it_records(harness: Harness) -> None:
    """The app runs the sealer beside its other workers (COUNTERSIGN_AUDIT_SEAL_INTERVAL, 5 s
    by default): an approval submitted through the API ends up sealed, and verifies."""
    created = await harness.submit()
    await harness.card_ts(created["approval_id"])
    store = harness.store
    assert store is not None

    async def sealed() -> bool:
        result = await store.audit.verify()
        assert result.ok, result.problems
        return result.sealed >= 2 and result.unsealed == 0  # created, and the card posted

    await waiting.until(sealed, timeout=20, interval=0.5, what="the sealer's seal")
    held, _ = await store.audit.export(datetime.fromisoformat(created["created_at"]))
    assert {(e.kind, s is not None) for e, s in held} == {("created", True), ("delivery", True)}


# -- the export, the sealer and verify read by index -------------------------------------------

# each kind's table, the index its export reads (at or after a time) and the one its range in
# the chain's order reads (the sealer, verify): migrations 0014 and 0019
READS = {
    "attempts": ("attempt", "attempts", "attempts_at", "attempts_chain"),
    "created": ("created", "approvals", "approvals_created_at", "approvals_chain"),
    "deliveries": ("delivery", "outbox", "outbox_done_at", "outbox_done_chain"),
    "edits": ("edit", "edits", "edits_at", "edits_chain"),
    "grants": ("grant", "grant_events", "grant_events_at", "grant_events_chain"),
    "claims": ("execution", "executions", "executions_claimed_at", "executions_claimed_chain"),
    "outcomes": ("outcome", "executions", "executions_reported_at", "executions_reported_chain"),
    "passkeys": ("passkey", "passkey_events", "passkey_events_at", "passkey_events_chain"),
    "settlements": ("settlement", "settlements", "settlements_decided_at", "settlements_chain"),
    "timers": ("timer", "timers", "timers_fired_at", "timers_fired_chain"),
    "turns": ("turn", "turn_verdicts", "turn_verdicts_at", "turn_verdicts_chain"),
}
COPIES = 10_000  # of one history (10 events), a minute apart: 100 000 events, 10 000 seals


def _copy(table: str, changes: dict[str, str], where: str) -> str:
    """Copies of ``table``'s rows matching ``where`` (row c), one per g in 1..$2, with
    ``changes`` (SQL over c and g), every other column kept (as tests/bench/seed.py copies)."""
    pairs = ", ".join(f"'{column}', {value}" for column, value in changes.items())
    return (
        f"INSERT INTO {table} SELECT r.* FROM {table} c CROSS JOIN generate_series(1, $2::int) g"
        f" CROSS JOIN LATERAL jsonb_populate_record(c, jsonb_build_object({pairs})) AS r"
        f" WHERE {where}"
    )


def _earlier(*columns: str) -> dict[str, str]:
    return {column: f"c.{column} - g * interval '1 minute'" for column in columns}


def _serial(table: str) -> dict[str, str]:
    return {"id": f"nextval(pg_get_serial_sequence('{table}', 'id'))"}


COPY_SQL = [
    _copy(
        "approvals",
        {"approval_id": "c.approval_id || '-' || g", "request_id": "c.request_id || '-' || g"}
        | _earlier("created_at", "expires_at"),
        "c.approval_id = $1",
    ),
    *(
        _copy(table, {"approval_id": "c.approval_id || '-' || g"} | changes, "c.approval_id = $1")
        for table, changes in (
            ("settlements", _earlier("decided_at")),
            ("attempts", _serial("attempts") | _earlier("at")),
            ("outbox", _serial("outbox") | _earlier("created_at", "next_attempt_at", "done_at")),
            ("timers", _serial("timers") | _earlier("due_at", "fired_at")),
            ("edits", _serial("edits") | _earlier("at")),
            ("grant_events", _serial("grant_events") | _earlier("at")),
            (
                "executions",
                {"claim_id": "c.claim_id || '-' || g"} | _earlier("claimed_at", "reported_at"),
            ),
        )
    ),
    _copy(
        "turn_verdicts",
        _serial("turn_verdicts") | {"request_id": "c.request_id || '-' || g"} | _earlier("at"),
        "c.request_id = 'turn-' || $1::text",
    ),
    # a person's passkey events (no approval): those of one person, copied as the others
    _copy(
        "passkey_events",
        _serial("passkey_events") | _earlier("at"),
        "c.slack_user_id = 'U0PASSKEY' AND $1::text <> ''",
    ),
]


async def _plan(conn: asyncpg.Connection, sql: str, args: tuple[Any, ...]) -> tuple[Any, str]:
    raw = await conn.fetchval("EXPLAIN (FORMAT JSON) " + sql, *args)
    text = "\n".join(r[0] for r in await conn.fetch("EXPLAIN " + sql, *args))
    return json.loads(raw) if isinstance(raw, str) else raw, text


def _nodes(plan: Any) -> list[tuple[str, str | None, str | None]]:
    """(node type, table, index) of every node of a plan (EXPLAIN FORMAT JSON)."""
    if isinstance(plan, list):
        return [n for item in plan for n in _nodes(item)]
    if not isinstance(plan, dict):
        return []
    found = []
    if "Node Type" in plan:
        found.append((plan["Node Type"], plan.get("Relation Name"), plan.get("Index Name")))
    for key in ("Plan", "Plans"):
        if key in plan:
            found += _nodes(plan[key])
    return found


async def test_the_export_the_sealer_and_verify_read_by_index(database_url: str) -> None:
    """On a history of 100 000 events and 10 000 seals, ANALYZEd: the export's reads (each kind
    at or after a time; the seals holding them or sealed since) and the sealer's (each kind
    since the last seal) use their index, in the plan made for their parameters and in the
    generic plan (asyncpg's prepared statements), with no Seq Scan of a table. The control:
    with that index dropped (in a transaction rolled back) the same read's plan does not use
    it and costs more, so the history is big enough for the check to mean something."""
    store = await Repository.connect(database_url)
    try:
        await history(store, 1)
    finally:
        await store.close()
    template = approval(1).approval_id
    queries = sql_loader.queries()
    conn = await asyncpg.connect(database_url)
    try:
        # edits of the template (history() settles it with a plain click), to be copied too:
        # five, so that the table is big enough for its index to matter
        await conn.execute(
            "INSERT INTO edits (approval_id, edit_no, requested_sha256, arguments_jcs,"
            " arguments_sha256, patch, edited_by, at, rule, rule_why, required_role,"
            " required_approvals, required_any_of, deny_reason_required, valid_for,"
            " report_within, editable, policy_version)"
            " SELECT $1, n, repeat('1', 64), '{}', repeat('0', 64), '[]', '{}', $2, 'r', '',"
            " 'finance', 1, '{}', false, 900, 3600, '{}', 'pol_x' FROM generate_series(1, 5) n",
            template,
            T0 + timedelta(minutes=3),
        )
        # a grant made on the template, and five events of it, to be copied too
        await conn.execute(
            "INSERT INTO grants (grant_id, approval_id, agent, scope, session_id, tool_name,"
            " rule, requirement_sha256, required, constraints, max_uses, granted_by,"
            " created_at, expires_at, policy_version)"
            " VALUES ('grt_x', $1, 'sales-bot', 'session', 's', 't', 'r', repeat('0', 64),"
            " '{}', '{}', 5, '{}', $2::timestamptz, $2::timestamptz + interval '1 hour', 'pol_x')",
            template,
            T0 + timedelta(minutes=3),
        )
        await conn.execute(
            "INSERT INTO grant_events (grant_id, approval_id, event, data, at)"
            " SELECT 'grt_x', $1, 'used', '{}', $2 FROM generate_series(1, 5)",
            template,
            T0 + timedelta(minutes=3),
        )
        # five passkey events of one person, to be copied too
        await conn.execute(
            "INSERT INTO passkey_events (slack_user_id, event, data, at)"
            " SELECT 'U0PASSKEY', 'registered', '{}', $1 FROM generate_series(1, 5)",
            T0 + timedelta(minutes=3),
        )
        for sql in COPY_SQL:
            await conn.execute(sql, template if "approval_id = $1" in sql else "1", COPIES)
        await conn.execute(
            "INSERT INTO audit_seals (seq, from_xid, to_xid, sealed_at, count, events_sha256,"
            " prev_hash, hash, events)"
            " SELECT g, (g * 10)::text::xid8, (g * 10 + 10)::text::xid8,"
            " $1::timestamptz - ($2::int - g) * interval '1 minute', 1, repeat('0', 64),"
            " repeat('0', 64), repeat('0', 64), '[]' FROM generate_series(1, $2::int) g",
            SEALED,
            COPIES,
        )
        await conn.execute("ANALYZE")
        assert await conn.fetchval("SELECT count(*) FROM outbox") > 2 * COPIES
        since = T0 - timedelta(minutes=30)  # the history and its last 30 copies
        horizon = int(await conn.fetchval("SELECT pg_snapshot_xmin(pg_current_snapshot())"))
        reads: list[tuple[str, tuple[Any, ...], str, str]] = []  # query, args, table, index
        for name, (kind, table, by_time, by_order) in READS.items():
            reads.append((f"audit_export_{name}", (since,), table, by_time))
            bounds = audit_chain.kind_range(
                kind, audit_chain.order(horizon), audit_chain.order(2**63 - 1)
            )
            assert bounds is not None
            reads.append((f"audit_events_{name}", (*bounds, 10001), table, by_order))
        reads.append(
            ("audit_seals_for_export", (COPIES * 10 - 300, SEALED - timedelta(minutes=30)),
             "audit_seals", "audit_seals_to_xid")
        )  # fmt: skip
        assert {name for name, *_ in reads} >= {
            n for n in queries if n.startswith(("audit_export_", "audit_events_"))
        }
        for name, args, table, index in reads:
            for mode in ("force_custom_plan", "force_generic_plan"):
                await conn.execute(f"SET plan_cache_mode = {mode}")
                plan, text = await _plan(conn, queries[name], args)
                nodes = _nodes(plan)
                what = f"{name} ({mode}):\n{text}"
                assert not [n for n in nodes if n[0] == "Seq Scan"], what
                assert index in {i for _, _, i in nodes}, what
            await conn.execute("SET plan_cache_mode = force_custom_plan")
            with_index = await _blocks(conn, queries[name], args)
            control = conn.transaction()  # rolled back: the indexes stay
            await control.start()
            try:
                await conn.execute(f"DROP INDEX {index}")
                if table == "audit_seals":
                    await conn.execute("DROP INDEX audit_seals_sealed_at")
                without, text = await _plan(conn, queries[name], args)
                without_index = await _blocks(conn, queries[name], args)
            finally:
                await control.rollback()
            # read otherwise: a Seq Scan, or all of another index (approvals_by_requester_id
            # ends in created_at; outbox_done_at holds every delivery)
            what = f"{name} without {index}: {without_index} blocks, not {with_index}:\n{text}"
            assert index not in {i for _, _, i in _nodes(without)}, what
            assert without_index > 5 * with_index, what
    finally:
        await conn.close()


async def _blocks(conn: asyncpg.Connection, sql: str, args: tuple[Any, ...]) -> int:
    """The buffers a query touches when it runs (EXPLAIN ANALYZE): what it reads, in pages."""
    raw = await conn.fetchval("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, *args)
    top = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
    return int(top["Shared Hit Blocks"] + top["Shared Read Blocks"])


# -- the CLI and the README's offline recipe ---------------------------------------------------


SINCE = "2025-12-31T00:00Z"  # before every event of these tests
RECIPE = "python3 - audit.jsonl"  # docs/audit.md's offline check, on its export


def _env(database_url: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLACK_", "HOST", "DATABASE_URL", "LOG_LEVEL"))
    }
    return env | {"DATABASE_URL": database_url}


async def test_the_cli_seals_verifies_and_exports_verifiable_lines(
    database_url: str, tmp_path: Path
) -> None:
    store = await Repository.connect(database_url)
    try:
        await history(store, 1)
    finally:
        await store.close()
    sealed = await run_cli("audit", "seal", env=_env(database_url))
    assert sealed.returncode == 0, sealed.stderr
    assert re.fullmatch(r"audit seal: seal 1, 10 events, hash [0-9a-f]{64}\n", sealed.stderr)
    verified = await run_cli("audit", "verify", env=_env(database_url))
    assert verified.returncode == 0, verified.stderr
    assert verified.stderr.startswith("audit verified: 1 seals, 10 events sealed, 0 not sealed")
    target = tmp_path / "audit.jsonl"
    exported = await run_cli(
        "audit", "export", "--since", SINCE, "-o", str(target), env=_env(database_url)
    )
    assert exported.returncode == 0, exported.stderr
    assert exported.stderr == f"10 events written to {target}\n"
    lines = [json.loads(line) for line in target.read_text().splitlines()]
    assert [line["kind"] for line in lines][-1] == "seal"
    events = [line for line in lines if line["kind"] != "seal"]
    assert all(line["seal"] == 1 and len(line["sha256"]) == 64 for line in events)
    assert {"kind", "approval_id", "at", "data"} <= set(events[0])  # as before, and more

    offline = _recipe(target, SINCE)
    assert offline.returncode == 0, offline.stderr
    # one event's line edited in the file: the recipe names it
    edited = [dict(line) for line in lines]
    victim = next(line for line in edited if line["kind"] == "settlement")
    victim["data"] = victim["data"] | {"reason": "rubber stamp"}
    target.write_text("".join(json.dumps(line) + "\n" for line in edited))
    failed = _recipe(target, SINCE)
    assert failed.returncode == 1
    assert f"settlement {victim['key']}: edited" in failed.stderr

    # and in the database: verify names it, exit 1
    conn = await asyncpg.connect(database_url)
    try:
        key = await conn.fetchval(
            "UPDATE attempts SET outcome = 'accepted' WHERE outcome = 'self' RETURNING id"
        )
    finally:
        await conn.close()
    broken = await run_cli("audit", "verify", env=_env(database_url))
    assert broken.returncode == 1
    assert broken.stderr.startswith(f"audit verify FAILED: attempt {key} edited (seal 1): ")
    assert "Traceback" not in broken.stderr


def _readme_recipe() -> str:
    """The Python of the audit page's offline check (inside its shell sample's heredoc)."""
    [block] = [b for b in of_kind("shell") if RECIPE in b.text]
    match = re.search(r"<<'EOF'[^\n]*\n(?P<code>.*?)\nEOF\n", block.text, re.DOTALL)
    assert match is not None, block.text
    return match["code"]


def _recipe(export: Path, since: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603
        [sys.executable, "-", str(export), since],
        input=_readme_recipe(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )


async def test_the_readme_recipe_catches_a_line_deleted_or_a_seal_rewritten(
    backdoor: Backdoor, tmp_path: Path
) -> None:
    await _sealed_history(backdoor.store)
    held, seals = await backdoor.store.audit.export(datetime.fromisoformat(SINCE))
    lines = [e.body() | {"sha256": e.sha256, "seal": s.seq if s else None} for e, s in held]
    lines += [s.line() for s in seals]
    target = tmp_path / "audit.jsonl"

    async def check(changed: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
        target.write_text("".join(json.dumps(line) + "\n" for line in changed))
        return await asyncio.to_thread(_recipe, target, SINCE)

    ok = await check(lines)
    assert ok.returncode == 0, ok.stderr
    assert ok.stderr.startswith("verified offline: 2 seals, 21 events")
    gone = next(line for line in lines if line["kind"] == "timer")
    missing = await check([line for line in lines if line is not gone])
    assert missing.returncode == 1
    assert f"timer {gone['key']}: missing" in missing.stderr
    rewritten = [dict(line) for line in lines]
    first_seal = next(line for line in rewritten if line["kind"] == "seal")
    first_seal["data"] = first_seal["data"] | {"count": 1}
    broken = await check(rewritten)
    assert broken.returncode == 1
    assert "seal 1: its hash does not match" in broken.stderr
