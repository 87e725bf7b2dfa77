"""Who may decide (four eyes, authority, fail closed) as a table of facts and verdicts; roles
combined, membership, and whether anyone at all could decide (tables and a property)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guards.authority import (
    Approver,
    Outcome,
    Person,
    RoleMembers,
    Verdict,
    can_decide,
    can_decide_any,
    eligible_exists,
    holders,
    holds,
)

FINANCE = RoleMembers(name="finance", users=frozenset({"U0FIN"}), usergroups=frozenset({"S0FIN"}))
RITA = Person(slack_user_id="U0REQ", email="rita@example.com")
RITA_BY_ID = Person(slack_user_id="U0REQ")
RITA_BY_EMAIL = Person(email="Rita@Example.com")
LEAD = Person(slack_user_id="U0LEAD", email="lead@customer.example")


@dataclass(frozen=True)
class Case:
    id: str
    approver: Approver
    requester: Person
    expected: Outcome
    outsiders: tuple[Person, ...] = ()
    role: RoleMembers = field(default=FINANCE)


CASES = [
    # four eyes first: a requester never decides, whatever roles they hold
    Case(
        "requester-by-slack-id-in-role-users",
        Approver(slack_user_id="U0REQ", email="rita@example.com"),
        RITA,
        Outcome.SELF,
        role=RoleMembers(name="finance", users=frozenset({"U0REQ"})),
    ),
    Case(
        "requester-by-slack-id-in-usergroup",
        Approver(slack_user_id="U0REQ", email="rita@example.com", usergroups=frozenset({"S0FIN"})),
        RITA,
        Outcome.SELF,
    ),
    Case(
        "requester-known-by-slack-id-only",
        Approver(slack_user_id="U0REQ", usergroups=frozenset({"S0FIN"})),
        RITA_BY_ID,
        Outcome.SELF,
    ),
    Case(
        "requester-by-email-other-slack-id-case-insensitive",
        Approver(slack_user_id="U0TWIN", email="RITA@EXAMPLE.COM", usergroups=frozenset({"S0FIN"})),
        RITA,
        Outcome.SELF,
    ),
    Case(
        "requester-known-by-email-only",
        Approver(slack_user_id="U0TWIN", email="rita@example.com", usergroups=frozenset({"S0FIN"})),
        RITA_BY_EMAIL,
        Outcome.SELF,
    ),
    Case(
        "self-wins-over-lookup-error",
        Approver(
            slack_user_id="U0REQ", lookup_error="ratelimited", usergroups=frozenset({"S0FIN"})
        ),
        RITA,
        Outcome.SELF,
    ),
    # fail closed when the facts are incomplete
    Case(
        "lookup-error-even-with-role",
        Approver(
            slack_user_id="U0FIN",
            email="fin@example.com",
            usergroups=frozenset({"S0FIN"}),
            lookup_error="usergroups.users.list: ratelimited",
        ),
        RITA,
        Outcome.LOOKUP_FAILED,
    ),
    Case(
        "requester-has-email-clicker-email-unknown",
        Approver(slack_user_id="U0FIN", email=None, usergroups=frozenset({"S0FIN"})),
        RITA,
        Outcome.LOOKUP_FAILED,
    ),
    Case(
        "requester-email-only-clicker-email-unknown",
        Approver(slack_user_id="U0FIN", usergroups=frozenset({"S0FIN"})),
        RITA_BY_EMAIL,
        Outcome.LOOKUP_FAILED,
    ),
    Case(
        "requester-by-id-only-clicker-email-not-needed",
        Approver(slack_user_id="U0FIN", email=None),
        RITA_BY_ID,
        Outcome.ACCEPTED,
    ),
    # outside parties never decide, even holding the role
    Case(
        "lead-by-slack-id-in-role",
        Approver(
            slack_user_id="U0LEAD", email="other@example.com", usergroups=frozenset({"S0FIN"})
        ),
        RITA,
        Outcome.NO_AUTHORITY,
        outsiders=(LEAD,),
        role=RoleMembers(name="finance", users=frozenset({"U0LEAD"}), usergroups=frozenset()),
    ),
    Case(
        "lead-by-email-case-insensitive",
        Approver(
            slack_user_id="U0GUEST", email="LEAD@customer.example", usergroups=frozenset({"S0FIN"})
        ),
        RITA,
        Outcome.NO_AUTHORITY,
        outsiders=(LEAD,),
    ),
    # the role
    Case(
        "member-by-user-list",
        Approver(slack_user_id="U0FIN", email="fin@example.com"),
        RITA,
        Outcome.ACCEPTED,
    ),
    Case(
        "member-by-usergroup",
        Approver(
            slack_user_id="U0ANY", email="any@example.com", usergroups=frozenset({"S0FIN", "S0X"})
        ),
        RITA,
        Outcome.ACCEPTED,
    ),
    Case(
        "member-with-unrelated-outsider",
        Approver(slack_user_id="U0FIN", email="fin@example.com"),
        RITA,
        Outcome.ACCEPTED,
        outsiders=(LEAD,),
    ),
    Case(
        "neither-user-nor-usergroup",
        Approver(slack_user_id="U0ANY", email="any@example.com", usergroups=frozenset({"S0OPS"})),
        RITA,
        Outcome.NO_AUTHORITY,
    ),
    # only your own people: a Slack Connect user or a guest never decides, listed or not...
    Case(
        "other-organisation-listed-in-role",
        Approver(slack_user_id="U0FIN", email="fin@partner.example", other_organisation="T0PART"),
        RITA,
        Outcome.OUTSIDE_ORGANISATION,
    ),
    Case(
        "other-organisation-in-usergroup",
        Approver(
            slack_user_id="U0EXT",
            email="ext@partner.example",
            usergroups=frozenset({"S0FIN"}),
            other_organisation="T0PART",
        ),
        RITA,
        Outcome.OUTSIDE_ORGANISATION,
    ),
    Case(
        "guest-listed-in-role",
        Approver(slack_user_id="U0FIN", email="fin@example.com", guest=True),
        RITA,
        Outcome.GUEST,
    ),
    Case(
        "guest-and-other-organisation-says-organisation",
        Approver(
            slack_user_id="U0FIN", email="f@partner.example", guest=True, other_organisation="T0P"
        ),
        RITA,
        Outcome.OUTSIDE_ORGANISATION,
    ),
    # ...unless the role says guests: true (then the role decides, as for anyone)
    Case(
        "guest-for-a-role-admitting-guests",
        Approver(slack_user_id="U0FIN", email="fin@example.com", guest=True),
        RITA,
        Outcome.ACCEPTED,
        role=RoleMembers(name="contractors", users=frozenset({"U0FIN"}), guests=True),
    ),
    Case(
        "other-organisation-for-a-role-admitting-guests",
        Approver(slack_user_id="U0FIN", email="fin@partner.example", other_organisation="T0P"),
        RITA,
        Outcome.ACCEPTED,
        role=RoleMembers(name="partners", users=frozenset({"U0FIN"}), guests=True),
    ),
    Case(
        "guest-admitted-but-not-holding-the-role",
        Approver(slack_user_id="U0GST", email="g@example.com", guest=True),
        RITA,
        Outcome.NO_AUTHORITY,
        role=RoleMembers(name="contractors", users=frozenset({"U0FIN"}), guests=True),
    ),
    # four eyes still come first for a guest
    Case(
        "guest-requester",
        Approver(slack_user_id="U0REQ", email="rita@example.com", guest=True),
        RITA,
        Outcome.SELF,
        role=RoleMembers(name="contractors", users=frozenset({"U0REQ"}), guests=True),
    ),
    Case(
        "empty-role",
        Approver(slack_user_id="U0FIN", email="fin@example.com", usergroups=frozenset({"S0FIN"})),
        RITA,
        Outcome.NO_AUTHORITY,
        role=RoleMembers(name="removed"),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_can_decide(case: Case) -> None:
    verdict = can_decide(case.approver, case.requester, case.role, case.outsiders)
    assert verdict.outcome is case.expected
    assert verdict.allowed is (case.expected is Outcome.ACCEPTED)
    if case.expected is not Outcome.ACCEPTED:
        assert verdict.reason, "a refusal must say why"


def test_no_authority_reason_names_the_role() -> None:
    verdict = can_decide(Approver(slack_user_id="U0ANY", email="a@example.com"), RITA, FINANCE)
    assert verdict.outcome is Outcome.NO_AUTHORITY
    assert "finance" in verdict.reason


def test_lookup_failed_reason_names_the_error() -> None:
    approver = Approver(slack_user_id="U0FIN", lookup_error="users.info: user_not_found")
    verdict = can_decide(approver, RITA, FINANCE)
    assert verdict.outcome is Outcome.LOOKUP_FAILED
    assert "user_not_found" in verdict.reason


@pytest.mark.parametrize(
    ("one", "other", "same"),
    [
        (Person(slack_user_id="U1"), Person(slack_user_id="U1"), True),
        (Person(slack_user_id="U1"), Person(slack_user_id="U2"), False),
        (Person(email="A@x.example"), Person(email="a@X.EXAMPLE"), True),
        (Person(slack_user_id="U1", email="a@x.example"), Person(email="a@x.example"), True),
        (Person(), Person(), False),  # two unknowns are not "the same person"
        (Person(email=""), Person(email=""), False),
        (Person(slack_user_id=""), Person(slack_user_id=""), False),
    ],
)
def test_person_is_same(one: Person, other: Person, same: bool) -> None:
    assert one.is_same(other) is same
    assert other.is_same(one) is same


def test_verdict_allowed_only_when_accepted() -> None:
    for outcome in Outcome:
        assert Verdict(outcome=outcome).allowed is (outcome is Outcome.ACCEPTED)


def test_outsider_by_email_with_clicker_email_unknown_fails_closed() -> None:
    approver = Approver(slack_user_id="U0FIN", email=None)  # in the role by user list
    verdict = can_decide(
        approver, RITA_BY_ID, FINANCE, outsiders=(Person(email="lead@customer.example"),)
    )
    assert verdict.outcome is Outcome.LOOKUP_FAILED


CAPPED = RoleMembers(
    name="finance", usergroups=frozenset({"S0FIN"}), ceiling={"amount": 50000, "fee.pct": 2.5}
)
CAPPED_MEMBER = Approver(
    slack_user_id="U0FIN", email="fin@example.com", usergroups=frozenset({"S0FIN"})
)


@pytest.mark.parametrize(
    ("arguments", "outcome", "reason"),
    [
        ({"amount": 100, "fee": {"pct": 1}}, Outcome.ACCEPTED, ""),
        ({"amount": 50000, "fee": {"pct": 2.5}}, Outcome.ACCEPTED, ""),
        ({"amount": 50001, "fee": {"pct": 1}}, Outcome.OVER_LIMIT, "this call has 50001"),
        ({"amount": 1, "fee": {"pct": 3}}, Outcome.OVER_LIMIT, "fee.pct up to 2.5"),
        # what can't be compared never passes: absent, nested elsewhere, other types
        ({"fee": {"pct": 1}}, Outcome.OVER_LIMIT, "this call has no amount"),
        ({"amount": 1}, Outcome.OVER_LIMIT, "this call has no fee.pct"),
        ({"amount": 1, "fee.pct": 1}, Outcome.OVER_LIMIT, "has no fee.pct"),  # a flat key
        ({"amount": "100", "fee": {"pct": 1}}, Outcome.OVER_LIMIT, "is not a number"),
        ({"amount": True, "fee": {"pct": 1}}, Outcome.OVER_LIMIT, "is not a number"),
        ({"amount": None, "fee": {"pct": 1}}, Outcome.OVER_LIMIT, "is not a number"),
        ({"amount": {"v": 1}, "fee": {"pct": 1}}, Outcome.OVER_LIMIT, "is not a number"),
        ({"amount": float("nan"), "fee": {"pct": 1}}, Outcome.OVER_LIMIT, "is not a number"),
        ({"amount": float("-inf"), "fee": {"pct": 1}}, Outcome.OVER_LIMIT, "is not a number"),
        ({"amount": 1, "fee": [1]}, Outcome.OVER_LIMIT, "has no fee.pct"),
    ],
)
def test_a_ceiling_refuses_what_it_cannot_compare(
    arguments: dict[str, object], outcome: Outcome, reason: str
) -> None:
    verdict = can_decide(CAPPED_MEMBER, RITA, CAPPED, (), arguments)
    assert verdict.outcome is outcome
    assert reason in verdict.reason
    if outcome is not Outcome.ACCEPTED:
        assert "role 'finance' may approve" in verdict.reason


# --- membership -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("approver", "role", "held"),
    [
        (Approver(slack_user_id="U0FIN"), FINANCE, True),  # listed by Slack id
        (Approver(slack_user_id="U0ANY", usergroups=frozenset({"S0FIN"})), FINANCE, True),
        (Approver(slack_user_id="U0ANY", usergroups=frozenset({"S0OPS"})), FINANCE, False),
        (Approver(slack_user_id="U0ANY"), FINANCE, False),
        (
            Approver(slack_user_id="U0FIN", usergroups=frozenset({"S0FIN"})),
            RoleMembers(name="x"),
            False,
        ),
        # membership only: four eyes is can_decide's business, not holds'
        (Approver(slack_user_id="U0REQ"), RoleMembers(name="x", users=frozenset({"U0REQ"})), True),
    ],
)
def test_holds(approver: Approver, role: RoleMembers, held: bool) -> None:
    assert holds(approver, role) is held


@pytest.mark.parametrize(
    ("role", "group_members", "expected"),
    [
        (FINANCE, {"S0FIN": frozenset({"U0A", "U0B"})}, frozenset({"U0FIN", "U0A", "U0B"})),
        (FINANCE, {"S0FIN": frozenset()}, frozenset({"U0FIN"})),
        (FINANCE, {}, None),  # the group was not resolved: who holds the role is unknown
        (FINANCE, {"S0OTHER": frozenset({"U0A"})}, None),
        (RoleMembers(name="x", users=frozenset({"U0A"})), {}, frozenset({"U0A"})),
        (RoleMembers(name="removed"), {}, frozenset()),
    ],
)
def test_holders(
    role: RoleMembers, group_members: Mapping[str, frozenset[str]], expected: frozenset[str] | None
) -> None:
    assert holders(role, group_members) == expected


# --- several roles: any one suffices, else the most telling refusal ---------------------------

APPROVERS = RoleMembers(name="approvers", users=frozenset({"U0APP"}))
SUPPORT = RoleMembers(name="support", users=frozenset({"U0SUP"}))
CAPPED_SUPPORT = RoleMembers(
    name="support", usergroups=frozenset({"S0FIN"}), ceiling={"amount": 10}
)


@pytest.mark.parametrize(
    ("approver", "roles", "outcome", "reason"),
    [
        (Approver(slack_user_id="U0APP"), [APPROVERS, SUPPORT], Outcome.ACCEPTED, ""),
        (Approver(slack_user_id="U0SUP"), [APPROVERS, SUPPORT], Outcome.ACCEPTED, ""),  # any_of
        (
            Approver(slack_user_id="U0ANY"),
            [APPROVERS, SUPPORT],
            Outcome.NO_AUTHORITY,
            "none of the roles 'approvers', 'support'",
        ),
        (Approver(slack_user_id="U0ANY"), [APPROVERS], Outcome.NO_AUTHORITY, "role 'approvers'"),
        # one role's ceiling refuses, another role has no ceiling: the other one suffices
        (CAPPED_MEMBER, [CAPPED_SUPPORT, FINANCE], Outcome.ACCEPTED, ""),
        # a ceiling says more than "no role"
        (CAPPED_MEMBER, [APPROVERS, CAPPED_SUPPORT], Outcome.OVER_LIMIT, "up to 10"),
        # being the requester says more than anything, whichever role is asked first
        (
            Approver(slack_user_id="U0REQ", email="rita@example.com"),
            [APPROVERS, RoleMembers(name="mine", users=frozenset({"U0REQ"}))],
            Outcome.SELF,
            "you requested",
        ),
        (
            Approver(slack_user_id="U0APP", groups_error="ratelimited"),
            [RoleMembers(name="other"), RoleMembers(name="more")],
            Outcome.LOOKUP_FAILED,
            "ratelimited",
        ),
        (Approver(slack_user_id="U0APP"), [], Outcome.NO_AUTHORITY, "no role"),
        # a guest holding a role that admits guests: that role suffices
        (
            Approver(slack_user_id="U0APP", guest=True),
            [APPROVERS, RoleMembers(name="contractors", users=frozenset({"U0APP"}), guests=True)],
            Outcome.ACCEPTED,
            "",
        ),
        # a guest holding only roles that do not: being a guest is what they are told
        (
            Approver(slack_user_id="U0APP", guest=True),
            [APPROVERS, RoleMembers(name="contractors", guests=True)],
            Outcome.GUEST,
            "guest accounts do not decide for the role 'approvers'",
        ),
        (
            Approver(slack_user_id="U0APP", other_organisation="T0PART"),
            [APPROVERS],
            Outcome.OUTSIDE_ORGANISATION,
            "another organisation (T0PART)",
        ),
    ],
)
def test_can_decide_any(
    approver: Approver, roles: list[RoleMembers], outcome: Outcome, reason: str
) -> None:
    verdict = can_decide_any(approver, RITA_BY_ID, roles, (), {"amount": 100})
    assert verdict.outcome is outcome
    assert reason in verdict.reason


def test_can_decide_any_keeps_outsiders_for_every_role() -> None:
    lead = Approver(slack_user_id="U0LEAD", email="lead@customer.example")
    roles = [RoleMembers(name="a", users=frozenset({"U0LEAD"})), APPROVERS]
    assert can_decide_any(lead, RITA, roles, iter([LEAD])).outcome is Outcome.NO_AUTHORITY


# --- is there anyone at all who could decide --------------------------------------------------

SOLO = RoleMembers(name="solo", usergroups=frozenset({"S0SOLO"}))
MEMBERS = {"S0FIN": frozenset({"U0REQ", "U0F1"}), "S0SOLO": frozenset({"U0REQ"})}


@pytest.mark.parametrize(
    ("roles", "group_members", "voters", "exists"),
    [
        ([RoleMembers(name="nobody")], MEMBERS, (), False),
        ([RoleMembers(name="me", users=frozenset({"U0REQ"}))], MEMBERS, (), False),
        ([RoleMembers(name="us", users=frozenset({"U0REQ", "U0B"}))], MEMBERS, (), True),
        ([SOLO], MEMBERS, (), False),  # the group's only member is the requester
        ([SOLO], {"S0SOLO": frozenset({"U0REQ", "U0B"})}, (), True),
        ([SOLO], None, (), True),  # groups not resolved (at submit): someone may be in them
        ([SOLO], {"S0FIN": frozenset()}, (), True),  # S0SOLO has no answer: its lookup failed
        ([SOLO, RoleMembers(name="nobody")], MEMBERS, (), False),
        ([SOLO, FINANCE], MEMBERS, (), True),  # any_of: one role with someone is enough
        ([], MEMBERS, (), False),
        # whose approval already counts cannot add another to a quorum
        ([FINANCE], MEMBERS, ("U0FIN", "U0F1"), False),
        ([FINANCE], MEMBERS, ("U0FIN",), True),
    ],
)
def test_eligible_exists(
    roles: list[RoleMembers],
    group_members: Mapping[str, frozenset[str]] | None,
    voters: tuple[str, ...],
    exists: bool,
) -> None:
    assert eligible_exists(roles, RITA, group_members, voters) is exists


def test_eligible_exists_rules_out_a_requester_by_slack_id_only() -> None:
    # holders are Slack ids: a requester known by e-mail alone is ruled out at click time
    me = [RoleMembers(name="me", users=frozenset({"U0REQ"}))]
    assert eligible_exists(me, RITA_BY_EMAIL) is True
    assert eligible_exists(me, RITA_BY_ID) is False


PEOPLE = ("U0A", "U0B", "U0C", "U0D")
GROUPS = ("S0G1", "S0G2", "S0G3")


@st.composite
def directories(draw: st.DrawFn) -> dict[str, frozenset[str]]:
    return {g: frozenset(draw(st.sets(st.sampled_from(PEOPLE)))) for g in GROUPS}


@st.composite
def role_sets(draw: st.DrawFn) -> list[RoleMembers]:
    count = draw(st.integers(0, 3))
    return [
        RoleMembers(
            name=f"role{i}",
            users=frozenset(draw(st.sets(st.sampled_from(PEOPLE), max_size=2))),
            usergroups=frozenset(draw(st.sets(st.sampled_from(GROUPS), max_size=2))),
        )
        for i in range(count)
    ]


@settings(max_examples=300, deadline=None)
@given(
    roles=role_sets(),
    directory=directories(),
    requester=st.sampled_from(PEOPLE),
    voters=st.sets(st.sampled_from(PEOPLE), max_size=2),
)
def test_eligible_exists_iff_someone_else_holds_an_acceptable_role(
    roles: list[RoleMembers], directory: dict[str, frozenset[str]], requester: str, voters: set[str]
) -> None:
    """With every group resolved, "someone could decide" is exactly: a person in the directory,
    not the requester and not a voter, whom the click-time rule would accept for some role."""
    asker = Person(slack_user_id=requester)

    def accepted(person: str) -> bool:
        facts = Approver(
            slack_user_id=person,
            usergroups=frozenset(g for g, m in directory.items() if person in m),
        )
        return can_decide_any(facts, asker, roles).allowed

    expected = any(accepted(p) for p in PEOPLE if p not in voters)
    assert eligible_exists(roles, asker, directory, voters) is expected
