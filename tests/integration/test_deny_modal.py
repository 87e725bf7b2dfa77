"""Deny opens a modal (views.open with the click's trigger_id); the reason, required where the
rule says so, reaches the agent in the decision and in ``resume``."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlencode

import pytest

from tests import slack_requests
from tests.support.harness import APPROVER, FINANCE, SIGNING_SECRET, Harness


async def _open_modal(harness: Harness, approval_id: str, trigger_id: str) -> dict[str, object]:
    await harness.click_button(APPROVER, approval_id, "countersign_deny", trigger_id=trigger_id)
    await harness.standin.wait_for(
        lambda: any(v["trigger_id"] == trigger_id for v in harness.standin.views)
    )
    return next(v for v in harness.standin.views if v["trigger_id"] == trigger_id)


async def test_deny_with_a_reason_reaches_the_agent(harness: Harness) -> None:
    approval_id = (await harness.submit(tool={"name": "deploy", "call_id": "d1", "arguments": {}}))[
        "approval_id"
    ]
    await harness.card_ts(approval_id)
    opened = await _open_modal(harness, approval_id, "111.aaa")
    view = opened["view"]
    assert isinstance(view, dict)
    assert json.loads(view["private_metadata"])["approval_id"] == approval_id
    assert view["callback_id"] == "countersign_deny_reason"
    # the modal opened; nothing is decided until it is submitted
    _, body = await harness.call("GET", f"/v1/approvals/{approval_id}")
    assert body["status"] == "pending"

    status = await harness.submit_deny(
        APPROVER, str(view["private_metadata"]), "the change window is closed", preset="0"
    )
    assert status == 200
    [received] = await harness.receiver.wait_delivered(1)
    decision = json.loads(received.body)
    assert decision["status"] == "denied"
    assert "Amount looks wrong: the change window is closed" in decision["reason"]
    assert "not executed; do not retry it unchanged" in decision["reason"]
    assert decision["resume"]["reason"] == decision["reason"]


async def test_a_required_reason_is_enforced_in_the_modal(harness: Harness) -> None:
    approval_id = (
        await harness.submit(tool={"name": "delete_db", "call_id": "x1", "arguments": {}})
    )["approval_id"]
    await harness.card_ts(approval_id)
    assert (await harness.call("GET", f"/v1/approvals/{approval_id}"))[1]["required"] == {
        "role": "approvers",
        "approvals": 1,
        "deny_reason": True,
    }
    opened = await _open_modal(harness, approval_id, "222.bbb")
    view = opened["view"]
    assert isinstance(view, dict)
    request = slack_requests.view_submission(
        signing_secret=SIGNING_SECRET,
        user_id=APPROVER.id,
        callback_id="countersign_deny_reason",
        private_metadata=str(view["private_metadata"]),
        values={"reason": {"reason_input": {"type": "plain_text_input", "value": "   "}}},
    )
    status, answer = await harness.post_slack_answer(request)
    assert status == 200
    assert json.loads(answer) == {
        "response_action": "errors",
        "errors": {"reason": "This rule needs a reason to deny."},
    }
    _, body = await harness.call("GET", f"/v1/approvals/{approval_id}")
    assert body["status"] == "pending"
    assert await harness.submit_deny(APPROVER, str(view["private_metadata"]), "too risky") == 200
    [received] = await harness.receiver.wait_delivered(1)
    assert "too risky" in json.loads(received.body)["reason"]


async def test_an_ineligible_deny_is_refused_after_the_modal(harness: Harness) -> None:
    approval_id = (await harness.submit(tool={"name": "deploy", "call_id": "d2", "arguments": {}}))[
        "approval_id"
    ]
    await harness.card_ts(approval_id)
    await harness.click(FINANCE[0], approval_id, "countersign_deny", reason="no")  # not an approver
    [why] = await harness.wait_ephemeral(FINANCE[0])
    assert "approvers" in why
    _, body = await harness.call("GET", f"/v1/approvals/{approval_id}")
    assert body["status"] == "pending"


async def test_a_forged_modal_is_ignored(harness: Harness) -> None:
    approval_id = (await harness.submit(tool={"name": "deploy", "call_id": "d3", "arguments": {}}))[
        "approval_id"
    ]
    for metadata in ("not json", json.dumps({"approval_id": "apr_../x"}), json.dumps([1])):
        request = slack_requests.view_submission(
            signing_secret=SIGNING_SECRET,
            user_id=APPROVER.id,
            callback_id="countersign_deny_reason",
            private_metadata=metadata,
            values={},
        )
        assert await harness.post_slack(request) == 200
    await harness.settle_quietly()
    _, body = await harness.call("GET", f"/v1/approvals/{approval_id}")
    assert body["status"] == "pending"


def _without_trigger(request: slack_requests.SignedRequest) -> slack_requests.SignedRequest:
    """The same signed click with no ``trigger_id``: no modal can be opened for it."""
    payload = json.loads(parse_qs(request.body)["payload"][0])
    del payload["trigger_id"]
    return slack_requests.raw(
        urlencode({"payload": json.dumps(payload)}), signing_secret=SIGNING_SECRET
    )


@pytest.mark.parametrize(
    ("tool", "reason_required"),
    [("delete_db", True), ("deploy", False)],
    ids=["required", "optional"],
)
async def test_a_deny_without_a_trigger_never_settles(
    harness: Harness, tool: str, reason_required: bool
) -> None:
    approval_id = (await harness.submit(tool={"name": tool, "call_id": "t1", "arguments": {}}))[
        "approval_id"
    ]
    await harness.card_ts(approval_id)
    _, before = await harness.call("GET", f"/v1/approvals/{approval_id}")
    assert before["required"].get("deny_reason", False) is reason_required
    click = slack_requests.block_actions(
        signing_secret=SIGNING_SECRET,
        user_id=APPROVER.id,
        action_id="countersign_deny",
        value=approval_id,
    )
    assert await harness.post_slack(_without_trigger(click)) == 200
    [why] = await harness.wait_ephemeral(APPROVER)
    assert "Deny form did not open" in why
    assert "nothing was decided" in why
    await harness.settle_quietly()
    _, body = await harness.call("GET", f"/v1/approvals/{approval_id}")
    assert body["status"] == "pending"
    assert harness.receiver.received == []
    assert harness.standin.views == []


async def test_a_deny_whose_modal_fails_to_open_never_settles(harness: Harness) -> None:
    approval_id = (await harness.submit(tool={"name": "deploy", "call_id": "t2", "arguments": {}}))[
        "approval_id"
    ]
    await harness.card_ts(approval_id)
    harness.standin.fail("views.open", status=200, error="expired_trigger_id")
    await harness.click_button(APPROVER, approval_id, "countersign_deny", trigger_id="333.ccc")
    [why] = await harness.wait_ephemeral(APPROVER)
    assert "Deny form did not open" in why
    assert "nothing was decided" in why
    await harness.settle_quietly()
    _, body = await harness.call("GET", f"/v1/approvals/{approval_id}")
    assert body["status"] == "pending"
    assert harness.receiver.received == []
