"""One contract, two stores: the in-memory fake must behave like PostgreSQL."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from approvals import memory_store, models, pg_store, sql_loader
from approvals.store import Store
from tests.support import postgres

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture(params=["memory", "postgres"])
async def store(request: pytest.FixtureRequest, pg_template: str) -> AsyncIterator[Store]:
    if request.param == "memory":
        yield memory_store.MemoryStore()
        return
    dsn = await postgres.fresh_database(pg_template)
    real = await pg_store.PostgresStore.connect(dsn)
    yield real
    await real.close()
    await postgres.drop_database(pg_template, dsn)


def approval(n: int = 1, **changes: object) -> models.Approval:
    base = models.Approval(
        approval_id=f"apr_{n:024x}",
        status=models.Status.PENDING,
        agent="sales-bot",
        request_id=f"req-{n}",
        session_id="s-1",
        tool=models.ToolCall(name="transfer_money", call_id="c1", arguments={"amount": 5}),
        arguments_sha256="a" * 64,
        requester=models.Requester(slack_user_id="U0REQ"),
        required=models.Required(role="finance"),
        rule="rules[0] tool=transfer_*",
        created_at=T0,
        expires_at=T0 + timedelta(hours=1),
        policy_version="pol_x",
        fingerprint="f" * 64,
    )
    return base.evolve(**changes) if changes else base


def post_card(a: models.Approval) -> models.OutboxEntry:
    return models.OutboxEntry(kind=models.OutboxKind.POST_CARD, approval_id=a.approval_id)


def decider(user: str = "U0APP") -> models.Decider:
    return models.Decider(slack_user_id=user, name="Alma", at=T0 + timedelta(minutes=1))


def approved(a: models.Approval, user: str = "U0APP") -> models.Approval:
    return a.evolve(
        status=models.Status.APPROVED,
        decided_by=(decider(user),),
        decided_at=T0 + timedelta(minutes=1),
    )


def attempt(
    a: models.Approval, outcome: models.AttemptOutcome, user: str = "U0APP"
) -> models.Attempt:
    return models.Attempt(
        approval_id=a.approval_id, slack_user_id=user, action="approve", outcome=outcome, at=T0
    )


async def test_create_is_idempotent_on_request_ids(store: Store) -> None:
    a = approval()
    stored, created = await store.create_approval(a, [post_card(a)])
    assert created
    assert stored.status is models.Status.PENDING
    assert stored.tool == a.tool
    again, created_again = await store.create_approval(
        approval(2, request_id="req-1"), [post_card(a)]
    )
    assert not created_again
    assert again.approval_id == a.approval_id
    assert await store.get_approval(approval(2).approval_id) is None
    assert (await store.outbox_counts())[0] == 1  # no second outbox row for the duplicate


async def test_settle_is_compare_and_set(store: Store) -> None:
    a = approval()
    await store.create_approval(a, [])
    first = await store.settle(approved(a), attempt(a, models.AttemptOutcome.ACCEPTED), [])
    second = await store.settle(
        approved(a, "U0OTHER"), attempt(a, models.AttemptOutcome.ACCEPTED, "U0OTHER"), []
    )
    assert (first, second) == (True, False)
    stored = await store.get_approval(a.approval_id)
    assert stored is not None
    assert stored.status is models.Status.APPROVED
    assert [d.slack_user_id for d in stored.decided_by] == ["U0APP"]
    # the loser wrote nothing: one attempt, the winner's
    assert [x.slack_user_id for x in await store.attempts(a.approval_id)] == ["U0APP"]


async def test_concurrent_settles_exactly_one_wins(store: Store) -> None:
    a = approval()
    await store.create_approval(a, [])
    results = await asyncio.gather(
        *(
            store.settle(
                approved(a, f"U0X{i}"), attempt(a, models.AttemptOutcome.ACCEPTED, f"U0X{i}"), []
            )
            for i in range(10)
        )
    )
    assert results.count(True) == 1


async def test_outbox_claim_lease_retry_done(store: Store) -> None:
    a = approval()
    await store.create_approval(a, [post_card(a)])
    [item] = await store.claim_outbox(T0, T0 + timedelta(minutes=2), 10)
    assert item.kind is models.OutboxKind.POST_CARD
    assert item.attempts == 0
    # leased: nobody else gets it until the lease lapses
    assert await store.claim_outbox(T0, T0 + timedelta(minutes=2), 10) == []
    await store.outbox_retry(item.id, T0 + timedelta(seconds=5), "boom")
    assert await store.claim_outbox(T0 + timedelta(seconds=1), T0 + timedelta(minutes=2), 10) == []
    assert await store.outbox_next_due() == T0 + timedelta(seconds=5)
    [again] = await store.claim_outbox(T0 + timedelta(seconds=5), T0 + timedelta(minutes=2), 10)
    assert again.attempts == 1
    await store.outbox_done(again.id, T0 + timedelta(seconds=6))
    assert await store.outbox_counts() == (0, 0)
    assert await store.outbox_next_due() is None


async def test_lapsed_lease_is_claimed_again(store: Store) -> None:
    a = approval()
    await store.create_approval(a, [post_card(a)])
    await store.claim_outbox(T0, T0 + timedelta(seconds=30), 10)  # the relay dies holding it
    [item] = await store.claim_outbox(T0 + timedelta(seconds=31), T0 + timedelta(minutes=2), 10)
    assert item.approval_id == a.approval_id


async def test_released_row_is_claimable_at_once(store: Store) -> None:
    a = approval()
    await store.create_approval(a, [post_card(a)])
    [item] = await store.claim_outbox(T0, T0 + timedelta(minutes=2), 10)
    await store.outbox_release(item.id)  # a relay stopping mid-delivery
    [again] = await store.claim_outbox(T0, T0 + timedelta(minutes=2), 10)
    assert again.id == item.id
    assert again.attempts == 0


async def test_dead_letter_and_redrive(store: Store) -> None:
    a = approval()
    await store.create_approval(a, [])
    callback = models.OutboxEntry(
        kind=models.OutboxKind.CALLBACK,
        approval_id=a.approval_id,
        payload={"url": "u", "body": "{}"},
    )
    await store.settle(approved(a), None, [callback])
    [item] = await store.claim_outbox(T0 + timedelta(minutes=1), T0 + timedelta(minutes=3), 10)
    await store.outbox_dead(item.id, T0 + timedelta(minutes=2), "gone")
    stored = await store.get_approval(a.approval_id)
    assert stored is not None
    assert stored.delivery.status == "dead_letter"
    assert stored.delivery.last_error == "gone"
    assert await store.outbox_counts() == (0, 1)
    assert await store.redrive(a.approval_id, T0 + timedelta(minutes=3)) == 1
    [again] = await store.claim_outbox(T0 + timedelta(minutes=3), T0 + timedelta(minutes=5), 10)
    await store.outbox_done(again.id, T0 + timedelta(minutes=4))
    stored = await store.get_approval(a.approval_id)
    assert stored is not None
    assert stored.delivery.status == "delivered"


async def test_pending_expired_and_card(store: Store) -> None:
    early, late = approval(1), approval(2, expires_at=T0 + timedelta(hours=2))
    await store.create_approval(early, [])
    await store.create_approval(late, [])
    assert await store.pending_expired(T0 + timedelta(minutes=30), 10) == []
    assert await store.pending_expired(T0 + timedelta(hours=1), 10) == [early.approval_id]
    assert await store.pending_expired(T0 + timedelta(hours=3), 10) == [
        early.approval_id,
        late.approval_id,
    ]
    await store.set_card(early.approval_id, models.CardRef(channel="C0REVIEWS", ts="1.2"))
    stored = await store.get_approval(early.approval_id)
    assert stored is not None
    assert stored.card == models.CardRef(channel="C0REVIEWS", ts="1.2")


async def test_attempts_are_kept_in_order(store: Store) -> None:
    a = approval()
    await store.create_approval(a, [])
    for outcome in (models.AttemptOutcome.SELF, models.AttemptOutcome.NO_AUTHORITY):
        await store.record_attempt(attempt(a, outcome))
    assert [x.outcome for x in await store.attempts(a.approval_id)] == [
        models.AttemptOutcome.SELF,
        models.AttemptOutcome.NO_AUTHORITY,
    ]


async def test_settlement_wakes_a_waiter(store: Store) -> None:
    a = approval()
    await store.create_approval(a, [])
    loop = asyncio.get_running_loop()
    started = loop.time()
    waiter = asyncio.create_task(store.wait_for_settlement(a.approval_id, 10))
    await asyncio.sleep(0.05)
    await store.settle(approved(a), None, [])
    await asyncio.wait_for(waiter, 5)
    assert loop.time() - started < 5


def turn_record(n: int, verdict: str = "allow", **changes: object) -> models.TurnRecord:
    record = models.TurnRecord(
        agent="sales-bot",
        session_id="s-1",
        request_id=f"t{n}",
        channel="whatsapp",
        lead_id="lead-1",
        tool_name="book_demo",
        call_id=f"c{n}",
        inputs_sha256="b" * 64,
        policy_version="pol_x",
        verdict=verdict,
        rule="tools.book_demo.per_lead",
        reason_code="allowed",
        message="",
        evaluated=(
            {"rule": "per_lead", "outcome": "allow", "reason_code": "allowed", "detail": "0 of 2"},
        ),
        at=T0 + timedelta(minutes=n),
    )
    return record.evolve(**changes) if changes else record


async def test_turn_verdicts_are_kept_and_counted(store: Store) -> None:
    for n in range(3):
        await store.record_turn(turn_record(n))
    await store.record_turn(turn_record(3, verdict="refuse"))
    await store.record_turn(turn_record(4, session_id="s-2", lead_id="lead-2"))
    assert [t.request_id for t in await store.turns_for_session("sales-bot", "s-1")] == [
        "t0",
        "t1",
        "t2",
        "t3",
    ]
    assert (await store.turns_for_session("sales-bot", "s-1"))[0] == turn_record(0)
    assert await store.turns_for_session("other-bot", "s-1") == []
    # allowed calls after the cut-off only, for that lead and tool
    assert await store.count_allowed_turns("sales-bot", "lead-1", "book_demo", T0) == 2
    assert (
        await store.count_allowed_turns("sales-bot", "lead-1", "book_demo", T0 - timedelta(1)) == 3
    )
    assert (
        await store.count_allowed_turns("sales-bot", "lead-1", "send_proposal", T0 - timedelta(1))
        == 0
    )


async def test_audit_merges_attempts_and_settlements_in_time_order(store: Store) -> None:
    a = approval()
    await store.create_approval(a, [])
    await store.record_attempt(attempt(a, models.AttemptOutcome.SELF, "U0REQ"))
    settled = approved(a)
    await store.settle(
        settled, attempt(a, models.AttemptOutcome.ACCEPTED).evolve(at=T0 + timedelta(minutes=1)), []
    )
    events = await store.audit_since(T0)
    assert [(e.kind, e.at) for e in events] == [
        ("attempt", T0),
        ("attempt", T0 + timedelta(minutes=1)),
        ("settlement", T0 + timedelta(minutes=1)),
    ]
    assert events[0].data["outcome"] == "self"
    assert events[2].data["status"] == "approved"
    assert "U0APP" in json.dumps(events[2].data["decided_by"])
    assert [e.kind for e in await store.audit_since(T0 + timedelta(seconds=30))] == [
        "attempt",
        "settlement",
    ]


async def test_timers_fire_once_and_lapse_once_settled(store: Store) -> None:
    live, done = approval(1), approval(2)
    for a in (live, done):
        timers = [
            models.TimerEntry(
                approval_id=a.approval_id, kind="remind", step=0, due_at=T0 + timedelta(minutes=10)
            ),
            models.TimerEntry(
                approval_id=a.approval_id,
                kind="escalate",
                step=1,
                due_at=T0 + timedelta(minutes=30),
            ),
        ]
        await store.create_approval(a, [], timers)
    await store.settle(approved(done), None, [])
    assert await store.fire_due_timers(T0 + timedelta(minutes=5), 10) == []
    fired = await store.fire_due_timers(T0 + timedelta(minutes=31), 10)
    assert [(t.approval_id, t.kind) for t in fired] == [
        (live.approval_id, "remind"),
        (live.approval_id, "escalate"),
    ]
    assert await store.fire_due_timers(T0 + timedelta(hours=5), 10) == []  # once
    items = await store.claim_outbox(T0 + timedelta(hours=1), T0 + timedelta(hours=2), 10)
    assert sorted(i.kind.value for i in items) == ["escalate", "remind", "update_card"]
    again = models.TimerEntry(approval_id=live.approval_id, kind="remind", step=0, due_at=T0)
    await store.schedule_timer(again)  # the same rung twice: ignored
    assert await store.fire_due_timers(T0 + timedelta(hours=6), 10) == []
    stored = await store.get_approval(live.approval_id)
    assert stored is not None
    assert stored.escalated_at == T0 + timedelta(minutes=31)
    assert [t.kind for t, _ in await store.fired_timers(live.approval_id)] == ["remind", "escalate"]


# -- PostgreSQL only: migrations and database-enforced invariants --------------------------


async def test_migrations_are_idempotent_and_safe_concurrently(pg_template: str) -> None:
    conn = await asyncpg.connect(pg_template)
    try:
        await conn.execute("DROP DATABASE IF EXISTS cs_migrate_race WITH (FORCE)")
        await conn.execute("CREATE DATABASE cs_migrate_race")
    finally:
        await conn.close()
    dsn = postgres.with_database(pg_template, "cs_migrate_race")
    results = await asyncio.gather(*(pg_store.migrate(dsn) for _ in range(3)))
    # every migration applied exactly once, by whichever process got the lock first
    assert sorted(v for r in results for v in r) == [v for v, _, _ in sql_loader.migrations()]
    assert await pg_store.migrate(dsn) == []
    await postgres.drop_database(pg_template, dsn)


async def test_database_refuses_a_second_settlement(database_url: str) -> None:
    store = await pg_store.PostgresStore.connect(database_url)
    try:
        a = approval()
        await store.create_approval(a, [])
        await store.settle(approved(a), None, [])
        conn = await asyncpg.connect(database_url)
        try:
            with pytest.raises(asyncpg.UniqueViolationError):
                await conn.execute(
                    "INSERT INTO settlements VALUES ($1, 'denied', '[]', null, now(), 'p')",
                    a.approval_id,
                )
            with pytest.raises(asyncpg.CheckViolationError):
                await conn.execute(
                    "UPDATE approvals SET status = 'maybe' WHERE approval_id = $1", a.approval_id
                )
        finally:
            await conn.close()
    finally:
        await store.close()


async def test_a_quorum_vote_compares_the_voters_not_their_count(store: Store) -> None:
    a = approval(required=models.Required(role="finance", approvals=2))
    await store.create_approval(a, [])
    one = a.evolve(decided_by=(decider("U0A"),))
    assert await store.settle(one, attempt(one, models.AttemptOutcome.ACCEPTED, "U0A"), [])
    # a rival saw the same number of votes, but other voters: it must lose
    rival = a.evolve(decided_by=(decider("U0B"),))
    assert not await store.settle(
        rival, attempt(rival, models.AttemptOutcome.ACCEPTED, "U0B"), [], votes_before=["U0X"]
    )
    # the vote of U0A is dropped at settlement: U0C's vote replaces it, with the drop recorded
    swapped = a.evolve(decided_by=(decider("U0C"),))
    dropped = attempt(swapped, models.AttemptOutcome.VOTE_DROPPED, "U0A")
    assert await store.settle(
        swapped,
        attempt(swapped, models.AttemptOutcome.ACCEPTED, "U0C"),
        [],
        votes_before=["U0A"],
        dropped=[dropped],
    )
    stored = await store.get_approval(a.approval_id)
    assert stored is not None
    assert [d.slack_user_id for d in stored.decided_by] == ["U0C"]
    outcomes = [(x.slack_user_id, x.outcome) for x in await store.attempts(a.approval_id)]
    assert ("U0A", models.AttemptOutcome.VOTE_DROPPED) in outcomes
