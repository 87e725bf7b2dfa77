"""The tool's argument contract: a field a rule compares, or a ceiling names, must be there and
of the type the comparison needs, or the call is refused before any rule is chosen. A failed type
comparison never routes a call to a laxer rule (issue 8, item 1)."""

from __future__ import annotations

import fnmatch
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
        # not JSON numbers: the webhook refuses them, a direct caller of the core must not pass
        ("refund", {"amount": float("nan")}, {}, "tool.arguments.amount"),
        ("refund", {"amount": float("inf")}, {}, "tool.arguments.amount"),
        ("transfer_money", {"amount": float("-inf")}, {}, "tool.arguments.amount"),
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
    [(loc, message)] = p.problems()
    assert loc == ("rules", 0, "when")
    assert message == (
        "arguments.amount is compared by its when: as no one JSON type; "
        "the ceiling of role 'finance'"
    )


def test_a_membership_test_on_an_empty_list_is_a_policy_problem() -> None:
    # not_in: [] is true of anything: no type could be checked, so the policy says so at load
    p = make_policy(
        rules=[
            {
                "tool": "pay",
                "when": {"field": "arguments.currency", "not_in": []},
                "require": "finance",
            },
            {"tool": "*", "require": "approvers"},
        ]
    )
    [(loc, message)] = p.problems()
    assert loc == ("rules", 0, "when")
    assert "arguments.currency" in message


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


@pytest.mark.parametrize(
    "schema",
    [
        {"$ref": "https://schemas.example/transfer.json"},  # would need a fetch at every submit
        {"$ref": "#/$defs/missing"},
        {"properties": {"amount": {"$ref": "urn:example:amount"}}},
        {"properties": {"amount": {"$dynamicRef": "#nowhere"}}},
        {"$defs": {"a": {"$id": "https://x.example/a", "$ref": "#/$defs/b"}}, "$ref": "#/$defs/a"},
    ],
    ids=["remote", "missing-pointer", "urn", "dynamic-anchor", "relative-to-nested-id"],
)
def test_a_schema_whose_ref_does_not_resolve_is_refused_at_load(schema: dict[str, Any]) -> None:
    # it passes check_schema, yet every submission for the tool could not be evaluated
    with pytest.raises(ValueError, match=r"\$ref|\$dynamicRef"):
        make_policy(tools={"transfer_*": {"arguments": schema}})


def test_a_schema_with_local_refs_loads_and_applies_them() -> None:
    schema = {
        "$defs": {
            "money": {"type": "number", "minimum": 0},
            "fee": {"$anchor": "fee", "type": "number", "maximum": 10},
        },
        "properties": {
            "amount": {"$ref": "#/$defs/money"},
            "fee": {"$ref": "#fee"},
            "note": {"enum": [{"$ref": "a value to compare with, not a reference"}]},
        },
    }
    p = make_policy(tools={"transfer_*": {"arguments": schema}})
    problems = p.argument_problems("transfer_money", {"amount": -5, "fee": 11})
    assert sorted(fields(problems)) == ["tool.arguments.amount", "tool.arguments.fee"]
    assert p.argument_problems("transfer_money", {"amount": 5, "fee": 1}) == []


RECURSIVE = {
    "$defs": {"tree": {"type": ["array", "number"], "items": {"$ref": "#/$defs/tree"}}},
    "properties": {"x": {"$ref": "#/$defs/tree"}},
}


def test_arguments_too_deep_for_the_schema_are_refused_not_crashed() -> None:
    # the models take up to ~250 levels; a recursive schema walks them with several frames each
    p = make_policy(tools={"transfer_*": {"arguments": RECURSIVE}})
    deep: Any = []
    for _ in range(250):
        deep = [deep]
    [problem] = p.argument_problems("transfer_money", {"amount": 1, "x": deep})
    assert problem.field == "tool.arguments"
    assert "too deeply" in problem.message
    assert "tools['transfer_*']" in problem.message
    assert p.argument_problems("transfer_money", {"amount": 1, "x": [[[1]]]}) == []


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


# -- the property, over generated policies -----------------------------------------------------

