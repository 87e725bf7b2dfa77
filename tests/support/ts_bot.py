"""The real bot on loopback for the TypeScript client's tests (clients/typescript/test).

``python -m tests.support.ts_bot`` starts the bot of :mod:`tests.support.harness` (aiohttp on
loopback, the Slack stand-in over HTTP, PostgreSQL: ``TEST_DATABASE_URL`` if set, else an
embedded one) on a database of its own, prints one JSON line and serves until its standard input
closes::

    {"base_url": …, "agent_token": …, "other_agent_token": …, "callback_secret": …,
     "callback_url": …, "control_url": …}

The control API on ``control_url`` (loopback, JSON) is the reviewer's hand and the test's eyes:

- ``POST /card {"call_id"}`` → ``{"approval_id"}`` of the card for that tool call (waits for it)
- ``POST /click {"user", "approval_id", "action": "approve" | "deny", "reason"}`` →
  ``{"status"}``: a Slack-signed click through ``/slack/events`` (a deny submits its modal);
  ``user`` is ``requester``, ``approver`` or ``outsider``
- ``POST /edit {"user", "approval_id", "changes": {path: typed text}}`` → ``{"status",
  "answer"}``: Edit & approve, as Slack sends it (the form opened from the card's button, then
  submitted with ``changes`` typed over the pre-filled values)
- ``GET /ephemerals?user=…`` → ``{"texts": […]}``: the refusals that user was shown
- ``GET /callbacks`` → ``{"callbacks": [{"body_base64", "signature", "idempotency_key"}]}``: the
  signed callbacks the agent receiver took, byte for byte
- ``POST /restart`` → ``{"base_url"}``: the bot process stops and starts again on its port
- ``POST /advance {"seconds"}`` → ``{"offset"}``: the bot's clock moves forward (its
  :class:`~tests.support.harness.FakeClock`; no sleeping), e.g. past a decision's ``valid_for``

The policy is the harness's test policy with two rules in front: a call of ``deploy_lapsing``
(:data:`LAPSING_TOOL`) is decided by the approvers and may be claimed for 1 s after its
decision (``valid_for: 1``), so that advancing the clock by 2 s lapses it; and reviewers may
edit the ``version`` of a ``deploy_editable`` call (:data:`EDITABLE_TOOL`).
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import os
import secrets
import sys
from typing import Any

import asyncpg
from aiohttp import web

from approvals import pg_db, policy
from bot.config import Config
from bot.sandbox.standin import SlackUser
from tests.e2e import reviewer
from tests.support import edit_form, postgres
from tests.support.harness import (
    AGENT_TOKEN,
    APPROVER,
    CALLBACK_SECRET,
    OTHER_AGENT_TOKEN,
    OUTSIDER,
    REQUESTER,
    Harness,
)

USERS: dict[str, SlackUser] = {"requester": REQUESTER, "approver": APPROVER, "outsider": OUTSIDER}
# slack_sdk honours proxies but ignores NO_PROXY: loopback only here
PROXY_VARIABLES = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
)
ACTIONS = {"approve": "countersign_approve", "deny": "countersign_deny"}
# a call of this tool may be claimed only within 1 s of its decision
LAPSING_TOOL = "deploy_lapsing"
# reviewers may edit the version of a call of this tool (docs/edits.md)
EDITABLE_TOOL = "deploy_editable"


class TsHarness(Harness):
    """The harness's bot, its policy with the :data:`LAPSING_TOOL` rule first."""

    def config(self) -> Config:
        config = super().config()
        data = config.policy.model_dump(mode="json", by_alias=True, exclude_none=True)
        lapsing = {"tool": LAPSING_TOOL, "require": "approvers", "valid_for": 1}
        editable = {"tool": EDITABLE_TOOL, "require": "approvers", "editable": ["version"]}
        data["rules"] = [lapsing, editable, *data["rules"]]
        return dataclasses.replace(config, policy=policy.Policy.model_validate(data))


def _user(name: object) -> SlackUser:
    if not isinstance(name, str) or name not in USERS:
        raise web.HTTPBadRequest(text=f"user must be one of {sorted(USERS)}")
    return USERS[name]


