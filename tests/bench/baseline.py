"""The baseline: the least a service on the same stack must do for the same requests.

A bare aiohttp app on loopback, in the same process and event loop the bot runs in:

* ``POST /null`` reads and parses the JSON body and answers; no database (the HTTP floor);
* ``POST /v1/approvals`` parses the JSON body and does one asyncpg INSERT into a simple table in
  the same PostgreSQL, through a pool of the bot's size;
* ``POST /slack/events`` does what an ack needs at the least: checks Slack's signature and
  timestamp, parses the form and its JSON payload, answers 200.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from urllib.parse import parse_qs

import asyncpg
from aiohttp import web

__all__ = ["Baseline"]

TABLE = "bench_baseline"


class Baseline:
    def __init__(self, pool: asyncpg.Pool, signing_secret: str) -> None:
        self._pool = pool
        self._signing_secret = signing_secret.encode()
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    @classmethod
    async def start(cls, dsn: str, signing_secret: str) -> Baseline:
        pool = await asyncpg.create_pool(dsn, min_size=2, max_size=10)
        async with pool.acquire() as conn:
            await conn.execute(
                f"CREATE TABLE IF NOT EXISTS {TABLE} ("
                " request_id text PRIMARY KEY, body jsonb NOT NULL,"
                " created_at timestamptz NOT NULL DEFAULT now())"
            )
        baseline = cls(pool, signing_secret)
        app = web.Application()
        app.router.add_get("/healthz", baseline._health)
        app.router.add_post("/null", baseline._null)
        app.router.add_post("/v1/approvals", baseline._insert)
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
        await self._pool.close()

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _null(self, request: web.Request) -> web.Response:
        body = json.loads(await request.read())
        return web.json_response({"request_id": body["request_id"]}, status=201)

    async def _insert(self, request: web.Request) -> web.Response:
        raw = await request.read()
        body = json.loads(raw)
        async with self._pool.acquire() as conn:
            await conn.execute(
                f"INSERT INTO {TABLE} (request_id, body) VALUES ($1, $2::jsonb)",
                body["request_id"],
                raw.decode(),
            )
        return web.json_response({"request_id": body["request_id"]}, status=201)

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
