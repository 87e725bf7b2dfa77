"""The pure rules of standing grants (approvals/grants.py): what a constraint takes, what a
form's terms may ask, and what a policy change voids."""

from __future__ import annotations

import math
from typing import Any

import pytest

from approvals import grants, models, policy

C = models.GrantConstraint
LIMITS = models.GrantLimits(max_seconds=3600, max_uses=20, scopes=("session",))
ARGUMENTS: dict[str, Any] = {"account": "ACME", "amount": 2000, "tags": ["a", "b"]}


@pytest.mark.parametrize(
    ("value", "taken"),
    [
        (2000, True),
        (2000.0, True),
        (-1, True),
        (2000.0000001, False),
        ("1000", False),
        (True, False),
        (False, False),
        (None, False),
        (math.nan, False),
        (math.inf, False),
        (-math.inf, False),
        ({"amount": 1}, False),
        ([1], False),
    ],
)
def test_at_most_takes_finite_numbers_only(value: Any, taken: bool) -> None:
    assert grants.satisfies(C(kind="at_most", value=2000), value) is taken


@pytest.mark.parametrize(
    ("value", "taken"),
    [
        ({"b": [1, 2], "a": "x"}, True),  # key order is not a difference (RFC 8785)
        ({"a": "x", "b": [1, 2.0]}, True),  # 2 and 2.0 are one JSON number
        ({"a": "x", "b": [2, 1]}, False),
        ({"a": "x", "b": [1, 2], "c": None}, False),
        ({"a": "x"}, False),
        ({"a": "X", "b": [1, 2]}, False),
        ({"a": "x", "b": [1, "2"]}, False),
        ({"a": "x", "b": [1, True]}, False),
        ({"a": "x", "b": [1, math.nan]}, False),  # cannot be compared: no match
        ([{"a": "x", "b": [1, 2]}], False),
    ],
)
def test_exactly_compares_the_whole_value_as_json(value: Any, taken: bool) -> None:
    assert grants.satisfies(C(kind="exactly", value={"a": "x", "b": [1, 2]}), value) is taken


def test_any_takes_anything() -> None:
    assert grants.satisfies(C(kind="any"), {"deep": [None]})


def test_terms_default_every_argument_to_exactly() -> None:
    terms = grants.read_terms({"scope": "session", "seconds": 600, "uses": 3}, LIMITS, ARGUMENTS)
    assert isinstance(terms, models.GrantTerms)
    assert terms.kinds == {"account": "exactly", "amount": "exactly", "tags": "exactly"}
    made = grants.constraints(terms, ARGUMENTS)
    assert made["tags"] == C(kind="exactly", value=["a", "b"])


@pytest.mark.parametrize(
    ("raw", "field", "forged"),
    [
        ({"scope": "agent"}, "scope", True),
        ({"scope": None}, "scope", True),
        ({"seconds": 3601}, "seconds", False),
        ({"seconds": "600"}, "seconds", False),
        ({"uses": 21}, "uses", False),
        ({"uses": 2.0}, "uses", False),
        ({"kinds": {"tags": "at_most"}}, "argument:tags", True),
        ({"kinds": {"missing": "exactly"}}, "argument:missing", True),
        ({"kinds": {"amount": "ANY"}}, "argument:amount", True),
        ({"kinds": "any"}, "scope", True),
    ],
)
def test_terms_past_the_limits_are_named(raw: dict[str, Any], field: str, forged: bool) -> None:
    asked = {"scope": "session", "seconds": 600, "uses": 3, **raw}
    problems = grants.read_terms(asked, LIMITS, ARGUMENTS)
    assert isinstance(problems, list)
    [problem] = [p for p in problems if p.field == field]
    assert problem.forged is forged


def test_too_many_arguments_cannot_be_granted() -> None:
    many = {f"a{i}": i for i in range(grants.MAX_ARGUMENTS + 1)}
    problems = grants.read_terms({"scope": "session", "seconds": 600, "uses": 1}, LIMITS, many)
    assert isinstance(problems, list)


def _policy(**rule: Any) -> policy.Policy:
    return policy.Policy.model_validate(
        {
            "slack": {"reviewer_channel": "C0REVIEWS"},
            "agents": {"bot": {"token_env": "BOT_TOKEN"}},
            "roles": {"leads": {"users": ["U0A"], "ceiling": {"amount": 10}}, "x": {}},
            "rules": [
                {"tool": "send_*", "require": "leads", **rule},
                {"tool": "*", "require": "x"},
            ],
        }
    )


def test_the_requirement_changes_with_what_the_rule_demands_only() -> None:
    base = _policy()
    digest = grants.requirement_sha256(base, base.rules[0])
    for changed in (
        _policy(when={"field": "arguments.amount", "gt": 1}),
        _policy(require=["leads", "x"]),
        _policy(tool="send_proposal"),
    ):
        assert grants.requirement_sha256(changed, changed.rules[0]) != digest
    # the ceiling of its role is part of it; who holds the role and the ladder are not
    raw = base.model_dump(exclude_none=True)
    raw["roles"]["leads"]["ceiling"] = {"amount": 11}
    ceiling = policy.Policy.model_validate(raw)
    assert grants.requirement_sha256(ceiling, ceiling.rules[0]) != digest
    raw = base.model_dump(exclude_none=True)
    raw["roles"]["leads"]["users"] = ["U0A", "U0B"]
    raw["rules"][0]["valid_for"] = 60
    members = policy.Policy.model_validate(raw)
    assert grants.requirement_sha256(members, members.rules[0]) == digest
