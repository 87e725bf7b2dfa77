"""The pending queue in Slack: the App Home tab and /approvals list what the viewer may decide
(with working buttons) and what they requested (with status)."""

from __future__ import annotations

import json
import time
from urllib.parse import urlencode

from tests import slack_requests
from tests.support.harness import CHANNEL, FINANCE, OUTSIDER, REQUESTER, SIGNING_SECRET, Harness


def home_opened(user_id: str) -> slack_requests.SignedRequest:
    body = json.dumps(
        {
            "token": "legacy",
            "team_id": "T0TEAM",
            "api_app_id": "A0COUNTERSIGN",
            "type": "event_callback",
            "event_id": f"Ev{int(time.time() * 1000)}",
            "event_time": int(time.time()),
            "event": {
                "type": "app_home_opened",
                "user": user_id,
                "channel": "D0HOME",
                "tab": "home",
                "event_ts": f"{time.time():.6f}",
            },
        }
    )
    return slack_requests.raw(body, signing_secret=SIGNING_SECRET, content_type="application/json")


def slash(user_id: str) -> slack_requests.SignedRequest:
    body = urlencode(
        {
            "token": "legacy",
            "team_id": "T0TEAM",
            "channel_id": CHANNEL,
            "user_id": user_id,
            "user_name": "someone",
            "command": "/approvals",
            "text": "",
            "api_app_id": "A0COUNTERSIGN",
            "response_url": "https://hooks.slack.com/commands/T0TEAM/1/x",
            "trigger_id": "1.2.3",
        }
    )
    return slack_requests.raw(body, signing_secret=SIGNING_SECRET)


def buttons(view: dict[str, object]) -> list[str]:
    return [
        str(e["value"])
        for b in view["blocks"]  # type: ignore[attr-defined]
        for e in b.get("elements", [])
        if e.get("action_id") == "countersign_approve"
    ]


async def test_home_tab_lists_the_queue_and_decides_from_it(harness: Harness) -> None:
    mine = (await harness.submit())["approval_id"]  # transfer_money: role finance
    other = (
        await harness.submit(
            request_id="r2", tool={"name": "deploy", "call_id": "d", "arguments": {}}
        )
    )["approval_id"]  # role approvers: FINANCE[0] may not decide it
    await harness.card_ts(mine)
    assert await harness.post_slack(home_opened(FINANCE[0].id)) == 200
    await harness.standin.wait_for(lambda: FINANCE[0].id in harness.standin.home)
    view = harness.standin.home[FINANCE[0].id]
    assert buttons(view) == [mine]
    assert other not in json.dumps(view)

    # the requester's home: nothing to decide (their own request is never theirs to decide)
    await harness.post_slack(home_opened(REQUESTER.id))
    await harness.standin.wait_for(lambda: REQUESTER.id in harness.standin.home)
    home = harness.standin.home[REQUESTER.id]
    assert buttons(home) == []
    assert f"({mine}) · pending" in json.dumps(home, ensure_ascii=False)

    # a button in the home tab works like the card's, and the home is published again
    del harness.standin.home[FINANCE[0].id]
    request = slack_requests.block_actions(
        signing_secret=SIGNING_SECRET,
        user_id=FINANCE[0].id,
        action_id="countersign_approve",
        value=mine,
    )
    assert await harness.post_slack(_from_home(request.body)) == 200
    await harness.receiver.wait_delivered(1)
    await harness.standin.wait_for(lambda: FINANCE[0].id in harness.standin.home)
    assert buttons(harness.standin.home[FINANCE[0].id]) == []


def _from_home(form_body: str) -> slack_requests.SignedRequest:
    """The same click, as Slack sends it from the App Home (a view container, no channel)."""
    from urllib.parse import parse_qs

    payload = json.loads(parse_qs(form_body)["payload"][0])
    payload["container"] = {"type": "view", "view_id": "VHOME"}
    payload.pop("channel", None)
    payload.pop("message", None)
    payload["view"] = {"id": "VHOME", "type": "home", "blocks": []}
    return slack_requests.raw(
        urlencode({"payload": json.dumps(payload)}), signing_secret=SIGNING_SECRET
    )


async def test_slash_command_answers_with_the_queue(harness: Harness) -> None:
    mine = (await harness.submit())["approval_id"]
    await harness.card_ts(mine)
    assert await harness.post_slack(slash(FINANCE[1].id)) == 200
    await harness.standin.wait_for(lambda: bool(harness.ephemerals_for(FINANCE[1])))
    [answer] = [e for e in harness.standin.ephemerals if e["user"] == FINANCE[1].id]
    assert mine in json.dumps(answer["blocks"])
    assert await harness.post_slack(slash(OUTSIDER.id)) == 200
    await harness.standin.wait_for(lambda: bool(harness.ephemerals_for(OUTSIDER)))
    [nothing] = [e for e in harness.standin.ephemerals if e["user"] == OUTSIDER.id]
    assert "Nothing is waiting" in json.dumps(nothing["blocks"])
