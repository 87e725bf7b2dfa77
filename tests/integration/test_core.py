"""The core object on a store of its own: one store, one policy source and one clock shared by
the approval service, the turn service and the relay, so a policy reload and a moved clock are
seen by all three at once."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from approvals import errors, models, policy
from approvals.core import EDGE_KINDS
from approvals.repository import Repository
from guards import authority
from tests.support import cores

T0 = datetime(2026, 3, 4, 10, 0, tzinfo=UTC)
AGENT = "sales-bot"


def make_policy(turn_limit: int) -> policy.Policy:
    return policy.Policy.model_validate(
        {
            "slack": {"reviewer_channel": "C0REVIEWS"},
            "agents": {AGENT: {"token_env": "SALES_BOT_TOKEN"}},
            "roles": {"approvers": {"users": ["U0ANA"]}, "sales-lead": {"users": ["U0SAM"]}},
            "rules": [{"tool": "*", "require": "approvers"}],
            "turns": {
                "stages": ["new", "qualified"],
                "tools": {
                    "grant_discount": {
                        "limits": [
                            {
                                "argument": "discount_pct",
                                "max": turn_limit,
                                "over": "escalate",
                                "escalate_to": "sales-lead",
                            }
                        ]
                    }
                },
            },
        }
    )


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


class NoSlack:
    async def approver(self, slack_user_id: str, usergroups: frozenset[str]) -> authority.Approver:
        raise AssertionError("no Slack lookup was needed")


def request(request_id: str, expires_in: int = 3600) -> models.ApprovalRequest:
    return models.ApprovalRequest.model_validate(
        {
            "request_id": request_id,
            "session_id": "thread-1",
            "tool": {"name": "transfer_money", "call_id": "call_1", "arguments": {"amount": 5}},
            "requester": {"slack_user_id": "U0REQ", "name": "Rita"},
            "expires_in": expires_in,
        }
    )


def discount(n: int, pct: int) -> models.TurnRequest:
    return models.TurnRequest.model_validate(
        {
            "session_id": "wa-1",
            "request_id": f"turn-{n}",
            "channel": "whatsapp",
            "lead": {"id": "lena@prospect.example"},
            "operator": {"slack_user_id": "U0OMAR"},
            "funnel": {"stage": "qualified"},
            "tool": {
                "name": "grant_discount",
                "call_id": f"call-{n}",
                "arguments": {"discount_pct": pct},
            },
        }
    )


class World:
    def __init__(self, store: Repository) -> None:
        self.store = store
        self.clock = Clock()
        self.current = make_policy(turn_limit=10)
        self.delivered: list[models.OutboxKind] = []
        self.refusals = 0  # deliveries to refuse first, each asking to be retried in 30 s

        async def deliver(item: models.OutboxItem) -> None:
            if self.refusals > 0:
                self.refusals -= 1
                raise errors.DeliveryFailed("busy", retry_after=30.0)
            self.delivered.append(item.kind)

        self.core = cores.core(
            self.store,
            lambda: self.current,
            dict.fromkeys(EDGE_KINDS, deliver),
            clock=self.clock,
        )


@pytest.fixture
def world(store: Repository) -> World:
    return World(store)


async def test_the_relay_delivers_what_the_approval_service_committed(world: World) -> None:
    _, created = await world.core.approvals.submit(AGENT, request("r-1"))
    assert created
    assert await world.core.relay.drain() == 1
    assert world.delivered == [models.OutboxKind.POST_CARD]
    assert await world.core.relay.drain() == 0


async def test_a_turns_escalation_is_an_approval_of_the_same_core(world: World) -> None:
    answer = await world.core.turns.decide(AGENT, discount(1, 15), NoSlack())
    assert answer.record.verdict == "escalate"
    assert answer.approval is not None
    found = await world.core.approvals.get(answer.approval.approval_id)
    assert found.status is models.Status.PENDING


async def test_every_service_reads_the_policy_in_force_at_each_call(world: World) -> None:
    assert (await world.core.turns.decide(AGENT, discount(1, 15), NoSlack())).record.verdict == (
        "escalate"
    )
    world.current = make_policy(turn_limit=20)  # a reload: no service is built again
    assert (await world.core.turns.decide(AGENT, discount(2, 15), NoSlack())).record.verdict == (
        "allow"
    )


async def test_the_relay_backs_off_on_the_cores_clock(world: World) -> None:
    world.refusals = 1
    await world.core.approvals.submit(AGENT, request("r-1"))
    assert await world.core.relay.drain() == 1  # refused: due again 30 s later
    assert await world.core.relay.drain() == 0  # not yet, on the core's clock
    world.clock.now += timedelta(seconds=31)
    assert await world.core.relay.drain() == 1
    assert world.delivered == [models.OutboxKind.POST_CARD]


async def test_the_timers_expire_on_the_cores_clock(world: World) -> None:
    approval, _ = await world.core.approvals.submit(AGENT, request("r-1", expires_in=60))
    world.clock.now += timedelta(minutes=2)
    sweeping = asyncio.create_task(world.core.run_timers(interval=0.01))
    try:
        for _ in range(200):
            if (await world.core.approvals.get(approval.approval_id)).settled:
                break
            await asyncio.sleep(0.01)
    finally:
        sweeping.cancel()
        await asyncio.gather(sweeping, return_exceptions=True)
    assert (await world.core.approvals.get(approval.approval_id)).status is models.Status.EXPIRED
