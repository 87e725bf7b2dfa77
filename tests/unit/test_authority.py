"""Who may decide (four eyes, authority, fail closed) as a table of facts and verdicts."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from guards.authority import Approver, Outcome, Person, RoleMembers, Verdict, can_decide

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
