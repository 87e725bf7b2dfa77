"""The repository's contract, on PostgreSQL: idempotent creation, compare-and-set settlement,
the outbox's leases, timers, turns, the audit, and what the schema refuses."""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone

import asyncpg
import pytest

from approvals import models, pg_db, sql_loader, states
from approvals.repository import Repository
from tests.support import postgres, reads
from tests.support.records import T0, approval, approved, attempt, decider, post_card


async def test_create_is_idempotent_on_request_ids(store: Repository) -> None:
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
    assert (await reads.outbox_counts(store))[0] == 1  # no second outbox row for the duplicate


async def test_settle_is_compare_and_set(store: Repository) -> None:
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


async def test_concurrent_settles_exactly_one_wins(store: Repository) -> None:
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


async def test_outbox_claim_lease_retry_done(store: Repository) -> None:
    a = approval()
    await store.create_approval(a, [post_card(a)])
    [item] = await store.claim_outbox(T0, T0 + timedelta(minutes=2), 10)
    assert item.kind is models.OutboxKind.POST_CARD
    assert item.attempts == 0
    # leased: nobody else gets it until the lease lapses
    assert await store.claim_outbox(T0, T0 + timedelta(minutes=2), 10) == []
    await store.outbox_retry(item, T0 + timedelta(seconds=5), "boom")
    assert await store.claim_outbox(T0 + timedelta(seconds=1), T0 + timedelta(minutes=2), 10) == []
    assert await store.outbox_next_due() == T0 + timedelta(seconds=5)
    [again] = await store.claim_outbox(T0 + timedelta(seconds=5), T0 + timedelta(minutes=2), 10)
    assert again.attempts == 1
    await store.outbox_done(again, T0 + timedelta(seconds=6))
    assert await reads.outbox_counts(store) == (0, 0)
    assert await store.outbox_next_due() is None


async def test_lapsed_lease_is_claimed_again(store: Repository) -> None:
    a = approval()
    await store.create_approval(a, [post_card(a)])
    await store.claim_outbox(T0, T0 + timedelta(seconds=30), 10)  # the relay dies holding it
    [item] = await store.claim_outbox(T0 + timedelta(seconds=31), T0 + timedelta(minutes=2), 10)
    assert item.approval_id == a.approval_id
    # the first relay may have delivered it without recording so: a card looks for itself
    assert (item.attempts, item.claims, item.maybe_delivered_before) == (0, 2, True)


async def test_a_renewed_lease_holds_and_a_row_let_go_is_not_leased_again(
    store: Repository,
) -> None:
    a, b = approval(1), approval(2)
    await store.create_approval(a, [post_card(a)])
    await store.create_approval(b, [post_card(b)])
    held, released = await store.claim_outbox(T0, T0 + timedelta(seconds=30), 10)
    await store.outbox_release(released)  # let go before the renewal comes
    await store.outbox_renew([held, released], T0 + timedelta(seconds=60))
    # past the first lease: the renewed row is still held, the released one free to claim
    [again] = await store.claim_outbox(T0 + timedelta(seconds=31), T0 + timedelta(minutes=2), 10)
    assert again.id == released.id
    [lapsed] = await store.claim_outbox(T0 + timedelta(seconds=61), T0 + timedelta(minutes=3), 10)
    assert lapsed.id == held.id


async def test_released_row_is_claimable_at_once(store: Repository) -> None:
    a = approval()
    await store.create_approval(a, [post_card(a)])
    [item] = await store.claim_outbox(T0, T0 + timedelta(minutes=2), 10)
    await store.outbox_release(item)  # a relay stopping mid-delivery
    [again] = await store.claim_outbox(T0, T0 + timedelta(minutes=2), 10)
    assert again.id == item.id
    assert again.attempts == 0
    assert (item.claims, item.maybe_delivered_before) == (1, False)
    assert (again.claims, again.maybe_delivered_before) == (2, True)  # it may have been sent


async def test_a_lapsed_claim_changes_nothing_once_another_relay_holds_the_row(
    store: Repository,
) -> None:
    """The claim fences every outcome: relay A's lease lapsed under a slow call and relay B
    claimed the row; whatever A then records (retry, later, dead, release, renew) leaves B's
    claim as it is."""
    a = approval()
    await store.create_approval(a, [post_card(a)])
    [stale] = await store.claim_outbox(T0, T0 + timedelta(seconds=30), 10)
    [current] = await store.claim_outbox(T0 + timedelta(seconds=31), T0 + timedelta(minutes=2), 10)
    assert (stale.claims, current.claims) == (1, 2)

    await store.outbox_retry(stale, T0 + timedelta(seconds=32), "slow agent")
    await store.outbox_later(stale, T0 + timedelta(seconds=32))
    await store.outbox_release(stale)
    assert not await store.outbox_dead(stale, T0 + timedelta(seconds=32), "gone", [post_card(a)])
    await store.outbox_renew([stale], T0 + timedelta(minutes=10))

    # still B's: not free before B's lease lapses, not dead, no follow-up queued, no attempt
    assert await reads.outbox_counts(store) == (1, 0)
    assert await store.claim_outbox(T0 + timedelta(seconds=33), T0 + timedelta(minutes=3), 10) == []
    assert await store.outbox_next_due() == T0 + timedelta(minutes=2)
    # and A's renewal did not extend B's lease: free once B's lapses
    [third] = await store.claim_outbox(T0 + timedelta(minutes=2), T0 + timedelta(minutes=4), 10)
    assert (third.id, third.attempts, third.claims) == (current.id, 0, 3)


