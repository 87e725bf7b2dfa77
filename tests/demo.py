"""``make demo``: the whole loop on this machine, no Slack workspace needed, on the sandbox.

Embedded PostgreSQL, the bot in try-out mode with ``countersign.example.yml`` (the Slack stand-in
and the sandbox page, as ``make run`` serves them), a scripted agent, and clicks by three of the
sandbox's people — the requester, an outsider and an approver — sent through the sandbox page's
own endpoint, which signs each one and posts it to the bot's ``/slack/events`` as Slack would.
Each step is printed as it happens, the card as Slack would render it (dates and mentions
readable, untrusted text still escaped).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import sys
import tempfile
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from approvals import pg_db
from approvals.repository import Repository
from bot import app as bot_app
from bot import cli, config
from bot.embedded_pg import embedded_postgres
from bot.sandbox import page, tryout
from bot.sandbox.standin import SlackStandIn
from tests.support.agent_receiver import AgentReceiver, verify

AGENT_TOKEN = "demo-sales-bot-token-0123"
CALLBACK_SECRET = "demo-sales-bot-signing-secret"

START = time.perf_counter()

# Slack's date markup, <!date^UNIX^{tokens}|fallback>, and a user mention, <@U…>
_DATE = re.compile(r"<!date\^(\d+)\^[^|>]*\|[^>]*>")
_MENTION = re.compile(r"<@(U[A-Z0-9]+)>")


def step(text: str) -> None:
    print(f"[{time.perf_counter() - START:5.2f}s] {text}", flush=True)


def readable(mrkdwn: str, people: Mapping[str, str]) -> str:
    """``mrkdwn`` as Slack shows it to a reader: dates in words (UTC here; Slack uses the
    reader's time zone), mentions as @name. Escaped text stays escaped: that is what shows."""

    def date(match: re.Match[str]) -> str:
        at = datetime.fromtimestamp(int(match[1]), UTC)
        return f"{at:%b} {at.day}, {at:%Y} at {at:%H:%M} UTC"

    text = _DATE.sub(date, mrkdwn)
    return _MENTION.sub(lambda m: "@" + people.get(m[1], m[1]), text)


def card_lines(message: Mapping[str, Any], people: Mapping[str, str]) -> list[str]:
    lines = []
    for block in message.get("blocks", []):
        if block["type"] == "header":
            lines.append("  ┃ " + block["text"]["text"])
        elif block["type"] == "section" and "text" in block:
            lines.extend("  ┃ " + line for line in block["text"]["text"].splitlines())
        elif block["type"] == "section":
            lines.append(
                "  ┃ " + " · ".join(f["text"].replace("\n", ": ") for f in block["fields"])
            )
        elif block["type"] == "context":
            lines.append("  ┃ " + " ".join(e.get("text", "") for e in block["elements"]))
        elif block["type"] == "actions":
            lines.append("  ┃ " + "  ".join(f"[ {e['text']['text']} ]" for e in block["elements"]))
    return [readable(line, people) for line in lines]


def demo_config(receiver_port: int) -> config.Config:
    """``make run``'s configuration in try-out mode, the agent's callbacks allowed to the
    demo's own receiver (the example policy allows 127.0.0.1:8088; the receiver takes a free
    port)."""
    env = cli.tryout_env(
        {
            **{k: v for k, v in os.environ.items() if k not in cli.SLACK_CREDENTIALS},
            cli.TRYOUT: "1",
            "COUNTERSIGN_CONFIG": str(Path(__file__).parents[1] / "countersign.example.yml"),
            "SALES_BOT_TOKEN": AGENT_TOKEN,
            "SALES_BOT_SIGNING": CALLBACK_SECRET,
        }
    )
    cfg = config.load(env)
    agents = dict(cfg.policy.agents)
    agents["sales-bot"] = agents["sales-bot"].model_copy(
        update={"callback_hosts": (f"127.0.0.1:{receiver_port}",)}
    )
    return config.Config(
        settings=cfg.settings,
        policy=cfg.policy.model_copy(update={"agents": agents}),
        agents=cfg.agents,
    )


async def demo(dsn: str) -> None:
    receiver = AgentReceiver()
    await receiver.start()
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(receiver.stop)
        cfg, standin = await tryout.start_standin(stack, demo_config(receiver.port))
        step(f"Slack Web API stand-in listening at {cfg.settings.slack_api_url}")
        await pg_db.migrate(dsn)
        store = await Repository.connect(dsn)
        stack.push_async_callback(store.close)
        app = await bot_app.build_app(cfg, store, workers=bot_app.Workers(poll_interval=0.2))
        tryout.mount_sandbox(app, standin, cfg)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        stack.push_async_callback(runner.cleanup)
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        base = f"http://127.0.0.1:{runner.addresses[0][1]}"
        step(f"Countersign serving at {base} with policy {cfg.policy.version}")
        step(f"the sandbox page (what Slack would show): {base}{page.PREFIX}")
        async with aiohttp.ClientSession() as http:
            await _loop(http, base, standin, store, receiver)
    step("done")


async def _loop(
    http: aiohttp.ClientSession,
    base: str,
    standin: SlackStandIn,
    store: Repository,
    receiver: AgentReceiver,
) -> None:
    people = {user.id: user.name for user in standin.users.values()}
    requester, outsider = page.REQUESTER, page.OUTSIDER
    # the finance role's user group has one member in the sandbox, and the requester
    finance = standin.usergroups["S0FINANCE"]
    approver = standin.users[next(u for u in finance if u != requester.id)]
    request = {
        "request_id": "demo-call-1",
        "session_id": "thread-42",
        "tool": {
            "name": "transfer_money",
            "call_id": "call_1",
            "arguments": {"amount": 1250, "to": "ACME Ltd", "memo": "<!channel> invoice 42"},
        },
        "requester": {
            "slack_user_id": requester.id,
            "email": requester.email,
            "name": requester.real_name,
        },
        "summary": "Pay invoice 42 to ACME",
        "callback_url": receiver.url,
        "expires_in": 900,
    }
    step("agent → POST /v1/approvals (tool transfer_money, amount 1250)")
    async with http.post(
        f"{base}/v1/approvals", json=request, headers={"Authorization": f"Bearer {AGENT_TOKEN}"}
    ) as response:
        created = await response.json()
    approval_id = created["approval_id"]
    step(
        f"  ← {response.status} {approval_id} status={created['status']} "
        f"needs role {created['required']['role']} ({created['rule']})"
    )
    channel = next(iter(standin.channels))
    await standin.wait_for(lambda: bool(standin.messages.get(channel)))
    card = standin.messages[channel][0]
    name = standin.channels[channel].name
    step(f"card posted in #{name} (ts {card['ts']}); untrusted text escaped:")
    print("\n".join(card_lines(card, people)))

    async def click(user_id: str, label: str, *, answered: bool = True) -> None:
        before = len(standin.ephemerals)
        click = {
            "user": user_id,
            "channel": channel,
            "ts": card["ts"],
            "action_id": "countersign_approve",
            "value": approval_id,
        }
        async with http.post(f"{base}{page.PREFIX}api/click", json=click) as response:
            sent = await response.json()
        step(f"{label} clicks Approve → Slack-signed block_actions, acked {sent['status']}")
        if answered:
            await standin.wait_for(lambda: len(standin.ephemerals) > before)
            text = readable(str(standin.ephemerals[-1]["text"]), people)
            step(f"  ← ephemeral to {people[user_id]}: {text}")

    await click(requester.id, f"{requester.real_name}, the requester (in S0FINANCE too)")
    await click(outsider.id, f"{outsider.real_name}, who holds no role")
    await click(approver.id, f"{approver.real_name}, in S0FINANCE", answered=False)
    [received] = await receiver.wait_delivered(1)
    decision = json.loads(received.body)
    valid = verify(CALLBACK_SECRET, received.body, received.signature)
    step(
        f"agent ← callback: status={decision['status']} by "
        f"{decision['decided_by'][0]['slack_user_id']}, signature "
        f"{'valid' if valid else 'INVALID'}, Idempotency-Key {received.idempotency_key}"
    )
    step(
        f"  bound to request_id={decision['request_id']} session_id={decision['session_id']} "
        f"call_id={decision['tool']['call_id']} sha256={decision['arguments_sha256'][:16]}…"
    )
    await standin.wait_for(
        lambda: "actions" not in json.dumps(standin.messages[channel][0]["blocks"])
    )
    step("card updated, buttons replaced by the outcome:")
    print("\n".join(card_lines(standin.messages[channel][0], people)[-2:]))
    attempts = await store.attempts(approval_id)
    step(
        "attempts recorded: "
        + ", ".join(f"{people[a.slack_user_id]}={a.outcome.value}" for a in attempts)
    )
    agent = _Agent(http, base, request)
    await _edit_act(agent, base, standin, channel, approver.id, people, receiver)


class _Agent:
    """The demo's scripted agent: its bearer token, its request's shape."""

    def __init__(self, http: aiohttp.ClientSession, base: str, request: dict[str, Any]) -> None:
        self.http, self.base, self.request = http, base, request
        self.headers = {"Authorization": f"Bearer {AGENT_TOKEN}"}

    async def submit(self, request_id: str, arguments: dict[str, Any]) -> dict[str, Any]:
        # a framework that runs only the call it recorded (here Microsoft Agent Framework)
        body = {
            **self.request,
            "request_id": request_id,
            "tool": {"name": "transfer_money", "call_id": request_id, "arguments": arguments},
            "framework": "maf",
        }
        async with self.http.post(
            f"{self.base}/v1/approvals", json=body, headers=self.headers
        ) as response:
            created: dict[str, Any] = await response.json()
        return created

    async def claim(self, approval_id: str, **body: Any) -> tuple[int, dict[str, Any]]:
        async with self.http.post(
            f"{self.base}/v1/approvals/{approval_id}/execution",
            json={"idempotency_key": f"demo-{approval_id}", **body},
            headers=self.headers,
        ) as response:
            return response.status, await response.json()


async def _edit_act(
    agent: _Agent,
    base: str,
    standin: SlackStandIn,
    channel: str,
    approver: str,
    people: Mapping[str, str],
    receiver: AgentReceiver,
) -> None:
    """Approve with edits (docs/edits.md): the approver lowers the amount in the card's form;
    the framework can only run what it recorded, so the agent is refused with the exact
    arguments, and its call again with exactly those is approved at once, on that edit."""
    arguments = {"amount": 12500, "to": "ACME Ltd", "memo": "invoice 43"}
    created = await agent.submit("demo-call-2", arguments)
    approval_id = created["approval_id"]
    step(f"agent → POST /v1/approvals (amount 12500) ← {approval_id} {created['status']}")
    await standin.wait_for(lambda: len(standin.messages.get(channel, [])) >= 2)
    card = next(m for m in standin.messages[channel] if approval_id in json.dumps(m["blocks"]))
    opened = {
        "user": approver,
        "channel": channel,
        "ts": card["ts"],
        "action_id": "countersign_edit",
        "value": approval_id,
    }
    async with agent.http.post(f"{base}{page.PREFIX}api/click", json=opened) as response:
        trigger = (await response.json())["trigger_id"]
    await standin.wait_for(lambda: any(v["trigger_id"] == trigger for v in standin.views))
    view = next(v for v in standin.views if v["trigger_id"] == trigger)["view"]
    inputs = [b["label"]["text"] for b in view["blocks"] if b.get("type") == "input"]
    step(f"{people[approver]} clicks Edit & approve → the form offers: {', '.join(inputs)}")
    typed = {
        "edit:amount": {"value": "1250"},
        "note": {"note_input": "1250, not 12500: the invoice says so"},
    }
    submitted = {"user": approver, "trigger_id": trigger, "values": typed}
    async with agent.http.post(f"{base}{page.PREFIX}api/submit", json=submitted) as response:
        answer = await response.json()
    step(f"  submits amount 1250 → view_submission answered {answer['status']} {answer['errors']}")
    [_, received] = await receiver.wait_delivered(2)
    decision = json.loads(received.body)
    edit = decision["edit"]
    step(
        f"agent ← callback: status={decision['status']} with edit "
        f"{json.dumps(edit['patch'])} by {edit['by']['name']}; tool.arguments stay as asked"
    )
    step(f"  resume (maf): approved={decision['resume']['approved']}, the model reads:")
    print(f"  “{decision['resume']['reason']}”")
    await standin.wait_for(
        lambda: "Approved with edits" in json.dumps(_card(standin, channel, approval_id))
    )
    step("card updated:")
    print("\n".join(card_lines(_card(standin, channel, approval_id), people)[-4:]))
    again = await agent.submit("demo-call-3", edit["arguments"])
    step(
        f"agent calls again with exactly the edited arguments ← {again['approval_id']} "
        f"status={again['status']} edit_of={again['edit_of']}, no card of its own"
    )
    status, refused = await agent.claim(approval_id, arguments_sha256=edit["arguments_sha256"])
    step(f"  a claim of the original ← {status} {refused['error']['code']}")
    status, claimed = await agent.claim(again["approval_id"])
    step(
        f"  a claim of the call again ← {status}: run it once ({claimed['execution']['claim_id']})"
    )


def _card(standin: SlackStandIn, channel: str, approval_id: str) -> dict[str, Any]:
    return next(
        m for m in standin.messages.get(channel, []) if approval_id in json.dumps(m["blocks"])
    )


def main() -> int:
    logging.basicConfig(level=logging.ERROR)
    url = os.environ.get("DATABASE_URL")
    if url:
        asyncio.run(demo(url))
        return 0
    with tempfile.TemporaryDirectory(prefix="cs-demo-") as tmp:
        step("starting an embedded PostgreSQL (pgserver)")
        with embedded_postgres(Path(tmp) / "pg") as dsn:
            asyncio.run(demo(dsn))
    return 0


if __name__ == "__main__":
    sys.exit(main())
