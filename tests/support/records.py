"""Approval records and outbox entries to store, as tests build them (no I/O)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from approvals import models

__all__ = ["T0", "approval", "approved", "attempt", "callback", "decider", "post_card"]

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def approval(n: int = 1, **changes: object) -> models.Approval:
    base = models.Approval(
        approval_id=f"apr_{n:024x}",
        status=models.Status.PENDING,
        agent="sales-bot",
        request_id=f"req-{n}",
        session_id="s-1",
        tool=models.ToolCall(name="transfer_money", call_id="c1", arguments={"amount": 5}),
        arguments_sha256="a" * 64,
        requester=models.Requester(slack_user_id="U0REQ"),
        required=models.Required(role="finance"),
        rule="rules[0] tool=transfer_*",
        created_at=T0,
        expires_at=T0 + timedelta(hours=1),
        policy_version="pol_x",
        fingerprint="f" * 64,
    )
    return base.evolve(**changes) if changes else base


def post_card(a: models.Approval) -> models.OutboxEntry:
    return models.OutboxEntry(approval_id=a.approval_id, work=models.PostCard())


def callback(a: models.Approval) -> models.OutboxEntry:
    return models.OutboxEntry(
        approval_id=a.approval_id,
        work=models.Callback(url="http://agent.invalid/cb", body="{}", agent="sales-bot"),
    )


def decider(user: str = "U0APP") -> models.Decider:
    return models.Decider(slack_user_id=user, name="Alma", at=T0 + timedelta(minutes=1))


def approved(a: models.Approval, user: str = "U0APP") -> models.Approval:
    return a.evolve(
        status=models.Status.APPROVED,
        decided_by=(decider(user),),
        decided_at=T0 + timedelta(minutes=1),
    )


def attempt(
    a: models.Approval, outcome: models.AttemptOutcome, user: str = "U0APP"
) -> models.Attempt:
    return models.Attempt(
        approval_id=a.approval_id, slack_user_id=user, action="approve", outcome=outcome, at=T0
    )
