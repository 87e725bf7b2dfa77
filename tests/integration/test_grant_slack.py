"""Standing grants through Slack's real paths (docs/grants.md): Approve & allow more opens the
form (views.open with the click's trigger), its signed view_submission goes through bolt's
dispatch, the card shows the grant with Revoke, later calls through the webhook are approved at
once or get a card, and the grant is seen and stopped from the App Home and the command line."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from approvals import models
from bot import interactions
from bot.sandbox.standin import SlackUser
from tests import slack_requests
from tests.integration.test_queue import home_opened
from tests.support import edit_form
from tests.support import harness as support
from tests.support.cli import run_cli
from tests.support.edit_form import card
from tests.support.harness import (
    AGENT_TOKEN,
    CHANNEL,
    FINANCE,
    OTHER_AGENT_TOKEN,
    OUTSIDER,
    REQUESTER,
    SIGNING_SECRET,
    Harness,
)

TOOL = "send_quote"
ARGS: dict[str, Any] = {"account": "ACME", "amount": 1200, "note": "renewal"}
GRANTER = FINANCE[0]


@pytest.fixture
async def harness(database_url: str, tmp_path: Path) -> AsyncIterator[Harness]:
    """The test policy with a first rule letting finance approve quotes and allow more."""
    h = Harness(database_url=database_url, policy_file=tmp_path / "countersign.yml")
    await h.start()
    data = support.test_policy(h.receiver.port).model_dump(
        mode="json", by_alias=True, exclude_none=True
    )
    grants = {"max_seconds": 7200, "max_uses": 10, "scopes": ["session", "agent"]}
    data["rules"].insert(0, {"tool": TOOL, "require": "finance", "grants": grants})
    h.write_policy(data)
    await h.stop_bot()
    await h.start_bot()
    yield h
    await h.stop()


async def quote(
    harness: Harness, request_id: str, session_id: str = "thread-1", **arguments: Any
) -> tuple[int, Any]:
    body = harness.request_body(
        request_id=request_id,
        session_id=session_id,
        tool={"name": TOOL, "call_id": request_id, "arguments": {**ARGS, **arguments}},
    )
    return await harness.call("POST", "/v1/approvals", json_body=body)


async def carded(harness: Harness) -> str:
    status, body = await quote(harness, "q1")
    assert status == 201, body
    await harness.card_ts(body["approval_id"])
    return str(body["approval_id"])


async def open_form(harness: Harness, user: SlackUser, approval_id: str) -> dict[str, Any]:
    return await edit_form.open_form(
        harness, user, approval_id, interactions.GRANT, "Approve & allow more…"
    )


def state(view: dict[str, Any], **chosen: str) -> dict[str, Any]:
    """The form's state as Slack sends it: each input as the form set it, ``chosen`` over it
    (by block id; ``argument:amount`` is written ``argument_amount`` here)."""
    out: dict[str, Any] = {}
    for block in view["blocks"]:
        if block.get("type") != "input":
            continue
        element = block["element"]
        given = chosen.get(block["block_id"].replace(":", "_"))
        if element["type"] == "number_input":
            value = {"type": "number_input", "value": given or element["initial_value"]}
        else:
            picked = given or element["initial_option"]["value"]
            value = {"type": "static_select", "selected_option": {"value": picked}}
        out[block["block_id"]] = {element["action_id"]: value}
    return out


async def submit(
    harness: Harness, user: SlackUser, view: dict[str, Any], values: dict[str, Any]
) -> tuple[int, str]:
    request = slack_requests.view_submission(
        signing_secret=SIGNING_SECRET,
        user_id=user.id,
        user_name=user.name,
        callback_id=interactions.GRANT_VIEW,
        private_metadata=view["private_metadata"],
        values=values,
    )
    return await harness.post_slack_answer(request)


async def granted(harness: Harness, **chosen: str) -> tuple[str, dict[str, Any]]:
    """A quote approved by GRANTER with a grant of ``chosen`` terms; its id and the grant."""
    approval_id = await carded(harness)
    view = await open_form(harness, GRANTER, approval_id)
    assert await submit(harness, GRANTER, view, state(view, **chosen)) == (200, "")
    await harness.standin.wait_for(lambda: "Allowed more" in json.dumps(card(harness, approval_id)))
    status, listed = await harness.call("GET", "/v1/grants")
    assert status == 200
    [grant] = listed["grants"]
    return approval_id, grant


def revoke_click(user: SlackUser, grant_id: str) -> slack_requests.SignedRequest:
    return slack_requests.block_actions(
        signing_secret=SIGNING_SECRET,
        user_id=user.id,
        user_name=user.name,
        action_id=interactions.REVOKE,
        value=grant_id,
        channel_id=CHANNEL,
        block_id=f"revoke_{grant_id}",
        trigger_id="1.revoke",
        button_text="Revoke",
    )


async def test_approve_and_allow_more_then_later_calls_run_without_a_card(
    harness: Harness,
) -> None:
    approval_id = await carded(harness)
    labels = [
        e["text"]["text"]
        for b in card(harness, approval_id)["blocks"]
        if b.get("type") == "actions"
        for e in b["elements"]
    ]
    assert labels == ["Approve", "Approve & allow more…", "Deny"]
    view = await open_form(harness, GRANTER, approval_id)
    inputs = {b["block_id"]: b["element"] for b in view["blocks"] if b.get("type") == "input"}
    assert [o["value"] for o in inputs["scope"]["options"]] == ["session", "agent"]
    assert inputs["seconds"]["initial_option"]["value"] == "3600"
    assert max(int(o["value"]) for o in inputs["seconds"]["options"]) == 7200
    assert inputs["uses"]["max_value"] == "10"
    assert [o["value"] for o in inputs["argument:amount"]["options"]] == [
        "exactly",
        "any",
        "at_most",
    ]
    assert [o["value"] for o in inputs["argument:account"]["options"]] == ["exactly", "any"]
    values = state(view, uses="2", argument_amount="at_most", argument_note="any")
    assert await submit(harness, GRANTER, view, values) == (200, "")
    [decision] = await harness.receiver.wait_delivered(1)
    assert json.loads(decision.body)["status"] == "approved"
    await harness.standin.wait_for(lambda: "Allowed more" in json.dumps(card(harness, approval_id)))
    shown = json.dumps(card(harness, approval_id)["blocks"])
    assert "0 of 2 calls used" in shown
    assert interactions.REVOKE in shown

    # a later quote within the grant: approved at once, no card, the agent called back
    cards_before = len(harness.standin.messages.get(CHANNEL, []))
    status, later = await quote(harness, "q2", amount=900, note="another")
    assert status == 201, later
    assert later["status"] == "approved"
    assert later["grant"]["use"] == 1
    assert later["grant"]["of"] == 2
    assert later["decided_by"][0]["slack_user_id"] == GRANTER.id
    assert later["decided_by"][0]["grant_id"] == later["grant"]["id"]
    await harness.receiver.wait_delivered(2)
    assert len(harness.standin.messages.get(CHANNEL, [])) == cards_before
    await harness.standin.wait_for(
        lambda: "1 of 2 calls used" in json.dumps(card(harness, approval_id))
    )
    # claimable once, as any approval
    status, claimed = await harness.call(
        "POST",
        f"/v1/approvals/{later['approval_id']}/execution",
        json_body={"idempotency_key": "k"},
    )
    assert status == 200, claimed
    # above the amount, or another account: a card
    status, above = await quote(harness, "q3", amount=1201)
    assert (status, above["status"]) == (201, "pending")
    await harness.card_ts(above["approval_id"])
    status, other = await quote(harness, "q4", account="GLOBEX")
    assert (status, other["status"]) == (201, "pending")
    # the second use, then used up
    assert (await quote(harness, "q5"))[1]["grant"]["use"] == 2
    assert (await quote(harness, "q6"))[1]["status"] == "pending"
    await harness.standin.wait_for(lambda: "used up" in json.dumps(card(harness, approval_id)))
    status, listed = await harness.call("GET", "/v1/grants")
    assert (status, listed) == (200, {"grants": []})


async def test_a_forged_submission_approves_nothing_and_is_recorded(harness: Harness) -> None:
    approval_id = await carded(harness)
    view = await open_form(harness, GRANTER, approval_id)
    # more uses than the policy allows: shown in the form, which stays open
    status, answer = await submit(harness, GRANTER, view, state(view, uses="11"))
    assert status == 200
    assert json.loads(answer)["response_action"] == "errors"
    assert "uses" in json.loads(answer)["errors"]
    # a scope no form offers, at most on a string: acked, refused whole, recorded
    forged = state(view, scope="everyone", argument_account="at_most")
    assert await submit(harness, GRANTER, view, forged) == (200, "")
    await harness.standin.wait_for(
        lambda: any("Nothing was approved" in e for e in harness.ephemerals_for(GRANTER))
    )
    status, body = await harness.call("GET", f"/v1/approvals/{approval_id}")
    assert body["status"] == "pending"
    status, events = await harness.call("GET", f"/v1/approvals/{approval_id}/events")
    outcomes = [e.get("outcome") for e in events["events"] if e["kind"] == "attempt"]
    assert outcomes == ["invalid_grant"]
    assert (await harness.call("GET", "/v1/grants"))[1] == {"grants": []}


async def test_the_requester_cannot_grant_their_own_call(harness: Harness) -> None:
    approval_id = await carded(harness)
    view = await open_form(harness, REQUESTER, approval_id)
    assert await submit(harness, REQUESTER, view, state(view)) == (200, "")
    await harness.standin.wait_for(lambda: bool(harness.ephemerals_for(REQUESTER)))
    _, body = await harness.call("GET", f"/v1/approvals/{approval_id}")
    assert body["status"] == "pending"
    assert (await harness.call("GET", "/v1/grants"))[1] == {"grants": []}


async def test_revoke_from_the_card_by_a_role_holder_not_by_others(harness: Harness) -> None:
    approval_id, grant = await granted(harness)
    assert await harness.post_slack(revoke_click(OUTSIDER, grant["grant_id"])) == 200
    await harness.standin.wait_for(
        lambda: any("Not revoked" in e for e in harness.ephemerals_for(OUTSIDER))
    )
    assert (await quote(harness, "q2"))[1]["status"] == "approved"
    assert await harness.post_slack(revoke_click(FINANCE[1], grant["grant_id"])) == 200
    await harness.standin.wait_for(lambda: "revoked" in json.dumps(card(harness, approval_id)))
    assert interactions.REVOKE not in json.dumps(card(harness, approval_id)["blocks"])
    assert (await quote(harness, "q3"))[1]["status"] == "pending"


async def test_the_granter_leaving_the_group_stops_the_grant(harness: Harness) -> None:
    await granted(harness)
    members = harness.standin.usergroups["S0FINANCE"]
    harness.standin.set_usergroup("S0FINANCE", [m for m in members if m != GRANTER.id])
    assert (await quote(harness, "q2"))[1]["status"] == "pending"
    harness.standin.set_usergroup("S0FINANCE", members)
    assert (await quote(harness, "q3"))[1]["status"] == "approved"


async def test_with_its_card_deleted_the_grant_works_and_is_revoked_from_home_and_cli(
    harness: Harness, database_url: str
) -> None:
    approval_id, grant = await granted(harness, scope="agent")
    ts = await harness.card_ts(approval_id)
    harness.standin.messages[CHANNEL] = [
        m for m in harness.standin.messages[CHANNEL] if m.get("ts") != ts
    ]
    status, later = await quote(harness, "q2", session_id="another-session")
    assert (status, later["status"]) == (201, "approved")
    # the App Home lists it with Revoke, for its granter
    assert await harness.post_slack(home_opened(GRANTER.id)) == 200
    await harness.standin.wait_for(lambda: GRANTER.id in harness.standin.home)
    home = json.dumps(harness.standin.home[GRANTER.id])
    assert grant["grant_id"] in home
    assert "1 of 5 calls used" in home  # the form offers 5 unless changed
    # the command line lists it and revokes it
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLACK_", "DATABASE_URL", "LOG_LEVEL"))
    }
    env["DATABASE_URL"] = database_url
    listed = await run_cli("grants", "list", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    [line] = [json.loads(x) for x in listed.stdout.splitlines()]
    assert (line["grant_id"], line["uses"], line["state"]) == (grant["grant_id"], 1, "live")
    revoked = await run_cli("grants", "revoke", grant["grant_id"], env=env)
    assert revoked.returncode == 0, revoked.stderr
    again = await run_cli("grants", "revoke", grant["grant_id"], env=env)
    assert again.returncode == 1
    assert "revoked already" in again.stderr
    assert (await quote(harness, "q3"))[1]["status"] == "pending"
    everything = await run_cli("grants", "list", "--all", env=env)
    assert "revoked" in everything.stdout


async def test_get_grants_is_the_agents_own(harness: Harness) -> None:
    await granted(harness)
    status, body = await harness.call("GET", "/v1/grants", token=OTHER_AGENT_TOKEN)
    assert (status, body) == (200, {"grants": []})
    status, body = await harness.call("GET", "/v1/grants", token=None)
    assert status == 401
    status, body = await harness.call("GET", "/v1/grants", token=AGENT_TOKEN)
    assert len(body["grants"]) == 1
    assert body["grants"][0]["constraints"]["account"] == {"kind": "exactly", "value": "ACME"}
    assert models.APPROVAL_ID.fullmatch(body["grants"][0]["approval_id"])