async def test_a_delivery_is_recorded_by_whoever_made_it_and_nothing_undoes_it(
    store: Repository,
) -> None:
    """A's delivery succeeded after its lease lapsed: it is done, and B's later failure on the
    same row (a second, at-least-once attempt) does not bring it back to be sent again."""
    a = approval()
    await store.create_approval(a, [post_card(a)])
    [stale] = await store.claim_outbox(T0, T0 + timedelta(seconds=30), 10)
    [current] = await store.claim_outbox(T0 + timedelta(seconds=31), T0 + timedelta(minutes=2), 10)
    await store.outbox_done(stale, T0 + timedelta(seconds=32))
    await store.outbox_retry(current, T0 + timedelta(seconds=33), "timeout")
    await store.outbox_dead(current, T0 + timedelta(seconds=33), "gone")
    await store.outbox_done(current, T0 + timedelta(seconds=34))  # done once, not twice
    assert await reads.outbox_counts(store) == (0, 0)
    assert await store.outbox_next_due() is None
    assert await store.claim_outbox(T0 + timedelta(hours=1), T0 + timedelta(hours=2), 10) == []


async def test_a_row_handed_back_untried_has_its_claim_undone(store: Repository) -> None:
    """Unclaimed (the relay stopped before the delivery started): free at once, and the next
    claim is not taken for one that may follow a delivery; released (stopped mid-delivery), it
    is."""
    a = approval()
    await store.create_approval(a, [post_card(a)])
    [item] = await store.claim_outbox(T0, T0 + timedelta(minutes=2), 10)
    await store.outbox_unclaim(item)
    [again] = await store.claim_outbox(T0, T0 + timedelta(minutes=2), 10)
    assert (again.claims, again.maybe_delivered_before) == (1, False)
    await store.outbox_unclaim(item)  # fenced too: a stale hand-back leaves the new claim be
    assert await store.claim_outbox(T0, T0 + timedelta(minutes=2), 10) == []


async def test_dead_letter_and_redrive(store: Repository) -> None:
    a = approval()
    await store.create_approval(a, [])
    callback = models.OutboxEntry(
        approval_id=a.approval_id,
        work=models.Callback(url="u", body="{}", agent=a.agent),
    )
    await store.settle(approved(a), None, [callback])
    [item] = await store.claim_outbox(T0 + timedelta(minutes=1), T0 + timedelta(minutes=3), 10)
    await store.outbox_dead(item, T0 + timedelta(minutes=2), "gone")
    stored = await store.get_approval(a.approval_id)
    assert stored is not None
    assert stored.delivery.status == "dead_letter"
    assert stored.delivery.last_error == "gone"
    assert await reads.outbox_counts(store) == (0, 1)
    assert await store.redrive(a.approval_id, T0 + timedelta(minutes=3)) == 1
    [again] = await store.claim_outbox(T0 + timedelta(minutes=3), T0 + timedelta(minutes=5), 10)
    await store.outbox_done(again, T0 + timedelta(minutes=4))
    stored = await store.get_approval(a.approval_id)
    assert stored is not None
    assert stored.delivery.status == "delivered"


async def test_pending_expired_and_card(store: Repository) -> None:
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


async def test_attempts_are_kept_in_order(store: Repository) -> None:
    a = approval()
    await store.create_approval(a, [])
    for outcome in (models.AttemptOutcome.SELF, models.AttemptOutcome.NO_AUTHORITY):
        await store.record_attempt(attempt(a, outcome))
    assert [x.outcome for x in await store.attempts(a.approval_id)] == [
        models.AttemptOutcome.SELF,
        models.AttemptOutcome.NO_AUTHORITY,
    ]


async def test_settlement_wakes_a_waiter(store: Repository) -> None:
    a = approval()
    await store.create_approval(a, [])
    loop = asyncio.get_running_loop()
    started = loop.time()
    waiter = asyncio.create_task(store.wait_for_settlement(a.approval_id, 10))
    await asyncio.sleep(0.05)
    await store.settle(approved(a), None, [])
    await asyncio.wait_for(waiter, 5)
    assert loop.time() - started < 5


