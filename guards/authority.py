"""Who may decide: the whole authority rule, as pure functions of facts.

- :func:`holds` — role membership by the facts at hand (listed Slack id, or a user group);
- :func:`can_decide` — four eyes, outside parties, your own organisation's members (no Slack
  Connect clicker, no guest account, unless the role admits ``guests``), one role and its
  ceiling;
- :func:`can_decide_any` — the same over every role an approval accepts (any one suffices);
- :func:`holders` and :func:`eligible_exists` — whether anyone at all could decide, so that a
  request nobody else can settle is escalated at once instead of waiting for its expiry.

The edge fetches the facts (the clicker's Slack id, e-mail and user-group memberships, a group's
members) and hands them in; nothing here does I/O, so the rules are table-tested without Slack.
Order matters and is part of the contract: self before everything (a requester never decides,
whatever roles they hold), then missing facts (fail closed), then outside parties, then people
outside the organisation and guests, then role.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from guards import matcher

__all__ = [
    "Approver",
    "Identified",
    "Outcome",
    "Person",
    "RoleMembers",
    "Verdict",
    "can_decide",
    "can_decide_any",
    "eligible_exists",
    "holders",
    "holds",
]


class Outcome(StrEnum):
    ACCEPTED = "accepted"
    SELF = "self"
    NO_AUTHORITY = "no_authority"
    LOOKUP_FAILED = "lookup_failed"
    OVER_LIMIT = "over_limit"
    OUTSIDE_ORGANISATION = "outside_organisation"  # a Slack Connect clicker of another org
    GUEST = "guest"  # a guest account (Slack's is_restricted / is_ultra_restricted)


class Identified(Protocol):
    """Anything that names a person by Slack id and/or e-mail (a requester, a vote, a lead)."""

    @property
    def slack_user_id(self) -> str | None: ...

    @property
    def email(self) -> str | None: ...


@dataclass(frozen=True, kw_only=True)
class Person:
    """An identity by Slack id and/or e-mail (e-mails compare case-insensitively)."""

    slack_user_id: str | None = None
    email: str | None = None

    @classmethod
    def of(cls, who: Identified) -> Person:
        return cls(slack_user_id=who.slack_user_id, email=who.email)

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
    # the clicker's own workspace when it is not of this installation's organisation (a user of
    # another company in a Slack Connect channel); None for a member of this organisation
    other_organisation: str | None = None
    guest: bool = False  # a multi- or single-channel guest account
    team_id: str | None = None  # the workspace of the account, as Slack says

    @property
    def person(self) -> Person:
        return Person(slack_user_id=self.slack_user_id, email=self.email)


@dataclass(frozen=True, kw_only=True)
class RoleMembers:
    name: str
    users: frozenset[str] = frozenset()
    usergroups: frozenset[str] = frozenset()
    ceiling: Mapping[str, float] = field(default_factory=dict)  # argument → most it may approve
    guests: bool = False  # guest accounts and other organisations' users may hold it too


@dataclass(frozen=True, kw_only=True)
class Verdict:
    outcome: Outcome
    reason: str = field(default="")

    @property
    def allowed(self) -> bool:
        return self.outcome is Outcome.ACCEPTED


def holds(approver: Approver, role: RoleMembers) -> bool:
    """Whether ``approver`` holds ``role`` by the facts at hand: listed by Slack id, or a member
    of one of its user groups. Four eyes and ceilings are :func:`can_decide`'s business."""
    return approver.slack_user_id in role.users or bool(approver.usergroups & role.usergroups)


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
    outside = _outside(approver, role)
    if outside is not None:
        return outside
    if holds(approver, role):
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


def _outside(approver: Approver, role: RoleMembers) -> Verdict | None:
    """Why ``approver`` cannot hold ``role`` as a guest or a user of another organisation, or
    None: such accounts decide only for a role that says ``guests: true``, whatever it lists."""
    if role.guests:
        return None
    if approver.other_organisation is not None:
        return Verdict(
            outcome=Outcome.OUTSIDE_ORGANISATION,
            reason=f"your account belongs to another organisation "
            f"({approver.other_organisation}): only this workspace's members decide for the "
            f"role {role.name!r}",
        )
    if approver.guest:
        return Verdict(
            outcome=Outcome.GUEST,
            reason=f"guest accounts do not decide for the role {role.name!r}",
        )
    return None


# When no role accepts the click, the refusal that tells the clicker most: being the requester
# outranks facts that could not be fetched, which outrank being outside the organisation or a
# guest, which outrank a ceiling, which outranks no role.
_MOST_TELLING = (
    Outcome.SELF,
    Outcome.LOOKUP_FAILED,
    Outcome.OUTSIDE_ORGANISATION,
    Outcome.GUEST,
    Outcome.OVER_LIMIT,
    Outcome.NO_AUTHORITY,
)


def can_decide_any(
    approver: Approver,
    requester: Person,
    roles: Sequence[RoleMembers],
    outsiders: Iterable[Person] = (),
    arguments: Mapping[str, object] | None = None,
) -> Verdict:
    """Whether ``approver`` may settle a request that any one of ``roles`` may decide (the
    required role and its ``any_of``): the first role that accepts them suffices; else the most
    telling refusal, naming every role when they hold none of several."""
    outsiders = tuple(outsiders)
    verdicts = [can_decide(approver, requester, role, outsiders, arguments) for role in roles]
    allowed = next((v for v in verdicts if v.allowed), None)
    if allowed is not None:
        return allowed
    if not verdicts:
        return Verdict(outcome=Outcome.NO_AUTHORITY, reason="no role may decide this request")
    best = min(verdicts, key=lambda v: _MOST_TELLING.index(v.outcome))
    if best.outcome is Outcome.NO_AUTHORITY and len(roles) > 1:
        names = ", ".join(repr(role.name) for role in roles)
        return Verdict(outcome=best.outcome, reason=f"you hold none of the roles {names}")
    return best


def holders(
    role: RoleMembers, group_members: Mapping[str, frozenset[str]]
) -> frozenset[str] | None:
    """The Slack ids holding ``role``: its listed users and the members of its user groups as
    resolved in ``group_members``; None when one of its groups is not there (not resolved, or
    its lookup failed), because then who holds the role is not known."""
    people = set(role.users)
    for group in role.usergroups:
        members = group_members.get(group)
        if members is None:
            return None
        people |= members
    return frozenset(people)


def eligible_exists(
    roles: Iterable[RoleMembers],
    requester: Person,
    group_members: Mapping[str, frozenset[str]] | None = None,
    voters: Iterable[str] = (),
) -> bool:
    """Whether anyone other than the requester could decide a request that any of ``roles``
    may decide. ``voters`` are the Slack ids whose approval already counts towards a quorum:
    they cannot add another. A role whose holders are unknown (a user group not resolved in
    ``group_members``) may have someone, so it counts as eligible: only a proven "nobody"
    escalates early, and a failed lookup leaves the ordinary ladder to run.

    Holders are known by Slack id only, so a requester is ruled out by their Slack id; one
    known by e-mail alone is refused at click time by :func:`can_decide` instead.
    """
    known = group_members or {}
    excluded = set(voters)
    if requester.slack_user_id:
        excluded.add(requester.slack_user_id)
    for role in roles:
        people = holders(role, known)
        if people is None or people - excluded:
            return True
    return False
