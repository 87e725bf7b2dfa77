"""ApprovalService over a store of its own, a fake clock and a fake approver directory."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from approvals import errors, models, policy, service, states
from approvals.repository import Repository
from guards import authority
from tests.support import waiting

S = models.Status
T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
FAR = T0 + timedelta(days=3650)
AGENT = "sales-bot"
OTHER_AGENT = "ops-bot"
CALLBACK_URL = "https://agent.internal/approvals"
ARGUMENTS: dict[str, Any] = {"amount": 500, "currency": "EUR"}

REQUESTER = authority.Approver(
    slack_user_id="U0REQ", email="rita@example.com", name="Rita", usergroups=frozenset({"S0FIN"})
)
TWIN = authority.Approver(
    slack_user_id="U0TWIN", email="RITA@example.com", name="Rita 2", usergroups=frozenset({"S0FIN"})
)
FIN1 = authority.Approver(
    slack_user_id="U0FIN1", email="fin1@example.com", name="Fin 1", usergroups=frozenset({"S0FIN"})
)
FIN2 = authority.Approver(
    slack_user_id="U0FIN2", email="fin2@example.com", name="Fin 2", usergroups=frozenset({"S0FIN"})
)
OUTSIDER = authority.Approver(slack_user_id="U0OUT", email="otto@example.com", name="Otto")
APPROVER = authority.Approver(slack_user_id="U0APP", email="alma@example.com", name="Alma")
FLAKY = authority.Approver(
    slack_user_id="U0FLAKY", usergroups=frozenset({"S0FIN"}), lookup_error="ratelimited"
)


def make_policy() -> policy.Policy:
    return policy.Policy.model_validate(
        {
            "slack": {"reviewer_channel": "C0REVIEWS"},
            "agents": {
                AGENT: {
                    "token_env": "SALES_BOT_TOKEN",
                    "callback_secret_env": "SALES_BOT_SIGNING",
                    "callback_hosts": ["127.0.0.1:8088", "agent.internal"],
                },
                # allowed to name the host, but without a secret its callbacks can't be signed
                OTHER_AGENT: {"token_env": "OPS_BOT_TOKEN", "callback_hosts": ["agent.internal"]},
            },
            "roles": {
                "approvers": {"users": [APPROVER.slack_user_id]},
                "finance": {"usergroups": ["S0FIN"]},
            },
            "rules": [
                {"tool": "transfer_*", "require": "finance"},
                {"tool": "*", "require": "approvers"},
            ],
        }
    )


class FakeClock:
    def __init__(self, now: datetime = T0, tick: timedelta = timedelta()) -> None:
        self.now = now
        self.tick = tick

    def __call__(self) -> datetime:
        now = self.now
        self.now += self.tick
        return now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class FakeDirectory:
    """The Slack edge's port: facts about a clicker, by Slack id, as of now."""

    def __init__(self, *people: authority.Approver) -> None:
        self.people = {p.slack_user_id: p for p in people}
        self.asked: list[tuple[str, frozenset[str]]] = []

    async def approver(self, slack_user_id: str, usergroups: frozenset[str]) -> authority.Approver:
        self.asked.append((slack_user_id, usergroups))
        await asyncio.sleep(0)  # a real lookup yields: let concurrent clicks interleave
        found = self.people.get(slack_user_id)
        if found is None:
            return authority.Approver(slack_user_id=slack_user_id, lookup_error="user_not_found")
        return authority.Approver(
            slack_user_id=found.slack_user_id,
            email=found.email,
            name=found.name,
            usergroups=found.usergroups & usergroups,
            lookup_error=found.lookup_error,
        )


DIRECTORY = FakeDirectory(REQUESTER, TWIN, FIN1, FIN2, OUTSIDER, APPROVER, FLAKY)


