"""Slack's ``response_url`` endpoint, on loopback: what a bot posts there is what Slack shows the
person who ran the command (``response_type: ephemeral``: to them alone)."""

from __future__ import annotations

import json
import secrets
from typing import Any

from aiohttp import web

from tests.support import waiting


class ResponseUrls:
    """Hands out one URL per slash command, as Slack does, and keeps the answers posted to each."""

    def __init__(self) -> None:
        self.answers: dict[str, list[dict[str, Any]]] = {}
        self.base_url = ""
        self._runner: web.AppRunner | None = None

    def url(self, team_id: str = "T0TEAM") -> str:
        """A fresh response_url; its answers are kept under this exact string."""
        url = f"{self.base_url}/commands/{team_id}/{secrets.token_hex(12)}"
        self.answers[url] = []
        return url

    @property
    def posted(self) -> int:
        """How many answers arrived, on any URL."""
        return sum(len(answers) for answers in self.answers.values())

    async def _handle(self, request: web.Request) -> web.Response:
        url = f"{self.base_url}{request.path}"
        if url not in self.answers:
            return web.Response(status=404, text="invalid_url")
        self.answers[url].append(json.loads(await request.read()))
        return web.Response(text="ok")  # Slack's answer to an accepted response

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/commands/{team}/{key}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.base_url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def wait_answer(self, url: str, timeout: float = 10.0) -> dict[str, Any]:
        """The one answer posted to ``url`` (fails if none arrives, or more than one)."""
        await waiting.until(
            lambda: bool(self.answers[url]), timeout=timeout, what=f"an answer on {url}"
        )
        [answer] = self.answers[url]
        return answer