async def test_a_settlement_here_answers_its_waiters_with_the_approval(store: Repository) -> None:
    a = approval()
    await store.create_approval(a, [])
    waiter = asyncio.create_task(store.wait_for_settlement(a.approval_id, 10))
    await asyncio.sleep(0.05)
    settled = approved(a)
    assert await store.settle(settled, attempt(a, models.AttemptOutcome.ACCEPTED), [])
    assert await asyncio.wait_for(waiter, 5) == settled == await store.get_approval(a.approval_id)


async def test_a_settlement_elsewhere_heard_while_one_here_loses_still_wakes_the_waiters(
    store: Repository, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The notification of another process's settlement, heard while a statement of this one
    is settling the same approval, waits for that statement's answer (it would bring the
    approval); the statement lost, so the waiters are woken then, to read."""
    a = approval()
    await store.create_approval(a, [])
    elsewhere = await Repository.connect(database_url)
    try:
        waiter = asyncio.create_task(store.wait_for_settlement(a.approval_id, 30))
        await asyncio.sleep(0.05)
        real = store._db.fetchrow

        async def beaten_meanwhile(query: str, *args: object) -> object:
            if query == "settle_one":
                assert await elsewhere.settle(approved(a), None, [])
                for _ in range(250):  # until this process heard it settle
                    if a.approval_id in store._heard_while_settling:
                        break
                    await asyncio.sleep(0.02)
                assert not waiter.done()  # held for this statement's answer
            return await real(query, *args)

        monkeypatch.setattr(store._db, "fetchrow", beaten_meanwhile)
        ours = approved(a, user="U0OTHER")
        assert not await store.settle(ours, attempt(a, models.AttemptOutcome.ACCEPTED), [])
        assert await asyncio.wait_for(waiter, 5) is None  # woken to read, well before 30 s
        stored = await store.get_approval(a.approval_id)
        assert stored is not None
        assert stored.decided_by == (decider("U0APP"),)
    finally:
        await elsewhere.close()


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


def turn_key(n: int, **changes: str) -> models.TurnKey:
    return turn_record(n, **changes).key


def lead_window(since: datetime = T0 - timedelta(1), **changes: str) -> models.LeadWindow:
    base = {"agent": "sales-bot", "lead_key": "lead-1", "tool_name": "book_demo", "since": since}
    return models.LeadWindow.model_validate({**base, **changes})


async def test_turn_verdicts_are_kept_per_session(store: Repository) -> None:
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


async def test_a_turn_is_recorded_once_per_request_ids(store: Repository) -> None:
    first, created = await store.record_turn(turn_record(1))
    assert created
    assert first == turn_record(1)
    other = turn_record(1, verdict="refuse", reason_code="per_lead_limit", inputs_sha256="c" * 64)
    again, created = await store.record_turn(other)
    assert (again, created) == (first, False)
    assert await store.get_turn(turn_key(1)) == first
    assert await store.get_turn(turn_key(2)) is None
    # the same request id in another session or for another agent is another turn
    assert (await store.record_turn(turn_record(1, session_id="s-2")))[1]
    assert (await store.record_turn(turn_record(1, agent="ops-bot")))[1]
    assert len(await store.turns_for_session("sales-bot", "s-1")) == 1


async def test_decide_turn_counts_the_allowed_calls_of_one_lead_by_its_key(
    store: Repository,
) -> None:
    history = [
        turn_record(0, lead_id="Lena@Prospect.example"),
        turn_record(1, lead_id="lena@prospect.example", session_id="s-2"),  # other session
        turn_record(2, lead_id="LENA@PROSPECT.EXAMPLE", verdict="refuse"),  # not allowed
        turn_record(3, lead_id="lena@prospect.example", tool_name="send_proposal"),
        turn_record(4, lead_id="otto@prospect.example"),
        turn_record(5, lead_id="lena@prospect.example", agent="ops-bot"),
    ]
    for record in history:
        await store.record_turn(record)
    counts: list[int | None] = []

    def decide(n: int) -> Callable[[int | None], models.TurnRecord]:
        def record(count: int | None) -> models.TurnRecord:
            counts.append(count)
            return turn_record(n, lead_id="LENA@prospect.example")

        return record

    window = lead_window(lead_key="lena@prospect.example")
    stored, created = await store.decide_turn(turn_key(9), window, decide(9))
    assert (stored, created) == (turn_record(9, lead_id="LENA@prospect.example"), True)
    # only what was allowed after the cut-off counts (turn 0 is at T0, turn 1 a minute later)
    later = lead_window(T0, lead_key="lena@prospect.example")
    assert (await store.decide_turn(turn_key(10), later, decide(10)))[1]
    assert counts == [2, 2]  # turns 0 and 1; then turns 1 and 9


async def test_decide_turn_replays_the_stored_verdict_without_deciding(store: Repository) -> None:
    await store.record_turn(turn_record(1))

    def decide(count: int | None) -> models.TurnRecord:
        raise AssertionError("a stored verdict is never decided again")

    assert await store.decide_turn(turn_key(1), lead_window(), decide) == (turn_record(1), False)
    assert await store.decide_turn(turn_key(1), None, decide) == (turn_record(1), False)


async def test_decide_turn_without_a_limit_counts_nothing(store: Repository) -> None:
    counts: list[int | None] = []

    def decide(count: int | None) -> models.TurnRecord:
        counts.append(count)
        return turn_record(1)

    assert await store.decide_turn(turn_key(1), None, decide) == (turn_record(1), True)
    assert counts == [None]


async def test_decide_turn_may_leave_the_record_for_later(store: Repository) -> None:
    """An escalation is recorded once its approval exists (outside this transaction)."""
    assert await store.decide_turn(turn_key(1), lead_window(), lambda _count: None) == (None, False)
    assert await store.get_turn(turn_key(1)) is None


async def test_concurrent_decisions_for_one_lead_see_each_other(store: Repository) -> None:
    def allow_three(n: int) -> Callable[[int | None], models.TurnRecord]:
        def decide(count: int | None) -> models.TurnRecord:
            assert count is not None
            return turn_record(n, verdict="allow" if count < 3 else "refuse")

        return decide

    results = await asyncio.gather(
        *(store.decide_turn(turn_key(n), lead_window(), allow_three(n)) for n in range(30))
    )
    verdicts = [record.verdict for record, _ in results if record is not None]
    assert (verdicts.count("allow"), verdicts.count("refuse")) == (3, 27)


async def test_concurrent_identical_decisions_record_once(store: Repository) -> None:
    results = await asyncio.gather(
        *(store.decide_turn(turn_key(1), None, lambda _c: turn_record(1)) for _ in range(10)),
        *(store.record_turn(turn_record(1)) for _ in range(10)),
    )
    assert all(record == turn_record(1) for record, _ in results)
    assert [created for _, created in results].count(True) == 1
    assert len(await store.turns_for_session("sales-bot", "s-1")) == 1


async def test_audit_merges_attempts_and_settlements_in_time_order(store: Repository) -> None:
    a = approval()
    await store.create_approval(a, [])
    await store.record_attempt(attempt(a, models.AttemptOutcome.SELF, "U0REQ"))
    settled = approved(a)
    await store.settle(
        settled, attempt(a, models.AttemptOutcome.ACCEPTED).evolve(at=T0 + timedelta(minutes=1)), []
    )
    events = await reads.audit_events(store, T0)
    assert [(e.kind, e.at) for e in events] == [
        ("attempt", T0),
        ("created", T0),  # at the same instant, by kind
        ("attempt", T0 + timedelta(minutes=1)),
        ("settlement", T0 + timedelta(minutes=1)),
    ]
    assert events[0].data["outcome"] == "self"
    assert events[3].data["status"] == "approved"
    assert "U0APP" in json.dumps(events[3].data["decided_by"])
    assert [e.kind for e in await reads.audit_events(store, T0 + timedelta(seconds=30))] == [
        "attempt",
        "settlement",
    ]


async def test_timers_fire_once_and_lapse_once_settled(store: Repository) -> None:
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


# -- what the schema refuses -------------------------------------------------------------------


@contextlib.contextmanager
def violates(constraint: str) -> Iterator[None]:
    """The block fails on ``constraint``, named by asyncpg's integrity error."""
    with pytest.raises(asyncpg.IntegrityConstraintViolationError) as caught:
        yield
    assert caught.value.constraint_name == constraint


