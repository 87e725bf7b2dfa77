"""Expiry settles a batch in one statement, each approval exactly as a settlement of its own would.

Also with two replicas expiring the same approvals at once, and with a row another transaction
holds.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

import asyncpg
import pytest

from approvals import models, policy, service, states
from approvals.clock import Clock
from approvals.repository import Repository
from tests.support import postgres, reads
from tests.support.records import T0, approval, attempt, decider, post_card

NOW = T0 + timedelta(hours=2)  # every approval made here has expired by then
CALLBACK_URL = "https://agent.internal/approvals"
POLICY = policy.Policy.model_validate(
    {
        "slack": {"reviewer_channel": "C0REVIEWS"},
        "agents": {"sales-bot": {"token_env": "SALES_BOT_TOKEN"}},
        "roles": {"finance": {"usergroups": ["S0FIN"]}},
        "rules": [{"tool": "*", "require": "finance"}],
    }
)


class Interleaved(Repository):
    """The repository, with something done by someone else just before a batch is settled:
    after the sweep read its approvals, before its statement."""

    meanwhile: Callable[[], Awaitable[None]] | None = None

    async def settle_many(
        self, settlements: Sequence[tuple[models.Approval, Sequence[models.OutboxEntry]]]
    ) -> set[str]:
        if self.meanwhile is not None:
            await self.meanwhile()
        return await super().settle_many(settlements)


Stores = Callable[[], Awaitable[Interleaved]]


@pytest.fixture
async def stores(pg_template: str) -> AsyncIterator[Stores]:
    """Makes repositories, each over a database of its own."""
    made: list[tuple[Repository, str]] = []

    async def make() -> Interleaved:
        dsn = await postgres.fresh_database(pg_template)
        store = await Interleaved.connect(dsn)
        made.append((store, dsn))
        return store

    yield make
    for store, dsn in made:
        await store.close()
        await postgres.drop_database(pg_template, dsn)


def approvals_service(store: Repository, clock: Clock = lambda: NOW) -> service.ApprovalService:
    return service.ApprovalService(store=store, policy=lambda: POLICY, clock=clock)


async def statuses(store: Repository, *ns: int) -> set[models.Status]:
    return {a.status for a in await store.get_approvals([approval(n).approval_id for n in ns])}


async def a_mix(store: Repository) -> list[models.Approval]:
    """Pending approvals of every shape an expiry writes differently for: with and without a
    callback, with a quorum vote counted, with a ladder that may page."""
    with_callback = approval(1, callback_url=CALLBACK_URL)
    without = approval(2, expires_at=T0 + timedelta(hours=1, seconds=1))
    quorum = approval(
        3,
        callback_url=CALLBACK_URL,
        required=models.Required(role="finance", approvals=2),
        expires_at=T0 + timedelta(hours=1, seconds=2),
    )
    paging = approval(4, callback_url=CALLBACK_URL, expires_at=T0 + timedelta(hours=1, seconds=3))
    ladder = models.TimerEntry(
        approval_id=paging.approval_id,
        kind="escalate",
        step=0,
        due_at=T0 + timedelta(days=1),
        page=models.Page(services=("pagerduty", "opsgenie")),
    )
    for a in (with_callback, without, quorum, paging):
        await store.create_approval(a, [post_card(a)], [ladder] if a is paging else [])
    vote = quorum.evolve(decided_by=(decider("U0V1"),))
    assert await store.settle(vote, attempt(quorum, models.AttemptOutcome.ACCEPTED, "U0V1"), [])
    return [with_callback, without, quorum, paging]


async def written(store: Repository, ids: list[str]) -> dict[str, Any]:
    """What the store holds of these approvals: each one's state and settlement, and its outbox
    rows in order (kind, payload, when due), ids aside."""
    rows = await store.claim_outbox(NOW + timedelta(days=30), NOW + timedelta(days=30), 1000)
    settlements = [e for e in await reads.audit_events(store, T0) if e.kind == "settlement"]
    found: dict[str, Any] = {}
    for approval_id in ids:
        a = await store.get_approval(approval_id)
        assert a is not None
        found[approval_id] = {
            "approval": (a.status, a.decided_at, a.reason, a.decided_by, a.pages),
            "settlements": [(e.at, e.data) for e in settlements if e.approval_id == approval_id],
            "outbox": [
                (r.kind, r.work, r.created_at) for r in rows if r.approval_id == approval_id
            ],
        }
    return found


async def test_a_batch_writes_what_expiring_each_alone_writes(stores: Stores) -> None:
    batch, alone = await stores(), await stores()
    ids = [a.approval_id for a in await a_mix(batch)]
    await a_mix(alone)

    assert await approvals_service(batch).expire_due() == len(ids)

    # the settlement of one, as expiry wrote it before batches (and as cancel still does)
    one_by_one = approvals_service(alone)
    for approval_id in await alone.pending_expired(NOW, 100):
        pending = await one_by_one.get(approval_id)
        assert await one_by_one._settle(pending, states.Expire(at=NOW), None, NOW) is not None

    expected = await written(alone, ids)
    assert await written(batch, ids) == expected
    # what that is: expired at the statement's time with the votes it had, a card update, a
    # callback when it has a URL, a resolve for every service its ladder may page
    kinds = [[k for k, _, _ in expected[i]["outbox"]] for i in ids]
    post, card, callback = (
        models.OutboxKind.POST_CARD,
        models.OutboxKind.UPDATE_CARD,
        models.OutboxKind.CALLBACK,
    )
    assert kinds[:3] == [[post, card, callback], [post, card], [post, card, callback]]
    assert kinds[3][:3] == [post, card, callback]
    resolved = {
        w.service for _, w, _ in expected[ids[3]]["outbox"] if isinstance(w, models.PageOnCall)
    }
    assert resolved == {"pagerduty", "opsgenie"}
    for state in expected.values():
        assert state["approval"][:2] == (models.Status.EXPIRED, NOW)
        assert len(state["settlements"]) == 1
    assert [d.slack_user_id for d in expected[ids[2]]["approval"][3]] == ["U0V1"]
    assert await approvals_service(batch).expire_due() == 0  # once


async def test_each_approval_expired_wakes_its_waiters(stores: Stores) -> None:
    """A long-poll on an approval returns when the batch expires it, not at its timeout."""
    store = await stores()
    for n in (1, 2):
        await store.create_approval(approval(n), [])
    waiting = [
        asyncio.create_task(store.wait_for_settlement(approval(n).approval_id, 30)) for n in (1, 2)
    ]
    await asyncio.sleep(0.05)
    assert await approvals_service(store).expire_due() == 2
    async with asyncio.timeout(5):
        await asyncio.gather(*waiting)


async def test_an_approval_clicked_after_the_sweep_read_it_is_not_expired(stores: Stores) -> None:
    store = await stores()
    clicked, other = approval(1, callback_url=CALLBACK_URL), approval(2)
    for a in (clicked, other):
        await store.create_approval(a, [post_card(a)])
    click_at = clicked.expires_at - timedelta(seconds=1)
    approved = clicked.evolve(
        status=models.Status.APPROVED, decided_by=(decider(),), decided_at=click_at
    )

    async def a_click_settles_it() -> None:
        assert await store.settle(
            approved,
            attempt(clicked, models.AttemptOutcome.ACCEPTED),
            [models.card_update(clicked.approval_id)],
        )

    store.meanwhile = a_click_settles_it
    assert await approvals_service(store).expire_due() == 1  # the other one only
    store.meanwhile = None

    after = await written(store, [clicked.approval_id, other.approval_id])
    mine = after[clicked.approval_id]
    assert mine["approval"][:2] == (models.Status.APPROVED, click_at)
    assert [at for at, _ in mine["settlements"]] == [click_at]
    # the click's card update and nothing of an expiry: no callback, no second update
    assert [k for k, _, _ in mine["outbox"]] == [
        models.OutboxKind.POST_CARD,
        models.OutboxKind.UPDATE_CARD,
    ]
    assert after[other.approval_id]["approval"][0] is models.Status.EXPIRED
    assert await approvals_service(store).expire_due() == 0


async def test_a_vote_counted_after_the_sweep_read_it_waits_for_the_next_sweep(
    stores: Stores,
) -> None:
    """Compare-and-set on the voters, as a click's settlement: the batch does not expire it with
    the votes it read (the vote would go missing from the settlement); the next sweep does."""
    store = await stores()
    a = approval(1, required=models.Required(role="finance", approvals=2))
    await store.create_approval(a, [])

    async def a_vote_lands() -> None:
        vote = a.evolve(decided_by=(decider("U0V1"),))
        assert await store.settle(vote, attempt(a, models.AttemptOutcome.ACCEPTED, "U0V1"), [])

    store.meanwhile = a_vote_lands
    assert await approvals_service(store).expire_due() == 0
    store.meanwhile = None
    assert await approvals_service(store).expire_due() == 1
    expired = await store.get_approval(a.approval_id)
    assert expired is not None
    assert expired.status is models.Status.EXPIRED
    assert [d.slack_user_id for d in expired.decided_by] == ["U0V1"]


async def test_the_same_batch_settled_twice_settles_once(stores: Stores) -> None:
    """Two replicas that read the same approvals: the second statement moves nothing and writes
    nothing."""
    store = await stores()
    made = [approval(n, callback_url=CALLBACK_URL) for n in range(1, 6)]
    for a in made:
        await store.create_approval(a, [])
    read = await store.get_approvals([a.approval_id for a in made])
    expired = [states.settle(a, states.Expire(at=NOW), NOW) for a in read]
    batch = [(e, service._settlement_outbox(e)) for e in expired]
    assert await store.settle_many(batch) == {a.approval_id for a in made}
    assert await store.settle_many(batch) == set()
    # a card update and a callback each
    assert (await reads.outbox_counts(store))[0] == 2 * len(made)


async def test_decided_at_is_read_when_the_batch_is_written(stores: Stores) -> None:
    store = await stores()
    for n in range(1, 4):
        await store.create_approval(approval(n), [])
    readings: list[datetime] = []

    def clock() -> datetime:  # a second later at every reading
        readings.append(NOW + timedelta(seconds=len(readings)))
        return readings[-1]

    assert await approvals_service(store, clock).expire_due() == 3
    expired = await store.get_approvals([approval(n).approval_id for n in (1, 2, 3)])
    assert {a.decided_at for a in expired} == {readings[-1]}
    assert len(readings) == 2  # the sweep's "now", then the settlement's


# -- PostgreSQL only: replicas at the same time ---------------------------------------------


async def test_two_replicas_expiring_at_once_settle_each_approval_once(database_url: str) -> None:
    replicas = [await Repository.connect(database_url) for _ in range(2)]
    try:
        n = 300
        for i in range(1, n + 1):
            a = approval(i, callback_url=CALLBACK_URL, expires_at=T0 + timedelta(seconds=1 + i % 7))
            await replicas[0].create_approval(a, [post_card(a)])

        async def sweep(store: Repository) -> int:
            expire, total = approvals_service(store).expire_due, 0
            for _ in range(100):  # as the timer loop does, until a sweep finds nothing to take
                done = await expire(limit=50)
                total += done
                if not done and not await store.pending_expired(NOW, 1):
                    break
                await asyncio.sleep(0)
            return total

        counts = await asyncio.gather(*(sweep(r) for r in replicas))
        assert sum(counts) == n
        conn = await asyncpg.connect(database_url)
        try:
            per_approval = await conn.fetch(
                "SELECT a.approval_id, a.status,"
                " (SELECT count(*) FROM settlements s WHERE s.approval_id = a.approval_id) AS s,"
                " (SELECT count(*) FROM outbox o WHERE o.approval_id = a.approval_id"
                "  AND o.kind = 'callback') AS callbacks,"
                " (SELECT count(*) FROM outbox o WHERE o.approval_id = a.approval_id"
                "  AND o.kind = 'update_card') AS updates"
                " FROM approvals a"
            )
        finally:
            await conn.close()
        assert len(per_approval) == n
        assert {(r["status"], r["s"], r["callbacks"], r["updates"]) for r in per_approval} == {
            ("expired", 1, 1, 1)
        }
    finally:
        for r in replicas:
            await r.close()


async def test_a_row_held_by_another_transaction_is_skipped_not_waited_for(
    database_url: str,
) -> None:
    store = await Repository.connect(database_url)
    holder = await asyncpg.connect(database_url)
    try:
        for n in (1, 2, 3):
            await store.create_approval(approval(n), [])
        held = holder.transaction()
        await held.start()
        await holder.execute(
            "SELECT 1 FROM approvals WHERE approval_id = $1 FOR UPDATE", approval(2).approval_id
        )
        async with asyncio.timeout(5):  # it would wait for the holder forever
            assert await approvals_service(store).expire_due() == 2
        await held.rollback()
        assert await approvals_service(store).expire_due() == 1
        assert await statuses(store, 1, 2, 3) == {models.Status.EXPIRED}
    finally:
        await holder.close()
        await store.close()
