"""Edit & approve through Slack's real paths: the button on the card opens the form
(views.open with the click's trigger_id), its submission is a signed view_submission through
bolt's dispatch, wrong values are answered in the form, and the edited call reaches the agent's
callback bound to its own hash, with the card saying who edited what."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import harness as support
from tests.support.edit_form import card, open_form, submit_form, values
from tests.support.harness import (
    APPROVER,
    FINANCE,
    OUTSIDER,
    REQUESTER,
    Harness,
)


@pytest.fixture
async def harness(database_url: str, tmp_path: Path) -> AsyncIterator[Harness]:
    """The test policy, its refund rule letting reviewers change amount, note and urgent."""
    h = Harness(database_url=database_url, policy_file=tmp_path / "countersign.yml")
    await h.start()
    data = support.test_policy(h.receiver.port).model_dump(
        mode="json", by_alias=True, exclude_none=True
    )
    for rule in data["rules"]:
        if rule["tool"] == "refund":
            rule["editable"] = ["amount", "note", "urgent"]
    data["rules"].insert(-1, {"tool": "refund", "require": "approvers", "editable": ["amount"]})
    h.write_policy(data)
    await h.stop_bot()
    await h.start_bot()
    yield h
    await h.stop()


ARGS = {"amount": 12000, "note": "order 7 <!channel>", "urgent": False, "iban": "DE00"}


async def submitted(harness: Harness, **arguments: Any) -> str:
    body = await harness.submit(
        tool={"name": "refund", "call_id": "r1", "arguments": {**ARGS, **arguments}}
    )
    await harness.card_ts(body["approval_id"])
    return str(body["approval_id"])


async def test_edit_and_approve_reaches_the_agent_bound_to_the_edited_arguments(
    harness: Harness,
) -> None:
    approval_id = await submitted(harness)
    labels = [
        e["text"]["text"]
        for b in card(harness, approval_id)["blocks"]
        if b.get("type") == "actions"
        for e in b["elements"]
    ]
    assert labels == ["Approve", "Edit & approve", "Deny"]
    view = await open_form(harness, FINANCE[0], approval_id)
    inputs = {b["block_id"]: b["element"] for b in view["blocks"] if b.get("type") == "input"}
    assert inputs["edit:amount"]["type"] == "number_input"
    assert inputs["edit:amount"]["initial_value"] == "12000"
    assert inputs["edit:note"]["type"] == "plain_text_input"
    assert inputs["edit:urgent"]["type"] == "static_select"
    assert "edit:iban" not in inputs  # not editable: never offered
    state = values(view, amount="11000", note="order 7 <@U0FIN1> *bold*")
    state["note"] = {"note_input": {"type": "plain_text_input", "value": "partial refund"}}
    status, answer = await submit_form(harness, FINANCE[0], view, state)
    assert (status, answer) == (200, "")
    [received] = await harness.receiver.wait_delivered(1)
    decision = json.loads(received.body)
    assert decision["status"] == "approved"
    assert decision["tool"]["arguments"] == ARGS  # as requested, with its hash
    edit = decision["edit"]
    assert edit["arguments"] == {**ARGS, "amount": 11000, "note": "order 7 <@U0FIN1> *bold*"}
    assert edit["note"] == "partial refund"
    assert edit["by"]["slack_user_id"] == FINANCE[0].id
    assert {op["path"] for op in edit["patch"]} == {"/amount", "/note"}
    assert decision["decided_by"][0]["arguments_sha256"] == edit["arguments_sha256"]
    assert decision["resume"]["arguments"] == edit["arguments"]

    await harness.standin.wait_for(
        lambda: "Approved with edits" in json.dumps(card(harness, approval_id))
    )
    text = json.dumps(card(harness, approval_id)["blocks"])
    # the reviewer's text is untrusted too: no mention, no broadcast, no formatting escapes
    assert "<@U0FIN1>" not in text
    assert "<!channel>" not in text
    assert "&lt;@U0FIN1&gt;" in text
    # the agent can claim only the edited arguments
    status, refused = await harness.call(
        "POST", f"/v1/approvals/{approval_id}/execution", json_body={"idempotency_key": "k"}
    )
    assert (status, refused["error"]["code"]) == (409, "not_these_arguments")
    status, claimed = await harness.call(
        "POST",
        f"/v1/approvals/{approval_id}/execution",
        json_body={"idempotency_key": "k", "arguments_sha256": edit["arguments_sha256"]},
    )
    assert status == 200, claimed


async def test_wrong_values_are_answered_in_the_form_and_change_nothing(
    harness: Harness,
) -> None:
    approval_id = await submitted(harness)
    view = await open_form(harness, FINANCE[1], approval_id)
    # a number input whose text does not read as a number (a forged payload could send one)
    state = values(view, amount="lots")
    status, answer = await submit_form(harness, FINANCE[1], view, state)
    assert status == 200
    errors = json.loads(answer)
    assert errors["response_action"] == "errors"
    assert "edit:amount" in errors["errors"]
    # nothing changed at all
    state = values(view)
    status, answer = await submit_form(harness, FINANCE[1], view, state)
    assert json.loads(answer)["errors"] == {"note": "nothing was changed: use Approve instead"}
    _, body = await harness.call("GET", f"/v1/approvals/{approval_id}")
    assert (body["status"], body["edit"]) == ("pending", None)


async def test_a_forged_path_is_refused_whole_and_the_editor_told(harness: Harness) -> None:
    approval_id = await submitted(harness)
    view = await open_form(harness, FINANCE[1], approval_id)
    state = values(view, amount="100")
    state["edit:iban"] = {"value": {"type": "plain_text_input", "value": "XX99 attacker"}}
    status, answer = await submit_form(harness, FINANCE[1], view, state)
    assert (status, answer) == (200, "")
    [told] = await harness.wait_ephemeral(FINANCE[1])
    assert "iban" in told
    assert "Nothing changed" in told
    _, body = await harness.call("GET", f"/v1/approvals/{approval_id}")
    assert (body["status"], body["edit"]) == ("pending", None)
    _, events = await harness.call("GET", f"/v1/approvals/{approval_id}/events")
    outcomes = [e["outcome"] for e in events["events"] if e["kind"] == "attempt"]
    assert outcomes == ["invalid_edit"]


async def test_an_edit_is_judged_on_the_edited_call(harness: Harness) -> None:
    approval_id = await submitted(harness, amount=20000)
    # the requester never; someone holding no role never
    for user in (REQUESTER, OUTSIDER):
        view = await open_form(harness, user, approval_id)
        status, _ = await submit_form(harness, user, view, values(view, amount="500"))
        assert status == 200
        [told] = await harness.wait_ephemeral(user)
        assert "did not count" in told
        _, body = await harness.call("GET", f"/v1/approvals/{approval_id}")
        assert (body["status"], body["edit"]) == ("pending", None)
    # an approver may not approve a 20 000 refund (finance's), but the edited call, 500, is a
    # small refund, which approvers decide: the editor holds the authority the edited call needs
    view = await open_form(harness, APPROVER, approval_id)
    status, _ = await submit_form(harness, APPROVER, view, values(view, amount="500"))
    assert status == 200
    [received] = await harness.receiver.wait_delivered(1)
    decision = json.loads(received.body)
    assert decision["status"] == "approved"
    assert decision["required"]["role"] == "approvers"
    assert decision["edit"]["arguments"]["amount"] == 500


async def test_a_call_again_with_the_edit_runs_once_and_the_original_card_says_so(
    harness: Harness,
) -> None:
    """Microsoft Agent Framework runs only what it recorded: the edited call is refused, the
    model calls again with exactly the edited arguments, and that call is approved at once,
    with no second card: the original's shows it, and the original can no longer run."""
    tool = {"name": "refund", "call_id": "r1", "arguments": ARGS}
    first = await harness.submit(tool=tool, framework="maf")
    approval_id = first["approval_id"]
    await harness.card_ts(approval_id)
    view = await open_form(harness, FINANCE[0], approval_id)
    assert await submit_form(harness, FINANCE[0], view, values(view, amount="11000")) == (200, "")
    [received] = await harness.receiver.wait_delivered(1)
    decision = json.loads(received.body)
    assert decision["resume"]["approved"] is False  # MAF would run the recorded 12000
    edited = decision["edit"]["arguments"]
    assert edited["amount"] == 11000

    again = await harness.submit(
        request_id="af-call-8",
        tool={"name": "refund", "call_id": "r2", "arguments": edited},
        framework="maf",
    )
    assert (again["status"], again["edit_of"]) == ("approved", approval_id)
    assert again["decided_by"][0]["slack_user_id"] == FINANCE[0].id
    assert again["resume"]["approved"] is True
    [_, delivered] = await harness.receiver.wait_delivered(2)
    assert json.loads(delivered.body)["approval_id"] == again["approval_id"]
    await harness.standin.wait_for(
        lambda: "called again" in json.dumps(card(harness, approval_id)["blocks"])
    )
    # the original cannot run any more; the call again runs once, shown on the original's card
    status, refused = await harness.call(
        "POST",
        f"/v1/approvals/{approval_id}/execution",
        json_body={"idempotency_key": "k", "arguments_sha256": edited_sha(decision)},
    )
    assert (status, refused["error"]["code"]) == (409, "called_again")
    assert refused["error"]["called_again_as"] == again["approval_id"]
    status, claimed = await harness.call(
        "POST",
        f"/v1/approvals/{again['approval_id']}/execution",
        json_body={"idempotency_key": "k"},
    )
    assert status == 200, claimed
    # the claim's card update (the call again's) re-renders the original's card
    await harness.standin.wait_for(
        lambda: "Running since" in json.dumps(card(harness, approval_id)["blocks"])
    )
    cards = [
        m
        for m in harness.standin.messages.get(support.CHANNEL, [])
        if again["approval_id"] in str(m.get("blocks")) and approval_id not in str(m.get("blocks"))
    ]
    assert cards == []  # no card of its own


def edited_sha(decision: dict[str, Any]) -> str:
    return str(decision["edit"]["arguments_sha256"])