def make_request(**changes: Any) -> models.ApprovalRequest:
    body: dict[str, Any] = {
        "request_id": "af-call-7",
        "session_id": "thread-1",
        "tool": {"name": "transfer_money", "call_id": "call_1", "arguments": ARGUMENTS},
        "requester": {"slack_user_id": "U0REQ", "email": "rita@example.com", "name": "Rita"},
        "summary": "Pay invoice 42",
        "context": {"environment": "prod"},
        "callback_url": CALLBACK_URL,
        "expires_in": 3600,
        "framework": "generic",
    }
    body.update(changes)
    return models.ApprovalRequest.model_validate(body)


class World:
    def __init__(self, store: Repository) -> None:
        self.clock = FakeClock()
        self.store = store
        self.policy = make_policy()
        ids = itertools.count(1)
        self.service = service.ApprovalService(
            store=self.store,
            policy=lambda: self.policy,
            clock=self.clock,
            new_id=lambda: f"apr_{next(ids):024x}",
        )

    async def submit(self, agent: str = AGENT, **changes: Any) -> models.Approval:
        approval, created = await self.service.submit(agent, make_request(**changes))
        assert created
        return approval

    async def click(
        self,
        approval_id: str,
        who: authority.Approver,
        action: service.Action = "approve",
        directory: FakeDirectory = DIRECTORY,
    ) -> service.ClickResult:
        return await self.service.click(
            approval_id, action=action, slack_user_id=who.slack_user_id, directory=directory
        )

    async def outbox(self, approval_id: str | None = None) -> list[models.OutboxItem]:
        # a lease that ends when it starts leaves every row claimable again
        items = await self.store.claim_outbox(FAR, FAR, 1000)
        return [i for i in items if approval_id is None or i.approval_id == approval_id]

    async def kinds(self, approval_id: str) -> list[models.OutboxKind]:
        return [i.kind for i in await self.outbox(approval_id)]

    async def outcomes(self, approval_id: str) -> list[models.AttemptOutcome]:
        return [a.outcome for a in await self.store.attempts(approval_id)]


@pytest.fixture
def world(store: Repository) -> World:
    return World(store)


# --- submit ------------------------------------------------------------------------------


async def test_submit_creates_a_pending_approval(world: World) -> None:
    approval, created = await world.service.submit(AGENT, make_request())
    assert created is True
    assert approval.status is S.PENDING
    assert approval.agent == AGENT
    assert (approval.request_id, approval.session_id) == ("af-call-7", "thread-1")
    assert approval.tool.call_id == "call_1"
    expected = hashlib.sha256(b'{"amount":500,"currency":"EUR"}').hexdigest()
    assert approval.arguments_sha256 == expected
    assert approval.required == models.Required(role="finance", approvals=1)
    assert approval.rule == "rules[0] tool=transfer_*"
    assert approval.created_at == T0
    assert approval.expires_at == T0 + timedelta(hours=1)
    assert approval.policy_version == world.policy.version
    assert approval.decided_by == ()
    assert approval.decided_at is None
    assert await world.kinds(approval.approval_id) == [models.OutboxKind.POST_CARD]
    assert await world.service.get(approval.approval_id, agent=AGENT) == approval


async def test_unknown_tool_still_needs_a_human(world: World) -> None:
    tool = {"name": "launch_rockets", "call_id": "c9", "arguments": {}}
    approval = await world.submit(tool=tool)
    assert approval.status is S.PENDING
    assert approval.required.role == "approvers"
    assert approval.rule == "rules[1] tool=*"


async def test_identical_resubmit_returns_the_same_approval(world: World) -> None:
    first, created = await world.service.submit(AGENT, make_request())
    world.clock.advance(30)
    again, created_again = await world.service.submit(AGENT, make_request())
    assert (created, created_again) == (True, False)
    assert again.approval_id == first.approval_id
    assert again == first  # created_at and expires_at are not moved by the retry
    assert await world.kinds(first.approval_id) == [models.OutboxKind.POST_CARD]


