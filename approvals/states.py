"""The approval lifecycle: a pure state machine.

```
pending ──approve (quorum reached)──▶ approved      (before: one more vote, still pending)
pending ──deny──────────────────────▶ denied
pending ──expire (now ≥ expires_at)─▶ expired     fail closed: never an approval
pending ──cancel (by the agent)─────▶ cancelled
```
Every settled status is terminal. Functions take ``now`` as an argument and raise
:class:`~approvals.errors.InvalidTransition`; nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Literal, assert_never

from pydantic import Field

from approvals import errors, models

__all__ = [
    "TERMINAL",
    "TRANSITIONS",
    "Approve",
    "Cancel",
    "Decision",
    "Deny",
    "Expire",
    "is_expired",
    "settle",
]

NOT_EXECUTED = "The tool call was not executed; do not retry it unchanged."


class Approve(models.Frozen):
    kind: Literal["approve"] = "approve"
    by: models.Decider


class Deny(models.Frozen):
    kind: Literal["deny"] = "deny"
    by: models.Decider
    reason: str | None = None


class Expire(models.Frozen):
    kind: Literal["expire"] = "expire"
    at: datetime


class Cancel(models.Frozen):
    kind: Literal["cancel"] = "cancel"
    at: datetime
    reason: str | None = None


Decision = Annotated[Approve | Deny | Expire | Cancel, Field(discriminator="kind")]

S = models.Status
TRANSITIONS: dict[models.Status, dict[str, models.Status]] = {
    S.PENDING: {
        "approve": S.APPROVED,
        "deny": S.DENIED,
        "expire": S.EXPIRED,
        "cancel": S.CANCELLED,
    },
    S.APPROVED: {},
    S.DENIED: {},
    S.EXPIRED: {},
    S.CANCELLED: {},
}
TERMINAL = frozenset(status for status, moves in TRANSITIONS.items() if not moves)


def is_expired(approval: models.Approval, now: datetime) -> bool:
    return approval.status is S.PENDING and now >= approval.expires_at


def settle(approval: models.Approval, decision: Decision, now: datetime) -> models.Approval:
    """The approval after ``decision``; raises InvalidTransition when the lifecycle forbids it.

    An approve or deny that arrives at or after ``expires_at`` is refused: expiry wins, so a
    late click can never turn into an approval.
    """
    target = TRANSITIONS[approval.status].get(decision.kind)
    if target is None:
        raise errors.InvalidTransition(approval.status.value, decision.kind)
    if decision.kind in ("approve", "deny") and is_expired(approval, now):
        raise errors.InvalidTransition("expired", decision.kind)
    match decision:
        case Approve(by=by):
            votes = (*approval.decided_by, by)
            if len(votes) < approval.required.approvals:
                return approval.evolve(decided_by=votes)  # one more vote; still pending
            return approval.evolve(status=target, decided_by=votes, decided_at=now, reason=None)
        case Deny(by=by, reason=reason):
            who = by.name or by.slack_user_id
            because = f": {reason}" if reason else ""
            return approval.evolve(
                status=target,
                decided_by=(by,),  # one eligible deny settles it, whatever votes came before
                decided_at=now,
                reason=f"Denied by {who} in Slack{because}. {NOT_EXECUTED}",
            )
        case Expire(at=at):
            if at < approval.expires_at:
                raise errors.InvalidTransition(approval.status.value, "expire before expires_at")
            return approval.evolve(
                status=target,
                decided_at=now,
                reason="Expired: nobody with the required authority decided in time. "
                + NOT_EXECUTED,
            )
        case Cancel(reason=reason):
            return approval.evolve(
                status=target,
                decided_at=now,
                reason=f"Cancelled by the agent{': ' + reason if reason else ''}. {NOT_EXECUTED}",
            )
        case _:
            assert_never(decision)


def as_written(settled: models.Approval, outbox: Sequence[models.OutboxEntry]) -> models.Approval:
    """``settled`` as a read just after its settlement (with ``outbox``) committed shows it:
    the callback row it wrote, if any, is the latest and not yet attempted."""
    if any(e.kind is models.OutboxKind.CALLBACK for e in outbox):
        return settled.evolve(delivery=models.Delivery(status="pending"))
    return settled
