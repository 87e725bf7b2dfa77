"""The reviewer's side of Approve with edits, as Slack sends it: the card's Edit & approve
button (a signed block_actions naming the version its card showed), the form the bot opens, and
its submission (a signed view_submission)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from bot import interactions
from bot.sandbox.standin import SlackUser
from tests import slack_requests
from tests.support import harness as support
from tests.support.harness import CHANNEL, SIGNING_SECRET, Harness

__all__ = [
    "allow_edits",
    "card",
    "edit_and_approve",
    "editing_bot",
    "open_form",
    "submit_form",
    "values",
]


def card(harness: Harness, approval_id: str) -> dict[str, Any]:
    """The one card of ``approval_id`` in the reviewer channel."""
    found = [
        m for m in harness.standin.messages.get(CHANNEL, []) if approval_id in str(m.get("blocks"))
    ]
    assert len(found) == 1
    return found[0]


async def open_form(
    harness: Harness,
    user: SlackUser,
    approval_id: str,
    action_id: str = interactions.EDIT,
    button_text: str = "Edit & approve",
) -> dict[str, Any]:
    """Click the card's button that opens a form (Edit & approve unless told) as Slack sends
    it; the form the bot opened."""
    buttons = next(b for b in card(harness, approval_id)["blocks"] if b.get("type") == "actions")
    trigger = f"{len(harness.standin.views)}.{action_id}"
    request = slack_requests.block_actions(
        signing_secret=SIGNING_SECRET,
        user_id=user.id,
        user_name=user.name,
        action_id=action_id,
        value=approval_id,
        channel_id=CHANNEL,
        block_id=buttons["block_id"],
        trigger_id=trigger,
        button_text=button_text,
    )
    assert await harness.post_slack(request) == 200
    await harness.standin.wait_for(
        lambda: any(v["trigger_id"] == trigger for v in harness.standin.views)
    )
    view = next(v for v in harness.standin.views if v["trigger_id"] == trigger)["view"]
    assert isinstance(view, dict)
    return view


def values(view: dict[str, Any], **typed: Any) -> dict[str, Any]:
    """The form's state as Slack sends it: each input as pre-filled, with ``typed`` over it
    (a value of None leaves the field out)."""
    state: dict[str, Any] = {}
    for block in view["blocks"]:
        if block.get("type") != "input":
            continue
        element = block["element"]
        path = block["block_id"].removeprefix(interactions.EDIT_FIELD)
        given = typed.get(path, typed.get(block["block_id"]))
        match element["type"]:
            case "number_input":
                value = {"type": "number_input", "value": given or element["initial_value"]}
            case "static_select":
                chosen = given or element["initial_option"]["value"]
                value = {"type": "static_select", "selected_option": {"value": chosen}}
            case _:
                value = {"type": "plain_text_input", "value": given or element.get("initial_value")}
        state[block["block_id"]] = {element["action_id"]: value}
    return state


async def submit_form(
    harness: Harness, user: SlackUser, view: dict[str, Any], state: dict[str, Any]
) -> tuple[int, str]:
    request = slack_requests.view_submission(
        signing_secret=SIGNING_SECRET,
        user_id=user.id,
        user_name=user.name,
        callback_id=interactions.EDIT_VIEW,
        private_metadata=view["private_metadata"],
        values=state,
    )
    return await harness.post_slack_answer(request)


async def edit_and_approve(
    harness: Harness, user: SlackUser, approval_id: str, **typed: Any
) -> tuple[int, str]:
    """Open the form on the card and submit it with ``typed`` over the pre-filled values."""
    view = await open_form(harness, user, approval_id)
    return await submit_form(harness, user, view, values(view, **typed))


async def allow_edits(harness: Harness, tool: str, editable: list[str]) -> None:
    """Restart the bot of ``harness`` (one made with a ``policy_file``) on the test policy with
    a rule, first, that lets reviewers edit ``editable`` of ``tool`` (as the catch-all decides)."""
    data = support.test_policy(harness.receiver.port).model_dump(
        mode="json", by_alias=True, exclude_none=True
    )
    data["rules"].insert(0, {"tool": tool, "require": "approvers", "editable": editable})
    harness.write_policy(data)
    await harness.stop_bot()
    await harness.start_bot()


@asynccontextmanager
async def editing_bot(
    database_url: str, directory: Path, tool: str, editable: list[str]
) -> AsyncIterator[Harness]:
    """A started bot whose policy file (in ``directory``) lets reviewers edit ``editable`` of
    ``tool``; stopped at the end."""
    harness = Harness(database_url=database_url, policy_file=directory / "countersign.yml")
    await harness.start()
    try:
        await allow_edits(harness, tool, editable)
        yield harness
    finally:
        await harness.stop()
