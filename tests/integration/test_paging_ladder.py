"""On-call paging through the service, on PostgreSQL: the timers a rule's ladder schedules page
what each step names, a settlement queues the resolves (Opsgenie's close once more, later), a
rule that pages nobody queues no page, and an escalation that goes nowhere lapses. The policy's
keys themselves are tested in tests/unit/test_paging_policy.py."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from approvals import models, policy, service
from approvals.policy import Policy
from approvals.repository import Repository
from tests.support.records import T0
from tests.unit.test_paging_policy import data, with_steps


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def request(tool: str) -> models.ApprovalRequest:
    return models.ApprovalRequest.model_validate(
        {
            "request_id": f"r-{tool}",
            "session_id": "s",
            "tool": {"name": tool, "call_id": "c", "arguments": {"secret": "x"}},
            "requester": {"slack_user_id": "U0REQ"},
        }
    )


def world(store: Repository, raw: dict[str, Any]) -> tuple[service.ApprovalService, Clock]:
    clock = Clock()
    current = Policy.model_validate(raw)
    approvals = service.ApprovalService(store=store, policy=lambda: current, clock=clock)
    return approvals, clock


async def page_rows(store: Repository) -> list[tuple[str, str, Any]]:
    far = T0 + timedelta(days=30)
    items = await store.claim_outbox(far, far, 1000)
    return [
        (i.work.event, i.work.service, i.work.severity)
        for i in items
        if isinstance(i.work, models.PageOnCall)
    ]


async def test_the_ladder_pages_what_each_step_names_then_settlement_resolves(
    store: Repository,
) -> None:
    approvals, clock = world(store, data())
    created, _ = await approvals.submit("sales-bot", request("deploy_app"))
    approval = await approvals.get(created.approval_id)
    assert approval.pages == ("opsgenie", "pagerduty")
    clock.now = T0 + timedelta(seconds=601)
    assert await approvals.fire_timers() == 2  # the reminder, the first escalation
    assert await page_rows(store) == [("trigger", "pagerduty", "critical")]
    clock.now = T0 + timedelta(seconds=901)
    assert await approvals.fire_timers() == 1
    cancelled = await approvals.cancel(approval.approval_id, agent="sales-bot")
    assert cancelled.paged == ("opsgenie", "pagerduty")
    # Opsgenie's close is sent once more later, in case the first overtook its create
    again_after = policy.resolve_again_after("opsgenie")
    assert again_after is not None
    assert policy.resolve_again_after("pagerduty") is None  # it keeps a dedup_key's order
    again, far = clock.now + again_after, T0 + timedelta(days=30)
    before = await store.claim_outbox(again - timedelta(seconds=1), far, 1000)
    assert [i for i in before if isinstance(i.work, models.PageOnCall) and i.work.again] == []
    [late] = await store.claim_outbox(again, far, 1000)
    assert late.work == models.PageOnCall(service="opsgenie", event="resolve", again=True)
    assert models.work_payload(late.work) == {
        "service": "opsgenie",
        "event": "resolve",
        "again": True,
    }
    rows = await page_rows(store)
    assert sorted(r for r in rows if r[0] == "resolve") == [
        ("resolve", "opsgenie", None),
        ("resolve", "opsgenie", None),
        ("resolve", "pagerduty", None),
    ]
    assert len([r for r in rows if r[0] == "trigger"]) == 3  # pagerduty twice, opsgenie once


async def test_a_rule_that_pages_nobody_queues_no_page(store: Repository) -> None:
    approvals, _clock = world(store, data())
    created, _ = await approvals.submit("sales-bot", request("anything"))
    approval = await approvals.get(created.approval_id)
    assert approval.pages == ()
    await approvals.cancel(approval.approval_id, agent="sales-bot")
    assert await page_rows(store) == []


async def test_nobody_can_decide_goes_to_the_channel_and_pages_nobody(store: Repository) -> None:
    approvals, _clock = world(store, data())
    approval, _ = await approvals.submit("sales-bot", request("launch_rocket"))
    [fired] = await store.fire_due_timers(T0, 10)
    assert (fired.step, fired.page) == (service.IMMEDIATE_ESCALATION_STEP, None)
    assert await page_rows(store) == []
    del approval


async def test_without_an_oncall_channel_an_escalation_that_pages_nobody_lapses(
    store: Repository,
) -> None:
    raw = with_steps(
        {"after": 600, "action": "escalate", "page": "pagerduty"},
        pagerduty={"routing_key_env": "PD"},
    )
    approvals, clock = world(store, raw)
    # nobody can decide: with no channel, no immediate escalation is scheduled at all
    launched, _ = await approvals.submit("sales-bot", request("launch_rocket"))
    assert await store.fire_due_timers(T0, 10) == []
    # one scheduled later (the card's user groups resolved to nobody) goes nowhere: it lapses
    # rather than tell the card that on-call was told
    await store.schedule_timer(
        models.TimerEntry(
            approval_id=launched.approval_id,
            kind="escalate",
            step=service.IMMEDIATE_ESCALATION_STEP,
            due_at=T0,
        )
    )
    clock.now = T0 + timedelta(seconds=1)
    assert await approvals.fire_timers() == 0
    far = T0 + timedelta(days=30)
    assert [i.kind for i in await store.claim_outbox(far, far, 100)] == [
        models.OutboxKind.POST_CARD
    ]