ROLE_NAMES = ("r0", "r1", "r2")
CEILING_PATHS = ("amount", "payment.amount")
CONDITION_FIELDS = ("arguments.amount", "arguments.payment.amount", "context.risk")
TOOL = "pay"
COMPARE = {
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
}
limits = st.one_of(
    st.integers(min_value=-(10**6), max_value=10**6),
    st.floats(min_value=-1e6, max_value=1e6, allow_nan=False),
)
comparisons = st.builds(
    lambda field, op, value: {"field": field, op: value},
    st.sampled_from(CONDITION_FIELDS),
    st.sampled_from(tuple(COMPARE)),
    limits,
)
conditions = st.one_of(
    comparisons,
    st.builds(lambda parts: {"all": parts}, st.lists(comparisons, min_size=1, max_size=3)),
    st.builds(lambda parts: {"any": parts}, st.lists(comparisons, min_size=1, max_size=3)),
)
generated_rules = st.lists(
    st.fixed_dictionaries(
        {
            "tool": st.sampled_from(["pay", "pay*", "p?y", "[op]ay", "other", "pay_*"]),
            "require": st.sampled_from(ROLE_NAMES),
        },
        optional={"when": conditions},
    ),
    min_size=1,
    max_size=4,
)
generated_roles = st.fixed_dictionaries(
    {
        name: st.fixed_dictionaries(
            {
                "usergroups": st.just([f"S0{name.upper()}"]),
                "ceiling": st.dictionaries(st.sampled_from(CEILING_PATHS), limits, max_size=2),
            }
        )
        for name in ROLE_NAMES
    }
)
odd_leaf = st.one_of(json_leaf, st.sampled_from([math.nan, math.inf, -math.inf]))
value_shapes = st.one_of(
    odd_leaf,
    st.lists(odd_leaf, max_size=2),
    st.dictionaries(st.sampled_from(["amount", "value"]), odd_leaf, max_size=2),
)
generated_arguments = st.fixed_dictionaries(
    {},
    optional={
        "amount": value_shapes,
        "payment": st.one_of(
            st.fixed_dictionaries({}, optional={"amount": value_shapes}), odd_leaf
        ),
        "note": st.text(max_size=4),
    },
)
generated_context = st.fixed_dictionaries({}, optional={"risk": value_shapes})


def _real(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _compared_fields(condition: dict[str, Any] | None) -> list[str]:
    if condition is None:
        return []
    if "field" in condition:
        return [condition["field"]]
    return [f for part in next(iter(condition.values())) for f in _compared_fields(part)]


def _holds(condition: dict[str, Any] | None, facts: dict[str, Any]) -> bool:
    """The reference: the condition on real numbers, with plain Python comparisons."""
    if condition is None:
        return True
    if "all" in condition:
        return all(_holds(part, facts) for part in condition["all"])
    if "any" in condition:
        return any(_holds(part, facts) for part in condition["any"])
    (op,) = set(condition) - {"field"}
    value = matcher.lookup(facts, condition["field"])
    return bool(COMPARE[op](value, condition[op]))


@settings(max_examples=500, deadline=None)
@given(
    rules=generated_rules,
    roles=generated_roles,
    arguments=generated_arguments,
    context=generated_context,
)
def test_generated_policies_refuse_or_route_on_real_numbers(
    rules: list[dict[str, Any]],
    roles: dict[str, Any],
    arguments: dict[str, Any],
    context: dict[str, Any],
) -> None:
    p = make_policy(roles=roles, rules=[*rules, {"tool": "*", "require": "r0"}])
    assert p.problems() == []
    facts = {"arguments": arguments, "context": context}
    # every field that any rule matching the tool compares, and every ceiling of its roles
    read = [
        field
        for rule in p.rules
        if fnmatch.fnmatchcase(TOOL, rule.tool)
        for field in [
            *_compared_fields(rule.when),
            *("arguments." + path for role in rule.roles for path in roles[role]["ceiling"]),
        ]
    ]
    all_real = all(_real(matcher.lookup(facts, field)) for field in read)
    problems = p.argument_problems(TOOL, arguments, context)
    # refused exactly when some rule the tool matches could not judge the call on real numbers
    assert (problems == []) is all_real, (read, problems)
    if problems:
        return
    matched = p.match(TOOL, arguments, context)
    expected = next(
        i
        for i, rule in enumerate(p.rules)
        if fnmatch.fnmatchcase(TOOL, rule.tool) and _holds(rule.when, facts)
    )
    assert matched.index == expected
    assert not any("absent" in w or "not a number" in w for w in matched.why)
    # the winner's ceilings are judged on the same real numbers at click time
    (role_name,) = matched.rule.roles
    members = authority.RoleMembers(
        name=role_name,
        usergroups=frozenset(roles[role_name]["usergroups"]),
        ceiling=roles[role_name]["ceiling"],
    )
    member = authority.Approver(
        slack_user_id="U0FIN", email="fin@example.com", usergroups=members.usergroups
    )
    verdict = authority.can_decide(
        member, authority.Person(slack_user_id="U0REQ"), members, (), arguments
    )
    within = all(
        matcher.lookup(arguments, path) <= limit  # type: ignore[operator]
        for path, limit in members.ceiling.items()
    )
    assert verdict.allowed is within
