"""The bot as real processes (``countersign run``) around the in-process parts of the test
harness: the Slack stand-in, the agent receiver and the agent's and approvers' HTTP clients.

:class:`FaultHarness` is :class:`tests.support.harness.Harness` whose bot is a subprocess (or
several, the replicas), with every answer a client got recorded, so a scenario can count 5xx
answers and requests that were cut.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from tests import slack_requests
from tests.support import waiting
from tests.support.agent_receiver import AgentReceiver
from tests.support.cli import ROOT
from tests.support.harness import AGENT_TOKEN, UNPACED, Harness

__all__ = ["Answer", "BotProcess", "FaultHarness", "TimedReceiver"]

# what a real deployment does not carry into the bot's environment from the test's
_NOT_INHERITED = ("SLACK_", "COUNTERSIGN_", "HOST", "PORT", "DATABASE_URL", "LOG_LEVEL")
_PROXIES = ("http_proxy", "https_proxy", "all_proxy")


def _base_env() -> dict[str, str]:
    return {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(_NOT_INHERITED) and name.lower() not in _PROXIES
    }


class BotProcess:
    """One ``countersign run`` process on a fixed loopback port; stderr goes to a file that
    failure messages quote."""

    def __init__(self, *, name: str, env: Mapping[str, str], port: int, log_dir: Path) -> None:
        self.name = name
        self.env = dict(env)
        self.port = port
        self.log_path = log_dir / f"{name}.stderr.log"
        self.url = f"http://127.0.0.1:{port}"
        self.starts = 0
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def log_tail(self, chars: int = 3000) -> str:
        if not self.log_path.exists():
            return ""
        return self.log_path.read_text("utf-8", "replace")[-chars:]

    def log_lines(self) -> list[str]:
        if not self.log_path.exists():
            return []
        return self.log_path.read_text("utf-8", "replace").splitlines()

    async def start(self, session: aiohttp.ClientSession, timeout: float = 40.0) -> None:
        """Start and wait until ``/healthz`` and then ``/readyz`` answer 200."""
        assert not self.alive(), f"{self.name} is running already"
        self.starts += 1
        with self.log_path.open("ab") as log:
            log.write(f"--- start {self.starts} ---\n".encode())
            log.flush()
            self._process = subprocess.Popen(  # noqa: ASYNC220 (returns at once; exits are polled)
                [sys.executable, "-m", "bot.cli", "run"],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=log,
            )
        await self.wait_ready(session, timeout)

    async def _answers(self, session: aiohttp.ClientSession, path: str) -> bool:
        if not self.alive():
            raise AssertionError(f"{self.name} exited during start:\n{self.log_tail()}")
        try:
            async with session.get(
                self.url + path, timeout=aiohttp.ClientTimeout(total=3)
            ) as response:
                return response.status == 200
        except (aiohttp.ClientError, TimeoutError):
            return False

    async def wait_ready(self, session: aiohttp.ClientSession, timeout: float = 40.0) -> None:
        try:
            await waiting.until(
                lambda: self._answers(session, "/healthz"),
                timeout=timeout,
                interval=0.1,
                what=f"{self.name} /healthz",
            )
            await waiting.until(
                lambda: self._answers(session, "/readyz"),
                timeout=timeout,
                interval=0.1,
                what=f"{self.name} /readyz",
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.name} stderr:\n{self.log_tail()}") from None

    async def _exited(self, timeout: float) -> int:
        process = self._process
        assert process is not None
        await waiting.until(
            lambda: process.poll() is not None,
            timeout=timeout,
            interval=0.05,
            what=f"{self.name} to exit",
        )
        code = process.wait()
        self._process = None
        return code

    async def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM; the exit status once the process is gone."""
        if self._process is None:
            return 0
        self._process.send_signal(signal.SIGTERM)
        try:
            return await self._exited(timeout)
        except AssertionError:
            self._process.kill()
            self._process.wait()
            self._process = None
            raise AssertionError(
                f"{self.name} did not exit within {timeout} s of SIGTERM:\n{self.log_tail()}"
            ) from None

    async def kill(self) -> None:
        """``kill -9``: no shutdown of any kind."""
        if self._process is None:
            return
        self._process.send_signal(signal.SIGKILL)
        await self._exited(10.0)

    def forget(self) -> None:
        """Teardown of a failed test: the process goes, whatever state it is in."""
        if self._process is not None:
            with contextlib.suppress(ProcessLookupError):
                self._process.kill()
            self._process.wait()
            self._process = None


class TimedReceiver(AgentReceiver):
    """The agent receiver, also noting when each callback arrived (``time.monotonic()``)."""

    def __init__(self) -> None:
        super().__init__()
        self.arrived_at: list[float] = []
        self.in_flight = 0  # callbacks being answered right now (with ``latency``)

    async def _handle(self, request: web.Request) -> web.Response:
        self.in_flight += 1
        try:
            response = await super()._handle(request)
        finally:
            self.in_flight -= 1
        self.arrived_at.append(time.monotonic())
        return response

    def last_delivered_at(self) -> float | None:
        times = [
            t for r, t in zip(self.received, self.arrived_at, strict=False) if r.answered == 200
        ]
        return max(times) if times else None


@dataclass(frozen=True)
class Answer:
    """One request a client made to a bot: its status (0: no answer) and how it failed."""

    kind: str  # "api" or "slack"
    status: int
    retry_after: str | None = None
    failure: str | None = None  # "refused" (no connection) or "cut" (sent, no answer)
    at: float = 0.0