async def test_rows_of_an_approval_that_does_not_exist_are_refused(store: Repository) -> None:
    ghost = approval(9)
    with violates("attempts_approval_id_fkey"):
        await store.record_attempt(attempt(ghost, models.AttemptOutcome.SELF))
    with violates("timers_approval_id_fkey"):
        await store.schedule_timer(
            models.TimerEntry(approval_id=ghost.approval_id, kind="remind", step=0, due_at=T0)
        )
    escalation = turn_record(1, verdict="escalate", approval_id=ghost.approval_id)
    with violates("turn_verdicts_approval_id_fkey"):
        await store.record_turn(escalation)
    assert await store.get_turn(turn_key(1)) is None


async def test_a_refused_row_takes_its_whole_transaction_back(store: Repository) -> None:
    a = approval()
    with violates("outbox_approval_id_fkey"):
        await store.create_approval(a, [post_card(a), post_card(approval(9))])
    assert await store.get_approval(a.approval_id) is None
    assert await reads.outbox_counts(store) == (0, 0)
    stored, created = await store.create_approval(a, [post_card(a)])  # the ids are still free
    assert created
    assert stored.approval_id == a.approval_id


async def test_an_approval_id_is_given_once(store: Repository) -> None:
    await store.create_approval(approval(), [])
    with violates("approvals_pkey"):
        await store.create_approval(approval(request_id="req-other"), [])