async def test_identical_resubmit_after_settlement_returns_the_settled_approval(
    world: World,
) -> None:
    first = await world.submit()
    await world.click(first.approval_id, FIN1)
    again, created = await world.service.submit(AGENT, make_request())
    assert created is False
    assert again.approval_id == first.approval_id
    assert again.status is S.APPROVED


@pytest.mark.parametrize(
    "changes",
    [
        {"tool": {"name": "transfer_money", "call_id": "call_1", "arguments": {"amount": 5000}}},
        {
            "tool": {
                "name": "transfer_money",
                "call_id": "call_1",
                # 500 and 500.0 are one JSON number under RFC 8785: a string is not
                "arguments": {"amount": "500", "currency": "EUR"},
            }
        },
        {"tool": {"name": "transfer_money", "call_id": "call_2", "arguments": ARGUMENTS}},
        {"tool": {"name": "transfer_all", "call_id": "call_1", "arguments": ARGUMENTS}},
        {"summary": "Pay invoice 43"},
        {"callback_url": "http://127.0.0.1:8088/other"},
        {"requester": {"slack_user_id": "U0BEN"}},
    ],
    ids=["amount", "number-vs-string", "call-id", "tool-name", "summary", "callback", "requester"],
)
async def test_same_ids_different_content_is_a_conflict(
    world: World, changes: dict[str, Any]
) -> None:
    first = await world.submit()
    with pytest.raises(errors.RequestConflict) as exc:
        await world.service.submit(AGENT, make_request(**changes))
    assert exc.value.approval_id == first.approval_id
    # never a silent rebind: the stored approval is untouched
    assert await world.service.get(first.approval_id) == first
    assert await world.kinds(first.approval_id) == [models.OutboxKind.POST_CARD]


async def test_same_request_id_in_another_session_or_agent_is_a_new_approval(
    world: World,
) -> None:
    first = await world.submit()
    other_session = await world.submit(session_id="thread-2")
    other_agent = await world.submit(OTHER_AGENT, callback_url=None)
    assert len({first.approval_id, other_session.approval_id, other_agent.approval_id}) == 3


@pytest.mark.parametrize(
    "url",
    [
        "https://evil.example/approvals",
        "http://agent.internal@evil.example/",
        "http://127.0.0.1:5432/",
        "file:///etc/passwd",
    ],
)
async def test_callback_host_not_allowed(world: World, url: str) -> None:
    with pytest.raises(errors.CallbackNotAllowed):
        await world.service.submit(AGENT, make_request(callback_url=url))
    assert await world.outbox() == []  # nothing stored, nothing to post


async def test_callback_without_a_signing_secret_is_refused(world: World) -> None:
    with pytest.raises(errors.CallbackNotAllowed, match="callback_secret_env"):
        await world.service.submit(OTHER_AGENT, make_request(callback_url=CALLBACK_URL))
    assert await world.outbox() == []


async def test_expires_in_is_defaulted_and_capped(world: World) -> None:
    default = await world.submit(request_id="r-default", expires_in=None)
    capped = await world.submit(request_id="r-capped", expires_in=10**9)
    assert default.expires_at == T0 + timedelta(hours=1)
    assert capped.expires_at == T0 + timedelta(days=1)


# --- get ---------------------------------------------------------------------------------


async def test_agent_isolation(world: World) -> None:
    approval = await world.submit()
    assert (await world.service.get(approval.approval_id, agent=AGENT)).approval_id == (
        approval.approval_id
    )
    with pytest.raises(errors.NotFound):
        await world.service.get(approval.approval_id, agent=OTHER_AGENT)
    with pytest.raises(errors.NotFound):
        await world.service.cancel(approval.approval_id, agent=OTHER_AGENT)
    with pytest.raises(errors.NotFound):
        await world.service.wait(approval.approval_id, agent=OTHER_AGENT, timeout=0)
    assert (await world.service.get(approval.approval_id)).status is S.PENDING


async def test_unknown_id_is_not_found(world: World) -> None:
    with pytest.raises(errors.NotFound):
        await world.service.get("apr_" + "f" * 24)
    with pytest.raises(errors.NotFound):
        await world.click("apr_" + "f" * 24, FIN1)


