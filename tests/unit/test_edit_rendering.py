"""Edits as Slack and the agent see them, pure: the form, its parsing, the card of an edited call,
and ``resume`` in each framework's shape."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import rfc8785

from approvals import edits, hashing, models, resource
from bot import interactions, rendering
from countersign_client import binding as client_binding
from countersign_client import errors as client_errors
from countersign_client import models as client_models
from countersign_client.adapters import _common
from tests.unit.test_rendering import CREATED, S, make_approval, mrkdwn_texts

ARGS: dict[str, Any] = {"amount": 12000, "note": "Hello", "urgent": False, "long": "x" * 3001}


def edited(status: S = S.APPROVED, **changes: object) -> models.Approval:
    approval = make_approval(status=status, arguments=ARGS).evolve(
        editable=("amount", "note", "urgent", "long")
    )
    result = edits.apply(ARGS, ARGS, approval.editable, changes or {"amount": 9000})
    assert isinstance(result, edits.Result)
    sha = hashing.sha256_hex(result.canonical)
    editor = models.Decider(slack_user_id="U0ED", name="Ed", at=CREATED, arguments_sha256=sha)
    edit = models.Edit(
        number=1,
        arguments=result.arguments,
        arguments_jcs=result.canonical.decode(),
        arguments_sha256=sha,
        patch=result.patch,
        by=editor,
        at=CREATED,
        note="typo <!here>",
        policy_version="pol_x",
    )
    votes = (editor,) if status is S.APPROVED else ()
    return approval.evolve(edit=edit, decided_by=votes)


def test_the_buttons_carry_the_version_they_were_shown_beside() -> None:
    pending = make_approval().evolve(editable=("amount",))
    _, blocks = rendering.card(pending)
    [actions] = [b for b in blocks if b["type"] == "actions"]
    assert actions["block_id"] == f"countersign_decision:{pending.run_sha256}"
    assert [e["action_id"] for e in actions["elements"]] == [
        interactions.APPROVE,
        interactions.EDIT,
        interactions.DENY,
    ]
    assert all(e["value"] == pending.approval_id for e in actions["elements"])
    payload = {
        "user": {"id": "U0A"},
        "actions": [
            {
                "action_id": interactions.APPROVE,
                "value": pending.approval_id,
                "block_id": actions["block_id"],
            }
        ],
    }
    assert interactions.parse_click(payload).seen == pending.run_sha256
    # no editable path this call holds: no Edit button
    _, plain = rendering.card(make_approval())
    [actions] = [b for b in plain if b["type"] == "actions"]
    assert interactions.EDIT not in [e["action_id"] for e in actions["elements"]]


def test_the_form_offers_typed_inputs_prefilled() -> None:
    pending = make_approval(arguments=ARGS).evolve(editable=("amount", "note", "urgent", "long"))
    view = rendering.edit_modal(pending, "C0REVIEWS")
    inputs = {b["block_id"]: b["element"] for b in view["blocks"] if b["type"] == "input"}
    assert inputs["edit:amount"] == {
        "type": "number_input",
        "is_decimal_allowed": True,
        "initial_value": "12000",
        "action_id": "value",
    }
    assert inputs["edit:note"]["initial_value"] == "Hello"
    assert inputs["edit:urgent"]["initial_option"]["value"] == "false"
    assert "edit:long" not in inputs  # too long for an input: said so, not offered
    assert "long" in json.dumps(view["blocks"])
    assert json.loads(view["private_metadata"]) == {
        "approval_id": pending.approval_id,
        "channel": "C0REVIEWS",
        "seen": pending.run_sha256,
    }


@pytest.mark.parametrize(
    ("element", "parsed"),
    [
        ({"type": "number_input", "value": "12"}, 12),
        ({"type": "number_input", "value": "-1.5"}, -1.5),
        ({"type": "number_input", "value": "1e3"}, 1000.0),
        ({"type": "number_input", "value": "lots"}, "lots"),
        ({"type": "number_input", "value": "NaN"}, "NaN"),
        ({"type": "plain_text_input", "value": "hi"}, "hi"),
        ({"type": "static_select", "selected_option": {"value": "true"}}, True),
        ({"type": "static_select", "selected_option": {"value": "false"}}, False),
        (
            {"type": "checkboxes", "selected_options": []},
            {"type": "checkboxes", "selected_options": []},
        ),
    ],
)
def test_the_submission_is_typed_by_its_inputs(element: dict[str, Any], parsed: object) -> None:
    body = {
        "user": {"id": "U0ED"},
        "view": {
            "private_metadata": json.dumps({"approval_id": "apr_" + "0" * 24, "seen": "a" * 64}),
            "state": {"values": {"edit:amount": {"value": element}, "other": {"x": {}}}},
        },
    }
    submission = interactions.parse_edit_submission(body)
    assert submission.changes == {"amount": parsed}
    assert submission.seen == "a" * 64


def test_the_card_of_an_edited_call_says_who_changed_what_inertly() -> None:
    approval = edited(note="Hi <@U0BOSS> `x` *y*\u202e")
    text, blocks = rendering.card(approval)
    texts = "\n".join(mrkdwn_texts(text, blocks))
    assert "Approved with edits" in texts
    assert "<@U0ED>" in texts  # our own mention of the editor
    assert "<@U0BOSS>" not in texts  # theirs never
    assert "<!here>" not in texts
    assert "&lt;@U0BOSS&gt;" in texts
    assert "\u202e" not in texts  # a hidden character is shown as its escape
    [arguments] = [b for b in blocks if b.get("block_id") == "arguments"]
    assert "Arguments (as edited)" in arguments["text"]["text"]
    assert approval.run_sha256[:12] in json.dumps(blocks)


def test_a_pending_edit_asks_for_the_remaining_votes_on_the_edited_call() -> None:
    approval = edited(status=S.PENDING).evolve(required=models.Required(role="x", approvals=2))
    editor = approval.edit.by if approval.edit else None
    assert editor is not None
    approval = approval.evolve(decided_by=(editor,))
    _, blocks = rendering.card(approval)
    assert "1 of 2 approvals" in json.dumps(blocks)
    assert "for the edited call" in json.dumps(blocks)


@pytest.mark.parametrize(
    ("framework", "check"),
    [
        (
            "langgraph",
            lambda r, e: (
                r["value"]
                == {"type": "edit", "edited_action": {"name": "transfer_money", "args": e}}
            ),
        ),
        ("generic", lambda r, e: r["approved"] and r["arguments"] == e),
        # these would run the call they recorded (or other input the model never sees):
        # refused, told what was approved instead, to call again with
        (
            "claude-code",
            lambda r, e: (
                r["behavior"] == "deny"
                and json.dumps(e, separators=(",", ":"), sort_keys=True) in r["message"]
            ),
        ),
        (
            "ag-ui",
            lambda r, e: (
                not r["payload"]["approved"]
                and "editedArgs" not in r["payload"]
                and json.dumps(e, separators=(",", ":"), sort_keys=True) in r["payload"]["reason"]
            ),
        ),
        (
            "maf",
            lambda r, e: (
                not r["approved"]
                and json.dumps(e, separators=(",", ":"), sort_keys=True) in r["reason"]
            ),
        ),
        (
            "openai-agents",
            lambda r, e: not r["approve"] and "call transfer_money again" in r["rejection_message"],
        ),
    ],
)
def test_resume_carries_what_may_run(framework: str, check: Any) -> None:
    approval = edited().evolve(framework=framework)
    body = json.loads(resource.render(approval))
    assert approval.edit is not None
    assert check(body["resume"], approval.edit.arguments), body["resume"]
    assert body["tool"]["arguments"] == ARGS
    assert body["edit"]["arguments"] == approval.edit.arguments


def _client_decision(body: dict[str, Any]) -> client_models.Approval:
    return client_models.Approval.model_validate(body)


def test_the_client_takes_an_edit_that_hashes_and_patches_as_it_says() -> None:
    body = json.loads(resource.render(edited(amount=9000, note="Hi")))
    decision = _client_decision(body)
    edit = client_binding.check_edit(decision)
    assert edit is not None
    assert edit.arguments["amount"] == 9000
    assert decision.run_sha256 == edit.arguments_sha256
    text = _common.recall_text(decision, "transfer_money")
    assert '/amount 12000 → 9000; /note "Hello" → "Hi"' in text
    assert rfc8785.dumps(edit.arguments).decode() in text


@pytest.mark.parametrize(
    ("tamper", "field"),
    [
        (lambda e: e["arguments"].update(amount=1), "edit.arguments_sha256"),  # not what's hashed
        (lambda e: e["patch"][0].update(value=1), "edit.patch"),  # another change than shown
        (lambda e: e["patch"][0].update(op="add"), "edit.patch"),
        (lambda e: e["patch"][0].update(path="/nowhere"), "edit.patch"),
    ],
)
def test_the_client_refuses_an_edit_that_does_not_hold(tamper: Any, field: str) -> None:
    body = json.loads(resource.render(edited(amount=9000)))
    tamper(body["edit"])
    with pytest.raises(client_errors.BindingMismatch) as refused:
        client_binding.check_edit(_client_decision(body))
    assert refused.value.field == field


def test_the_queue_marks_an_edited_request_and_its_buttons_carry_the_edited_version() -> None:
    pending = edited(status=S.PENDING, amount=9000)
    blocks = rendering.queue_blocks([pending, make_approval()], [], limit=20)
    heads = [b["text"]["text"] for b in blocks if str(b.get("block_id", "")).startswith("head_")]
    assert len(heads) == 2
    assert ":pencil2: edited" in heads[0]
    assert ":pencil2: edited" not in heads[1]
    # the edited one's arguments are too long for the queue (a link to its card instead); the
    # other's buttons name the version shown beside them
    [actions] = [b for b in blocks if b["type"] == "actions"]
    plain = make_approval()
    assert actions["block_id"] == f"queue_{plain.approval_id}:{plain.run_sha256}"


def test_the_shared_wording_case_is_what_the_python_adapters_tell_the_model() -> None:
    """tests/fixtures/recall_text.json: the TypeScript client's test checks the same case."""
    case = json.loads(
        (Path(__file__).parents[1] / "fixtures" / "recall_text.json").read_text("utf-8")
    )
    decision = _client_decision(case["decision"])
    assert client_binding.check_edit(decision) is not None
    assert _common.recall_text(decision, case["tool"]) == case["text"]


def test_the_original_card_shows_its_call_again_and_warns_when_that_callback_died() -> None:
    original = edited().evolve(decided_at=CREATED, called_again_as="apr_" + "a" * 24)
    dead = models.Delivery(status="dead_letter", attempts=9, last_error="HTTP 502")
    again = original.evolve(
        approval_id="apr_" + "a" * 24, edit=None, edit_of=original.approval_id, delivery=dead
    )
    _, blocks = rendering.card(original, CREATED, again)
    text = json.dumps(blocks)
    assert "called again" in text
    assert "countersign redrive apr_" + "a" * 24 in text
    ids = [b.get("block_id") for b in blocks if b.get("block_id")]
    assert len(ids) == len(set(ids))  # Slack refuses a message with a block id twice
    dead_original = original.evolve(delivery=dead)
    _, both = rendering.card(dead_original, CREATED, again)
    both_ids = [b.get("block_id") for b in both if b.get("block_id")]
    assert {"dead_letter", "dead_letter_again"} <= set(both_ids)
    assert len(both_ids) == len(set(both_ids))