@dataclass
class FaultHarness(Harness):
    """The harness with the bot as ``countersign run`` subprocesses (replica 0 first)."""

    log_dir: Path = field(default_factory=lambda: Path("."))
    extra_env: dict[str, str] = field(default_factory=dict)
    paced: bool = False
    bots: list[BotProcess] = field(default_factory=list)
    answers: list[Answer] = field(default_factory=list)

    def bot_env(self, port: int) -> dict[str, str]:
        pacing = (
            {} if self.paced else {f"COUNTERSIGN_{k.upper()}": str(v) for k, v in UNPACED.items()}
        )
        return {
            **_base_env(),
            **self.env(),
            "HOST": "127.0.0.1",
            "PORT": str(port),
            "LOG_LEVEL": "WARNING",
            **pacing,
            **self.extra_env,
        }

    async def add_replica(self) -> BotProcess:
        from tests.support.ports import free_port

        port = free_port()
        bot = BotProcess(
            name=f"replica{len(self.bots)}",
            env=self.bot_env(port),
            port=port,
            log_dir=self.log_dir,
        )
        self.bots.append(bot)
        assert self.session is not None
        await bot.start(self.session)
        return bot

    async def restart(self, bot: BotProcess) -> None:
        """Start ``bot`` again on its port (after a kill or a stop)."""
        assert self.session is not None
        await bot.start(self.session)

    async def start_bot(self, *, workers: bool = True, same_port: bool = False) -> None:
        if self.bots and same_port:
            assert self.session is not None
            await self.bots[0].start(self.session)
        else:
            await self.add_replica()
        self.base_url = self.bots[0].url

    async def stop_bot(self) -> None:
        for bot in self.bots:
            await bot.terminate()

    async def stop(self) -> None:
        try:
            await super().stop()
        finally:
            for bot in self.bots:
                bot.forget()

    # -- every answer recorded ------------------------------------------------------------

    def _record(self, kind: str, status: int, headers: Mapping[str, str] | None = None) -> None:
        retry_after = headers.get("Retry-After") if headers is not None else None
        self.answers.append(Answer(kind, status, retry_after, at=time.monotonic()))

    def _failed(self, kind: str, exc: BaseException) -> None:
        refused = isinstance(exc, aiohttp.ClientConnectorError)
        failure = "refused" if refused else "cut"
        self.answers.append(Answer(kind, 0, failure=failure, at=time.monotonic()))

    async def call(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        data: bytes | None = None,
        token: str | None = AGENT_TOKEN,
        headers: Mapping[str, str] | None = None,
        base_url: str | None = None,
    ) -> tuple[int, Any]:
        """As the harness calls the agent API, plus ``base_url`` (a replica); no answer at all
        (refused, cut) is status 0 with the error's text."""
        assert self.session is not None
        # a connection per request: a request cut at shutdown is one the server had, never a
        # pooled keep-alive connection the server closed as idle just as it was reused
        all_headers = {"Connection": "close", **(headers or {})}
        if token is not None:
            all_headers["Authorization"] = f"Bearer {token}"
        try:
            async with self.session.request(
                method,
                (base_url or self.base_url) + path,
                json=json_body,
                data=data,
                headers=all_headers,
                timeout=aiohttp.ClientTimeout(total=30),
            ) as response:
                body: Any = (
                    await response.json()
                    if response.content_type == "application/json"
                    else await response.text()
                )
                self._record("api", response.status, response.headers)
                return response.status, body
        except (aiohttp.ClientError, TimeoutError) as exc:
            self._failed("api", exc)
            return 0, f"{type(exc).__name__}: {exc}"

    async def post_slack_answer(
        self, request: slack_requests.SignedRequest, *, base_url: str | None = None
    ) -> tuple[int, str]:
        assert self.session is not None
        try:
            async with self.session.post(
                (base_url or self.base_url) + "/slack/events",
                data=request.body.encode(),
                headers={"Connection": "close", **request.headers},
                timeout=aiohttp.ClientTimeout(total=30),
            ) as response:
                text = await response.text()
                self._record("slack", response.status, response.headers)
                return response.status, text
        except (aiohttp.ClientError, TimeoutError) as exc:
            self._failed("slack", exc)
            return 0, f"{type(exc).__name__}: {exc}"

    def statuses(self) -> Counter[int]:
        return Counter(a.status for a in self.answers)

    def server_errors(self) -> list[Answer]:
        """5xx answers, but a 503 with ``Retry-After`` (the "try again" the spec asks for
        while the database is away) is not one of them."""
        return [
            a for a in self.answers if a.status >= 500 and not (a.status == 503 and a.retry_after)
        ]

    async def wait_until(self, check: Any, *, timeout: float, what: str) -> None:
        """``waiting.until`` whose failure message carries each bot's log tail."""
        try:
            await waiting.until(check, timeout=timeout, interval=0.05, what=what)
        except AssertionError as exc:
            logs = "\n".join(f"--- {b.name} ---\n{b.log_tail(2000)}" for b in self.bots)
            raise AssertionError(f"{exc}\n{logs}") from None

    async def sleep_through(self, seconds: float) -> None:
        """The length of an injected fault (never an assertion): meanwhile the test's servers
        keep serving on this loop."""
        await asyncio.sleep(seconds)
