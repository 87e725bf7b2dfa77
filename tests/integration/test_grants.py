"""Standing grants on real PostgreSQL (docs/grants.md): a grant is a way to say yes without a
click, so every way one could approve what its granter's own click could not is refused, and
its uses are counted so that no race takes more than it allows."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from approvals import errors, models, policy, service
from approvals.grants import is_number
from approvals.repository import Repository
from guards import authority
from tests.integration.test_service import FAR, T0, FakeClock, FakeDirectory, make_request
from tests.support import reads

S = models.Status
AGENT = "sales-bot"
TOOL = "send_proposal"
ARGUMENTS: dict[str, Any] = {
    "account": "ACME",
    "amount": 2000,
    "lines": [{"sku": "A-1", "qty": 2}],
    "note": "renewal",
}


def person(uid: str, *groups: str) -> authority.Approver:
    return authority.Approver(
        slack_user_id=uid,
        email=f"{uid.lower()}@example.com",
        name=uid,
        usergroups=frozenset(groups),
    )


REQUESTER = person("U0REQ", "S0LEADS")  # a sales lead too: never their own granter
LEAD = person("U0LEAD", "S0LEADS")
OTHER_LEAD = person("U0LEAD2", "S0LEADS")
OUTSIDER = person("U0OUT")


def make_policy(ceiling: int = 10000, **grant_changes: Any) -> policy.Policy:
    grants = {"max_seconds": 3600, "max_uses": 20, "scopes": ["session", "agent"]}
    grants.update(grant_changes)
    return policy.Policy.model_validate(
        {
            "slack": {"reviewer_channel": "C0REVIEWS"},
            "agents": {
                name: {
                    "token_env": "SALES_BOT_TOKEN",
                    "callback_secret_env": "SALES_BOT_SIGNING",
                    "callback_hosts": ["agent.internal"],
                }
                for name in (AGENT, "other-bot")
            },
            "roles": {
                "sales-leads": {"usergroups": ["S0LEADS"], "ceiling": {"amount": ceiling}},
                "admins": {"users": ["U0ADMIN"]},
            },
            "rules": [
                {"tool": "send_*", "require": "sales-leads", "grants": grants},
                {"tool": "*", "require": "admins"},
            ],
        }
    )


class World:
    def __init__(self, store: Repository) -> None:
        self.clock = FakeClock()
        self.store = store
        self.policy = make_policy()
        self.directory = FakeDirectory(REQUESTER, LEAD, OTHER_LEAD, OUTSIDER)
        self.ids = itertools.count(1)
        self.service = self.replica(store)

    def replica(self, store: Repository) -> service.ApprovalService:
        return service.ApprovalService(
            store=store,
            policy=lambda: self.policy,
            clock=self.clock,
            new_id=lambda: f"apr_{next(self.ids):024x}",
        )

    async def call(
        self,
        request_id: str,
        arguments: dict[str, Any] | None = None,
        *,
        agent: str = AGENT,
        on: service.ApprovalService | None = None,
        **changes: Any,
    ) -> models.Approval:
        tool = {"name": TOOL, "call_id": request_id, "arguments": arguments or ARGUMENTS}
        body: dict[str, Any] = {"request_id": request_id, "tool": tool, **changes}
        approval, _ = await (on or self.service).submit(
            agent, make_request(**body), directory=self.directory
        )
        return approval

    async def grant(
        self,
        approval: models.Approval,
        who: authority.Approver = LEAD,
        **terms: Any,
    ) -> service.GrantResult:
        asked: dict[str, Any] = {"scope": "session", "seconds": 3600, "uses": 5, **terms}
        return await self.service.grant(
            approval.approval_id,
            slack_user_id=who.slack_user_id,
            terms=asked,
            directory=self.directory,
            seen=approval.arguments_sha256,
        )

    async def granted(self, **terms: Any) -> models.Grant:
        """A call approved by LEAD with a grant of ``terms``."""
        first = await self.call("r1")
        result = await self.grant(first, **terms)
        assert isinstance(result, service.Settled), result
        [made] = await self.service.grants_of(first.approval_id)
        return made


async def outbox(world: World, approval_id: str) -> list[models.OutboxItem]:
    # a lease that ends when it starts leaves every row claimable again
    items = await world.store.claim_outbox(FAR, FAR, 1000)
    return [i for i in items if i.approval_id == approval_id]


@pytest.fixture
def world(store: Repository) -> World:
    return World(store)


def granted_by(approval: models.Approval, grant: models.Grant, use: int) -> None:
    assert approval.status is S.APPROVED
    assert approval.grant == models.GrantUse(id=grant.grant_id, use=use, of=grant.max_uses)
    [decider] = approval.decided_by
    assert decider.slack_user_id == grant.granted_by.slack_user_id
    assert decider.arguments_sha256 == approval.arguments_sha256


# -- making a grant ---------------------------------------------------------------------------


async def test_approve_and_allow_more_approves_the_call_and_makes_the_grant(world: World) -> None:
    first = await world.call("r1")
    assert first.grants == models.GrantLimits(
        max_seconds=3600, max_uses=20, scopes=("session", "agent")
    )
    result = await world.grant(first, uses=3, kinds={"note": "any", "amount": "at_most"})
    assert isinstance(result, service.Settled)
    assert result.approval.status is S.APPROVED
    [made] = await world.service.grants_of(first.approval_id)
    assert (made.scope, made.max_uses, made.uses, made.session_id) == ("session", 3, 0, "thread-1")
    assert made.created_at == T0
    assert (made.expires_at - made.created_at).total_seconds() == 3600
    assert made.constraints == {
        "account": models.GrantConstraint(kind="exactly", value="ACME"),
        "amount": models.GrantConstraint(kind="at_most", value=2000),
        "lines": models.GrantConstraint(kind="exactly", value=[{"sku": "A-1", "qty": 2}]),
        "note": models.GrantConstraint(kind="any"),
    }
    assert made.granted_by.slack_user_id == LEAD.slack_user_id
    # the card is told to show it, and once more when it expires
    due = [i.created_at for i in await outbox(world, first.approval_id)]
    assert made.expires_at + service.ONE_SECOND in due


async def test_the_requester_cannot_grant_on_their_own_call(world: World) -> None:
    first = await world.call("r1")
    result = await world.grant(first, who=REQUESTER)
    assert isinstance(result, service.Refused)
    assert result.verdict.outcome is authority.Outcome.SELF
    assert await world.service.grants_of(first.approval_id) == []
    assert (await world.service.get(first.approval_id)).status is S.PENDING


async def test_someone_without_the_role_cannot_grant(world: World) -> None:
    first = await world.call("r1")
    result = await world.grant(first, who=OUTSIDER)
    assert isinstance(result, service.Refused)
    assert await world.service.grants_of(first.approval_id) == []


@pytest.mark.parametrize(
    ("terms", "field"),
    [
        ({"scope": "everyone"}, "scope"),
        ({"scope": "session", "seconds": 7200}, "seconds"),
        ({"seconds": 59}, "seconds"),
        ({"seconds": 600.5}, "seconds"),
        ({"seconds": True}, "seconds"),
        ({"uses": 21}, "uses"),
        ({"uses": 0}, "uses"),
        ({"uses": "5"}, "uses"),
        ({"kinds": {"note": "at_most"}}, "argument:note"),
        ({"kinds": {"lines": "at_most"}}, "argument:lines"),
        ({"kinds": {"extra": "any"}}, "argument:extra"),
        ({"kinds": {"amount": "anything"}}, "argument:amount"),
        ({"kinds": ["any"]}, "scope"),
    ],
)
async def test_terms_past_the_policy_are_refused_whole(
    world: World, terms: dict[str, Any], field: str
) -> None:
    first = await world.call("r1")
    result = await world.grant(first, **terms)
    assert isinstance(result, service.GrantRefused)
    assert field in [p.field for p in result.problems]
    # nothing changed: not approved, no grant
    assert (await world.service.get(first.approval_id)).status is S.PENDING
    assert await world.service.grants_of(first.approval_id) == []


async def test_a_forged_scope_is_recorded_as_such(world: World) -> None:
    world.policy = make_policy(scopes=["session"])
    first = await world.call("r1")
    result = await world.grant(first, scope="agent")
    assert isinstance(result, service.GrantRefused)
    attempts = await world.store.attempts(first.approval_id)
    assert [a.outcome for a in attempts] == [models.AttemptOutcome.INVALID_GRANT]


async def test_no_grant_where_the_rule_allows_none_or_a_quorum_decides(world: World) -> None:
    world.policy = make_policy()
    first = await world.call("r1")
    world.policy = policy.Policy.model_validate(
        {
            **make_policy().model_dump(exclude_none=True),
            "rules": [{"tool": "*", "require": "sales-leads"}],
        }
    )
    result = await world.grant(first)
    assert isinstance(result, service.GrantRefused)
    assert (await world.service.get(first.approval_id)).status is S.PENDING


# -- using it ---------------------------------------------------------------------------------


async def test_a_matching_call_is_approved_at_once_without_a_card(world: World) -> None:
    made = await world.granted()
    world.clock.advance(60)
    later = await world.call("r2")
    granted_by(later, made, use=1)
    assert later.decided_at == T0 + service.ONE_SECOND * 60
    kinds = [i.kind for i in await outbox(world, later.approval_id)]
    assert models.OutboxKind.POST_CARD not in kinds
    assert models.OutboxKind.CALLBACK in kinds
    assert (await world.store.get_grant(made.grant_id)).uses == 1  # type: ignore[union-attr]
    # claimable once, as any approval
    claimed = await world.service.claim_execution(
        later.approval_id,
        agent=AGENT,
        idempotency_key="k1",
        arguments_sha256=later.arguments_sha256,
    )
    assert claimed.execution is not None


async def test_the_same_request_again_takes_no_second_use(world: World) -> None:
    made = await world.granted()
    once = await world.call("r2")
    again = await world.call("r2")
    assert again.approval_id == once.approval_id
    assert (await world.store.get_grant(made.grant_id)).uses == 1  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"account": "GLOBEX"}, "another value under exactly"),
        ({"lines": [{"sku": "A-1", "qty": 3}]}, "a nested value changed under exactly"),
        ({"lines": [{"sku": "A-1", "qty": 2, "discount": 50}]}, "a nested key added"),
        ({"extra": True}, "an argument added"),
        ({"account": ["ACME"]}, "the value wrapped in a list"),
        ({"note": None}, "null for a string"),
        ({"amount": 2000.0000001}, "a hair above"),
    ],
)
async def test_a_call_outside_an_exact_grant_gets_a_card(
    world: World, changes: dict[str, Any], why: str
) -> None:
    await world.granted()
    later = await world.call("r2", {**ARGUMENTS, **changes})
    assert later.status is S.PENDING, why
    assert later.grant is None


async def test_an_argument_left_out_gets_a_card(world: World) -> None:
    await world.granted(kinds={"note": "any"})
    later = await world.call("r2", {k: v for k, v in ARGUMENTS.items() if k != "note"})
    assert later.status is S.PENDING


@pytest.mark.parametrize(
    ("amount", "used"),
    [
        (2000, True),
        (1999.5, True),
        (0, True),
        (2000.000001, False),
        (2001, False),
        ("1000", False),
        (True, False),
        ({"value": 1000}, False),
        ([1000], False),
        (None, False),
    ],
)
async def test_at_most_takes_only_numbers_up_to_the_granted_one(
    world: World, amount: Any, used: bool
) -> None:
    made = await world.granted(kinds={"amount": "at_most"})
    if is_number(amount):
        later = await world.call("r2", {**ARGUMENTS, "amount": amount})
        assert (later.grant is not None) is used
    else:
        # the role's ceiling names amount: a call with no number there is refused at the door
        # (422), before any grant is looked at; grants.satisfies refuses it too (unit tests)
        with pytest.raises(errors.InvalidArguments):
            await world.call("r2", {**ARGUMENTS, "amount": amount})
    assert (await world.store.get_grant(made.grant_id)).uses == int(used)  # type: ignore[union-attr]


async def test_any_takes_any_value_but_not_absence(world: World) -> None:
    await world.granted(kinds={"note": "any"})
    assert (await world.call("r2", {**ARGUMENTS, "note": {"anything": [1, 2]}})).grant is not None
    assert (await world.call("r3", {**ARGUMENTS, "note": None})).grant is not None


async def test_a_session_grant_is_for_that_session_and_agent_only(world: World) -> None:
    await world.granted(scope="session")
    assert (await world.call("r2", session_id="thread-2")).status is S.PENDING
    assert (await world.call("r3", agent="other-bot")).status is S.PENDING
    assert (await world.call("r4")).status is S.APPROVED


async def test_an_agent_grant_covers_its_other_sessions_not_other_agents(world: World) -> None:
    await world.granted(scope="agent")
    assert (await world.call("r2", session_id="thread-2")).status is S.APPROVED
    assert (await world.call("r3", agent="other-bot")).status is S.PENDING


async def test_another_tool_of_the_same_rule_is_not_covered(world: World) -> None:
    await world.granted()
    tool = {"name": "send_invoice", "call_id": "r2", "arguments": ARGUMENTS}
    later, _ = await world.service.submit(
        AGENT, make_request(request_id="r2", tool=tool), directory=world.directory
    )
    assert later.status is S.PENDING


async def test_the_grant_does_not_approve_the_granters_own_call(world: World) -> None:
    await world.granted()
    mine = {"slack_user_id": LEAD.slack_user_id, "email": LEAD.email, "name": "Lead"}
    assert (await world.call("r2", requester=mine)).status is S.PENDING


async def test_without_a_directory_no_grant_is_used(world: World) -> None:
    await world.granted()
    tool = {"name": TOOL, "call_id": "r2", "arguments": ARGUMENTS}
    later, _ = await world.service.submit(AGENT, make_request(request_id="r2", tool=tool))
    assert later.status is S.PENDING


async def test_uses_run_out(world: World) -> None:
    made = await world.granted(uses=2)
    results = [await world.call(f"r{i}") for i in range(2, 6)]
    assert [r.status for r in results] == [S.APPROVED, S.APPROVED, S.PENDING, S.PENDING]
    assert [r.grant.use for r in results[:2] if r.grant] == [1, 2]
    stored = await world.store.get_grant(made.grant_id)
    assert stored is not None
    assert stored.state(world.clock.now) == "used_up"


async def test_an_expired_grant_gets_a_card(world: World) -> None:
    await world.granted(seconds=600)
    world.clock.advance(600)
    assert (await world.call("r2")).status is S.PENDING


async def test_a_revoked_grant_gets_a_card(world: World) -> None:
    made = await world.granted()
    revoked = await world.service.revoke_grant(
        made.grant_id, slack_user_id=OTHER_LEAD.slack_user_id, directory=world.directory
    )
    assert revoked.revoked
    assert (await world.call("r2")).status is S.PENDING


async def test_the_granter_removed_from_the_group_gets_a_card(world: World) -> None:
    await world.granted()
    world.directory.people[LEAD.slack_user_id] = person(LEAD.slack_user_id)  # left S0LEADS
    assert (await world.call("r2")).status is S.PENDING
    world.directory.people[LEAD.slack_user_id] = authority.Approver(
        slack_user_id=LEAD.slack_user_id, lookup_error="ratelimited"
    )
    assert (await world.call("r3")).status is S.PENDING


async def test_ceilings_are_compared_with_the_new_calls_values(world: World) -> None:
    world.policy = make_policy(ceiling=3000)
    await world.granted(kinds={"amount": "any"})
    assert (await world.call("r2", {**ARGUMENTS, "amount": 2500})).status is S.APPROVED
    assert (await world.call("r3", {**ARGUMENTS, "amount": 3500})).status is S.PENDING


async def test_a_policy_reload_changing_the_rule_voids_the_grant(world: World) -> None:
    await world.granted()
    world.policy = make_policy(ceiling=9000)  # the role's ceiling changed
    assert (await world.call("r2")).status is S.PENDING
    world.policy = make_policy()  # back as granted: the grant applies again
    assert (await world.call("r3")).status is S.APPROVED
    # more people holding the role changes nothing of what was granted
    bigger = make_policy().model_dump(exclude_none=True)
    bigger["roles"]["sales-leads"]["users"] = ["U0NEW"]
    world.policy = policy.Policy.model_validate(bigger)
    assert (await world.call("r4")).status is S.APPROVED
    # a rule that no longer allows grants uses none
    stripped = make_policy().model_dump(exclude_none=True)
    del stripped["rules"][0]["grants"]
    world.policy = policy.Policy.model_validate(stripped)
    assert (await world.call("r5")).status is S.PENDING


async def test_fifty_at_once_take_exactly_the_uses_left(world: World) -> None:
    made = await world.granted(uses=5)
    results = await asyncio.gather(*(world.call(f"c{i}") for i in range(50)))
    approved = [r for r in results if r.status is S.APPROVED]
    assert len(approved) == 5
    assert sorted(r.grant.use for r in approved if r.grant) == [1, 2, 3, 4, 5]
    assert sum(r.status is S.PENDING for r in results) == 45
    assert (await world.store.get_grant(made.grant_id)).uses == 5  # type: ignore[union-attr]


async def test_two_replicas_never_take_more_than_allowed(world: World, database_url: str) -> None:
    made = await world.granted(uses=5)
    other_store = await Repository.connect(database_url)
    try:
        other = world.replica(other_store)
        results = await asyncio.gather(
            *(world.call(f"c{i}", on=world.service if i % 2 else other) for i in range(40))
        )
    finally:
        await other_store.close()
    assert sum(r.status is S.APPROVED for r in results) == 5
    assert (await world.store.get_grant(made.grant_id)).uses == 5  # type: ignore[union-attr]


# -- revoking ---------------------------------------------------------------------------------


async def test_only_the_granter_or_a_role_holder_may_revoke(world: World) -> None:
    made = await world.granted()
    refused = await world.service.revoke_grant(
        made.grant_id, slack_user_id=OUTSIDER.slack_user_id, directory=world.directory
    )
    assert not refused.revoked
    assert refused.refusal is not None
    assert "sales-leads" in refused.refusal
    done = await world.service.revoke_grant(
        made.grant_id, slack_user_id=LEAD.slack_user_id, directory=world.directory
    )
    assert done.revoked
    assert done.grant is not None
    assert done.grant.revoked_by == LEAD.slack_user_id
    again = await world.service.revoke_grant(made.grant_id, slack_user_id=None, directory=None)
    assert not again.revoked
    missing = await world.service.revoke_grant("grt_nope", slack_user_id=None, directory=None)
    assert missing.grant is None


async def test_listing_shows_live_grants_of_an_agent(world: World) -> None:
    made = await world.granted()
    assert [g.grant_id for g in await world.service.list_grants(agent=AGENT)] == [made.grant_id]
    assert await world.service.list_grants(agent="other-bot") == []
    await world.service.revoke_grant(made.grant_id, slack_user_id=None, directory=None)
    assert await world.service.list_grants(agent=AGENT) == []
    assert len(await world.service.list_grants(agent=AGENT, live=False)) == 1


# -- the policy -------------------------------------------------------------------------------


def test_a_grant_on_a_quorum_rule_is_a_load_error() -> None:
    raw = make_policy().model_dump(exclude_none=True)
    raw["rules"][0]["approvals"] = 2
    problems = policy.Policy.model_validate(raw).problems()
    assert (("rules", 0, "grants"), problems[0][1]) in problems
    assert "approvals: 1" in problems[0][1]


def test_grants_on_a_turn_escalation_are_an_unknown_key() -> None:
    limit = {"argument": "discount_pct", "max": 10, "over": "escalate", "escalate_to": "admins"}
    with pytest.raises(ValueError, match="grants"):
        policy.TurnPolicy.model_validate(
            {"tools": {"send_offer": {"limits": [{**limit, "grants": {"max_uses": 1}}]}}}
        )


# -- the audit --------------------------------------------------------------------------------


async def test_granting_using_and_revoking_are_sealed_audit_events(world: World) -> None:
    made = await world.granted(uses=3, kinds={"amount": "at_most"})
    world.clock.advance(5)
    used = await world.call("r2", {**ARGUMENTS, "amount": 1500})
    await world.service.revoke_grant(made.grant_id, slack_user_id=None, directory=None)
    events = [e for e in await reads.audit_events(world.store, T0) if e.kind == "grant"]
    assert [(e.data["event"], e.approval_id) for e in events] == [
        ("granted", made.approval_id),
        ("used", used.approval_id),
        ("revoked", made.approval_id),
    ]
    granted_event = events[0].data["data"]
    assert isinstance(granted_event, dict)
    assert granted_event["max_uses"] == 3
    constraints = granted_event["constraints"]
    assert isinstance(constraints, dict)
    assert constraints["amount"] == {"kind": "at_most", "jcs": "2000"}
    assert events[1].data["data"] == {
        "use": 1,
        "of": 3,
        "arguments_sha256": used.arguments_sha256,
    }
    sealed = await world.store.audit.seal(world.clock.now + service.ONE_SECOND * 10)
    assert sealed is not None
    result = await world.store.audit.verify()
    assert result.ok, result.problems
    assert result.unsealed == 0
