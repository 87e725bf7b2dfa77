"""The tool's argument contract: a field a rule compares, or a ceiling names, must be there and
of the type the comparison needs, or the call is refused before any rule is chosen. A failed type
comparison never routes a call to a laxer rule (issue 8, item 1)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from approvals import policy
from guards import authority, matcher


def make_policy(**extra: Any) -> policy.Policy:
    base: dict[str, Any] = {
        "slack": {"reviewer_channel": "C0REVIEWS"},
        "agents": {"sales-bot": {"token_env": "SALES_BOT_TOKEN"}},
        "roles": {
            "approvers": {"users": ["U0ANA"]},
            "finance": {"usergroups": ["S0FIN"], "ceiling": {"amount": 50000}},
            "deployers": {"users": ["U0DEV"]},
        },
        "rules": [
            {"tool": "transfer_*", "require": "finance"},
            {
                "tool": "refund",
                "when": {"field": "arguments.amount", "gt": 10000},
                "require": "finance",
            },
            {
                "tool": "deploy",
                "when": {"field": "context.environment", "in": ["prod", "staging"]},
                "require": "deployers",
            },
            {"tool": "*", "require": "approvers"},
        ],
    }
    return policy.Policy.model_validate({**base, **extra})


POLICY = make_policy()


def fields(problems: list[policy.ArgumentProblem]) -> list[str]:
    return [p.field for p in problems]


@pytest.mark.parametrize(
    ("tool", "arguments", "context", "field"),
    [
        # the reproduced breaks: a number sent as a string, or nested, or left out
        ("transfer_money", {"amount": "60000"}, {}, "tool.arguments.amount"),
        ("transfer_money", {"payment": {"amount": 9000000}}, {}, "tool.arguments.amount"),
        ("transfer_money", {}, {}, "tool.arguments.amount"),
        ("transfer_money", {"amount": True}, {}, "tool.arguments.amount"),
        ("transfer_money", {"amount": None}, {}, "tool.arguments.amount"),
        ("transfer_money", {"amount": [60000]}, {}, "tool.arguments.amount"),
        ("refund", {"amount": "20000"}, {}, "tool.arguments.amount"),
        ("refund", {"amount": {"value": 20000}}, {}, "tool.arguments.amount"),
        # another type for an in: comparison, or the field left out
        ("deploy", {}, {"environment": ["prod"]}, "context.environment"),
        ("deploy", {}, {}, "context.environment"),
    ],
)
def test_a_field_the_rules_compare_must_be_there_and_of_its_type(
    tool: str, arguments: dict[str, Any], context: dict[str, Any], field: str
) -> None:
    problems = POLICY.argument_problems(tool, arguments, context)
    assert field in fields(problems)
    [first] = [p for p in problems if p.field == field][:1]
    assert "rules[" in first.message  # names the rule


def test_the_problem_names_the_rule_and_says_what_it_got() -> None:
    [problem] = POLICY.argument_problems("refund", {"amount": "20000"})
    assert problem.message == (
        "rules[1] tool=refund needs a JSON number here (compared by its when: as number; "
        "the ceiling of role 'finance'); "
        "it is a JSON string"
    )


@pytest.mark.parametrize(
    ("tool", "arguments", "context"),
    [
        ("transfer_money", {"amount": 60000}, {}),
        ("transfer_money", {"amount": 1.5, "note": "x"}, {}),
        ("refund", {"amount": 20000}, {}),
        ("refund", {"amount": 5}, {}),
        ("deploy", {}, {"environment": "dev"}),  # a string: in: can judge it (false)
        ("send_email", {"to": "x"}, {}),  # only the catch-all: nothing to compare
    ],
)
def test_well_typed_calls_have_no_problems(
    tool: str, arguments: dict[str, Any], context: dict[str, Any]
) -> None:
    assert POLICY.argument_problems(tool, arguments, context) == []


def test_every_matching_rule_counts_not_only_the_winner() -> None:
    # rule 0 would win for transfer_x, but rule 1's condition compares arguments.limit too
    p = make_policy(
        rules=[
            {"tool": "transfer_*", "require": "approvers"},
            {
                "tool": "transfer_*",
                "when": {"field": "arguments.limit", "ge": 5},
                "require": "finance",
            },
            {"tool": "*", "require": "approvers"},
        ]
    )
    assert "tool.arguments.limit" in fields(p.argument_problems("transfer_x", {"amount": 1}))


def test_a_field_compared_as_two_types_is_a_policy_problem() -> None:
    p = make_policy(
        rules=[
            {
                "tool": "pay",
                "when": {
                    "any": [
                        {"field": "arguments.amount", "eq": "all"},
                        {"field": "arguments.amount", "gt": 10},
                    ]
                },
                "require": "finance",
            },
            {"tool": "*", "require": "approvers"},
        ]
    )
    assert [loc for loc, _ in p.problems()] == [("rules", 0, "when")]


def test_the_example_policy_contract_is_computed_once() -> None:
    assert POLICY.requirements is POLICY.requirements


# -- the tool's JSON Schema -------------------------------------------------------------------

SCHEMA = {
    "type": "object",
    "properties": {
        "amount": {"type": "number", "minimum": 0},
        "payment": {"type": "object", "properties": {"iban": {"type": "string"}}},
    },
    "required": ["amount"],
    "additionalProperties": False,
}


def test_the_tools_schema_is_checked_field_by_field() -> None:
    p = make_policy(tools={"transfer_*": {"arguments": SCHEMA}})
    problems = p.argument_problems(
        "transfer_money", {"amount": -1, "payment": {"iban": 7}, "extra": 1}
    )
    assert sorted(fields(problems)) == [
        "tool.arguments",  # additionalProperties: extra
        "tool.arguments.amount",
        "tool.arguments.payment.iban",
    ]
    assert all("tools['transfer_*'] schema" in x.message for x in problems)
    assert p.argument_problems("transfer_money", {"amount": 10}) == []
    assert p.match("transfer_money", {"amount": 10}).schemas == ("transfer_*",)
    assert p.match("send_email", {}).schemas == ()


def test_an_invalid_schema_is_refused_at_load() -> None:
    with pytest.raises(ValueError, match="not a valid JSON Schema"):
        make_policy(tools={"transfer_*": {"arguments": {"type": "nonsense"}}})


# -- the property ------------------------------------------------------------------------------

LIMIT, CEILING = 10000, 50000
ROUTED = make_policy(
    roles={
        "approvers": {"users": ["U0ANA"]},
        "finance": {"usergroups": ["S0FIN"], "ceiling": {"amount": CEILING}},
    },
    rules=[
        {"tool": "pay", "when": {"field": "arguments.amount", "gt": LIMIT}, "require": "finance"},
        {"tool": "*", "require": "approvers"},
    ],
)
FIN_MEMBER = authority.Approver(
    slack_user_id="U0FIN", email="fin@example.com", usergroups=frozenset({"S0FIN"})
)
FINANCE = authority.RoleMembers(
    name="finance", usergroups=frozenset({"S0FIN"}), ceiling={"amount": CEILING}
)

json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1),
    st.integers(min_value=10**20, max_value=10**40),  # huge ints (the webhook refuses them)
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
    st.integers(min_value=-(10**9), max_value=10**9).map(str),  # numeric strings
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
)
amount_shapes = st.one_of(
    json_leaf,
    st.lists(json_leaf, max_size=2),
    st.dictionaries(st.sampled_from(["amount", "value"]), json_leaf, max_size=2),
)
argument_shapes = st.one_of(
    st.fixed_dictionaries({"amount": amount_shapes}),
    st.fixed_dictionaries({"payment": st.fixed_dictionaries({"amount": amount_shapes})}),
    st.dictionaries(st.sampled_from(["note", "to"]), json_leaf, max_size=2),
)


@settings(max_examples=300, deadline=None)
@given(arguments=argument_shapes)
def test_a_call_is_refused_or_routed_by_real_numbers(arguments: dict[str, Any]) -> None:
    problems = ROUTED.argument_problems("pay", arguments)
    amount = arguments.get("amount", matcher.MISSING)
    is_number = isinstance(amount, int | float) and not isinstance(amount, bool)
    if problems:
        assert not is_number
        return
    # accepted: the condition was evaluated on a real number, never on a failed comparison
    assert is_number
    assert isinstance(amount, int | float)
    assert math.isfinite(amount)
    matched = ROUTED.match("pay", arguments)
    expected_role = "finance" if amount > LIMIT else "approvers"
    assert matched.rule.require == expected_role
    if expected_role == "finance":
        verdict = authority.can_decide(
            FIN_MEMBER, authority.Person(slack_user_id="U0REQ"), FINANCE, (), arguments
        )
        assert verdict.allowed == (amount <= CEILING)


@settings(max_examples=300, deadline=None)
@given(arguments=argument_shapes)
def test_a_ceiling_passes_only_real_numbers_within_it(arguments: dict[str, Any]) -> None:
    verdict = authority.can_decide(
        FIN_MEMBER, authority.Person(slack_user_id="U0REQ"), FINANCE, (), arguments
    )
    amount = arguments.get("amount")
    real = (
        isinstance(amount, int | float) and not isinstance(amount, bool) and math.isfinite(amount)
    )
    assert verdict.allowed == (real and amount <= CEILING)  # type: ignore[operator]
