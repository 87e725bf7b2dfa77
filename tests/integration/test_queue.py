"""The pending queue in Slack: the App Home tab and /approvals list what the viewer may decide
(with working buttons) and what they requested (with status)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlencode

import pytest

from approvals import service
from bot import messages
from tests import slack_requests
from tests.support.harness import CHANNEL, FINANCE, OUTSIDER, REQUESTER, SIGNING_SECRET, Harness
from tests.support.response_urls import ResponseUrls


@pytest.fixture
async def response_urls() -> AsyncIterator[ResponseUrls]:
    server = ResponseUrls()
    await server.start()
    yield server
    await server.stop()


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


def slash(
    user_id: str,
    response_url: str,
    *,
    channel_id: str = CHANNEL,
    signing_secret: str = SIGNING_SECRET,
) -> slack_requests.SignedRequest:
    body = urlencode(
        {
            "token": "legacy",
            "team_id": "T0TEAM",
            "channel_id": channel_id,
            "user_id": user_id,
            "user_name": "someone",
            "command": "/approvals",
            "text": "",
            "api_app_id": "A0COUNTERSIGN",
            "response_url": response_url,
            "trigger_id": "1.2.3",
        }
    )
    return slack_requests.raw(body, signing_secret=signing_secret)


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


async def test_slash_command_answers_with_the_queue(
    harness: Harness, response_urls: ResponseUrls
) -> None:
    mine = (await harness.submit())["approval_id"]
    await harness.card_ts(mine)
    url = response_urls.url()
    assert await harness.post_slack(slash(FINANCE[1].id, url)) == 200
    answer = await response_urls.wait_answer(url)
    assert answer["response_type"] == "ephemeral"  # shown to the person who asked, alone
    assert answer["text"] == messages.HOME_DECIDE
    assert mine in json.dumps(answer["blocks"])
    url = response_urls.url()
    assert await harness.post_slack(slash(OUTSIDER.id, url)) == 200
    nothing = await response_urls.wait_answer(url)
    assert "Nothing is waiting" in json.dumps(nothing["blocks"])
    # the answer goes back through the command's response_url, never chat.postEphemeral
    assert harness.standin.ephemerals == []


async def test_slash_command_answers_where_the_bot_is_not(
    harness: Harness, response_urls: ResponseUrls
) -> None:
    # chat.postEphemeral is refused in a DM or a channel the bot is not in (channel_not_found,
    # not_in_channel); the response_url answers wherever the command was typed
    mine = (await harness.submit())["approval_id"]
    await harness.card_ts(mine)
    for channel_id in ("D0SOMEDM", "C0NOBOTHERE"):
        url = response_urls.url()
        request = slash(FINANCE[1].id, url, channel_id=channel_id)
        assert await harness.post_slack(request) == 200
        answer = await response_urls.wait_answer(url)
        assert mine in json.dumps(answer["blocks"])


@pytest.mark.parametrize("secret", ["", "not-the-signing-secret"], ids=["unsigned", "forged"])
async def test_an_unsigned_slash_command_posts_nowhere(
    harness: Harness, response_urls: ResponseUrls, secret: str
) -> None:
    # bolt checks the signature before any listener runs: a response_url that Slack did not
    # sign can't make the bot POST anywhere
    await harness.card_ts((await harness.submit())["approval_id"])
    request = slash(FINANCE[1].id, response_urls.url(), signing_secret=secret)
    if not secret:
        request = slack_requests.SignedRequest(
            body=request.body, headers={"Content-Type": slack_requests.FORM_CONTENT_TYPE}
        )
    assert await harness.post_slack(request) == 401
    await harness.settle_quietly()
    assert response_urls.posted == 0
    assert harness.standin.ephemerals == []


def mrkdwn(view: dict[str, object]) -> str:
    """Every mrkdwn string of a view, joined."""
    out = []
    for b in view["blocks"]:  # type: ignore[attr-defined]
        for item in [b.get("text"), *b.get("fields", []), *b.get("elements", [])]:
            if isinstance(item, dict) and item.get("type") == "mrkdwn":
                out.append(str(item["text"]))
    return "\n".join(out)


async def test_the_home_shows_whole_arguments_or_sends_to_the_card(
    harness: Harness, response_urls: ResponseUrls
) -> None:
    # issue 8 item 7: the IBAN sat past the queue's first 300 characters, beside a live Approve
    whole = (
        await harness.submit(
            tool={
                "name": "transfer_money",
                "call_id": "c1",
                "arguments": {"a": "x" * 320, "iban": "ATTACKER-IBAN-XX00", "amount": 10},
            },
            summary="Pay `*Pre-approved by CFO*`",
        )
    )["approval_id"]
    cut = (
        await harness.submit(
            request_id="r2",
            tool={
                "name": "transfer_money",
                "call_id": "c2",
                "arguments": {"blob": "y" * 20_000, "amount": 10},
            },
        )
    )["approval_id"]
    await harness.card_ts(whole)
    cut_ts = await harness.card_ts(cut)

    assert await harness.post_slack(home_opened(FINANCE[0].id)) == 200
    await harness.standin.wait_for(lambda: FINANCE[0].id in harness.standin.home)
    view = harness.standin.home[FINANCE[0].id]
    shown = mrkdwn(view)
    assert "ATTACKER-IBAN-XX00" in shown
    assert "*Pre-approved" not in shown  # the summary's markup is inert
    assert "truncated:" in shown
    # the request that fits has its buttons; the one cut to fit has a link to its card instead
    assert buttons(view) == [whole]
    permalink = f"standin.slack.com/archives/{CHANNEL}/p{cut_ts.replace('.', '')}"
    assert permalink in shown

    # the slash command renders the same way
    url = response_urls.url()
    assert await harness.post_slack(slash(FINANCE[0].id, url)) == 200
    answer = await response_urls.wait_answer(url)
    assert buttons(answer) == [whole]
    assert "ATTACKER-IBAN-XX00" in mrkdwn(answer)
    assert permalink in mrkdwn(answer)


async def test_a_deny_from_the_home_goes_through_the_modal(harness: Harness) -> None:
    approval_id = (await harness.submit())["approval_id"]
    await harness.card_ts(approval_id)
    request = slack_requests.block_actions(
        signing_secret=SIGNING_SECRET,
        user_id=FINANCE[0].id,
        action_id="countersign_deny",
        value=approval_id,
        trigger_id="444.home",
    )
    assert await harness.post_slack(_from_home(request.body)) == 200
    await harness.standin.wait_for(lambda: bool(harness.standin.views))
    [opened] = harness.standin.views
    assert opened["trigger_id"] == "444.home"
    _, body = await harness.call("GET", f"/v1/approvals/{approval_id}")
    assert body["status"] == "pending"  # nothing is decided until the modal is submitted
    metadata = str(opened["view"]["private_metadata"])
    assert await harness.submit_deny(FINANCE[0], metadata, "wrong amount") == 200
    [received] = await harness.receiver.wait_delivered(1)
    decision = json.loads(received.body)
    assert decision["status"] == "denied"
    assert "wrong amount" in decision["reason"]


def context_texts(blocks: list[dict[str, Any]]) -> str:
    return " ".join(e["text"] for b in blocks if b["type"] == "context" for e in b["elements"])


async def test_the_queue_counts_what_it_does_not_show(
    harness: Harness, response_urls: ResponseUrls, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 120 waiting: the Home shows 20 and the command 10; each says how many more wait (the
    # count was taken after the cut: 20 shown and nothing said, or "10 more" for 110)
    for start in range(0, 120, 20):
        await asyncio.gather(
            *(harness.submit(request_id=f"q{i}") for i in range(start, start + 20))
        )
    assert await harness.post_slack(home_opened(FINANCE[0].id)) == 200
    await harness.standin.wait_for(lambda: FINANCE[0].id in harness.standin.home)
    home = harness.standin.home.pop(FINANCE[0].id)
    assert len(buttons(home)) == 20
    said = context_texts(home["blocks"])
    assert messages.QUEUE_MORE.format(count=100) in said
    assert "not checked" not in said

    url = response_urls.url()
    assert await harness.post_slack(slash(FINANCE[1].id, url)) == 200
    answer = await response_urls.wait_answer(url)
    assert len(buttons(answer)) == 10
    assert messages.QUEUE_MORE.format(count=110) in context_texts(answer["blocks"])

    # past the window of requests judged for the viewer, the older ones are counted apart
    monkeypatch.setattr(service, "QUEUE_WINDOW", 50)
    assert await harness.post_slack(home_opened(FINANCE[0].id)) == 200
    await harness.standin.wait_for(lambda: FINANCE[0].id in harness.standin.home)
    said = context_texts(harness.standin.home[FINANCE[0].id]["blocks"])
    assert messages.QUEUE_MORE.format(count=30) in said
    assert messages.QUEUE_UNJUDGED.format(count=70) in said

    # the older ones are counted no further than UNJUDGED_COUNTED: exactly that many is told
    # as a figure, one more as "more than"
    for counted, told in (
        (70, messages.QUEUE_UNJUDGED.format(count=70)),
        (69, messages.QUEUE_UNJUDGED_MORE.format(count=69)),
    ):
        monkeypatch.setattr(service, "UNJUDGED_COUNTED", counted)
        harness.standin.home.pop(FINANCE[0].id, None)
        assert await harness.post_slack(home_opened(FINANCE[0].id)) == 200
        await harness.standin.wait_for(lambda: FINANCE[0].id in harness.standin.home)
        said = context_texts(harness.standin.home[FINANCE[0].id]["blocks"])
        assert told in said
        assert messages.QUEUE_MORE.format(count=30) in said
