"""The whole bot on real parts: aiohttp on loopback, real PostgreSQL, the Slack stand-in over
HTTP, Slack-signed requests through bolt's dispatch, and a real agent receiver."""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web

from approvals import policy, repository
from bot import app as bot_app
from bot import config as config_module
from bot.config import AgentCredentials, Config, Settings
from bot.sandbox.standin import SlackStandIn, SlackUser
from tests import slack_requests
from tests.support.agent_receiver import AgentReceiver

BOT_TOKEN = "xoxb-test-token"
SIGNING_SECRET = "test-signing-secret"
AGENT_TOKEN = "sales-bot-token-0123456789"
OTHER_AGENT_TOKEN = "ops-bot-token-0123456789"
CALLBACK_SECRET = "sales-bot-callback-secret"
CHANNEL = "C0REVIEWS"
ONCALL = "C0ONCALL"

REQUESTER = SlackUser(id="U0REQ", name="rita", email="rita@example.com", real_name="Rita Requester")
OUTSIDER = SlackUser(id="U0OUT", name="otto", email="otto@example.com", real_name="Otto Outsider")
APPROVER = SlackUser(id="U0APP", name="alma", email="alma@example.com", real_name="Alma Approver")
# a second account of the requester: another Slack id, the same e-mail
TWIN = SlackUser(id="U0TWIN", name="rita2", email="RITA@example.com", real_name="Rita (2nd)")
# lead-facing turns: the lead's own Slack identity (same e-mail) sits in the sales-lead group
LEAD_EMAIL = "lena@prospect.example"
LEAD_TWIN = SlackUser(id="U0LENA", name="lena", email="Lena@Prospect.example", real_name="Lena")
SALES_LEAD = SlackUser(id="U0SLEAD", name="sam", email="sam@example.com", real_name="Sam Lead")
OPERATOR = SlackUser(id="U0OPER", name="omar", email="omar@example.com", real_name="Omar Rep")
SUPPORT = SlackUser(id="U0SUPP", name="sue", email="sue@example.com", real_name="Sue Support")
FINANCE = tuple(
    SlackUser(id=f"U0FIN{i}", name=f"fin{i}", email=f"fin{i}@example.com", real_name=f"Fin {i}")
    for i in range(5)
)


# fast polling and no lookup cache: tests see every change at once
TEST_WORKERS = bot_app.Workers(poll_interval=0.05, expiry_interval=0.05, lookup_ttl=0.0)


class FakeClock:
    """Real time plus an offset the test moves forward (no sleeping for an hour)."""

    def __init__(self) -> None:
        self.offset = timedelta()

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += timedelta(seconds=seconds)


def test_policy(callback_port: int) -> policy.Policy:
    return policy.Policy.model_validate(
        {
            "slack": {"reviewer_channel": CHANNEL},
            "agents": {
                "sales-bot": {
                    "token_env": "SALES_BOT_TOKEN",
                    "callback_secret_env": "SALES_BOT_SIGNING",
                    "callback_hosts": [f"127.0.0.1:{callback_port}", "agent.internal"],
                    "owner": {"email": "sales-team@example.com", "name": "Sales team"},
                },
                "ops-bot": {"token_env": "OPS_BOT_TOKEN"},
            },
            "roles": {
                "approvers": {"users": [APPROVER.id]},
                "finance": {"usergroups": ["S0FINANCE"], "ceiling": {"amount": 50000}},
                "sales-lead": {"usergroups": ["S0SALESLEAD"]},
                "support": {"users": [SUPPORT.id]},
                "nobody": {},
                "solo": {"usergroups": ["S0SOLO"]},  # whose only member is the requester
            },
            "oncall": {"channel": ONCALL, "usergroup": "S0ONCALL"},
            "rules": [
                {"tool": "transfer_*", "require": "finance"},
                {"tool": "wire_funds", "require": "finance", "approvals": 2},
                {"tool": "delete_*", "require": "approvers", "deny_reason": "required"},
                {
                    "tool": "release_*",
                    "require": "finance",
                    "escalation": [
                        {"after": 600, "action": "remind"},
                        {"after": 1800, "action": "escalate"},
                    ],
                },
                {"tool": "launch_rocket", "require": "nobody"},
                {"tool": "rotate_keys", "require": ["approvers", "support"]},
                {"tool": "solo_*", "require": "solo"},
                {
                    "tool": "refund",
                    "when": {"all": [{"field": "arguments.amount", "gt": 10000}]},
                    "require": "finance",
                },
                {"tool": "*", "require": "approvers"},
            ],
            "deny_reasons": ["Amount looks wrong", "Wrong recipient"],
            "turns": {
                "stages": ["new", "contacted", "qualified", "proposal", "won", "lost"],
                "tools": {
                    "send_proposal": {"stages": {"from": "qualified"}},
                    "grant_discount": {
                        "limits": [
                            {
                                "argument": "discount_pct",
                                "max": 10,
                                "over": "escalate",
                                "escalate_to": "sales-lead",
                            }
                        ]
                    },
                    "issue_refund": {
                        "operator_role": "support",
                        "limits": [{"argument": "amount", "max": 5000}],
                    },
                },
            },
        }
    )


