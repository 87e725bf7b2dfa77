"""The turn service on a store of its own: idempotent on the request ids, per-lead counts by
lead key, escalations recorded once their approval exists."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from approvals import errors, models, policy, service
from approvals.repository import Repository
from approvals.turn_service import TurnService
from guards import authority

T0 = datetime(2026, 3, 4, 10, 0, tzinfo=UTC)
AGENT = "sales-bot"

POLICY = policy.Policy.model_validate(
    {
        "slack": {"reviewer_channel": "C0REVIEWS"},
        "agents": {AGENT: {"token_env": "SALES_BOT_TOKEN"}},
        "roles": {"approvers": {"users": ["U0ANA"]}, "sales-lead": {"users": ["U0SAM"]}},
        "rules": [{"tool": "*", "require": "approvers"}],
        "turns": {
            "stages": ["new", "qualified"],
            "tools": {
                "book_call": {"per_lead": {"max": 1, "within": 3600}},
                "grant_discount": {
                    "limits": [
                        {
                            "argument": "discount_pct",
                            "max": 10,
                            "over": "escalate",
                            "escalate_to": "sales-lead",
                        }
                    ]
                },
            },
        },
    }
)


class NoSlack:
    """A directory that must not be asked: these guards need no operator role."""

    async def approver(self, slack_user_id: str, usergroups: frozenset[str]) -> authority.Approver:
        raise AssertionError("no Slack lookup was needed")


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def turn(n: int = 1, **changes: Any) -> models.TurnRequest:
    body: dict[str, Any] = {
        "session_id": "wa-1",
        "request_id": f"turn-{n}",
        "channel": "whatsapp",
        "lead": {"id": "lena@prospect.example"},
        "operator": {"slack_user_id": "U0OMAR"},
        "funnel": {"stage": "qualified"},
        "tool": {"name": "book_call", "call_id": f"call-{n}", "arguments": {}},
    }
    body.update(changes)
    return models.TurnRequest.model_validate(body)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def turns(store: Repository, clock: Clock) -> TurnService:
    approvals = service.ApprovalService(store=store, policy=lambda: POLICY, clock=clock)
    return TurnService(approvals=approvals, store=store, policy=lambda: POLICY, clock=clock)


async def test_an_identical_resend_is_the_stored_verdict(
    turns: TurnService, store: Repository, clock: Clock
) -> None:
    first = await turns.decide(AGENT, turn(1), NoSlack())
    assert (first.record.verdict, first.replayed) == ("allow", False)
    clock.now += timedelta(minutes=5)
    again = await turns.decide(AGENT, turn(1), NoSlack())
    assert (again.record, again.replayed) == (first.record, True)
    assert await store.turns_for_session(AGENT, "wa-1") == [first.record]
    assert (await turns.decide(AGENT, turn(2), NoSlack())).record.reason_code == "per_lead_limit"


async def test_other_content_under_the_same_ids_is_a_conflict(
    turns: TurnService, store: Repository
) -> None:
    await turns.decide(AGENT, turn(1), NoSlack())
    with pytest.raises(errors.TurnConflict) as raised:
        await turns.decide(AGENT, turn(1, funnel={"stage": "new"}), NoSlack())
    assert raised.value.request_id == "turn-1"
    assert len(await store.turns_for_session(AGENT, "wa-1")) == 1


async def test_the_limit_counts_the_lead_key_not_its_spelling(turns: TurnService) -> None:
    await turns.decide(AGENT, turn(1, lead={"id": "Lena@Prospect.example"}), NoSlack())
    again = await turns.decide(AGENT, turn(2, lead={"id": "LENA@PROSPECT.EXAMPLE"}), NoSlack())
    assert again.record.reason_code == "per_lead_limit"
    assert again.record.lead_id == "LENA@PROSPECT.EXAMPLE"  # the audit keeps the spelling
    assert again.record.lead_key == "lena@prospect.example"


async def test_the_limit_window_slides(turns: TurnService, clock: Clock) -> None:
    await turns.decide(AGENT, turn(1), NoSlack())
    clock.now += timedelta(seconds=3600)
    assert (await turns.decide(AGENT, turn(2), NoSlack())).record.verdict == "allow"


async def test_an_escalation_is_recorded_with_its_approval_and_replayed(
    turns: TurnService, store: Repository
) -> None:
    discount = turn(
        1, tool={"name": "grant_discount", "call_id": "d1", "arguments": {"discount_pct": 15}}
    )
    first = await turns.decide(AGENT, discount, NoSlack())
    assert first.record.verdict == "escalate"
    assert first.approval is not None
    assert first.record.approval_id == first.approval.approval_id
    again = await turns.decide(AGENT, discount, NoSlack())
    assert (again.record, again.replayed) == (first.record, True)
    assert again.approval == first.approval
    assert len(await store.turns_for_session(AGENT, "wa-1")) == 1


# --- the operator's role, checked by the authority guard's membership rule ------------------

REFUND_POLICY = policy.Policy.model_validate(
    {
        **POLICY.model_dump(mode="json", by_alias=True, exclude_none=True, exclude={"turns"}),
        "roles": {
            "approvers": {"users": ["U0ANA"]},
            "support": {"users": ["U0SUE"], "usergroups": ["S0SUPPORT"]},
        },
        "turns": {
            "stages": ["new", "qualified"],
            "tools": {"issue_refund": {"operator_role": "support"}},
        },
    }
)


class Directory:
    """Slack's answer about one user's groups, and a log of who was asked."""

    def __init__(self, groups: frozenset[str] = frozenset(), error: str | None = None) -> None:
        self.groups = groups
        self.error = error
        self.asked: list[tuple[str, frozenset[str]]] = []

    async def approver(self, slack_user_id: str, usergroups: frozenset[str]) -> authority.Approver:
        self.asked.append((slack_user_id, usergroups))
        return authority.Approver(
            slack_user_id=slack_user_id,
            usergroups=self.groups & usergroups,
            lookup_error=self.error,
        )


@pytest.mark.parametrize(
    ("operator", "directory", "reason_code", "asked"),
    [
        ({"slack_user_id": "U0SUE"}, Directory(), None, False),  # listed: Slack is not asked
        ({"slack_user_id": "U0OMAR"}, Directory(frozenset({"S0SUPPORT"})), None, True),
        (
            {"slack_user_id": "U0OMAR"},
            Directory(frozenset({"S0OTHER"})),
            "operator_not_permitted",
            True,
        ),
        ({"slack_user_id": "U0OMAR"}, Directory(error="ratelimited"), "missing_fact", True),
        ({"email": "sue@example.com"}, Directory(), "missing_fact", False),  # no Slack identity
    ],
)
async def test_the_operator_role_is_held_by_slack_identity(
    store: Repository,
    clock: Clock,
    operator: dict[str, str],
    directory: Directory,
    reason_code: str | None,
    asked: bool,
) -> None:
    approvals = service.ApprovalService(store=store, policy=lambda: REFUND_POLICY, clock=clock)
    turns = TurnService(approvals=approvals, store=store, policy=lambda: REFUND_POLICY, clock=clock)
    refund = {"name": "issue_refund", "call_id": "r1", "arguments": {}}
    answer = await turns.decide(AGENT, turn(tool=refund, operator=operator), directory)
    expected = ("allow", "allowed") if reason_code is None else ("refuse", reason_code)
    assert (answer.record.verdict, answer.record.reason_code) == expected
    assert directory.asked == (
        [(operator["slack_user_id"], frozenset({"S0SUPPORT"}))] if asked else []
    )