async def test_the_checks_of_the_schema_hold(store: Repository) -> None:
    with violates("approvals_arguments_sha256_check"):
        await store.create_approval(approval(1, arguments_sha256="A" * 64), [])
    with violates("approvals_check"):  # expires_at > created_at
        await store.create_approval(approval(2, expires_at=T0), [])
    with violates("turn_verdicts_check"):  # an escalation always names its approval
        await store.record_turn(turn_record(1, verdict="escalate"))
    a = approval(3)
    await store.create_approval(a, [post_card(a)])
    [item] = await store.claim_outbox(T0, T0 + timedelta(minutes=1), 10)
    await store.outbox_done(item, T0)
    # a row delivered is never dead-lettered too: the late verdict changes nothing
    await store.outbox_dead(item, T0, "late", [post_card(a)])
    assert await reads.outbox_counts(store) == (0, 0)  # nor is its follow-up queued


def escalation(a: models.Approval, due_at: datetime) -> models.TimerEntry:
    return models.TimerEntry(approval_id=a.approval_id, kind="escalate", step=0, due_at=due_at)


async def test_timestamps_come_back_in_utc(store: Repository) -> None:
    """timestamptz keeps the instant, not the offset it was written with."""
    plus2 = timezone(timedelta(hours=2))
    a = approval(created_at=T0.astimezone(plus2))
    await store.create_approval(a, [], [escalation(a, T0.astimezone(plus2))])
    clicked = attempt(a, models.AttemptOutcome.SELF).evolve(at=T0.astimezone(plus2))
    await store.record_attempt(clicked)
    await store.fire_due_timers((T0 + timedelta(minutes=5)).astimezone(plus2), 10)
    stored = await store.get_approval(a.approval_id)
    assert stored is not None
    [seen] = await store.attempts(a.approval_id)
    [(timer, fired_at)] = await store.fired_timers(a.approval_id)
    stamps = [stored.created_at, stored.escalated_at, seen.at, timer.due_at, fired_at]
    assert stamps == [T0, T0 + timedelta(minutes=5), T0, T0, T0 + timedelta(minutes=5)]
    assert all(stamp is not None and stamp.tzinfo is UTC for stamp in stamps)
    # the attempt, the creation and the timer
    assert [e.at.tzinfo for e in await reads.audit_events(store, T0)] == [UTC, UTC, UTC]


# -- migrations and the invariants the database enforces whoever writes ----------------------


async def test_migrations_are_idempotent_and_safe_concurrently(pg_template: str) -> None:
    conn = await asyncpg.connect(pg_template)
    try:
        await conn.execute("DROP DATABASE IF EXISTS cs_migrate_race WITH (FORCE)")
        await conn.execute("CREATE DATABASE cs_migrate_race")
    finally:
        await conn.close()
    dsn = postgres.with_database(pg_template, "cs_migrate_race")
    results = await asyncio.gather(*(pg_db.migrate(dsn) for _ in range(3)))
    # every migration applied exactly once, by whichever process got the lock first
    assert sorted(v for r in results for v in r) == [v for v, _, _ in sql_loader.migrations()]
    assert await pg_db.migrate(dsn) == []
    await postgres.drop_database(pg_template, dsn)


async def test_database_refuses_a_second_settlement(database_url: str) -> None:
    store = await Repository.connect(database_url)
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


# the audit's attempts, settlements and timers as PostgreSQL once shaped each event's data
# (jsonb_build_object), before the repository shaped them from raw columns
JSONB_AUDIT = """
SELECT 'attempt' AS kind, approval_id, at,
       jsonb_build_object('slack_user_id', slack_user_id, 'email', email, 'name', name,
                          'action', action, 'outcome', outcome, 'detail', detail)::text AS data
FROM attempts WHERE at >= $1
UNION ALL
SELECT 'settlement', approval_id, decided_at,
       jsonb_build_object('status', status, 'decided_by', decided_by, 'reason', reason,
                          'policy_version', policy_version)::text
FROM settlements WHERE decided_at >= $1
UNION ALL
SELECT 'timer', approval_id, fired_at,
       jsonb_build_object('outcome', CASE kind WHEN 'remind' THEN 'reminded' ELSE 'escalated' END,
                          'step', step, 'due_at', due_at)::text
FROM timers WHERE fired_at >= $1
ORDER BY at, kind
"""