def control_app(harness: Harness) -> web.Application:
    """The routes the node tests drive the reviewer side and the bot's lifetime with."""
    routes = web.RouteTableDef()

    @routes.post("/card")
    async def card(request: web.Request) -> web.Response:
        body = await request.json()
        approval_id = await reviewer.card_for_call(harness, str(body["call_id"]))
        return web.json_response({"approval_id": approval_id})

    @routes.post("/click")
    async def click(request: web.Request) -> web.Response:
        body = await request.json()
        action = ACTIONS.get(str(body.get("action", "approve")))
        if action is None:
            raise web.HTTPBadRequest(text=f"action must be one of {sorted(ACTIONS)}")
        status = await harness.click(
            _user(body.get("user")),
            str(body["approval_id"]),
            action,
            reason=str(body.get("reason", "not now")),
        )
        return web.json_response({"status": status})

    @routes.post("/edit")
    async def edit(request: web.Request) -> web.Response:
        body = await request.json()
        changes = body.get("changes")
        if not isinstance(changes, dict):
            raise web.HTTPBadRequest(text="changes must be an object of path: typed text")
        status, answer = await edit_form.edit_and_approve(
            harness, _user(body.get("user")), str(body["approval_id"]), **changes
        )
        return web.json_response({"status": status, "answer": answer})

    @routes.get("/ephemerals")
    async def ephemerals(request: web.Request) -> web.Response:
        return web.json_response(
            {"texts": harness.ephemerals_for(_user(request.query.get("user")))}
        )

    @routes.get("/callbacks")
    async def callbacks(_: web.Request) -> web.Response:
        received = [
            {
                "body_base64": base64.b64encode(r.body).decode("ascii"),
                "signature": r.signature,
                "idempotency_key": r.idempotency_key,
            }
            for r in harness.receiver.delivered
        ]
        return web.json_response({"callbacks": received})

    @routes.post("/advance")
    async def advance(request: web.Request) -> web.Response:
        seconds = (await request.json()).get("seconds")
        if not isinstance(seconds, int | float) or isinstance(seconds, bool) or seconds <= 0:
            raise web.HTTPBadRequest(text="seconds must be a positive number")
        harness.clock.advance(seconds)
        return web.json_response({"offset": harness.clock.offset.total_seconds()})

    @routes.post("/restart")
    async def restart(_: web.Request) -> web.Response:
        await harness.stop_bot()
        await harness.start_bot(same_port=True)
        return web.json_response({"base_url": harness.base_url})

    app = web.Application()
    app.add_routes(routes)
    return app


async def _own_database(admin_dsn: str) -> str:
    """A migrated database of this launcher's own (no shared template: other runs may share
    ``TEST_DATABASE_URL``)."""
    name = "cs_ts_" + secrets.token_hex(6)
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f"CREATE DATABASE {name}")
    finally:
        await conn.close()
    dsn = postgres.with_database(admin_dsn, name)
    await pg_db.migrate(dsn)
    return dsn


async def serve(admin_dsn: str) -> None:
    dsn = await _own_database(admin_dsn)
    # unpaced: the suites post dozens of cards in a burst (the corpus), and each test waits
    # for its own card behind them
    harness = await TsHarness(database_url=dsn, paced=False).start()
    runner = web.AppRunner(control_app(harness), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    announce: dict[str, Any] = {
        "base_url": harness.base_url,
        "agent_token": AGENT_TOKEN,
        "other_agent_token": OTHER_AGENT_TOKEN,
        "callback_secret": CALLBACK_SECRET,
        "callback_url": harness.receiver.url,
        "control_url": f"http://127.0.0.1:{runner.addresses[0][1]}",
    }
    print(json.dumps(announce), flush=True)
    try:
        await asyncio.to_thread(sys.stdin.read)  # until the test suite closes our stdin
    finally:
        await runner.cleanup()
        await harness.stop()
        await postgres.drop_database(admin_dsn, dsn)


def main() -> None:
    for name in PROXY_VARIABLES:
        os.environ.pop(name, None)
    with postgres.server_dsn(os.environ.get("TEST_DATABASE_URL")) as admin_dsn:
        asyncio.run(serve(admin_dsn))


if __name__ == "__main__":
    main()
