"""Quorum in the pure lifecycle, and role ceilings in the pure authority rule."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from approvals import models, states
from guards import authority

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def pending(quorum: int) -> models.Approval:
    return models.Approval(
        approval_id="apr_" + "0" * 24,
        status=models.Status.PENDING,
        agent="a",
        request_id="r",
        session_id="s",
        tool=models.ToolCall(name="wire_funds", call_id="c", arguments={"amount": 10}),
        arguments_sha256="a" * 64,
        requester=models.Requester(slack_user_id="U0REQ"),
        required=models.Required(role="finance", approvals=quorum),
        rule="rules[0] tool=wire_funds",
        created_at=T0,
        expires_at=T0 + timedelta(hours=1),
        policy_version="p",
        fingerprint="f",
    )


def vote(user: str) -> states.Approve:
    return states.Approve(by=models.Decider(slack_user_id=user, at=T0))


def test_votes_accumulate_until_the_quorum() -> None:
    a = pending(3)
    once = states.settle(a, vote("U0A"), T0)
    assert (once.status, [d.slack_user_id for d in once.decided_by]) == (
        models.Status.PENDING,
        ["U0A"],
    )
    twice = states.settle(once, vote("U0B"), T0)
    assert twice.status is models.Status.PENDING
    assert twice.decided_at is None
    done = states.settle(twice, vote("U0C"), T0)
    assert done.status is models.Status.APPROVED
    assert [d.slack_user_id for d in done.decided_by] == ["U0A", "U0B", "U0C"]
    assert done.decided_at == T0


def test_one_deny_settles_whatever_votes_came_before() -> None:
    voted = states.settle(pending(2), vote("U0A"), T0)
    denied = states.settle(voted, states.Deny(by=models.Decider(slack_user_id="U0B", at=T0)), T0)
    assert denied.status is models.Status.DENIED
    assert [d.slack_user_id for d in denied.decided_by] == ["U0B"]


def test_a_vote_never_survives_expiry() -> None:
    voted = states.settle(pending(2), vote("U0A"), T0)
    expired = states.settle(
        voted, states.Expire(at=T0 + timedelta(hours=1)), T0 + timedelta(hours=1)
    )
    assert expired.status is models.Status.EXPIRED


FINANCE = authority.RoleMembers(
    name="finance", usergroups=frozenset({"S0FIN"}), ceiling={"amount": 50000}
)
MEMBER = authority.Approver(
    slack_user_id="U0F", email="f@example.com", usergroups=frozenset({"S0FIN"})
)
REQUESTER = authority.Person(slack_user_id="U0REQ")


@pytest.mark.parametrize(
    ("arguments", "outcome"),
    [
        ({"amount": 50000}, authority.Outcome.ACCEPTED),  # exactly at the ceiling
        ({"amount": 50000.01}, authority.Outcome.OVER_LIMIT),
        ({"amount": 10**30}, authority.Outcome.OVER_LIMIT),
        # what cannot be compared with the ceiling never passes it (issue 8, item 1)
        ({}, authority.Outcome.OVER_LIMIT),
        ({"payment": {"amount": 9_000_000}}, authority.Outcome.OVER_LIMIT),
        ({"amount": "60000"}, authority.Outcome.OVER_LIMIT),
        ({"amount": "a lot"}, authority.Outcome.OVER_LIMIT),
        ({"amount": True}, authority.Outcome.OVER_LIMIT),
        ({"amount": None}, authority.Outcome.OVER_LIMIT),
        ({"amount": [1]}, authority.Outcome.OVER_LIMIT),
        ({"amount": float("nan")}, authority.Outcome.OVER_LIMIT),
        ({"amount": float("inf")}, authority.Outcome.OVER_LIMIT),
        ({"amount": -1}, authority.Outcome.ACCEPTED),
        ({"amount": 49999.5}, authority.Outcome.ACCEPTED),
    ],
)
def test_ceilings(arguments: dict[str, object], outcome: authority.Outcome) -> None:
    verdict = authority.can_decide(MEMBER, REQUESTER, FINANCE, (), arguments)
    assert verdict.outcome is outcome
    if outcome is authority.Outcome.OVER_LIMIT:
        assert "up to 50000" in verdict.reason


def test_a_ceiling_may_name_a_nested_argument() -> None:
    nested = authority.RoleMembers(
        name="finance", usergroups=frozenset({"S0FIN"}), ceiling={"payment.amount": 100}
    )
    over = authority.can_decide(MEMBER, REQUESTER, nested, (), {"payment": {"amount": 101}})
    assert over.outcome is authority.Outcome.OVER_LIMIT
    within = authority.can_decide(MEMBER, REQUESTER, nested, (), {"payment": {"amount": 99}})
    assert within.outcome is authority.Outcome.ACCEPTED
    absent = authority.can_decide(MEMBER, REQUESTER, nested, (), {"amount": 1})
    assert absent.outcome is authority.Outcome.OVER_LIMIT
    assert "has no payment.amount" in absent.reason


def test_ceiling_never_rescues_the_requester() -> None:
    requester = authority.Person(slack_user_id="U0F")
    verdict = authority.can_decide(MEMBER, requester, FINANCE, (), {"amount": 1})
    assert verdict.outcome is authority.Outcome.SELF
