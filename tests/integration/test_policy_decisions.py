"""Rules that approve by themselves (``decide: approve``), on real PostgreSQL: a matching call is
approved at once by the policy, delivered, claimable once and audited; a call failing the rule's
conditions falls through to the next rule; such a rule is never the catch-all, never as wide as
every tool, and has nothing only a person deciding uses."""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from approvals import errors, models, policy, resource, service
from approvals.repository import Repository
from tests.integration.test_service import FAR, T0, FakeClock, make_request
from tests.support import harness as support
from tests.support import reads
from tests.support.harness import CHANNEL, Harness

S = models.Status
AGENT = "sales-bot"


def make_policy(*first: dict[str, Any]) -> policy.Policy:
    return policy.Policy.model_validate(
        {
            "slack": {"reviewer_channel": "C0REVIEWS"},
            "agents": {
                AGENT: {
                    "token_env": "SALES_BOT_TOKEN",
                    "callback_secret_env": "SALES_BOT_SIGNING",
                    "callback_hosts": ["agent.internal"],
                }
            },
            "roles": {"approvers": {"users": ["U0APP"]}},
            "rules": [*first, {"tool": "*", "require": "approvers"}],
        }
    )


SMALL = {
    "tool": "refund_*",
    "when": {"field": "arguments.amount", "lt": 50},
    "decide": "approve",
}


@pytest.fixture
def approvals(store: Repository) -> service.ApprovalService:
    ids = itertools.count(1)
    current = make_policy(SMALL)
    return service.ApprovalService(
        store=store,
        policy=lambda: current,
        clock=FakeClock(),
        new_id=lambda: f"apr_{next(ids):024x}",
    )


async def submit(approvals: service.ApprovalService, amount: Any, request_id: str = "r1") -> Any:
    tool = {"name": "refund_order", "call_id": request_id, "arguments": {"amount": amount}}
    return await approvals.submit(AGENT, make_request(request_id=request_id, tool=tool))


async def test_a_matching_call_is_approved_by_the_policy_without_a_card(
    approvals: service.ApprovalService, store: Repository
) -> None:
    approved, created = await submit(approvals, 20)
    assert created
    assert approved.status is S.APPROVED
    assert approved.decided_by == ()
    assert approved.decided_at == T0
    assert approved.decided_by_policy == "rules[0] tool=refund_*"
    body = resource.resource(approved)
    assert body["decided_by_policy"] == {
        "rule": "rules[0] tool=refund_*",
        "policy_version": approved.policy_version,
    }
    items = [
        i for i in await store.claim_outbox(FAR, FAR, 100) if i.approval_id == approved.approval_id
    ]
    assert [i.kind for i in items] == [models.OutboxKind.CALLBACK]  # no card, the agent told
    claimed = await approvals.claim_execution(
        approved.approval_id, agent=AGENT, idempotency_key="k"
    )
    assert claimed.execution is not None
    events = [
        e for e in await reads.audit_events(store, T0) if e.approval_id == approved.approval_id
    ]
    created_event = next(e for e in events if e.kind == "created")
    assert created_event.data["decided_by_policy"] == "rules[0] tool=refund_*"
    settlement = next(e for e in events if e.kind == "settlement")
    assert settlement.data["status"] == "approved"
    assert settlement.data["decided_by"] == []


async def test_a_call_failing_the_conditions_falls_through_to_a_person(
    approvals: service.ApprovalService,
) -> None:
    pending, _ = await submit(approvals, 50)
    assert pending.status is S.PENDING
    assert pending.decided_by_policy is None
    assert pending.required.role == "approvers"


@pytest.mark.parametrize(
    "amount",
    ["20", {"value": 20}, [20], None, True, float("nan"), 1e400],
    ids=["string", "nested", "list", "null", "bool", "nan", "inf"],
)
async def test_a_value_the_condition_cannot_compare_is_refused_whole(
    approvals: service.ApprovalService, store: Repository, amount: Any
) -> None:
    """Another type, another nesting: never approved by the policy. The rule's condition is part
    of the tool's contract: a value it cannot compare is refused whole (a 400 naming the field
    at the webhook), nothing stored."""
    with pytest.raises(errors.InvalidArguments, match=r"tool\.arguments\.amount"):
        await submit(approvals, amount)
    assert await reads.audit_events(store, T0) == []


@pytest.mark.parametrize("amount", [50, 49.999999999999999999, 50.0000001])
async def test_a_value_at_or_over_the_limit_gets_a_person(
    approvals: service.ApprovalService, amount: float
) -> None:
    pending, _ = await submit(approvals, amount)
    assert pending.status is S.PENDING
    assert pending.decided_by_policy is None


async def test_an_argument_left_out_is_refused(approvals: service.ApprovalService) -> None:
    tool = {"name": "refund_order", "call_id": "r1", "arguments": {}}
    with pytest.raises(errors.InvalidArguments, match="amount"):
        await approvals.submit(AGENT, make_request(request_id="r1", tool=tool))


async def test_the_same_request_again_is_answered_as_stored(
    approvals: service.ApprovalService,
) -> None:
    first, created = await submit(approvals, 20)
    again, created_again = await submit(approvals, 20)
    assert (created, created_again) == (True, False)
    assert again.approval_id == first.approval_id
    assert again.status is S.APPROVED


