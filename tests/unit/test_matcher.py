"""The authority matrix's conditions, as a table: every operator, combinations, explanations,
first match wins, and the policy file's validation of conditions."""

from __future__ import annotations

from typing import Any

import pytest

from approvals import policy
from guards import matcher

FACTS = {
    "arguments": {"amount": 12000, "currency": "EUR", "tags": ["a"], "flag": True, "n": None},
    "context": {"environment": "prod", "region": "eu-west-1"},
}


@pytest.mark.parametrize(
    ("condition", "matched", "why"),
    [
        ({"field": "arguments.amount", "gt": 10000}, True, "arguments.amount 12000 > 10000"),
        ({"field": "arguments.amount", "gt": 12000}, False, "arguments.amount 12000 not > 12000"),
        ({"field": "arguments.amount", "ge": 12000}, True, "arguments.amount 12000 >= 12000"),
        ({"field": "arguments.amount", "lt": 12000}, False, "arguments.amount 12000 not < 12000"),
        ({"field": "arguments.amount", "le": 12000}, True, "arguments.amount 12000 <= 12000"),
        ({"field": "arguments.amount", "eq": 12000}, True, "arguments.amount 12000 == 12000"),
        ({"field": "arguments.amount", "ne": 5}, True, "arguments.amount 12000 != 5"),
        ({"field": "arguments.currency", "eq": "EUR"}, True, "arguments.currency 'EUR' == 'EUR'"),
        (
            {"field": "arguments.currency", "in": ["USD", "EUR"]},
            True,
            "arguments.currency 'EUR' in ['USD', 'EUR']",
        ),
        (
            {"field": "arguments.currency", "not_in": ["EUR"]},
            False,
            "arguments.currency 'EUR' in ['EUR']",
        ),
        (
            {"field": "context.region", "matches": "eu-.*"},
            True,
            "context.region 'eu-west-1' matches 'eu-.*'",
        ),
        (
            {"field": "context.region", "matches": "us-.*"},
            False,
            "context.region 'eu-west-1' does not match 'us-.*'",
        ),
        ({"field": "arguments.missing", "gt": 1}, False, "arguments.missing is absent"),
        (
            {"field": "arguments.currency", "gt": 1},
            False,
            "arguments.currency 'EUR' is not a number",
        ),
        (
            {"field": "arguments.flag", "eq": 1},
            False,
            "arguments.flag True not == 1",
        ),  # bool is not 1
        ({"field": "arguments.flag", "gt": 0}, False, "arguments.flag True is not a number"),
        ({"field": "arguments.tags.0", "eq": "a"}, True, "arguments.tags.0 'a' == 'a'"),
        (
            {
                "all": [
                    {"field": "arguments.amount", "gt": 10000},
                    {"field": "context.environment", "eq": "prod"},
                ]
            },
            True,
            "arguments.amount 12000 > 10000; context.environment 'prod' == 'prod'",
        ),
        (
            {
                "all": [
                    {"field": "arguments.amount", "gt": 10000},
                    {"field": "context.environment", "eq": "dev"},
                ]
            },
            False,
            "context.environment 'prod' not == 'dev'",
        ),
        (
            {
                "any": [
                    {"field": "arguments.amount", "gt": 99999},
                    {"field": "context.environment", "eq": "prod"},
                ]
            },
            True,
            "context.environment 'prod' == 'prod'",
        ),
    ],
)
def test_conditions(condition: dict[str, Any], matched: bool, why: str) -> None:
    outcome = matcher.evaluate(policy.parse_condition(condition), FACTS)
    assert outcome.matched is matched
    assert "; ".join(outcome.why) == why


