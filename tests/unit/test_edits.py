"""Edits, pure: the policy's editable paths (load errors naming file, line and key), which fields
a form offers, what an edit makes of the arguments, and the patch it records."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from approvals import edits, errors, hashing
from bot import config

POLICY = """\
slack:
  reviewer_channel: C0REVIEWS
agents:
  sales-bot:
    token_env: SALES_BOT_TOKEN
roles:
  finance:
    usergroups: [S0FIN]
    ceiling: {amount: 5000}
tools:
  transfer_money:
    arguments:
      type: object
      additionalProperties: false
      properties:
        amount: {type: number}
        email: {type: object, properties: {body: {type: string}}}
        lines: {type: array, items: {type: object, properties: {qty: {type: integer}}}}
rules:
  - tool: transfer_money
    require: finance
    editable: [EDITABLE]
  - tool: "*"
    require: finance
"""


def load(tmp_path: Path, editable: str) -> list[str]:
    path = tmp_path / "countersign.yml"
    path.write_text(POLICY.replace("EDITABLE", editable), encoding="utf-8")
    env = {
        "SLACK_BOT_TOKEN": "xoxb-test-token",
        "SLACK_SIGNING_SECRET": "test-signing-secret",
        "COUNTERSIGN_CONFIG": str(path),
        "SALES_BOT_TOKEN": "sales-bot-token-0123456789",
    }
    try:
        config.load(env)
    except errors.PolicyError as exc:
        return [p.removeprefix(f"{path}:") for p in exc.problems]
    return []


def test_paths_every_call_could_hold_load(tmp_path: Path) -> None:
    assert load(tmp_path, "amount, email.body, lines.0.qty") == []


@pytest.mark.parametrize(
    ("editable", "problem"),
    [
        # additionalProperties: false and no such property
        ("recipient", "22: rules.0.editable.0: 'recipient' can never be edited: tools["),
        # the schema says amount is a number: it holds no "cents"
        ("amount.cents", "22: rules.0.editable.0: 'amount.cents' can never be edited:"),
        # an object: no form input holds one
        ("email", "22: rules.0.editable.0: 'email' can never be edited:"),
        ("amount, amount", "22: rules.0.editable.1: 'amount' is listed twice"),
    ],
)
def test_a_path_no_call_could_hold_is_a_load_error(
    tmp_path: Path, editable: str, problem: str
) -> None:
    problems = load(tmp_path, editable)
    assert len(problems) == 1, problems
    assert problems[0].startswith(problem), problems


def test_a_path_through_a_compared_number_is_a_load_error(tmp_path: Path) -> None:
    # no schema: the ceiling of role finance makes arguments.amount a number
    text = POLICY.split("tools:")[0] + "rules:" + POLICY.split("rules:")[1]
    path = tmp_path / "countersign.yml"
    path.write_text(text.replace("EDITABLE", "amount.cents"), encoding="utf-8")
    env = {
        "SLACK_BOT_TOKEN": "xoxb-test-token",
        "SLACK_SIGNING_SECRET": "test-signing-secret",
        "COUNTERSIGN_CONFIG": str(path),
        "SALES_BOT_TOKEN": "sales-bot-token-0123456789",
    }
    with pytest.raises(errors.PolicyError) as caught:
        config.load(env)
    [problem] = caught.value.problems
    assert problem.startswith(f"{path}:13: rules.0.editable.0: 'amount.cents' can never be edited")
    assert "the ceiling of role 'finance'" in problem


def test_a_path_that_is_not_dotted_is_a_load_error(tmp_path: Path) -> None:
    [problem] = load(tmp_path, '"amount..cents"')
    assert problem.startswith("22: rules.0.editable.0:")


ARGS: dict[str, Any] = {
    "amount": 500,
    "memo": "invoice",
    "urgent": False,
    "email": {"body": "Hello", "to": ["a@example.com"]},
    "lines": [{"qty": 2}],
    "nothing": None,
}
EDITABLE = ("amount", "memo", "urgent", "email.body", "lines.0.qty", "email", "nothing", "absent")


def test_the_form_offers_each_editable_scalar_present() -> None:
    fields = edits.editable_fields(ARGS, EDITABLE)
    assert [(f.path, f.kind) for f in fields] == [
        ("amount", "number"),
        ("memo", "string"),
        ("urgent", "boolean"),
        ("email.body", "string"),
        ("lines.0.qty", "number"),
    ]


def test_an_edit_sets_the_fields_and_records_a_patch_from_the_requested() -> None:
    before = copy.deepcopy(ARGS)
    result = edits.apply(ARGS, ARGS, EDITABLE, {"email.body": "Hi", "lines.0.qty": 3})
    assert isinstance(result, edits.Result)
    assert result.arguments["email"] == {"body": "Hi", "to": ["a@example.com"]}
    assert result.arguments["lines"] == [{"qty": 3}]
    assert before == ARGS  # the requested arguments are never changed in place
    assert result.canonical == hashing.canonical_json(result.arguments)
    assert list(result.patch) == [
        {"op": "replace", "path": "/email/body", "value": "Hi"},
        {"op": "replace", "path": "/lines/0/qty", "value": 3},
    ]


def test_a_second_edit_patches_against_the_requested_arguments() -> None:
    first = edits.apply(ARGS, ARGS, EDITABLE, {"amount": 400})
    assert isinstance(first, edits.Result)
    second = edits.apply(ARGS, first.arguments, EDITABLE, {"memo": "x"})
    assert isinstance(second, edits.Result)
    assert [op["path"] for op in second.patch] == ["/amount", "/memo"]
    back = edits.apply(ARGS, second.arguments, EDITABLE, {"amount": 500, "memo": "invoice"})
    assert isinstance(back, edits.Result)
    assert back.patch == ()  # back to the request: an edit with no change from it


@pytest.mark.parametrize(
    ("changes", "forged"),
    [
        ({"email": "x"}, True),  # an object: not offered
        ({"absent": 1}, True),
        ({"amount": None}, True),  # null: no input of ours sends it
        ({"amount": [1]}, True),
        ({"amount": "5"}, False),  # a string where a number was: a type error at the field
        ({"urgent": 0}, False),
        ({"memo": 3}, False),
    ],
)
def test_what_the_form_does_not_offer_is_refused_whole(
    changes: dict[str, object], forged: bool
) -> None:
    result = edits.apply(ARGS, ARGS, EDITABLE, {"memo": "changed", **changes})
    assert isinstance(result, list)
    [problem] = result
    assert problem.path == next(iter(changes))
    assert problem.forged is forged


def test_keys_with_slash_and_tilde_are_escaped_in_the_patch() -> None:
    args: dict[str, Any] = {"a/b": {"c~d": 1}}
    result = edits.apply(args, args, ["a/b.c~d"], {"a/b.c~d": 2})
    assert isinstance(result, edits.Result)
    assert result.patch[0]["path"] == "/a~1b/c~0d"
    assert edits.dotted(result.patch[0]) == "a/b.c~d"


def _apply_patch(document: Any, patch: tuple[dict[str, Any], ...]) -> Any:
    """RFC 6902 replace, read independently of edits.apply: walk the RFC 6901 pointer."""
    out = copy.deepcopy(document)
    for op in patch:
        assert op["op"] == "replace"
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        node = out
        for part in parts[:-1]:
            node = node[int(part)] if isinstance(node, list) else node[part]
        last = parts[-1]
        if isinstance(node, list):
            node[int(last)] = op["value"]
        else:
            assert last in node  # replace needs the target to exist
            node[last] = op["value"]
    return out


@given(
    amount=st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1),
    memo=st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=50),
    urgent=st.booleans(),
    qty=st.floats(allow_nan=False, allow_infinity=False),
)
def test_the_patch_applied_to_the_request_gives_the_edited_arguments(
    amount: int, memo: str, urgent: bool, qty: float
) -> None:
    changes = {"amount": amount, "memo": memo, "urgent": urgent, "lines.0.qty": qty}
    result = edits.apply(ARGS, ARGS, EDITABLE, changes)
    if isinstance(result, list):  # nothing changed: every value as requested
        assert [p.message for p in result] == ["nothing was changed: use Approve instead"]
        return
    assert hashing.canonical_json(_apply_patch(ARGS, result.patch)) == result.canonical
