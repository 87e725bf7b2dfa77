"""Step-up: an approval on a ``verify: passkey`` rule counts only once its approver confirms it
with a passkey (docs/step-up.md). The pure part: the confirmation link and what it is bound to,
the challenge the passkey signs, and why a confirmation cannot count.

A click that would count does not settle: it is given a :class:`StepUp` — a single-use link,
valid :data:`LINK_SECONDS`, bound to the approval, the clicker, the decision and the hash of the
arguments they were shown. The passkey's challenge is :func:`challenge` of those and the link's
random nonce: an assertion made for another approval, another version of the arguments or
another decision verifies against none but its own, and an assertion cannot be made before the
link exists. Everything else a click checks (four eyes, authority, ceilings, quorum) is checked
again when the confirmation arrives, with facts fetched then.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta
from typing import Literal

from pydantic import Field

from approvals import hashing, models

__all__ = [
    "LINK_SECONDS",
    "MAX_TRIES",
    "PasskeyFailed",
    "StepUp",
    "challenge",
    "expected_challenge",
    "link_problem",
    "new",
    "why_not",
]

LINK_SECONDS = 300
MAX_TRIES = 5  # failed confirmations of one link before it is spent
_DOMAIN = "countersign step-up v1"  # keeps these challenges apart from any other SHA-256 use


class PasskeyFailed(Exception):
    """A passkey assertion that does not confirm the call (the wrong credential or person, a
    signature or challenge that does not verify, no user verification, a counter that went
    back); the message says which, for the person and the record."""


class StepUp(models.Frozen):
    """One confirmation link (the ``step_ups`` row)."""

    token: str
    approval_id: str
    slack_user_id: str
    decision: Literal["approve"] = "approve"
    arguments_sha256: str
    nonce: str  # hex, random: the challenge cannot be known before the link is made
    created_at: datetime
    expires_at: datetime
    tries: int = Field(default=0, ge=0)
    used_at: datetime | None = None


def new(approval: models.Approval, slack_user_id: str, seen: str, now: datetime) -> StepUp:
    """A fresh link for ``slack_user_id``'s approval of ``approval`` as shown (``seen``: the
    hash of the arguments on their card: the requested ones', or an edit's)."""
    return StepUp(
        token=secrets.token_urlsafe(32),
        approval_id=approval.approval_id,
        slack_user_id=slack_user_id,
        arguments_sha256=seen,
        nonce=secrets.token_hex(32),
        created_at=now,
        expires_at=now + timedelta(seconds=LINK_SECONDS),
    )


def challenge(approval_id: str, arguments_sha256: str, decision: str, nonce: str) -> bytes:
    """What the passkey signs: the SHA-256 of the RFC 8785 text of these, tagged."""
    text = hashing.canonical_json([_DOMAIN, approval_id, arguments_sha256, decision, nonce])
    return hashlib.sha256(text).digest()


def expected_challenge(step: StepUp, approval: models.Approval) -> bytes:
    """The challenge an assertion for ``step`` must have signed, from the approval as it is now:
    the hash of the arguments that would run (an edit's, where there is one; edited since the
    link was made: another hash, so no assertion made for the link verifies)."""
    return challenge(approval.approval_id, approval.run_sha256, step.decision, step.nonce)


def link_problem(step: StepUp | None, now: datetime) -> str | None:
    """Why this link can no longer be used by anyone (unknown, used, expired, spent), or None."""
    if step is None:
        return "this confirmation link is not valid"
    if step.used_at is not None:
        return "this confirmation link was used already: click Approve on the card again"
    if now >= step.expires_at:
        return (
            "this confirmation link expired (links last 5 minutes): click Approve on the card again"
        )
    if step.tries >= MAX_TRIES:
        return "too many failed confirmations with this link: click Approve on the card again"
    return None


def why_not(
    step: StepUp | None, slack_user_id: str, approval: models.Approval | None, now: datetime
) -> str | None:
    """Why this link cannot confirm anything for ``slack_user_id`` now, or None."""
    if (spent := link_problem(step, now)) is not None:
        return spent
    if step is None or approval is None:
        return "this confirmation link is not valid"
    if step.slack_user_id != slack_user_id:
        return "this confirmation link is for another person (the one who clicked Approve)"
    if approval.settled:
        return f"the approval is {approval.status.value} already"
    if approval.run_sha256 != step.arguments_sha256:
        return "the arguments were edited since you clicked: the card shows the edit"
    return None