async def test_the_audit_export_reads_as_when_postgresql_shaped_it(database_url: str) -> None:
    """The repository shapes each event's data from raw columns: same keys, same order, same
    timestamps as jsonb wrote them, so ``countersign audit export`` gives the same bytes."""
    a = approval()
    timers = [
        models.TimerEntry(
            approval_id=a.approval_id,
            kind="remind",
            step=0,
            due_at=T0 + timedelta(minutes=10, microseconds=120000),
        ),
        models.TimerEntry(
            approval_id=a.approval_id, kind="escalate", step=1, due_at=T0 + timedelta(minutes=30)
        ),
    ]
    store = await Repository.connect(database_url, listen=False)
    try:
        await store.create_approval(a, [], timers)
        await store.record_attempt(attempt(a, models.AttemptOutcome.SELF, "U0REQ"))
        clicked = attempt(a, models.AttemptOutcome.ACCEPTED).evolve(
            at=T0 + timedelta(seconds=30), email="alma@example.com", name="Alma", detail="ok"
        )
        await store.settle(approved(a).evolve(reason="fine"), clicked, [])
        await store.fire_due_timers(T0 + timedelta(hours=1), 10)  # settled: they lapse, fired
        # the kinds that query shaped (the others have been shaped here from the start)
        exported = [
            e.model_dump_json()
            for e in await reads.audit_events(store, T0)
            if e.kind in ("attempt", "settlement", "timer")
        ]
    finally:
        await store.close()
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(JSONB_AUDIT, T0)
    finally:
        await conn.close()
    assert [json.loads(line)["kind"] for line in exported] == [
        "attempt",
        "attempt",
        "settlement",
        "timer",
        "timer",
    ]
    assert exported == [
        models.AuditEvent(
            kind=r["kind"], approval_id=r["approval_id"], at=r["at"], data=json.loads(r["data"])
        ).model_dump_json()
        for r in rows
    ]


async def test_a_quorum_vote_compares_the_voters_not_their_count(store: Repository) -> None:
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


async def migrated_before(admin_dsn: str, version: int) -> str:
    """A fresh database with only the migrations older than ``version`` applied."""
    name = "cs_before_" + secrets.token_hex(6)
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f"CREATE DATABASE {name}")
    finally:
        await conn.close()
    dsn = postgres.with_database(admin_dsn, name)
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            "CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for number, migration, sql in sql_loader.migrations():
            if number < version:
                await conn.execute(sql)
                await conn.execute(
                    "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
                    number,
                    migration,
                )
    finally:
        await conn.close()
    return dsn


OLD_TURN = """
INSERT INTO turn_verdicts (agent, session_id, request_id, channel, lead_id, tool_name, call_id,
                           inputs_sha256, policy_version, verdict, rule, reason_code, message,
                           evaluated, at)
VALUES ('sales-bot', 's-1', $1, 'whatsapp', $2, 'book_demo', 'c1', $3, 'pol_x', $4, 'r', 'allowed',
        '', '[]', $5)
"""


async def test_migration_0008_keeps_duplicate_history_and_keys_old_rows(pg_template: str) -> None:
    """Before 0008 a resent turn was recorded again: those rows stay (the audit is append-only),
    marked as duplicates of the first, which is the verdict a replay answers with from now on."""
    dsn = await migrated_before(pg_template, 8)
    try:
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(OLD_TURN, "t1", "Lena@Prospect.example", "a" * 64, "allow", T0)
            later = T0 + timedelta(minutes=1)
            await conn.execute(OLD_TURN, "t1", "Lena@Prospect.example", "a" * 64, "allow", later)
            await conn.execute(OLD_TURN, "t1", "Lena@Prospect.example", "a" * 64, "refuse", later)
            await conn.execute(OLD_TURN, "t2", "+351 900 000 000", "b" * 64, "allow", later)
            await conn.execute(OLD_TURN, "t3", "crm-Lead-42", "c" * 64, "allow", later)
        finally:
            await conn.close()
        assert 8 in await pg_db.migrate(dsn)
        conn = await asyncpg.connect(dsn)
        try:
            rows = await conn.fetch(
                "SELECT id, request_id, lead_key, duplicate_of FROM turn_verdicts ORDER BY id"
            )
        finally:
            await conn.close()
        first = rows[0]["id"]
        assert [(r["request_id"], r["lead_key"], r["duplicate_of"]) for r in rows] == [
            ("t1", "lena@prospect.example", None),
            ("t1", "lena@prospect.example", first),
            ("t1", "lena@prospect.example", first),
            ("t2", "+351900000000", None),
            ("t3", "crm-Lead-42", None),
        ]
        store = await Repository.connect(dsn)
        try:
            stored = await store.get_turn(
                models.TurnKey(agent="sales-bot", session_id="s-1", request_id="t1")
            )
            assert stored is not None
            assert stored.at == T0
            again, created = await store.record_turn(turn_record(1, request_id="t1"))
            assert (again, created) == (stored, False)
            counts: list[int | None] = []

            def decide(count: int | None) -> models.TurnRecord:
                counts.append(count)
                return turn_record(9)

            window = lead_window(lead_key="lena@prospect.example")
            await store.decide_turn(turn_key(9), window, decide)
            # both old allowed rows count: the agent was told "allow" twice, so it may have acted
            assert counts == [2]
            assert len(await store.turns_for_session("sales-bot", "s-1")) == 6
        finally:
            await store.close()
    finally:
        await postgres.drop_database(pg_template, dsn)


