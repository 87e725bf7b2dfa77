"""The baseline: the least a service on the same stack must do for the same requests.

A bare aiohttp app on loopback, in the same process and event loop the bot runs in:

* ``POST /null`` reads and parses the JSON body and answers; no database (the HTTP floor);
* ``POST /v1/approvals`` parses the JSON body and does one asyncpg INSERT into a simple table in
  the same PostgreSQL, through a pool of the bot's size;
* ``POST /v1/approvals/carded`` does the same, then, after answering, posts one card to the
  Slack stand-in with the bot's own Web API client (slack_sdk, :func:`bot.app.slack_client`)
  and records its ts with one UPDATE: the same I/O the bot's relay does per approval, with no
  durability around it (a card lost with the process is not posted again). The card is
  :class:`Card`: the text, blocks and metadata of the card Countersign posts for the bench's
  request, rendered once before the runs, so that both send Slack the same bytes and only
  Countersign pays for rendering them (the bytes cost the client that encodes them and the
  stand-in that parses them, both on this machine);
* ``POST /slack/events`` does what an ack needs at the least: checks Slack's signature and
  timestamp, parses the form and its JSON payload, answers 200.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

import aiohttp
import asyncpg
from aiohttp import web
from slack_sdk.web.async_client import AsyncWebClient

from bot import app as bot_app

__all__ = ["Baseline", "Card"]

TABLE = "bench_baseline"


@dataclass(frozen=True)
class Card:
    """What the baseline posts for every request: a message's fallback text, blocks and
    metadata (its ``event_payload`` gets the request's id, as Countersign's gets the
    approval's)."""

    text: str
    blocks: list[dict[str, Any]]
    event_type: str


class Baseline:
    def __init__(
        self,
        pool: asyncpg.Pool,
        signing_secret: str,
        session: aiohttp.ClientSession,
        slack: AsyncWebClient,
        channel: str,
        card: Card,
    ) -> None:
        self._pool = pool
        self._card = card
        self._signing_secret = signing_secret.encode()
        self._session = session
        self._slack = slack
        self._channel = channel
        self._posting: set[asyncio.Task[None]] = set()
        self._runner: web.AppRunner | None = None
        self.base_url = ""
        self.failed_posts = 0

    @classmethod
    async def start(
        cls,
        dsn: str,
        signing_secret: str,
        *,
        slack_url: str,
        slack_token: str,
        channel: str,
        card: Card,
    ) -> Baseline:
        pool = await asyncpg.create_pool(dsn, min_size=2, max_size=10)
        async with pool.acquire() as conn:
            await conn.execute(
                f"CREATE TABLE IF NOT EXISTS {TABLE} ("
                " request_id text PRIMARY KEY, body jsonb NOT NULL, card_ts text,"
                " created_at timestamptz NOT NULL DEFAULT now())"
            )
        session = aiohttp.ClientSession()
        slack = bot_app.slack_client(slack_token, slack_url, session, paced=True)
        baseline = cls(pool, signing_secret, session, slack, channel, card)
        app = web.Application()
        app.router.add_get("/healthz", baseline._health)
        app.router.add_post("/null", baseline._null)
        app.router.add_post("/v1/approvals", baseline._insert)
        app.router.add_post("/v1/approvals/carded", baseline._insert_carded)
        app.router.add_post("/slack/events", baseline._ack)
        baseline._runner = web.AppRunner(app, access_log=None)
        await baseline._runner.setup()
        await web.TCPSite(baseline._runner, "127.0.0.1", 0).start()
        baseline.base_url = f"http://127.0.0.1:{baseline._runner.addresses[0][1]}"
        return baseline

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self.drain()
        await self._session.close()
        await self._pool.close()

    async def drain(self) -> float:
        """Wait until every card asked for so far is posted; returns the seconds it took."""
        started = time.perf_counter()
        while self._posting:
            await asyncio.wait(set(self._posting))
        return time.perf_counter() - started

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _null(self, request: web.Request) -> web.Response:
        body = json.loads(await request.read())
        return web.json_response({"request_id": body["request_id"]}, status=201)

    async def _insert(self, request: web.Request) -> web.Response:
        body = await self._store(request)
        return web.json_response({"request_id": body["request_id"]}, status=201)

    async def _store(self, request: web.Request) -> dict[str, Any]:
        raw = await request.read()
        body: dict[str, Any] = json.loads(raw)
        async with self._pool.acquire() as conn:
            await conn.execute(
                f"INSERT INTO {TABLE} (request_id, body) VALUES ($1, $2::jsonb)",
                body["request_id"],
                raw.decode(),
            )
        return body

    async def _insert_carded(self, request: web.Request) -> web.Response:
        body = await self._store(request)
        task = asyncio.create_task(self._post_card(body))
        self._posting.add(task)
        task.add_done_callback(self._posting.discard)
        return web.json_response({"request_id": body["request_id"]}, status=201)

    async def _post_card(self, body: dict[str, Any]) -> None:
        card = self._card
        metadata = {"event_type": card.event_type, "event_payload": {"id": body["request_id"]}}
        try:
            posted = await self._slack.chat_postMessage(
                channel=self._channel, text=card.text, blocks=card.blocks, metadata=metadata
            )
            async with self._pool.acquire() as conn:
                await conn.execute(
                    f"UPDATE {TABLE} SET card_ts = $2 WHERE request_id = $1",
                    body["request_id"],
                    posted["ts"],
                )
        except Exception:  # counted, not raised: a benchmark's figures say what went wrong
            self.failed_posts += 1

    async def _ack(self, request: web.Request) -> web.Response:
        raw = await request.read()
        timestamp = request.headers.get("X-Slack-Request-Timestamp", "0")
        if abs(time.time() - int(timestamp)) > 300:
            return web.Response(status=401)
        expected = (
            "v0="
            + hmac.new(
                self._signing_secret, f"v0:{timestamp}:".encode() + raw, hashlib.sha256
            ).hexdigest()
        )
        if not hmac.compare_digest(expected, request.headers.get("X-Slack-Signature", "")):
            return web.Response(status=401)
        payload = json.loads(parse_qs(raw.decode())["payload"][0])
        if payload.get("type") != "block_actions":
            return web.Response(status=400)
        return web.Response(status=200)