@pytest.mark.parametrize(
    ("rule", "key"),
    [
        ({"tool": "*", "decide": "approve"}, "tool"),
        ({"tool": "**", "decide": "approve"}, "tool"),
        ({"tool": "?*[a-z]", "decide": "approve"}, "tool"),
        ({"tool": "get_*", "decide": "approve", "require": "approvers"}, "require"),
        ({"tool": "get_*", "decide": "approve", "approvals": 2}, "approvals"),
        ({"tool": "get_*", "decide": "approve", "channel": "C0OTHER"}, "channel"),
        ({"tool": "get_*", "decide": "approve", "severity": "critical"}, "severity"),
        ({"tool": "get_*", "decide": "approve", "editable": ["x"]}, "editable"),
        (
            {"tool": "get_*", "decide": "approve", "grants": {"max_seconds": 60, "max_uses": 1}},
            "grants",
        ),
        (
            {
                "tool": "get_*",
                "decide": "approve",
                "escalation": [{"after": 1, "action": "remind"}],
            },
            "escalation",
        ),
    ],
)
def test_what_a_self_deciding_rule_may_not_be_is_a_load_error(
    rule: dict[str, Any], key: str
) -> None:
    problems = make_policy(rule).problems()
    assert ("rules", 0, key) in [path for path, _ in problems], problems


def test_the_catch_all_can_never_approve_by_itself() -> None:
    raw = make_policy().model_dump(exclude_none=True)
    raw["rules"] = [{"tool": "*", "decide": "approve"}]
    problems = policy.Policy.model_validate(raw).problems()
    assert ("rules", 0, "decide") in [path for path, _ in problems]


def test_a_narrow_self_deciding_rule_above_a_stricter_one_loads() -> None:
    assert make_policy(SMALL, {"tool": "refund_*", "require": "approvers"}).problems() == []


def test_a_policy_with_one_dumped_and_read_again_still_loads() -> None:
    """Every default written out (as a dump of the policy holds them) is no person's key."""
    current = make_policy({**SMALL, "log_channel": "C0POLICYLOG"})
    again = policy.Policy.model_validate(current.model_dump(mode="json", exclude_none=True))
    assert again.problems() == []
    assert again.rules[0].decide == "approve"


def test_a_log_channel_needs_decide() -> None:
    rule = {"tool": "refund_*", "require": "approvers", "log_channel": "C0POLICYLOG"}
    problems = make_policy(rule).problems()
    assert ("rules", 0, "log_channel") in [path for path, _ in problems], problems


def test_the_log_channel_is_one_the_bot_must_be_in() -> None:
    current = make_policy({**SMALL, "log_channel": "C0POLICYLOG"})
    assert current.channel_keys["rules[0].log_channel"] == "C0POLICYLOG"


# -- through the webhook, the relay and the Slack stand-in ------------------------------------

LOG = "C0POLICYLOG"


@pytest.fixture
async def harness(database_url: str, tmp_path: Path) -> AsyncIterator[Harness]:
    """The test policy with a first rule approving reads by itself, logged in LOG."""
    h = Harness(database_url=database_url, policy_file=tmp_path / "countersign.yml")
    await h.start()
    h.standin.set_channel(LOG, name="approvals-log")
    data = support.test_policy(h.receiver.port).model_dump(
        mode="json", by_alias=True, exclude_none=True
    )
    data["rules"].insert(0, {"tool": "read_*", "decide": "approve", "log_channel": LOG})
    h.write_policy(data)
    await h.stop_bot()
    await h.start_bot()
    yield h
    await h.stop()


async def test_through_slack_no_card_one_log_line_and_the_agent_called_back(
    harness: Harness,
) -> None:
    tool = {"name": "read_account", "call_id": "c1", "arguments": {"account": "<!channel> ACME"}}
    body = await harness.submit(request_id="read-1", tool=tool)
    assert body["status"] == "approved"
    assert body["decided_by"] == []
    assert body["decided_by_policy"]["rule"] == "rules[0] tool=read_*"
    await harness.standin.wait_for(lambda: len(harness.standin.messages[LOG]) == 1)
    await harness.receiver.wait_delivered(1)
    line = harness.standin.messages[LOG][0]
    assert body["approval_id"] in line["text"]
    assert body["arguments_sha256"] in line["text"]
    assert "approved by the policy" in line["text"]
    assert "*read_account*" in line["text"]
    delivered = json.loads(harness.receiver.delivered[0].body)
    assert delivered["approval_id"] == body["approval_id"]
    assert delivered["status"] == "approved"
    await harness.settle_quietly()
    assert harness.standin.messages.get(CHANNEL, []) == []  # no card, ever
    # the agent's tool reads its decision and runs once
    path = f"/v1/approvals/{body['approval_id']}/execution"
    status, claimed = await harness.call("POST", path, json_body={"idempotency_key": "k"})
    assert status == 200, claimed
    status, again = await harness.call("POST", path, json_body={"idempotency_key": "k2"})
    assert status == 409, again


async def test_through_slack_a_call_the_rule_does_not_match_gets_a_card(
    harness: Harness,
) -> None:
    body = await harness.submit(request_id="write-1")
    assert body["status"] == "pending"
    await harness.card_ts(body["approval_id"])
    assert harness.standin.messages[LOG] == []