async def test_the_card_state_follows_its_post(store: Repository) -> None:
    """pending (with the last try's error) → failed when dead-lettered → pending on redrive →
    posted once its ts is stored; the callback's own outbox rows never count as the card's."""
    a = approval()
    await store.create_approval(a, [post_card(a)])

    async def card() -> models.CardState:
        stored = await store.get_approval(a.approval_id)
        assert stored is not None
        return stored.card_state

    assert await card() == models.CardState(status="pending")
    [item] = await store.claim_outbox(T0, T0 + timedelta(minutes=1), 10)
    await store.outbox_retry(item, T0 + timedelta(seconds=5), "not_in_channel")
    assert await card() == models.CardState(status="pending", error="not_in_channel")
    [item] = await store.claim_outbox(T0 + timedelta(seconds=5), T0 + timedelta(minutes=2), 10)
    await store.outbox_dead(item, T0 + timedelta(seconds=6), "channel_not_found")
    assert await card() == models.CardState(status="failed", error="channel_not_found")
    callback = models.OutboxEntry(
        approval_id=a.approval_id, work=models.Callback(url="u", body="{}", agent=a.agent)
    )
    await store.settle(approved(a), None, [callback])  # a later row of another kind
    assert (await card()).status == "failed"

    assert await store.redrive(a.approval_id, T0 + timedelta(minutes=3)) == 1
    assert (await card()).status == "pending"
    await store.set_card(a.approval_id, models.CardRef(channel="C0REVIEWS", ts="1.2"))
    assert await card() == models.CardState(status="posted", channel="C0REVIEWS", ts="1.2")


async def test_a_row_handed_back_later_keeps_its_attempts(store: Repository) -> None:
    """outbox_later (a paced row past its lease): due again at its turn, no attempt counted."""
    a = approval()
    await store.create_approval(a, [post_card(a)])
    [item] = await store.claim_outbox(T0, T0 + timedelta(minutes=2), 10)
    await store.outbox_later(item, T0 + timedelta(seconds=30))
    assert await store.claim_outbox(T0 + timedelta(seconds=29), T0 + timedelta(minutes=3), 10) == []
    [again] = await store.claim_outbox(T0 + timedelta(seconds=30), T0 + timedelta(minutes=3), 10)
    assert (again.id, again.attempts) == (item.id, 0)
    # handed back untried: this claim is as good as the first (no card look-up is due)
    assert (again.claims, again.maybe_delivered_before) == (1, False)


async def test_an_approved_call_is_claimed_once_within_its_window_and_reported_once(
    store: Repository,
) -> None:
    a = approval(valid_for=60)
    await store.create_approval(a, [])
    decided = T0 + timedelta(minutes=1)
    due = decided + timedelta(hours=1)
    # pending: nothing to claim
    assert not await store.claim_execution(a.approval_id, "exc_0", "k0", T0, due)
    await store.settle(approved(a), None, [])
    assert await store.claim_execution(a.approval_id, "exc_1", "k1", decided, due)
    assert not await store.claim_execution(a.approval_id, "exc_2", "k2", decided, due)
    stored = await store.get_approval(a.approval_id)
    assert stored is not None
    assert stored.execution == models.Execution(
        claim_id="exc_1", idempotency_key="k1", claimed_at=decided
    )
    assert stored.valid_until == decided + timedelta(seconds=60)
    # the card updates now, and again when the outcome is due
    items = await store.claim_outbox(due, due, 10)
    assert sorted((i.kind.value, i.created_at) for i in items) == [
        ("update_card", decided),
        ("update_card", due),
    ]
    ok = models.ExecutionOutcome(status="ok", detail="done", reported_at=decided)
    assert not await store.report_outcome(a.approval_id, "k2", ok)  # not the claimer
    assert await store.report_outcome(a.approval_id, "k1", ok)
    assert not await store.report_outcome(a.approval_id, "k1", ok.evolve(status="error"))
    stored = await store.get_approval(a.approval_id)
    assert stored is not None
    assert stored.execution is not None
    assert stored.execution.outcome == ok


async def test_a_claim_past_valid_for_claims_nothing(store: Repository) -> None:
    a = approval(valid_for=60)
    await store.create_approval(a, [])
    await store.settle(approved(a), None, [])
    decided = T0 + timedelta(minutes=1)
    late = decided + timedelta(seconds=61)
    assert not await store.claim_execution(a.approval_id, "exc_1", "k", late, late)
    on_time = decided + timedelta(seconds=60)  # the last instant still counts
    assert await store.claim_execution(a.approval_id, "exc_1", "k", on_time, late)


async def test_a_claim_id_is_never_given_twice(store: Repository) -> None:
    a, b = approval(1), approval(2)
    for each in (a, b):
        await store.create_approval(each, [])
        await store.settle(approved(each), None, [])
    decided = T0 + timedelta(minutes=1)
    assert await store.claim_execution(a.approval_id, "exc_same", "k", decided, None)
    with violates("executions_claim_id_key"):
        await store.claim_execution(b.approval_id, "exc_same", "k", decided, None)


# -- group commit: submissions made together are written together, each with its own answer


