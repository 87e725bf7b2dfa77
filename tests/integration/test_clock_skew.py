"""Two replicas whose system clocks are minutes apart agree on when a reminder is due and when a
request expires: each keeps time by the database's clock (approvals/clock.py), on real
PostgreSQL.

Without it, the replica seven minutes ahead would fire a reminder and expire a request the
moment they were created, and the one seven minutes behind would let them sit for minutes."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from datetime import datetime, timedelta

import asyncpg
import pytest

from approvals import models, policy
from approvals.clock import DatabaseClock, utcnow
from approvals.core import Core
from approvals.repository import Repository
from tests.support import waiting

SKEW = timedelta(minutes=7)
REMIND_AFTER = 2  # seconds
EXPIRES_IN = 4


def _policy() -> policy.Policy:
    return policy.Policy.model_validate(
        {
            "slack": {"reviewer_channel": "C0REVIEWS"},
            "agents": {"sales-bot": {"token_env": "SALES_BOT_TOKEN"}},
            "roles": {"approvers": {"users": ["U0ANA"]}},
            "rules": [
                {
                    "tool": "*",
                    "require": "approvers",
                    "escalation": [{"after": REMIND_AFTER, "action": "remind"}],
                }
            ],
        }
    )


def _request() -> models.ApprovalRequest:
    return models.ApprovalRequest.model_validate(
        {
            "request_id": "r-1",
            "session_id": "thread-1",
            "tool": {"name": "transfer_money", "call_id": "call_1", "arguments": {"amount": 5}},
            "requester": {"slack_user_id": "U0REQ", "name": "Rita"},
            "expires_in": EXPIRES_IN,
        }
    )


class Replica:
    """One process's core on the shared database, its own clock ``skew`` off true time."""

    def __init__(self, store: Repository, skew: timedelta) -> None:
        self.store = store
        self.skew = skew
        self.clock = DatabaseClock(store, wall=self.wall)
        current = _policy()
        self.core = Core(
            store=store,
            policy=lambda: current,
            handlers={},
            clock=self.clock,
        )

    def wall(self) -> datetime:
        """What this host's own clock says."""
        return utcnow() + self.skew


@pytest.fixture
async def replicas(database_url: str) -> AsyncIterator[tuple[Replica, Replica]]:
    ahead = Replica(await Repository.connect(database_url), SKEW)
    behind = Replica(await Repository.connect(database_url), -SKEW)
    yield ahead, behind
    await ahead.store.close()
    await behind.store.close()


async def test_replicas_with_skewed_clocks_keep_the_same_time(
    replicas: tuple[Replica, Replica],
) -> None:
    ahead, behind = replicas
    assert abs(ahead.wall() - behind.wall()) > timedelta(minutes=13)  # what the hosts think
    assert abs(await ahead.clock.sync() + SKEW) < timedelta(seconds=1)
    assert abs(await behind.clock.sync() - SKEW) < timedelta(seconds=1)
    assert abs(ahead.clock() - behind.clock()) < timedelta(milliseconds=200)


async def test_a_reminder_and_an_expiry_are_due_by_the_database_clock(
    replicas: tuple[Replica, Replica], database_url: str
) -> None:
    ahead, behind = replicas
    await ahead.clock.sync()
    await behind.clock.sync()
    # created on the replica whose host clock is ahead, swept on both
    approval, _ = await ahead.core.approvals.submit("sales-bot", _request())
    created = time.monotonic()
    # by its host's own clock the reminder and the expiry would be minutes overdue already
    assert ahead.wall() > approval.expires_at + timedelta(minutes=6)
    assert await ahead.core.approvals.fire_timers() == 0
    assert await ahead.core.approvals.expire_due() == 0

    async def reminded() -> bool:
        return await behind.core.approvals.fire_timers() > 0

    await waiting.until(
        reminded, timeout=REMIND_AFTER + 3, what="the reminder, on the replica behind"
    )
    reminded_after = time.monotonic() - created
    assert reminded_after >= REMIND_AFTER - 0.3

    async def expired() -> bool:
        return await behind.core.approvals.expire_due() > 0

    await waiting.until(expired, timeout=EXPIRES_IN + 3, what="the expiry, on the replica behind")
    expired_after = time.monotonic() - created
    assert expired_after >= EXPIRES_IN - 0.3

    conn = await asyncpg.connect(database_url)
    try:
        fired_at = await conn.fetchval(
            "SELECT fired_at - due_at FROM timers WHERE approval_id = $1", approval.approval_id
        )
    finally:
        await conn.close()
    # stamped on the shared clock: fired at (not seven minutes around) its due time
    assert timedelta(0) <= fired_at < timedelta(seconds=1.5)
    print(
        f"\nreminder after {reminded_after:.2f} s (due {REMIND_AFTER}), expiry after "
        f"{expired_after:.2f} s (due {EXPIRES_IN}), hosts {2 * SKEW} apart"
    )
