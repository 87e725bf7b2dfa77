"""Clicks settling at the same time go in one statement (group commit), and each still gets
exactly the answer, the rows and the error it would have got alone."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from approvals import models, outbox
from approvals.repository import Repository
from tests.support.records import approval, approved, attempt, callback, decider


@pytest.fixture
def statements(store: Repository, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the settlement statements the store runs, in order."""
    names: list[str] = []
    fetch, fetchrow = store._db.fetch, store._db.fetchrow

    async def counted_fetch(query: str, *args: Any) -> Any:
        if query.startswith("settle"):
            names.append(query)
        return await fetch(query, *args)

    async def counted_fetchrow(query: str, *args: Any) -> Any:
        if query.startswith("settle"):
            names.append(query)
        return await fetchrow(query, *args)

    monkeypatch.setattr(store._db, "fetch", counted_fetch)
    monkeypatch.setattr(store._db, "fetchrow", counted_fetchrow)
    return names


@pytest.fixture
async def raw(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(database_url)
    yield conn
    await conn.close()


def accepted(a: models.Approval, user: str = "U0APP") -> models.Attempt:
    return attempt(a, models.AttemptOutcome.ACCEPTED, user)


async def test_clicks_settling_together_are_written_in_one_statement(
    store: Repository, statements: list[str], raw: asyncpg.Connection
) -> None:
    """Thirty settlements and a quorum vote at once: one statement writes them all, each with
    its settlement row, attempt and outbox rows; the quorum vote only its vote; the callbacks
    go to the relay of this process, claimed, and each long-poll here is answered with its
    approval as written."""
    settling = [approval(n) for n in range(1, 31)]
    quorum = approval(99, required=models.Required(role="finance", approvals=2))
    for a in (*settling, quorum):
        await store.create_approval(a, [])
    taken: list[models.OutboxItem] = []
    stop = store.take_callbacks(taken.extend, outbox.LEASE)
    waiters = [asyncio.create_task(store.wait_for_settlement(a.approval_id, 30)) for a in settling]
    await asyncio.sleep(0.05)
    voted = quorum.evolve(decided_by=(decider("U0A"),))
    try:
        results = await asyncio.gather(
            *(
                store.settle(
                    approved(a), accepted(a), [models.card_update(a.approval_id), callback(a)]
                )
                for a in settling
            ),
            store.settle(voted, accepted(quorum, "U0A"), [models.card_update(quorum.approval_id)]),
        )
    finally:
        stop()
    assert results == [True] * 31
    assert statements == ["settle_batch"]
    answers = await asyncio.wait_for(asyncio.gather(*waiters), 5)
    for a, answer in zip(settling, answers, strict=True):
        assert answer == await store.get_approval(a.approval_id)
        assert answer is not None
        assert answer.status is models.Status.APPROVED
        assert [(x.slack_user_id, x.outcome) for x in await store.attempts(a.approval_id)] == [
            ("U0APP", models.AttemptOutcome.ACCEPTED)
        ]
    rows = await raw.fetch(
        "SELECT id, approval_id, kind, claims, locked_until IS NOT NULL AS leased FROM outbox"
        " ORDER BY id"
    )
    callbacks = {r["approval_id"]: r["id"] for r in rows if r["kind"] == "callback"}
    assert {item.approval_id: item.id for item in taken} == callbacks
    assert len(callbacks) == 30
    assert all(r["leased"] == (r["kind"] == "callback") for r in rows)
    assert sum(r["kind"] == "update_card" for r in rows) == 31
    settled_ids = {r["approval_id"] for r in await raw.fetch("SELECT approval_id FROM settlements")}
    assert settled_ids == {a.approval_id for a in settling}
    still = await store.get_approval(quorum.approval_id)
    assert still is not None
    assert still.status is models.Status.PENDING
    assert still.decided_by == (decider("U0A"),)


async def test_two_votes_on_one_approval_in_one_batch_are_judged_one_after_the_other(
    store: Repository, statements: list[str]
) -> None:
    """Two votes that saw the same voters, at once, beside another click: the batch writes
    the first; the second goes alone and loses its compare-and-set, writing nothing."""
    shared = approval(1, required=models.Required(role="finance", approvals=2))
    other = approval(2)
    for a in (shared, other):
        await store.create_approval(a, [])
    first = shared.evolve(decided_by=(decider("U0A"),))
    second = shared.evolve(decided_by=(decider("U0B"),))
    results = await asyncio.gather(
        store.settle(first, accepted(shared, "U0A"), []),
        store.settle(second, accepted(shared, "U0B"), []),
        store.settle(approved(other), accepted(other), []),
    )
    assert list(results) == [True, False, True]
    assert statements == ["settle_batch", "settle_one"]
    stored = await store.get_approval(shared.approval_id)
    assert stored is not None
    assert stored.decided_by == (decider("U0A"),)
    assert [x.slack_user_id for x in await store.attempts(shared.approval_id)] == ["U0A"]


async def test_an_approval_another_transaction_holds_is_settled_alone_once_free(
    store: Repository, statements: list[str], raw: asyncpg.Connection
) -> None:
    """The batch does not wait for a row another transaction holds (two batches never wait on
    each other): the other click is written at once, the held one alone once it is free."""
    held, free = approval(1), approval(2)
    for a in (held, free):
        await store.create_approval(a, [])
    holding = raw.transaction()
    await holding.start()
    await raw.execute("SELECT 1 FROM approvals WHERE approval_id = $1 FOR UPDATE", held.approval_id)
    held_settling = asyncio.create_task(store.settle(approved(held), accepted(held), []))
    free_settling = asyncio.create_task(store.settle(approved(free), accepted(free), []))
    assert await asyncio.wait_for(free_settling, 5)
    await asyncio.sleep(0.2)
    assert not held_settling.done()  # waiting its turn on the row, alone
    await holding.commit()
    assert await asyncio.wait_for(held_settling, 5)
    assert statements == ["settle_batch", "settle_one"]
    for a in (held, free):
        stored = await store.get_approval(a.approval_id)
        assert stored is not None
        assert stored.status is models.Status.APPROVED


async def test_a_batch_refused_by_one_settlement_gives_the_error_to_that_one_only(
    store: Repository, statements: list[str], raw: asyncpg.Connection
) -> None:
    """One settlement the database refuses (its approval has a settlements row already: the
    schema allows one) takes the batch back; each then goes alone, so the others are written
    and only that one raises its own error, having written nothing."""
    broken, fine = approval(1), approval(2)
    for a in (broken, fine):
        await store.create_approval(a, [])
    await raw.execute(
        "INSERT INTO settlements VALUES ($1, 'denied', '[]', null, now(), 'p')", broken.approval_id
    )
    results = await asyncio.gather(
        store.settle(approved(broken), accepted(broken), [callback(broken)]),
        store.settle(approved(fine), accepted(fine), [callback(fine)]),
        return_exceptions=True,
    )
    assert isinstance(results[0], asyncpg.UniqueViolationError)
    assert results[1] is True
    assert statements[0] == "settle_batch"
    assert sorted(statements[1:]) == ["settle_one", "settle_one"]
    stored = await store.get_approval(broken.approval_id)
    assert stored is not None
    assert stored.status is models.Status.PENDING
    assert await store.attempts(broken.approval_id) == []
    kinds = await raw.fetch("SELECT approval_id FROM outbox WHERE kind = 'callback'")
    assert [r["approval_id"] for r in kinds] == [fine.approval_id]


async def test_a_settlement_of_a_version_edited_since_is_not_written(
    store: Repository, statements: list[str], raw: asyncpg.Connection
) -> None:
    """The batch compares the version (edit_no) as settle_one does: a settlement judged on the
    arguments before an edit moves nothing, in the batch nor alone, while the other settlement
    in the batch is written. (The expiry sweep's batch goes through the same statement: an
    approval edited after the sweep read it waits for the next sweep.)"""
    edited, other = approval(1), approval(2)
    for a in (edited, other):
        await store.create_approval(a, [])
    # an edit committed after the clicker's read: the version moved on (its row is not needed
    # here, only the number the compare-and-set looks at)
    await raw.execute("UPDATE approvals SET edit_no = 1 WHERE approval_id = $1", edited.approval_id)
    results = await asyncio.gather(
        store.settle(approved(edited), accepted(edited), [callback(edited)]),
        store.settle(approved(other), accepted(other), [callback(other)]),
    )
    assert list(results) == [False, True]
    assert statements == ["settle_batch", "settle_one"]
    row = await raw.fetchrow(
        "SELECT status, (SELECT count(*) FROM attempts t WHERE t.approval_id = a.approval_id) AS n,"
        " (SELECT count(*) FROM outbox o WHERE o.approval_id = a.approval_id) AS o"
        " FROM approvals a WHERE approval_id = $1",
        edited.approval_id,
    )
    assert row is not None
    assert (row["status"], row["n"], row["o"]) == ("pending", 0, 0)
