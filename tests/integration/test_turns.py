"""Lead-facing turns on real parts: guards decide, escalations go to the internal channel only,
and the lead's own Slack identity can never settle what their turn produced."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.agent_receiver import verify
from tests.support.harness import (
    CALLBACK_SECRET,
    CHANNEL,
    LEAD_EMAIL,
    LEAD_TWIN,
    OPERATOR,
    OTHER_AGENT_TOKEN,
    SALES_LEAD,
    SUPPORT,
    Harness,
)


def turn(harness: Harness, **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "session_id": "wa-lena-1",
        "request_id": "turn-1",
        "channel": "whatsapp",
        "lead": {"id": "lead-42", "name": "Lena", "phone": "+351900000000", "email": LEAD_EMAIL},
        "operator": {"slack_user_id": OPERATOR.id, "email": OPERATOR.email, "name": "Omar"},
        "funnel": {"stage": "qualified", "deal_value": 12000},
        "tool": {"name": "grant_discount", "call_id": "call-9", "arguments": {"discount_pct": 15}},
        "callback_url": harness.receiver.url,
    }
    body.update(overrides)
    return body


async def post_turn(harness: Harness, **overrides: Any) -> dict[str, Any]:
    status, body = await harness.call("POST", "/v1/turns", json_body=turn(harness, **overrides))
    assert status == 200, body
    assert isinstance(body, dict)
    return body


async def test_over_limit_discount_escalates_to_the_internal_channel_only(harness: Harness) -> None:
    answer = await post_turn(harness)
    assert answer["verdict"] == "escalate"
    assert answer["rule"] == "tools.grant_discount.limits[0].discount_pct"
    assert answer["reason_code"] == "over_limit"
    assert "checking this with my team" in answer["message"]
    assert "?" not in answer["message"]
    approval_id = answer["approval_id"]
    assert [c["detail"] for c in answer["evaluated"]] == ["arguments.discount_pct 15 > 10"]

    ts = await harness.card_ts(approval_id)
    card = json.dumps(harness.standin.card(CHANNEL, ts)["blocks"])
    assert "Lead-facing turn" in card
    assert "arguments.discount_pct 15 &gt; 10" in card
    # nothing is ever addressed to the lead: one message, in the reviewer channel, no DMs
    assert [c for c, posted in harness.standin.messages.items() if posted] == [CHANNEL]
    assert harness.standin.ephemerals == []

    _, approval = await harness.call("GET", f"/v1/approvals/{approval_id}")
    assert approval["required"]["role"] == "sales-lead"
    assert approval["requester"]["slack_user_id"] == OPERATOR.id  # the operator, never the lead
    assert approval["request_id"] == "turn:call-9"

    # the lead's own Slack account, with the role, is refused
    await harness.click(LEAD_TWIN, approval_id)
    [why] = await harness.wait_ephemeral(LEAD_TWIN)
    assert "outside party" in why
    _, approval = await harness.call("GET", f"/v1/approvals/{approval_id}")
    assert approval["status"] == "pending"

    await harness.click(SALES_LEAD, approval_id)
    [received] = await harness.receiver.wait_delivered(1)
    assert verify(CALLBACK_SECRET, received.body, received.signature)
    decision = json.loads(received.body)
    assert decision["status"] == "approved"
    assert decision["session_id"] == "wa-lena-1"
    assert decision["tool"]["call_id"] == "call-9"
    assert decision["arguments_sha256"] == approval["arguments_sha256"]
    assert harness.ephemerals_for(LEAD_TWIN) == [why]  # and nothing else ever reached them
    assert all(e["channel"] == CHANNEL for e in harness.standin.ephemerals)


async def test_repeated_turn_reuses_the_pending_approval(harness: Harness) -> None:
    first = await post_turn(harness)
    again = await post_turn(harness, request_id="turn-2")  # the agent asks again next turn
    assert again["verdict"] == "escalate"
    assert again["approval_id"] == first["approval_id"]
    assert again["approval_status"] == "pending"
    await harness.card_ts(first["approval_id"])
    await harness.settle_quietly()
    assert len(harness.standin.messages[CHANNEL]) == 1  # no duplicate card


async def test_allow_and_refuse_need_no_human(harness: Harness) -> None:
    allowed = await post_turn(
        harness,
        tool={"name": "grant_discount", "call_id": "c1", "arguments": {"discount_pct": 10}},
    )
    assert allowed["verdict"] == "allow"
    assert "approval_id" not in allowed
    refused = await post_turn(
        harness,
        request_id="turn-2",
        funnel={"stage": "new"},
        tool={"name": "send_proposal", "call_id": "c2", "arguments": {}},
    )
    assert refused["verdict"] == "refuse"
    assert refused["reason_code"] == "stage_not_allowed"
    assert refused["message"]
    unknown = await post_turn(
        harness, request_id="turn-3", tool={"name": "wire_money", "call_id": "c3", "arguments": {}}
    )
    assert (unknown["verdict"], unknown["reason_code"]) == ("refuse", "unknown_tool")
    await harness.settle_quietly()
    assert harness.standin.messages.get(CHANNEL, []) == []


async def test_operator_permission_is_checked(harness: Harness) -> None:
    refund = {"name": "issue_refund", "call_id": "r1", "arguments": {"amount": 120}}
    allowed = await post_turn(
        harness, tool=refund, operator={"slack_user_id": SUPPORT.id, "name": "Sue"}
    )
    assert allowed["verdict"] == "allow"
    refused = await post_turn(harness, request_id="turn-2", tool=refund)
    assert (refused["verdict"], refused["reason_code"]) == ("refuse", "operator_not_permitted")
    missing = await post_turn(harness, request_id="turn-3", tool=refund, operator=None)
    assert (missing["verdict"], missing["reason_code"]) == ("refuse", "missing_fact")
    assert "operator is missing" in json.dumps(missing["evaluated"])


async def test_without_operator_the_agent_owner_is_the_requester(harness: Harness) -> None:
    answer = await post_turn(harness, operator=None)
    assert answer["verdict"] == "escalate"
    _, approval = await harness.call("GET", f"/v1/approvals/{answer['approval_id']}")
    assert approval["requester"] == {"email": "sales-team@example.com", "name": "Sales team"}


async def test_lead_as_operator_is_never_the_requester(harness: Harness) -> None:
    answer = await post_turn(harness, operator={"email": LEAD_EMAIL.upper()})
    assert answer["verdict"] == "refuse"
    assert answer["reason_code"] == "missing_fact"
    await harness.settle_quietly()
    assert harness.standin.messages.get(CHANNEL, []) == []


async def test_verdicts_are_audited_per_session(harness: Harness) -> None:
    await post_turn(harness)
    await post_turn(
        harness,
        request_id="turn-2",
        tool={"name": "grant_discount", "call_id": "c1", "arguments": {"discount_pct": 5}},
    )
    await post_turn(harness, session_id="someone-else", request_id="turn-3")
    status, body = await harness.call("GET", "/v1/turns?session_id=wa-lena-1")
    assert status == 200
    turns = body["turns"]
    assert [(t["request_id"], t["verdict"]) for t in turns] == [
        ("turn-1", "escalate"),
        ("turn-2", "allow"),
    ]
    assert all(len(t["inputs_sha256"]) == 64 and t["policy_version"] for t in turns)
    # another agent sees none of it
    status, other = await harness.call(
        "GET", "/v1/turns?session_id=wa-lena-1", token=OTHER_AGENT_TOKEN
    )
    assert (status, other["turns"]) == (200, [])


async def test_same_turn_same_policy_same_verdict(harness: Harness) -> None:
    answers = [
        await post_turn(
            harness,
            request_id=f"t{i}",
            tool={"name": "send_proposal", "call_id": f"p{i}", "arguments": {}},
        )
        for i in range(3)
    ]
    assert len({(a["verdict"], a["rule"], a["reason_code"], a["message"]) for a in answers}) == 1


@pytest.mark.parametrize(
    ("change", "fields"),
    [
        ({"channel": "telegram"}, ["channel"]),
        ({"lead": {"name": "no id"}}, ["lead.id"]),
        ({"operator": {"name": "nobody"}}, ["operator"]),
        ({"tool": {"name": "x", "arguments": {}}}, ["tool.call_id"]),
        ({"lead": {"id": "l", "email": "not-an-email"}}, ["lead.email"]),
    ],
)
async def test_bad_turns_name_the_field(
    harness: Harness, change: dict[str, Any], fields: list[str]
) -> None:
    status, body = await harness.call("POST", "/v1/turns", json_body=turn(harness, **change))
    assert status == 422
    assert [f["field"] for f in body["error"]["fields"]] == fields


async def test_turns_need_auth_and_a_session(harness: Harness) -> None:
    status, _ = await harness.call("POST", "/v1/turns", json_body=turn(harness), token=None)
    assert status == 401
    status, body = await harness.call("GET", "/v1/turns")
    assert status == 422
    assert body["error"]["fields"][0]["field"] == "session_id"
