"""The sandbox page (try-out mode's "Slack on your laptop") over HTTP, against the real bot.

The bot runs as in the other integration tests (real aiohttp on loopback, real PostgreSQL, the
Slack stand-in, a real agent receiver) with the sandbox mounted on its application, as
``countersign run`` does in try-out mode. Every click goes through the sandbox's endpoints, which
sign it and post it to the bot's own ``/slack/events``: what these tests see is what bolt's
dispatch and the listeners made of a Slack-signed request.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shlex
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from bot import app as bot_app
from bot import messages
from bot.sandbox import page
from bot.sandbox.standin import SlackStandIn, SlackUser
from tests import slack_requests
from tests.support import harness as support
from tests.support import waiting
from tests.support.edit_form import allow_edits
from tests.support.harness import (
    APPROVER,
    CHANNEL,
    OUTSIDER,
    REQUESTER,
    SIGNING_SECRET,
    Harness,
)
from tests.support.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
NOTES = {REQUESTER.id: "requester", OUTSIDER.id: "outsider"}
# tools the test policy sends to the approvers role (APPROVER), one of them needing a reason
INVOICE = {"name": "send_invoice", "call_id": "call_inv", "arguments": {"amount_eur": 1200}}
DELETE = {"name": "delete_records", "call_id": "call_del", "arguments": {"table": "leads"}}


@dataclass
class SandboxHarness(Harness):
    """The harness's bot with the sandbox page mounted, as try-out mode serves it."""

    sandbox: page.Sandbox | None = None

    async def start(self) -> SandboxHarness:
        await super().start()
        return self

    def mount(self, app: web.Application) -> None:
        self.sandbox = page.Sandbox(
            standin=self.standin,
            signing_secret=SIGNING_SECRET,
            policy=app[bot_app.LIVE].policy,
            notes=NOTES,
        )
        page.mount(app, self.sandbox)

    # -- the page's side ------------------------------------------------------------------

    async def page_post(
        self, path: str, body: Any, *, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        assert self.session is not None
        async with self.session.post(
            f"{self.base_url}/sandbox/api/{path}", json=body, headers=headers
        ) as response:
            answer = (
                await response.json()
                if response.content_type == "application/json"
                else await response.text()
            )
            return response.status, answer

    async def state(self) -> dict[str, Any]:
        assert self.session is not None
        async with self.session.get(f"{self.base_url}/sandbox/api/state") as response:
            assert response.status == 200
            state: dict[str, Any] = await response.json()
            return state

    async def card(self, approval_id: str) -> dict[str, Any]:
        """The card of ``approval_id`` as the page gets it (waits for it to be posted)."""
        ts = await self.card_ts(approval_id)
        state = await self.state()
        [channel] = [c for c in state["channels"] if c["id"] == CHANNEL]
        [message] = [m for m in channel["messages"] if m["ts"] == ts]
        return dict(message)

    async def page_click(
        self, user: SlackUser, approval_id: str, action: str = "countersign_approve"
    ) -> dict[str, Any]:
        ts = await self.card_ts(approval_id)
        status, answer = await self.page_post(
            "click",
            {
                "user": user.id,
                "channel": CHANNEL,
                "ts": ts,
                "action_id": action,
                "value": approval_id,
            },
        )
        assert status == 200, answer
        assert isinstance(answer, dict)
        return answer

    async def status_of(self, approval_id: str) -> str:
        _, body = await self.call("GET", f"/v1/approvals/{approval_id}")
        return str(body["status"])


@pytest.fixture
async def sandbox(database_url: str) -> AsyncIterator[SandboxHarness]:
    h = await SandboxHarness(database_url=database_url).start()
    yield h
    await h.stop()


def _texts(blocks: list[dict[str, Any]]) -> str:
    return json.dumps(blocks, ensure_ascii=False)


# -- the page and its files --------------------------------------------------------------


async def test_the_page_and_its_files_are_served_with_nothing_from_elsewhere(
    sandbox: SandboxHarness,
) -> None:
    assert sandbox.session is not None
    bodies = {}
    for path, kind in [
        ("/sandbox/", "text/html"),
        ("/sandbox/static/sandbox.js", "text/javascript"),
        ("/sandbox/static/sandbox.css", "text/css"),
        ("/sandbox/static/favicon.svg", "image/svg+xml"),
    ]:
        async with sandbox.session.get(sandbox.base_url + path) as response:
            assert response.status == 200, path
            assert response.content_type == kind
            csp = response.headers["Content-Security-Policy"]
            assert "default-src 'none'" in csp
            assert "script-src 'self'" in csp
            assert response.headers["X-Content-Type-Options"] == "nosniff"
            # an SVG names its XML namespace, which is never fetched
            bodies[path] = (await response.text()).replace('xmlns="http://www.w3.org/2000/svg"', "")
    for path, text in bodies.items():
        # no CDN, no font or image from anywhere: nothing names another origin
        assert not re.search(r"(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}", text), path
        assert "@import" not in text, path
    html = bodies["/sandbox/"]
    assert '<script src="static/sandbox.js"' in html
    assert "<script>" not in html  # nothing inline (the CSP forbids it)
    assert "style=" not in html
    script = bodies["/sandbox/static/sandbox.js"]
    # no HTML sink anywhere: strings only ever become text nodes
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in script, sink

    async with sandbox.session.get(
        sandbox.base_url + "/sandbox", allow_redirects=False
    ) as response:
        assert response.status == 302
        assert response.headers["Location"] == "/sandbox/"
    for missing in ("/sandbox/static/index.html", "/sandbox/static/..%2fpage.py"):
        async with sandbox.session.get(sandbox.base_url + missing) as response:
            assert response.status == 404, missing


async def test_the_state_shows_a_posted_card_and_who_one_can_act_as(
    sandbox: SandboxHarness,
) -> None:
    approval = await sandbox.submit(tool=INVOICE, summary="Invoice ACME")
    card = await sandbox.card(approval["approval_id"])
    kinds = [b["type"] for b in card["blocks"]]
    assert kinds[0] == "header"
    assert {"section", "context", "actions"} <= set(kinds)
    assert approval["approval_id"] in _texts(card["blocks"])
    assert "Invoice ACME" in _texts(card["blocks"])
    assert card["edited"] is False

    state = await sandbox.state()
    people = {p["id"]: p for p in state["people"]}
    assert people[REQUESTER.id]["note"] == "requester"
    assert people[OUTSIDER.id]["note"] == "outsider"
    assert people[OUTSIDER.id]["roles"] == []
    assert "approvers" in people[APPROVER.id]["roles"]
    assert "finance" in people[REQUESTER.id]["roles"]  # through the S0FINANCE user group
    assert state["users"][APPROVER.id] == APPROVER.real_name


async def test_the_event_stream_announces_each_change(sandbox: SandboxHarness) -> None:
    assert sandbox.session is not None
    async with sandbox.session.get(sandbox.base_url + "/sandbox/api/events") as stream:
        assert stream.status == 200
        assert stream.content_type == "text/event-stream"

        async def next_version() -> int:
            while True:
                line = (await asyncio.wait_for(stream.content.readline(), 10)).decode()
                if line.startswith("data: "):
                    return int(line[len("data: ") :])

        first = await next_version()
        approval = await sandbox.submit(tool=INVOICE)
        assert await next_version() > first  # the card was posted
        await sandbox.card_ts(approval["approval_id"])


# -- clicks through /slack/events ----------------------------------------------------------


async def test_the_requesters_click_is_refused_and_the_ephemeral_shows(
    sandbox: SandboxHarness,
) -> None:
    approval_id = (await sandbox.submit(tool=INVOICE))["approval_id"]
    answer = await sandbox.page_click(REQUESTER, approval_id)
    assert answer["status"] == 200  # bolt verified the signature and acked

    async def refused() -> bool:
        state = await sandbox.state()
        return any(e["user"] == REQUESTER.id for e in state["ephemerals"])

    await waiting.until(refused, what="the requester's refusal")
    state = await sandbox.state()
    [ephemeral] = [e for e in state["ephemerals"] if e["user"] == REQUESTER.id]
    assert ephemeral["channel"] == CHANNEL
    assert "did not count" in ephemeral["text"]
    assert "you requested this call" in ephemeral["text"]
    assert state["log"][-1]["kind"] == "block_actions"
    assert state["log"][-1]["status"] == 200

    await sandbox.page_click(OUTSIDER, approval_id)
    await sandbox.wait_ephemeral(OUTSIDER)
    assert "do not hold the role" in sandbox.ephemerals_for(OUTSIDER)[0]
    assert await sandbox.status_of(approval_id) == "pending"
    assert sandbox.receiver.received == []


async def test_a_click_the_bot_does_not_answer_is_a_502_naming_it_and_nothing_settles(
    sandbox: SandboxHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bot's /slack/events cuts the connection (stopping, overloaded): the page gets a 502
    with a reason it can show, never a 500, and the card stays pending."""

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1)
        writer.close()

    server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    monkeypatch.setattr(page, "_bot_url", lambda _request: f"http://127.0.0.1:{port}/slack/events")
    try:
        approval_id = (await sandbox.submit(tool=INVOICE))["approval_id"]
        ts = await sandbox.card_ts(approval_id)
        click = {
            "user": APPROVER.id,
            "channel": CHANNEL,
            "ts": ts,
            "action_id": "countersign_approve",
            "value": approval_id,
        }
        status, answer = await sandbox.page_post("click", click)
    finally:
        server.close()
        await server.wait_closed()
    assert status == 502
    assert answer["error"].startswith("the bot did not answer")
    assert await sandbox.status_of(approval_id) == "pending"


async def test_an_approvers_click_settles_the_card_and_calls_the_agent_back(
    sandbox: SandboxHarness,
) -> None:
    approval_id = (await sandbox.submit(tool=INVOICE))["approval_id"]
    await sandbox.page_click(REQUESTER, approval_id)
    await sandbox.wait_ephemeral(REQUESTER)
    await sandbox.page_click(APPROVER, approval_id)

    [received] = await sandbox.receiver.wait_delivered(1)
    decision = json.loads(received.body)
    assert decision["approval_id"] == approval_id
    assert decision["status"] == "approved"
    assert decision["decided_by"][0]["slack_user_id"] == APPROVER.id

    async def updated() -> bool:
        return bool((await sandbox.card(approval_id))["edited"])

    await waiting.until(updated, what="the card's chat.update")
    card = await sandbox.card(approval_id)
    assert not any(b["type"] == "actions" for b in card["blocks"])  # the buttons are gone
    assert f"<@{APPROVER.id}>" in _texts(card["blocks"])
    assert "Approved" in card["blocks"][0]["text"]["text"]
    # a settled card has no button left to click
    status, answer = await sandbox.page_post(
        "click",
        {
            "user": APPROVER.id,
            "channel": CHANNEL,
            "ts": await sandbox.card_ts(approval_id),
            "action_id": "countersign_approve",
            "value": approval_id,
        },
    )
    assert status == 400
    assert answer == {"error": "no such button there"}


async def test_the_deny_modal_opens_with_its_presets_and_needs_its_reason(
    sandbox: SandboxHarness,
) -> None:
    approval_id = (await sandbox.submit(tool=DELETE))["approval_id"]
    trigger = (await sandbox.page_click(APPROVER, approval_id, "countersign_deny"))["trigger_id"]

    async def modal() -> dict[str, Any] | None:
        state = await sandbox.state()
        return next((m for m in state["modals"] if m["trigger_id"] == trigger), None)

    async def opened() -> bool:
        return await modal() is not None

    await waiting.until(opened, what="the Deny modal")
    shown = await modal()
    assert shown is not None
    assert shown["user"] == APPROVER.id
    assert shown["open"] is True
    view = shown["view"]
    assert view["callback_id"] == "countersign_deny_reason"
    [preset] = [b for b in view["blocks"] if b.get("block_id") == "preset"]
    labels = [o["text"]["text"] for o in preset["element"]["options"]]
    assert labels == ["Amount looks wrong", "Wrong recipient"]
    assert await sandbox.status_of(approval_id) == "pending"  # opening decides nothing

    # the rule needs a reason: the bot answers with the modal's error, the modal stays open
    status, answer = await sandbox.page_post(
        "submit", {"user": APPROVER.id, "trigger_id": trigger, "values": {}}
    )
    assert status == 200
    assert answer["errors"] == {"reason": messages.REASON_REQUIRED}
    shown = await modal()
    assert shown is not None
    assert shown["open"] is True
    # someone else cannot submit the approver's modal
    status, _ = await sandbox.page_post(
        "submit",
        {"user": OUTSIDER.id, "trigger_id": trigger, "values": {"reason": {"reason_input": "x"}}},
    )
    assert status == 400

    status, answer = await sandbox.page_post(
        "submit",
        {
            "user": APPROVER.id,
            "trigger_id": trigger,
            "values": {
                "preset": {"preset_select": "1"},
                "reason": {"reason_input": "that table is the CRM"},
                "not_in_the_view": {"x": "dropped"},
            },
        },
    )
    assert status == 200
    assert answer["errors"] == {}
    [received] = await sandbox.receiver.wait_delivered(1)
    decision = json.loads(received.body)
    assert decision["status"] == "denied"
    assert "Wrong recipient: that table is the CRM" in decision["reason"]
    shown = await modal()
    assert shown is not None
    assert shown["open"] is False

    async def denied_card() -> bool:
        return "Denied" in (await sandbox.card(approval_id))["blocks"][0]["text"]["text"]

    await waiting.until(denied_card, what="the denied card")


async def test_the_app_home_shows_the_queue_and_its_buttons_settle(
    sandbox: SandboxHarness,
) -> None:
    approval_id = (await sandbox.submit(tool=INVOICE))["approval_id"]
    await sandbox.card_ts(approval_id)
    status, answer = await sandbox.page_post("home", {"user": APPROVER.id})
    assert (status, answer) == (200, {"status": 200})

    async def home() -> dict[str, Any] | None:
        view: dict[str, Any] | None = (await sandbox.state())["home"].get(APPROVER.id)
        return view

    async def published() -> bool:
        view = await home()
        return view is not None and approval_id in _texts(view["blocks"])

    await waiting.until(published, what="the App Home")
    status, answer = await sandbox.page_post(
        "click",
        {
            "user": APPROVER.id,
            "surface": "home",
            "action_id": "countersign_approve",
            "value": approval_id,
        },
    )
    assert status == 200, answer
    [received] = await sandbox.receiver.wait_delivered(1)
    assert json.loads(received.body)["status"] == "approved"


# -- what the sandbox cannot be made to do -------------------------------------------------


async def test_the_sandbox_signs_itself_and_the_bot_still_refuses_bad_signatures(
    sandbox: SandboxHarness,
) -> None:
    approval_id = (await sandbox.submit(tool=INVOICE))["approval_id"]
    ts = await sandbox.card_ts(approval_id)
    click = {"channel": CHANNEL, "ts": ts, "action_id": "countersign_approve"}
    other_id = "apr_" + "0" * 24

    # a caller cannot bring its own payload or signature: only the fields are read, and they
    # must name a person of the sandbox and a button that is really on the message
    forged_payload = slack_requests.block_actions(
        signing_secret="not-the-secret", user_id=APPROVER.id, action_id="x", value=other_id
    )
    cases = [
        {**click, "user": "U0NOBODY", "value": approval_id},
        {**click, "user": APPROVER.id, "value": other_id},
        {**click, "user": APPROVER.id, "value": approval_id, "action_id": "countersign_other"},
        {**click, "user": APPROVER.id, "value": approval_id, "ts": "1.000001"},
        {"payload": forged_payload.body, "headers": forged_payload.headers},
    ]
    for body in cases:
        status, _ = await sandbox.page_post("click", body)
        assert status == 400, body
    # not the page: a cross-site form, another origin, a host name that resolves here
    assert sandbox.session is not None
    good = {**click, "user": APPROVER.id, "value": approval_id}
    async with sandbox.session.post(
        sandbox.base_url + "/sandbox/api/click", data={"user": APPROVER.id}
    ) as response:
        assert response.status == 415
    status, _ = await sandbox.page_post("click", good, headers={"Origin": "http://evil.example"})
    assert status == 403
    status, _ = await sandbox.page_post("click", good, headers={"Host": "evil.example:80"})
    assert status == 403
    async with sandbox.session.get(
        sandbox.base_url + "/sandbox/api/state", headers={"Host": "rebound.example"}
    ) as response:
        assert response.status == 403
    assert sandbox.sandbox is not None
    assert sandbox.sandbox.log == []  # nothing was sent

    # the bot's own check is untouched: unsigned, badly signed and stale requests are refused
    signed = slack_requests.block_actions(
        signing_secret=SIGNING_SECRET,
        user_id=APPROVER.id,
        action_id="countersign_approve",
        value=approval_id,
        message_ts=ts,
    )
    wrong = slack_requests.block_actions(
        signing_secret="guessed-secret",
        user_id=APPROVER.id,
        action_id="countersign_approve",
        value=approval_id,
        message_ts=ts,
    )
    stale = slack_requests.block_actions(
        signing_secret=SIGNING_SECRET,
        user_id=APPROVER.id,
        action_id="countersign_approve",
        value=approval_id,
        message_ts=ts,
        timestamp=1_600_000_000,
    )
    unsigned = slack_requests.SignedRequest(
        body=signed.body, headers={"Content-Type": slack_requests.FORM_CONTENT_TYPE}
    )
    tampered = slack_requests.SignedRequest(
        body=signed.body.replace(APPROVER.id, "U0FIN1"), headers=signed.headers
    )
    for request in (wrong, stale, unsigned, tampered):
        assert await sandbox.post_slack(request) == 401
    assert await sandbox.status_of(approval_id) == "pending"

    # the same click through the sandbox counts
    await sandbox.page_click(APPROVER, approval_id)
    await sandbox.receiver.wait_delivered(1)
    assert await sandbox.status_of(approval_id) == "approved"


async def test_the_sandbox_is_absent_when_the_standin_is_not_in_use(harness: Harness) -> None:
    assert harness.session is not None
    for method, path in [
        ("GET", "/sandbox/"),
        ("GET", "/sandbox"),
        ("GET", "/sandbox/static/sandbox.js"),
        ("GET", "/sandbox/api/state"),
        ("GET", "/sandbox/api/events"),
        ("POST", "/sandbox/api/click"),
    ]:
        async with harness.session.request(method, harness.base_url + path, json={}) as response:
            assert response.status in (404, 405), path
            assert response.status == 404 or method == "POST", path


# -- countersign run, as a newcomer starts it ----------------------------------------------


def _env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLACK_", "HOST", "COUNTERSIGN_", "PORT"))
    }
    return {
        **env,
        "COUNTERSIGN_CONFIG": str(ROOT / "countersign.example.yml"),
        "SALES_BOT_TOKEN": "sandbox-test-sales-bot-token",
        "SALES_BOT_SIGNING": "sandbox-test-sales-bot-signing",
        **extra,
    }


@contextlib.asynccontextmanager
async def _countersign_run(env: dict[str, str]) -> AsyncIterator[asyncio.subprocess.Process]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot.cli",
        "run",
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        yield proc
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 30)


async def test_tryout_mode_prints_the_page_a_token_and_a_curl_that_works(
    database_url: str,
) -> None:
    port = free_port()
    env = _env(COUNTERSIGN_SLACK_STANDIN="1", DATABASE_URL=database_url, PORT=str(port))
    async with _countersign_run(env) as proc, aiohttp.ClientSession() as http:
        assert proc.stdout is not None
        lines = [(await asyncio.wait_for(proc.stdout.readline(), 30)).decode()]
        assert f"try-out mode on http://127.0.0.1:{port}" in lines[0]
        for _ in range(4):
            lines.append((await asyncio.wait_for(proc.stdout.readline(), 5)).decode())
        page_url = f"http://127.0.0.1:{port}/sandbox/"
        assert page_url in lines[1]
        assert "sandbox-test-sales-bot-token" in lines[2]
        curl = shlex.split(lines[4])
        assert curl[0] == "curl"

        async with http.get(page_url) as response:
            assert response.status == 200
        # the printed curl, as a shell would run it
        url = next(a for a in curl if a.startswith("http://"))
        headers = dict(curl[i + 1].split(": ", 1) for i, a in enumerate(curl) if a == "-H")
        data = curl[curl.index("-d") + 1]
        async with http.post(url, data=data.encode(), headers=headers) as response:
            assert response.status == 201
            approval = await response.json()

        async def state() -> dict[str, Any]:
            async with http.get(page_url + "api/state") as response:
                found: dict[str, Any] = await response.json()
                return found

        async def card() -> dict[str, Any] | None:
            for channel in (await state())["channels"]:
                for message in channel["messages"]:
                    if approval["approval_id"] in json.dumps(message["blocks"]):
                        return dict(message, channel=channel["id"])
            return None

        async def posted() -> bool:
            return await card() is not None

        await waiting.until(posted, what="the curl's card")
        people = {p["id"]: p for p in (await state())["people"]}
        assert people[page.REQUESTER.id]["note"] == "requester"
        assert people[page.OUTSIDER.id]["roles"] == []
        found = await card()
        assert found is not None
        async with http.post(
            page_url + "api/click",
            json={
                "user": "U0ANA",  # an approver of the example policy
                "channel": found["channel"],
                "ts": found["ts"],
                "action_id": "countersign_approve",
                "value": approval["approval_id"],
            },
        ) as response:
            assert response.status == 200

        async def approved() -> bool:
            async with http.get(
                f"http://127.0.0.1:{port}/v1/approvals/{approval['approval_id']}",
                headers={"Authorization": headers["Authorization"]},
            ) as response:
                return bool((await response.json())["status"] == "approved")

        await waiting.until(approved, what="the approval through the sandbox")


async def test_a_real_token_serves_no_sandbox(database_url: str) -> None:
    standin = SlackStandIn(token="xoxb-a-real-looking-token", channels=["C0REVIEWS"])
    await standin.start()
    port = free_port()
    env = _env(
        SLACK_BOT_TOKEN="xoxb-a-real-looking-token",
        SLACK_SIGNING_SECRET="a-real-looking-secret",
        SLACK_API_URL=standin.base_url,
        DATABASE_URL=database_url,
        HOST="127.0.0.1",
        PORT=str(port),
        # the example policy's passkey rule (docs/step-up.md) needs its sign-in, as in production
        COUNTERSIGN_PUBLIC_URL=f"http://localhost:{port}",
        SLACK_CLIENT_ID="1.2",
        SLACK_CLIENT_SECRET="a-real-looking-client-secret",
    )
    try:
        async with _countersign_run(env), aiohttp.ClientSession() as http:

            async def serving() -> bool:
                with contextlib.suppress(aiohttp.ClientConnectionError):
                    async with http.get(f"http://127.0.0.1:{port}/healthz") as response:
                        return response.status == 200
                return False

            await waiting.until(serving, timeout=30, what="the bot serving")
            for path in ("/sandbox/", "/sandbox/api/state", "/sandbox/static/sandbox.js"):
                async with http.get(f"http://127.0.0.1:{port}{path}") as response:
                    assert response.status == 404, path
    finally:
        await standin.stop()


async def test_edit_and_approve_in_the_page_runs_the_form_it_opens(
    database_url: str, tmp_path: Path
) -> None:
    """The page shows the Edit & approve button of a rule with editable paths, the form the
    bot opens (a number input, pre-filled), and sends what was typed as Slack would."""
    sandbox = SandboxHarness(database_url=database_url, policy_file=tmp_path / "countersign.yml")
    await sandbox.start()
    try:
        await allow_edits(sandbox, "resize_cluster", ["nodes"])
        tool = {"name": "resize_cluster", "call_id": "rc-1", "arguments": {"nodes": 30}}
        approval_id = (await sandbox.submit(tool=tool))["approval_id"]
        card = await sandbox.card(approval_id)
        [actions] = [b for b in card["blocks"] if b["type"] == "actions"]
        assert "Edit & approve" in [e["text"]["text"] for e in actions["elements"]]
        trigger = (await sandbox.page_click(APPROVER, approval_id, "countersign_edit"))[
            "trigger_id"
        ]

        async def form() -> dict[str, Any] | None:
            state = await sandbox.state()
            return next((m for m in state["modals"] if m["trigger_id"] == trigger), None)

        async def opened() -> bool:
            return await form() is not None

        await waiting.until(opened, what="the edit form")
        shown = await form()
        assert shown is not None
        [field] = [b for b in shown["view"]["blocks"] if b.get("block_id") == "edit:nodes"]
        assert field["element"]["type"] == "number_input"
        assert field["element"]["initial_value"] == "30"
        status, answer = await sandbox.page_post(
            "submit",
            {"user": APPROVER.id, "trigger_id": trigger, "values": {"edit:nodes": {"value": "3"}}},
        )
        assert (status, answer["errors"]) == (200, {})
        [received] = await sandbox.receiver.wait_delivered(1)
        decision = json.loads(received.body)
        assert decision["status"] == "approved"
        assert decision["edit"]["arguments"] == {"nodes": 3}
    finally:
        await sandbox.stop()


async def test_approve_and_allow_more_in_the_page_makes_a_grant_later_calls_use(
    database_url: str, tmp_path: Path
) -> None:
    """The page shows Approve & allow more on a rule that allows grants, the form the bot
    opens, and sends the choices as Slack would; the next matching call needs no card."""
    sandbox = SandboxHarness(database_url=database_url, policy_file=tmp_path / "countersign.yml")
    await sandbox.start()
    try:
        data = support.test_policy(sandbox.receiver.port).model_dump(
            mode="json", by_alias=True, exclude_none=True
        )
        grants = {"max_seconds": 3600, "max_uses": 5}
        data["rules"].insert(
            0, {"tool": "resize_cluster", "require": "approvers", "grants": grants}
        )
        sandbox.write_policy(data)
        await sandbox.stop_bot()
        await sandbox.start_bot()
        tool = {"name": "resize_cluster", "call_id": "rc-1", "arguments": {"nodes": 30}}
        approval_id = (await sandbox.submit(tool=tool))["approval_id"]
        card = await sandbox.card(approval_id)
        [actions] = [b for b in card["blocks"] if b["type"] == "actions"]
        assert "Approve & allow more…" in [e["text"]["text"] for e in actions["elements"]]
        trigger = (await sandbox.page_click(APPROVER, approval_id, "countersign_grant"))[
            "trigger_id"
        ]

        async def opened() -> bool:
            state = await sandbox.state()
            return any(m["trigger_id"] == trigger for m in state["modals"])

        await waiting.until(opened, what="the grant form")
        chosen = {
            "scope": {"choice": "session"},
            "seconds": {"choice": "900"},
            "uses": {"choice": "2"},
            "argument:nodes": {"choice": "at_most"},
        }
        status, answer = await sandbox.page_post(
            "submit", {"user": APPROVER.id, "trigger_id": trigger, "values": chosen}
        )
        assert (status, answer["errors"]) == (200, {})
        [received] = await sandbox.receiver.wait_delivered(1)
        assert json.loads(received.body)["status"] == "approved"
        smaller = {"name": "resize_cluster", "call_id": "rc-2", "arguments": {"nodes": 20}}
        later = await sandbox.submit(request_id="rc-2", tool=smaller)
        assert later["status"] == "approved"
        assert later["grant"]["use"] == 1
    finally:
        await sandbox.stop()


async def test_a_rule_that_approves_by_itself_logs_its_line_in_the_page(
    database_url: str, tmp_path: Path
) -> None:
    """The page shows the rule's log channel (the policy names it) and the one line the bot
    posts there for a call the policy approved; no card."""
    sandbox = SandboxHarness(database_url=database_url, policy_file=tmp_path / "countersign.yml")
    await sandbox.start()
    try:
        data = support.test_policy(sandbox.receiver.port).model_dump(
            mode="json", by_alias=True, exclude_none=True
        )
        rule = {"tool": "lookup_*", "decide": "approve", "log_channel": "C0APPROVALLOG"}
        data["rules"].insert(0, rule)
        # (try-out mode makes the channels of the policy it starts with; this one came later)
        sandbox.standin.set_channel("C0APPROVALLOG", name="approvals-log")
        sandbox.write_policy(data)
        await sandbox.stop_bot()
        await sandbox.start_bot()
        tool = {"name": "lookup_account", "call_id": "la-1", "arguments": {"account": "ACME"}}
        approved = await sandbox.submit(tool=tool)
        assert approved["status"] == "approved"

        async def logged() -> list[dict[str, Any]]:
            state = await sandbox.state()
            [log] = [c for c in state["channels"] if c["id"] == "C0APPROVALLOG"]
            return list(log["messages"])

        await waiting.until(lambda: _has_one(logged), what="the log line")
        [line] = await logged()
        assert approved["approval_id"] in json.dumps(line)
        state = await sandbox.state()
        [reviews] = [c for c in state["channels"] if c["id"] == CHANNEL]
        assert reviews["messages"] == []
    finally:
        await sandbox.stop()


async def _has_one(messages: Callable[[], Awaitable[list[dict[str, Any]]]]) -> bool:
    return len(await messages()) == 1