# --- clicks ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("who", "outcome"),
    [
        (REQUESTER, authority.Outcome.SELF),
        (TWIN, authority.Outcome.SELF),
        (OUTSIDER, authority.Outcome.NO_AUTHORITY),
        (APPROVER, authority.Outcome.NO_AUTHORITY),  # holds another role, not finance
        (FLAKY, authority.Outcome.LOOKUP_FAILED),
        (authority.Approver(slack_user_id="U0GHOST"), authority.Outcome.LOOKUP_FAILED),
    ],
    ids=["requester", "requester-twin", "outsider", "other-role", "lookup-error", "unknown-user"],
)
@pytest.mark.parametrize("action", ["approve", "deny"])
async def test_refused_click_leaves_it_pending(
    world: World, who: authority.Approver, outcome: authority.Outcome, action: service.Action
) -> None:
    approval = await world.submit()
    result = await world.click(approval.approval_id, who, action)
    assert isinstance(result, service.Refused)
    assert result.verdict.outcome is outcome
    assert result.verdict.reason
    current = await world.service.get(approval.approval_id)
    assert current.status is S.PENDING
    assert current.decided_by == ()
    assert await world.outcomes(approval.approval_id) == [models.AttemptOutcome(outcome.value)]
    assert await world.kinds(approval.approval_id) == [models.OutboxKind.POST_CARD]
    # an eligible approver can still decide
    assert isinstance(await world.click(approval.approval_id, FIN1), service.Settled)


async def test_eligible_click_settles_with_outbox_rows(world: World) -> None:
    approval = await world.submit()
    world.clock.advance(60)
    result = await world.click(approval.approval_id, FIN1)
    assert isinstance(result, service.Settled)
    settled = result.approval
    assert settled.status is S.APPROVED
    assert [d.slack_user_id for d in settled.decided_by] == ["U0FIN1"]
    assert settled.decided_by[0].name == "Fin 1"
    assert settled.decided_at == T0 + timedelta(seconds=60)
    assert await world.service.get(approval.approval_id) == settled
    assert await world.outcomes(approval.approval_id) == [models.AttemptOutcome.ACCEPTED]
    items = await world.outbox(approval.approval_id)
    assert [i.kind for i in items] == [
        models.OutboxKind.POST_CARD,
        models.OutboxKind.UPDATE_CARD,
        models.OutboxKind.CALLBACK,
        models.OutboxKind.UPDATE_CARD,  # due when the decision lapses, to show it if unused
    ]
    assert items[3].created_at == settled.decided_at + timedelta(seconds=900 + 1)
    callback = items[2].work_as(models.Callback)
    assert callback.url == CALLBACK_URL
    assert callback.agent == approval.agent  # the sender signs with its secret, body unread
    body_text = callback.body
    body = json.loads(body_text)
    # bound decision: every id and the hash of exactly these arguments
    assert body["approval_id"] == approval.approval_id
    assert body["status"] == "approved"
    assert (body["request_id"], body["session_id"]) == ("af-call-7", "thread-1")
    assert body["tool"]["call_id"] == "call_1"
    assert body["arguments_sha256"] == approval.arguments_sha256
    assert body["decided_by"][0]["slack_user_id"] == "U0FIN1"
    assert body["resume"] == {"approved": True, "status": "approved", "reason": ""}
    assert "delivery" not in body


async def test_what_a_click_answers_is_what_a_read_then_shows(world: World) -> None:
    """A click's outcome is the approval as its settlement wrote it, not read again: it must
    be what a read just after shows, a quorum's vote and the settling vote alike."""
    world.policy = world.policy.model_copy(
        update={
            "rules": (
                policy.Rule.model_validate(
                    {"tool": "transfer_*", "require": "finance", "approvals": 2}
                ),
                *world.policy.rules,
            )
        }
    )
    approval = await world.submit()
    world.clock.advance(5)
    voted = await world.click(approval.approval_id, FIN1)
    assert isinstance(voted, service.Voted)
    assert voted.approval == await world.service.get(approval.approval_id)
    world.clock.advance(5)
    settled = await world.click(approval.approval_id, FIN2)
    assert isinstance(settled, service.Settled)
    assert settled.approval.delivery.status == "pending"  # its callback, written, not sent
    assert settled.approval == await world.service.get(approval.approval_id)