async def test_submissions_made_together_each_get_their_own_answer(store: Repository) -> None:
    fresh = [approval(n) for n in range(1, 9)]
    # the same request ids again, under another approval id: a repeat, in the same group
    repeat = approval(50, request_id="req-3")
    results = await asyncio.gather(
        *(store.create_approval(a, [post_card(a)]) for a in [*fresh, repeat])
    )
    assert [created for _, created in results] == [True] * 8 + [False]
    assert results[-1][0].approval_id == fresh[2].approval_id  # the stored one comes back
    assert await store.get_approval(repeat.approval_id) is None
    backlog, _ = await reads.outbox_counts(store)
    assert backlog == 8  # one card each, none for the repeat


async def test_a_refused_submission_in_a_group_fails_alone(store: Repository) -> None:
    good = [approval(n) for n in range(1, 6)]
    bad = approval(9)
    outcomes = await asyncio.gather(
        *(store.create_approval(a, [post_card(a)]) for a in good[:2]),
        store.create_approval(bad, [post_card(approval(99))]),  # a row for no approval
        *(store.create_approval(a, [post_card(a)]) for a in good[2:]),
        return_exceptions=True,
    )
    refused = outcomes.pop(2)
    assert isinstance(refused, Exception)
    assert "outbox_approval_id_fkey" in str(refused)
    assert all(isinstance(o, tuple) and o[1] for o in outcomes)
    assert await store.get_approval(bad.approval_id) is None
    for a in good:
        assert await store.get_approval(a.approval_id) is not None
    assert await reads.outbox_counts(store) == (5, 0)


async def test_a_vote_is_compare_and_set_on_the_votes_counted(store: Repository) -> None:
    """Two votes of the pure lifecycle cast on the same count (none yet): the first is written,
    the rival, which saw a stale count, writes nothing."""
    a = approval(required=models.Required(role="finance", approvals=2))
    await store.create_approval(a, [])
    first = states.settle(a, states.Approve(by=decider("U0A")), T0)
    rival = states.settle(a, states.Approve(by=decider("U0B")), T0)
    accepted = models.AttemptOutcome.ACCEPTED
    assert await store.settle(first, attempt(a, accepted, "U0A"), [], votes_before=())
    assert not await store.settle(rival, attempt(a, accepted, "U0B"), [], votes_before=())
    assert [x.slack_user_id for x in await store.attempts(a.approval_id)] == ["U0A"]
    stored = await store.get_approval(a.approval_id)
    assert stored is not None
    assert [d.slack_user_id for d in stored.decided_by] == ["U0A"]


async def test_migration_0021_names_the_agent_of_callbacks_written_before(pg_template: str) -> None:
    """A callback row an earlier version wrote (url and body, no agent) is still delivered:
    0021 names its approval's agent, so the store reads it as a Callback like any other."""
    dsn = await postgres.fresh_database(pg_template)
    try:
        store = await Repository.connect(dsn)
        try:
            a = approval()
            await store.create_approval(a, [])
            callback = models.OutboxEntry(
                approval_id=a.approval_id, work=models.Callback(url="u", body="{}", agent="x")
            )
            await store.settle(approved(a), None, [callback])
        finally:
            await store.close()
        conn = await asyncpg.connect(dsn)
        try:  # the row as the previous version wrote it, before 0021 was applied
            await conn.execute("UPDATE outbox SET payload = payload - 'agent'")
            await conn.execute("DELETE FROM schema_migrations WHERE version = 21")
        finally:
            await conn.close()
        assert await pg_db.migrate(dsn) == [21]
        store = await Repository.connect(dsn)
        try:
            [item] = await store.claim_outbox(T0 + timedelta(hours=1), T0 + timedelta(hours=2), 10)
            assert item.work == models.Callback(url="u", body="{}", agent=a.agent)
        finally:
            await store.close()
    finally:
        await postgres.drop_database(pg_template, dsn)


async def test_a_row_this_version_cannot_read_is_dead_lettered_saying_why(
    database_url: str,
) -> None:
    """A page for a service this version does not know (a newer version's row) is never
    handed to a handler: dead-lettered at claim, visible, redrivable once a version can."""
    store = await Repository.connect(database_url)
    try:
        a = approval()
        await store.create_approval(a, [post_card(a)])
        conn = await asyncpg.connect(database_url)
        try:
            await conn.execute(
                "INSERT INTO outbox (approval_id, kind, payload, created_at, next_attempt_at)"
                ' VALUES ($1, \'page\', \'{"service": "statuspage", "event": "trigger"}\','
                " $2, $2)",
                a.approval_id,
                T0,
            )
            [item] = await store.claim_outbox(T0, T0 + timedelta(minutes=1), 10)
            assert item.work == models.PostCard()
            row = await conn.fetchrow("SELECT dead_at, last_error FROM outbox WHERE kind = 'page'")
        finally:
            await conn.close()
        assert row is not None
        assert row["dead_at"] == T0
        assert "not readable by this version" in row["last_error"]
    finally:
        await store.close()