# Slack pacing lifted out of the way (per channel and minute; bursts)
UNPACED = {
    "slack_posts_per_minute": 6_000_000,
    "slack_post_burst": 100_000,
    "slack_updates_per_minute": 6_000_000,
    "slack_update_burst": 100_000,
}


@dataclass
class Harness:
    database_url: str
    delivery_budget: int = 86400
    workers: bot_app.Workers = TEST_WORKERS
    # set: the policy is read from this YAML file (and reloaded when it changes)
    policy_file: Path | None = None
    clock: FakeClock = field(default_factory=FakeClock)
    standin: SlackStandIn = field(init=False)
    receiver: AgentReceiver = field(default_factory=AgentReceiver)
    store: repository.Repository | None = None
    base_url: str = ""
    session: aiohttp.ClientSession | None = None
    # off: Slack writes are not paced (benchmarks measure our own costs; this stand-in enforces
    # no rate unless a test asks it to)
    paced: bool = True
    _runner: web.AppRunner | None = None

    async def start(self) -> Harness:
        self.standin = SlackStandIn(
            token=BOT_TOKEN,
            users=[
                REQUESTER,
                OUTSIDER,
                APPROVER,
                TWIN,
                *FINANCE,
                LEAD_TWIN,
                SALES_LEAD,
                OPERATOR,
                SUPPORT,
            ],
            usergroups={
                "S0FINANCE": [REQUESTER.id, *(u.id for u in FINANCE)],
                "S0SALESLEAD": [LEAD_TWIN.id, SALES_LEAD.id],
                "S0SOLO": [REQUESTER.id],
            },
            channels=[CHANNEL, ONCALL],
        )
        await self.standin.start()
        await self.receiver.start()
        if self.policy_file is not None and not self.policy_file.exists():
            self.write_policy(
                test_policy(self.receiver.port).model_dump(
                    mode="json", by_alias=True, exclude_none=True
                )
            )
        self.session = aiohttp.ClientSession()
        await self.start_bot()
        return self

    def slack_api_url(self) -> str:
        return self.standin.base_url

    def env(self) -> dict[str, str]:
        """The environment a real deployment of this test bot would have."""
        assert self.policy_file is not None
        return {
            "SLACK_BOT_TOKEN": BOT_TOKEN,
            "SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "SLACK_API_URL": self.slack_api_url(),
            "DATABASE_URL": self.database_url,
            "COUNTERSIGN_CONFIG": str(self.policy_file),
            "COUNTERSIGN_DELIVERY_BUDGET": str(self.delivery_budget),
            "SALES_BOT_TOKEN": AGENT_TOKEN,
            "SALES_BOT_SIGNING": CALLBACK_SECRET,
            "OPS_BOT_TOKEN": OTHER_AGENT_TOKEN,
        }

    def write_policy(self, data: dict[str, Any] | str) -> None:
        assert self.policy_file is not None
        text = data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False)
        self.policy_file.write_text(text, "utf-8")

    def config(self) -> Config:
        if self.policy_file is not None:
            return config_module.load(self.env())
        settings = Settings(
            SLACK_BOT_TOKEN=BOT_TOKEN,
            SLACK_SIGNING_SECRET=SIGNING_SECRET,
            SLACK_API_URL=self.slack_api_url(),
            DATABASE_URL=self.database_url,
            COUNTERSIGN_DELIVERY_BUDGET=self.delivery_budget,
        )
        if not self.paced:
            settings = settings.model_copy(update=UNPACED)
        return Config(
            settings=settings,
            policy=test_policy(self.receiver.port),
            agents=(
                AgentCredentials(
                    name="sales-bot", token=AGENT_TOKEN, callback_secret=CALLBACK_SECRET
                ),
                AgentCredentials(name="ops-bot", token=OTHER_AGENT_TOKEN, callback_secret=None),
            ),
        )

    async def serve_bot(
        self, *, workers: bool = True, port: int = 0
    ) -> tuple[str, web.AppRunner, repository.Repository]:
        """One bot process on the test database: its base URL, runner and store."""
        store = await repository.Repository.connect(self.database_url)
        app = await bot_app.build_app(
            self.config(),
            store,
            clock=self.clock,
            workers=dataclasses.replace(self.workers, run=workers and self.workers.run),
            reload_env=self.env() if self.policy_file is not None else None,
        )
        self.mount(app)
        # long-polls in flight are cut after 1 s at shutdown (clients retry), as in production
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port, reuse_address=True).start()
        return f"http://127.0.0.1:{runner.addresses[0][1]}", runner, store

    def mount(self, app: web.Application) -> None:
        """Routes a test adds to the bot's app before it serves (none here)."""

    async def start_bot(self, *, workers: bool = True, same_port: bool = False) -> None:
        """Start the bot; ``same_port`` brings it back where clients already point."""
        port = int(self.base_url.rsplit(":", 1)[1]) if same_port and self.base_url else 0
        self.base_url, self._runner, self.store = await self.serve_bot(workers=workers, port=port)

    async def stop_bot(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self.store is not None:
            await self.store.close()
            self.store = None

    async def stop(self) -> None:
        await self.stop_bot()
        await self.receiver.stop()
        await self.standin.stop()
        if self.session is not None:
            await self.session.close()

    # -- the agent's side ---------------------------------------------------------------

    def request_body(self, **overrides: Any) -> dict[str, Any]:
        body: dict[str, Any] = {
            "request_id": "af-call-7",
            "session_id": "thread-1",
            "tool": {"name": "transfer_money", "call_id": "call_1", "arguments": {"amount": 500}},
            "requester": {"slack_user_id": REQUESTER.id, "email": REQUESTER.email, "name": "Rita"},
            "summary": "Pay invoice 42",
            "context": {"environment": "prod"},
            "callback_url": self.receiver.url,
            "expires_in": 3600,
            "framework": "generic",
        }
        body.update(overrides)
        return body

    async def call(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        data: bytes | None = None,
        token: str | None = AGENT_TOKEN,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, Any]:
        assert self.session is not None
        all_headers = dict(headers or {})
        if token is not None:
            all_headers["Authorization"] = f"Bearer {token}"
        async with self.session.request(
            method, self.base_url + path, json=json_body, data=data, headers=all_headers
        ) as response:
            body = (
                await response.json()
                if response.content_type == "application/json"
                else await response.text()
            )
            return response.status, body

    async def submit(self, **overrides: Any) -> dict[str, Any]:
        status, body = await self.call(
            "POST", "/v1/approvals", json_body=self.request_body(**overrides)
        )
        assert status == 201, body
        assert isinstance(body, dict)
        return body

    async def approval(self, approval_id: str) -> dict[str, Any]:
        """The approval resource, as its agent reads it."""
        status, body = await self.call("GET", f"/v1/approvals/{approval_id}")
        assert status == 200, body
        assert isinstance(body, dict)
        return body

    # -- the approver's side ------------------------------------------------------------

    async def card_ts(self, approval_id: str, timeout: float = 5.0) -> str:
        """Wait for the card of ``approval_id`` in the reviewer channel; its ts."""

        def find() -> str | None:
            for message in self.standin.messages.get(CHANNEL, []):
                if approval_id in str(message.get("blocks")):
                    return str(message["ts"])
            return None

        await self.standin.wait_for(lambda: find() is not None, timeout)
        ts = find()
        assert ts is not None
        return ts

    async def click(
        self,
        user: SlackUser,
        approval_id: str,
        action: str = "countersign_approve",
        *,
        base_url: str | None = None,
        reason: str = "not now",
    ) -> int:
        """A button click as Slack sends it. Deny goes on as a person would: the modal opens
        and is submitted with ``reason`` (when the request is still open)."""
        trigger_id = f"{secrets.randbelow(10**10)}.{secrets.token_hex(8)}"
        status = await self.click_button(
            user, approval_id, action, base_url=base_url, trigger_id=trigger_id
        )
        if action != "countersign_deny" or status != 200:
            return status
        answered = len(self.ephemerals_for(user))

        def modal() -> dict[str, Any] | None:
            return next((v for v in self.standin.views if v["trigger_id"] == trigger_id), None)

        await self.standin.wait_for(
            lambda: modal() is not None or len(self.ephemerals_for(user)) > answered
        )
        opened = modal()
        if opened is None:
            return status  # already settled: answered with an ephemeral instead
        return await self.submit_deny(
            user, opened["view"]["private_metadata"], reason, base_url=base_url
        )

    async def click_button(
        self,
        user: SlackUser,
        approval_id: str,
        action: str = "countersign_approve",
        *,
        base_url: str | None = None,
        trigger_id: str | None = None,
    ) -> int:
        """Only the button's block_actions request."""
        request = slack_requests.block_actions(
            signing_secret=SIGNING_SECRET,
            user_id=user.id,
            user_name=user.name,
            action_id=action,
            value=approval_id,
            channel_id=CHANNEL,
            trigger_id=trigger_id,
        )
        return await self.post_slack(request, base_url=base_url)

    async def submit_deny(
        self,
        user: SlackUser,
        private_metadata: str,
        reason: str,
        *,
        preset: str | None = None,
        base_url: str | None = None,
    ) -> int:
        """Submit the Deny modal (a view_submission shaped like Slack's)."""
        values: dict[str, Any] = {
            "reason": {"reason_input": {"type": "plain_text_input", "value": reason or None}}
        }
        if preset is not None:
            values["preset"] = {
                "preset_select": {"type": "static_select", "selected_option": {"value": preset}}
            }
        request = slack_requests.view_submission(
            signing_secret=SIGNING_SECRET,
            user_id=user.id,
            user_name=user.name,
            callback_id="countersign_deny_reason",
            private_metadata=private_metadata,
            values=values,
        )
        return await self.post_slack(request, base_url=base_url)

    async def post_slack(
        self, request: slack_requests.SignedRequest, *, base_url: str | None = None
    ) -> int:
        status, _ = await self.post_slack_answer(request, base_url=base_url)
        return status

    async def post_slack_answer(
        self, request: slack_requests.SignedRequest, *, base_url: str | None = None
    ) -> tuple[int, str]:
        """The HTTP status and body the bot answered Slack with (e.g. modal errors)."""
        assert self.session is not None
        async with self.session.post(
            (base_url or self.base_url) + "/slack/events",
            data=request.body.encode(),
            headers=request.headers,
        ) as response:
            return response.status, await response.text()

    def ephemerals_for(self, user: SlackUser) -> list[str]:
        return [str(e["text"]) for e in self.standin.ephemerals if e["user"] == user.id]

    async def wait_ephemeral(self, user: SlackUser, count: int = 1) -> list[str]:
        await self.standin.wait_for(lambda: len(self.ephemerals_for(user)) >= count)
        return self.ephemerals_for(user)

    async def settle_quietly(self, seconds: float = 0.3) -> None:
        """Let background work run (used only to show that nothing *more* happens)."""
        await asyncio.sleep(seconds)