async def test_a_long_poll_here_is_answered_from_the_settlement_with_no_read(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long-poll waiting in the process where the click settles is answered with the
    approval as the settlement wrote it: no read of its own after the wake-up."""
    approval = await world.submit()
    long_poll = asyncio.create_task(
        world.service.wait(approval.approval_id, agent=AGENT, timeout=30)
    )
    await waiting.until(lambda: approval.approval_id in world.store._settle_waiters)
    readers: list[asyncio.Task[Any] | None] = []
    read = world.store.get_approval

    async def counted(approval_id: str) -> models.Approval | None:
        readers.append(asyncio.current_task())
        return await read(approval_id)

    monkeypatch.setattr(world.store, "get_approval", counted)
    clicked = await world.click(approval.approval_id, FIN1)
    assert isinstance(clicked, service.Settled)
    answered = await asyncio.wait_for(long_poll, 5)
    assert answered == clicked.approval == await read(approval.approval_id)
    assert long_poll not in readers


async def test_membership_is_checked_at_click_time(world: World) -> None:
    approval = await world.submit()
    late_joiner = authority.Approver(slack_user_id="U0NEW", email="new@example.com")
    directory = FakeDirectory(late_joiner)
    refused = await world.click(approval.approval_id, late_joiner, directory=directory)
    assert isinstance(refused, service.Refused)
    assert refused.verdict.outcome is authority.Outcome.NO_AUTHORITY
    # joins the finance user group after the card was posted
    directory.people["U0NEW"] = authority.Approver(
        slack_user_id="U0NEW", email="new@example.com", usergroups=frozenset({"S0FIN"})
    )
    assert isinstance(
        await world.click(approval.approval_id, late_joiner, directory=directory), service.Settled
    )
    assert directory.asked == [("U0NEW", frozenset({"S0FIN"}))] * 2


async def test_role_members_come_from_the_current_policy(world: World) -> None:
    approval = await world.submit()
    world.policy = world.policy.model_copy(update={"roles": {"approvers": policy.Role()}})
    result = await world.click(approval.approval_id, FIN1)
    assert isinstance(result, service.Refused)  # the finance role was removed: fail closed
    assert result.verdict.outcome is authority.Outcome.NO_AUTHORITY


async def test_deny_settles_denied_and_not_executed(world: World) -> None:
    approval = await world.submit()
    result = await world.click(approval.approval_id, FIN1, "deny")
    assert isinstance(result, service.Settled)
    assert result.approval.status is S.DENIED
    assert result.approval.reason is not None
    assert "not executed" in result.approval.reason
    body_text = (await world.outbox(approval.approval_id))[-1].work_as(models.Callback).body
    assert json.loads(body_text)["resume"]["approved"] is False


@pytest.mark.parametrize("second", [FIN1, FIN2, REQUESTER])
@pytest.mark.parametrize("action", ["approve", "deny"])
async def test_second_click_is_stale(
    world: World, second: authority.Approver, action: service.Action
) -> None:
    approval = await world.submit()
    first = await world.click(approval.approval_id, FIN1)
    assert isinstance(first, service.Settled)
    result = await world.click(approval.approval_id, second, action)
    assert isinstance(result, service.Stale)
    assert result.approval.status is S.APPROVED
    current = await world.service.get(approval.approval_id)
    assert current == first.approval  # the first settlement stands
    assert await world.outcomes(approval.approval_id) == [
        models.AttemptOutcome.ACCEPTED,
        models.AttemptOutcome.STALE,
    ]
    assert (await world.kinds(approval.approval_id)).count(models.OutboxKind.CALLBACK) == 1


async def test_concurrent_clicks_settle_exactly_once(world: World) -> None:
    approval = await world.submit()
    results = await asyncio.gather(
        world.click(approval.approval_id, FIN1, "approve"),
        world.click(approval.approval_id, FIN2, "deny"),
    )
    settled = [r for r in results if isinstance(r, service.Settled)]
    stale = [r for r in results if isinstance(r, service.Stale)]
    assert (len(settled), len(stale)) == (1, 1)
    current = await world.service.get(approval.approval_id)
    assert current == settled[0].approval
    assert len(current.decided_by) == 1
    kinds = await world.kinds(approval.approval_id)
    assert kinds.count(models.OutboxKind.CALLBACK) == 1
    # on real PostgreSQL either click may win: an approval's card is updated again when the
    # decision lapses, a denial's is final
    lapses = 1 if current.status is S.APPROVED else 0
    assert kinds.count(models.OutboxKind.UPDATE_CARD) == 1 + lapses
    assert sorted(await world.outcomes(approval.approval_id)) == sorted(
        [models.AttemptOutcome.ACCEPTED, models.AttemptOutcome.STALE]
    )


@pytest.mark.parametrize("late", [0, 1, 86400], ids=["at-expires_at", "1s-after", "a-day-after"])
@pytest.mark.parametrize("action", ["approve", "deny"])
async def test_click_after_expiry_expires_never_approves(
    world: World, late: int, action: service.Action
) -> None:
    approval = await world.submit()
    world.clock.now = approval.expires_at + timedelta(seconds=late)
    result = await world.click(approval.approval_id, FIN1, action)
    assert isinstance(result, service.Expired)
    assert result.approval.status is S.EXPIRED
    assert result.approval.decided_by == ()
    current = await world.service.get(approval.approval_id)
    assert current.status is S.EXPIRED
    assert await world.outcomes(approval.approval_id) == [models.AttemptOutcome.EXPIRED]
    items = await world.outbox(approval.approval_id)
    body_text = items[-1].work_as(models.Callback).body
    body = json.loads(body_text)
    assert body["status"] == "expired"
    assert body["resume"]["approved"] is False
    # and it stays expired
    assert isinstance(await world.click(approval.approval_id, FIN2), service.Stale)
    assert (await world.service.get(approval.approval_id)).status is S.EXPIRED


async def test_expiry_wins_over_a_refused_clicker_too(world: World) -> None:
    approval = await world.submit()
    world.clock.now = approval.expires_at
    result = await world.click(approval.approval_id, REQUESTER)
    assert isinstance(result, service.Expired)


async def test_click_straddling_expiry_is_an_outcome_not_an_exception(world: World) -> None:
    clock = world.clock
    approval = await world.submit()
    clock.now = approval.expires_at - timedelta(microseconds=500)
    clock.tick = timedelta(milliseconds=1)
    result = await world.click(approval.approval_id, FIN1)
    assert isinstance(result, service.Settled | service.Expired)
    assert result.approval.status is not S.PENDING


# --- timers and cancel -------------------------------------------------------------------


async def test_expire_due(world: World) -> None:
    short = await world.submit(request_id="r-short", expires_in=60)
    long = await world.submit(request_id="r-long", expires_in=7200)
    assert await world.service.expire_due() == 0
    world.clock.advance(61)
    assert await world.service.expire_due() == 1
    expired = await world.service.get(short.approval_id)
    assert expired.status is S.EXPIRED
    assert expired.decided_at == T0 + timedelta(seconds=61)
    assert expired.reason is not None
    assert "not executed" in expired.reason
    assert (await world.service.get(long.approval_id)).status is S.PENDING
    assert await world.kinds(short.approval_id) == [
        models.OutboxKind.POST_CARD,
        models.OutboxKind.UPDATE_CARD,
        models.OutboxKind.CALLBACK,
    ]
    assert await world.service.expire_due() == 0  # exactly once
    world.clock.advance(7200)
    assert await world.service.expire_due() == 1
    assert (await world.service.get(long.approval_id)).status is S.EXPIRED


async def test_expire_due_leaves_settled_ones_alone(world: World) -> None:
    approval = await world.submit(expires_in=60)
    await world.click(approval.approval_id, FIN1)
    world.clock.advance(120)
    assert await world.service.expire_due() == 0
    assert (await world.service.get(approval.approval_id)).status is S.APPROVED


async def test_cancel_then_cancel_again(world: World) -> None:
    approval = await world.submit()
    cancelled = await world.service.cancel(approval.approval_id, agent=AGENT, reason="stale")
    assert cancelled.status is S.CANCELLED
    assert cancelled.reason == f"Cancelled by the agent: stale. {states.NOT_EXECUTED}"
    assert cancelled.decided_at == T0
    assert await world.kinds(approval.approval_id) == [
        models.OutboxKind.POST_CARD,
        models.OutboxKind.UPDATE_CARD,
        models.OutboxKind.CALLBACK,
    ]
    with pytest.raises(errors.InvalidTransition):
        await world.service.cancel(approval.approval_id, agent=AGENT)
    assert (await world.service.get(approval.approval_id)) == cancelled
    assert isinstance(await world.click(approval.approval_id, FIN1), service.Stale)


async def test_cancel_after_approval_is_refused(world: World) -> None:
    approval = await world.submit()
    await world.click(approval.approval_id, FIN1)
    with pytest.raises(errors.InvalidTransition):
        await world.service.cancel(approval.approval_id, agent=AGENT)
    assert (await world.service.get(approval.approval_id)).status is S.APPROVED


async def test_no_callback_url_means_no_callback_row(world: World) -> None:
    approval = await world.submit(callback_url=None)
    await world.click(approval.approval_id, FIN1)
    assert await world.kinds(approval.approval_id) == [
        models.OutboxKind.POST_CARD,
        models.OutboxKind.UPDATE_CARD,
        models.OutboxKind.UPDATE_CARD,  # when the decision lapses
    ]


async def test_wait_returns_once_settled(world: World) -> None:
    approval = await world.submit()
    pending = await world.service.wait(approval.approval_id, agent=AGENT, timeout=0)
    assert pending.status is S.PENDING
    await world.click(approval.approval_id, FIN1)
    settled = await world.service.wait(approval.approval_id, agent=AGENT, timeout=60)
    assert settled.status is S.APPROVED


# --- nobody else could decide: escalate at once -------------------------------------------


def oncall_policy(*, oncall: bool = True) -> policy.Policy:
    data = make_policy().model_dump(mode="json", by_alias=True, exclude_none=True)
    data["roles"].update(
        {
            "nobody": {},
            "only-rita": {"users": [REQUESTER.slack_user_id]},
            "solo": {"usergroups": ["S0SOLO"]},
        }
    )
    data["rules"] = [
        {"tool": "launch_*", "require": "nobody"},
        {"tool": "self_*", "require": "only-rita"},
        {"tool": "solo_*", "require": "solo"},
        {"tool": "either_*", "require": ["nobody", "approvers"]},
        *data["rules"],
    ]
    if oncall:
        data["oncall"] = {"channel": "C0ONCALL"}
    return policy.Policy.model_validate(data)


def tool(name: str) -> dict[str, Any]:
    return {"name": name, "call_id": "c1", "arguments": ARGUMENTS}


async def escalations(world: World, approval_id: str) -> list[tuple[str, int, datetime]]:
    """The timers due by now, fired (each fires once), as (kind, step, due_at)."""
    fired = await world.store.fire_due_timers(world.clock.now, 100)
    return [(t.kind, t.step, t.due_at) for t in fired if t.approval_id == approval_id]


@pytest.mark.parametrize(
    ("name", "at_once"),
    [
        ("launch_rocket", True),  # the role is empty
        ("self_approve", True),  # its only listed user is the requester
        ("either_way", False),  # any_of: the second role has someone
        ("solo_task", False),  # a user group: resolved once the card is up, not at submit
        ("transfer_money", False),
    ],
)
async def test_a_request_nobody_else_could_decide_escalates_at_submit(
    world: World, name: str, at_once: bool
) -> None:
    world.policy = oncall_policy()
    approval = await world.submit(tool=tool(name))
    expected = [("escalate", service.IMMEDIATE_ESCALATION_STEP, T0)] if at_once else []
    assert await escalations(world, approval.approval_id) == expected


async def test_a_timer_due_with_the_expiry_lapses_even_before_the_expiry_sweep(
    world: World,
) -> None:
    # the timer and expiry loops race: whichever runs first, an approval past its expiry is
    # not paged for (the sweep below has not run yet; status is still pending)
    world.policy = oncall_policy()
    approval = await world.submit(tool=tool("launch_rocket"), expires_in=60)
    world.clock.advance(60)
    assert await escalations(world, approval.approval_id) == []
    assert await world.service.expire_due() == 1


async def test_without_oncall_nobody_is_escalated_to(world: World) -> None:
    world.policy = oncall_policy(oncall=False)
    approval = await world.submit(tool=tool("launch_rocket"))
    assert await escalations(world, approval.approval_id) == []


class Groups:
    """The edge's group lookups: members by group, None for a lookup that failed."""

    def __init__(self, **members: frozenset[str] | None) -> None:
        self.members = members
        self.asked: list[str] = []

    async def __call__(self, usergroup: str) -> frozenset[str] | None:
        self.asked.append(usergroup)
        return self.members.get(usergroup)


@pytest.mark.parametrize(
    ("members", "escalated"),
    [
        (frozenset({REQUESTER.slack_user_id}), True),  # the only member is the requester
        (frozenset(), True),
        (frozenset({REQUESTER.slack_user_id, FIN1.slack_user_id}), False),
        (None, False),  # the lookup failed: nothing is decided, the ladder runs
    ],
)
async def test_once_the_card_is_up_resolved_groups_decide_an_immediate_escalation(
    world: World, members: frozenset[str] | None, escalated: bool
) -> None:
    world.policy = oncall_policy()
    approval = await world.submit(tool=tool("solo_task"))
    groups = Groups(S0SOLO=members)
    assert (
        await world.service.escalate_if_nobody_can_decide(approval.approval_id, groups) is escalated
    )
    assert groups.asked == ["S0SOLO"]
    expected = [("escalate", service.IMMEDIATE_ESCALATION_STEP, T0)] if escalated else []
    world.clock.advance(5)  # due at creation: already due when the card goes up
    assert await escalations(world, approval.approval_id) == expected


async def test_the_card_check_asks_nothing_without_oncall_or_user_groups(world: World) -> None:
    world.policy = oncall_policy(oncall=False)
    solo = await world.submit(tool=tool("solo_task"))
    groups = Groups(S0SOLO=frozenset())
    assert await world.service.escalate_if_nobody_can_decide(solo.approval_id, groups) is False
    world.policy = oncall_policy()
    listed = await world.submit(request_id="r2", tool=tool("either_way"))
    assert await world.service.escalate_if_nobody_can_decide(listed.approval_id, groups) is False
    assert groups.asked == []


async def test_a_guard_escalation_lives_as_long_as_the_policy_allows(world: World) -> None:
    escalation = service.Escalation(role="approvers", rule="tools.x.limits[0]", outsiders=())
    default, _ = await world.service.submit(
        AGENT, make_request(request_id="e1", expires_in=None), escalation=escalation
    )
    capped, _ = await world.service.submit(
        AGENT, make_request(request_id="e2", expires_in=10**9), escalation=escalation
    )
    assert default.expires_at == T0 + timedelta(hours=1)
    assert capped.expires_at == T0 + timedelta(days=1)
    assert default.required == models.Required(role="approvers")
    assert default.rule == "tools.x.limits[0]"