@pytest.mark.parametrize(
    ("condition", "message"),
    [
        ({"field": "arguments.a"}, "one of eq ne"),
        ({"field": "arguments.a", "gt": 1, "lt": 2}, "one of eq ne"),
        ({"field": "arguments.a", "gte": 1}, "unknown keys: gte"),
        ({"field": "amount", "gt": 1}, "must start with arguments. or context."),
        ({"field": "arguments.a", "in": "x"}, "in needs a list"),
        ({"field": "arguments.a", "matches": "("}, "not a regular expression"),
        ({"all": []}, "non-empty list"),
        ("amount > 5", "a condition is a mapping"),
        ({"field": "arguments.a", "eq": 1, "__import__": "os"}, "unknown keys"),
    ],
)
def test_bad_conditions_are_refused(condition: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        policy.parse_condition(condition)


def _policy(rules: list[dict[str, Any]]) -> policy.Policy:
    return policy.Policy.model_validate(
        {
            "slack": {"reviewer_channel": "C0REVIEWS"},
            "agents": {"a": {"token_env": "A_TOKEN"}},
            "roles": {"finance": {}, "finance-lead": {}, "approvers": {}},
            "rules": rules,
        }
    )


def test_first_match_wins_and_explains() -> None:
    p = _policy(
        [
            {
                "tool": "transfer_*",
                "when": {"field": "arguments.amount", "gt": 50000},
                "require": "finance-lead",
            },
            {
                "tool": "transfer_*",
                "when": {"field": "arguments.amount", "gt": 10000},
                "require": "finance",
                "approvals": 2,
            },
            {"tool": "*", "require": "approvers"},
        ]
    )
    huge = p.match("transfer_money", {"amount": 60000})
    assert (huge.rule.require, huge.explanation) == (
        "finance-lead",
        "arguments.amount 60000 > 50000",
    )
    big = p.match("transfer_money", {"amount": 12000})
    assert (big.rule.require, big.rule.approvals, big.index) == ("finance", 2, 1)
    small = p.match("transfer_money", {"amount": 5})
    assert (small.rule.require, small.explanation) == ("approvers", "")
    assert p.match("transfer_money").rule.require == "approvers"  # no facts: conditions fail


def test_catch_all_must_be_unconditional() -> None:
    p = _policy([{"tool": "*", "when": {"field": "arguments.x", "eq": 1}, "require": "approvers"}])
    assert [loc for loc, _ in p.problems()] == [("rules", 0, "tool")]


POLICY = """\
slack:
  reviewer_channel: C0REVIEWS
agents:
  a: {token_env: A_TOKEN}
roles:
  finance: {usergroups: [S0FIN], ceiling: {amount: .nan}}
rules:
  - tool: "transfer_*"
    when: {field: amount, gt: 10}
    require: finance
  - tool: "deploy"
    require: [finance, legal]
    escalation:
      - {after: 600, action: escalate}
  - tool: "wipe"
    require: finance
    escalation:
      - {after: 60, action: page}
  - tool: "*"
    require: finance
"""


def test_governance_keys_are_validated_with_file_line_and_key(tmp_path: Any) -> None:
    from approvals import errors

    path = tmp_path / "countersign.yml"
    path.write_text(POLICY)
    with pytest.raises(errors.PolicyError) as caught:
        policy.load_file(path)
    problems = "\n".join(caught.value.problems)
    assert f"{path}:6: roles.finance.ceiling.amount:" in problems  # NaN is no ceiling
    assert f"{path}:9: rules.0.when:" in problems
    assert "must start with arguments. or context." in problems
    assert f"{path}:18: rules.2.escalation.0.action:" in problems


def test_cross_checks_name_the_key(tmp_path: Any) -> None:
    from approvals import errors

    path = tmp_path / "countersign.yml"
    fixed = (
        POLICY.replace("ceiling: {amount: .nan}", "ceiling: {amount: 5}")
        .replace("{field: amount, gt: 10}", "{field: arguments.amount, gt: 10}")
        .replace("action: page", "action: remind")
    )
    path.write_text(fixed)
    with pytest.raises(errors.PolicyError) as caught:
        policy.load_file(path)
    assert caught.value.problems == [
        f"{path}:12: rules.1.require: role 'legal' is not defined under roles",
        f"{path}:14: rules.1.escalation: escalation needs oncall: {{channel: C…}}",
    ]


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        (None, "null"),
        (True, "boolean"),
        (0, "number"),
        (10**30, "number"),
        (1.5, "number"),
        (float("nan"), None),  # no comparison can judge it: not a number of the contract
        (float("inf"), None),
        ("60000", "string"),
        ({"amount": 1}, "object"),
        ([1], "array"),
        (object(), None),
    ],
)
def test_json_kind(value: object, kind: str | None) -> None:
    assert matcher.json_kind(value) == kind


@pytest.mark.parametrize(
    ("condition", "needs"),
    [
        ({"field": "arguments.amount", "gt": 1}, {"arguments.amount": {"number"}}),
        ({"field": "context.region", "matches": "eu-.*"}, {"context.region": {"string"}}),
        ({"field": "arguments.flag", "eq": True}, {"arguments.flag": {"boolean"}}),
        ({"field": "arguments.n", "ne": None}, {"arguments.n": {"null"}}),
        ({"field": "arguments.c", "in": ["EUR", 1]}, {"arguments.c": {"string", "number"}}),
        ({"field": "arguments.c", "not_in": []}, {"arguments.c": set()}),  # nothing can do
        (
            {
                "all": [
                    {"field": "arguments.amount", "gt": 1},
                    {"any": [{"field": "context.env", "eq": "prod"}]},
                ]
            },
            {"arguments.amount": {"number"}, "context.env": {"string"}},
        ),
        (
            # compared twice: it needs a kind both comparisons accept (none here)
            {"any": [{"field": "arguments.a", "eq": "all"}, {"field": "arguments.a", "gt": 1}]},
            {"arguments.a": set()},
        ),
    ],
)
def test_needs_names_each_compared_field_and_its_kinds(
    condition: dict[str, Any], needs: dict[str, set[str]]
) -> None:
    found = matcher.needs(policy.parse_condition(condition))
    assert {n.field: set(n.kinds) for n in found} == needs
