"""A real agent-side HTTP receiver on loopback that records the callbacks Countersign sends."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from dataclasses import dataclass

from aiohttp import web

from tests.support import waiting


@dataclass(frozen=True)
class Received:
    body: bytes
    signature: str
    idempotency_key: str
    answered: int


def verify(secret: str, body: bytes, header: str) -> bool:
    """The check an agent does on ``Countersign-Signature``."""
    fields = dict(part.split("=", 1) for part in header.split(","))
    expected = hmac.new(secret.encode(), f"{fields['t']}.".encode() + body, hashlib.sha256)
    return hmac.compare_digest(expected.hexdigest(), fields["v1"])


class AgentReceiver:
    def __init__(self) -> None:
        self.received: list[Received] = []
        self.answers: list[int] = []  # statuses to answer before 200, first first
        self.retry_after: str | None = None
        self.latency = 0.0  # seconds before answering (a slow agent)
        self.port = 0
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/approvals"

    @property
    def delivered(self) -> list[Received]:
        return [r for r in self.received if r.answered == 200]

    async def _handle(self, request: web.Request) -> web.Response:
        if self.latency:
            await asyncio.sleep(self.latency)
        status = self.answers.pop(0) if self.answers else 200
        self.received.append(
            Received(
                body=await request.read(),
                signature=request.headers.get("Countersign-Signature", ""),
                idempotency_key=request.headers.get("Idempotency-Key", ""),
                answered=status,
            )
        )
        headers = {"Retry-After": self.retry_after} if self.retry_after and status != 200 else None
        return web.Response(status=status, headers=headers)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/approvals", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True)
        await site.start()
        if self.port == 0:
            self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        """The agent goes down: connections to its port are refused until ``start``."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def wait_delivered(self, count: int = 1, timeout: float = 10.0) -> list[Received]:
        await waiting.until(
            lambda: len(self.delivered) >= count, timeout=timeout, what=f"{count} callbacks"
        )
        return self.delivered
