"""A reviewer channel per rule: each card goes to its rule's channel (the reviewer channel by
default), clicks and updates work there, a reload leaves pending cards where they are, and
``countersign check`` asks about every channel the policy names."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bot.sandbox.standin import SlackStandIn
from tests.integration.test_slack_setup import POLICY, _env, _problems
from tests.integration.test_slack_setup import standin as standin  # the fixture
from tests.support import waiting
from tests.support.cli import run_cli
from tests.support.harness import CHANNEL, FINANCE, Harness
from tests.support.harness import test_policy as base_policy

DEPLOYS = "C0DEPLOYS"
DEPLOYS_NEW = "C0DEPLOYS2"


def policy_with(port: int, channel: str) -> dict[str, Any]:
    data = base_policy(port).model_dump(mode="json", exclude_none=True)
    data["rules"] = [{"tool": "transfer_*", "require": "finance", "channel": channel}] + [
        r for r in data["rules"] if r["tool"] != "transfer_*"
    ]
    return data


def card_in(harness: Harness, channel: str, approval_id: str) -> dict[str, Any] | None:
    for message in harness.standin.messages.get(channel, []):
        if approval_id in json.dumps(message.get("blocks")):
            return dict(message)
    return None


async def test_each_card_goes_to_its_rules_channel_and_a_reload_leaves_it_there(
    live: Harness,
) -> None:
    for channel in (DEPLOYS, DEPLOYS_NEW):
        live.standin.set_channel(channel)
    live.write_policy(policy_with(live.receiver.port, DEPLOYS))
    probes = iter(range(1000))

    async def routed(channel: str) -> str:
        """Submit probes until the policy naming ``channel`` is in force; that approval's id."""
        found: list[str] = []

        async def landed() -> bool:
            probe = await live.submit(request_id=f"probe-{next(probes)}")
            await live.standin.wait_for(
                lambda: any(
                    card_in(live, c, probe["approval_id"]) for c in (CHANNEL, DEPLOYS, DEPLOYS_NEW)
                )
            )
            if card_in(live, channel, probe["approval_id"]):
                found.append(probe["approval_id"])
            return bool(found)

        await waiting.until(landed, what=f"cards routed to {channel}")
        return found[0]

    first = await routed(DEPLOYS)
    # a tool of another rule still goes to the reviewer channel
    other = await live.submit(
        request_id="other", tool={"name": "delete_rows", "call_id": "c9", "arguments": {}}
    )
    await live.standin.wait_for(lambda: card_in(live, CHANNEL, other["approval_id"]) is not None)

    # the rule moves to another channel: the card already posted stays, and settles there
    live.write_policy(policy_with(live.receiver.port, DEPLOYS_NEW))
    await routed(DEPLOYS_NEW)
    card = card_in(live, DEPLOYS, first)
    assert card is not None
    assert await live.click(FINANCE[0], first) == 200
    await live.receiver.wait_delivered(1)

    def updated() -> bool:
        shown = card_in(live, DEPLOYS, first)
        return shown is not None and "countersign_approve" not in json.dumps(shown["blocks"])

    await live.standin.wait_for(updated)
    _, resource = await live.call("GET", f"/v1/approvals/{first}")
    assert resource["card"]["channel"] == DEPLOYS


def _policy_with_a_rule_channel(env: dict[str, str]) -> None:
    """The check's policy, with a rule of its own channel before the catch-all."""
    catch_all = '  - tool: "*"\n'
    deploys = f'  - tool: "deploy_*"\n    require: approvers\n    channel: {DEPLOYS}\n'
    assert catch_all in POLICY
    Path(env["COUNTERSIGN_CONFIG"]).write_text(POLICY.replace(catch_all, deploys + catch_all))


async def test_check_asks_about_every_rules_channel(standin: SlackStandIn, tmp_path: Path) -> None:
    env = _env(tmp_path, standin.base_url)
    _policy_with_a_rule_channel(env)
    standin.set_channel(DEPLOYS, name="deploys", is_member=False)
    [problem] = _problems(await run_cli("check", env=env))
    assert problem == (
        "rules[0].channel: #deploys (C0DEPLOYS): the bot is not a member: invite it: "
        "/invite @countersign in #deploys"
    )
