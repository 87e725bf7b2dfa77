"""Who may decide: four eyes and role membership, as a pure function of facts.

The edge fetches the facts (the clicker's Slack id, e-mail and user-group memberships) at click
time and hands them in; nothing here does I/O, so the rules are table-tested without Slack.
Order matters and is part of the contract: self before everything (a requester never decides,
whatever roles they hold), then missing facts (fail closed), then outside parties, then role.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from guards import matcher

__all__ = ["Approver", "Outcome", "Person", "RoleMembers", "Verdict", "can_decide"]


class Outcome(StrEnum):
    ACCEPTED = "accepted"
    SELF = "self"
    NO_AUTHORITY = "no_authority"
    LOOKUP_FAILED = "lookup_failed"
    OVER_LIMIT = "over_limit"


@dataclass(frozen=True, kw_only=True)
class Person:
    """An identity by Slack id and/or e-mail (e-mails compare case-insensitively)."""

    slack_user_id: str | None = None
    email: str | None = None

    def is_same(self, other: Person) -> bool:
        if self.slack_user_id and self.slack_user_id == other.slack_user_id:
            return True
        return bool(self.email and other.email and self.email.lower() == other.email.lower())


@dataclass(frozen=True, kw_only=True)
class Approver:
    """The clicker as the edge saw them. ``lookup_error`` set means the facts are incomplete."""

    slack_user_id: str
    email: str | None = None
    name: str | None = None
    usergroups: frozenset[str] = frozenset()
    lookup_error: str | None = None  # the profile could not be fetched: nothing is known
    groups_error: str | None = None  # some user groups could not be checked

    @property
    def person(self) -> Person:
        return Person(slack_user_id=self.slack_user_id, email=self.email)


@dataclass(frozen=True, kw_only=True)
class RoleMembers:
    name: str
    users: frozenset[str] = frozenset()
    usergroups: frozenset[str] = frozenset()
    ceiling: Mapping[str, float] = field(default_factory=dict)  # argument → most it may approve


@dataclass(frozen=True, kw_only=True)
class Verdict:
    outcome: Outcome
    reason: str = field(default="")

    @property
    def allowed(self) -> bool:
        return self.outcome is Outcome.ACCEPTED


def _over_ceiling(role: RoleMembers, arguments: Mapping[str, object]) -> str | None:
    """Why this call is beyond the role's ceiling, or None. An argument the ceiling names that
    is absent or not a finite number is beyond it too: what can't be compared never passes."""
    for name, limit in role.ceiling.items():
        shown = int(limit) if float(limit).is_integer() else limit
        value = matcher.lookup(arguments, name)
        if value is matcher.MISSING:
            return f"role {role.name!r} may approve {name} up to {shown}; this call has no {name}"
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            return (
                f"role {role.name!r} may approve {name} up to {shown}; this call's {name} "
                "is not a number, so it cannot be checked"
            )
        if value > limit:
            return f"role {role.name!r} may approve {name} up to {shown}; this call has {value}"
    return None


def can_decide(
    approver: Approver,
    requester: Person,
    role: RoleMembers,
    outsiders: Iterable[Person] = (),
    arguments: Mapping[str, object] | None = None,
) -> Verdict:
    """Whether ``approver`` may settle a request of ``requester`` that needs ``role``.

    ``outsiders`` are people who must never decide (the lead of a lead-facing turn).
    """
    if approver.person.is_same(requester):
        return Verdict(outcome=Outcome.SELF, reason="you requested this call")
    if approver.lookup_error is not None:
        return Verdict(
            outcome=Outcome.LOOKUP_FAILED,
            reason=f"your Slack profile could not be checked ({approver.lookup_error})",
        )
    outsiders = tuple(outsiders)
    if not approver.email and (requester.email or any(o.email for o in outsiders)):
        # The requester (or an outsider) is known by e-mail: without the clicker's e-mail we
        # cannot rule out that they are the same person.
        return Verdict(
            outcome=Outcome.LOOKUP_FAILED,
            reason="your e-mail is not visible to Countersign, so four eyes cannot be checked",
        )
    if any(approver.person.is_same(outsider) for outsider in outsiders):
        return Verdict(
            outcome=Outcome.NO_AUTHORITY, reason="the outside party of a conversation never decides"
        )
    if approver.slack_user_id in role.users or approver.usergroups & role.usergroups:
        over = _over_ceiling(role, arguments or {})
        if over is not None:
            return Verdict(outcome=Outcome.OVER_LIMIT, reason=over)
        return Verdict(outcome=Outcome.ACCEPTED)
    if approver.groups_error is not None:
        # membership that could not be checked is not membership, but say so: it may be Slack
        return Verdict(
            outcome=Outcome.LOOKUP_FAILED,
            reason=f"your user-group membership could not be checked ({approver.groups_error})",
        )
    return Verdict(outcome=Outcome.NO_AUTHORITY, reason=f"you do not hold the role {role.name!r}")
