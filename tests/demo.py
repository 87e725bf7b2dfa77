"""``make demo``: the whole loop on this machine, no Slack workspace needed.

Embedded PostgreSQL, the Slack Web API stand-in, the bot with ``countersign.example.yml``, a
scripted agent and scripted clicks by three people — the requester, an outsider and an
approver — each step printed as it happens.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from aiohttp import web

from approvals import pg_db
from approvals.repository import Repository
from bot import app as bot_app
from bot import config
from bot.embedded_pg import embedded_postgres
from bot.sandbox.standin import SlackStandIn, SlackUser
from tests import slack_requests
from tests.support.agent_receiver import AgentReceiver, verify

ANA = SlackUser(id="U0ANA", name="ana", email="ana@example.com", real_name="Ana (requester)")
CARL = SlackUser(id="U0CARL", name="carl", email="carl@example.com", real_name="Carl (outsider)")
FIONA = SlackUser(
    id="U0FIONA", name="fiona", email="fiona@example.com", real_name="Fiona (finance)"
)
SIGNING_SECRET = "demo-signing-secret"
BOT_TOKEN = "xoxb-demo"
AGENT_TOKEN = "demo-sales-bot-token-0123"
CALLBACK_SECRET = "demo-sales-bot-signing-secret"
CHANNEL = "C0REVIEWS"

START = time.perf_counter()


def step(text: str) -> None:
    print(f"[{time.perf_counter() - START:5.2f}s] {text}", flush=True)


def card_lines(message: dict[str, object]) -> list[str]:
    lines = []
    for block in message.get("blocks", []):  # type: ignore[attr-defined]
        if block["type"] == "header":
            lines.append("  ┃ " + block["text"]["text"])
        elif block["type"] == "section" and "text" in block:
            lines.extend("  ┃ " + line for line in block["text"]["text"].splitlines())
        elif block["type"] == "section":
            lines.append(
                "  ┃ " + " · ".join(f["text"].replace("\n", ": ") for f in block["fields"])
            )
        elif block["type"] == "actions":
            lines.append("  ┃ " + "  ".join(f"[ {e['text']['text']} ]" for e in block["elements"]))
    return lines


async def demo(dsn: str) -> None:
    standin = SlackStandIn(
        token=BOT_TOKEN,
        users=[ANA, CARL, FIONA],
        usergroups={"S0FINANCE": [FIONA.id, ANA.id], "S0APPROVERS": []},
        channels=[CHANNEL],
    )
    step(f"Slack Web API stand-in listening at {await standin.start()}")
    receiver = AgentReceiver()
    await receiver.start()
    env = {
        **os.environ,
        "SLACK_BOT_TOKEN": BOT_TOKEN,
        "SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "SLACK_API_URL": standin.base_url,
        "COUNTERSIGN_CONFIG": str(Path(__file__).parents[1] / "countersign.example.yml"),
        "SALES_BOT_TOKEN": AGENT_TOKEN,
        "SALES_BOT_SIGNING": CALLBACK_SECRET,
    }
    cfg = config.load(env)
    # the example policy allows callbacks to 127.0.0.1:8088; the demo's agent listens on a free
    # port, so allow exactly that one as well
    agents = dict(cfg.policy.agents)
    agents["sales-bot"] = agents["sales-bot"].model_copy(
        update={"callback_hosts": (f"127.0.0.1:{receiver.port}",)}
    )
    cfg = config.Config(
        settings=cfg.settings,
        policy=cfg.policy.model_copy(update={"agents": agents}),
        agents=cfg.agents,
    )
    await pg_db.migrate(dsn)
    store = await Repository.connect(dsn)
    app = await bot_app.build_app(cfg, store, workers=bot_app.Workers(poll_interval=0.2))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    base = f"http://127.0.0.1:{runner.addresses[0][1]}"
    step(f"Countersign serving at {base} with policy {cfg.policy.version}")

    async with aiohttp.ClientSession() as http:
        request = {
            "request_id": "demo-call-1",
            "session_id": "thread-42",
            "tool": {
                "name": "transfer_money",
                "call_id": "call_1",
                "arguments": {"amount": 1250, "to": "ACME Ltd", "memo": "<!channel> invoice 42"},
            },
            "requester": {"slack_user_id": ANA.id, "email": ANA.email, "name": "Ana"},
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
        await standin.wait_for(lambda: bool(standin.messages.get(CHANNEL)))
        card = standin.messages[CHANNEL][0]
        step(f"card posted in #{CHANNEL} (ts {card['ts']}); untrusted text escaped:")
        print("\n".join(card_lines(card)))

        async def click(user: SlackUser, label: str) -> None:
            signed = slack_requests.block_actions(
                signing_secret=SIGNING_SECRET,
                user_id=user.id,
                user_name=user.name,
                action_id="countersign_approve",
                value=approval_id,
                channel_id=CHANNEL,
                message_ts=str(card["ts"]),
            )
            before = len(standin.ephemerals)
            async with http.post(
                f"{base}/slack/events", data=signed.body.encode(), headers=signed.headers
            ) as response:
                step(
                    f"{label} clicks Approve → Slack-signed block_actions, acked {response.status}"
                )
            if user is FIONA:
                return
            await standin.wait_for(lambda: len(standin.ephemerals) > before)
            step(f"  ← ephemeral to {user.real_name}: {standin.ephemerals[-1]['text']}")

        await click(ANA, "Ana, the requester (she is in S0FINANCE too)")
        await click(CARL, "Carl, who holds no role")
        await click(FIONA, "Fiona, in S0FINANCE")
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
            lambda: "outcome" in json.dumps(standin.messages[CHANNEL][0]["blocks"])
        )
        step("card updated, buttons replaced by the outcome:")
        print("\n".join(card_lines(standin.messages[CHANNEL][0])[-1:]))
        attempts = await store.attempts(approval_id)
        step(
            "attempts recorded: "
            + ", ".join(f"{a.slack_user_id}={a.outcome.value}" for a in attempts)
        )

    await runner.cleanup()
    await store.close()
    await receiver.stop()
    await standin.stop()
    step("done")


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
