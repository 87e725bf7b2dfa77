"""On-call paging through PagerDuty (Events API v2) and Opsgenie (Alert API), end to end: real
PostgreSQL, the bot on aiohttp with its relay, the Slack stand-in, and stand-ins of both paging
services over loopback HTTP. An escalation step that pages triggers once (across replicas too),
every kind of settlement resolves, failures are retried without holding up the card or the
agent's callback, and a refusal dead-letters until an operator redrives it."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from approvals import errors, models, policy
from approvals import service as service_module
from approvals.repository import Repository
from bot import paging as bot_paging
from bot.config import Config
from tests.support import harness as harness_module
from tests.support import reads, records, waiting
from tests.support.cli import run_cli
from tests.support.harness import FINANCE, ONCALL, Harness
from tests.support.oncall_standins import OpsgenieStandIn, PagerDutyStandIn
from tests.support.records import T0

AGAIN_AFTER = policy.resolve_again_after("opsgenie")  # Opsgenie's second close, after this
assert AGAIN_AFTER is not None
CLOSE_AGAIN = AGAIN_AFTER.total_seconds()

PD_KEY = "0123456789abcdef0123456789abcdef"  # 32 characters, as PagerDuty's are
OG_KEY = "5f7c1a2e-0000-4000-8000-00000000c0de"
SECRET = "s3cr3t-DO-NOT-PAGE"  # an argument value that must never leave for a paging service

DEPLOY = {"name": "deploy_service", "call_id": "d1", "arguments": {"token": SECRET, "env": "prod"}}
BOTH = {"name": "page_both", "call_id": "b1", "arguments": {"note": SECRET}}
SLACK_ONLY = {"name": "slack_only", "call_id": "s1", "arguments": {}}
ESCALATES_AFTER = 600


def paging_policy(callback_port: int) -> policy.Policy:
    base = harness_module.test_policy(callback_port)
    data: dict[str, Any] = base.model_dump(mode="json", exclude_none=True)
    data["roles"]["deployers"] = {"usergroups": ["S0FINANCE"]}
    data["oncall"] = {
        "channel": ONCALL,
        "usergroup": "S0ONCALL",
        "pagerduty": {"routing_key_env": "PD_ROUTING_KEY"},
        "opsgenie": {
            "api_key_env": "OPSGENIE_API_KEY",
            "responders": [{"type": "team", "name": "platform"}],
        },
    }
    escalate = {"after": ESCALATES_AFTER, "action": "escalate"}
    data["rules"] = [
        {
            "tool": "deploy_*",
            "require": "deployers",
            "severity": "critical",
            "escalation": [{"after": 300, "action": "remind"}, {**escalate, "page": "pagerduty"}],
        },
        {
            "tool": "page_both",
            "require": "deployers",
            "escalation": [{**escalate, "page": ["pagerduty", "opsgenie"]}],
        },
        {"tool": "slack_only", "require": "deployers", "escalation": [escalate]},
        *data["rules"],
    ]
    return policy.Policy.model_validate(data)


@dataclass
class PagingHarness(Harness):
    pagerduty: PagerDutyStandIn = field(default_factory=PagerDutyStandIn)
    opsgenie: OpsgenieStandIn = field(default_factory=OpsgenieStandIn)

    async def start(self) -> PagingHarness:
        self.pagerduty.routing_keys = {PD_KEY}
        self.opsgenie.api_keys = {OG_KEY}
        await self.pagerduty.start()
        await self.opsgenie.start()
        await super().start()
        return self

    async def stop(self) -> None:
        await super().stop()
        await self.pagerduty.stop()
        await self.opsgenie.stop()

    def config(self) -> Config:
        base = super().config()
        settings = base.settings.model_copy(
            update={
                "pagerduty_url": self.pagerduty.base_url,
                "opsgenie_url": self.opsgenie.base_url,
            }
        )
        return dataclasses.replace(
            base,
            settings=settings,
            policy=paging_policy(self.receiver.port),
            page_secrets={"PD_ROUTING_KEY": PD_KEY, "OPSGENIE_API_KEY": OG_KEY},
        )

    def oncall_posts(self) -> list[str]:
        return [str(m["text"]) for m in self.standin.messages.get(ONCALL, [])]

    async def escalate(self, approval_id: str) -> None:
        """Its card up, then the clock past the escalation step."""
        await self.card_ts(approval_id)
        self.clock.advance(ESCALATES_AFTER + 1)

    async def backlog_empty(self) -> bool:
        """Nothing due is left undelivered (a card update scheduled for later is not due)."""
        assert self.store is not None
        snapshot = await self.store.snapshot(self.clock())
        return sum(b.rows for b in snapshot.backlog.values()) == 0


@pytest.fixture
async def paging(database_url: str) -> AsyncIterator[PagingHarness]:
    h = await PagingHarness(database_url=database_url).start()
    yield h
    await h.stop()


@pytest.fixture
async def short_budget(database_url: str) -> AsyncIterator[PagingHarness]:
    """Deliveries give up after 2 s: a refusal is dead-lettered within the test."""
    h = await PagingHarness(database_url=database_url, delivery_budget=2).start()
    yield h
    await h.stop()


def no_secret(body: Any) -> None:
    """What was sent to a paging service holds no argument value, nor the agent's summary
    (free text that may quote them)."""
    sent = json.dumps(body)
    assert SECRET not in sent
    assert "Pay invoice 42" not in sent  # the harness's summary


async def test_an_escalation_pages_pagerduty_once_and_approval_resolves_it(
    paging: PagingHarness,
) -> None:
    created = await paging.submit(tool=DEPLOY)
    approval_id = created["approval_id"]
    await paging.escalate(approval_id)
    await paging.pagerduty.wait_for(lambda: paging.pagerduty.events("trigger"), what="a trigger")
    [trigger] = paging.pagerduty.events("trigger")
    assert trigger["routing_key"] == PD_KEY
    assert trigger["dedup_key"] == approval_id
    payload = trigger["payload"]
    assert payload["severity"] == "critical"  # the rule's
    for named in ("deploy_service", "sales-bot", "deployers", approval_id):
        assert named in payload["summary"]
    assert payload["custom_details"]["required_role"] == "deployers"
    # the link is the card's permalink (Slack's answer to chat.getPermalink)
    assert "standin.slack.com/archives/C0REVIEWS" in trigger["links"][0]["href"]
    no_secret(trigger)
    # the on-call channel is set: it is posted to as well, and the card's thread says so
    await waiting.until(lambda: len(paging.oncall_posts()) == 1, what="the on-call post")
    assert approval_id in paging.pagerduty.incidents

    await paging.click(FINANCE[0], approval_id)
    [received] = await paging.receiver.wait_delivered(1)
    assert json.loads(received.body)["status"] == "approved"
    await paging.pagerduty.wait_for(lambda: paging.pagerduty.events("resolve"), what="resolve")
    [resolve] = paging.pagerduty.events("resolve")
    assert resolve == {"routing_key": PD_KEY, "event_action": "resolve", "dedup_key": approval_id}
    assert paging.pagerduty.incidents == {}
    await waiting.until(paging.backlog_empty, what="the outbox to drain")
    await paging.settle_quietly(0.3)
    assert len(paging.pagerduty.events("trigger")) == 1  # once
    assert paging.opsgenie.requests == []  # the rule pages PagerDuty only


async def deny(h: PagingHarness, approval_id: str) -> str:
    await h.click(FINANCE[0], approval_id, "countersign_deny", reason="not today")
    return "denied"


async def expire(h: PagingHarness, approval_id: str) -> str:
    h.clock.advance(3600)
    return "expired"


async def cancel(h: PagingHarness, approval_id: str) -> str:
    status, body = await h.call("POST", f"/v1/approvals/{approval_id}/cancel", json_body={})
    assert status == 200, body
    return "cancelled"


async def approve(h: PagingHarness, approval_id: str) -> str:
    await h.click(FINANCE[0], approval_id)
    return "approved"


@pytest.mark.parametrize("settle", [approve, deny, expire, cancel])
async def test_every_settlement_resolves_both_services(paging: PagingHarness, settle: Any) -> None:
    approval_id = (await paging.submit(tool=BOTH))["approval_id"]
    await paging.escalate(approval_id)
    await waiting.until(
        lambda: (
            approval_id in paging.pagerduty.incidents and approval_id in paging.opsgenie.open_alerts
        ),
        what="both pages",
    )
    [created] = paging.opsgenie.accepted("/v2/alerts")
    assert created.headers["Authorization"] == f"GenieKey {OG_KEY}"
    alert = created.body
    assert alert["alias"] == approval_id
    assert alert["priority"] == "P3"  # the default severity, warning
    assert alert["responders"] == [{"type": "team", "name": "platform"}]
    assert "page_both" in alert["message"]
    assert len(alert["message"]) <= 130
    no_secret(alert)
    no_secret(paging.pagerduty.events("trigger"))

    status = await settle(paging, approval_id)
    [received] = await paging.receiver.wait_delivered(1)
    assert json.loads(received.body)["status"] == status
    await waiting.until(
        lambda: not paging.pagerduty.incidents and not paging.opsgenie.open_alerts,
        what="both resolved",
    )
    [close] = paging.opsgenie.accepted("/close")
    assert close.path == f"/v2/alerts/{approval_id}/close"
    assert close.query == {"identifierType": "alias"}
    assert status in close.body["note"]
    assert paging.pagerduty.resolved[approval_id]["events"] == 1


@pytest.mark.parametrize("when", ["while its create is sent", "right after it was accepted"])
async def test_an_opsgenie_close_processed_before_its_create_is_sent_again(
    paging: PagingHarness, when: str
) -> None:
    """Opsgenie processes what it accepted in no promised order: a close that overtakes its
    create finds no alert, and the alert created next would stay open."""
    og = paging.opsgenie
    og.held = {"create"}  # accepted, processed only below: after the closes
    approval_id = (await paging.submit(tool=BOTH))["approval_id"]

    async def decide_meanwhile() -> None:
        og.on_request = None
        await paging.click(FINANCE[0], approval_id)
        await waiting.until(lambda: _settled(paging.store, approval_id), what="the settlement")

    if when == "while its create is sent":
        og.on_request = decide_meanwhile  # the trigger handler sees it settled after sending
    await paging.escalate(approval_id)
    await waiting.until(lambda: bool(og.waiting), what="the create")
    if when == "right after it was accepted":
        await decide_meanwhile()  # the trigger handler saw it pending: only settlement closes
    await paging.receiver.wait_delivered(1)
    await waiting.until(paging.backlog_empty, what="the closes")
    # settlement's close, and (settled as it was sent) the trigger handler's right after
    closes = 2 if when == "while its create is sent" else 1
    assert og.processed == [("close", approval_id, "no such alert")] * closes
    og.process()  # the create, processed last: the alert is open
    assert og.open_alerts == {approval_id}

    paging.clock.advance(CLOSE_AGAIN + 1)
    await waiting.until(lambda: not og.open_alerts, what="the second close")
    assert og.processed[-1] == ("close", approval_id, "closed")
    assert "approved" in og.alerts[approval_id]["close"]["note"]
    assert not paging.pagerduty.incidents  # PagerDuty keeps one dedup_key's events in order


async def test_the_second_opsgenie_close_is_harmless_once_closed(paging: PagingHarness) -> None:
    approval_id = (await paging.submit(tool=BOTH))["approval_id"]
    await paging.escalate(approval_id)
    await waiting.until(lambda: approval_id in paging.opsgenie.open_alerts, what="the alert")
    await paging.click(FINANCE[0], approval_id)
    await waiting.until(lambda: not paging.opsgenie.open_alerts, what="the close")
    await waiting.until(paging.backlog_empty, what="the outbox to drain")
    assert len(paging.opsgenie.accepted("/close")) == 1  # the second is not due yet
    first = paging.opsgenie.alerts[approval_id]["close"]

    paging.clock.advance(CLOSE_AGAIN + 1)
    await waiting.until(
        lambda: len(paging.opsgenie.accepted("/close")) == 2, what="the second close"
    )
    await waiting.until(paging.backlog_empty, what="the outbox to drain")
    assert paging.opsgenie.processed[-1] == ("close", approval_id, "already closed")
    assert paging.opsgenie.alerts[approval_id]["close"] == first
    assert paging.opsgenie.alerts[approval_id]["count"] == 1
    assert paging.store is not None
    assert (await reads.outbox_counts(paging.store))[1] == 0  # nothing dead-lettered
    assert len(paging.pagerduty.events("resolve")) == 1  # PagerDuty needs no second resolve


async def test_two_replicas_page_each_escalation_once(paging: PagingHarness) -> None:
    replica_url, runner, store = await paging.serve_bot()
    try:
        ids = [
            (await paging.submit(request_id=f"r{i}", tool={**DEPLOY, "call_id": f"d{i}"}))[
                "approval_id"
            ]
            for i in range(4)
        ]
        for approval_id in ids:
            await paging.card_ts(approval_id)
        paging.clock.advance(ESCALATES_AFTER + 1)
        await waiting.until(
            lambda: len(paging.pagerduty.events("trigger")) == 4, what="four triggers"
        )
        await waiting.until(paging.backlog_empty, what="the outbox to drain")
        await paging.settle_quietly(0.5)
        keys = [e["dedup_key"] for e in paging.pagerduty.events("trigger")]
        assert sorted(keys) == sorted(ids)  # each approval once, by one of the replicas
    finally:
        await runner.cleanup()
        await store.close()
        del replica_url


async def test_a_failing_page_is_retried_honouring_retry_after_and_blocks_nothing(
    paging: PagingHarness,
) -> None:
    paging.pagerduty.fail(2, status=503)
    paging.pagerduty.fail(1, status=429, retry_after="2")
    approval_id = (await paging.submit(tool=DEPLOY))["approval_id"]
    await paging.escalate(approval_id)
    # the Slack side of the escalation does not wait for the page
    await waiting.until(lambda: len(paging.oncall_posts()) == 1, what="the on-call post")
    await paging.pagerduty.wait_for(
        lambda: paging.pagerduty.events("trigger"), timeout=20, what="the trigger, retried"
    )
    answered = [(r.answered, r.at) for r in paging.pagerduty.requests]
    assert [status for status, _ in answered] == [503, 503, 429, 202]
    # the next try came no sooner than the 429's Retry-After asked
    assert answered[3][1] - answered[2][1] >= 1.9
    assert paging.store is not None
    approval = await paging.store.get_approval(approval_id)
    assert approval is not None
    assert approval.paged == ("pagerduty",)

    await paging.click(FINANCE[0], approval_id)
    await paging.receiver.wait_delivered(1)
    await waiting.until(lambda: not paging.pagerduty.incidents, what="the resolve")


async def test_a_page_still_queued_when_the_approval_settles_is_never_triggered(
    paging: PagingHarness,
) -> None:
    await paging.pagerduty.stop()  # PagerDuty unreachable: the trigger waits in the outbox
    approval_id = (await paging.submit(tool=DEPLOY))["approval_id"]
    await paging.escalate(approval_id)

    async def tried() -> bool:
        assert paging.store is not None
        approval = await paging.store.get_approval(approval_id)
        return approval is not None and approval.paged == ("pagerduty",)

    await waiting.until(tried, what="the trigger to be queued")
    await waiting.until(lambda: len(paging.oncall_posts()) == 1, what="the on-call post")
    # the card and the callback go out while PagerDuty is away
    await paging.click(FINANCE[0], approval_id)
    [received] = await paging.receiver.wait_delivered(1)
    assert json.loads(received.body)["status"] == "approved"

    await paging.pagerduty.start()
    paging.clock.advance(120)  # past the trigger's backoff
    await waiting.until(paging.backlog_empty, timeout=15, what="the outbox to drain")
    assert paging.pagerduty.events("trigger") == []  # settled first: never paged
    # (an earlier try of the trigger may have reached PagerDuty unanswered: it is resolved)
    assert paging.pagerduty.incidents == {}
    assert paging.pagerduty.events("resolve") != []


async def test_a_restart_between_trigger_and_resolve_still_resolves(paging: PagingHarness) -> None:
    approval_id = (await paging.submit(tool=DEPLOY))["approval_id"]
    await paging.escalate(approval_id)
    await waiting.until(lambda: approval_id in paging.pagerduty.incidents, what="the trigger")
    await waiting.until(paging.backlog_empty, what="the trigger to be recorded")
    await paging.stop_bot()
    # back without its relay: the approval settles, the resolve waits in the outbox
    await paging.start_bot(workers=False, same_port=True)
    await paging.click(FINANCE[0], approval_id)
    assert paging.store is not None
    await waiting.until(lambda: _settled(paging.store, approval_id), what="the settlement")
    assert approval_id in paging.pagerduty.incidents
    await paging.stop_bot()
    await paging.start_bot(same_port=True)
    await waiting.until(lambda: not paging.pagerduty.incidents, what="the resolve")
    assert [e["event_action"] for e in paging.pagerduty.events()] == ["trigger", "resolve"]


async def _settled(store: Repository | None, approval_id: str) -> bool:
    assert store is not None
    approval = await store.get_approval(approval_id)
    return approval is not None and approval.settled


async def test_a_decision_before_the_ladder_pages_sends_nothing(paging: PagingHarness) -> None:
    approval_id = (await paging.submit(tool=BOTH))["approval_id"]
    await paging.card_ts(approval_id)
    await paging.click(FINANCE[0], approval_id)
    await paging.receiver.wait_delivered(1)
    await waiting.until(paging.backlog_empty, what="the outbox to drain")
    # the step is due, but the approval is settled; so is the second Opsgenie close
    paging.clock.advance(ESCALATES_AFTER + 1)
    await waiting.until(paging.backlog_empty, what="the outbox to drain")
    await paging.settle_quietly(0.5)
    assert paging.pagerduty.requests == []
    assert paging.opsgenie.requests == []


async def test_a_slack_only_escalation_pages_nobody(paging: PagingHarness) -> None:
    approval_id = (await paging.submit(tool=SLACK_ONLY))["approval_id"]
    await paging.escalate(approval_id)
    await waiting.until(lambda: len(paging.oncall_posts()) == 1, what="the on-call post")
    await paging.click(FINANCE[0], approval_id)
    await paging.receiver.wait_delivered(1)
    await waiting.until(paging.backlog_empty, what="the outbox to drain")
    assert paging.pagerduty.requests == []
    assert paging.opsgenie.requests == []


async def test_a_refused_page_is_dead_lettered_and_redriven(short_budget: PagingHarness) -> None:
    h = short_budget
    h.pagerduty.routing_keys = set()  # the integration was deleted: 400 Invalid routing key
    h.opsgenie.api_keys = set()  # and the Opsgenie key revoked: 401
    approval_id = (await h.submit(tool=BOTH))["approval_id"]
    await h.escalate(approval_id)

    async def dead() -> bool:
        assert h.store is not None
        return (await reads.outbox_counts(h.store))[1] == 2

    await waiting.until(dead, timeout=20, what="both pages to be dead-lettered")
    statuses = sorted({r.answered for r in h.pagerduty.requests + h.opsgenie.requests})
    assert statuses == [400, 401]
    # tried on the slow cadence of a refusal (its last try at the budget's end), not hammered
    refused = [r.body for r in h.pagerduty.requests if r.answered == 400]
    assert 1 <= len(refused) <= 3
    no_secret(refused)
    assert h.store is not None
    approval = await h.store.get_approval(approval_id)
    assert approval is not None
    assert approval.status is models.Status.PENDING
    # the approval is untouched: still pending, its card up, on-call told in Slack
    assert len(h.oncall_posts()) == 1

    # an operator fixes the keys and redrives
    h.pagerduty.routing_keys = {PD_KEY}
    h.opsgenie.api_keys = {OG_KEY}
    done = await run_cli(
        "redrive", approval_id, env={"DATABASE_URL": h.database_url, "PATH": os.environ["PATH"]}
    )
    assert done.returncode == 0, done.stderr
    await waiting.until(
        lambda: approval_id in h.pagerduty.incidents and approval_id in h.opsgenie.open_alerts,
        what="the redriven pages",
    )
    await h.click(FINANCE[0], approval_id)
    await waiting.until(
        lambda: not h.pagerduty.incidents and not h.opsgenie.open_alerts, what="the resolves"
    )


async def test_the_store_knows_what_an_approval_may_page_and_what_it_paged(
    store: Repository,
) -> None:
    """The contract of ``pages`` and ``paged`` in the store."""
    a = records.approval()
    page = models.Page(services=("pagerduty", "opsgenie"), severity="error")
    timers = [
        models.TimerEntry(approval_id=a.approval_id, kind="remind", step=0, due_at=T0),
        models.TimerEntry(
            approval_id=a.approval_id,
            kind="escalate",
            step=1,
            due_at=T0 + timedelta(minutes=30),
            page=page,
        ),
    ]
    await store.create_approval(a, [], timers)
    before = await store.get_approval(a.approval_id)
    assert before is not None
    assert (before.pages, before.paged) == (("opsgenie", "pagerduty"), ())
    fired = await store.fire_due_timers(T0 + timedelta(minutes=31), 10)
    assert [t.page for t in fired] == [None, page]
    stored = await store.get_approval(a.approval_id)
    assert stored is not None
    assert stored.paged == ("opsgenie", "pagerduty")
    assert stored.escalated_at is not None
    # A settlement that started from a read before the escalation fired (a click is read, then
    # judged, then settled) still queues a resolve per service the ladder may page.
    settled = records.approved(before)
    assert await store.settle(settled, None, service_module._settlement_outbox(settled))
    items = await store.claim_outbox(T0 + timedelta(hours=1), T0 + timedelta(hours=2), 50)
    pages = sorted(
        (i.work.event, i.work.service) for i in items if isinstance(i.work, models.PageOnCall)
    )
    assert pages == [
        ("resolve", "opsgenie"),
        ("resolve", "opsgenie"),
        ("resolve", "pagerduty"),
        ("trigger", "opsgenie"),
        ("trigger", "pagerduty"),
    ]


async def test_a_timer_that_goes_nowhere_fires_once_and_queues_nothing(store: Repository) -> None:
    a = records.approval()
    nowhere = models.TimerEntry(approval_id=a.approval_id, kind="escalate", step=-1, due_at=T0)
    await store.create_approval(a, [], [nowhere])
    assert await store.fire_due_timers(T0 + timedelta(minutes=1), 10, lambda t: True) == []
    assert await store.fire_due_timers(T0 + timedelta(hours=1), 10) == []  # fired: once
    items = await store.claim_outbox(T0 + timedelta(hours=1), T0 + timedelta(hours=2), 50)
    assert items == []


async def test_only_an_escalation_may_page(store: Repository) -> None:
    a = records.approval()
    await store.create_approval(a, [])
    remind = models.TimerEntry(
        approval_id=a.approval_id,
        kind="remind",
        step=0,
        due_at=T0,
        page=models.Page(services=("pagerduty",)),
    )
    with pytest.raises(asyncpg.IntegrityConstraintViolationError) as caught:
        await store.schedule_timer(remind)
    assert caught.value.constraint_name == "timers_page_check"


# --- the handler on its own: the stand-ins, a store of its own ----------------------------------


@dataclass
class Desk:
    """A pager over a store of its own, speaking to both stand-ins."""

    store: Repository
    pagerduty: PagerDutyStandIn
    opsgenie: OpsgenieStandIn
    pager: bot_paging.Pager
    # the policy in force, under "policy" (a test replaces it: a reload)
    policies: dict[str, policy.Policy]
    secrets: dict[str, str]

    async def page_rows(self, event: str) -> list[models.OutboxItem]:
        far = T0 + timedelta(days=30)
        items = await self.store.claim_outbox(far, far, 100)
        return [i for i in items if isinstance(i.work, models.PageOnCall) and i.work.event == event]

    async def escalated(self, services: tuple[models.PageService, ...]) -> models.Approval:
        """An approval whose escalation paged ``services`` (its trigger rows queued)."""
        a = records.approval()
        page = models.Page(services=services, severity="error")
        timer = models.TimerEntry(
            approval_id=a.approval_id, kind="escalate", step=0, due_at=T0, page=page
        )
        await self.store.create_approval(a, [], [timer])
        await self.store.fire_due_timers(T0, 10)
        found = await self.store.get_approval(a.approval_id)
        assert found is not None
        return found

    async def settle(self, approval: models.Approval) -> models.Approval:
        settled = records.approved(approval)
        assert await self.store.settle(settled, None, [])
        found = await self.store.get_approval(approval.approval_id)
        assert found is not None
        return found


@pytest.fixture
async def desk(store: Repository) -> AsyncIterator[Desk]:
    import aiohttp

    pd, og = PagerDutyStandIn(routing_keys={PD_KEY}), OpsgenieStandIn(api_keys={OG_KEY})
    await pd.start()
    await og.start()
    secrets = {"PD_ROUTING_KEY": PD_KEY, "OPSGENIE_API_KEY": OG_KEY}
    holder = {"policy": paging_policy(8088)}
    async with aiohttp.ClientSession() as session:
        pager = bot_paging.Pager(
            session=session,
            store=store,
            policy=lambda: holder["policy"],
            secret=secrets.get,
            pagerduty_url=pd.base_url + "/",
            opsgenie_url=og.base_url,
        )
        yield Desk(store, pd, og, pager, holder, secrets)
    await pd.stop()
    await og.stop()


async def test_a_trigger_settled_meanwhile_is_resolved_right_after(desk: Desk) -> None:
    approval = await desk.escalated(("pagerduty", "opsgenie"))

    async def decided_while_paging() -> None:
        now = await desk.store.get_approval(approval.approval_id)
        if now is not None and not now.settled:
            await desk.settle(approval)

    desk.pagerduty.on_request = decided_while_paging
    for item in await desk.page_rows("trigger"):
        await desk.pager(item)
    # the trigger went out, and so did a resolve after it: nothing is left open
    assert [e["event_action"] for e in desk.pagerduty.events()] == ["trigger", "resolve"]
    assert desk.pagerduty.incidents == {}
    assert desk.opsgenie.open_alerts == set()  # settled before its turn: never created
    assert desk.opsgenie.requests == []


async def test_a_trigger_tried_before_and_settled_since_sends_a_resolve(desk: Desk) -> None:
    approval = await desk.escalated(("pagerduty",))
    [item] = await desk.page_rows("trigger")
    await desk.settle(approval)
    await desk.pager(item)  # never tried: nothing to send
    assert desk.pagerduty.requests == []
    await desk.pager(item.evolve(attempts=1))  # an earlier try's answer was lost
    assert [e["event_action"] for e in desk.pagerduty.events()] == ["resolve"]


async def test_a_resolve_for_a_service_never_paged_sends_nothing(desk: Desk) -> None:
    a = records.approval()
    await desk.store.create_approval(a, [])
    item = models.OutboxItem(
        id=1,
        approval_id=a.approval_id,
        work=models.PageOnCall(service="opsgenie", event="resolve"),
        attempts=0,
        claims=1,
        claim_no=1,
        created_at=T0,
    )
    await desk.pager(item)
    assert desk.opsgenie.requests == []


async def test_a_missing_key_or_service_is_permanent_and_says_which(desk: Desk) -> None:
    await desk.escalated(("pagerduty", "opsgenie"))
    pd_item, og_item = sorted(await desk.page_rows("trigger"), key=lambda i: str(i.work))[::-1]
    assert pd_item.work_as(models.PageOnCall).service == "pagerduty"
    del desk.secrets["PD_ROUTING_KEY"]
    with pytest.raises(errors.DeliveryFailed) as caught:
        await desk.pager(pd_item)
    assert caught.value.permanent
    assert "PD_ROUTING_KEY is not set" in str(caught.value)
    desk.policies["policy"] = harness_module.test_policy(8088)  # a reload dropped opsgenie
    with pytest.raises(errors.DeliveryFailed) as caught:
        await desk.pager(og_item)
    assert caught.value.permanent
    assert "oncall.opsgenie is not in the policy in force" in str(caught.value)
    assert desk.pagerduty.requests == desk.opsgenie.requests == []


async def test_a_server_error_carries_its_retry_after(desk: Desk) -> None:
    await desk.escalated(("opsgenie",))
    [item] = await desk.page_rows("trigger")
    desk.opsgenie.fail(1, status=503, retry_after="42")
    with pytest.raises(errors.DeliveryFailed) as caught:
        await desk.pager(item)
    assert (caught.value.retry_after, caught.value.permanent) == (42.0, False)
    assert "opsgenie: HTTP 503: Internal Server Error" in str(caught.value)
    desk.opsgenie.fail(1, status=429)
    with pytest.raises(errors.DeliveryFailed) as caught:
        await desk.pager(item)
    assert (caught.value.retry_after, caught.value.permanent) == (None, False)
    await desk.pager(item)
    [created] = desk.opsgenie.accepted()
    assert created.body["priority"] == "P2"  # severity error
    assert created.body["description"].endswith("Its card is not posted yet.")
    assert created.body["details"]["card"] == "not posted yet"


async def test_a_card_link_falls_back_to_its_channel(desk: Desk) -> None:
    approval = await desk.escalated(("pagerduty",))
    await desk.store.set_card(approval.approval_id, models.CardRef(channel="C0REVIEWS", ts="1.2"))
    [item] = await desk.page_rows("trigger")
    await desk.pager(item)
    [trigger] = desk.pagerduty.events("trigger")
    link = "https://slack.com/app_redirect?channel=C0REVIEWS"
    assert trigger["client_url"] == link
    assert trigger["links"] == [{"href": link, "text": "Open the card in Slack to decide"}]
